//===- AttentionLaunch.cpp ------------------------------------------------===//
#include "ops/attention/AttentionLaunch.h"

#include "runtime/CudaDriver.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/TensorMap.h"

#include <algorithm>
#include <cmath>
#include <iterator>

#include "llvm/ADT/Twine.h"

namespace tilejit::attention {

namespace {
llvm::Error error(const llvm::Twine &msg, const char *op = "attn_fwd") {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), op + llvm::Twine(": ") + msg);
}

/// `name` ([b, s, h, d] or [b, h, s, d] at `addr`, elements of `dt`) as a
/// [d, s, h, b] tensor map whose copies move `box` = (rows, 128 bytes of
/// columns, 1, 1) with the 128-byte swizzle.
llvm::Expected<CUtensorMap> mapOf(const char *op, const char *name, const Call &c, uint64_t addr,
                                  int64_t seq, int64_t heads, const std::vector<int64_t> &box,
                                  DType dt) {
  if (box.size() != 4)
    return error(llvm::Twine("the kernel's tensor map for ") + name + " is not 4-D", op);
  if (addr % 16 != 0)
    return error(llvm::Twine(name) + " is at an address that is not 16-byte aligned", op);
  int64_t e = dtypeBytes(dt);
  TensorMapDesc t;
  t.dtype = dt;
  t.rank = 4;
  t.address = addr;
  t.dims[0] = c.d;
  t.dims[1] = seq;
  t.dims[2] = heads;
  // Packed sequences: one batch of every row (`seq` is the rows in all).
  t.dims[3] = c.layout == Layout::THD ? 1 : c.b;
  if (c.layout != Layout::BHSD) {
    t.strideBytes[0] = heads * c.d * e;
    t.strideBytes[1] = c.d * e;
  } else {
    t.strideBytes[0] = c.d * e;
    t.strideBytes[1] = seq * c.d * e;
  }
  t.strideBytes[2] = seq * heads * c.d * e;
  t.box[0] = uint32_t(box[1]);
  t.box[1] = uint32_t(box[0]);
  t.swizzle = TensorMapDesc::B128;
  auto map = encodeTensorMap(t);
  if (!map)
    return error(llvm::Twine(name) + ": " + llvm::toString(map.takeError()), op);
  return *map;
}

llvm::Expected<CUtensorMap> mapOf(const char *op, const char *name, const Call &c, uint64_t addr,
                                  int64_t seq, int64_t heads, const std::vector<int64_t> &box) {
  return mapOf(op, name, c, addr, seq, heads, box, c.dt);
}

/// Packed sequences: the rows of Q and of K in all, at least 1 each.
llvm::Error checkTotals(const Call &c, const char *op) {
  if (c.totalQ < 1 || c.totalK < 1)
    return error("packed sequences (THD) need totalQ and totalK, the rows of Q and of K in all, of "
                 "at least 1, got totalQ=" +
                     llvm::Twine(c.totalQ) + " totalK=" + llvm::Twine(c.totalK),
                 op);
  // b sequences of at most sq (sk) rows each: more rows in all is a wrong
  // call (the grid covers sq rows a sequence; the rest would go unwritten).
  // (Named in words, not fields: the C interface calls them total_q and
  // max_sq, the C++ one totalQ and sq.)
  for (auto [name, total, longest] :
       {std::tuple{"Q", c.totalQ, c.sq}, std::tuple{"K", c.totalK, c.sk}})
    if (c.b >= 1 && (total / c.b > longest || (total / c.b == longest && total % c.b != 0)))
      return error("packed " + llvm::Twine(name) + " has " + llvm::Twine(total) +
                       " rows in all, more than b=" + llvm::Twine(c.b) + " sequences of at most " +
                       llvm::Twine(longest) + " rows (the longest sequence's)",
                   op);
  return llvm::Error::success();
}

/// The call's sizes, each at least 1, and its scale (for a spec and for
/// every launch: a kernel built for other sizes takes them at run time, and
/// the scale is never built in). The kernels take scale * log2(e) as a
/// float too.
llvm::Error checkCall(const Call &c, const char *op) {
  if (c.b < 1 || c.sq < 1 || c.sk < 1 || c.hq < 1 || c.hkv < 1)
    return error("sizes must be positive, got b=" + llvm::Twine(c.b) + " sq=" + llvm::Twine(c.sq) +
                     " sk=" + llvm::Twine(c.sk) + " hq=" + llvm::Twine(c.hq) +
                     " hkv=" + llvm::Twine(c.hkv),
                 op);
  if (!(c.scale >= 0.0f) || std::isinf(float(double(c.scale) * M_LOG2E)))
    return error("scale must be positive and finite (0: 1/sqrt(d)), at most 2.35e38, got " +
                     std::to_string(c.scale),
                 op);
  if (c.maxPrograms < 0)
    return error("maxPrograms must be >= 0 (0: one program a multiprocessor), got " +
                     llvm::Twine(c.maxPrograms),
                 op);
  return llvm::Error::success();
}

/// That `kernel` is `op`'s, built for the call's compile-time sizes (its
/// head dim, heads, mask, types and layout: a kernel of other ones would
/// map heads, rows or bits otherwise, silently).
llvm::Error checkKernelFits(const LoadedKernel &kernel, const Call &c, bool backward,
                            const char *op) {
  const KernelSpec &s = kernel.spec();
  if (backward ? !isBackward(s) : !isForward(s))
    return error("the kernel is not " + llvm::Twine(op) + "'s (its spec: " + s.canonical() + ")",
                 op);
  Params p(s);
  auto mismatch = [&](const char *name, const std::string &built, const std::string &called) {
    return error("the kernel is built for " + llvm::Twine(name) + "=" + built + ", the call has " +
                     name + "=" + called,
                 op);
  };
  if (p.dt != c.dt)
    return mismatch("dt", std::string(dtypeName(p.dt)), std::string(dtypeName(c.dt)));
  for (auto [name, built, called] :
       {std::tuple{"d", p.d, c.d}, std::tuple{"hq", p.hq, c.hq}, std::tuple{"hkv", p.hkv, c.hkv},
        std::tuple{"causal", int64_t(p.causal), int64_t(c.causal)}})
    if (built != called)
      return mismatch(name, std::to_string(built), std::to_string(called));
  if (p.layout != c.layout)
    return mismatch("layout", layoutName(p.layout), layoutName(c.layout));
  return llvm::Error::success();
}

llvm::Expected<KernelSpec> makeSpec(const Call &c, const Target &target, bool backward) {
  const char *op = backward ? "attn_bwd" : "attn_fwd";
  if (auto err = checkCall(c, op))
    return err;
  Params p;
  p.backward = backward;
  p.dt = c.dt;
  p.d = c.d;
  p.hq = c.hq;
  p.hkv = c.hkv;
  p.causal = c.causal;
  p.layout = c.layout;
  p.b = c.b;
  p.sq = c.sq;
  p.sk = c.sk;
  p.deterministic = c.deterministic;
  p.target = target;
  KernelSpec s = p.spec();
  if (auto err = s.validate())
    return err;
  if (c.layout == Layout::THD) {
    if (auto err = checkTotals(c, op))
      return err;
    // The grids cover b sequences of the longest's rows: their tiles of 64
    // rows (each head's) are counted in 32 bits.
    int64_t longest = std::max(c.sq, c.sk), tiles = (longest + 63) / 64;
    // (The spec's limits keep the product in 64 bits.)
    if (tiles * c.hq * c.b >= (int64_t(1) << 31))
      return error("packed sequences: b=" + llvm::Twine(c.b) + " sequences of up to " +
                       llvm::Twine(longest) + " rows (the longest) with hq=" + llvm::Twine(c.hq) +
                       " heads make 2^31 tiles of 64 rows or more (the grids cover b times the "
                       "longest sequence)",
                   op);
  }
  return s;
}

float scaleOf(const Call &c) {
  return c.scale > 0.0f ? c.scale : float(1.0 / std::sqrt(double(c.d)));
}

/// Q, O and their gradients as the kernels view them: [b, s, h * d] or
/// [b * h, s, d].
KernelArg rowsView(const Call &c, uint64_t addr, int64_t seq, int64_t heads) {
  if (c.layout == Layout::BSHD)
    return KernelArg::view(addr, {c.b, seq, heads * c.d});
  return KernelArg::view(addr, {c.b * heads, seq, c.d});
}

/// Rows per sequence of `seq` in the backward's workspace (the template's
/// padding).
int64_t paddedRows(int64_t seq) {
  return (seq + kBackwardWorkspaceRows - 1) / kBackwardWorkspaceRows * kBackwardWorkspaceRows;
}
int64_t workspaceRows(const Call &c) { return paddedRows(c.sq); }

/// The backward's workspace: LSE and D of every query row, then (with the
/// query heads split) the parts' sums of dK and dV, then the f32 sums of dQ
/// (a fused config's), where the call asks for deterministic results the
/// flags the fused kernel orders its additions by (kFlagsPerTile words of
/// each query tile of kFusedQueryRows rows of every head), and (fused) the
/// counter a persistent kernel with take counts its tiles with.
struct Workspace {
  int64_t split = 1, lseBytes = 0, partialBytes = 0, dqBytes = 0, flagBytes = 0, counterBytes = 0;
  bool overflows = false; // sizes whose bytes do not fit in int64_t
  Workspace(const Call &c, bool fused)
      : split(c.headSplit > 0 ? c.headSplit : backwardHeadSplit(c.b, c.hq, c.hkv, c.sk)) {
    auto product = [&](std::initializer_list<int64_t> factors) {
      int64_t p = 1;
      for (int64_t f : factors)
        overflows |= f < 0 || __builtin_mul_overflow(p, f, &p);
      return p;
    };
    lseBytes = product({2, c.b, c.hq, workspaceRows(c), 4});
    if (split > 1)
      partialBytes = product({2, split, c.b, c.hkv, paddedRows(c.sk), c.d, 4});
    if (fused)
      dqBytes = product({dqSumRows(c), c.hq, c.d, 4});
    if (fused && c.deterministic)
      flagBytes = product({c.b, c.hq, flagTiles(c), kFlagsPerTile, 4});
    // (The tile counter of a persistent kernel that takes its tiles at run
    // time: one word counted, 16 bytes kept.)
    if (fused)
      counterBytes = 16;
    overflows |= __builtin_add_overflow(lseBytes, partialBytes, &total) ||
                 __builtin_add_overflow(total, dqBytes, &total) ||
                 __builtin_add_overflow(total, flagBytes, &total) ||
                 __builtin_add_overflow(total, counterBytes, &total);
  }
  /// Rows of dQ's f32 sums (of hq * d elements): each sequence's padded
  /// rows (BSHD: b of them; BHSD: b * hq, each of one head's d elements),
  /// THD every row of Q and kFusedQueryRows more for each sequence, so that
  /// each sequence's query tiles lie in rows of its own (sequence i's from
  /// cuSeqlensQ[i] + kFusedQueryRows * i, the template's sumsStart).
  /// (-1 where they would not fit in 64 bits.)
  static int64_t dqSumRows(const Call &c) {
    int64_t rows = 0;
    bool thd = c.layout == Layout::THD;
    if (__builtin_mul_overflow(c.b, thd ? kFusedQueryRows : workspaceRows(c), &rows) ||
        (thd && __builtin_add_overflow(rows, c.totalQ, &rows)))
      return -1;
    return rows;
  }
  /// Query tiles of a fused kernel's step per head, for the flags.
  static int64_t flagTiles(const Call &c) { return (c.sq + kFusedQueryRows - 1) / kFusedQueryRows; }
  /// dQ's sums, the flags and the tile counter (which follow them): the
  /// bytes the fused kernels take from tilejit's pool where the caller's
  /// workspace has no room for them.
  int64_t fusedBytes() const { return dqBytes + flagBytes + counterBytes; }
  int64_t total = 0;
  /// The parts' sums as the kernels view them: dK and dV's view, f32, rows
  /// padded, 2 * split of them along the first dimension.
  KernelArg partials(const BackwardCall &c) const {
    uint64_t at = c.workspace + uint64_t(lseBytes);
    int64_t rows = paddedRows(c.sk);
    if (c.layout != Layout::BHSD) // (THD: as BSHD's)
      return KernelArg::view(at, {2 * split * c.b, rows, c.hkv * c.d});
    return KernelArg::view(at, {2 * split * c.b * c.hkv, rows, c.d});
  }
  /// Fused: where dQ's f32 sums are when not in the workspace (tilejit's
  /// pool's memory for the launch); 0: after the parts' sums.
  uint64_t sumsElsewhere = 0;
  /// Where dQ's f32 sums start: dQ's layout with its rows padded.
  uint64_t dqSumsAt(const BackwardCall &c) const {
    return sumsElsewhere ? sumsElsewhere : c.workspace + uint64_t(lseBytes + partialBytes);
  }
  /// The flags, after dQ's sums: [b * hq, query tiles, kFlagsPerTile] words.
  uint64_t flagsAt(const BackwardCall &c) const { return dqSumsAt(c) + uint64_t(dqBytes); }
  KernelArg flags(const BackwardCall &c) const {
    return KernelArg::view(flagsAt(c), {c.b * c.hq, flagTiles(c), kFlagsPerTile});
  }
  /// The tile counter, after the flags: 4 words, the first counted.
  uint64_t counterAt(const BackwardCall &c) const { return flagsAt(c) + uint64_t(flagBytes); }
  KernelArg counter(const BackwardCall &c) const { return KernelArg::view(counterAt(c), {4}); }
  /// The flags and the counter as one run of words (what the fused
  /// workspace kernel zeroes, or a launch of the dK/dV kernel alone).
  int64_t wordBytes() const { return flagBytes + counterBytes; }
  KernelArg words(const BackwardCall &c) const {
    return KernelArg::view(flagsAt(c), {wordBytes() / 4});
  }
  /// dQ's f32 sums, as dQ's view with its rows padded (THD: dqSumRows).
  KernelArg dqSums(const BackwardCall &c) const {
    uint64_t at = dqSumsAt(c);
    if (c.layout == Layout::THD)
      return KernelArg::view(at, {dqSumRows(c), c.hq * c.d});
    if (c.layout == Layout::BSHD)
      return KernelArg::view(at, {c.b, workspaceRows(c), c.hq * c.d});
    return KernelArg::view(at, {c.b * c.hq, workspaceRows(c), c.d});
  }
};

/// Below sm_90a: every row of Q (K, V, dO) for the kernels' copies, as
/// [rows, h * d] (BSHD: b * s rows; THD: the total), or [b * h * s, d]
/// (BHSD); `queries`: Q's rows, else K's.
KernelArg copyRows(const Call &c, uint64_t addr, int64_t heads, bool queries) {
  int64_t all =
      c.layout == Layout::THD ? (queries ? c.totalQ : c.totalK) : c.b * (queries ? c.sq : c.sk);
  return c.layout == Layout::BHSD ? KernelArg::view(addr, {all * heads, c.d})
                                  : KernelArg::view(addr, {all, heads * c.d});
}

/// The tensors the kernels below sm_90a copy from: their copies move 16
/// bytes, from 16-byte aligned rows.
llvm::Error copiesAligned(std::initializer_list<std::pair<const char *, uint64_t>> tensors,
                          const char *op) {
  for (auto [name, addr] : tensors)
    if (addr % 16 != 0)
      return error(llvm::Twine(name) + " is at an address that is not 16-byte aligned", op);
  return llvm::Error::success();
}
} // namespace

Call callOf(const Params &p) {
  Call c;
  c.dt = p.dt;
  c.d = p.d;
  c.hq = p.hq;
  c.hkv = p.hkv;
  c.causal = p.causal;
  c.layout = p.layout;
  c.b = p.b;
  c.sq = p.sq;
  c.sk = p.sk;
  c.deterministic = p.deterministic;
  if (p.layout == Layout::THD) { // b sequences of sq query and sk key rows
    c.totalQ = p.b * p.sq;
    c.totalK = p.b * p.sk;
  }
  return c;
}

llvm::Expected<KernelSpec> specOf(const Call &c, const Target &target) {
  return makeSpec(c, target, /*backward=*/false);
}

llvm::Expected<KernelSpec> backwardSpecOf(const Call &c, const Target &target) {
  return makeSpec(c, target, /*backward=*/true);
}

int64_t backwardWorkspaceBytes(const Call &c, bool fused) {
  Workspace w(c, fused);
  return w.overflows ? -1 : w.total;
}

llvm::Error launch(const LoadedKernel &kernel, const Call &c, int smCount, CUstream stream) {
  if (auto err = checkCall(c, "attn_fwd"))
    return err;
  if (auto err = checkKernelFits(kernel, c, false, "attn_fwd"))
    return err;
  if (kernel.numEntries() != 1)
    return error("the kernel has " + llvm::Twine(kernel.numEntries()) + " entries, not 1");
  const EntryInfo &e = kernel.entry(0);
  bool thd = c.layout == Layout::THD;
  // Below sm_90a (no tensor maps): Q, K and V as rows, and no grid cap.
  // A persistent kernel that takes its tiles from a counter (config take):
  // then the counter, a view after the others.
  bool sm80 = !e.params.empty() && e.params[0].kind != ParamInfo::TensorMap;
  size_t base = (sm80 ? 8 : 9) + (thd ? 2 : 0);
  bool take = !sm80 && e.params.size() == base + 1 && e.params[base].kind == ParamInfo::View;
  size_t want = base + (take ? 1 : 0);
  if (e.params.size() != want)
    return error("the kernel takes " + llvm::Twine(e.params.size()) + " parameters, not " +
                 llvm::Twine(want));
  if (!c.q || !c.k || !c.v || !c.o || !c.lse)
    return error("a null device pointer");
  if (c.o % 4 != 0 || c.lse % 4 != 0)
    return error("O and LSE must be 4-byte aligned");
  if (thd) {
    if (!c.cuSeqlensQ || !c.cuSeqlensK)
      return error("packed sequences (THD) need cuSeqlensQ and cuSeqlensK");
    if (c.cuSeqlensQ % 4 != 0 || c.cuSeqlensK % 4 != 0)
      return error("cuSeqlensQ and cuSeqlensK must be 4-byte aligned (int32)");
    if (auto err = checkTotals(c, "attn_fwd"))
      return err;
  }
  // Rows of each map's sequence dimension: a sequence's, or every row.
  int64_t rowsQ = thd ? c.totalQ : c.sq, rowsK = thd ? c.totalK : c.sk;
  float scale = scaleOf(c);
  KernelArg o = thd ? KernelArg::view(c.o, {c.totalQ, c.hq * c.d}) : rowsView(c, c.o, c.sq, c.hq);
  KernelArg lse = KernelArg::view(c.lse, {c.b, c.hq, c.sq});
  KernelArg scaleLog2 = KernelArg::f32(float(double(scale) * M_LOG2E));
  KernelArg cuQ = KernelArg::view(c.cuSeqlensQ, {c.b + 1}),
            cuK = KernelArg::view(c.cuSeqlensK, {c.b + 1});
  if (sm80) {
    if (auto err = copiesAligned({{"Q", c.q}, {"K", c.k}, {"V", c.v}}, "attn_fwd"))
      return err;
    KernelArg args[10] = {copyRows(c, c.q, c.hq, true),
                          copyRows(c, c.k, c.hkv, false),
                          copyRows(c, c.v, c.hkv, false),
                          o,
                          lse,
                          scaleLog2,
                          KernelArg::index(c.sq),
                          KernelArg::index(c.sk),
                          cuQ,
                          cuK};
    return kernel.launch(0, args, want, stream);
  }
  auto mq = mapOf("attn_fwd", "Q", c, c.q, rowsQ, c.hq, e.params[0].staticSizes);
  if (!mq)
    return mq.takeError();
  auto mk = mapOf("attn_fwd", "K", c, c.k, rowsK, c.hkv, e.params[1].staticSizes);
  if (!mk)
    return mk.takeError();
  auto mv = mapOf("attn_fwd", "V", c, c.v, rowsK, c.hkv, e.params[2].staticSizes);
  if (!mv)
    return mv.takeError();
  KernelArg args[12] = {KernelArg::tensorMap(*mq),
                        KernelArg::tensorMap(*mk),
                        KernelArg::tensorMap(*mv),
                        o,
                        lse,
                        scaleLog2,
                        KernelArg::index(c.sq),
                        KernelArg::index(c.sk),
                        KernelArg::index(c.maxPrograms > 0 ? c.maxPrograms : std::max(smCount, 1)),
                        cuQ,
                        cuK};
  if (!take)
    return kernel.launch(0, args, want, stream);
  // (The counter is 32 bits: every tile and each program's last take must
  // count below 2^31; bm is at least 64 rows, and the programs are at most
  // the cap and the tiles.)
  if (!takeCounterFits({c.sq / 64 + (c.sq % 64 != 0), c.b, c.hq},
                       c.maxPrograms > 0 ? c.maxPrograms : std::max(smCount, 1)))
    return error("too many tiles for the 32-bit tile counter (ceil(sq / 64) * b * hq tiles "
                 "and a take past the last for each program must stay below 2^31; sq = " +
                 llvm::Twine(c.sq) + ", b = " + llvm::Twine(c.b) + ", hq = " + llvm::Twine(c.hq) +
                 ")");
  // take: the counter in scratch of the stream's (ordered on it, so a
  // graph capture records it), zeroed before the launch, given back after.
  auto counter = StreamBuffer::take(kernel.context(), 16, stream, "attn_fwd: the tile counter");
  if (!counter)
    return counter.takeError();
  auto drv = CudaDriver::get();
  if (!drv)
    return counter->giveBack(drv.takeError());
  if (CUresult r = drv->cuMemsetD8Async(CUdeviceptr(counter->ptr()), 0, 16, stream))
    return counter->giveBack(drv->error(r, "cuMemsetD8Async (attn_fwd's tile counter)"));
  args[thd ? 11 : 9] = KernelArg::view(counter->ptr(), {4});
  return counter->giveBack(kernel.launch(0, args, want, stream));
}

bool takeCounterFits(llvm::ArrayRef<int64_t> factors, int64_t cap) {
  int64_t tiles = 1;
  for (int64_t f : factors)
    if (f < 0 || __builtin_mul_overflow(tiles, f, &tiles))
      return false;
  int64_t programs = std::min(std::max<int64_t>(cap, 0), tiles);
  return tiles < (int64_t(1) << 31) && tiles + programs < (int64_t(1) << 31);
}

bool fusedBackward(const LoadedKernel &kernel) { return kernel.numEntries() == 4; }

llvm::Error launchBackward(const LoadedKernel &kernel, const BackwardCall &c, CUstream stream) {
  const char *op = "attn_bwd";
  // dQ (which fills the workspace's LSE and D), dK/dV, the sum of dK and
  // dV's parts; fused: the workspace's LSE and D, dK/dV with dQ's sums,
  // the parts' sum, dQ from its sums.
  // (Sizes of 0 would also launch no workspace kernel, which zeroes the
  // words a fused kernel counts from.)
  if (auto err = checkCall(c, op))
    return err;
  if (c.only < -1 || c.only > 1)
    return error("only must be -1 (every kernel), 0 or 1, got " + llvm::Twine(c.only), op);
  if (c.headSplit < 0 || c.workspaceSize < 0)
    return error("headSplit and workspaceSize must be >= 0 (0: the default's), got headSplit=" +
                     llvm::Twine(c.headSplit) + " workspaceSize=" + llvm::Twine(c.workspaceSize),
                 op);
  if (auto err = checkKernelFits(kernel, c, true, op))
    return err;
  bool fused = fusedBackward(kernel);
  if (kernel.numEntries() != 3 && !fused)
    return error("the kernel has " + llvm::Twine(kernel.numEntries()) + " entries, not 3 or 4", op);
  const EntryInfo &dq = kernel.entry(0), &dkv = kernel.entry(1);
  // Fused for a deterministic spec: the dK/dV kernel orders its additions
  // by flags (its last argument). The call's mode must be the kernel's: one
  // built to add in any order is not run for a call that asks for bitwise
  // repeatable results, nor an ordered one where the call's workspace has
  // no room for the flags.
  // Persistent (config persist; fused, adding in any order): then an
  // index, the most programs the call allows; with take, then the counter
  // its programs take their tiles from (a view). (Fused: after dQ's sums
  // and, THD, Q's and K's offsets.)
  bool thd = c.layout == Layout::THD;
  size_t dkvParams = dkv.params.size(), tail = 14 + (thd ? 2 : 0);
  bool persistent = fused && dkvParams >= tail + 1 && dkv.params[tail].kind == ParamInfo::Index;
  bool take = persistent && dkvParams == tail + 2 && dkv.params[tail + 1].kind == ParamInfo::View;
  bool ordered = fused && dkvParams == tail + 1 && !persistent;
  if (fused && ordered != c.deterministic)
    return error(ordered ? "the kernel adds dQ's parts in a fixed order (built for deterministic = "
                           "1); the call says deterministic = 0"
                         : "the kernel adds dQ's parts in no fixed order (built for deterministic "
                           "= 0); the call asks for deterministic results",
                 op);
  // THD: Q's and K's offsets after the others' arguments (the fused dK/dV
  // kernel's: after dQ's sums); the sum's, K's; the fused kernels', Q's.
  size_t offsets = thd ? 2 : 0;
  size_t want[4] = {fused ? 7u + offsets / 2 : 13u + offsets,
                    fused ? tail + (take                    ? 2
                                    : ordered || persistent ? 1
                                                            : 0)
                          : 13u + offsets,
                    5u + offsets / 2, 4u + offsets / 2};
  for (size_t i = 0; i < kernel.numEntries(); ++i)
    if (kernel.entry(i).params.size() != want[i])
      return error("kernel " + llvm::Twine(i) + " (" + kernel.entry(i).name + ") takes " +
                       llvm::Twine(kernel.entry(i).params.size()) + " parameters, not " +
                       llvm::Twine(want[i]),
                   op);
  if (!c.q || !c.k || !c.v || !c.o || !c.lse || !c.dO || !c.dQ || !c.dK || !c.dV)
    return error("a null device pointer", op);
  Workspace w(c, fused);
  if (w.overflows)
    return error("sizes whose workspace does not fit in 64 bits", op);
  if ((c.hq / c.hkv) % w.split != 0)
    return error("the query heads of a group (hq / hkv = " + llvm::Twine(c.hq) + " / " +
                     llvm::Twine(c.hkv) + ") cannot be split " + llvm::Twine(w.split) + " ways",
                 op);
  // Take counts its tiles in 32 bits, and each program counts once past the
  // last (so up to tiles + programs, programs at most tiles, compared
  // unsigned): at most ceil(sk / 64) tiles of each sequence's KV head and
  // part of the split (a tile has 64 keys or more), fewer than 2^31.
  if (take && !takeCounterFits({c.sk / 64 + (c.sk % 64 != 0), c.b, c.hkv, w.split}, 0))
    return error("the kernel takes its tiles from a 32-bit counter; this call may have 2^31 "
                 "tiles or more (b * hkv * split * ceil(sk / 64))",
                 op);
  if (!c.workspace || c.workspace % 16 != 0)
    return error("the workspace (" + llvm::Twine(backwardWorkspaceBytes(c)) +
                     " bytes) must be given, 16-byte aligned",
                 op);
  // The caller's workspace holds LSE, D and the parts' sums; a fused
  // kernel's dQ sums too where it has room, else they come from tilejit's
  // pool for this launch (the C interface's callers size the workspace
  // without knowing the config).
  int64_t need = w.total - w.fusedBytes(), have = c.workspaceSize > 0 ? c.workspaceSize : need;
  if (have < need)
    return error("the workspace holds " + llvm::Twine(have) + " bytes; this call needs " +
                     llvm::Twine(need) + " (backwardWorkspaceBytes)",
                 op);
  StreamBuffer sums;
  if (fused && have < w.total) {
    if (c.only != -1)
      return error("launching the fused kernels one at a time needs dQ's sums in the workspace "
                   "(backwardWorkspaceBytes(call, true) bytes)",
                   op);
    auto taken = StreamBuffer::take(kernel.context(), size_t(w.fusedBytes()), stream,
                                    ordered ? "attn_bwd: dQ's f32 sums, flags and tile counter"
                                            : "attn_bwd: dQ's f32 sums and tile counter");
    if (!taken)
      return taken.takeError();
    sums = std::move(*taken);
    w.sumsElsewhere = sums.ptr();
  }
  if (thd) {
    if (!c.cuSeqlensQ || !c.cuSeqlensK || c.cuSeqlensQ % 4 != 0 || c.cuSeqlensK % 4 != 0)
      return error("packed sequences (THD) need cuSeqlensQ and cuSeqlensK, 4-byte aligned", op);
    if (auto err = checkTotals(c, op))
      return err;
  }
  for (auto [name, addr] : {std::pair{"O", c.o}, std::pair{"dO", c.dO}, std::pair{"dQ", c.dQ},
                            std::pair{"dK", c.dK}, std::pair{"dV", c.dV}, std::pair{"LSE", c.lse}})
    if (addr % 4 != 0)
      return error(llvm::Twine(name) + " must be 4-byte aligned", op);
  // Below sm_90a (no tensor maps; never fused): Q, K, V and dO as rows
  // for the copies, [rows, h * d] or [b * h * s, d] (BHSD), the workspace
  // as a memref where the Hopper kernels take maps.
  bool sm80 = !fused && dq.params[0].kind != ParamInfo::TensorMap;
  if (sm80)
    if (auto err = copiesAligned({{"Q", c.q}, {"K", c.k}, {"V", c.v}, {"dO", c.dO}}, op))
      return err;
  // The tensor maps of both kernels (their boxes differ): Q, K, V, dO of
  // the dQ kernel, then K, V, Q, dO of the dK/dV kernel.
  struct Operand {
    const char *name;
    uint64_t addr;
    int64_t seq, heads;
  };
  // (THD: a map's sequence dimension is every row.)
  int64_t rowsQ = thd ? c.totalQ : c.sq, rowsK = thd ? c.totalK : c.sk;
  const Operand q{"Q", c.q, rowsQ, c.hq}, k{"K", c.k, rowsK, c.hkv}, v{"V", c.v, rowsK, c.hkv},
      dout{"dO", c.dO, rowsQ, c.hq};
  const std::pair<const Operand *, const EntryInfo *> operands[8] = {
      {&q, &dq},  {&k, &dq},  {&v, &dq},  {&dout, &dq},
      {&k, &dkv}, {&v, &dkv}, {&q, &dkv}, {&dout, &dkv}};
  CUtensorMap maps[8] = {}; // fused: the dK/dV kernel's only
  for (int i = fused ? 4 : 0; i < (sm80 ? 0 : 8); ++i) {
    const Operand &t = *operands[i].first;
    auto m =
        mapOf(op, t.name, c, t.addr, t.seq, t.heads, operands[i].second->params[i % 4].staticSizes);
    if (!m)
      return m.takeError();
    maps[i] = *m;
  }
  // Operand i as its kernel takes it: its map, or below sm_90a its rows.
  auto operand = [&](int i) {
    const Operand &t = *operands[i].first;
    return sm80 ? copyRows(c, t.addr, t.heads, &t == &q || &t == &dout)
                : KernelArg::tensorMap(maps[i]);
  };
  float scale = scaleOf(c);
  KernelArg ws = KernelArg::view(c.workspace, {2, c.b * c.hq, workspaceRows(c)});
  // The dK/dV kernel reads the workspace through a tensor map: [rows, b *
  // hq, 2] innermost first, boxes of the kernel's (8 x 32 f32, one deep).
  CUtensorMap statMap = {};
  if (!sm80) {
    const std::vector<int64_t> &box = dkv.params[4].staticSizes;
    if (box.size() != 3)
      return error("the kernel's tensor map of the workspace is not 3-D", op);
    TensorMapDesc t;
    t.dtype = DType::F32;
    t.rank = 3;
    t.address = c.workspace;
    t.dims[0] = workspaceRows(c);
    t.dims[1] = c.b * c.hq;
    t.dims[2] = 2;
    t.strideBytes[0] = workspaceRows(c) * 4;
    t.strideBytes[1] = c.b * c.hq * workspaceRows(c) * 4;
    t.box[0] = uint32_t(box[1]);
    t.box[1] = uint32_t(box[0]);
    t.swizzle = TensorMapDesc::B128;
    auto m = encodeTensorMap(t);
    if (!m)
      return error("the workspace's tensor map: " + llvm::toString(m.takeError()), op);
    statMap = *m;
  }
  KernelArg scaleLog2 = KernelArg::f32(float(double(scale) * M_LOG2E));
  KernelArg dqSums = w.dqSums(c);
  // Fused: the dK/dV kernel adds its parts of dQ into the sums through a
  // tensor map of them (f32, as Q's with the rows padded), or (config
  // dqfrag) into the sums' view, in its registers' order.
  CUtensorMap sumsMap = {};
  bool sumsByMap = fused && dkv.params[13].kind == ParamInfo::TensorMap;
  if (sumsByMap) {
    auto m =
        mapOf(op, "dQ's sums", c, w.dqSumsAt(c), thd ? Workspace::dqSumRows(c) : workspaceRows(c),
              c.hq, dkv.params[13].staticSizes, DType::F32);
    if (!m)
      return m.takeError();
    sumsMap = *m;
  }
  // Kernel 0: dQ (with the workspace's LSE and D), or fused the workspace's
  // kernel alone.
  // THD: Q's rows (O, dO, dQ) and K's (dK, dV) as [tokens, h * d], and
  // the offsets.
  auto qRows = [&](uint64_t addr) {
    return thd ? KernelArg::view(addr, {c.totalQ, c.hq * c.d}) : rowsView(c, addr, c.sq, c.hq);
  };
  auto kRows = [&](uint64_t addr) {
    return thd ? KernelArg::view(addr, {c.totalK, c.hkv * c.d}) : rowsView(c, addr, c.sk, c.hkv);
  };
  KernelArg cuQ = KernelArg::view(c.cuSeqlensQ, {c.b + 1}),
            cuK = KernelArg::view(c.cuSeqlensK, {c.b + 1});
  auto launchFirst = [&]() -> llvm::Error {
    KernelArg o = qRows(c.o), dO = qRows(c.dO);
    KernelArg lse = KernelArg::view(c.lse, {c.b, c.hq, c.sq});
    if (fused) {
      KernelArg pre[] = {o, dO, lse, ws, dqSums, KernelArg::index(c.sq), w.words(c), cuQ};
      return kernel.launch(0, pre, want[0], stream);
    }
    KernelArg first[] = {operand(0),
                         operand(1),
                         operand(2),
                         operand(3),
                         o,
                         dO,
                         lse,
                         qRows(c.dQ),
                         ws,
                         scaleLog2,
                         KernelArg::f32(scale),
                         KernelArg::index(c.sq),
                         KernelArg::index(c.sk),
                         cuQ,
                         cuK};
    return kernel.launch(0, first, std::size(first) - (thd ? 0 : 2), stream);
  };
  if (c.only != 1)
    if (auto err = launchFirst())
      return err;
  if (c.only == 0)
    return llvm::Error::success();
  KernelArg partials = w.partials(c);
  KernelArg dK = kRows(c.dK), dV = kRows(c.dV);
  // K, V, Q, dO, the workspace, dK, dV, the scales, sq, sk, the parts'
  // sums, the split; fused, dQ's sums; THD, the offsets; then ordered,
  // the flags, or persistent, the cap (and with take the counter).
  std::vector<KernelArg> second = {operand(4),
                                   operand(5),
                                   operand(6),
                                   operand(7),
                                   sm80 ? ws : KernelArg::tensorMap(statMap),
                                   dK,
                                   dV,
                                   scaleLog2,
                                   KernelArg::f32(scale),
                                   KernelArg::index(c.sq),
                                   KernelArg::index(c.sk),
                                   partials,
                                   KernelArg::index(w.split)};
  if (fused)
    second.push_back(sumsByMap ? KernelArg::tensorMap(sumsMap) : dqSums);
  if (thd)
    second.insert(second.end(), {cuQ, cuK});
  if (ordered)
    second.push_back(w.flags(c));
  if (persistent)
    second.push_back(KernelArg::index(c.maxPrograms > 0 ? c.maxPrograms : INT32_MAX));
  if (take)
    second.push_back(w.counter(c));
  // Ordered: the flags start at 0 (what the kernel counts from); take: the
  // counter does (the first tile). The workspace kernel zeroed them (the
  // words after dQ's sums); a launch of the dK/dV kernel alone zeroes the
  // same words first.
  if ((ordered || take) && c.only == 1) {
    auto drv = CudaDriver::get();
    if (!drv)
      return drv.takeError();
    if (CUresult r =
            drv->cuMemsetD8Async(CUdeviceptr(w.flagsAt(c)), 0, size_t(w.wordBytes()), stream);
        r != CUDA_SUCCESS)
      return drv->error(r, "attn_bwd: zeroing the flags and the tile counter (cuMemsetD8Async)");
  }
  if (c.dkvGrid) {
    auto grid = kernel.gridFor(1, second.data(), second.size());
    if (!grid)
      return grid.takeError();
    *c.dkvGrid = *grid;
  }
  if (auto err = kernel.launch(1, second.data(), second.size(), stream))
    return err;
  if (w.split > 1) {
    KernelArg third[] = {partials, dK, dV, KernelArg::index(c.sk), KernelArg::index(w.split), cuK};
    if (auto err = kernel.launch(2, third, want[2], stream))
      return err;
  }
  if (!fused)
    return llvm::Error::success();
  KernelArg fourth[] = {dqSums, qRows(c.dQ), KernelArg::f32(scale), KernelArg::index(c.sq), cuQ};
  // (Pooled sums go back on the stream after the kernel that reads them;
  // on an earlier error, when `sums` goes out of scope.)
  return sums.giveBack(kernel.launch(3, fourth, want[3], stream));
}

} // namespace tilejit::attention
