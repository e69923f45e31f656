//===- AttentionTemplate.cpp - attention forward on Hopper ------------------===//
//
// O = softmax(scale * Q K^T + mask) V and LSE, f32 accumulation, on sm_90a,
// the FlashAttention-2 recurrence on warp-specialized warpgroups:
//
// - tiles of bm query rows of one query head of one sequence, the tiles with
//   the most keys (the last rows of a causal mask) first; one program per
//   tile, or (persistent) one per multiprocessor walking the tiles in rounds
//   in a snake order, or (take) taking the next tile from a counter when it
//   is ready for it, the rings and the consumers' turns running on from
//   tile to tile, so that a tile's first loads overlap the last one's end;
// - warpgroup 0 is the producer: one thread loads each tile's Q (two Q
//   stages where they fit), then each tile of bn keys of K and of V into
//   rings of `stages` stages with TMA (K and V on their own barriers, so
//   that Q K^T starts before V has landed), refilling a stage's K (or V)
//   once every consumer released it;
// - `consumers` warpgroups own 64 query rows each: S = Q K^T on the tensor
//   cores from shared memory (tile.dot), the online softmax in registers
//   (running row max m and sum l, in the log2 domain with the scale folded
//   into one fma before exp2), the accumulator rescaled by exp2(m_old -
//   m_new), then O += P V with P in registers (tile.dot_reg): P is the
//   probabilities rounded to 16 bits, in the layout the accumulator of S
//   left them in;
// - masks only where needed: the key tiles that every row of the program
//   sees whole run unmasked; the rest (the ragged last tile, the diagonal of
//   a causal mask) compare each column with the key count and the row;
// - the epilogue divides by l, stores O (masked rows past the sequence) and
//   LSE = (m + log2 l) ln 2, the natural log-sum-exp of the scaled scores.
//
// Every shape works: TMA reads zeros past the end of a sequence (its own
// sequence: the tensor maps are 4-D, [dim, seq, heads, batch]), masked
// columns take -inf, stores are masked. Query head h reads kv head
// h / (hq / hkv) (GQA, MQA). Packed sequences (THD): each tile reads its
// sequence's offsets (tile.load_word), loads at the sequence's rows of a
// [dim, tokens, heads, 1] map (rows past it are the next sequence's, which
// the key mask and P = 0 leave out) and stores through a view of its rows
// (tile.narrow).
//
// Below sm_90a (buildSm80): no TMA, warp specialization or asynchronous
// products; cp.async rings, mma.sync from ldmatrix, and P V with P from
// registers on mma.sync, the same softmax (onlineSoftmax).
//
// Tunables: bm (64 per consumer warpgroup), bn, stages, consumers, overlap
// (FlashAttention-3's overlap of the softmax with the products within a
// warpgroup), raster (the tiles' order), pingpong (FlashAttention-3's
// turns between the two consumers: one issues its products while the other
// runs its softmax), persistent (the grid, capped at launch), take (the
// persistent grid's tiles from a counter; the default on packed sequences,
// where the producer passes over the tiles past their sequence's rows, and
// by head under a causal mask where a share fixed in advance would be
// uneven), raster_heads (raster 1's heads in groups, the last rows of a
// group first).
//
//===----------------------------------------------------------------------===//
#include "compiler/EmbeddedSources.h"
#include "compiler/templates/Kernel.h"
#include "compiler/templates/Template.h"
#include "dialects/Tile/TileDialect.h"
#include "ops/attention/AttentionDecl.h"
#include "ops/attention/AttentionOrder.h"

#include <cmath>

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

/// A forward config: its tiles' order (bm, raster, raster_heads) and the rest.
struct Shape : attention::ForwardOrder {
  int64_t bn, stages, consumers;
  bool overlap, pingpong, persistent, take;
  /// Q tiles in shared memory: with a persistent grid two where they fit,
  /// so that the next tile's Q loads while this one's run.
  int64_t qStages = 1;
  Shape(const TileConfig &c, int64_t d, int64_t elemBytes, int64_t smemLimit)
      : ForwardOrder{c.get("bm"), c.has("raster") && c.get("raster") != 0,
                     c.has("raster_heads") ? c.get("raster_heads") : 0},
        bn(c.get("bn")), stages(c.get("stages")), consumers(c.get("consumers")),
        overlap(c.has("overlap") && c.get("overlap") != 0),
        pingpong(c.has("pingpong") && c.get("pingpong") != 0),
        persistent(c.has("persistent") && c.get("persistent") != 0),
        take(c.has("take") && c.get("take") != 0) {
    if (persistent) {
      qStages = 2;
      if (smemBytes(d, elemBytes) > smemLimit)
        qStages = 1;
    }
  }
  /// Shared memory of the Q tiles, the K and V rings and the barriers, with
  /// the alignment slack.
  int64_t smemBytes(int64_t d, int64_t elemBytes) const {
    // (take: two slots of a tile index and their four barriers.)
    return (qStages * bm + 2 * stages * bn) * d * elemBytes + 8 * (4 * stages + 2 * qStages + 2) +
           (take ? 8 * 4 + 8 : 0) + 3 * 1024;
  }
};

/// The online softmax of S (a 64-row #tile.wgmma tile of f32 scores of the
/// keys from column `col0`) after the running max m and sum l of its rows
/// (log2 domain): the new m and l, P, and alpha = exp2(m - m_new), which
/// rescales O. `masked`: columns at or past `keys` take -inf, and, where
/// `row0` (the first row's index) is given, those past each row's diagonal
/// (causal).
SmallVector<Value> onlineSoftmax(KernelMath &km, RankedTensorType sType, Value sc, Value col0,
                                 Value keys, Value row0, Value m, Value l, Value scaleLog2,
                                 bool masked) {
  OpBuilder &b = km.b;
  Location loc = km.loc;
  MLIRContext *ctx = b.getContext();
  auto iType = RankedTensorType::get(sType.getShape(), b.getI32Type(), sType.getEncoding());
  auto rowType = RankedTensorType::get({sType.getDimSize(0)}, b.getF32Type(),
                                       tt::SliceLayoutAttr::get(ctx, 1, sType.getEncoding()));
  if (masked) {
    Value cols = arith::AddIOp::create(b, loc, tt::IotaOp::create(b, loc, iType, 1),
                                       km.splat(iType, km.toI32(col0)));
    Value ok = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, cols,
                                     km.splat(iType, km.toI32(keys)));
    if (row0) {
      Value rows = arith::AddIOp::create(b, loc, tt::IotaOp::create(b, loc, iType, 0),
                                         km.splat(iType, km.toI32(row0)));
      ok = arith::AndIOp::create(
          b, loc, ok, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sle, cols, rows));
    }
    sc = arith::SelectOp::create(b, loc, ok, sc, km.splat(sType, km.f32c(-INFINITY)));
  }
  // The running max of the scaled scores, in the log2 domain.
  Value rowMax = tt::ReduceOp::create(b, loc, rowType, tt::ReduceKind::max, sc, 1);
  Value mNew = arith::MaxNumFOp::create(
      b, loc, m, arith::MulFOp::create(b, loc, rowMax, km.splat(rowType, scaleLog2)));
  Value negM =
      tt::BroadcastOp::create(b, loc, sType, arith::NegFOp::create(b, loc, mNew).getResult());
  Value pr = math::Exp2Op::create(
      b, loc, math::FmaOp::create(b, loc, sc, km.splat(sType, scaleLog2), negM));
  Value alpha = math::Exp2Op::create(b, loc, arith::SubFOp::create(b, loc, m, mNew));
  Value lNew =
      arith::AddFOp::create(b, loc, arith::MulFOp::create(b, loc, l, alpha),
                            tt::ReduceOp::create(b, loc, rowType, tt::ReduceKind::sum, pr, 1));
  return {mNew, lNew, pr, alpha};
}

/// By head, the tiles taken from a counter in groups of 8 heads, the last
/// rows first (take, raster_heads): what the defaults and the tuning
/// space set where a share fixed in advance would be uneven.
void takeInHeadGroups(TileConfig &c) {
  c.set("take", 1);
  c.set("raster_heads", 8);
}

} // namespace

namespace attention {
TilePlace placeTile(KernelMath &km, const Params &p, const ForwardOrder &s, Value t, Value mTiles,
                    Value heads) {
  OpBuilder &b = km.b;
  Location loc = km.loc;
  TilePlace tile;
  Value fromLast, bh;
  if (s.byHead && s.rasterHeads > 1) {
    // Groups of rasterHeads heads (the last one smaller where they do not
    // divide the heads), each group's row tiles from the last ones, a row
    // tile of each of its heads at a time.
    Value span = km.mul(mTiles, km.cst(s.rasterHeads));
    Value first =
        km.mul(arith::DivUIOp::create(b, loc, t, span).getResult(), km.cst(s.rasterHeads));
    Value in = arith::RemUIOp::create(b, loc, t, span);
    Value size = km.minu(km.cst(s.rasterHeads), km.sub(heads, first));
    fromLast = arith::DivUIOp::create(b, loc, in, size);
    bh = km.add(first, arith::RemUIOp::create(b, loc, in, size).getResult());
  } else {
    fromLast = s.byHead ? arith::RemUIOp::create(b, loc, t, mTiles).getResult()
                        : arith::DivUIOp::create(b, loc, t, heads).getResult();
    bh = s.byHead ? arith::DivUIOp::create(b, loc, t, mTiles).getResult()
                  : arith::RemUIOp::create(b, loc, t, heads).getResult();
  }
  Value mTile = km.sub(km.sub(mTiles, km.cst(1)), fromLast);
  tile.bh = bh;
  tile.seq = km.divu(tile.bh, p.hq);
  tile.head = km.remu(tile.bh, p.hq);
  tile.kvHead = km.divu(tile.head, p.hq / p.hkv);
  tile.q0 = km.mul(mTile, km.cst(s.bm));
  return tile;
}
} // namespace attention

namespace {

class AttentionForwardTemplate : public KernelTemplate {
public:
  const OpDecl &op() const override { return attention::forwardOp(); }

  llvm::ArrayRef<ConfigKeyDecl> configKeys() const override {
    static const ConfigKeyDecl keys[] = {
        {"bm", 64, 128, false, "query rows per program (64 per consumer warpgroup)"},
        {"bn", 16, 256, false, "keys per step of the loop"},
        {"stages", 1, 4, false, "stages of the K and V rings"},
        {"consumers", 1, 2, false, "consumer warpgroups"},
        {"overlap", 0, 1, true,
         "start Q K^T of the next tile before the softmax of this one (0 when left out)"},
        {"raster", 0, 1, true,
         "program order: 0 a row tile of every head at a time, 1 every row tile of a head "
         "(0 when left out)"},
        {"raster_heads", 0, 1024, true,
         "with raster 1: the row tiles of this many heads at a time, the last rows first, a "
         "row tile of each head in turn (8 the default where a share fixed in advance would "
         "leave programs idle; 0 or 1 when left out: one head's)"},
        {"pingpong", 0, 1, true,
         "the two consumers take turns issuing their products, so that one's softmax runs "
         "while the other's products do (with overlap; 0 when left out)"},
        {"persistent", 0, 1, true,
         "a program per multiprocessor (at most the launch's cap) walking tiles, the next "
         "tile's Q and K loading while this one's finish (0 when left out)"},
        {"take", 0, 1, true,
         "with persistent: each program takes its next tile from a counter when it is ready "
         "for it (an atomic addition; the tiles in raster's order), not its share fixed in "
         "advance; on packed sequences the producer passes over tiles past their sequence's "
         "rows (0 when left out)"},
    };
    return keys;
  }

  static TileConfig make(int64_t consumers, int64_t bn, int64_t stages, int64_t overlap,
                         int64_t raster, bool pingpong = false, bool persistent = true) {
    TileConfig c;
    c.set("bm", 64 * consumers).set("bn", bn).set("stages", stages).set("consumers", consumers);
    c.set("overlap", overlap).set("raster", raster);
    // Only when on: a config without the key is the same kernel.
    if (pingpong)
      c.set("pingpong", 1);
    if (persistent)
      c.set("persistent", 1);
    return c;
  }

  std::vector<TileConfig> configSpace(const KernelSpec &ks) const override {
    // The default first, so that a tuning capped at a few configs never
    // does worse than no tuning.
    std::vector<TileConfig> out = {defaultConfig(ks)};
    if (!attention::Params(ks).target.hasWgmma()) {
      for (int64_t raster : {0, 1})
        for (int64_t consumers : {2, 1})
          for (int64_t bn : {64, 32, 128})
            for (int64_t stages : {2, 3}) {
              TileConfig c = make(consumers, bn, stages, 0, raster, false, false);
              if (llvm::Error err = checkConfig(ks, c))
                llvm::consumeError(std::move(err));
              else if (c != out.front())
                out.push_back(std::move(c));
            }
      return out;
    }
    // By head under a causal mask with the share fixed in advance (the
    // default where the snake's share is even enough, byHeadShareExcess),
    // the default taking its tiles in groups of 8 heads second: near the
    // default's threshold a tuning sees both (the loop below has no taken
    // configs outside packed sequences; where the default takes, it has
    // the shares fixed in advance).
    attention::Params pk(ks);
    const TileConfig &def = out.front();
    if (pk.causal && pk.layout != attention::Layout::THD && def.has("persistent") &&
        def.get("persistent") && def.has("raster") && def.get("raster") && !def.has("take")) {
      TileConfig grouped = def;
      takeInHeadGroups(grouped);
      if (llvm::Error err = checkConfig(ks, grouped))
        llvm::consumeError(std::move(err));
      else
        out.push_back(std::move(grouped));
    }
    // Ping-pong last: each config with overlap and two consumers again,
    // taking turns; each with a persistent grid first, then a program a tile.
    for (bool pingpong : {false, true})
      for (int64_t raster : {1, 0})
        for (int64_t overlap : {1, 0})
          for (int64_t consumers : {2, 1})
            for (int64_t bn : {128, 176, 64, 192, 96})
              for (int64_t stages : {2, 3})
                for (bool persistent : {true, false}) {
                  if (pingpong && (!overlap || consumers != 2))
                    continue; // refused (it needs both)
                  TileConfig c = make(consumers, bn, stages, overlap, raster, pingpong, persistent);
                  // (Packed sequences: a persistent grid takes its tiles
                  // from the counter: on ragged packs a share fixed in
                  // advance took 16-24 % more time, on equal-length
                  // causal ones 3-5 % less (bench/NOTES.md b35); the
                  // space keeps one kind to halve its size.)
                  if (persistent && attention::Params(ks).layout == attention::Layout::THD)
                    c.set("take", 1);
                  if (llvm::Error err = checkConfig(ks, c))
                    llvm::consumeError(std::move(err));
                  else if (c != out.front())
                    out.push_back(std::move(c));
                }
    return out;
  }

  TileConfig defaultConfig(const KernelSpec &ks) const override {
    attention::Params p(ks);
    if (!p.target.hasWgmma()) {
      // sm_80 (mma.sync, cp.async): two warpgroups of 64 rows and 64 keys a
      // step where shared memory and registers allow; at head dim 256 one
      // warpgroup and 32 keys (not measured on an A100).
      for (TileConfig c : {make(2, 64, 2, 0, 0, false, false), make(1, 64, 2, 0, 0, false, false),
                           make(1, 32, 2, 0, 0, false, false)}) {
        llvm::Error err = checkConfig(ks, c);
        if (!err)
          return c;
        llvm::consumeError(std::move(err));
      }
      return make(1, 32, 2, 0, 0, false, false);
    }
    // Two consumers of 64 rows and the fastest measured on the H200
    // (bench/NOTES.md, attention a2 and a3): head dims 64 and 128, overlap
    // with the consumers taking turns (ping-pong gained 1-11 % at 128 and
    // 6 % at 64, where overlap alone had lost 5 %), and at 128 programs by
    // head where there are many KV heads (their K and V then stay in L2;
    // with one KV head, by head lost 16 %; at 64 it lost 9 %); 256, 64 keys
    // a step, neither (overlap would spill, by head lost 18 %). Every one
    // with a persistent grid (attention a4: 1-18 % faster than a program a
    // tile, but at S16384 causal, 1 % slower).
    // Packed sequences (THD) take their tiles from a counter, the producer
    // passing over those past their sequence's rows: the spec's sq is the
    // longest sequence, so most of a ragged pack's tiles have no rows, and
    // a share fixed in advance leaves programs idle while others hold the
    // long sequences' tiles (bench/NOTES.md b35: 14-19 % less time on
    // ragged packs, 3-5 % more on equal-length causal ones, even on two
    // others).
    // Programs by head under a causal mask take their tiles too where a
    // share fixed in advance would leave the slowest program more than 10
    // % above the best share there can be (byHeadShareExcess: 1.5 at 16
    // heads, 1.8 at 8; 1.17-1.40 at 40, 20 and 24 heads: 9-17 % less time),
    // in groups of 8 heads, the last rows first (raster_heads; b38, H100,
    // two alternated rounds in each of two calls: 24-37 % less time at B1
    // H16 S4096 to S16384 and B1 H8 S8192). Not at 32 heads (1.03 above
    // even): taken, alone or in groups, 1.3-14 % more time at S2048 to
    // S8192; at S16384 taken alone within the runs' spread over eight
    // rounds in four calls (-5 to +6 %), 1 % more at B2 H32 KV8.
    TileConfig c = p.d == 256  ? make(2, 64, 2, 0, 0)
                   : p.d == 64 ? make(2, 128, 2, 1, 0, /*pingpong=*/true)
                               : make(2, 128, 2, 1, p.hkv >= 8 ? 1 : 0, /*pingpong=*/true);
    bool byHead =
        c.has("raster") && c.get("raster") != 0 && p.causal && p.layout != attention::Layout::THD;
    if (byHead && attention::byHeadShareExcess(p, c.get("bm"), c.get("bn"), p.target.smCount()) >
                      attention::kUnevenShare)
      takeInHeadGroups(c);
    if (p.layout == attention::Layout::THD)
      c.set("take", 1);
    if (llvm::Error err = checkConfig(ks, c)) {
      llvm::consumeError(std::move(err));
      TileConfig fallback = make(2, 64, 2, 0, 0);
      if (p.layout == attention::Layout::THD)
        fallback.set("take", 1);
      return fallback;
    }
    return c;
  }

  llvm::Error checkConfig(const KernelSpec &ks, const TileConfig &cfg) const override {
    attention::Params p(ks);
    if (auto err = cfg.checkKeys(configKeys()))
      return err;
    if (cfg.has("raster_heads") && cfg.get("raster_heads") > 1 &&
        !(cfg.has("raster") && cfg.get("raster") != 0))
      return configError("raster_heads needs raster = 1 (raster 0 takes a row tile of every "
                         "head at a time)");
    if (!p.target.hasWgmma())
      return checkSm80(p, cfg);
    Shape s = shapeOf(p, cfg);
    if (s.bm != 64 * s.consumers)
      return configError("bm = " + llvm::Twine(s.bm) + " must be 64 rows for each of " +
                         llvm::Twine(s.consumers) + " consumers");
    if (s.bn % 16 != 0)
      return configError("bn = " + llvm::Twine(s.bn) + " must be a multiple of 16");
    if (s.pingpong && (!s.overlap || s.consumers != 2))
      return configError("pingpong needs overlap = 1 and 2 consumers (got overlap = " +
                         llvm::Twine(int(s.overlap)) + ", consumers = " + llvm::Twine(s.consumers) +
                         ")");
    // Registers of a consumer thread: O's accumulator (d / 2), S (bn / 2)
    // and P (bn / 4), and with overlap the last tile's P beside the next
    // tile's softmax (bn / 4), with room for addresses, m and l under the
    // consumers' limit. Overlap with d = 256 spilled (its accumulator alone
    // takes 128 registers).
    if (s.overlap && p.d > 128)
      return configError("overlap needs d <= 128 (d = " + llvm::Twine(p.d) +
                         " leaves too few registers: it would spill)");
    if (s.take && !s.persistent)
      return configError("take needs persistent = 1 (it is how a persistent program finds its "
                         "next tile)");
    // Seen to spill (60-68 bytes at d = 64 and 128), where 2 stages or
    // ping-pong did not.
    if (s.persistent && s.overlap && !s.pingpong && s.stages > 2)
      return configError("persistent with overlap but no ping-pong takes at most 2 stages (" +
                         llvm::Twine(s.stages) + " spilled)");
    // The limits are where ptxas began to spill (d = 128: bn = 144 with
    // overlap spilled 12 bytes, bn = 128 none).
    int64_t regs = p.d / 2 + 3 * s.bn / 4 + (s.overlap ? s.bn / 4 : 0);
    int64_t limit = s.overlap ? 192 : 224;
    if (regs > limit)
      return configError("each consumer thread would hold " + llvm::Twine(regs) +
                         " registers of O, S and P" + (s.overlap ? " and the last P" : "") +
                         " (at most " + llvm::Twine(limit) + " of its 240): use a smaller bn");
    int64_t smem = s.smemBytes(p.d, dtypeBytes(p.dt));
    if (smem > p.target.maxSharedBytesPerBlock())
      return configError("bm, bn and stages need " + llvm::Twine(smem) +
                         " bytes of shared memory; " + llvm::Twine(p.target.archName()) +
                         " allows " + llvm::Twine(p.target.maxSharedBytesPerBlock()));
    return llvm::Error::success();
  }

  // Arithmetic-bound: ranked again under sustained load (bench/NOTES.md,
  // GEMM g9).
  bool tunedUnderLoad() const override { return true; }

  std::string_view sourceHash() const override {
    return embedded::templateSourceHash("AttentionTemplate.cpp");
  }

  llvm::Expected<OwningOpRef<ModuleOp>> build(MLIRContext &ctx, const KernelSpec &ks,
                                              const TileConfig &cfg) const override {
    return buildModule(ctx, *this, ks, cfg, [&](OpBuilder &b, Location loc) {
      attention::Params p(ks);
      if (p.target.hasWgmma())
        buildKernel(b, loc, p, shapeOf(p, cfg), cfg);
      else
        buildSm80(b, loc, p, shapeOf(p, cfg), cfg);
    });
  }

private:
  static Shape shapeOf(const attention::Params &p, const TileConfig &cfg) {
    return Shape(cfg, p.d, dtypeBytes(p.dt), p.target.maxSharedBytesPerBlock());
  }

  static std::string kernelName(const attention::Params &p) {
    return "attn_fwd_" + std::string(dtypeName(p.dt)) + "_d" + std::to_string(p.d) + "_h" +
           std::to_string(p.hq) + "_" + std::to_string(p.hkv) + (p.causal ? "_causal" : "") + "_" +
           attention::layoutName(p.layout);
  }

  /// Below sm_90a (sm_80: mma.sync from ldmatrix, cp.async into rings):
  /// no warp specialization, persistent grid or overlap.
  llvm::Error checkSm80(const attention::Params &p, const TileConfig &cfg) const {
    Shape s = shapeOf(p, cfg);
    if (s.overlap || s.pingpong || s.persistent || s.take)
      return configError(
          "overlap, pingpong, persistent and take need sm_90a (asynchronous products, "
          "warp specialization); the target is " +
          llvm::Twine(p.target.archName()));
    if (s.bm != 64 * s.consumers)
      return configError("bm = " + llvm::Twine(s.bm) + " must be 64 rows for each of " +
                         llvm::Twine(s.consumers) + " warpgroups");
    if (s.bn % 16 != 0)
      return configError("bn = " + llvm::Twine(s.bn) + " must be a multiple of 16");
    if (s.stages < 2)
      return configError("stages = " + llvm::Twine(s.stages) +
                         ": the cp.async pipeline needs 2 or more (one landing while one is read)");
    // Registers of a thread: O (d / 2), S (bn / 2) and P (bn / 4), with
    // room for fragments and addresses under 255 (no setmaxnreg).
    int64_t regs = p.d / 2 + 3 * s.bn / 4;
    if (regs > 176)
      return configError("each thread would hold " + llvm::Twine(regs) +
                         " registers of O, S and P (at most 176 below sm_90a): use a smaller bn");
    int64_t smem = (s.bm + 2 * s.stages * s.bn) * p.d * dtypeBytes(p.dt) + 3 * 1024;
    if (smem > p.target.maxSharedBytesPerBlock())
      return configError("bm, bn and stages need " + llvm::Twine(smem) +
                         " bytes of shared memory; " + llvm::Twine(p.target.archName()) +
                         " allows " + llvm::Twine(p.target.maxSharedBytesPerBlock()));
    return llvm::Error::success();
  }

  /// The sm_80 kernel: a program per tile of bm query rows of one head of
  /// one sequence (the tiles with the most keys first, as the Hopper
  /// kernel's); every thread copies Q once and each tile of bn keys of K
  /// and V into `stages`-deep rings (cp.async, one group a tile, the next
  /// tiles in flight while this one is used); each warpgroup owns 64 rows:
  /// S = Q K^T (mma.sync from ldmatrix), the online softmax in registers as
  /// the Hopper kernel's, O += P V with P from registers.
  void buildSm80(OpBuilder &b, Location loc, const attention::Params &p, const Shape &s,
                 const TileConfig &cfg) const {
    MLIRContext &ctx = *b.getContext();
    Type dt = elemType(ctx, p.dt), f32 = b.getF32Type();
    bool bhsd = p.layout == attention::Layout::BHSD, thd = p.layout == attention::Layout::THD;
    int64_t dyn = ShapedType::kDynamic;
    // Q, K and V as rows: [tokens, h * d] (BSHD: b * s tokens; THD) or
    // [b * h * s, d] (BHSD); rows of a copy past a sequence's are another
    // sequence's (or head's), which the masks and the stores leave out.
    auto rowsOf = [&](int64_t heads) {
      return bhsd ? MemRefType::get({dyn, p.d}, dt) : MemRefType::get({dyn, heads * p.d}, dt);
    };
    auto oType = thd     ? MemRefType::get({dyn, p.hq * p.d}, dt)
                 : !bhsd ? MemRefType::get({dyn, dyn, p.hq * p.d}, dt)
                         : MemRefType::get({dyn, dyn, p.d}, dt);
    auto lseType = MemRefType::get({dyn, p.hq, dyn}, f32);
    auto cuType = MemRefType::get({dyn}, f32);
    // Q, K, V, O, LSE, scale * log2(e), sq, sk; THD: Q's and K's offsets.
    SmallVector<Type> args = {rowsOf(p.hq), rowsOf(p.hkv), rowsOf(p.hkv),    oType,
                              lseType,      f32,           b.getIndexType(), b.getIndexType()};
    if (thd)
      args.append({cuType, cuType});
    AffineExpr sq = getAffineSymbolExpr(0, &ctx), batch = getAffineSymbolExpr(1, &ctx);
    AffineMap grid = AffineMap::get(0, 2, {sq.ceilDiv(s.bm) * batch * p.hq}, &ctx);
    auto kernel =
        makeKernel(b, loc, kernelName(p), args, 128 * s.consumers, grid, {6, -1, 4, 0}, cfg);
    Block *entry = &kernel.getBody().front();
    Value q = entry->getArgument(0), k = entry->getArgument(1), v = entry->getArgument(2);
    Value o = entry->getArgument(3), lse = entry->getArgument(4);
    Value scaleLog2 = entry->getArgument(5), sqV = entry->getArgument(6),
          skV = entry->getArgument(7);
    KernelMath km{b, loc};
    auto cst = [&](int64_t x) { return km.cst(x); };

    Value rq = tt::AllocRingOp::create(b, loc, tt::RingType::get(&ctx, 1, s.bm, p.d, dt), nullptr);
    auto ringKV = tt::RingType::get(&ctx, s.stages, s.bn, p.d, dt);
    Value rk = tt::AllocRingOp::create(b, loc, ringKV, nullptr);
    Value rv = tt::AllocRingOp::create(b, loc, ringKV, nullptr);

    // The tile (as the Hopper kernel numbers them, a program each).
    Value heads = km.mul(memref::DimOp::create(b, loc, lse, 0), cst(p.hq));
    Value mTiles = km.ceilDiv(sqV, s.bm);
    attention::TilePlace place =
        attention::placeTile(km, p, s, tt::ProgramIdOp::create(b, loc, tt::Dim::x), mTiles, heads);
    Value bh = place.bh, seq = place.seq, head = place.head, kvHead = place.kvHead, q0 = place.q0;
    // The sequence's rows and keys, and where its rows start in Q's and
    // K's rows.
    Value rowsV = sqV, keys = skV, qBase, kBase;
    if (thd) {
      std::tie(qBase, rowsV) = km.sequenceRows(entry->getArgument(8), seq, sqV);
      std::tie(kBase, keys) = km.sequenceRows(entry->getArgument(9), seq, skV);
    } else if (bhsd) {
      qBase = km.mul(bh, sqV);
      kBase = km.mul(km.add(km.mul(seq, cst(p.hkv)), kvHead), skV);
    } else {
      qBase = km.mul(seq, sqV);
      kBase = km.mul(seq, skV);
    }
    Value qCol = bhsd ? cst(0) : km.mul(head, cst(p.d));
    Value kCol = bhsd ? cst(0) : km.mul(kvHead, cst(p.d));
    // Key tiles any row sees (none past the sequence's rows); the first
    // `whole` every row sees whole.
    Value kvEnd = p.causal ? km.minu(keys, km.add(q0, cst(s.bm))) : keys;
    Value inside = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, q0, rowsV);
    Value kvTiles = arith::SelectOp::create(b, loc, inside, km.ceilDiv(kvEnd, s.bn), cst(0));
    Value whole =
        km.minu(km.divu(p.causal ? km.minu(keys, km.add(q0, cst(1))) : keys, s.bn), kvTiles);

    // Copies as wide as 16 bytes (the launch checks the alignment).
    int64_t vec = 8;
    auto copyKV = [&](Value j, Value stage) {
      Value row = km.add(kBase, km.mul(j, cst(s.bn)));
      tt::AsyncCopyOp::create(b, loc, k, row, kCol, rk, stage, vec);
      tt::AsyncCopyOp::create(b, loc, v, row, kCol, rv, stage, vec);
      tt::AsyncCommitOp::create(b, loc);
    };
    // Q joins the first group; the first stages - 1 tiles are in flight
    // before the loop (tiles past the last are copied and never used).
    tt::AsyncCopyOp::create(b, loc, q, km.add(qBase, q0), qCol, rq, cst(0), vec);
    for (int64_t i = 0; i + 1 < s.stages; ++i)
      copyKV(cst(i), cst(i));

    Value wg = tt::WarpgroupIdOp::create(b, loc);
    Value myRows = km.mul(wg, cst(64));
    auto layout = tt::WgmmaLayoutAttr::get(&ctx);
    auto sType = RankedTensorType::get({64, s.bn}, f32, layout);
    auto pType = RankedTensorType::get({64, s.bn}, dt, layout);
    auto accType = RankedTensorType::get({64, p.d}, f32, layout);
    auto rowType = RankedTensorType::get({64}, f32, tt::SliceLayoutAttr::get(&ctx, 1, layout));
    Value zeroS = km.splat(sType, km.f32c(0.0));
    auto step = [&](Value j, ValueRange c, bool masked) -> SmallVector<Value> {
      // Tile j has landed once at most stages - 2 younger groups are
      // pending; the barrier makes it visible to all and frees the stage
      // tile j - 1 used, which the copies of tile j + stages - 1 refill.
      tt::AsyncWaitOp::create(b, loc, s.stages - 2);
      tt::BlockBarrierOp::create(b, loc);
      Value next = km.add(j, cst(s.stages - 1));
      copyKV(next, km.remu(next, s.stages));
      Value stage = km.remu(j, s.stages);
      Value sc = tt::DotOp::create(b, loc, sType, rq, cst(0), myRows, rk, stage, cst(0), zeroS,
                                   false, false, false, /*overwrite=*/true);
      auto sm =
          onlineSoftmax(km, sType, sc, km.mul(j, cst(s.bn)), keys,
                        p.causal ? km.add(q0, myRows) : Value(), c[0], c[1], scaleLog2, masked);
      Value acc =
          arith::MulFOp::create(b, loc, c[2], tt::BroadcastOp::create(b, loc, accType, sm[3]));
      acc = tt::DotRegOp::create(b, loc, accType, arith::TruncFOp::create(b, loc, pType, sm[2]), rv,
                                 stage, cst(0), acc, true, false);
      return {sm[0], sm[1], acc};
    };
    SmallVector<Value> init = {km.splat(rowType, km.f32c(-INFINITY)),
                               km.splat(rowType, km.f32c(0.0)), km.splat(accType, km.f32c(0.0))};
    SmallVector<Value> c =
        km.loop(cst(0), whole, init, [&](Value j, ValueRange c) { return step(j, c, false); });
    c = km.loop(whole, kvTiles, c, [&](Value j, ValueRange c) { return step(j, c, true); });
    // No copy may still be writing shared memory when the block exits.
    tt::AsyncWaitOp::create(b, loc, 0);

    // O / l, and LSE = (m + log2 l) ln 2. A row without keys (a packed
    // sequence's) has O's sums 0 and l = 0: O = 0 through l's floor (a row
    // with keys has l >= 1), LSE = -inf.
    Value m = c[0], l = c[1];
    Value inv = arith::DivFOp::create(
        b, loc, km.splat(rowType, km.f32c(1.0)),
        arith::MaxNumFOp::create(b, loc, l, km.splat(rowType, km.f32c(1e-30))));
    Value out = arith::MulFOp::create(b, loc, c[2], tt::BroadcastOp::create(b, loc, accType, inv));
    Value lseRow = arith::MulFOp::create(
        b, loc, arith::AddFOp::create(b, loc, m, math::Log2Op::create(b, loc, l)),
        km.splat(rowType, km.f32c(M_LN2)));
    Value row0 = km.add(q0, myRows);
    if (thd)
      tt::StoreOp::create(b, loc, out, tt::NarrowOp::create(b, loc, o, qBase, rowsV),
                          ValueRange{row0, km.mul(head, cst(p.d))});
    else if (!bhsd)
      tt::StoreOp::create(b, loc, out, o, ValueRange{seq, row0, km.mul(head, cst(p.d))});
    else
      tt::StoreOp::create(b, loc, out, o, ValueRange{bh, row0, cst(0)});
    tt::StoreOp::create(b, loc, lseRow, lse, ValueRange{seq, head, row0});
    tt::ReturnOp::create(b, loc);
    b.setInsertionPointAfter(kernel);
  }

  void buildKernel(OpBuilder &b, Location loc, const attention::Params &p, const Shape &s,
                   const TileConfig &cfg) const {
    MLIRContext &ctx = *b.getContext();
    Type dt = elemType(ctx, p.dt), f32 = b.getF32Type();
    Type idx = b.getIndexType();
    bool bshd = p.layout == attention::Layout::BSHD;
    // Packed sequences (THD): Q, K, V and O are [tokens, heads, d], each
    // sequence's rows from cu_seqlens[i] to cu_seqlens[i + 1].
    bool thd = p.layout == attention::Layout::THD;
    // Q's tile, and the K and V rings: rows of keys, the head dim along
    // the columns (K-major for Q K^T; V is read MN-major for P V).
    auto ringQ = tt::RingType::get(&ctx, s.qStages, s.bm, p.d, dt);
    auto ringK = tt::RingType::get(&ctx, s.stages, s.bn, p.d, dt);
    auto ringV = tt::RingType::get(&ctx, s.stages, s.bn, p.d, dt);
    // [dim, seq, heads, batch] for every layout (the launch sets strides;
    // THD: [dim, tokens, heads, 1]).
    auto mapQ = tt::TensorMapType::get(&ctx, s.bm, 64, dt, 4);
    auto mapKV = tt::TensorMapType::get(&ctx, s.bn, 64, dt, 4);
    // O: [b, sq, hq * d], [b * hq, sq, d] or (THD) [tokens, hq * d]; LSE:
    // [b, hq, sq] (THD: sq the longest sequence's rows).
    auto oType = thd ? MemRefType::get({ShapedType::kDynamic, p.hq * p.d}, dt)
                 : bshd
                     ? MemRefType::get({ShapedType::kDynamic, ShapedType::kDynamic, p.hq * p.d}, dt)
                     : MemRefType::get({ShapedType::kDynamic, ShapedType::kDynamic, p.d}, dt);
    auto lseType = MemRefType::get({ShapedType::kDynamic, p.hq, ShapedType::kDynamic}, f32);
    // Arguments: Q, K, V maps, O, LSE, scale * log2(e), sq, sk, the
    // persistent grid's cap; THD: then cu_seqlens of Q and of K (b + 1
    // int32 offsets each, as the words of f32 memrefs), sq and sk the
    // longest sequences'; take: then the tile counter (4 words, zeroed
    // before the launch, the first counted).
    auto cuType = MemRefType::get({ShapedType::kDynamic}, f32);
    SmallVector<Type> args = {mapQ, mapKV, mapKV, oType, lseType, f32, idx, idx, idx};
    if (thd)
      args.append({cuType, cuType});
    if (s.take)
      args.push_back(cuType);
    // Programs: a tile each, ceil(sq / bm) * batch * hq; persistent, at most
    // the cap.
    AffineExpr sq = getAffineSymbolExpr(0, &ctx), batch = getAffineSymbolExpr(1, &ctx),
               cap = getAffineSymbolExpr(2, &ctx);
    AffineExpr tiles = sq.ceilDiv(s.bm) * batch * p.hq;
    AffineMap grid = s.persistent ? AffineMap::get(0, 3, {tiles, cap}, &ctx)
                                  : AffineMap::get(0, 3, {tiles}, &ctx);
    auto kernel = makeKernel(b, loc, kernelName(p), args, 128 * (s.consumers + 1), grid,
                             {6, -1, 4, 0, 8, -1}, cfg, /*cluster=*/1, /*minBlocks=*/1);
    Block *entry = &kernel.getBody().front();
    Value qMap = entry->getArgument(0), kMap = entry->getArgument(1), vMap = entry->getArgument(2);
    Value o = entry->getArgument(3), lse = entry->getArgument(4);
    Value scaleLog2 = entry->getArgument(5), sqV = entry->getArgument(6),
          skV = entry->getArgument(7);
    Value cuQ = thd ? entry->getArgument(9) : Value(), cuK = thd ? entry->getArgument(10) : Value();
    Value counter = s.take ? entry->getArgument(thd ? 11 : 9) : Value();

    KernelMath km{b, loc};

    Value rq = tt::AllocRingOp::create(b, loc, ringQ, nullptr);
    Value rk = tt::AllocRingOp::create(b, loc, ringK, nullptr);
    Value rv = tt::AllocRingOp::create(b, loc, ringV, nullptr);
    auto barsType = tt::BarriersType::get(&ctx, s.stages);
    auto qBarsType = tt::BarriersType::get(&ctx, s.qStages);
    Value qFull = tt::AllocBarriersOp::create(b, loc, qBarsType, 1, nullptr);
    // With a persistent grid, a Q stage is refilled once every consumer is
    // done with it.
    Value qEmpty =
        s.persistent
            ? tt::AllocBarriersOp::create(b, loc, qBarsType, s.consumers, nullptr).getResult()
            : Value();
    Value kFull = tt::AllocBarriersOp::create(b, loc, barsType, 1, nullptr);
    Value vFull = tt::AllocBarriersOp::create(b, loc, barsType, 1, nullptr);
    // A stage's K and V are released apart: K once S is computed, V once
    // P V is (with overlap, a tile later).
    Value kEmpty = tt::AllocBarriersOp::create(b, loc, barsType, s.consumers, nullptr);
    Value vEmpty = tt::AllocBarriersOp::create(b, loc, barsType, s.consumers, nullptr);
    // With ping-pong, consumer c may issue its next products once the other
    // has issued its previous ones (barrier c, arrived on by the other).
    Value order =
        s.pingpong ? tt::AllocBarriersOp::create(b, loc, tt::BarriersType::get(&ctx, 2), 1, nullptr)
                         .getResult()
                   : Value();
    // take: the producer hands each tile it takes to the consumers through
    // one of two slots (its index, TakenTiles), full once written, free
    // once every consumer is done with the tile.
    TakenTiles taken;
    if (s.take)
      taken = TakenTiles::create(km, s.consumers, 1);

    // A tile of the problem (placeTile), its keys and, THD, its sequence.
    Value batchV = memref::DimOp::create(b, loc, lse, 0);
    Value heads = km.mul(batchV, km.cst(p.hq));
    Value mTiles = km.ceilDiv(sqV, s.bm);
    struct Tile : attention::TilePlace {
      Value kvTiles, whole;
      // The sequence's keys; THD: its first rows in Q and K, its query
      // rows, and whether the tile has rows (`rows`) and keys (`work`).
      Value keys, qStart, kStart, qLen, rows, work;
      /// The TMA row of the sequence's row `r` of Q (of K and V).
      Value qRow(KernelMath &km, Value r) const { return qStart ? km.add(qStart, r) : r; }
      Value kRow(KernelMath &km, Value r) const { return kStart ? km.add(kStart, r) : r; }
    };
    auto tileAt = [&](Value t) {
      Tile tile;
      static_cast<attention::TilePlace &>(tile) = attention::placeTile(km, p, s, t, mTiles, heads);
      tile.keys = skV;
      if (thd) {
        // A tile past its sequence's rows has nothing to do (the grid is
        // sized for the longest); one of a sequence without keys writes
        // O = 0 and LSE = -inf.
        std::tie(tile.qStart, tile.qLen) = km.sequenceRows(cuQ, tile.seq, sqV);
        std::tie(tile.kStart, tile.keys) = km.sequenceRows(cuK, tile.seq, skV);
        tile.rows = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, tile.q0, tile.qLen);
        tile.work = arith::AndIOp::create(
            b, loc, tile.rows,
            arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sgt, tile.keys, km.cst(0)));
      }
      // Key tiles: every tile up to the last key a row of the tile sees;
      // the first `whole` of them are seen whole by every row.
      Value keys = tile.keys;
      Value kvEnd = p.causal ? km.minu(keys, km.add(tile.q0, km.cst(s.bm))) : keys;
      tile.kvTiles = km.ceilDiv(kvEnd, s.bn);
      tile.whole = km.divu(p.causal ? km.minu(keys, km.add(tile.q0, km.cst(1))) : keys, s.bn);
      return tile;
    };
    auto stageOf = [&](Value it) {
      return std::make_pair(km.remu(it, s.stages), km.divu(it, s.stages));
    };
    // The program's tiles: its own, or with a persistent grid one of each
    // round of `programs` tiles, in a snake order (program p takes tile p of
    // even rounds and programs - 1 - p of odd ones), so that under a causal
    // mask with raster 0, where the tiles get shorter round by round, a
    // program that had a long tile gets a short one next. (With raster 1
    // the lengths repeat every mTiles tiles within a round.)
    // `body(tile, ti, r0)` handles the program's tile number ti whose key
    // tiles take the rings' steps from r0 on, and returns the step after
    // its last. THD: only tiles with rows and keys count (ti numbers those:
    // the Q stages and the consumers' turns follow it); `idle(tile)` runs
    // for the others.
    Value pid = tt::ProgramIdOp::create(b, loc, tt::Dim::x);
    // body(t, ti, r0) where the tile has work, else idle(t): the next ring
    // step and tile count.
    auto visit = [&](const Tile &t, Value ti, Value r0, auto body, auto idle) {
      if (!thd)
        return std::make_pair(body(t, ti, r0), km.add(ti, km.cst(1)));
      auto guard = scf::IfOp::create(b, loc, TypeRange{idx, idx}, t.work, /*withElse=*/true);
      {
        OpBuilder::InsertionGuard g(b);
        b.setInsertionPointToStart(&guard.getThenRegion().front());
        Value r = body(t, ti, r0);
        scf::YieldOp::create(b, loc, ValueRange{r, km.add(ti, km.cst(1))});
        b.setInsertionPointToStart(&guard.getElseRegion().front());
        idle(t);
        scf::YieldOp::create(b, loc, ValueRange{r0, ti});
      }
      return std::make_pair(guard.getResult(0), guard.getResult(1));
    };
    // take: the j-th tile the program takes (the producer: from the
    // counter; a consumer: from the producer's slot j mod 2) while there is
    // one. Carried: j, the ring step and (THD) the count of tiles with
    // work. THD: a tile past its sequence's rows has nothing to do or
    // store; the producer hands it to no consumer and takes the next one
    // into the same slot (j unchanged: the slots' barriers, and the rings'
    // rounds, count only the tiles handed out). Most of a pack of short
    // documents' tiles are such (the grid counts every sequence as long
    // as the longest).
    auto takeTiles = [&](bool producer, auto body, auto idle) {
      SmallVector<Value> init = {km.cst(0), km.cst(0)};
      if (thd)
        init.push_back(km.cst(0));
      taken.loop(km, producer, counter, km.mul(mTiles, heads), init, [&](Value at, ValueRange a) {
        Value j = a[0], slot = km.remu(j, 2);
        ValueRange c = a.drop_front();
        Tile t = tileAt(at);
        auto run = [&]() -> SmallVector<Value> {
          if (producer)
            taken.handOut(km, slot);
          auto [r, ti] = visit(t, thd ? c[1] : j, c[0], body, idle);
          if (!producer)
            taken.release(km, slot);
          SmallVector<Value> next = {km.add(j, km.cst(1)), r};
          if (thd)
            next.push_back(ti);
          return next;
        };
        if (!producer || !thd) {
          scf::YieldOp::create(b, loc, run());
          return;
        }
        scf::YieldOp::create(b, loc, km.ifElse(t.rows, a, run));
      });
    };
    auto forEachTile = [&](bool producer, auto body, auto idle) {
      if (!s.persistent) {
        visit(tileAt(pid), km.cst(0), km.cst(0), body, idle);
        return;
      }
      if (s.take) {
        takeTiles(producer, body, idle);
        return;
      }
      Value programs = tt::NumProgramsOp::create(b, loc, tt::Dim::x);
      Value mirror = km.sub(km.sub(programs, km.cst(1)), pid);
      auto inRound = [&](Value round) {
        Value odd =
            arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne, km.remu(round, 2), km.cst(0));
        return arith::SelectOp::create(b, loc, odd, mirror, pid).getResult();
      };
      // Whole rounds, and the last one's tile where the program has one.
      Value tiles = km.mul(mTiles, heads);
      Value rounds = arith::DivUIOp::create(b, loc, tiles, programs);
      Value left = arith::RemUIOp::create(b, loc, tiles, programs);
      Value more = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, inRound(rounds), left);
      Value count = km.add(rounds, arith::SelectOp::create(b, loc, more, km.cst(1), km.cst(0)));
      // Carried: the ring step, and (THD) the count of tiles with work.
      SmallVector<Value> init = {km.cst(0)};
      if (thd)
        init.push_back(km.cst(0));
      km.loop(km.cst(0), count, init, [&](Value round, ValueRange c) {
        Value t = km.add(km.mul(round, programs), inRound(round));
        auto [r, ti] = visit(tileAt(t), thd ? c[1] : round, c[0], body, idle);
        return thd ? SmallVector<Value>{r, ti} : SmallVector<Value>{r};
      });
    };
    auto nothing = [](const Tile &) {};

    // The TMA batch coordinate: the sequence, or (THD) 0.
    auto batchOf = [&](const Tile &t) { return thd ? km.cst(0) : t.seq; };

    auto ws = tt::WarpSpecializeOp::create(b, loc, s.consumers, 24, 240);
    {
      // The producer: each tile's Q, then its K and V tile by tile.
      OpBuilder::InsertionGuard guard(b);
      b.createBlock(&ws.getProducer());
      forEachTile(
          /*producer=*/true,
          [&](const Tile &t, Value ti, Value r0) -> Value {
            auto loadKV = [&](Value j) {
              auto [stage, round] = stageOf(km.add(r0, j));
              Value k0 = km.mul(j, km.cst(s.bn));
              tt::BarrierWaitOp::create(b, loc, kEmpty, stage, km.add(round, km.cst(1)));
              tt::TmaLoadOp::create(b, loc, kMap, t.kRow(km, k0), km.cst(0),
                                    ValueRange{t.kvHead, batchOf(t)}, rk, stage, kFull, stage);
              tt::BarrierWaitOp::create(b, loc, vEmpty, stage, km.add(round, km.cst(1)));
              tt::TmaLoadOp::create(b, loc, vMap, t.kRow(km, k0), km.cst(0),
                                    ValueRange{t.kvHead, batchOf(t)}, rv, stage, vFull, stage);
              return SmallVector<Value>{};
            };
            Value qStage = km.remu(ti, s.qStages), qRound = km.divu(ti, s.qStages);
            // With a persistent grid the first K and V tile goes first: its
            // stage frees while the last tile's run, Q's (with one Q stage)
            // only once they are done.
            Value from = km.cst(0);
            if (s.persistent) {
              loadKV(km.cst(0)); // every tile has a key tile
              from = km.cst(1);
              tt::BarrierWaitOp::create(b, loc, qEmpty, qStage, km.add(qRound, km.cst(1)));
            }
            tt::TmaLoadOp::create(b, loc, qMap, t.qRow(km, t.q0), km.cst(0),
                                  ValueRange{t.head, batchOf(t)}, rq, qStage, qFull, qStage);
            km.loop(from, t.kvTiles, {}, [&](Value j, ValueRange) { return loadKV(j); });
            return km.add(r0, t.kvTiles);
          },
          nothing);
      tt::YieldOp::create(b, loc);
    }
    {
      // A consumer: its 64 rows of each tile.
      OpBuilder::InsertionGuard guard(b);
      Block *body = b.createBlock(&ws.getConsumer());
      Value consumer = body->addArgument(idx, loc);
      Value myRows = km.mul(consumer, km.cst(64));
      auto wg = tt::WgmmaLayoutAttr::get(&ctx);
      auto rowsLayout = tt::SliceLayoutAttr::get(&ctx, 1, wg);
      auto sType = RankedTensorType::get({64, s.bn}, f32, wg);
      auto pType = RankedTensorType::get({64, s.bn}, dt, wg);
      auto accType = RankedTensorType::get({64, p.d}, f32, wg);
      auto rowType = RankedTensorType::get({64}, f32, rowsLayout);
      Value negInf = km.f32c(-INFINITY);
      Value zeroS = km.splat(sType, km.f32c(0.0));
      // This consumer's rows of O and of LSE (rows past the sequence are
      // not written; THD: LSE's rows past it, up to the longest, are).
      auto storeRows = [&](const Tile &t, Value out, Value lseRow) {
        Value row0 = km.add(t.q0, myRows);
        if (thd)
          tt::StoreOp::create(b, loc, out, tt::NarrowOp::create(b, loc, o, t.qStart, t.qLen),
                              ValueRange{row0, km.mul(t.head, km.cst(p.d))});
        else if (bshd)
          tt::StoreOp::create(b, loc, out, o, ValueRange{t.seq, row0, km.mul(t.head, km.cst(p.d))});
        else
          tt::StoreOp::create(b, loc, out, o, ValueRange{t.bh, row0, km.cst(0)});
        tt::StoreOp::create(b, loc, lseRow, lse, ValueRange{t.seq, t.head, row0});
      };

      forEachTile(
          /*producer=*/false,
          [&](const Tile &t, Value ti, Value r0) -> Value {
            Value qStage = km.remu(ti, s.qStages);
            tt::BarrierWaitOp::create(b, loc, qFull, qStage, km.divu(ti, s.qStages));
            // S = Q K^T of the tile in stage `stage`; K's stage is released
            // once S is complete.
            auto scores = [&](Value stage, Value round, bool async) -> Value {
              tt::BarrierWaitOp::create(b, loc, kFull, stage, round);
              Value sc = tt::DotOp::create(b, loc, sType, rq, qStage, myRows, rk, stage, km.cst(0),
                                           zeroS, false, false, async);
              if (!async)
                tt::BarrierArriveOp::create(b, loc, kEmpty, stage);
              return sc;
            };
            // The online softmax of S, the scores of keys [j bn, j bn + bn),
            // after m and l: the new m and l, P, and alpha, the factor that
            // rescales O.
            auto softmax = [&](Value sc, Value j, Value m, Value l, bool masked) {
              return onlineSoftmax(km, sType, sc, km.mul(j, km.cst(s.bn)), t.keys,
                                   p.causal ? km.add(t.q0, myRows) : Value(), m, l, scaleLog2,
                                   masked);
            };
            auto to16 = [&](Value pr) -> Value {
              return arith::TruncFOp::create(b, loc, pType, pr);
            };
            auto rescale = [&](Value acc, Value alpha) -> Value {
              return arith::MulFOp::create(b, loc, acc,
                                           tt::BroadcastOp::create(b, loc, accType, alpha));
            };
            Value mInit = km.splat(rowType, negInf), lInit = km.splat(rowType, km.f32c(0.0)),
                  accInit = km.splat(accType, km.f32c(0.0));
            // Ping-pong: the consumers issue their products in turns (turn u of
            // consumer c waits for phase u - 1 + c of its barrier; a fresh
            // barrier's phase of parity 1 counts as complete, so consumer 0's
            // first turn starts at once), then hand the turn over. Both take the
            // same number of turns, in lockstep: no wait is ever two phases
            // ahead. A tile takes one turn more than it has key tiles, so the
            // turn of ring step `it` is it + ti.
            auto takeTurn = [&](Value it) {
              if (s.pingpong)
                tt::BarrierWaitOp::create(b, loc, order, consumer,
                                          km.add(km.add(it, ti), km.add(consumer, km.cst(1))));
            };
            auto passTurn = [&]() {
              if (s.pingpong)
                tt::BarrierArriveOp::create(b, loc, order, km.sub(km.cst(1), consumer));
            };
            SmallVector<Value> last;
            if (!s.overlap) {
              // Each step: S, its softmax, then P V, each waited for. Carried:
              // m, l, O and the ring step.
              auto step = [&](Value j, ValueRange c, bool masked) -> SmallVector<Value> {
                auto [stage, round] = stageOf(c[3]);
                auto sm = softmax(scores(stage, round, /*async=*/false), j, c[0], c[1], masked);
                tt::BarrierWaitOp::create(b, loc, vFull, stage, round);
                Value acc = tt::DotRegOp::create(b, loc, accType, to16(sm[2]), rv, stage, km.cst(0),
                                                 rescale(c[2], sm[3]), true, false);
                tt::BarrierArriveOp::create(b, loc, vEmpty, stage);
                return {sm[0], sm[1], acc, km.add(c[3], km.cst(1))};
              };
              SmallVector<Value> init = {mInit, lInit, accInit, r0};
              SmallVector<Value> c = km.loop(km.cst(0), t.whole, init, [&](Value j, ValueRange c) {
                return step(j, c, false);
              });
              last = km.loop(t.whole, t.kvTiles, c,
                             [&](Value j, ValueRange c) { return step(j, c, true); });
            } else {
              // FlashAttention-3's overlap within a warpgroup. Step j holds P of
              // tile j and O rescaled for it: it starts Q K^T of tile j + 1 and
              // P V of tile j, waits for the scores only, runs the softmax of
              // tile j + 1 while P V runs, then waits for P V and rescales O.
              // Nothing pending crosses the loop's back edge, and no register a
              // running product reads is written before it completes (ptxas
              // would serialize the products otherwise). Carried: m, l, O, P,
              // the ring step.
              auto step = [&](Value j, ValueRange c, bool masked) -> SmallVector<Value> {
                Value it = c[4], itNext = km.add(it, km.cst(1));
                auto [stage, round] = stageOf(it);
                auto [stageNext, roundNext] = stageOf(itNext);
                takeTurn(itNext);
                Value sNext = scores(stageNext, roundNext, /*async=*/true);
                tt::BarrierWaitOp::create(b, loc, vFull, stage, round);
                Value pv =
                    tt::DotRegOp::create(b, loc, accType, c[3], rv, stage, km.cst(0), c[2], true,
                                         /*async=*/true);
                passTurn();
                sNext = tt::DotWaitOp::create(b, loc, ValueRange{sNext}, 1).getResult(0);
                tt::BarrierArriveOp::create(b, loc, kEmpty, stageNext);
                auto sm = softmax(sNext, km.add(j, km.cst(1)), c[0], c[1], masked);
                // P V is complete, and with it the reads of P's registers.
                Value acc = tt::DotWaitOp::create(b, loc, ValueRange{pv, c[3]}, 0).getResult(0);
                tt::BarrierArriveOp::create(b, loc, vEmpty, stage);
                return {sm[0], sm[1], rescale(acc, sm[3]), to16(sm[2]), itNext};
              };
              // The first key tile's softmax (masked: a mask on a whole tile
              // changes nothing), the steps whose next tile every row sees
              // whole, the steps whose next tile is masked, then the last key
              // tile's P V.
              auto [stage0, round0] = stageOf(r0);
              takeTurn(r0);
              Value s0 = scores(stage0, round0, /*async=*/false);
              passTurn();
              auto first = softmax(s0, km.cst(0), mInit, lInit, true);
              SmallVector<Value> init = {first[0], first[1], accInit, to16(first[2]), r0};
              Value lastTile = km.sub(t.kvTiles, km.cst(1));
              Value wholeNext = km.minu(
                  km.sub(arith::MaxUIOp::create(b, loc, t.whole, km.cst(1)), km.cst(1)), lastTile);
              SmallVector<Value> c =
                  km.loop(km.cst(0), wholeNext, init,
                          [&](Value j, ValueRange c) { return step(j, c, false); });
              c = km.loop(wholeNext, lastTile, c,
                          [&](Value j, ValueRange c) { return step(j, c, true); });
              auto [stage, round] = stageOf(c[4]);
              takeTurn(km.add(c[4], km.cst(1)));
              tt::BarrierWaitOp::create(b, loc, vFull, stage, round);
              Value acc = tt::DotRegOp::create(b, loc, accType, c[3], rv, stage, km.cst(0), c[2],
                                               true, false);
              passTurn();
              // The last V stage is free too (a producer going on to the next
              // tile waits for it).
              tt::BarrierArriveOp::create(b, loc, vEmpty, stage);
              last = {c[0], c[1], acc, km.add(c[4], km.cst(1))};
            }
            // Q's stage may be refilled (for the tile that takes it next).
            if (s.persistent)
              tt::BarrierArriveOp::create(b, loc, qEmpty, qStage);

            // Epilogue: O / l, and LSE = (m + log2 l) ln 2.
            Value m = last[0], l = last[1], acc = last[2];
            Value inv = arith::DivFOp::create(b, loc, km.splat(rowType, km.f32c(1.0)), l);
            Value out =
                arith::MulFOp::create(b, loc, acc, tt::BroadcastOp::create(b, loc, accType, inv));
            Value lseRow = arith::MulFOp::create(
                b, loc, arith::AddFOp::create(b, loc, m, math::Log2Op::create(b, loc, l)),
                km.splat(rowType, km.f32c(M_LN2)));
            storeRows(t, out, lseRow);
            return last[3];
          },
          [&](const Tile &t) {
            // THD: a tile of a sequence without keys: O = 0, LSE = -inf.
            auto some = scf::IfOp::create(b, loc, TypeRange{}, t.rows, /*withElse=*/false);
            OpBuilder::InsertionGuard g(b);
            b.setInsertionPointToStart(&some.getThenRegion().front());
            storeRows(t, km.splat(accType, km.f32c(0.0)), km.splat(rowType, negInf));
          });
      tt::YieldOp::create(b, loc);
    }
    b.setInsertionPointToEnd(entry);
    tt::ReturnOp::create(b, loc);
    b.setInsertionPointAfter(kernel);
  }
};

} // namespace

const KernelTemplate &attentionForwardTemplate() {
  static const AttentionForwardTemplate t;
  return t;
}

} // namespace tilejit
