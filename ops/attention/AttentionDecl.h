//===- AttentionDecl.h - the attention ops' declarations ----------*- C++ -*-===//
//
// attn_fwd: O = softmax(scale * Q K^T + mask) V with fp32 accumulation and
// the fp32 log-sum-exp of each query row (natural log); attn_bwd: dQ, dK and
// dV from dO, O and that LSE. Both take the same spec parameters, and
// attn_bwd one more: `deterministic` (1, the default: dQ's parts are added
// in a fixed order and the results are bitwise repeatable; 0: configs that
// add them atomically, in any order, may be chosen too). Params is a typed
// view of either spec for the code that builds and launches it.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "core/KernelSpec.h"

#include "llvm/ADT/ArrayRef.h"

namespace tilejit::attention {

/// The parameters' positions in a spec, in canonical order (Deterministic:
/// attn_bwd's only).
enum Param : int {
  DT,
  HeadDim,
  QHeads,
  KvHeads,
  Causal,
  Storage,
  Batch,
  SeqQ,
  SeqK,
  Deterministic
};

/// How Q, K, V and O are stored (row-major, head dim innermost).
enum class Layout : int64_t {
  BSHD = 0, ///< [batch, seq, heads, dim]: Megatron's and FlashAttention's
  BHSD = 1, ///< [batch, heads, seq, dim]: torch's scaled_dot_product_attention
  /// [tokens, heads, dim]: packed sequences of different lengths (Megatron's
  /// THD, FlashAttention's varlen), sequence i's rows from cu_seqlens[i] to
  /// cu_seqlens[i + 1].
  THD = 2,
};
/// "bshd", "bhsd" or "thd" (kernel names and messages).
const char *layoutName(Layout layout);

const OpDecl &forwardOp();
const OpDecl &backwardOp();

/// attn_bwd's workspace pads each sequence's query rows to a multiple of
/// this (every tile of its kernels lies inside).
constexpr int64_t kBackwardWorkspaceRows = 128;
/// The most rows of a sequence (sq, sk) a spec may have.
constexpr int64_t kMaxSeq = int64_t(1) << 22;
/// A fused backward config's query rows per step (kv_bm: a warpgroup's rows
/// of dQ's product), and so the rows of a query tile whose additions a flag
/// orders for a deterministic spec; flag words per such tile.
constexpr int64_t kFusedQueryRows = 64;
constexpr int64_t kFlagsPerTile = 1;
/// Ways attn_bwd's dK/dV kernel splits the query heads of each KV head's
/// group over programs: 1 while the KV heads' tiles of 128 keys make 512
/// programs or more (about four per multiprocessor, so that under a causal
/// mask the long and the short programs even out), else the smallest
/// divisor of the group that does, or the whole group. Each part's sums are
/// added in order by a third kernel.
int64_t backwardHeadSplit(int64_t b, int64_t hq, int64_t hkv, int64_t sk);
bool isForward(const KernelSpec &spec);
bool isBackward(const KernelSpec &spec);

struct Params;
/// Whether attn_bwd of `p`'s shape has configs that add dQ's parts
/// atomically and build without spills: those its tuning space takes where
/// the spec says deterministic = 0 (sm_90a, head dims 64 and 128). Only
/// there does a nondeterministic spec differ from the deterministic one,
/// so only there do callers build one.
bool atomicDqTunable(const Params &p);
/// How far the slowest of `programs` persistent programs is above the best
/// share there can be where `units` runs of tiles, tile i of each run taking
/// steps[i] steps, are shared out in advance in the snake order of
/// attn_fwd's and attn_bwd's persistent grids (round j's tiles to the
/// programs in turn, odd rounds from the last program): its steps over the
/// larger of the mean and the longest tile's. 1 where no share could do
/// better (one round of tiles or fewer, say), and where there are more than
/// 2^20 tiles (not counted).
double snakeShareExcess(llvm::ArrayRef<double> steps, int64_t units, int64_t programs);
/// The excess above which the defaults take their tiles from a counter
/// rather than share them out in advance (both grids; bench/NOTES.md b38,
/// b39: 1.03 kept, 1.13-1.17 gains, 1.08 within the runs' spread).
constexpr double kUnevenShare = 1.10;
/// That of attn_fwd's grid by head (raster 1): each head's row tiles of bm
/// rows, the last ones first, a tile's steps its key tiles of bn and one
/// more. As bench/attn_walk_model.py finds: about 1.03 at 32 heads of 4096
/// to 32768 rows, 1.5 at 16 heads, 1.8 at 8 of 8192 or 16384 (bench/NOTES.md
/// b38).
double byHeadShareExcess(const Params &p, int64_t bm, int64_t bn, int64_t programs);
/// That of attn_bwd's dK/dV grid: each unit's (a sequence's KV head, or one
/// part of its query heads where backwardHeadSplit splits them) key tiles of
/// bn, the first ones first, a tile's steps its query tiles of kv_bm for
/// each of the unit's query heads and two more (its dK and dV stores).
double dkvShareExcess(const Params &p, int64_t bn, int64_t kvBm, int64_t programs);

/// A spec of attn_fwd or attn_bwd, field by field. Q is [b, sq, hq, d] (BSHD),
/// [b, hq, sq, d] (BHSD) or [tokens, hq, d] (THD: b sequences of at most sq
/// rows); K and V the same with hkv heads and sk rows; O as Q; LSE is
/// [b, hq, sq] f32. Query head h reads kv head h / (hq / hkv). Causal: query
/// row i of a sequence sees its keys 0..i (the upper-left diagonal, as
/// torch's is_causal).
struct Params {
  Params() = default;
  explicit Params(const KernelSpec &spec);

  bool backward = false;  // attn_bwd: dQ, dK, dV (as Q, K, V) from dO (as O)
  DType dt = DType::BF16; // Q, K, V and O: bf16 or f16
  int64_t d = 128;        // head dim: 64, 128 or 256
  int64_t hq = 1, hkv = 1;
  bool causal = false;
  Layout layout = Layout::BSHD;
  int64_t b = 1, sq = 1, sk = 1; // launch-time sizes; tuning hints
  /// attn_bwd: only configs whose results are bitwise repeatable (a fused
  /// dQ's parts added in a fixed order, not atomically in any).
  bool deterministic = true;
  Target target;

  KernelSpec spec() const;
  operator KernelSpec() const { return spec(); }
  /// Floating-point operations of the pass (forward: 4 b hq sq sk d, halved
  /// when causal; backward 2.5 times that, five products to the forward's
  /// two): what TFLOP/s figures divide.
  double flops() const;
};

} // namespace tilejit::attention
