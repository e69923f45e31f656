//===- AttentionBackwardTemplate.cpp - attention backward on Hopper ---------===//
//
// dQ, dK and dV of O = softmax(scale * Q K^T + mask) V from dO, O and the
// forward's LSE, on sm_90a, in kernels that each own what they write (no
// atomics; what is reduced across programs is added in a fixed order: the
// results are bitwise repeatable), or with `fused` in one dK/dV kernel that
// also adds dQ's parts into f32 sums, in any order or in a fixed one
// (below). With P = exp(scale * Q K^T -
// LSE) (the probabilities, masked entries 0), D = rowsum(dO * O) and
// dS = P * (dO V^T - D):
//   dQ = scale * dS K,   dK = scale * dS^T Q,   dV = P^T dO.
//
// Kernel 1, dQ (one program per tile of bm query rows of one head, as the
// forward): each consumer warpgroup of 64 rows first computes D of its rows
// from dO and O, and writes D and LSE * log2(e) to the workspace (+inf past
// the sequence, so that padded rows get P = 0); then, tile by tile of bn
// keys, S = Q K^T and dP = dO V^T on the tensor cores (K and V from TMA
// rings, Q and dO loaded once), P and dS in registers, dQ += dS K with dS
// from registers (tile.dot_reg).
//
// Kernel 2, dK and dV (one program per tile of 64 * consumers keys of one KV
// head): K and V are loaded once; every query head of the KV head's group
// and every tile of kv_bm query rows that can see the program's keys stream
// through TMA rings of Q and dO. Each consumer warpgroup owns 64 keys and
// works on the transposed products, so that what it accumulates has its keys
// as rows: S^T = K Q^T and dP^T = V dO^T (shared memory), P^T from S^T and
// the workspace's LSE of each column (a #tile.slice of the columns), then
// dV += P^T dO and dK += dS^T Q with P^T and dS^T from registers (with
// qsplit, from shared memory: below). Where the
// KV heads' tiles are too few to keep the GPU busy (one KV head of
// Llama-3.1-70B at TP8: 64), the group's query heads are split over
// `split` programs per tile (a launch argument, attention::backwardHeadSplit),
// each writing its part's f32 sums to the workspace.
//
// Kernel 3, with a split only: dK and dV as the sum of the parts, added in
// order.
//
// Fused (config `fused`; tuned at head dims 64 and 128, where it builds
// clean, and adding in order at 128; the default at head dim 128 with
// enough programs for two consumers where the spec says deterministic = 0):
// a first kernel writes the workspace's LSE and D and zeroes f32 sums of
// dQ (and the words after them: the flags and the tile counter below); the
// dK/dV kernel stores each step's dS^T into a ring
// (tile.store_ring), and one step later, once every consumer's is in,
// computes its columns of dS K and adds them into the sums through shared
// memory with TMA reductions (tile.tma_store {reduce}); a last kernel
// writes dQ = scale * sums. With `dqfrag` the part goes into shared memory
// in its registers' order (16-byte stores without a swizzle's arithmetic,
// tile.store_ring {fragments}) and into the sums, laid out in that order,
// by one bulk copy (tile.bulk_reduce), as FlashAttention-3 adds its dQ; the
// last kernel reads it back so (tile.load_fragments): 2-4 % less time on the
// H100 (bench/NOTES.md b22), the default but where the additions come in
// order without a causal mask (4-5 % more there). Head dim 64 with one
// consumer, 128 with two. With `persist` (adding in any order) the dK/dV
// kernel has at most one program a multiprocessor, and no more than the
// call allows, each taking its share of the key tiles in turn; with `lpt`
// too (under a causal mask) the tiles longest first across every head;
// with `take` each program takes its next tile from a counter at run time;
// with `lpt_heads` too, the tiles longest first within groups of that many
// units (KV heads, or parts of a split group), the groups in turn.
// Together the default at head dim 128 where the spec says deterministic =
// 0 (lpt with at most four rounds of tiles, bench/NOTES.md b25, and all
// heads' Q and dO of 64 MiB at most, b38; take under
// a causal mask with 8192 queries or more, b27, and on packed sequences
// for every mask and length, b33; lpt_heads = 4 with take where four
// units' Q and dO take 16 MiB or less, b28; on packed sequences lpt
// only without groups, a sequence's key tiles counted from its own last
// one, b38; from 4096 to 8192 queries under a causal mask lpt with take,
// across every unit or in groups of four, where the share fixed in advance
// would be uneven, dkvShareExcess, b38, b39; there in groups of four up
// to 128 MiB a group, b40, b41).
// The additions come in any order (not bitwise repeatable) where the spec
// says deterministic = 0: at head dim 128 on the H100 against the two
// kernels 12-14 % less time at 16384 keys causal and at 4 x 2048 keys,
// 3-7 % at 8192 causal, 1-2 % at one KV head, 1 % more at 4096 causal
// (bench/NOTES.md b15; computed in its own step, b5, b10, b13, it was
// slower at most of them). Else in a fixed order: the programs run the
// last key tiles first, and a helper thread beside the producer takes
// the consumers' parts, waits on a flag per query tile of a head
// (tile.flag_wait) until the programs before its turn there have added
// theirs (under a causal mask the key tiles after its own; without one,
// where each program walks the query tiles from its own place, those that
// came to the tile before it), adds them, and sets the flag once the
// additions are whole: the default at head dim 128 with 2048 programs or
// more, under a causal mask only with as many KV heads as query heads,
// without one from 1024 where the walk rotates (on the H100, against the
// two kernels, causal: 5-9 % less time at 8192 and 16384 keys, 4 % more
// at 4096, bench/NOTES.md b20; even at B8 H32 S2048, b29; GQA 2-4 % more
// at 2048 programs, 8 % more at one KV head, b22; without a mask, walking
// from the first tile: 4-13 % less at 2048 programs, GQA 8-10 % less,
// 5-22 % more at 1024 and fewer, b21, b22; rotated 2-13 % less than that,
// b23; 1.8 x the time at head dim 64 with one consumer, b20).
//
// Masks: the dQ kernel masks as the forward does (keys past the sequence,
// the causal diagonal); the dK/dV kernel masks the causal diagonal only:
// queries past the sequence have LSE = +inf in the workspace (P = 0), and
// keys past it are never stored. Packed sequences (THD): every kernel
// reads its sequence's offsets, loads at its rows (TMA rows past it are the
// next sequence's: P = 0 there) and stores through views of them; the
// workspace and the parts' sums keep BSHD's [b, rows] shape. Fused, dQ's
// f32 sums are [totalQ + 64 b, hq * d], a sequence's rows from its first
// row in Q plus 64 a sequence before it, so that its query tiles lie in
// rows of its own; its dK/dV programs wholly past its keys take no step
// (persistent: their K and V are not loaded; taken from the counter, the
// producer passes over them), and those whose keys reach past them mask
// the keys past (-inf in S^T:
// TMA loads the next sequence's keys there, whose dS K would reach dQ).
// Adding in order, a query tile's turns count its own sequence's key tiles.
//
// Below sm_90a (dqSm80, dkvSm80; every head dim): the same kernels,
// programs and masks without warp specialization or asynchronous products:
// every thread copies its share of the tiles into cp.async rings, the
// products run on mma.sync, the dK/dV kernel reads the columns' LSE and D
// from the workspace in global memory, and holds dK and dV by panels of 64
// columns. At head dim 256 (dsplit) the two warpgroups of both kernels
// take the same rows (a dQ program's 64 queries, a dK/dV program's 64
// keys) and half the columns of dQ, dK and dV each.
//
// Tunables: consumers (bm = the dK/dV kernel's keys = 64 per consumer), bn
// (keys per step of the dQ kernel), kv_bm (queries per step of the dK/dV
// kernel), stages (of every ring), overlap (within a warpgroup: a step's
// two score products in flight together; dV's and dK's products run
// together while nothing waits between them), sfirst (the dQ kernel's dP
// product started once S's is done: only so does ptxas run P's
// exponentials under it), kvsfirst (the same in the dK/dV kernel off the
// causal diagonal, with dV's product started behind dP^T's: not measured
// yet), fused (above), dsplit (head dim 256, where a
// warpgroup cannot hold dK and dV of 64 keys: the dK/dV kernel's two
// consumers take the same 64 keys, each holding half of the columns and
// computing the step's S^T and dP^T itself), qsplit (with dsplit, the
// default on sm_90a: each consumer computes S^T and dP^T for half of a
// step's 64 queries, and the two pass P^T and dS^T to each other through
// shared memory, where dV's and dK's products read them; 18 % less time
// than dsplit alone, bench/NOTES.md b17), persist and lpt (above: the
// tile scheduler's order).
//
//===----------------------------------------------------------------------===//
#include "compiler/EmbeddedSources.h"
#include "compiler/templates/Kernel.h"
#include "compiler/templates/Template.h"
#include "dialects/Tile/TileDialect.h"
#include "ops/attention/AttentionDecl.h"
#include "ops/attention/AttentionOrder.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;
namespace tt = tilejit::tile;

namespace tilejit {
namespace {

llvm::Error configError(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

/// Fused: stages of the dS^T ring. A consumer's step i stores dS^T(i) once
/// every consumer stored dS^T(i - 1) (it waits for that to compute dQ's
/// part of step i - 1), so no consumer still reads dS^T(i - 3) for its part
/// of step i - 3: three stages are enough.
constexpr int64_t kDsStages = 3;

struct Shape {
  int64_t consumers, bn, kvBm, stages;
  bool overlap, fused, dsplit, sfirst, kvsfirst, qsplit, dqfrag, persist, lpt, take;
  /// lpt's groups: 0, every (sequence, KV head, part) at once; else this
  /// many at a time.
  int64_t lptHeads;
  explicit Shape(const TileConfig &c)
      : consumers(c.get("consumers")), bn(c.get("bn")), kvBm(c.get("kv_bm")),
        stages(c.get("stages")), overlap(c.has("overlap") && c.get("overlap") != 0),
        fused(c.has("fused") && c.get("fused") != 0),
        dsplit(c.has("dsplit") && c.get("dsplit") != 0),
        sfirst(c.has("sfirst") && c.get("sfirst") != 0),
        kvsfirst(c.has("kvsfirst") && c.get("kvsfirst") != 0),
        qsplit(c.has("qsplit") && c.get("qsplit") != 0),
        dqfrag(c.has("dqfrag") && c.get("dqfrag") != 0),
        persist(c.has("persist") && c.get("persist") != 0), lpt(c.has("lpt") && c.get("lpt") != 0),
        take(c.has("take") && c.get("take") != 0),
        lptHeads(c.has("lpt_heads") ? c.get("lpt_heads") : 0) {}
  int64_t bm() const { return 64 * consumers; }
  /// The dK/dV kernel's keys per program: 64 per consumer, or 64 shared by
  /// the consumers with `dsplit`.
  int64_t dkvKeys() const { return dsplit ? 64 : bm(); }
  /// The ordered fused kernel's rotated walk without a mask (the kernel's
  /// comment at `rotated()`): query tiles per key tile, and the most key
  /// tiles a head may have for it (half the multiprocessors); whether it
  /// applies to `sq` queries and `sk` keys.
  int64_t walkRatio() const { return dkvKeys() / kvBm; }
  static int64_t maxRotatedKeyTiles(const Target &t) { return t.smCount() / 2; }
  bool rotates(int64_t sq, int64_t sk, const Target &t) const {
    int64_t keyTiles = (sk + dkvKeys() - 1) / dkvKeys();
    return (sq + kvBm - 1) / kvBm == walkRatio() * keyTiles && keyTiles <= maxRotatedKeyTiles(t);
  }
  /// The columns of dK and dV each consumer holds.
  int64_t dkvCols(int64_t d) const { return dsplit ? d / consumers : d; }
  /// Query rows of a dQ program: 64 per consumer, or below sm_90a (no
  /// `wgmma`) with dsplit 64 whose columns of dQ the consumers split.
  int64_t dqRows(bool wgmma) const { return dsplit && !wgmma ? 64 : bm(); }
  /// Fused: the columns of dQ each consumer computes.
  int64_t dqCols(int64_t d) const { return d / consumers; }
  /// Shared memory of the dQ kernel: Q and dO tiles, the K and V rings.
  int64_t dqSmem(int64_t d, int64_t e) const {
    return (2 * bm() + 2 * stages * bn) * d * e + 8 * (4 * stages + 2) + 3 * 1024;
  }
  /// Of the dK/dV kernel: K and V tiles, the Q and dO rings, the LSE and
  /// D rings (8 f32 rows each); fused, kDsStages stages of dS^T and their
  /// barriers, and each consumer's f32 part of dQ on its way out (persist:
  /// and the barrier for K and V free); qsplit, a step's P^T and dS^T and
  /// two barriers.
  int64_t dkvSmem(int64_t d, int64_t e) const {
    int64_t ds = fused ? kDsStages * bm() * kvBm * e + 8 * kDsStages +
                             consumers * kvBm * dqCols(d) * 4 + (persist ? 8 : 0)
                       : 0;
    if (qsplit)
      ds = 2 * dkvKeys() * kvBm * e + 2 * 8;
    return (2 * dkvKeys() + 2 * stages * kvBm) * d * e + 2 * stages * 8 * kvBm * 4 + ds +
           8 * (4 * stages + 2) + (fused || qsplit ? 4 : 3) * 1024;
  }
};

/// The dK/dV kernel's programs (tiles) at 128 keys each, counting each part
/// of a group's query heads split over them (backwardHeadSplit): what the
/// defaults weigh.
int64_t dkvPrograms(const attention::Params &p) {
  return (p.sk + 127) / 128 * p.b * p.hkv * attention::backwardHeadSplit(p.b, p.hq, p.hkv, p.sk);
}

/// lpt_heads' default group (units: a sequence's KV head, or one part of
/// its query heads where they are split) and the most bytes of Q and dO a
/// group may read for it to be the default (bench/NOTES.md b28).
constexpr int64_t kLptGroup = 4;
constexpr int64_t kLptGroupBytes = 16 << 20;
/// The most bytes of Q and dO that lpt's order across every unit may read
/// for it to be the default (bench/NOTES.md b38).
constexpr int64_t kLptOrderBytes = 64 << 20;
/// The most bytes of Q and dO a group of lpt_heads' default may read where
/// the share fixed in advance would be uneven, from 4096 to 8192 queries:
/// the most measured (bench/NOTES.md b40, b41).
constexpr int64_t kUnevenGroupBytes = 128 << 20;

/// The bytes of Q and dO that `units` units of lpt's order read.
int64_t lptGroupBytes(const attention::Params &p, int64_t units) {
  int64_t split = attention::backwardHeadSplit(p.b, p.hq, p.hkv, p.sk);
  int64_t headsPerUnit = std::max<int64_t>(1, p.hq / p.hkv / split);
  return units * headsPerUnit * p.sq * p.d * 2 * dtypeBytes(p.dt);
}

/// Query rows per sequence in the workspace: a multiple of 128, so that
/// every tile of either kernel lies inside it.
constexpr int64_t kWorkspaceRows = attention::kBackwardWorkspaceRows;

} // namespace

namespace attention {
DkvPlace placeDkvTile(KernelMath &km, const DkvOrder &o, Value pid, Value tiles, Value nTiles,
                      Value split) {
  OpBuilder &b = km.b;
  Location loc = km.loc;
  Value perPart = arith::DivUIOp::create(b, loc, tiles, split);
  Value part = arith::DivUIOp::create(b, loc, pid, perPart);
  Value inPart = arith::RemUIOp::create(b, loc, pid, perPart);
  Value nTile = arith::RemUIOp::create(b, loc, inPart, nTiles);
  // (lpt: tile `pid` the nTile-th of every part and sequence's KV head,
  // those of one nTile in the order above; lpt_heads: so within groups of
  // that many units (part, sequence's KV head) in the same order.)
  Value bkvLpt;
  if (o.lpt) {
    Value kvs = arith::DivUIOp::create(b, loc, perPart, nTiles);
    Value across = km.mul(kvs, split);
    Value rest;
    if (o.lptHeads) {
      Value perGroup = km.mul(nTiles, km.cstLike(nTiles, o.lptHeads));
      Value first = km.mul(arith::DivUIOp::create(b, loc, pid, perGroup).getResult(),
                           km.cstLike(nTiles, o.lptHeads));
      Value inGroup = arith::RemUIOp::create(b, loc, pid, perGroup);
      Value units = km.minu(km.cstLike(nTiles, o.lptHeads), km.sub(across, first));
      nTile = arith::DivUIOp::create(b, loc, inGroup, units);
      rest = km.add(first, arith::RemUIOp::create(b, loc, inGroup, units).getResult());
    } else {
      nTile = arith::DivUIOp::create(b, loc, pid, across);
      rest = arith::RemUIOp::create(b, loc, pid, across);
    }
    part = arith::DivUIOp::create(b, loc, rest, kvs);
    bkvLpt = arith::RemUIOp::create(b, loc, rest, kvs);
  }
  // Ordered: the last tiles first. A query tile's parts are added from its
  // last key tile to its first, and a program waits only for programs
  // before it in the grid, which run already or are done (no wait on a
  // program not yet started; but without a mask where the walk rotates,
  // the dK/dV kernel's rotated walk). Under the causal mask a program comes
  // to each query tile of its first head bn / kv_bm steps after the next
  // key tile's program did (two at head dim 128), and to those of its
  // later heads more steps after; without one at the same step, and its
  // additions run a turn behind the next key tile's (from the first wave
  // on: programs of one length stay so staggered).
  if (o.ordered)
    nTile = km.sub(km.sub(nTiles, km.cstLike(nTiles, 1)), nTile);
  Value bkv = bkvLpt ? bkvLpt : arith::DivUIOp::create(b, loc, inPart, nTiles).getResult();
  return {part, nTile, bkv};
}
} // namespace attention

namespace {

class AttentionBackwardTemplate : public KernelTemplate {
public:
  const OpDecl &op() const override { return attention::backwardOp(); }

  llvm::ArrayRef<ConfigKeyDecl> configKeys() const override {
    static const ConfigKeyDecl keys[] = {
        {"consumers", 1, 2, false, "consumer warpgroups, 64 query rows (dQ) or keys (dK, dV) each"},
        {"bn", 16, 128, false, "keys per step of the dQ kernel"},
        {"kv_bm", 16, 128, false,
         "query rows per step of the dK/dV kernel (a multiple of 32 on sm_90a, of 16 below)"},
        {"stages", 1, 4, false, "stages of the rings"},
        {"overlap", 0, 1, true,
         "start both score products of a step before its exponentials, and the two gradient "
         "products before waiting (0 when left out)"},
        {"fused", 0, 1, true,
         "dQ in the dK/dV kernel, added into an f32 sum: no recomputed products; in any order "
         "where the spec says deterministic = 0 (not bitwise repeatable), else in the order of "
         "the key tiles, a helper thread waiting for each program's turn (at head dim 128, "
         "where it is tuned and, with 2048 programs or more, the default, under a causal mask "
         "only with as many KV heads as query heads, without one from 1024 where each program "
         "walks the query tiles from its own place; 0 when left out)"},
        {"dsplit", 0, 1, true,
         "the dK/dV kernel's consumers split the head dim, not the keys: each holds half "
         "of dK's and dV's columns for the same 64 keys and computes the step's scores "
         "itself; below sm_90a the dQ kernel's too, for the same 64 query rows (head dim "
         "256; 0 when left out)"},
        {"sfirst", 0, 1, true,
         "the dQ kernel starts a step's dP product once its S product is done, so that P's "
         "exponentials run under dP's (with overlap; 0 when left out)"},
        {"kvsfirst", 0, 1, true,
         "the dK/dV kernel starts a step's dP^T product once its S^T product is done, and dV's "
         "product behind dP^T's before waiting for it (with overlap, not fused; 0 when left "
         "out; not measured yet, so neither a default nor tuned)"},
        {"qsplit", 0, 1, true,
         "with dsplit, the dK/dV kernel's consumers split each step's queries for the score "
         "products instead of each computing them for all (no product computed twice); P^T "
         "and dS^T of both halves meet in shared memory, where dV's and dK's products read "
         "them (head dim 256 on sm_90a, kv_bm = 64, two stages; the default there; 0 when "
         "left out)"},
        {"dqfrag", 0, 1, true,
         "with fused, each consumer's part of dQ goes into shared memory in its registers' "
         "order (16-byte stores, no swizzle) and is added into the f32 sums, laid out in that "
         "order, by one bulk copy (no tensor map); the last kernel reads them back in that "
         "order (with fused at head dim 128 the default, but adding in order without a causal "
         "mask, and tuned; 0 when left out)"},
        {"persist", 0, 1, true,
         "with fused, where dQ is added in any order (sm_90a): at most one program a "
         "multiprocessor (fewer where the call caps it: an engine's sm margin), "
         "each taking its share of the key tiles in turn, the next tile's K and V (and then "
         "its queries) loaded once the consumers are done with the last one's, under its dK "
         "and dV stores (the default there at head dim 128, tuned at 64 and 128; 0 when left "
         "out)"},
        {"lpt", 0, 1, true,
         "with persist under a causal mask: the tiles taken longest first across every head "
         "(every head's first key tile, then every head's second, ...; packed sequences: "
         "every sequence's tiles counted from its own last one), not each head's in turn (the "
         "default where the tiles are at most four rounds of the multiprocessors and all "
         "heads' Q and dO take 64 MiB or less together, or with take where a share fixed in "
         "advance would be uneven, and tuned; 0 when left out)"},
        {"take", 0, 1, true,
         "with persist: each program takes its next tile from a counter when it is ready for "
         "it (an atomic addition; the tiles in the order above, to whichever program asks "
         "first, as the hardware hands out a grid's programs), not a share fixed in advance "
         "(the default at head dim 128 under a causal mask with 8192 queries or more, on "
         "packed sequences, and with lpt where a share fixed in advance would be uneven, and "
         "tuned; 0 when left out)"},
        {"lpt_heads", 0, 1024, true,
         "with lpt and take: the tiles longest first across this many KV heads of the "
         "sequences (each part of a split group counted as one) at a time, those groups in "
         "turn, so that the programs at work read few heads' queries (L2 keeps them) and still "
         "end on the shortest tiles (4 tuned under a causal mask, and the default with take "
         "where four units' Q and dO take 16 MiB or less from 8192 queries, 128 MiB or less "
         "where a share fixed in advance would be uneven; 0 when left out: across every head "
         "at once)"},
    };
    return keys;
  }

  static TileConfig make(int64_t consumers, int64_t bn, int64_t kvBm, int64_t stages,
                         int64_t overlap = 0, int64_t dsplit = 0, int64_t sfirst = 0,
                         int64_t fused = 0) {
    TileConfig c;
    c.set("consumers", consumers).set("bn", bn).set("kv_bm", kvBm).set("stages", stages);
    c.set("overlap", overlap);
    if (dsplit)
      c.set("dsplit", 1);
    if (sfirst)
      c.set("sfirst", 1);
    if (fused)
      c.set("fused", 1);
    return c;
  }

  std::vector<TileConfig> configSpace(const KernelSpec &ks) const override {
    std::vector<TileConfig> out = {defaultConfig(ks)};
    // A config the rules accept, unless it is the default.
    auto push = [&](TileConfig c) {
      if (llvm::Error err = checkConfig(ks, c))
        llvm::consumeError(std::move(err));
      else if (c != out.front())
        out.push_back(std::move(c));
    };
    // Head dim 256 only with the head dim split over the consumers.
    int64_t dsplit = attention::Params(ks).d > 128 ? 1 : 0;
    if (!attention::Params(ks).target.hasWgmma()) {
      // (Head dim 256: dsplit, two consumers, fewer keys a step.)
      std::vector<int64_t> bns =
          dsplit ? std::vector<int64_t>{48, 32, 16} : std::vector<int64_t>{64, 48, 32};
      for (int64_t consumers : {2, 1})
        for (int64_t bn : bns)
          for (int64_t kvBm : {16, 32, 64})
            for (int64_t stages : {2, 3})
              push(make(consumers, bn, kvBm, stages, 0, dsplit));
      return out;
    }
    for (int64_t overlap : {1, 0})
      for (int64_t sfirst : {1, 0})
        for (int64_t consumers : {2, 1})
          for (int64_t bn : {128, 64, 32})
            for (int64_t kvBm : {64, 32, 128})
              for (int64_t stages : {2, 3}) {
                if (sfirst && !overlap)
                  continue;
                push(make(consumers, bn, kvBm, stages, overlap, dsplit, sfirst));
              }
    // Head dim 256: qsplit (64 queries a step, two stages) with each dQ
    // kernel the rules allow.
    if (dsplit)
      for (int64_t sfirst : {1, 0})
        for (int64_t bn : {32, 16}) {
          TileConfig c = make(2, bn, 64, 2, 1, 1, sfirst);
          c.set("qsplit", 1);
          push(c);
        }
    // Where the spec allows dQ added atomically (deterministic = 0), the
    // fused configs too (where attention::atomicDqTunable says they build
    // clean): 64 queries a step, every consumer's share of dQ's columns
    // whole panels (bn is unused: the dQ kernel is not built), two stages
    // (the defaults' number; three built clean too, bench/NOTES.md b10, and
    // are not measured). Where it asks for deterministic = 1, at head dim
    // 128 only: with the helper's additions 22 % slower to 13 % faster than
    // the two kernels, by the programs' count (bench/NOTES.md b20, b21); at
    // head dim 64 (one consumer, 64 keys a program, each a step behind the
    // next) 1.8 x as long as the default under a causal mask. Each with
    // the parts of dQ handed over in the registers' order (dqfrag) and
    // through the tensor map. Where dQ is added in any order, those with
    // overlap also with one program a multiprocessor (persist), under a
    // causal mask also taking the tiles longest first (lpt), each with its
    // tiles shared out in advance and taken at run time (take), and taken
    // longest first within groups of four units (lpt_heads = kLptGroup).
    attention::Params pk(ks);
    if ((!pk.deterministic || pk.d == 128) && attention::atomicDqTunable(pk))
      for (int64_t overlap : {1, 0})
        for (int64_t consumers : {1, 2})
          for (int64_t dqfrag : {1, 0}) {
            TileConfig c = make(consumers, 128, 64, 2, overlap, 0, 0, /*fused=*/1);
            if (dqfrag)
              c.set("dqfrag", 1);
            push(c);
            if (pk.deterministic || !overlap)
              continue;
            // (Each persistent one with its tiles taken at run time too;
            // on packed sequences only so: on ragged packs tiles shared
            // out in advance left the slowest program far behind, and
            // taken ones were as fast on packs of equal lengths
            // (bench/NOTES.md b32, b33).)
            auto pushBoth = [&](TileConfig persistent) {
              if (pk.layout != attention::Layout::THD)
                push(persistent);
              persistent.set("take", 1);
              push(persistent);
            };
            c.set("persist", 1);
            pushBoth(c);
            if (!pk.causal)
              continue;
            c.set("lpt", 1);
            pushBoth(c);
            // (Taken, longest first within groups of four units.)
            c.set("take", 1);
            c.set("lpt_heads", kLptGroup);
            push(c);
          }
    return out;
  }

  TileConfig defaultConfig(const KernelSpec &ks) const override {
    attention::Params p(ks);
    if (!p.target.hasWgmma())
      return defaultSm80(ks);
    // The fastest of runs 3 and 4 on the H200 (bench/NOTES.md, attention
    // b1): 128 keys a step for dQ, 64 queries a step for dK and dV, for head
    // dims 64 and 128 alike (against 64 and 32: 12-14 % faster at d = 128),
    // with overlap (8-10 % faster); one consumer where two would leave
    // multiprocessors idle in the dK/dV kernel (fewer than 128 programs of
    // 128 keys, counting each part of a group's query heads split over them
    // (backwardHeadSplit): one KV head of 2048 keys, say. Before the split,
    // Llama-3.1-70B at TP8 (one KV head) gave 139 TFLOP/s with two consumers,
    // 150 with one and 32 queries a step; split 8 ways, 321 with two).
    int64_t programs = dkvPrograms(p);
    // The dQ kernel's dP product started once S's is done (sfirst) at head
    // dims 128 and 256: its kernel 4-8 % faster at 128 (S8192 causal 1.41
    // -> 1.31 ms, MQA 0.32 -> 0.31), 0-3 % at 256, 5 % slower at 64
    // (bench/NOTES.md b8).
    int64_t sfirst = p.d >= 128 ? 1 : 0;
    TileConfig c =
        programs < 128 ? make(1, 128, 32, 2, 1, 0, sfirst) : make(2, 128, 64, 2, 1, 0, sfirst);
    // Head dim 256: dK and dV split by columns over two consumers (64 keys
    // a program); the dQ kernel's Q, dO and K, V rings then fit in shared
    // memory with 32 keys a step. The consumers split each step's 64
    // queries for the scores (qsplit): the backward 18 % faster than with
    // dsplit alone, 1.09 x cuDNN at B1 H16 S4096 causal on the H100
    // (bench/NOTES.md b17); dsplit alone where qsplit does not fit.
    if (p.d > 128) {
      c = make(2, 32, 64, 2, 1, 1, sfirst);
      c.set("qsplit", 1);
      if (llvm::Error err = checkConfig(ks, c)) {
        llvm::consumeError(std::move(err));
        c = make(2, 32, 32, 2, 1, 1, sfirst);
      }
    }
    // Where dQ may be added atomically (deterministic = 0), head dim 128
    // with two consumers' worth of programs: the fused kernel (the figures
    // above, against this default; head dim 64's tuned winners stayed
    // unfused), where it passes the rules; else the unfused default.
    // Where the spec says deterministic, the fused kernel adding in order
    // with 2048 programs or more: on the H100, causal, 5-9 % less time than
    // the two kernels at 8192 and 16384 keys, 4 % more at 4096 (1024
    // programs: the longest programs run last, and wait in turn;
    // bench/NOTES.md b20); without a mask 4-13 % less at 2048 programs (B4
    // H32 S2048, B1 H32 S8192), 5-22 % more at 1024 to 128 (each program a
    // turn behind the one before: the first programs' ramp is a larger
    // share; b21). GQA: without a mask 8-10 % less at 2048 programs (B4 H32
    // KV8 S8192, B8 H32 KV8 S4096), 4 % more at 512 (b21, b22); under a
    // causal mask 2-4 % more at 2048 programs, whose four query heads a
    // program make it four times as long, and 8 % more at one KV head
    // (Llama-3.1-70B TP8; b22): not the default there.
    // The parts of dQ handed over in the registers' order (dqfrag; b22, on
    // the H100 in the same call): in any order 2-4 % less time at every
    // head dim 128 case (S4096, S8192 and S16384 causal, B4 S2048, Llama,
    // and without a mask 1024 to 16384 keys); in order 2-4 % less under a
    // causal mask (S4096 to S16384, Llama) but 4-5 % more without one (B4
    // S2048): there the tensor map's.
    // Without a mask each program walks the query tiles from its own place
    // where they are two per key tile and a head's programs fit on half the
    // multiprocessors (the kernel's rotated walk; b23, H100, one call): in
    // order 2-13 % less time than walking from tile 0 at 128 to 2048
    // programs (B4 H32 S2048 1.70 -> 1.55-1.57 ms, B1 H32 S4096 1.55 ->
    // 1.38, B1 H32 S8192 -2.5 %), against b21's two kernels (another call)
    // 6 % less at 1024 programs (B1 H32 S4096), even at 512, more at 128:
    // the default from 1024 programs there (as many KV heads as query
    // heads; GQA at 1024 not measured).
    TileConfig fused = make(2, 128, 64, 2, 1, 0, 0, /*fused=*/1);
    bool rotates = !p.causal && p.hq == p.hkv && Shape(fused).rotates(p.sq, p.sk, p.target);
    // Packed sequences alike (bench/NOTES.md b29: B4 H32 S4096 and B2 H32
    // S8192 causal 7-8 % less time than the two kernels, B8 H32 S2048
    // causal even over three rounds, packed and not).
    bool ordered =
        (programs >= 2048 || (rotates && programs >= 1024)) && (p.hq == p.hkv || !p.causal);
    if ((!p.deterministic || ordered) && attention::atomicDqTunable(p) && p.d == 128 &&
        programs >= 128) {
      if (!p.deterministic || p.causal)
        fused.set("dqfrag", 1);
      if (llvm::Error err = checkConfig(ks, fused)) {
        llvm::consumeError(std::move(err));
      } else {
        // Adding dQ in any order: one program a multiprocessor (persist;
        // b25, H100, two alternated rounds in one call): without a mask
        // 4-5 % less time from 512 to 4096 programs (B4 H32 S2048 1.51 ->
        // 1.43 ms), under a causal mask at B1 H32 9 % less at S4096, 1-8 %
        // at S8192, even at S16384. Under a causal mask with four rounds
        // of tiles or fewer, each head's tiles in turn leave the rounds
        // unbalanced (Llama-3.1-70B TP8, 512 tiles: 0.82 -> 1.07 ms), the
        // tiles longest first across every head (lpt) not (0.69 ms; B1 H16
        // S4096 0.51 -> 0.38 ms, B1 H8 S8192 1.03 -> 0.64); with more, lpt
        // loses: 3 % at 1024 tiles (B1 H32 S4096), 6 % at 2048 to 4096
        // (S8192, S16384), 60-70 % with GQA's four heads a tile at 2048
        // (B4 H32 KV8 S8192, B8 H32 KV8 S4096).
        // Under a causal mask with 8192 queries or more, the tiles taken
        // from a counter at run time (take; b27, H100, two alternated
        // rounds in one call): at B1 H32 3-8 % less time at S8192 and 3 %
        // at S16384, 3 % with GQA's KV8 at B4 S8192, 1 % at Llama-3.1-70B
        // TP8 (with lpt), at the other lpt cases of 8192 and 16384 keys
        // within 1 % either way but B1 H8 KV1 S16384 (6 % less, within
        // that case's own spread); at 4096 it lost 5 % (B1 H32) or was
        // even (B8 H32 KV8, B1 H16, B1 H8 KV1), and without a mask at B4
        // H32 S2048 -0.4 % and +2 % in the two rounds: there the share
        // fixed in advance.
        // Taken longest first within groups of four units (lpt_heads = 4) where
        // the group's Q and dO take 16 MiB or less (kLptGroupBytes, a bound
        // found on the H100's 50 MB L2, taken for every sm_90a target; the
        // group's f32 sums of dQ read as much again; b27, b28, nine alternated
        // rounds over four calls on three H100s): B1 H32 S8192 causal 2 % less
        // time than take alone on average (16 MiB a group; by round -8 to +2 %:
        // 4-8 % less in the first three, even in the last six), even at B1 H8
        // S8192 and Llama-3.1-70B TP8 (a query head a unit); where a group
        // reads more, 0.4-1.2 % more at B1 H32 S16384 (32 MiB), 1-3 % more with
        // GQA at 8192 (B4 H32 KV8 and B1 H32 KV4, 64 MiB), +1 to -6 % by round
        // at one or two KV heads (32-64 MiB). At head dim 128 that is 8192
        // queries of one query head a unit. Groups of two at B1 H32 S16384
        // (16 MiB): 0.7 % more than take alone (b28, three rounds).
        // Packed sequences (THD) take their tiles at run time whatever the
        // mask or length: the spec's sq is the longest sequence, so the
        // grid's tiles of a ragged pack are mostly past their sequences'
        // keys, and the producer passes over those as it takes them
        // (bench/NOTES.md b33); shared out in advance, whole rounds of a
        // program's tiles were empty while others held the long ones. lpt
        // there as BSHD's without groups (at most four rounds of tiles),
        // each sequence's key tiles counted from its own last one (b38);
        // counted from the first, as if every sequence were the longest,
        // it was wrong on a ragged pack (H100: 1.1-1.9 x the time of take
        // alone on the four fused ragged packs of
        // bench/attn_packed_shapes.json, 1-3 % with groups of four on two
        // of 8192 at most), and never lpt cost 17 % on an equal-length pack
        // of 512 programs (B4 H8 KV1 S4096, b35). Never in groups there
        // (a group's units are mostly one sequence's KV heads).
        // lpt without groups only where every unit's Q and dO take 64 MiB
        // or less together (kLptOrderBytes, counted at the longest
        // sequence's rows; b38, H100, packed, two alternated rounds: 14-21 %
        // less time at 64 MiB, B4 H8 KV1 S4096 and a ragged pack of 4
        // documents of at most 4096 rows, and 9 % on a GQA pack of 1500 and
        // 4096 rows, 87 MiB of rows but counted as 128; 5 % more at B2 H32
        // KV8 S4096, 128 MiB). Taken as bound for BSHD too, not measured
        // there. (Groups of four below keep their own bound.)
        if (p.deterministic)
          return fused;
        bool thd = p.layout == attention::Layout::THD;
        TileConfig persistent = fused;
        persistent.set("persist", 1);
        int64_t units = p.b * p.hkv * attention::backwardHeadSplit(p.b, p.hq, p.hkv, p.sk);
        if (p.causal && programs <= 4 * p.target.smCount() &&
            lptGroupBytes(p, units) <= kLptOrderBytes)
          persistent.set("lpt", 1);
        if (thd)
          persistent.set("take", 1);
        // (Taken longest first within groups of four units where a group's
        // Q and dO take `bound` bytes or less.)
        auto lptInGroups = [&](int64_t bound) {
          if (lptGroupBytes(p, kLptGroup) > bound)
            return;
          persistent.set("take", 1).set("lpt", 1).set("lpt_heads", kLptGroup);
        };
        if (p.causal && p.sq >= 8192) {
          persistent.set("take", 1);
          if (!thd)
            lptInGroups(kLptGroupBytes);
        }
        // From 4096 to 8192 queries, where each unit's tiles in turn
        // shared out in advance would leave the slowest program more than
        // 10 % above the best share there can be (dkvShareExcess: B1 H40
        // S4096 1.17, B1 H20 S4096 1.40; 32 heads 1.03), the tiles taken
        // longest first, across every unit where their Q and dO fit the
        // bound above, else in groups of four where a group's fit 128 MiB
        // (kUnevenGroupBytes). H100, S4096: 8-19 % less time at B1 H40,
        // H20 and H48 (b38); 4.5 % at H28 (1.16) and 7.5 % at H56 (1.13),
        // even at H36 (1.13) (b39); with the share fixed in advance MHA of
        // 40 heads at S4096 was 0.97 x cuDNN and of 20 heads 0.95. With GQA
        // (B2 and B3 H32 KV8, B1 H64 KV8; four query heads a unit, 32 MiB
        // a group) the groups took 14-24 % less time than the fixed share
        // and 7-14 % less than taken alone (b40, two rounds); with larger
        // groups 20 % less at B2 H40 KV8 (40 MiB), 6-9 % at B2 H32 KV8
        // S6144 (48 MiB), 10-15 % at B2 and B3 H64 KV8 (64 MiB), 9-11 % at
        // B2 H96 KV8 (96 MiB) and B2 H128 KV8 (128 MiB), 9 % at B3 H96 KV8
        // (b41, two rounds). Beyond 128 MiB the share stays fixed (not measured).
        // Not below 4096: at B1 H56 S2048 (1.15) taken across every unit it
        // took 8 % more time (b39).
        if (p.causal && p.sq >= 4096 && p.sq < 8192 && !thd && !persistent.has("lpt") &&
            attention::dkvShareExcess(p, persistent.get("bn"), persistent.get("kv_bm"),
                                      p.target.smCount()) > attention::kUnevenShare) {
          if (lptGroupBytes(p, units) <= kLptOrderBytes)
            persistent.set("lpt", 1).set("take", 1);
          else
            lptInGroups(kUnevenGroupBytes);
        }
        if (llvm::Error err = checkConfig(ks, persistent)) {
          llvm::consumeError(std::move(err));
          return fused;
        }
        return persistent;
      }
    }
    if (llvm::Error err = checkConfig(ks, c)) {
      llvm::consumeError(std::move(err));
      return p.d > 128 ? make(2, 16, 32, 2, 1, 1) : make(2, 32, 32, 2);
    }
    return c;
  }

  llvm::Error checkConfig(const KernelSpec &ks, const TileConfig &cfg) const override {
    attention::Params p(ks);
    if (auto err = cfg.checkKeys(configKeys()))
      return err;
    if (!p.target.hasWgmma())
      return checkSm80(p, cfg);
    Shape s(cfg);
    if (p.d > 128 && !s.dsplit)
      return configError("attn_bwd at head dim " + llvm::Twine(p.d) +
                         " needs dsplit = 1: a warpgroup's dK and dV would need " +
                         llvm::Twine(p.d) +
                         " registers a thread, more than it has beside the scores");
    if (s.dsplit && (s.consumers != 2 || s.fused || p.d <= 128))
      return configError("dsplit needs two consumers (each holds half of the head dim), no "
                         "fused dQ, and head dim 256 (halves of whole 64-column panels)");
    if (s.bn % 16 != 0)
      return configError("bn = " + llvm::Twine(s.bn) + " must be a multiple of 16");
    if (s.kvBm % 32 != 0)
      return configError("kv_bm = " + llvm::Twine(s.kvBm) +
                         " must be a multiple of 32 (the queries' LSE and D come into shared "
                         "memory in 128-byte panels of f32)");
    if (kWorkspaceRows % s.bm() != 0 || kWorkspaceRows % s.kvBm != 0)
      return configError("consumers * 64 and kv_bm must divide " + llvm::Twine(kWorkspaceRows));
    // Registers of a consumer thread. dQ kernel: dQ (d / 2), S and dP
    // (bn / 2 each), P or dS in 16 bits (bn / 4). dK/dV kernel: dK and dV
    // (d / 2 each), S^T and dP^T (kv_bm / 2 each), P^T in 16 bits and the
    // columns' LSE and D (kv_bm / 4 each: read from shared memory where
    // they are used, so held only briefly; the count leaves that room);
    // fused, dQ's part (kv_bm rows of its d / consumers columns: at most
    // kv_bm / 2) takes the scores' registers once they are dead (its
    // product overwrites its accumulator), so it adds none. The limits are
    // the largest that built without spills for d = 128 (bn = 128: 224;
    // kv_bm = 64: 240 with two consumers and two stages; one stage spilled
    // 44 bytes, one consumer 20 bytes, causal). Fused at d = 128 with two
    // consumers builds clean since its loops count in 32 bits
    // (bench/NOTES.md b10).
    // (At head dim 256 the dQ kernel spilled 8 bytes at 208: its limit
    // there is 192. The dK/dV kernel with dsplit built clean with kv_bm = 32,
    // overlap and two or more stages only: 208 bytes spilled at kv_bm = 64,
    // 348 without overlap, 308 with one stage.)
    int64_t dqRegs = p.d / 2 + s.bn + s.bn / 4, dqLimit = p.d > 128 ? 192 : 224;
    // (qsplit: half of a step's scores each.)
    int64_t scores = s.qsplit ? s.kvBm / 2 : s.kvBm;
    int64_t dkvRegs = s.dkvCols(p.d) + scores + 3 * scores / 4;
    // (Fused builds no dQ kernel: bn is not used.)
    if (!s.fused && dqRegs > dqLimit)
      return configError("a dQ consumer thread would hold " + llvm::Twine(dqRegs) +
                         " registers of dQ, S, dP and dS (at most " + llvm::Twine(dqLimit) +
                         " at head dim " + llvm::Twine(p.d) + "): use a smaller bn");
    if (s.qsplit && (!s.dsplit || s.kvBm != 64 || s.stages != 2 || !s.overlap || s.kvsfirst))
      return configError("qsplit needs dsplit, kv_bm = 64 (each consumer's half of a step's "
                         "queries, and the step's P^T and dS^T whole 128-byte panels), two "
                         "stages (three do not fit shared memory), overlap = 1 and no kvsfirst; "
                         "got dsplit = " +
                         llvm::Twine(int(s.dsplit)) + ", kv_bm = " + llvm::Twine(s.kvBm) +
                         ", stages = " + llvm::Twine(s.stages) +
                         ", overlap = " + llvm::Twine(int(s.overlap)) +
                         ", kvsfirst = " + llvm::Twine(int(s.kvsfirst)));
    if (s.dsplit && !s.qsplit && (s.kvBm != 32 || !s.overlap || s.stages < 2))
      return configError("dsplit needs kv_bm = 32, overlap = 1 and 2 or more stages (other "
                         "configs spilled), got kv_bm = " +
                         llvm::Twine(s.kvBm) + ", overlap = " + llvm::Twine(int(s.overlap)) +
                         ", stages = " + llvm::Twine(s.stages));
    // Three stages of the dK/dV kernel's rings spilled (ptxas's reports over
    // the tuning space, bench/NOTES.md b8): at head dim 128 with a causal
    // mask or 64 queries a step (12 to 508 bytes), at 64 with both (8 to 12).
    if (!s.fused && !s.dsplit && s.stages > 2 &&
        ((p.d == 128 && (p.causal || s.kvBm >= 64)) || (p.d == 64 && p.causal && s.kvBm >= 64)))
      return configError("stages = " + llvm::Twine(s.stages) + " with kv_bm = " +
                         llvm::Twine(s.kvBm) + (p.causal ? ", causal," : "") + " at head dim " +
                         llvm::Twine(p.d) + " spills in the dK/dV kernel: use 2 stages");
    if (s.kvsfirst && (!s.overlap || s.fused))
      return configError("kvsfirst needs overlap = 1 and no fused dQ; got overlap = " +
                         llvm::Twine(int(s.overlap)) + ", fused = " + llvm::Twine(int(s.fused)));
    if (s.sfirst && (!s.overlap || s.fused))
      return configError("sfirst needs overlap = 1 and the dQ kernel (no fused dQ); got overlap "
                         "= " +
                         llvm::Twine(int(s.overlap)) + ", fused = " + llvm::Twine(int(s.fused)));
    if (s.dqfrag && !s.fused)
      return configError("dqfrag needs fused = 1 (it is how the fused kernel adds dQ's parts)");
    if (s.persist && (!s.fused || p.deterministic))
      return configError("persist needs fused = 1 and a spec with deterministic = 0 (dQ added "
                         "in any order); got fused = " +
                         llvm::Twine(int(s.fused)) +
                         ", deterministic = " + llvm::Twine(int(p.deterministic)));
    if (s.take && !s.persist)
      return configError("take needs persist = 1 (it is how a persistent program finds its "
                         "next tile)");
    if (s.lptHeads && (!s.lpt || !s.take))
      return configError("lpt_heads needs lpt = 1 and take = 1; got lpt = " +
                         llvm::Twine(int(s.lpt)) + ", take = " + llvm::Twine(int(s.take)));
    if (s.lpt && (!s.persist || !p.causal))
      return configError("lpt needs persist = 1 and a causal mask (without one every tile is as "
                         "long); got persist = " +
                         llvm::Twine(int(s.persist)) + ", causal = " + llvm::Twine(int(p.causal)));
    // (At head dim 128 under a causal mask the parts through the tensor
    // map spilled 100 bytes beside the tile loop's values; with dqfrag none.)
    if (s.persist && p.d == 128 && p.causal && !s.dqfrag)
      return configError("persist at head dim 128 under a causal mask needs dqfrag = 1 (through "
                         "the tensor map its consumers spill)");
    // (Packed sequences through the tensor map, beside each step's mask of
    // the keys past the sequence: 4 to 20 bytes spilled at head dim 128
    // under a causal mask, and with take.)
    if (s.fused && p.layout == attention::Layout::THD && p.d == 128 && !s.dqfrag &&
        (p.causal || s.take))
      return configError("fused on packed sequences (THD) at head dim 128 under a causal mask or "
                         "with take needs dqfrag = 1 (through the tensor map its consumers "
                         "spill)");
    // (lpt's order on packed sequences, its tiles shared out in advance:
    // each consumer places its own tiles, from its sequence's keys too, and
    // spilled 12 bytes at head dim 128 with GQA. Taken, the producer places
    // them.)
    if (s.lpt && !s.take && p.layout == attention::Layout::THD)
      return configError("lpt on packed sequences (THD) needs take = 1 (shared out in advance, "
                         "the consumers placing their own tiles spilled)");
    if (s.fused && s.kvBm != attention::kFusedQueryRows)
      return configError("fused needs kv_bm = " + llvm::Twine(attention::kFusedQueryRows) +
                         " (a step's queries are one warpgroup's rows of dQ's product), got " +
                         llvm::Twine(s.kvBm));
    if (s.fused && s.dqCols(p.d) % 64 != 0)
      return configError("fused needs whole panels of dQ's columns for each consumer: d / "
                         "consumers = " +
                         llvm::Twine(p.d) + " / " + llvm::Twine(s.consumers) +
                         " is not a multiple of 64");
    int64_t dkvLimit = s.consumers == 2 ? 240 : 232;
    if (dkvRegs > dkvLimit && s.fused)
      return configError(
          "fused at head dim " + llvm::Twine(p.d) +
          " needs two consumers: with one, a consumer thread would hold " + llvm::Twine(dkvRegs) +
          " registers of dK, dV, S^T, dP^T and P^T (at most " + llvm::Twine(dkvLimit) + ")");
    if (dkvRegs > dkvLimit)
      return configError("a dK/dV consumer thread would hold " + llvm::Twine(dkvRegs) +
                         " registers of dK, dV, S^T, dP^T and P^T (at most " +
                         llvm::Twine(dkvLimit) + " with " + llvm::Twine(s.consumers) +
                         " consumers): use a smaller kv_bm");
    int64_t e = dtypeBytes(p.dt), limit = p.target.maxSharedBytesPerBlock();
    for (int64_t smem : {s.fused ? 0 : s.dqSmem(p.d, e), s.dkvSmem(p.d, e)})
      if (smem > limit)
        return configError("consumers, bn, kv_bm and stages need " + llvm::Twine(smem) +
                           " bytes of shared memory; " + llvm::Twine(p.target.archName()) +
                           " allows " + llvm::Twine(limit));
    return llvm::Error::success();
  }

  /// Below sm_90a: two warpgroups where the dK/dV kernel's programs fill
  /// the GPU, 32 keys a step for dQ and 16 queries a step for dK and dV at
  /// head dim 128 (64 and 32 at 64: what the register rules allow), two
  /// stages; the first of those (then one consumer, then 32 keys and 16
  /// queries a step) that fits the target's shared memory.
  /// Not measured on an sm_80 part (none here).
  TileConfig defaultSm80(const KernelSpec &ks) const {
    attention::Params p(ks);
    int64_t programs = dkvPrograms(p);
    int64_t bn = p.d > 64 ? 32 : 64, kvBm = p.d > 64 ? 16 : 32;
    std::vector<TileConfig> tries = {make(1, bn, kvBm, 2), make(1, 32, 16, 2)};
    if (programs >= 128)
      tries.insert(tries.begin(), make(2, bn, kvBm, 2));
    // Head dim 256: two consumers splitting the columns, 16 keys a step
    // where 32 do not fit the target's shared memory (sm_86, sm_89).
    if (p.d > 128)
      tries = {make(2, 32, 16, 2, 0, 1), make(2, 16, 16, 2, 0, 1)};
    for (const TileConfig &c : tries) {
      if (llvm::Error err = checkConfig(ks, c))
        llvm::consumeError(std::move(err));
      else
        return c;
    }
    return tries.back();
  }

  /// The rules below sm_90a: no asynchronous Hopper keys, dsplit exactly at
  /// head dim 256, two or more stages, what a thread's registers hold (no
  /// setmaxnreg: at most 255 each, the same for every warp), shared memory.
  llvm::Error checkSm80(const attention::Params &p, const TileConfig &cfg) const {
    Shape s(cfg);
    if (s.overlap || s.fused || s.sfirst || s.kvsfirst || s.qsplit || s.persist || s.lpt)
      return configError("overlap, fused, sfirst, kvsfirst, qsplit, persist and lpt need sm_90a "
                         "(asynchronous products, TMA); the target is " +
                         llvm::Twine(p.target.archName()));
    // Head dim 256: a thread would hold 256 registers of dK and dV; the two
    // warpgroups split the columns instead (each computing the step's S^T
    // and dP^T for the same 64 keys).
    if (p.d > 128 && (!s.dsplit || s.consumers != 2))
      return configError("attn_bwd at head dim " + llvm::Twine(p.d) +
                         " needs dsplit = 1 and two consumers (each holds half of dK's and "
                         "dV's columns); the target is " +
                         llvm::Twine(p.target.archName()));
    if (s.dsplit && p.d <= 128)
      return configError("dsplit is for head dim 256 (halves of whole 64-column panels)");
    if (s.bn % 16 != 0)
      return configError("bn = " + llvm::Twine(s.bn) + " must be a multiple of 16");
    if (s.kvBm % 16 != 0)
      return configError("kv_bm = " + llvm::Twine(s.kvBm) + " must be a multiple of 16");
    if (kWorkspaceRows % s.bm() != 0 || kWorkspaceRows % s.kvBm != 0)
      return configError("consumers * 64 and kv_bm must divide " + llvm::Twine(kWorkspaceRows));
    if (s.stages < 2)
      return configError("stages = " + llvm::Twine(s.stages) +
                         ": the cp.async pipeline needs 2 or more (one landing while one is read)");
    // Registers of a thread: dQ (d / 2), S and dP (bn / 2 each), dS in 16
    // bits (bn / 4); dK and dV (d / 2 each), S^T and dP^T (kv_bm / 2 each)
    // and P^T or dS^T in 16 bits (kv_bm / 4), with room for fragments and
    // addresses under 255. The limits are the largest that built without
    // spills: at head dim 128 the dK/dV kernel spilled 4 to 72 bytes with
    // 32 queries a step (168), none with 16 (148); the dQ kernel 8 bytes
    // with 64 keys a step (144, packed sequences, causal), none with 48.
    // (dsplit: half of dQ's, dK's and dV's columns each.)
    int64_t cols = s.dsplit ? p.d / 2 : p.d;
    int64_t dqRegs = cols / 2 + s.bn + s.bn / 4, dkvRegs = cols + s.kvBm + s.kvBm / 4;
    if (dqRegs > 128)
      return configError("a dQ thread would hold " + llvm::Twine(dqRegs) +
                         " registers of dQ, S, dP and dS (at most 128 below sm_90a): use a "
                         "smaller bn");
    if (dkvRegs > 160)
      return configError("a dK/dV thread would hold " + llvm::Twine(dkvRegs) +
                         " registers of dK, dV, S^T, dP^T and P^T (at most 160 below sm_90a): "
                         "use a smaller kv_bm");
    // 64 queries a step spilled in the dK/dV kernel: 4 bytes with three
    // stages (head dim 64, causal, sm_80), 12 with two when built for sm_90
    // (255 registers; bench/NOTES.md b12).
    if (s.kvBm >= 64)
      return configError("kv_bm = " + llvm::Twine(s.kvBm) +
                         " spills in the dK/dV kernel below sm_90a: use a smaller kv_bm");
    int64_t e = dtypeBytes(p.dt), limit = p.target.maxSharedBytesPerBlock();
    int64_t dqSmem = (2 * s.dqRows(false) + 2 * s.stages * s.bn) * p.d * e + 1024;
    int64_t dkvSmem = (2 * s.dkvKeys() + 2 * s.stages * s.kvBm) * p.d * e + 1024;
    for (int64_t smem : {dqSmem, dkvSmem})
      if (smem > limit)
        return configError("consumers, bn, kv_bm and stages need " + llvm::Twine(smem) +
                           " bytes of shared memory; " + llvm::Twine(p.target.archName()) +
                           " allows " + llvm::Twine(limit));
    return llvm::Error::success();
  }

  // Arithmetic-bound: ranked again under sustained load (bench/NOTES.md,
  // GEMM g9).
  bool tunedUnderLoad() const override { return true; }

  std::string_view sourceHash() const override {
    return embedded::templateSourceHash("AttentionBackwardTemplate.cpp");
  }

  llvm::Expected<OwningOpRef<ModuleOp>> build(MLIRContext &ctx, const KernelSpec &ks,
                                              const TileConfig &cfg) const override {
    attention::Params p(ks);
    return buildModule(ctx, *this, ks, cfg, [&](OpBuilder &b, Location loc) {
      Builder kb{{b, loc}, p, Shape(cfg), cfg, Value(), Value(), Value(), Value()};
      if (!p.target.hasWgmma()) {
        kb.dqSm80();
        kb.dkvSm80();
        kb.sum();
      } else if (kb.s.fused) {
        kb.pre();
        kb.dkv();
        kb.sum();
        kb.convert();
      } else {
        kb.dq();
        kb.dkv();
        kb.sum();
      }
    });
  }

private:
  /// What both kernels build with.
  struct Builder : KernelMath {
    const attention::Params &p;
    Shape s;
    const TileConfig &cfg;

    MLIRContext &ctx() const { return *b.getContext(); }
    bool bshd() const { return p.layout == attention::Layout::BSHD; }
    /// Packed sequences: Q, K, V, O and the gradients are [tokens, h, d],
    /// sequence i's rows from cu_seqlens[i] (the kernels' last arguments);
    /// the workspace and the parts' sums stay [b, rows] as with BSHD.
    bool thd() const { return p.layout == attention::Layout::THD; }
    /// Fused where the spec asks for bitwise repeatable results: each query
    /// tile's parts of dQ are added in a fixed order of the key tiles
    /// (the dK/dV kernel's comment).
    bool ordered() const { return s.fused && p.deterministic; }
    /// Ordered: a flag word per query tile of kv_bm rows of every head of
    /// every sequence: how many key tiles have added their parts into it
    /// ([b * hq, tiles, 1], as f32 words; zeroed by the workspace's kernel,
    /// or before a launch of this kernel alone).
    MemRefType flagsType() const {
      return MemRefType::get({ShapedType::kDynamic, ShapedType::kDynamic, attention::kFlagsPerTile},
                             b.getF32Type());
    }
    int64_t dqRows() const { return s.dqRows(p.target.hasWgmma()); }
    std::string suffix() const {
      return std::string(dtypeName(p.dt)) + "_d" + std::to_string(p.d) + "_h" +
             std::to_string(p.hq) + "_" + std::to_string(p.hkv) + (p.causal ? "_causal" : "") +
             "_" + attention::layoutName(p.layout);
    }
    /// Q, O and their gradients ([b, s, h * d], [b * h, s, d] or [tokens,
    /// h * d]) with `heads` heads.
    MemRefType rowsType(int64_t heads, Type elem) const {
      if (thd())
        return MemRefType::get({ShapedType::kDynamic, heads * p.d}, elem);
      return bshd()
                 ? MemRefType::get({ShapedType::kDynamic, ShapedType::kDynamic, heads * p.d}, elem)
                 : MemRefType::get({ShapedType::kDynamic, ShapedType::kDynamic, p.d}, elem);
    }
    /// THD: the offsets of the sequences' rows in Q (and O, dO, dQ) and in
    /// K (and V, dK, dV): b + 1 int32 words each (as f32 memrefs).
    MemRefType offsetsType() const {
      return MemRefType::get({ShapedType::kDynamic}, b.getF32Type());
    }
    Value cuQ, cuK; // the current kernel's offsets (THD)
    /// THD: the current kernel's sq and sk, the most query and key rows
    /// seqOf gives a sequence.
    Value rowsBound, keysBound;
    /// THD: sequence `seq`'s first rows and row counts in Q and in K.
    struct Seq {
      Value qStart, qLen, kStart, kLen;
    };
    /// Those of sequence `seq`, at most sq and sk (sequenceRows): no loop
    /// runs longer than a valid call's; in the fused dK/dV kernel its query
    /// tiles index the flags ([b * hq, ceil(sq / 64)], unmasked), and adding
    /// in order its turns start at the sequence's last key tile, which must
    /// have a program (the grid's ceil(sk / bn) a head). Offsets that break
    /// the call's contract give wrong results, not stray writes, a wait
    /// that never ends or a loop far past the call's sizes.
    Seq seqOf(Value seq) {
      Seq r;
      std::tie(r.qStart, r.qLen) = sequenceRows(cuQ, seq, rowsBound);
      std::tie(r.kStart, r.kLen) = sequenceRows(cuK, seq, keysBound);
      return r;
    }
    /// The batch: the first size of `t` (BSHD's gradients, the parts' sums),
    /// or (THD) the offsets' count less one.
    Value batchOf(Value t) {
      if (thd())
        return sub(memref::DimOp::create(b, loc, cuK, 0), cst(1));
      return memref::DimOp::create(b, loc, t, 0);
    }
    /// A TMA row coordinate and batch of row `row` of a sequence starting
    /// at `start` (THD: one batch of every row).
    std::pair<Value, Value> tmaRow(Value start, Value seq, Value row) {
      return thd() ? std::make_pair(add(start, row), cst(0)) : std::make_pair(row, seq);
    }
    /// `t` (rowsType of `heads` heads) and the coordinates of row `row` of
    /// sequence `seq`, head `head` in it; THD: a view of the sequence's
    /// `len` rows from `start` (rows past it are not read or written).
    std::pair<Value, SmallVector<Value>> rowIn(Value t, Value start, Value len, Value seq,
                                               Value head, int64_t heads, Value row) {
      if (thd())
        return {tt::NarrowOp::create(b, loc, t, start, len), {row, mul(head, cst(p.d))}};
      return {t, rowAt(seq, head, heads, row)};
    }
    /// The workspace: [2, b * hq, rows]: LSE * log2(e), then D.
    MemRefType workspaceType() const {
      return MemRefType::get({2, ShapedType::kDynamic, ShapedType::kDynamic}, b.getF32Type());
    }

    /// The dK/dV kernel's partial sums when the query heads of a group are
    /// split over programs: as dK and dV, f32, 2 * split of them stacked
    /// along the first dimension (dK's parts, then dV's), rows padded to
    /// the workspace's multiple.
    /// (THD: as BSHD's, [2 * split * b, rows, hkv * d].)
    MemRefType partialsType() const {
      if (thd())
        return MemRefType::get({ShapedType::kDynamic, ShapedType::kDynamic, p.hkv * p.d},
                               b.getF32Type());
      return rowsType(p.hkv, b.getF32Type());
    }
    /// Where part `j` of dK (j < split) or of dV (split + j) holds what dK or
    /// dV hold at `at` (partRowAt coordinates; `dK` the gradient's view).
    SmallVector<Value> partAt(Value j, Value dK, ArrayRef<Value> at) {
      return {add(mul(j, batchOf(dK)), at[0]), at[1], at[2]};
    }
    /// THD, fused: where sequence `seq`'s rows start in dQ's f32 sums,
    /// [totalQ + kFusedQueryRows * b, hq * d]: at its first row in Q plus
    /// kFusedQueryRows rows for each sequence before it, so that every
    /// query tile of a sequence lies in its own rows (a tile's rows past
    /// the sequence get its parts' zeros, never the next sequence's sums).
    /// (`start`: its first row in Q, read once where the sequence is.)
    Value sumsStart(Value seq, Value start) {
      return add(start, mul(seq, cst(attention::kFusedQueryRows)));
    }
    /// Whether a query tile of kFusedQueryRows rows from `row` lies inside
    /// dQ's f32 sums `sums` (THD: its place comes from the offsets in
    /// memory, which may be anything; bulk copies are not masked).
    Value tileInside(Value sums, Value row) {
      Value rows = memref::DimOp::create(b, loc, sums, 0);
      Value from = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, row, cst(0));
      Value to = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sle,
                                       add(row, cst(attention::kFusedQueryRows)), rows);
      return arith::AndIOp::create(b, loc, from, to);
    }

    /// rowAt in the parts' sums (THD: BSHD's coordinates).
    SmallVector<Value> partRowAt(Value seq, Value head, Value row) {
      if (thd())
        return {seq, row, mul(head, cst(p.d))};
      return rowAt(seq, head, p.hkv, row);
    }

    /// dqfrag: where the part of dQ of consumer `k` for query tile `mi` (of
    /// 64 rows) of `head` of sequence `seq` starts in the f32 sums (as
    /// rowsType(hq, f32), dense rows): BHSD, each tile's 64 x d elements,
    /// its consumers' parts one after another, fill its head's 64 rows of
    /// the tile; BSHD, the tiles of every head of the sequence, the heads in
    /// order, fill the 64 rows of the tile (a head's part no longer in that
    /// head's columns), the part's first element given as the tile's first
    /// row and an offset past its columns (addresses are linear in the
    /// indices: no division by hq * d); THD as BSHD, the tile's rows from
    /// the sequence's first (`sums0`, its sumsStart; unused otherwise).
    SmallVector<Value> fragAt(Value seq, Value head, Value mi, Value k, Value sums0) {
      int64_t part = 64 * s.dqCols(p.d);
      Value row0 = mul(mi, cst(64));
      if (thd())
        return {add(sums0, row0), mul(add(mul(head, cst(s.consumers)), k), cst(part))};
      if (!bshd())
        return {add(mul(seq, cst(p.hq)), head), add(row0, mul(k, cst(part / p.d))), cst(0)};
      return {seq, row0, mul(add(mul(head, cst(s.consumers)), k), cst(part))};
    }

    /// Stores a consumer's dK (its sums times `scale`) and dV, the rows of
    /// keys from `key0` and the columns from `myCols`: into dK and dV where
    /// the program took every query head of its KV head's group (`heads`
    /// from `head0`), else into its part's f32 sums, for sum() to add.
    void storeGrads(Value dkSum, Value dvSum, Value seq, Value kvHead, Value key0, Value myCols,
                    Value heads, Value head0, Value dK, Value dV, Value partials, Value scale) {
      int64_t group = p.hq / p.hkv;
      auto accType = cast<RankedTensorType>(dkSum.getType());
      // dV first, so that its registers are free before dK's stores.
      auto dk = [&] { return arith::MulFOp::create(b, loc, dkSum, splat(accType, scale)); };
      auto storeWhole = [&] {
        // (THD: views of the sequence's keys, whose offsets are read
        // again here, once a tile, not held through the steps.)
        Seq tail = thd() ? seqOf(seq) : Seq{};
        auto [dvView, at] = rowIn(dV, tail.kStart, tail.kLen, seq, kvHead, p.hkv, key0);
        at.back() = add(at.back(), myCols);
        tt::StoreOp::create(b, loc, dvSum, dvView, at);
        Value dkView =
            thd() ? tt::NarrowOp::create(b, loc, dK, tail.kStart, tail.kLen).getResult() : dK;
        tt::StoreOp::create(b, loc, dk(), dkView, at);
      };
      if (group == 1) {
        storeWhole(); // nothing to split
        return;
      }
      // One part: dK and dV as they are; several: each part's sums, f32,
      // for the sum kernel to add in order. The split and the part from
      // values the loop kept (heads = group / split, head0 = kvHead * group
      // + part * heads): one more held through the loop would spill. (The
      // split divides the group: the launch checks it.)
      auto whole = scf::IfOp::create(
          b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, heads, cst(group)),
          /*withElseRegion=*/true);
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(whole.thenBlock());
      storeWhole();
      b.setInsertionPointToStart(whole.elseBlock());
      // (Adding dQ in order, the part from the program's index, as placeDkv
      // has it: from head0 the consumers spilled 8 bytes at head dim 128
      // under a causal mask.)
      Value part;
      if (!ordered())
        part = arith::DivUIOp::create(b, loc, remu(head0, group), heads);
      Value parts = arith::DivUIOp::create(b, loc, cst(group), heads);
      if (ordered())
        part = arith::DivUIOp::create(
            b, loc, tt::ProgramIdOp::create(b, loc, tt::Dim::x),
            arith::DivUIOp::create(b, loc, tt::NumProgramsOp::create(b, loc, tt::Dim::x), parts));
      SmallVector<Value> at = partRowAt(seq, kvHead, key0);
      at[2] = add(at[2], myCols);
      tt::StoreOp::create(b, loc, dvSum, partials, partAt(add(parts, part), dK, at));
      tt::StoreOp::create(b, loc, dk(), partials, partAt(part, dK, at));
    }

    /// Where a dQ program is: its tile of bm query rows (the tiles with
    /// the most keys first), head and sequence, and the key tiles its rows
    /// see (`lse` gives the batch).
    struct DqTile {
      Value bh, seq, head, kvHead, q0;
      Seq ps;
      Value keys, kvTiles, whole;
    };
    DqTile placeDq(Value lse, Value sqV, Value skV) {
      int64_t bm = dqRows();
      // The tiles with the most keys (the last rows under a causal mask)
      // first, a row tile of every head at a time.
      Value batchV = memref::DimOp::create(b, loc, lse, 0);
      Value heads = mul(batchV, cst(p.hq));
      Value mTiles = mul(ceilDiv(sqV, kWorkspaceRows), cst(kWorkspaceRows / bm));
      Value pid = tt::ProgramIdOp::create(b, loc, tt::Dim::x);
      Value mTile = sub(sub(mTiles, cst(1)), arith::DivUIOp::create(b, loc, pid, heads));
      Value bh = arith::RemUIOp::create(b, loc, pid, heads);
      Value seq = divu(bh, p.hq), head = remu(bh, p.hq);
      Value kvHead = divu(head, p.hq / p.hkv);
      Value q0 = mul(mTile, cst(bm));
      // THD: the sequence's rows and keys (the grid covers the longest).
      Seq ps = thd() ? seqOf(seq) : Seq{};
      Value rowsV = thd() ? ps.qLen : sqV, keysV = thd() ? ps.kLen : skV;
      // Key tiles any row sees (none for a tile wholly past the sequence,
      // which only pads the workspace); the first `whole` every row sees
      // whole.
      Value kvEnd = p.causal ? minu(keysV, add(q0, cst(bm))) : keysV;
      Value inside =
          arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, q0, rowsV).getResult();
      Value kvTiles = arith::SelectOp::create(b, loc, inside, ceilDiv(kvEnd, s.bn), cst(0));
      Value whole = minu(divu(p.causal ? minu(keysV, add(q0, cst(1))) : keysV, s.bn), kvTiles);
      return {bh, seq, head, kvHead, q0, ps, keysV, kvTiles, whole};
    }

    /// Where a dK/dV program is: its tile of bn keys of one KV head, the
    /// query heads of its part of the group (`heads` from `head0`) and the
    /// query tiles that see its keys (the masked ones first).
    struct DkvTile {
      Value seq, kvHead, heads, head0, n0;
      Seq ps;
      Value mEnd, mStart, mMasked;
    };
    /// The query heads of one part of a group split `split` ways, in
    /// `split`'s integer type.
    Value headsPerPart(Value split) {
      return arith::DivUIOp::create(b, loc, cstLike(split, p.hq / p.hkv), split);
    }

    DkvTile placeDkv(Value sqV, Value skV, Value split, int64_t bn, Value tile = Value(),
                     Value tiles = Value()) {
      int64_t group = p.hq / p.hkv;
      // Every key tile of one KV head before the next (the programs running
      // together read the same Q and dO, which L2 keeps), the first tiles
      // (under a causal mask the most queries) first.
      // With the group's query heads split `split` ways, part j of every
      // tile before part j + 1.
      Value nTiles = ceilDiv(skV, bn);
      // (Persistent: `tile` of `tiles`, the program's index and count
      // otherwise; lpt only so.)
      Value pid = tile ? tile : tt::ProgramIdOp::create(b, loc, tt::Dim::x).getResult();
      Value count = tiles ? tiles : tt::NumProgramsOp::create(b, loc, tt::Dim::x).getResult();
      attention::DkvOrder order{tile && s.lpt, s.lptHeads, ordered()};
      attention::DkvPlace place = attention::placeDkvTile(*this, order, pid, count, nTiles, split);
      Value part = place.part, nTile = place.nTile, bkv = place.bkv;
      Value seq = divu(bkv, p.hkv), kvHead = remu(bkv, p.hkv);
      // The part's query heads: `heads` of them from `head0`.
      Value heads = headsPerPart(split);
      Value head0 = add(mul(kvHead, cst(group)), mul(part, heads));
      Seq ps = thd() ? seqOf(seq) : Seq{};
      // (lpt, THD: a sequence's key tiles counted from its own last one, so
      // that the nTile-th of every unit has as many query rows after it,
      // the work of its tile under the causal mask: the sequence's own
      // tiles, kTiles of them, rotated by kTiles within the grid's nTiles,
      // the first nTiles - kTiles of the order going to tiles past its
      // keys. The longest sequence's order is BSHD's; every tile of the
      // grid is still placed once, whatever the offsets: kTiles at most
      // nTiles, and the rotation a subtraction, not a division (with the
      // remainder the registers of the tiles taken spilled 8 bytes).)
      if (order.lpt && thd()) {
        Value own = ceilDiv(ps.kLen, bn);
        if (own.getType() != nTile.getType())
          own = toI32(own);
        Value at = arith::AddIOp::create(b, loc, nTile, minu(own, nTiles));
        Value past = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::uge, at, nTiles);
        nTile = arith::SelectOp::create(b, loc, past, sub(at, nTiles), at);
      }
      Value n0 = mul(nTile, cst(bn));
      QueryTiles m = queryTiles(n0, thd() ? rowsSeen(ps, n0) : sqV, bn);
      return {seq, kvHead, heads, head0, n0, ps, m.end, m.start, m.masked};
    }

    /// THD: the query rows a dK/dV program of keys from `n0` of sequence
    /// `ps` takes (in the type of `n0`). A program wholly past its keys
    /// stores nothing: without a mask it takes no query either; under a
    /// causal mask its first query tile is already past the last one where
    /// the sequence has as many queries as keys or fewer (where it has
    /// more, it computes what it does not store: the test for it spilled 8
    /// bytes at head dim 256), but fused it takes none (it would add only
    /// zeros to dQ, and adding in order no program waits for its turn).
    Value rowsSeen(const Seq &ps, Value n0) {
      Value qLen = ps.qLen, kLen = ps.kLen;
      if (n0.getType() != qLen.getType()) {
        qLen = toI32(qLen);
        kLen = toI32(kLen);
      }
      if (p.causal && !s.fused)
        return qLen;
      return arith::SelectOp::create(
          b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, n0, kLen), qLen,
          cstLike(qLen, 0));
    }

    /// The query tiles that see a key of a dK/dV program's `bn` keys from
    /// row `n0`, of `rows` query rows: under a causal mask from the one
    /// holding row n0; the first ones up to row n0 + bn see the diagonal
    /// (masked): [start, masked) masked, [masked, end) not. In the type of
    /// `n0` and `rows` (indices, or 32-bit integers).
    struct QueryTiles {
      Value start, masked, end;
    };
    QueryTiles queryTiles(Value n0, Value rows, int64_t bn) {
      Value end = ceilDiv(rows, s.kvBm);
      Value start = p.causal ? minu(divu(n0, s.kvBm), end) : cstLike(n0, 0);
      Value masked =
          p.causal ? minu(ceilDiv(add(n0, cstLike(n0, bn)), s.kvBm), end) : cstLike(n0, 0);
      masked = arith::MaxUIOp::create(b, loc, masked, start);
      return {start, masked, end};
    }

    /// A dK/dV program's step after query tile mi of `head`, its query
    /// tiles [start, end) of every head in turn: {head, mi} (in their type).
    /// With `first` (a rotated walk) each head's tiles from `first` to the
    /// end, then from `start` to the one before `first`.
    SmallVector<Value> tileAfter(Value head, Value mi, Value start, Value end,
                                 Value first = Value()) {
      Value next = add(mi, cstLike(mi, 1));
      Value wrap = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, next, end);
      if (!first)
        return {arith::SelectOp::create(b, loc, wrap, add(head, cstLike(head, 1)), head),
                arith::SelectOp::create(b, loc, wrap, start, next)};
      next = arith::SelectOp::create(b, loc, wrap, start, next);
      Value done = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, next, first);
      return {arith::SelectOp::create(b, loc, done, add(head, cstLike(head, 1)), head), next};
    }

    /// Ordered without a causal mask: each program of a head walks the
    /// query tiles from its own place, where they are R per key tile (R =
    /// a program's keys over kv_bm; M = R N tiles for N key tiles) and a
    /// head's N programs fit on half the multiprocessors. The head's r-th
    /// program in the grid starts at tile R r; a tile's parts are added in
    /// the order the programs come to it, so each program's turn at a tile
    /// comes R steps after the one before it there (walking from tile 0,
    /// each came to a tile at the same step as the one before it, and its
    /// addition waited for that one's). The turn before a program's at a
    /// tile is the next program's in the grid (the head's first program's
    /// for its last), so every program but the head's last waits for one
    /// after it in the grid: those start once the programs before the head
    /// are done, which wait only for each other, as the multiprocessors
    /// hold N at once. Elsewhere the walk from tile 0, the turns in the
    /// grid's order. (The consumers count their steps from `start`: without
    /// a mask they need no tile's index, and adding in order they hand
    /// their parts to the helper, which walks as the producer.)
    /// `rotated()`: whether a kernel has the rotated walk; walkOf: a
    /// program's first tile and whether it rotates (in the types of
    /// `lastTurn` and `end`).
    bool rotated() const { return ordered() && !p.causal; }
    std::pair<Value, Value> walkOf(Value lastTurn, Value keyTiles, Value start, Value end) {
      int64_t r = s.walkRatio();
      Value whole = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, end,
                                          mul(keyTiles, cstLike(keyTiles, r)));
      Value fits = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ule, keyTiles,
                                         cstLike(keyTiles, Shape::maxRotatedKeyTiles(p.target)));
      Value rot = arith::AndIOp::create(b, loc, whole, fits);
      Value first =
          arith::SelectOp::create(b, loc, rot, mul(lastTurn, cstLike(lastTurn, r)), start);
      return {first, rot};
    }

    /// Each element's index along `dim` of a tile shaped and laid out as
    /// `like`, plus `from` (i32).
    Value indexFrom(Value like, int64_t dim, Value from) {
      auto type = cast<RankedTensorType>(like.getType());
      auto iType = RankedTensorType::get(type.getShape(), b.getI32Type(), type.getEncoding());
      return arith::AddIOp::create(b, loc, tt::IotaOp::create(b, loc, iType, dim),
                                   splat(iType, toI32(from)));
    }
    /// `t` where `ok`, else `fill`.
    Value keepWhere(Value ok, Value t, double fill) {
      return arith::SelectOp::create(b, loc, ok, t,
                                     splat(cast<RankedTensorType>(t.getType()), f32c(fill)));
    }
    /// Whether `index` (indexFrom's) lies below `bound`.
    Value below(Value index, Value bound) {
      return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, index,
                                   splat(cast<RankedTensorType>(index.getType()), toI32(bound)));
    }

    /// The dQ kernels' scores `sc` (64 rows from `row0`, the columns of
    /// keys from `col0`) with -inf where a key is past `keys` or, causal,
    /// past the row.
    Value maskRows(Value sc, Value col0, Value keys, Value row0) {
      Value cols = indexFrom(sc, 1, col0);
      Value ok = below(cols, keys);
      if (p.causal) {
        Value rows = indexFrom(sc, 0, row0);
        ok = arith::AndIOp::create(
            b, loc, ok, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sle, cols, rows));
      }
      return keepWhere(ok, sc, -INFINITY);
    }

    /// The dK/dV kernels' transposed scores `st` (keys from `key0` as rows,
    /// queries from `m0` as columns) with -inf where the causal mask hides
    /// the key: key j is seen by query i when j <= i.
    Value maskDiagonal(Value st, Value key0, Value m0) {
      Value keys = indexFrom(st, 0, key0);
      Value queries = indexFrom(st, 1, m0);
      return keepWhere(arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sle, keys, queries), st,
                       -INFINITY);
    }

    /// THD, fused: the dK/dV kernel's transposed scores `st` (64 keys from
    /// `key0` of a sequence of `kLen` keys, as rows) with -inf where a key is
    /// past the sequence's, where the tile reaches past them. (TMA loads the
    /// next sequence's keys there, not zeros: their P^T would add dS K to
    /// dQ. Only dK's and dV's rows of them are not stored.)
    Value maskPastKeys(Value st, Value key0, Value kLen) {
      Value past =
          arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sgt, add(key0, cst(64)), kLen);
      auto sType = cast<RankedTensorType>(st.getType());
      auto masked = scf::IfOp::create(b, loc, TypeRange{sType}, past, /*withElseRegion=*/true);
      OpBuilder::InsertionGuard g(b);
      b.setInsertionPointToStart(masked.thenBlock());
      scf::YieldOp::create(
          b, loc, ValueRange{keepWhere(below(indexFrom(st, 0, key0), kLen), st, -INFINITY)});
      b.setInsertionPointToStart(masked.elseBlock());
      scf::YieldOp::create(b, loc, ValueRange{st});
      return masked.getResult(0);
    }

    /// dQ = scale * its sums `acc`, the 64 rows from `row0` of one head.
    void storeDq(Value acc, Value scale, Value dQ, const Seq &ps, Value seq, Value head, Value row0,
                 Value col0 = {}) {
      Value out =
          arith::MulFOp::create(b, loc, acc, splat(cast<RankedTensorType>(acc.getType()), scale));
      auto [dqView, at] = rowIn(dQ, ps.qStart, ps.qLen, seq, head, p.hq, row0);
      if (col0)
        at.back() = add(at.back(), col0);
      tt::StoreOp::create(b, loc, out, dqView, at);
    }

    /// The entry block of a dQ or dK/dV kernel; THD: Q's and K's offsets,
    /// its arguments `offsets` and the one after (13 and 14, but 14 and 15
    /// in the fused dK/dV kernel, after dQ's sums), kept in cuQ and cuK,
    /// and sq and sk, its arguments `sq` and the one after, in rowsBound and
    /// keysBound.
    Block *entryOf(tt::KernelOp kernel, unsigned offsets, unsigned sq) {
      Block *entry = &kernel.getBody().front();
      if (thd()) {
        cuQ = entry->getArgument(offsets);
        cuK = entry->getArgument(offsets + 1);
        rowsBound = entry->getArgument(sq);
        keysBound = entry->getArgument(sq + 1);
      }
      return entry;
    }

    /// The dQ kernel and its arguments (both targets alike, but for how Q,
    /// K, V and dO come in: `qIn` for Q and dO, `kvIn` for K and V): Q, K,
    /// V, dO; O, dO, LSE, dQ, the workspace; scale * log2(e), scale, sq,
    /// sk; THD: Q's and K's offsets (kept in cuQ and cuK). Programs: every
    /// tile of the workspace's rows, of every head.
    struct DqKernel {
      tt::KernelOp kernel;
      Block *entry;
      Value q, k, v, dOIn, o, dO, lse, dQ, ws, scaleLog2, scale, sq, sk;
    };
    DqKernel makeDq(Type qIn, Type kvIn, int64_t threads, int64_t minBlocks) {
      MLIRContext &c = ctx();
      Type f32 = b.getF32Type(), idx = b.getIndexType();
      auto oType = rowsType(p.hq, elemType(c, p.dt));
      auto lseType = MemRefType::get({ShapedType::kDynamic, p.hq, ShapedType::kDynamic}, f32);
      SmallVector<Type> args = {qIn, kvIn, kvIn, qIn, oType, oType, lseType, oType, workspaceType(),
                                f32, f32,  idx,  idx};
      if (thd())
        args.append({offsetsType(), offsetsType()});
      AffineExpr sq = getAffineSymbolExpr(0, &c), batch = getAffineSymbolExpr(1, &c);
      AffineMap grid = AffineMap::get(
          0, 2, {sq.ceilDiv(kWorkspaceRows) * (kWorkspaceRows / dqRows()) * batch * p.hq}, &c);
      auto kernel = makeKernel(b, loc, "attn_bwd_dq_" + suffix(), args, threads, grid,
                               {11, -1, 6, 0}, cfg, /*cluster=*/1, minBlocks);
      Block *entry = entryOf(kernel, 13, 11);
      auto a = [&](unsigned i) { return entry->getArgument(i); };
      return {kernel, entry, a(0), a(1), a(2),  a(3),  a(4), a(5),
              a(6),   a(7),  a(8), a(9), a(10), a(11), a(12)};
    }

    /// The dK/dV kernel and its arguments (both targets alike, but for how
    /// K and V (`kvIn`), Q and dO (`qIn`) and the workspace (`wsIn`) come
    /// in): K, V, Q, dO, the workspace, dK, dV; scale * log2(e), scale, sq,
    /// sk; the partial sums and the head split; fused, `dqSums` (a tensor
    /// map of dQ's f32 sums, or with dqfrag their view); THD: the offsets
    /// (kept in cuQ and cuK); ordered, the flags; persist, the most
    /// programs the call allows (an index, the last argument but with
    /// take, whose counter the programs take their tiles from comes last:
    /// a view of words, as the offsets', zeroed by the workspace's kernel,
    /// or before a launch of this kernel alone). Programs: ceil(sk / bn) *
    /// batch * hkv * split (persist: at most the target's multiprocessors
    /// and that argument); dK's first size is the batch (BSHD) or batch *
    /// hkv (BHSD); THD: K's offsets are the batch and one.
    struct DkvKernel {
      tt::KernelOp kernel;
      Block *entry;
      Value k, v, q, dOIn, ws, dK, dV, scaleLog2, scale, sq, sk, partials, split, dqSums, flags,
          counter;
    };
    DkvKernel makeDkv(llvm::StringRef name, Type kvIn, Type qIn, Type wsIn, Type dqSums,
                      int64_t threads, int64_t minBlocks) {
      MLIRContext &c = ctx();
      Type f32 = b.getF32Type(), idx = b.getIndexType();
      auto kType = rowsType(p.hkv, elemType(c, p.dt));
      SmallVector<Type> args = {kvIn, kvIn, qIn, qIn, wsIn,           kType, kType,
                                f32,  f32,  idx, idx, partialsType(), idx};
      if (dqSums)
        args.push_back(dqSums);
      unsigned offsets = unsigned(args.size());
      if (thd())
        args.append({offsetsType(), offsetsType()});
      unsigned flags = unsigned(args.size());
      if (ordered())
        args.push_back(flagsType());
      if (s.persist) // (fused, not ordered)
        args.push_back(idx);
      if (s.take) // (the counter, a word)
        args.push_back(offsetsType());
      AffineExpr sk = getAffineSymbolExpr(0, &c), first = getAffineSymbolExpr(1, &c),
                 parts = getAffineSymbolExpr(2, &c), cap = getAffineSymbolExpr(3, &c);
      AffineExpr seqs = thd() ? (first - 1) * p.hkv : bshd() ? first * p.hkv : first;
      AffineExpr tiles = sk.ceilDiv(s.dkvKeys()) * seqs * parts;
      // (Persistent: one program a multiprocessor at most, and no more
      // than the call allows (multiprocessors it leaves free), each taking
      // its share of the tiles, eachTile in dkv().)
      SmallVector<int64_t> symbols = {10, -1, thd() ? int64_t(offsets) + 1 : 5, 0, 12, -1};
      if (s.persist)
        symbols.append({int64_t(args.size() - (s.take ? 2 : 1)), -1});
      AffineMap grid =
          s.persist ? AffineMap::get(
                          0, 4, {tiles, getAffineConstantExpr(p.target.smCount(), &c), cap}, &c)
                    : AffineMap::get(0, 3, {tiles}, &c);
      auto kernel = makeKernel(b, loc, name.str() + suffix(), args, threads, grid, symbols, cfg,
                               /*cluster=*/1, minBlocks);
      Block *entry = entryOf(kernel, offsets, 9);
      auto a = [&](unsigned i) { return entry->getArgument(i); };
      return {kernel,
              entry,
              a(0),
              a(1),
              a(2),
              a(3),
              a(4),
              a(5),
              a(6),
              a(7),
              a(8),
              a(9),
              a(10),
              a(11),
              a(12),
              dqSums ? a(13) : Value(),
              ordered() ? a(flags) : Value(),
              s.take ? entry->getArguments().back() : Value()};
    }

    std::pair<Value, Value> stageOf(Value it) { return {remu(it, s.stages), divu(it, s.stages)}; }
    /// The coordinates of row `row` of sequence `seq`, head `head` in a
    /// rowsType tensor of `heads` heads.
    SmallVector<Value> rowAt(Value seq, Value head, int64_t heads, Value row) {
      if (bshd())
        return {seq, row, mul(head, cst(p.d))};
      return {add(mul(seq, cst(heads)), head), row, cst(0)};
    }
    /// D = rowsum(dO * O) of the 64 query rows from `row0` of one head,
    /// 64 columns at a time, and LSE in the log2 domain (+inf past the
    /// sequence); both to the workspace, and returned (rows of the
    /// #tile.wgmma layout). Run by one warpgroup. THD: the sequence's rows
    /// from `ps.qStart`, its LSE rows past ps.qLen taken as +inf.
    std::pair<Value, Value> rowStats(Value o, Value dO, Value lse, Value ws, Value seq, Value head,
                                     Value bh, Value row0, const Seq &ps = {}) {
      MLIRContext &c = ctx();
      Type f32 = b.getF32Type();
      auto wg = tt::WgmmaLayoutAttr::get(&c);
      auto rowsLayout = tt::SliceLayoutAttr::get(&c, 1, wg);
      auto rowType = RankedTensorType::get({64}, f32, rowsLayout);
      auto chunkType = RankedTensorType::get({64, 64}, f32, wg);
      auto [oView, at] = rowIn(o, ps.qStart, ps.qLen, seq, head, p.hq, row0);
      Value doView = thd() ? tt::NarrowOp::create(b, loc, dO, ps.qStart, ps.qLen).getResult() : dO;
      Value dRow = splat(rowType, f32c(0.0));
      for (int64_t c0 = 0; c0 < p.d; c0 += 64) {
        SmallVector<Value> chunk = at;
        chunk.back() = add(at.back(), cst(c0));
        Value x = tt::LoadOp::create(b, loc, chunkType, doView, chunk, nullptr, nullptr);
        Value y = tt::LoadOp::create(b, loc, chunkType, oView, chunk, nullptr, nullptr);
        dRow = arith::AddFOp::create(b, loc, dRow,
                                     tt::ReduceOp::create(b, loc, rowType, tt::ReduceKind::sum,
                                                          arith::MulFOp::create(b, loc, x, y), 1));
      }
      Value lseRow = tt::LoadOp::create(b, loc, rowType, lse, ValueRange{seq, head, row0},
                                        b.getF64FloatAttr(INFINITY), nullptr);
      lseRow = arith::MulFOp::create(b, loc, lseRow, splat(rowType, f32c(M_LOG2E)));
      if (thd()) {
        // The forward's LSE rows past the sequence (up to the longest) hold
        // anything.
        lseRow = keepWhere(below(indexFrom(lseRow, 0, row0), ps.qLen), lseRow, INFINITY);
      }
      tt::StoreOp::create(b, loc, lseRow, ws, ValueRange{cst(0), bh, row0});
      tt::StoreOp::create(b, loc, dRow, ws, ValueRange{cst(1), bh, row0});
      return {lseRow, dRow};
    }

    /// Fused: the workspace's LSE * log2(e) and D of every query row (padded
    /// rows: +inf and 0), and dQ's f32 sums zeroed; a program per 64 rows.
    /// The words after the sums (the ordered additions' flags, the tile
    /// counter) zeroed too, 64 a program, so that the dK/dV kernel after it
    /// finds them at 0 with no memset of its own. THD: Q's offsets last;
    /// each sequence's rows of the sums (sumsStart) zeroed by the programs
    /// of its query tiles.
    void pre() {
      MLIRContext &c = ctx();
      Type dt = elemType(c, p.dt), f32 = b.getF32Type();
      auto oType = rowsType(p.hq, dt);
      auto lseType = MemRefType::get({ShapedType::kDynamic, p.hq, ShapedType::kDynamic}, f32);
      // O, dO, LSE, workspace, dQ's sums; sq; the words after the sums;
      // THD: Q's offsets.
      SmallVector<Type> args = {oType,
                                oType,
                                lseType,
                                workspaceType(),
                                rowsType(p.hq, f32),
                                b.getIndexType(),
                                MemRefType::get({ShapedType::kDynamic}, f32)};
      if (thd())
        args.push_back(offsetsType());
      AffineExpr sq = getAffineSymbolExpr(0, &c), batch = getAffineSymbolExpr(1, &c);
      AffineMap grid = AffineMap::get(
          0, 2, {sq.ceilDiv(kWorkspaceRows) * (kWorkspaceRows / 64) * batch * p.hq}, &c);
      auto kernel =
          makeKernel(b, loc, "attn_bwd_pre_" + suffix(), args, 128, grid, {5, -1, 2, 0}, cfg);
      Block *entry = &kernel.getBody().front();
      Value o = entry->getArgument(0), dO = entry->getArgument(1), lse = entry->getArgument(2);
      Value ws = entry->getArgument(3), dqSum = entry->getArgument(4);
      Value sqV = entry->getArgument(5);
      Value tiles = mul(ceilDiv(sqV, kWorkspaceRows), cst(kWorkspaceRows / 64));
      Value pid = tt::ProgramIdOp::create(b, loc, tt::Dim::x);
      Value row0 = mul(arith::RemUIOp::create(b, loc, pid, tiles), cst(64));
      Value bh = arith::DivUIOp::create(b, loc, pid, tiles);
      Value seq = divu(bh, p.hq), head = remu(bh, p.hq);
      Seq ps;
      if (thd()) {
        cuQ = entry->getArgument(7);
        std::tie(ps.qStart, ps.qLen) = sequenceRows(cuQ, seq, sqV);
      }
      rowStats(o, dO, lse, ws, seq, head, bh, row0, ps);
      auto accType = RankedTensorType::get({64, p.d}, f32, tt::WgmmaLayoutAttr::get(&c));
      if (thd()) {
        // (Stores are masked at the sums' end.)
        auto inside = scf::IfOp::create(
            b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, row0, ps.qLen),
            /*withElseRegion=*/false);
        OpBuilder::InsertionGuard g(b);
        b.setInsertionPointToStart(inside.thenBlock());
        tt::StoreOp::create(b, loc, splat(accType, f32c(0.0)), dqSum,
                            ValueRange{add(sumsStart(seq, ps.qStart), row0), mul(head, cst(p.d))});
      } else {
        tt::StoreOp::create(b, loc, splat(accType, f32c(0.0)), dqSum, rowAt(seq, head, p.hq, row0));
      }
      // (A program per 64 padded rows of each head, so as many words as
      // rows, at least 128 a head; the flags take kFlagsPerTile words a
      // kFusedQueryRows rows, at most half of them, leaving the counter's
      // 4 room.)
      static_assert(2 * attention::kFlagsPerTile <= attention::kFusedQueryRows,
                    "the workspace kernel's 64 words a program no longer cover the flags");
      auto wordsType = RankedTensorType::get(
          {64}, f32, tt::SliceLayoutAttr::get(&c, 1, tt::WgmmaLayoutAttr::get(&c)));
      tt::StoreOp::create(b, loc, splat(wordsType, f32c(0.0)), entry->getArgument(6),
                          ValueRange{mul(pid, cst(64))});
      tt::ReturnOp::create(b, loc);
      b.setInsertionPointAfter(kernel);
    }

    /// Fused: dQ = scale * its f32 sums, in dQ's type; a program per 64
    /// rows. THD: Q's offsets last; a program past its sequence's rows
    /// does nothing, the others store through a view of the sequence's rows.
    void convert() {
      MLIRContext &c = ctx();
      Type f32 = b.getF32Type();
      auto qType = rowsType(p.hq, elemType(c, p.dt));
      // dQ's sums, dQ; scale, sq; THD: Q's offsets.
      SmallVector<Type> args = {rowsType(p.hq, f32), qType, f32, b.getIndexType()};
      if (thd())
        args.push_back(offsetsType());
      AffineExpr sq = getAffineSymbolExpr(0, &c), first = getAffineSymbolExpr(1, &c);
      AffineExpr heads = thd() ? (first - 1) * p.hq : bshd() ? first * p.hq : first;
      AffineMap grid = AffineMap::get(0, 2, {sq.ceilDiv(64) * heads}, &c);
      auto kernel = makeKernel(b, loc, "attn_bwd_dq_convert_" + suffix(), args, 128, grid,
                               {3, -1, thd() ? 4 : 1, 0}, cfg);
      Block *entry = &kernel.getBody().front();
      Value dqSum = entry->getArgument(0), dQ = entry->getArgument(1);
      Value scale = entry->getArgument(2), sqV = entry->getArgument(3);
      Value blocks = ceilDiv(sqV, 64);
      Value pid = tt::ProgramIdOp::create(b, loc, tt::Dim::x);
      Value row0 = mul(arith::RemUIOp::create(b, loc, pid, blocks), cst(64));
      Value bh = arith::DivUIOp::create(b, loc, pid, blocks);
      Value seq = divu(bh, p.hq), head = remu(bh, p.hq);
      SmallVector<Value> at = rowAt(seq, head, p.hq, row0), from = at;
      Value out = dQ, qStart, qLen, sums0;
      if (thd()) {
        cuQ = entry->getArgument(4);
        std::tie(qStart, qLen) = sequenceRows(cuQ, seq, sqV);
        sums0 = sumsStart(seq, qStart);
        Value sumsRow = add(sums0, row0);
        // (Inside the sums, as a bulk copy could have added it.)
        Value work = arith::AndIOp::create(
            b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, row0, qLen),
            tileInside(dqSum, sumsRow));
        auto inside = scf::IfOp::create(b, loc, work, /*withElseRegion=*/false);
        b.setInsertionPointToStart(inside.thenBlock());
        out = tt::NarrowOp::create(b, loc, dQ, qStart, qLen);
        at = {row0, mul(head, cst(p.d))};
        from = {sumsRow, at[1]};
      }
      if (s.dqfrag) {
        // The consumers' parts, each in its registers' order (fragAt).
        int64_t cols = s.dqCols(p.d);
        auto part = RankedTensorType::get({64, cols}, f32, tt::WgmmaLayoutAttr::get(&c));
        for (int64_t k = 0; k < s.consumers; ++k) {
          Value sum = tt::LoadFragmentsOp::create(b, loc, part, dqSum,
                                                  fragAt(seq, head, divu(row0, 64), cst(k), sums0));
          SmallVector<Value> to = at;
          to.back() = add(to.back(), cst(k * cols));
          tt::StoreOp::create(b, loc, arith::MulFOp::create(b, loc, sum, splat(part, scale)), out,
                              to);
        }
      } else {
        auto tile = RankedTensorType::get({64, p.d}, f32, tt::WgmmaLayoutAttr::get(&c));
        Value sum = tt::LoadOp::create(b, loc, tile, dqSum, from, nullptr, nullptr);
        tt::StoreOp::create(b, loc, arith::MulFOp::create(b, loc, sum, splat(tile, scale)), out,
                            at);
      }
      b.setInsertionPointToEnd(entry);
      tt::ReturnOp::create(b, loc);
      b.setInsertionPointAfter(kernel);
    }

    /// dQ, and the workspace: LSE * log2(e) and D of every query row.
    void dq() {
      MLIRContext &c = ctx();
      Type dt = elemType(c, p.dt), f32 = b.getF32Type();
      Type idx = b.getIndexType();
      int64_t bm = s.bm();
      auto ringQ = tt::RingType::get(&c, 1, bm, p.d, dt);
      auto ringKV = tt::RingType::get(&c, s.stages, s.bn, p.d, dt);
      auto mapQ = tt::TensorMapType::get(&c, bm, 64, dt, 4);
      auto mapKV = tt::TensorMapType::get(&c, s.bn, 64, dt, 4);
      // Q, K, V and dO through tensor maps.
      DqKernel kk = makeDq(mapQ, mapKV, 128 * (s.consumers + 1), /*minBlocks=*/1);
      auto kernel = kk.kernel;
      Block *entry = kk.entry;
      Value o = kk.o, dO = kk.dO, lse = kk.lse, dQ = kk.dQ, ws = kk.ws;
      Value qMap = kk.q, kMap = kk.k, vMap = kk.v, doMap = kk.dOIn;
      Value scaleLog2 = kk.scaleLog2, scale = kk.scale, sqV = kk.sq, skV = kk.sk;

      Value rq = tt::AllocRingOp::create(b, loc, ringQ, nullptr);
      Value rdo = tt::AllocRingOp::create(b, loc, ringQ, nullptr);
      Value rk = tt::AllocRingOp::create(b, loc, ringKV, nullptr);
      Value rv = tt::AllocRingOp::create(b, loc, ringKV, nullptr);
      auto one = tt::BarriersType::get(&c, 1), bars = tt::BarriersType::get(&c, s.stages);
      Value qFull = tt::AllocBarriersOp::create(b, loc, one, 1, nullptr);
      Value doFull = tt::AllocBarriersOp::create(b, loc, one, 1, nullptr);
      Value kFull = tt::AllocBarriersOp::create(b, loc, bars, 1, nullptr);
      Value vFull = tt::AllocBarriersOp::create(b, loc, bars, 1, nullptr);
      Value kEmpty = tt::AllocBarriersOp::create(b, loc, bars, s.consumers, nullptr);
      Value vEmpty = tt::AllocBarriersOp::create(b, loc, bars, s.consumers, nullptr);

      DqTile t = placeDq(lse, sqV, skV);
      Value bh = t.bh, seq = t.seq, head = t.head, kvHead = t.kvHead, q0 = t.q0;
      Seq ps = t.ps;
      Value keysV = t.keys, kvTiles = t.kvTiles, whole = t.whole;

      auto ws_ = tt::WarpSpecializeOp::create(b, loc, s.consumers, 24, 240);
      {
        OpBuilder::InsertionGuard guard(b);
        b.createBlock(&ws_.getProducer());
        auto [qRow, qBatch] = tmaRow(ps.qStart, seq, q0);
        tt::TmaLoadOp::create(b, loc, qMap, qRow, cst(0), ValueRange{head, qBatch}, rq, cst(0),
                              qFull, cst(0));
        tt::TmaLoadOp::create(b, loc, doMap, qRow, cst(0), ValueRange{head, qBatch}, rdo, cst(0),
                              doFull, cst(0));
        loop(cst(0), kvTiles, {}, [&](Value j, ValueRange) {
          auto [stage, round] = stageOf(j);
          auto [kRow, kBatch] = tmaRow(ps.kStart, seq, mul(j, cst(s.bn)));
          tt::BarrierWaitOp::create(b, loc, kEmpty, stage, add(round, cst(1)));
          tt::TmaLoadOp::create(b, loc, kMap, kRow, cst(0), ValueRange{kvHead, kBatch}, rk, stage,
                                kFull, stage);
          tt::BarrierWaitOp::create(b, loc, vEmpty, stage, add(round, cst(1)));
          tt::TmaLoadOp::create(b, loc, vMap, kRow, cst(0), ValueRange{kvHead, kBatch}, rv, stage,
                                vFull, stage);
          return SmallVector<Value>{};
        });
        tt::YieldOp::create(b, loc);
      }
      {
        OpBuilder::InsertionGuard guard(b);
        Block *body = b.createBlock(&ws_.getConsumer());
        Value consumer = body->addArgument(idx, loc);
        Value myRows = mul(consumer, cst(64));
        Value row0 = add(q0, myRows);
        auto wg = tt::WgmmaLayoutAttr::get(&c);
        auto sType = RankedTensorType::get({64, s.bn}, f32, wg);
        auto accType = RankedTensorType::get({64, p.d}, f32, wg);

        std::pair<Value, Value> stats = rowStats(o, dO, lse, ws, seq, head, bh, row0, ps);
        Value lseRow = stats.first, dRow = stats.second;

        tt::BarrierWaitOp::create(b, loc, qFull, cst(0), cst(0));
        tt::BarrierWaitOp::create(b, loc, doFull, cst(0), cst(0));
        Value zeroS = splat(sType, f32c(0.0));
        Value negLse = tt::BroadcastOp::create(b, loc, sType,
                                               arith::NegFOp::create(b, loc, lseRow).getResult());
        Value dBcast = tt::BroadcastOp::create(b, loc, sType, dRow);
        auto step = [&](Value j, ValueRange carried, bool masked) -> SmallVector<Value> {
          auto [stage, round] = stageOf(j);
          tt::BarrierWaitOp::create(b, loc, kFull, stage, round);
          // The scores' products overwrite their accumulators: with zeros
          // written beside S's product in flight, ptxas waited for it
          // before starting dP's (C7517), which undid the overlap.
          Value sc = tt::DotOp::create(b, loc, sType, rq, cst(0), myRows, rk, stage, cst(0), zeroS,
                                       false, false, s.overlap, /*overwrite=*/true);
          Value dp;
          if (s.overlap) {
            // dP's product starts now, or with `sfirst` once S's is done: S
            // waited for with dP's in flight, ptxas waits for both before
            // the first exponential; waited for alone, the exponentials run
            // under dP's product (bench/NOTES.md b8).
            if (s.sfirst)
              sc = tt::DotWaitOp::create(b, loc, ValueRange{sc}, 0).getResult(0);
            tt::BarrierWaitOp::create(b, loc, vFull, stage, round);
            dp = tt::DotOp::create(b, loc, sType, rdo, cst(0), myRows, rv, stage, cst(0), zeroS,
                                   false, false, true, /*overwrite=*/true);
            if (!s.sfirst)
              sc = tt::DotWaitOp::create(b, loc, ValueRange{sc}, 1).getResult(0);
          }
          if (masked)
            sc = maskRows(sc, mul(j, cst(s.bn)), keysV, row0);
          Value pr = math::Exp2Op::create(
              b, loc, math::FmaOp::create(b, loc, sc, splat(sType, scaleLog2), negLse));
          if (s.overlap) {
            dp = tt::DotWaitOp::create(b, loc, ValueRange{dp}, 0).getResult(0);
          } else {
            tt::BarrierWaitOp::create(b, loc, vFull, stage, round);
            dp = tt::DotOp::create(b, loc, sType, rdo, cst(0), myRows, rv, stage, cst(0), zeroS,
                                   false, false, false, /*overwrite=*/true);
          }
          tt::BarrierArriveOp::create(b, loc, vEmpty, stage);
          Value ds = arith::MulFOp::create(b, loc, pr, arith::SubFOp::create(b, loc, dp, dBcast));
          Value ds16 =
              arith::TruncFOp::create(b, loc, RankedTensorType::get({64, s.bn}, dt, wg), ds);
          Value acc = tt::DotRegOp::create(b, loc, accType, ds16, rk, stage, cst(0), carried[0],
                                           true, false);
          tt::BarrierArriveOp::create(b, loc, kEmpty, stage);
          return {acc};
        };
        SmallVector<Value> acc = {splat(accType, f32c(0.0))};
        acc = loop(cst(0), whole, acc, [&](Value j, ValueRange c) { return step(j, c, false); });
        acc = loop(whole, kvTiles, acc, [&](Value j, ValueRange c) { return step(j, c, true); });
        storeDq(acc[0], scale, dQ, ps, seq, head, row0);
        tt::YieldOp::create(b, loc);
      }
      b.setInsertionPointToEnd(entry);
      tt::ReturnOp::create(b, loc);
      b.setInsertionPointAfter(kernel);
    }

    /// dK and dV.
    void dkv() {
      MLIRContext &c = ctx();
      Type dt = elemType(c, p.dt), f32 = b.getF32Type();
      Type idx = b.getIndexType();
      int64_t bn = s.dkvKeys();
      auto ringKV = tt::RingType::get(&c, 1, bn, p.d, dt);
      auto ringQ = tt::RingType::get(&c, s.stages, s.kvBm, p.d, dt);
      auto mapKV = tt::TensorMapType::get(&c, bn, 64, dt, 4);
      auto mapQ = tt::TensorMapType::get(&c, s.kvBm, 64, dt, 4);
      // The workspace's LSE and D of a step's queries come in with its Q
      // and dO, each in a ring of its own (row 0 of a box of 8 rows: the
      // rows below it are other heads' or past the end, zeros), and are
      // read from shared memory where they are used: loaded from global
      // memory before the wait for Q, they cost a quarter of a step (ncu:
      // per-column bounds checks, two predicated loads into one register
      // pair, 32 registers held across the products; bench/NOTES.md b5).
      auto ringStat = tt::RingType::get(&c, s.stages, 8, s.kvBm, f32);
      auto mapStat = tt::TensorMapType::get(&c, 8, 32, f32, 3);
      // K, V, Q and dO through tensor maps, the workspace through one
      // ([2, b * hq, rows]); fused, the map of dQ's f32 sums (as Q's, rows
      // padded), whose boxes are a consumer's panels, or with dqfrag the
      // sums' view (fragAt). (Fused, named for what it computes: dK, dV and
      // dQ's parts.)
      DkvKernel kk = makeDkv(s.fused ? "attn_bwd_fused_" : "attn_bwd_dkdv_", mapKV, mapQ, mapStat,
                             !s.fused   ? Type()
                             : s.dqfrag ? Type(rowsType(p.hq, f32))
                                        : Type(tt::TensorMapType::get(&c, s.kvBm, 32, f32, 4)),
                             128 * (s.consumers + 1), /*minBlocks=*/1);
      auto kernel = kk.kernel;
      Block *entry = kk.entry;
      Value kMap = kk.k, vMap = kk.v, qMap = kk.q, doMap = kk.dOIn, statMap = kk.ws;
      Value dK = kk.dK, dV = kk.dV, scaleLog2 = kk.scaleLog2, scale = kk.scale;
      Value sqV = kk.sq, skV = kk.sk, partials = kk.partials, split = kk.split, dqSums = kk.dqSums;
      Value flags = kk.flags;

      Value rk = tt::AllocRingOp::create(b, loc, ringKV, nullptr);
      Value rv = tt::AllocRingOp::create(b, loc, ringKV, nullptr);
      Value rq = tt::AllocRingOp::create(b, loc, ringQ, nullptr);
      Value rdo = tt::AllocRingOp::create(b, loc, ringQ, nullptr);
      Value rlse = tt::AllocRingOp::create(b, loc, ringStat, nullptr);
      Value rd = tt::AllocRingOp::create(b, loc, ringStat, nullptr);
      auto one = tt::BarriersType::get(&c, 1), bars = tt::BarriersType::get(&c, s.stages);
      Value kFull = tt::AllocBarriersOp::create(b, loc, one, 1, nullptr);
      Value vFull = tt::AllocBarriersOp::create(b, loc, one, 1, nullptr);
      Value qFull = tt::AllocBarriersOp::create(b, loc, bars, 1, nullptr);
      Value doFull = tt::AllocBarriersOp::create(b, loc, bars, 1, nullptr);
      Value statFull = tt::AllocBarriersOp::create(b, loc, bars, 2, nullptr);
      Value empty = tt::AllocBarriersOp::create(b, loc, bars, s.consumers, nullptr);
      // Fused: each step's dS^T, every consumer's keys as rows, in one of
      // kDsStages stages; a stage is whole once every consumer arrived on its
      // barrier.
      // And each consumer's part of dQ (f32), added into the sums by TMA
      // (dqfrag: by a bulk copy).
      Value rds, dsFull, rdq;
      if (s.fused) {
        rds = tt::AllocRingOp::create(b, loc, tt::RingType::get(&c, kDsStages, bn, s.kvBm, dt),
                                      nullptr);
        rdq = tt::AllocRingOp::create(
            b, loc, tt::RingType::get(&c, s.consumers, s.kvBm, s.dqCols(p.d), f32), nullptr);
        dsFull = tt::AllocBarriersOp::create(b, loc, tt::BarriersType::get(&c, kDsStages),
                                             s.consumers, nullptr);
      }
      // Ordered: the helper adds the consumers' parts: full once every
      // consumer stored its part into its stage of `rdq`, free once the
      // helper's additions have read them.
      Value dqFull, dqFree;
      if (ordered()) {
        auto perConsumer = tt::BarriersType::get(&c, s.consumers);
        dqFull = tt::AllocBarriersOp::create(b, loc, perConsumer, 1, nullptr);
        dqFree = tt::AllocBarriersOp::create(b, loc, perConsumer, 1, nullptr);
      }
      // qsplit: the step's P^T (stage 0) and dS^T (stage 1), each
      // consumer's half of the queries in its half of the columns; full
      // once both consumers stored theirs, free once both consumers' dV and
      // dK products of the step are done.
      Value rx, xFull, xFree;
      if (s.qsplit) {
        rx = tt::AllocRingOp::create(b, loc, tt::RingType::get(&c, 2, bn, s.kvBm, dt), nullptr);
        xFull = tt::AllocBarriersOp::create(b, loc, one, s.consumers, nullptr);
        xFree = tt::AllocBarriersOp::create(b, loc, one, s.consumers, nullptr);
      }

      DkvTile t = placeDkv(sqV, skV, split, bn);
      Value seq = t.seq, kvHead = t.kvHead, heads = t.heads, head0 = t.head0, n0 = t.n0;
      Seq ps = t.ps;
      Value mEnd = t.mEnd, mStart = t.mStart, mMasked = t.mMasked;
      Value count = sub(mEnd, mStart);
      // The keys of the tile's sequence (THD: its own, at most sk).
      auto keysOfTile = [&] { return thd() ? ps.kLen : skV; };
      // Persistent: the grid's tiles (as the grid counts them), every
      // grid-size-th from the program's index taken in turn; the consumers
      // arrive on kvFree once done with a tile's K and V, which the
      // producer waits for before it loads the next tile's. eachTile(init,
      // body) runs body(j, carried) for the program's tile, or (persistent)
      // for each of its tiles (j-th, carrying `init`), the tile's place
      // (seq, heads, n0, ...) set first.
      // With take (TakenTiles): the producer takes each tile from the
      // counter once the consumers are done with the tile whose place it
      // last wrote into the slot, writes the tile and its place (kSlotWords
      // words: the tile, seq, kvHead, head0, n0) into one of two slots of
      // shared memory and marks it full; each consumer waits for that and
      // reads them (no division of its own beside dK and dV: with the place
      // computed from the tile, its registers spilled 90-100 bytes), and
      // frees the slot once done with the tile; a tile past the last ends
      // the program.
      constexpr int64_t kSlotWords = 5;
      Value tiles, kvFree;
      TakenTiles taken;
      auto countTiles = [&] {
        // (THD: the sequences from K's offsets, as the grid counts them.)
        Value first = batchOf(dK);
        Value seqs = bshd() || thd() ? mul(first, cst(p.hkv)) : first;
        return mul(mul(ceilDiv(skV, bn), seqs), split);
      };
      if (s.persist) {
        if (!s.take) // (take counts them in each region, takeTiles)
          tiles = countTiles();
        kvFree = tt::AllocBarriersOp::create(b, loc, one, s.consumers, nullptr);
      }
      if (s.take)
        taken = TakenTiles::create(*this, s.consumers, kSlotWords);
      // The tile's place (seq, heads, n0, ...) for tile `at` of the grid's
      // order.
      auto placeAt = [&](Value at) {
        DkvTile tile = placeDkv(sqV, skV, split, bn, at, tiles);
        seq = tile.seq, kvHead = tile.kvHead, heads = tile.heads, head0 = tile.head0;
        n0 = tile.n0, ps = tile.ps;
        mEnd = tile.mEnd, mStart = tile.mStart, mMasked = tile.mMasked;
        count = sub(mEnd, mStart);
      };
      // Take: the j-th tile the program takes (producer: from the counter;
      // a consumer: from the producer's slot) while there is one.
      auto takeTiles = [&](bool producer, ValueRange init,
                           llvm::function_ref<SmallVector<Value>(Value, ValueRange)> body) {
        // (j, the tile and the tile count in 32 bits; the count computed
        // again in each region: computed once before them, at head dim 64
        // under a causal mask, it was spilled there and read back in each.)
        tiles = countTiles();
        // (Taken when the producer is done with the last tile's loads, not
        // a tile ahead: taken ahead, the programs held twice as many heads'
        // queries at once, and at GQA's KV8 S8192 causal the kernel took
        // 45 % longer; bench/NOTES.md b26.)
        SmallVector<Value> inits = {arith::ConstantIntOp::create(b, loc, b.getI32Type(), 0)};
        inits.append(init.begin(), init.end());
        auto each = [&](Value at, ValueRange args) {
          Value j = toIndex(args[0]), slot = remu(j, 2);
          // The tile's steps, and the next j with what they carry.
          auto step = [&] {
            SmallVector<Value> next = {add(args[0], cstLike(args[0], 1))};
            llvm::append_range(next, body(j, args.drop_front()));
            return next;
          };
          if (producer) {
            placeAt(toIndex(at));
            auto give = [&] {
              taken.handOut(*this, slot, {seq, kvHead, head0, n0});
              return step();
            };
            // THD (fused): a tile wholly past its sequence's keys has
            // nothing to compute or store. The producer hands it to no
            // consumer and takes the next one from the counter into the
            // same slot (j unchanged: the slot's barriers, and the rings'
            // rounds, count only the tiles handed out). The grid counts
            // every sequence as long as the longest, so most of a pack of
            // short documents' tiles are such.
            if (!thd() || !s.fused) {
              scf::YieldOp::create(b, loc, give());
              return;
            }
            Value keys = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, n0, ps.kLen);
            scf::YieldOp::create(b, loc, ifElse(keys, args, give));
            return;
          }
          // A consumer: the place in one read (the warpgroup meets once for
          // it; read with the tile before the loop's condition, the four
          // words passed through it spilled 8-12 bytes at head dim 128).
          SmallVector<Value> place = taken.read(*this, slot);
          seq = place[0], kvHead = place[1], head0 = place[2], n0 = place[3];
          SmallVector<Value> next = step();
          taken.release(*this, slot);
          scf::YieldOp::create(b, loc, next);
        };
        SmallVector<Value> out = taken.loop(*this, producer, kk.counter, toI32(tiles), inits, each);
        return SmallVector<Value>(ArrayRef<Value>(out).drop_front());
      };
      auto eachTile = [&](bool producer, ValueRange init,
                          llvm::function_ref<SmallVector<Value>(Value, ValueRange)> body) {
        if (!s.persist)
          return body(Value(), init);
        if (s.take)
          return takeTiles(producer, init, body);
        // Round j's tiles [j grid, (j + 1) grid) go to the programs in
        // their order in even rounds, in the reverse order in odd ones (so
        // that, the tiles longest first, no program takes the longest of
        // every round); the last round's, fewer, to the first programs or
        // (odd) the last.
        Value pid = tt::ProgramIdOp::create(b, loc, tt::Dim::x);
        Value grid = tt::NumProgramsOp::create(b, loc, tt::Dim::x);
        Value whole = arith::DivUIOp::create(b, loc, tiles, grid);
        Value left = arith::RemUIOp::create(b, loc, tiles, grid);
        auto isOdd = [&](Value x) {
          return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne, remu(x, 2), cst(0));
        };
        Value odd = isOdd(whole);
        Value back = sub(sub(grid, cst(1)), pid);
        Value extra = arith::SelectOp::create(
            b, loc, odd, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, back, left),
            arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, pid, left));
        Value mine = add(whole, arith::SelectOp::create(b, loc, extra, cst(1), cst(0)));
        return loop(cst(0), mine, init, [&](Value j, ValueRange carried) {
          Value at0 = arith::SelectOp::create(b, loc, isOdd(j), back, pid);
          placeAt(add(mul(j, grid), at0));
          return body(j, carried);
        });
      };
      // A consumer's part into its stage of `rdq` (dqfrag: in its
      // registers' order), and stage k's part added into the sums (query
      // tile mi of `head`): by TMA through the sums' tensor map, a
      // reduction per panel, or (dqfrag) by one bulk copy into the block
      // fragAt places.
      auto storePart = [&](Value dq, Value k) {
        tt::StoreRingOp::create(b, loc, dq, rdq, k, cst(0), Value(), s.dqfrag);
      };
      // THD: the tile's rows from the sequence's first in the sums
      // (`sums0`, its sumsStart; unused otherwise); a bulk copy only where
      // they lie inside the sums (the tensor map's copies are cut at its
      // edges).
      auto addPart = [&](Value k, Value head, Value mi, Value sums0) {
        if (s.dqfrag) {
          SmallVector<Value> at = fragAt(seq, head, mi, k, sums0);
          if (!thd()) {
            tt::BulkReduceOp::create(b, loc, rdq, k, dqSums, at);
            return;
          }
          auto inside = scf::IfOp::create(b, loc, tileInside(dqSums, at[0]),
                                          /*withElseRegion=*/false);
          OpBuilder::InsertionGuard g(b);
          b.setInsertionPointToStart(inside.thenBlock());
          tt::BulkReduceOp::create(b, loc, rdq, k, dqSums, at);
          return;
        }
        Value row = mul(mi, cst(s.kvBm));
        if (thd())
          row = add(sums0, row);
        tt::TmaStoreOp::create(b, loc, rdq, k, dqSums, row, mul(k, cst(s.dqCols(p.d))),
                               ValueRange{head, thd() ? cst(0) : seq}, /*reduce=*/true);
      };

      // (take with one consumer: the producer's register budget 40, not
      // 24: with 24, one value spilled at head dim 64 under a causal mask;
      // with two consumers the register file holds no more than 24.)
      auto ws_ = tt::WarpSpecializeOp::create(b, loc, s.consumers,
                                              s.take && s.consumers == 1 ? 40 : 24, 240);
      {
        OpBuilder::InsertionGuard guard(b);
        b.createBlock(&ws_.getProducer());
        // (Persistent: the steps counted over the program's tiles, for the
        // ring's stages and rounds; a tile's K and V once the consumers are
        // done with the last one's: round -1 at the first, complete.)
        Value steps0 =
            s.take ? arith::ConstantIntOp::create(b, loc, b.getI32Type(), 0).getResult() : cst(0);
        eachTile(/*producer=*/true, s.persist ? ValueRange{steps0} : ValueRange{},
                 [&](Value j, ValueRange carried) {
                   if (s.persist)
                     tt::BarrierWaitOp::create(b, loc, kvFree, cst(0), sub(j, cst(1)));
                   auto loadKv = [&] {
                     auto [kRow, kBatch] = tmaRow(ps.kStart, seq, n0);
                     tt::TmaLoadOp::create(b, loc, kMap, kRow, cst(0), ValueRange{kvHead, kBatch},
                                           rk, cst(0), kFull, cst(0));
                     tt::TmaLoadOp::create(b, loc, vMap, kRow, cst(0), ValueRange{kvHead, kBatch},
                                           rv, cst(0), vFull, cst(0));
                   };
                   if (thd() && s.fused && !s.take) {
                     // THD, fused (tiles not taken from the counter, where
                     // the producer hands such a tile to no consumer at
                     // all): the grid counts every sequence as long as the
                     // longest, so most of a pack of short documents' tiles
                     // lie past their sequence's keys. Such a tile takes no
                     // step and stores nothing: its K and V are not loaded
                     // (the barriers complete their phase all the same, so
                     // the turns keep their rounds).
                     Value keys =
                         arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, n0, ps.kLen);
                     auto some = scf::IfOp::create(b, loc, keys, /*withElseRegion=*/true);
                     OpBuilder::InsertionGuard g(b);
                     b.setInsertionPointToStart(some.thenBlock());
                     loadKv();
                     b.setInsertionPointToStart(some.elseBlock());
                     tt::BarrierArriveOp::create(b, loc, kFull, cst(0));
                     tt::BarrierArriveOp::create(b, loc, vFull, cst(0));
                   } else {
                     loadKv();
                   }
                   // Step `it` loads query tile mi of query head `head`, both carried
                   // (a division by the runtime tile count would cost the producer's
                   // few registers).
                   // (Rotated: from its own first tile, rotated's comment.)
                   Value first;
                   if (rotated()) {
                     Value keyTiles = ceilDiv(keysOfTile(), bn);
                     Value lastTurn = sub(sub(keyTiles, cst(1)), divu(n0, bn));
                     first = walkOf(lastTurn, keyTiles, mStart, mEnd).first;
                   }
                   Value mFirst = first ? first : mStart;
                   // (take: the steps counted in 32 bits, one register fewer in the
                   // producer's few beside the taken tile's.)
                   Value from = s.persist ? carried[0] : cst(0);
                   Value to = add(from, s.take ? toI32(mul(count, heads)) : mul(count, heads));
                   loop(from, to, {head0, mFirst}, [&](Value it, ValueRange at) {
                     auto [stage, round] = stageOf(s.take ? toIndex(it) : it);
                     Value head = at[0], mi = at[1], m0 = mul(mi, cst(s.kvBm));
                     tt::BarrierWaitOp::create(b, loc, empty, stage, add(round, cst(1)));
                     auto [qRow, qBatch] = tmaRow(ps.qStart, seq, m0);
                     tt::TmaLoadOp::create(b, loc, qMap, qRow, cst(0), ValueRange{head, qBatch}, rq,
                                           stage, qFull, stage);
                     tt::TmaLoadOp::create(b, loc, doMap, qRow, cst(0), ValueRange{head, qBatch},
                                           rdo, stage, doFull, stage);
                     Value bhq = add(mul(seq, cst(p.hq)), head);
                     tt::TmaLoadOp::create(b, loc, statMap, bhq, m0, ValueRange{cst(0)}, rlse,
                                           stage, statFull, stage);
                     tt::TmaLoadOp::create(b, loc, statMap, bhq, m0, ValueRange{cst(1)}, rd, stage,
                                           statFull, stage);
                     return tileAfter(head, mi, mStart, mEnd, first);
                   });
                   return SmallVector<Value>{to};
                 });
        tt::YieldOp::create(b, loc);
      }
      {
        OpBuilder::InsertionGuard guard(b);
        Block *body = b.createBlock(&ws_.getConsumer());
        Value consumer = body->addArgument(idx, loc);
        // The consumer's keys (rows of K and V, of dK and dV) and its
        // columns of dK and dV: 64 keys each and every column, or with
        // dsplit the program's 64 keys and half the columns each.
        Value myRows = s.dsplit ? cst(0) : mul(consumer, cst(64));
        Value myCols = s.dsplit ? mul(consumer, cst(s.dkvCols(p.d))) : cst(0);
        Value key0 = s.persist ? Value() : add(n0, myRows);
        auto wg = tt::WgmmaLayoutAttr::get(&c);
        auto colType = RankedTensorType::get({s.kvBm}, f32, tt::SliceLayoutAttr::get(&c, 0, wg));
        auto sType = RankedTensorType::get({64, s.kvBm}, f32, wg);
        auto pType = RankedTensorType::get({64, s.kvBm}, dt, wg);
        auto accType = RankedTensorType::get({64, s.dkvCols(p.d)}, f32, wg);
        Value zeroS = splat(sType, f32c(0.0));

        if (!s.persist) {
          tt::BarrierWaitOp::create(b, loc, kFull, cst(0), cst(0));
          tt::BarrierWaitOp::create(b, loc, vFull, cst(0), cst(0));
        }
        // Fused: dQ's part of each step, dS K over the program's keys for
        // this consumer's columns (dS^T read transposed: the queries as
        // rows), comes from the dS^T every consumer stored into a stage
        // (tile.store_ring). It is computed one step late: step i waits
        // until every consumer stored dS^T(i - 1), stores its own dS^T(i),
        // then computes step i - 1's part. So a consumer waits for the
        // other's dS^T of a step one step later than it would for its own
        // step's part, and the two may drift apart by up to a step
        // (computed in the same step, every step met the other consumer at
        // a barrier; bench/NOTES.md b13, b14). Once every consumer stored
        // dS^T(i - 1), each has finished step i - 2 and its part of step
        // i - 3, so none still reads the stage dS^T(i) goes to: kDsStages =
        // 3 are enough. `done` steps came before; the barrier's round of
        // step done - 1 (-1 for step -1: complete from the start; its part
        // reads a stage not yet written and is not added). (The stages'
        // arithmetic in 32 bits: divisions by 3 in 64 took instructions and
        // registers of their own.)
        int64_t dqCols = s.dqCols(p.d);
        auto dqType = RankedTensorType::get({s.kvBm, dqCols}, f32, wg);
        auto dsStageOf = [&](Value done) { return toIndex(remu(toI32(done), kDsStages)); };
        auto waitPrevDs = [&](Value done) {
          Value at = add(toI32(done), cstLike(toI32(done), kDsStages - 1));
          Value stage = toIndex(remu(at, kDsStages));
          tt::BarrierWaitOp::create(b, loc, dsFull, stage,
                                    toIndex(sub(divu(at, kDsStages), cstLike(at, 1))));
          return stage;
        };
        // The part, in the scores' registers (overwrite: the zero tile
        // passed is not read).
        auto dqPartOf = [&](Value stage, bool async) -> Value {
          return tt::DotOp::create(b, loc, dqType, rds, stage, cst(0), rk, cst(0),
                                   mul(consumer, cst(dqCols)), splat(dqType, f32c(0.0)), true, true,
                                   async, /*overwrite=*/true);
        };
        // The part goes out through shared memory, where `done` > 0 (or
        // `any`: persistent, where the step is not its tile's first): once
        // the previous addition has read the consumer's stage of `rdq`, the
        // part is written there and one thread adds it into the sums (query
        // tile mi of `head`) with TMA (a reduction per panel, not a red
        // instruction per pair of elements; the scale comes with the
        // conversion), or with dqfrag one bulk copy (addPart). Ordered:
        // the helper adds it, in its turn (its region's comment); the
        // consumer waits only for its stage to be free (the addition before,
        // `done` - 2: round -1 at the first, complete from the start) and
        // says the part is in. (THD: the tile's sequence's rows in the sums
        // and its keys, read once a tile, not once a step: `tileSums` and
        // `tileKeys`, set before the tile's steps.)
        Value tileSums, tileKeys;
        auto addDqPart = [&](Value dq, Value done, Value head, Value mi, Value any = Value()) {
          if (!any)
            any = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne, done, cst(0));
          auto some = scf::IfOp::create(b, loc, any, /*withElseRegion=*/false);
          OpBuilder::InsertionGuard g(b);
          b.setInsertionPointToStart(some.thenBlock());
          if (ordered()) {
            tt::BarrierWaitOp::create(b, loc, dqFree, consumer, sub(done, cst(2)));
            storePart(dq, consumer);
            tt::BarrierArriveOp::create(b, loc, dqFull, consumer);
            return;
          }
          tt::TmaStoreWaitOp::create(b, loc, 0, /*read=*/true);
          storePart(dq, consumer);
          addPart(consumer, head, mi, tileSums);
        };
        // The rest of a fused step (carried: dK, dV and the step counter):
        // dS^T into this consumer's rows of its stage, the previous step's
        // part of dQ and dK's product; with overlap the part runs behind
        // dV's product and ahead of dK's, and goes out while dK's runs
        // (FlashAttention-3's order). The previous step's query tile and
        // head: every head of the program runs the same query tiles,
        // [firstTile, endTile) (computed here from the bounds the loops
        // keep, not carried through them beside the products' registers).
        Value firstTile, endTile, firstHead;
        auto tileBefore = [&](Value head, Value mi) -> std::pair<Value, Value> {
          Value mi32 = toI32(mi);
          Value wrap = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, mi32, firstTile);
          Value prevMi = arith::SelectOp::create(b, loc, wrap, sub(endTile, cstLike(mi32, 1)),
                                                 sub(mi32, cstLike(mi32, 1)));
          Value at = toIndex(prevMi);
          return {arith::SelectOp::create(b, loc, wrap, sub(head, cst(1)), head), at};
        };
        auto fusedTail = [&](Value head, Value mi, ValueRange carried, bool overlap, Value p16,
                             Value dv, Value ds16) -> SmallVector<Value> {
          Value done = carried[2];
          Value stage = stageOf(done).first;
          // (Wait, then store: storing dS^T(i) before every consumer stored
          // dS^T(i - 1) would need a fourth stage.)
          Value prevStage = waitPrevDs(done);
          tt::StoreRingOp::create(b, loc, ds16, rds, dsStageOf(done), myRows);
          tt::BarrierArriveOp::create(b, loc, dsFull, dsStageOf(done));
          Value dq = dqPartOf(prevStage, overlap);
          Value dk = tt::DotRegOp::create(b, loc, accType, ds16, rq, stage, myCols, carried[0],
                                          true, overlap);
          if (overlap) {
            auto first = tt::DotWaitOp::create(b, loc, ValueRange{dv, p16, dq}, 1);
            dv = first.getResult(0);
            dq = first.getResult(2);
          }
          auto [prevHead, prevMi] = tileBefore(head, mi);
          // (Persistent: `done` counts the program's steps over its tiles; a
          // tile's first step has no part before it, where tileBefore goes
          // back past the tile's first head.)
          Value any;
          if (s.persist)
            any = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, prevHead, firstHead);
          addDqPart(dq, done, prevHead, prevMi, any);
          if (overlap)
            dk = tt::DotWaitOp::create(b, loc, ValueRange{dk, ds16}, 0).getResult(0);
          tt::BarrierArriveOp::create(b, loc, empty, stage);
          return {dk, dv, add(done, cst(1))};
        };
        // P^T from S^T and each column's LSE (log2 domain, read from shared
        // memory): exp2(S^T * scale * log2(e) - LSE); with `cap` (a zero
        // tile of S^T's type) the exponent capped at 0 first (fused: the
        // step's comment says why).
        auto probsT = [&](Value st, Value lseCol, Value cap) -> Value {
          Type type = st.getType();
          Value negLse = tt::BroadcastOp::create(b, loc, type,
                                                 arith::NegFOp::create(b, loc, lseCol).getResult());
          Value exponent = math::FmaOp::create(
              b, loc, st, splat(cast<RankedTensorType>(type), scaleLog2), negLse);
          if (cap)
            exponent = arith::MinNumFOp::create(b, loc, exponent, cap);
          return math::Exp2Op::create(b, loc, exponent);
        };
        // dS^T = P^T (dP^T - D), each column's D.
        auto gradT = [&](Value pt, Value dpt, Value dCol) -> Value {
          return arith::MulFOp::create(
              b, loc, pt,
              arith::SubFOp::create(b, loc, dpt,
                                    tt::BroadcastOp::create(b, loc, dpt.getType(), dCol)));
        };
        // qsplit, one step: each consumer computes S^T and dP^T for the
        // program's 64 keys and its half of the step's queries (every score
        // product once, where dsplit alone computes each twice, and 64
        // queries a step where it takes 32), their exponentials and dS^T,
        // and stores P^T and dS^T into its half of the exchange's columns;
        // once both halves are there, dV's and dK's products read them whole
        // for the consumer's half of the columns (A from shared memory). Those
        // two are left running into the next step, which waits for them
        // behind its own score products and only then frees the step's Q
        // and dO and the exchange. Carried: dK and dV (in flight past the
        // first step) and the step counter.
        int64_t half = s.kvBm / 2;
        auto qsplitStep = [&](Value mi, ValueRange carried, bool masked) -> SmallVector<Value> {
          Value done = carried[2];
          auto [stage, round] = stageOf(done);
          Value myQ = mul(consumer, cst(half)), m0 = mul(mi, cst(s.kvBm));
          auto hType = RankedTensorType::get({64, half}, f32, wg);
          auto h16Type = RankedTensorType::get({64, half}, dt, wg);
          auto hColType = RankedTensorType::get({half}, f32, tt::SliceLayoutAttr::get(&c, 0, wg));
          Value zeroH = splat(hType, f32c(0.0));
          tt::BarrierWaitOp::create(b, loc, qFull, stage, round);
          Value st = tt::DotOp::create(b, loc, hType, rk, cst(0), cst(0), rq, stage, myQ, zeroH,
                                       false, false, true, /*overwrite=*/true);
          tt::BarrierWaitOp::create(b, loc, doFull, stage, round);
          Value dpt = tt::DotOp::create(b, loc, hType, rv, cst(0), cst(0), rdo, stage, myQ, zeroH,
                                        false, false, true, /*overwrite=*/true);
          // The previous step's dV and dK products, started before these
          // two, are done once at most these two run: its Q and dO go back
          // to the producer and the exchange is free (on this side).
          auto prev = tt::DotWaitOp::create(b, loc, ValueRange{carried[0], carried[1]}, 2);
          {
            Value any = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne, done, cst(0));
            auto some = scf::IfOp::create(b, loc, any, /*withElseRegion=*/false);
            OpBuilder::InsertionGuard g(b);
            b.setInsertionPointToStart(some.thenBlock());
            tt::BarrierArriveOp::create(b, loc, empty, stageOf(add(done, cst(s.stages - 1))).first);
            tt::BarrierArriveOp::create(b, loc, xFree, cst(0));
          }
          tt::BarrierWaitOp::create(b, loc, statFull, stage, round);
          Value lseCol = tt::LoadRingOp::create(b, loc, hColType, rlse, stage, cst(0), myQ);
          st = tt::DotWaitOp::create(b, loc, ValueRange{st}, 1).getResult(0);
          if (masked)
            st = maskDiagonal(st, key0, add(m0, myQ));
          Value pt = probsT(st, lseCol, Value());
          dpt = tt::DotWaitOp::create(b, loc, ValueRange{dpt}, 0).getResult(0);
          Value dCol = tt::LoadRingOp::create(b, loc, hColType, rd, stage, cst(0), myQ);
          Value dst = gradT(pt, dpt, dCol);
          Value p16 = arith::TruncFOp::create(b, loc, h16Type, pt);
          Value ds16 = arith::TruncFOp::create(b, loc, h16Type, dst);
          // Both consumers' products of the previous step have read the
          // exchange (round -1 at the first step: complete from the start).
          tt::BarrierWaitOp::create(b, loc, xFree, cst(0), sub(done, cst(1)));
          tt::StoreRingOp::create(b, loc, p16, rx, cst(0), cst(0), myQ);
          tt::StoreRingOp::create(b, loc, ds16, rx, cst(1), cst(0), myQ);
          tt::BarrierArriveOp::create(b, loc, xFull, cst(0));
          tt::BarrierWaitOp::create(b, loc, xFull, cst(0), done);
          Value dv = tt::DotOp::create(b, loc, accType, rx, cst(0), cst(0), rdo, stage, myCols,
                                       prev.getResult(1), false, true, true);
          Value dk = tt::DotOp::create(b, loc, accType, rx, cst(1), cst(0), rq, stage, myCols,
                                       prev.getResult(0), false, true, true);
          return {dk, dv, add(done, cst(1))};
        };
        // One step: query tile mi of query head `head`; carried dK, dV and
        // the step counter.
        auto step = [&](Value head, Value mi, ValueRange carried,
                        bool masked) -> SmallVector<Value> {
          if (s.qsplit)
            return qsplitStep(mi, carried, masked);
          auto [stage, round] = stageOf(carried[2]);
          // (Fused: the causal diagonal's few steps run their products one
          // after another; overlapped beside the mask and dQ's part they
          // spilled, bench/NOTES.md b9.)
          bool overlap = s.overlap && !(s.fused && masked);
          Value m0 = mul(mi, cst(s.kvBm));
          tt::BarrierWaitOp::create(b, loc, qFull, stage, round);
          Value st = tt::DotOp::create(b, loc, sType, rk, cst(0), myRows, rq, stage, cst(0), zeroS,
                                       false, false, overlap);
          Value dpt;
          // The columns' LSE, read while the products run.
          auto readLse = [&] {
            tt::BarrierWaitOp::create(b, loc, statFull, stage, round);
            return tt::LoadRingOp::create(b, loc, colType, rlse, stage, cst(0)).getResult();
          };
          Value lseCol;
          // (kvsfirst off the causal diagonal only: on it, beside the mask,
          // it spilled 4 bytes at head dim 128.)
          bool sFirst = s.kvsfirst && !masked;
          if (overlap) {
            // dP^T's product starts now, overwriting its accumulator (zeros
            // written beside S^T's product in flight made ptxas wait for it
            // first, C7517), but on the diagonal's few steps, where the
            // mask's registers beside it spilled (56 bytes at d = 128).
            // (ptxas then waits for both products before the first
            // exponential; started once S^T's is done, as the dQ kernel's
            // dP with `sfirst`, it ran under them, but the kernel took 2-8 %
            // longer: bench/NOTES.md b8. With kvsfirst it does so, and dV's
            // product goes behind it below.)
            if (sFirst) {
              lseCol = readLse();
              st = tt::DotWaitOp::create(b, loc, ValueRange{st}, 0).getResult(0);
            }
            tt::BarrierWaitOp::create(b, loc, doFull, stage, round);
            dpt = tt::DotOp::create(b, loc, sType, rv, cst(0), myRows, rdo, stage, cst(0), zeroS,
                                    false, false, true, /*overwrite=*/!masked);
            if (!sFirst) {
              lseCol = readLse();
              st = tt::DotWaitOp::create(b, loc, ValueRange{st}, 1).getResult(0);
            }
          } else {
            lseCol = readLse();
          }
          if (masked)
            st = maskDiagonal(st, key0, m0);
          if (thd() && s.fused)
            st = maskPastKeys(st, key0, tileKeys);
          // Fused: keys past the sequence (TMA's zeros) have S = 0, so P =
          // exp2(-LSE), which overflows where a row's LSE is very negative,
          // and inf * 0 would reach dQ's product. Every real exponent is at
          // most 0 (LSE is at least each of its row's scores): capped there,
          // P is at most 1 everywhere and those keys' dS (K's rows are zeros)
          // adds nothing to dQ.
          Value pt = probsT(st, lseCol, s.fused ? zeroS : Value());
          // With overlap dV's product runs while dS^T is computed, and dK's
          // beside it; both are waited for at the end of the step (with the
          // 16-bit P^T and dS^T they read). With kvsfirst dV's starts behind
          // dP^T's, before the wait for it.
          Value p16, dv;
          auto startDv = [&](bool async) {
            p16 = arith::TruncFOp::create(b, loc, pType, pt);
            dv = tt::DotRegOp::create(b, loc, accType, p16, rdo, stage, myCols, carried[1], true,
                                      async);
          };
          if (sFirst) {
            startDv(/*async=*/true);
            dpt = tt::DotWaitOp::create(b, loc, ValueRange{dpt}, 1).getResult(0);
          } else if (overlap) {
            dpt = tt::DotWaitOp::create(b, loc, ValueRange{dpt}, 0).getResult(0);
          } else {
            tt::BarrierWaitOp::create(b, loc, doFull, stage, round);
            dpt = tt::DotOp::create(b, loc, sType, rv, cst(0), myRows, rdo, stage, cst(0), zeroS,
                                    false, false, false, /*overwrite=*/true);
          }
          if (!dv)
            startDv(overlap);
          Value dCol = tt::LoadRingOp::create(b, loc, colType, rd, stage, cst(0));
          Value dst = gradT(pt, dpt, dCol);
          Value ds16 = arith::TruncFOp::create(b, loc, pType, dst);
          if (s.fused)
            return fusedTail(head, mi, carried, overlap, p16, dv, ds16);
          Value dk = tt::DotRegOp::create(b, loc, accType, ds16, rq, stage, myCols, carried[0],
                                          true, overlap);
          if (overlap) {
            auto done = tt::DotWaitOp::create(b, loc, ValueRange{dk, dv, p16, ds16}, 0);
            dk = done.getResult(0);
            dv = done.getResult(1);
          }
          tt::BarrierArriveOp::create(b, loc, empty, stage);
          return {dk, dv, add(carried[2], cst(1))};
        };
        // (Persistent: each tile's K and V waited for in its round, the
        // steps counted over the program's tiles.)
        eachTile(
            /*producer=*/false,
            s.persist ? ValueRange{arith::ConstantIntOp::create(b, loc, b.getI32Type(), 0)}
                      : ValueRange{},
            [&](Value j, ValueRange tileCarried) -> SmallVector<Value> {
              if (s.persist) {
                key0 = add(n0, myRows);
                tt::BarrierWaitOp::create(b, loc, kFull, cst(0), j);
                tt::BarrierWaitOp::create(b, loc, vFull, cst(0), j);
              }
              Value zeroAcc = splat(accType, f32c(0.0));
              SmallVector<Value> init = {zeroAcc, zeroAcc, cst(0)};
              SmallVector<Value> acc;
              Value keyEnd = key0, headsAfter = heads, head0After = head0;
              if (!s.fused) {
                acc = loop(cst(0), heads, init, [&](Value h, ValueRange c0) {
                  Value head = add(head0, h);
                  SmallVector<Value> c1 = loop(mStart, mMasked, c0, [&](Value mi, ValueRange c) {
                    return step(head, mi, c, true);
                  });
                  return loop(mMasked, mEnd, c1,
                              [&](Value mi, ValueRange c) { return step(head, mi, c, false); });
                });
                // qsplit: the last step's dV and dK products.
                if (s.qsplit) {
                  auto last = tt::DotWaitOp::create(b, loc, ValueRange{acc[0], acc[1]}, 0);
                  acc[0] = last.getResult(0);
                  acc[1] = last.getResult(1);
                }
              } else {
                // Fused (every register counts beside dQ's part): the query
                // tiles' loops count in 32 bits, their bounds computed here
                // from 32-bit values (not the 64-bit ones the producer shares,
                // which were kept through the steps or spilled: 12 bytes at
                // head dim 128 under the causal mask), and the keys' first row
                // for the stores computed again after the loops (n0 is a
                // multiple of 64 * consumers and myRows below it, so the or is
                // the add; the value from before them was a 64-bit one live
                // through them). THD: the sequence's rows, from its offsets
                // read here (with take the producer's slot holds only the
                // sequence's index), and from them its first row in dQ's
                // sums and its keys for the steps (read in the steps, each
                // load's latency sat in every step: bench/NOTES.md b31).
                Value n32 = toI32(n0);
                Value rows32;
                if (thd()) {
                  Seq tileSeq = seqOf(seq);
                  rows32 = rowsSeen(tileSeq, n32);
                  tileSums = sumsStart(seq, tileSeq.qStart);
                  tileKeys = tileSeq.kLen;
                } else {
                  rows32 = toI32(sqV);
                }
                QueryTiles m = queryTiles(n32, rows32, bn);
                auto steps = [&](Value head, Value from, Value to, ValueRange carried,
                                 bool masked) {
                  return loop(from, to, carried, [&](Value mi, ValueRange c) {
                    SmallVector<Value> next =
                        step(head, toIndex(mi), ValueRange{c[0], c[1], toIndex(c[2])}, masked);
                    next[2] = toI32(next[2]);
                    return next;
                  });
                };
                init[2] = s.persist
                              ? tileCarried[0]
                              : arith::ConstantIntOp::create(b, loc, b.getI32Type(), 0).getResult();
                firstTile = m.start;
                endTile = m.end;
                // (The heads' loop counts in 32 bits too, its bound computed
                // again here from the split, and the stores after the loops take
                // the heads from there: the 64-bit values the producer shares
                // were kept through the loops or spilled.)
                Value head032 = toI32(head0);
                firstHead = toIndex(head032);
                Value heads32 = headsPerPart(toI32(split));
                headsAfter = toIndex(heads32);
                head0After = toIndex(head032);
                acc = loop(cstLike(heads32, 0), heads32, init, [&](Value h, ValueRange c0) {
                  Value head = toIndex(add(head032, h));
                  SmallVector<Value> c1 = steps(head, m.start, m.masked, c0, true);
                  return steps(head, m.masked, m.end, c1, false);
                });
                // The last step's part of dQ.
                Value done = toIndex(acc[2]);
                Value lastMi = toIndex(sub(endTile, cstLike(endTile, 1)));
                Value lastHead = toIndex(sub(add(head032, heads32), cstLike(heads32, 1)));
                // (Persistent: once it is computed, K and V are free for the next
                // tile; a part where the tile had a step.)
                Value last = dqPartOf(waitPrevDs(done), /*async=*/false);
                Value any;
                if (s.persist) {
                  tt::BarrierArriveOp::create(b, loc, kvFree, cst(0));
                  any = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne, endTile, firstTile);
                }
                addDqPart(last, done, lastHead, lastMi, any);
                keyEnd = toIndex(arith::OrIOp::create(b, loc, n32, toI32(myRows)));
              }
              storeGrads(acc[0], acc[1], seq, kvHead, keyEnd, myCols, headsAfter, head0After, dK,
                         dV, partials, scale);
              return s.persist ? SmallVector<Value>{acc[2]} : SmallVector<Value>{};
            });
        // Fused: the last additions into dQ's sums are done before the
        // program ends (and the conversion kernel reads them); ordered, the
        // helper waits for each of its own.
        if (s.fused && !ordered())
          tt::TmaStoreWaitOp::create(b, loc, 0, /*read=*/false);
        tt::YieldOp::create(b, loc);
      }
      // Ordered: the helper (one thread beside the producer) adds the
      // consumers' parts of dQ in the consumers' order of steps (query tile
      // mi of `head`, as the producer loads them): once every consumer's
      // part is in its stage, it waits on the tile's flag word for this
      // program's turn (under a causal mask the key tiles after its own
      // whose keys the tile's queries see add first, up to mi * kv_bm / bn;
      // without one every key tile after its own, or where the walk
      // rotates those that came to the tile before it), adds the parts
      // (addPart), gives the stages back once the additions have read them
      // and, once they are whole in the sums, sets the flag to the turn
      // after.
      // Each element's sum takes its parts in one order on every run, and
      // no consumer waits on global memory (FlashAttention-3's
      // deterministic backward gives this to a warp of its own). The
      // program's place is the producer's, taken in 32 bits (the helper has
      // the producer's 24 registers).
      if (ordered()) {
        OpBuilder::InsertionGuard guard(b);
        b.createBlock(&ws_.getHelper());
        // (THD: the sequence's key tiles; the programs past them take no
        // step and have no turn.)
        Value keyTiles = ceilDiv(toI32(keysOfTile()), bn), nTile = divu(toI32(n0), bn);
        Value start = toI32(mStart), end = toI32(mEnd), seq32 = toI32(seq);
        Value steps = toI32(mul(count, heads));
        Value bhBase = mul(seq32, cstLike(seq32, p.hq));
        // (THD: the sequence's rows in the sums from its offsets read once,
        // not at each turn.)
        Value sums0 = thd() ? sumsStart(seq, ps.qStart) : Value();
        Value lastTurn = sub(sub(keyTiles, cstLike(keyTiles, 1)), nTile);
        // Rotated: the turn is the program's step in the head over R (the
        // steps from its first tile, wrapping at the end; start is 0
        // without a mask), where it rotates.
        Value first, rot;
        if (rotated())
          std::tie(first, rot) = walkOf(lastTurn, keyTiles, start, end);
        Value from = first ? first : start;
        loop(cstLike(steps, 0), steps, {toI32(head0), from}, [&](Value it, ValueRange at) {
          Value head = at[0], mi = at[1];
          Value turn = p.causal ? minu(sub(divu(mi, bn / s.kvBm), nTile), lastTurn) : lastTurn;
          if (rotated()) {
            Value ahead = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::uge, mi, first);
            Value step =
                arith::SelectOp::create(b, loc, ahead, sub(mi, first), sub(add(mi, end), first));
            turn = arith::SelectOp::create(b, loc, rot, divu(step, s.walkRatio()), turn);
          }
          SmallVector<Value> flag = {toIndex(add(bhBase, head)), toIndex(mi), cst(0)};
          for (int64_t k = 0; k < s.consumers; ++k)
            tt::BarrierWaitOp::create(b, loc, dqFull, cst(k), toIndex(it));
          tt::FlagWaitOp::create(b, loc, flags, flag, toIndex(turn), /*async_proxy=*/true);
          for (int64_t k = 0; k < s.consumers; ++k)
            addPart(cst(k), toIndex(head), toIndex(mi), sums0);
          tt::TmaStoreWaitOp::create(b, loc, 0, /*read=*/true);
          for (int64_t k = 0; k < s.consumers; ++k)
            tt::BarrierArriveOp::create(b, loc, dqFree, cst(k));
          tt::TmaStoreWaitOp::create(b, loc, 0, /*read=*/false);
          tt::FlagSetOp::create(b, loc, flags, flag, toIndex(add(turn, cstLike(turn, 1))),
                                /*async_proxy=*/true);
          return tileAfter(head, mi, start, end, first);
        });
        tt::YieldOp::create(b, loc);
      }
      b.setInsertionPointToEnd(entry);
      tt::ReturnOp::create(b, loc);
      b.setInsertionPointAfter(kernel);
    }

    /// Below sm_90a: Q, K, V and dO as rows for the copies into the rings,
    /// [tokens, h * d] (BSHD: b * s tokens; THD) or [b * h * s, d] (BHSD),
    /// as the forward's sm_80 kernel takes them.
    MemRefType copyRowsType(int64_t heads) const {
      Type dt = elemType(ctx(), p.dt);
      return p.layout == attention::Layout::BHSD
                 ? MemRefType::get({ShapedType::kDynamic, p.d}, dt)
                 : MemRefType::get({ShapedType::kDynamic, heads * p.d}, dt);
    }
    /// Where row 0 of head `head` (of `heads`) of sequence `seq` is in
    /// copyRowsType's rows (THD: the sequence starts at `start`; else each
    /// sequence has `len` rows), and its first column.
    std::pair<Value, Value> copyAt(Value start, Value len, Value seq, Value head, int64_t heads) {
      if (thd())
        return {start, mul(head, cst(p.d))};
      if (bshd())
        return {mul(seq, len), mul(head, cst(p.d))};
      return {mul(add(mul(seq, cst(heads)), head), len), cst(0)};
    }

    /// dQ and the workspace below sm_90a: the dQ kernel's tiles and math
    /// without warp specialization or asynchronous products: every thread
    /// copies its share of Q and dO once and of each tile of bn keys of K
    /// and V into `stages`-deep rings (cp.async, one group a tile, the next
    /// tiles in flight while this one is used, as the forward's sm_80
    /// kernel); each warpgroup owns 64 query rows (dsplit: the program's 64
    /// and half of dQ's columns): S = Q K^T and dP = dO V^T (mma.sync from
    /// ldmatrix), P and dS in registers, dQ += dS K with dS from registers.
    void dqSm80() {
      MLIRContext &c = ctx();
      Type dt = elemType(c, p.dt), f32 = b.getF32Type();
      int64_t bm = dqRows();
      auto ringQ = tt::RingType::get(&c, 1, bm, p.d, dt);
      auto ringKV = tt::RingType::get(&c, s.stages, s.bn, p.d, dt);
      // Q, K, V and dO as rows, where the Hopper kernel takes tensor maps.
      DqKernel kk = makeDq(copyRowsType(p.hq), copyRowsType(p.hkv), 128 * s.consumers, 0);
      auto kernel = kk.kernel;
      Value o = kk.o, dO = kk.dO, lse = kk.lse, dQ = kk.dQ, ws = kk.ws;
      Value q = kk.q, k = kk.k, v = kk.v, dORows = kk.dOIn;
      Value scaleLog2 = kk.scaleLog2, scale = kk.scale, sqV = kk.sq, skV = kk.sk;
      Value rq = tt::AllocRingOp::create(b, loc, ringQ, nullptr);
      Value rdo = tt::AllocRingOp::create(b, loc, ringQ, nullptr);
      Value rk = tt::AllocRingOp::create(b, loc, ringKV, nullptr);
      Value rv = tt::AllocRingOp::create(b, loc, ringKV, nullptr);

      // The tiles as the Hopper kernel places them.
      DqTile t = placeDq(lse, sqV, skV);
      Value bh = t.bh, seq = t.seq, head = t.head, kvHead = t.kvHead, q0 = t.q0;
      Seq ps = t.ps;
      Value keysV = t.keys, kvTiles = t.kvTiles, whole = t.whole;

      // Copies of 16 bytes (8 elements); rows past a sequence's are another
      // sequence's or head's (the masks leave them out), past the tensor
      // zeros.
      // (Not structured bindings: copyKV captures them.)
      Value qBase, qCol, kBase, kCol;
      std::tie(qBase, qCol) = copyAt(ps.qStart, sqV, seq, head, p.hq);
      std::tie(kBase, kCol) = copyAt(ps.kStart, skV, seq, kvHead, p.hkv);
      int64_t vec = 8;
      auto copyKV = [&](Value j, Value stage) {
        Value row = add(kBase, mul(j, cst(s.bn)));
        tt::AsyncCopyOp::create(b, loc, k, row, kCol, rk, stage, vec);
        tt::AsyncCopyOp::create(b, loc, v, row, kCol, rv, stage, vec);
        tt::AsyncCommitOp::create(b, loc);
      };
      // Q and dO join the first group; the first stages - 1 tiles are in
      // flight before the loop (tiles past the last are copied, not used).
      tt::AsyncCopyOp::create(b, loc, q, add(qBase, q0), qCol, rq, cst(0), vec);
      tt::AsyncCopyOp::create(b, loc, dORows, add(qBase, q0), qCol, rdo, cst(0), vec);
      for (int64_t i = 0; i + 1 < s.stages; ++i)
        copyKV(cst(i), cst(i));

      // Each warpgroup's 64 rows and every column of dQ, or (dsplit, head
      // dim 256: 64 x 256 f32 spilled 36 to 104 bytes) the program's 64
      // rows and half the columns: both then compute the step's S and dP,
      // and write the same LSE and D to the workspace.
      Value wgId = tt::WarpgroupIdOp::create(b, loc);
      Value myRows = s.dsplit ? cst(0) : mul(wgId, cst(64));
      int64_t width = s.dsplit ? p.d / s.consumers : p.d;
      Value myCols = s.dsplit ? mul(wgId, cst(width)) : cst(0);
      Value row0 = add(q0, myRows);
      auto wg = tt::WgmmaLayoutAttr::get(&c);
      auto sType = RankedTensorType::get({64, s.bn}, f32, wg);
      auto accType = RankedTensorType::get({64, width}, f32, wg);
      auto [lseRow, dRow] = rowStats(o, dO, lse, ws, seq, head, bh, row0, ps);
      Value zeroS = splat(sType, f32c(0.0));
      Value negLse =
          tt::BroadcastOp::create(b, loc, sType, arith::NegFOp::create(b, loc, lseRow).getResult());
      Value dBcast = tt::BroadcastOp::create(b, loc, sType, dRow);
      auto step = [&](Value j, ValueRange carried, bool masked) -> SmallVector<Value> {
        // Tile j has landed once at most stages - 2 younger groups are
        // pending; the barrier makes it visible to all and frees the stage
        // tile j - 1 used, which the copies of tile j + stages - 1 refill.
        tt::AsyncWaitOp::create(b, loc, s.stages - 2);
        tt::BlockBarrierOp::create(b, loc);
        Value next = add(j, cst(s.stages - 1));
        copyKV(next, remu(next, s.stages));
        Value stage = remu(j, s.stages);
        // S and P first, then dP: S and dP are never held together.
        Value sc = tt::DotOp::create(b, loc, sType, rq, cst(0), myRows, rk, stage, cst(0), zeroS,
                                     false, false, false, /*overwrite=*/true);
        if (masked)
          sc = maskRows(sc, mul(j, cst(s.bn)), keysV, row0);
        Value pr = math::Exp2Op::create(
            b, loc, math::FmaOp::create(b, loc, sc, splat(sType, scaleLog2), negLse));
        Value dp = tt::DotOp::create(b, loc, sType, rdo, cst(0), myRows, rv, stage, cst(0), zeroS,
                                     false, false, false, /*overwrite=*/true);
        Value ds = arith::MulFOp::create(b, loc, pr, arith::SubFOp::create(b, loc, dp, dBcast));
        Value ds16 = arith::TruncFOp::create(b, loc, RankedTensorType::get({64, s.bn}, dt, wg), ds);
        return {tt::DotRegOp::create(b, loc, accType, ds16, rk, stage, myCols, carried[0], true,
                                     false)};
      };
      SmallVector<Value> acc = {splat(accType, f32c(0.0))};
      acc = loop(cst(0), whole, acc, [&](Value j, ValueRange c) { return step(j, c, false); });
      acc = loop(whole, kvTiles, acc, [&](Value j, ValueRange c) { return step(j, c, true); });
      // No copy may still be writing shared memory when the block exits.
      tt::AsyncWaitOp::create(b, loc, 0);
      storeDq(acc[0], scale, dQ, ps, seq, head, row0, myCols);
      tt::ReturnOp::create(b, loc);
      b.setInsertionPointAfter(kernel);
    }

    /// dK and dV below sm_90a: the Hopper kernel's programs and steps
    /// without warp specialization: every thread copies its share of K and
    /// V once and of each step's Q and dO into `stages`-deep rings
    /// (cp.async), the columns' LSE and D come from the workspace in global
    /// memory, and each warpgroup owns 64 keys (dsplit: the program's 64 and
    /// half of dK's and dV's columns): S^T = K Q^T and dP^T = V dO^T
    /// (mma.sync), dV += P^T dO and dK += dS^T Q with P^T and dS^T from
    /// registers.
    void dkvSm80() {
      MLIRContext &c = ctx();
      Type dt = elemType(c, p.dt), f32 = b.getF32Type();
      int64_t bn = s.dkvKeys();
      auto ringKV = tt::RingType::get(&c, 1, bn, p.d, dt);
      auto ringQ = tt::RingType::get(&c, s.stages, s.kvBm, p.d, dt);
      // K, V, Q and dO as rows, the workspace as a memref, where the Hopper
      // kernel takes tensor maps.
      DkvKernel kk = makeDkv("attn_bwd_dkdv_", copyRowsType(p.hkv), copyRowsType(p.hq),
                             workspaceType(), Type(), 128 * s.consumers, 0);
      auto kernel = kk.kernel;
      Value k = kk.k, v = kk.v, q = kk.q, dORows = kk.dOIn, ws = kk.ws;
      Value dK = kk.dK, dV = kk.dV, scaleLog2 = kk.scaleLog2, scale = kk.scale;
      Value sqV = kk.sq, skV = kk.sk, partials = kk.partials, split = kk.split;
      Value rk = tt::AllocRingOp::create(b, loc, ringKV, nullptr);
      Value rv = tt::AllocRingOp::create(b, loc, ringKV, nullptr);
      Value rq = tt::AllocRingOp::create(b, loc, ringQ, nullptr);
      Value rdo = tt::AllocRingOp::create(b, loc, ringQ, nullptr);

      // The programs, their query heads and tiles as the Hopper kernel's.
      DkvTile t = placeDkv(sqV, skV, split, bn);
      Value seq = t.seq, kvHead = t.kvHead, heads = t.heads, head0 = t.head0, n0 = t.n0;
      Seq ps = t.ps;
      Value mEnd = t.mEnd, mStart = t.mStart, mMasked = t.mMasked;

      // K and V join the first group; each step's Q and dO tiles are copied
      // stages - 1 steps ahead (past the last step: rows not used).
      int64_t vec = 8;
      auto [kBase, kCol] = copyAt(ps.kStart, skV, seq, kvHead, p.hkv);
      tt::AsyncCopyOp::create(b, loc, k, add(kBase, n0), kCol, rk, cst(0), vec);
      tt::AsyncCopyOp::create(b, loc, v, add(kBase, n0), kCol, rv, cst(0), vec);
      // The step after query tile mi of query head `head`: the next tile,
      // or the next head's first.
      auto advance = [&](std::pair<Value, Value> at) -> std::pair<Value, Value> {
        Value next = add(at.second, cst(1));
        Value wrap = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, next, mEnd);
        return {arith::SelectOp::create(b, loc, wrap, add(at.first, cst(1)), at.first),
                arith::SelectOp::create(b, loc, wrap, mStart, next)};
      };
      auto copyQ = [&](std::pair<Value, Value> at, Value stage) {
        auto [qBase, qCol] = copyAt(ps.qStart, sqV, seq, at.first, p.hq);
        Value row = add(qBase, mul(at.second, cst(s.kvBm)));
        tt::AsyncCopyOp::create(b, loc, q, row, qCol, rq, stage, vec);
        tt::AsyncCopyOp::create(b, loc, dORows, row, qCol, rdo, stage, vec);
        tt::AsyncCommitOp::create(b, loc);
      };
      {
        std::pair<Value, Value> at{head0, mStart};
        for (int64_t i = 0; i + 1 < s.stages; ++i) {
          if (i > 0)
            at = advance(at);
          copyQ(at, cst(i));
        }
      }

      // Each warpgroup's 64 keys and every column, or (dsplit, head dim
      // 256) the program's 64 keys and half the columns: both then compute
      // the step's S^T and dP^T.
      Value wgId = tt::WarpgroupIdOp::create(b, loc);
      Value myRows = s.dsplit ? cst(0) : mul(wgId, cst(64));
      Value myCols = s.dsplit ? mul(wgId, cst(s.dkvCols(p.d))) : cst(0);
      Value key0 = add(n0, myRows);
      auto wg = tt::WgmmaLayoutAttr::get(&c);
      auto colType = RankedTensorType::get({s.kvBm}, f32, tt::SliceLayoutAttr::get(&c, 0, wg));
      auto sType = RankedTensorType::get({64, s.kvBm}, f32, wg);
      auto pType = RankedTensorType::get({64, s.kvBm}, dt, wg);
      // dK and dV by panels of 64 columns, each product's B fragments a
      // panel's at a time (at head dim 128 whole, the kernel spilled).
      int64_t panels = s.dkvCols(p.d) / 64;
      auto panelCol = [&](int64_t i) { return add(myCols, cst(64 * i)); };
      auto accType = RankedTensorType::get({64, 64}, f32, wg);
      Value zeroS = splat(sType, f32c(0.0));
      // One step: query tile mi of query head `head`; carried dK's and dV's
      // panels and the step counter.
      auto step = [&](Value head, Value mi, ValueRange carried, bool masked) -> SmallVector<Value> {
        Value it = carried[2 * panels];
        tt::AsyncWaitOp::create(b, loc, s.stages - 2);
        tt::BlockBarrierOp::create(b, loc);
        std::pair<Value, Value> ahead{head, mi};
        for (int64_t i = 0; i + 1 < s.stages; ++i)
          ahead = advance(ahead);
        copyQ(ahead, remu(add(it, cst(s.stages - 1)), s.stages));
        Value stage = remu(it, s.stages);
        Value m0 = mul(mi, cst(s.kvBm));
        // S^T, P^T and dV's product first, then dP^T, dS^T and dK's: S^T
        // and dP^T are never held together (beside dK and dV, both spilled
        // at head dim 128 under a causal mask).
        Value st = tt::DotOp::create(b, loc, sType, rk, cst(0), myRows, rq, stage, cst(0), zeroS,
                                     false, false, false, /*overwrite=*/true);
        // The columns' LSE * log2(e) and D (the workspace's padded rows:
        // +inf and 0).
        Value bhq = add(mul(seq, cst(p.hq)), head);
        Value lseCol =
            tt::LoadOp::create(b, loc, colType, ws, ValueRange{cst(0), bhq, m0}, nullptr, nullptr);
        if (masked)
          st = maskDiagonal(st, key0, m0);
        Value negLse = tt::BroadcastOp::create(b, loc, sType,
                                               arith::NegFOp::create(b, loc, lseCol).getResult());
        Value pt = math::Exp2Op::create(
            b, loc, math::FmaOp::create(b, loc, st, splat(sType, scaleLog2), negLse));
        SmallVector<Value> next(2 * panels);
        Value p16 = arith::TruncFOp::create(b, loc, pType, pt);
        for (int64_t i = 0; i < panels; ++i)
          next[panels + i] = tt::DotRegOp::create(b, loc, accType, p16, rdo, stage, panelCol(i),
                                                  carried[panels + i], true, false);
        Value dpt = tt::DotOp::create(b, loc, sType, rv, cst(0), myRows, rdo, stage, cst(0), zeroS,
                                      false, false, false, /*overwrite=*/true);
        Value dCol =
            tt::LoadOp::create(b, loc, colType, ws, ValueRange{cst(1), bhq, m0}, nullptr, nullptr);
        Value dst = arith::MulFOp::create(
            b, loc, pt,
            arith::SubFOp::create(b, loc, dpt, tt::BroadcastOp::create(b, loc, sType, dCol)));
        Value ds16 = arith::TruncFOp::create(b, loc, pType, dst);
        for (int64_t i = 0; i < panels; ++i)
          next[i] = tt::DotRegOp::create(b, loc, accType, ds16, rq, stage, panelCol(i), carried[i],
                                         true, false);
        next.push_back(add(it, cst(1)));
        return next;
      };
      SmallVector<Value> init(2 * panels, splat(accType, f32c(0.0)));
      init.push_back(cst(0));
      SmallVector<Value> acc = loop(cst(0), heads, init, [&](Value h, ValueRange c0) {
        Value head = add(head0, h);
        SmallVector<Value> c1 = loop(
            mStart, mMasked, c0, [&](Value mi, ValueRange c) { return step(head, mi, c, true); });
        return loop(mMasked, mEnd, c1,
                    [&](Value mi, ValueRange c) { return step(head, mi, c, false); });
      });
      // No copy may still be writing shared memory when the block exits.
      tt::AsyncWaitOp::create(b, loc, 0);
      for (int64_t i = 0; i < panels; ++i)
        storeGrads(acc[i], acc[panels + i], seq, kvHead, key0, panelCol(i), heads, head0, dK, dV,
                   partials, scale);
      tt::ReturnOp::create(b, loc);
      b.setInsertionPointAfter(kernel);
    }

    /// dK and dV from the parts' sums, added in order (j = 0, 1, ...), so
    /// the result is bitwise repeatable; launched only with a split.
    void sum() {
      MLIRContext &c = ctx();
      Type f32 = b.getF32Type(), idx = b.getIndexType();
      auto kType = rowsType(p.hkv, elemType(c, p.dt));
      // Partials, dK, dV; sk, split; THD: K's offsets.
      SmallVector<Type> args = {partialsType(), kType, kType, idx, idx};
      if (thd())
        args.push_back(offsetsType());
      // Programs: 64 rows of one KV head each.
      AffineExpr sk = getAffineSymbolExpr(0, &c), first = getAffineSymbolExpr(1, &c);
      AffineExpr seqs = thd() ? (first - 1) * p.hkv : bshd() ? first * p.hkv : first;
      AffineMap grid = AffineMap::get(0, 2, {sk.ceilDiv(64) * seqs}, &c);
      auto kernel = makeKernel(b, loc, "attn_bwd_dkdv_sum_" + suffix(), args, 128, grid,
                               {3, -1, thd() ? 5 : 1, 0}, cfg);
      Block *entry = &kernel.getBody().front();
      Value partials = entry->getArgument(0), dK = entry->getArgument(1),
            dV = entry->getArgument(2), skV = entry->getArgument(3), split = entry->getArgument(4);
      if (thd())
        cuK = entry->getArgument(5);
      Value blocks = ceilDiv(skV, 64);
      Value pid = tt::ProgramIdOp::create(b, loc, tt::Dim::x);
      Value row0 = mul(arith::RemUIOp::create(b, loc, pid, blocks), cst(64));
      Value bkv = arith::DivUIOp::create(b, loc, pid, blocks);
      Value seq = divu(bkv, p.hkv), kvHead = remu(bkv, p.hkv);
      // THD: the sums of the sequence's keys go to its rows of dK and dV.
      Value kStart, kLen;
      if (thd())
        std::tie(kStart, kLen) = sequenceRows(cuK, seq, skV);
      // At most 128 columns at a time: the sum and a part of 64 x 256 f32
      // would not fit in a thread's registers.
      int64_t cols = std::min<int64_t>(p.d, 128);
      auto tile = RankedTensorType::get({64, cols}, f32, tt::WgmmaLayoutAttr::get(&c));
      Value zero = splat(tile, f32c(0.0));
      for (int64_t c0 = 0; c0 < p.d; c0 += cols) {
        SmallVector<Value> at = partRowAt(seq, kvHead, row0);
        at[2] = add(at[2], cst(c0));
        // dK's parts (0 .. split - 1), then dV's (split .. 2 split - 1).
        for (auto [first, grad] : {std::pair{cst(0), dK}, std::pair{split, dV}}) {
          Value sum = loop(cst(0), split, {zero}, [&](Value j, ValueRange acc) {
            Value part =
                tt::LoadOp::create(b, loc, tile, partials, partAt(add(first, j), dK, at), nullptr);
            return SmallVector<Value>{arith::AddFOp::create(b, loc, acc[0], part)};
          })[0];
          auto [view, to] = rowIn(grad, kStart, kLen, seq, kvHead, p.hkv, row0);
          to.back() = add(to.back(), cst(c0));
          tt::StoreOp::create(b, loc, sum, view, to);
        }
      }
      b.setInsertionPointToEnd(entry);
      tt::ReturnOp::create(b, loc);
      b.setInsertionPointAfter(kernel);
    }
  };
};

} // namespace

const KernelTemplate &attentionBackwardTemplate() {
  static const AttentionBackwardTemplate t;
  return t;
}

} // namespace tilejit
