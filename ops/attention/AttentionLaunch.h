//===- AttentionLaunch.h - attention launches on device buffers --*- C++ -*-===//
//
// The spec of a call, and its launch with a kernel in hand: 4-D tensor maps
// of Q, K and V ([dim, seq, heads, batch], strides from the layout), O, LSE,
// the scale and the sequence lengths.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ops/attention/AttentionDecl.h"
#include "runtime/LoadedKernel.h"

#include <array>

namespace tilejit::attention {

/// One forward call on contiguous tensors: Q and O are [b, sq, hq, d]
/// (BSHD) or [b, hq, sq, d] (BHSD), K and V the same with hkv heads and sk
/// rows; LSE is [b, hq, sq] f32. THD (packed sequences): Q and O are
/// [totalQ, hq, d], K and V [totalK, hkv, d]; sequence i's rows run from
/// cuSeqlensQ[i] to cuSeqlensQ[i + 1] (int32, b + 1 of them, on the device;
/// cuSeqlensK for K and V; read as they are: stores are cut at the tensors'
/// rows whatever they hold); sq and sk are at least the longest sequence's
/// query and key rows (smaller values give wrong results). LSE row r of
/// sequence i is at [i, head, r]; its rows past the sequence's end hold
/// unspecified values. A sequence with queries and no keys gets O = 0 and
/// LSE = -inf.
struct Call {
  DType dt = DType::BF16;
  int64_t d = 128, hq = 1, hkv = 1;
  bool causal = false;
  Layout layout = Layout::BSHD;
  int64_t b = 0, sq = 0, sk = 0;
  uint64_t q = 0, k = 0, v = 0, o = 0, lse = 0;
  /// THD only: the offsets of the sequences' rows, and the rows in all.
  uint64_t cuSeqlensQ = 0, cuSeqlensK = 0;
  int64_t totalQ = 0, totalK = 0;
  /// Multiplies Q K^T; 0 means 1 / sqrt(d).
  float scale = 0.0f;
  /// Forward with a persistent config, backward with persist (its dK/dV
  /// kernel): most programs the grid may have (0: one per
  /// multiprocessor); fewer leave multiprocessors to other work.
  int64_t maxPrograms = 0;
  /// Backward only: the ways the query heads of each KV head's group are
  /// split over the dK/dV kernel's programs (a divisor of hq / hkv); 0, the
  /// choice of backwardHeadSplit.
  int64_t headSplit = 0;
  /// Backward only: the spec's `deterministic` (configs whose dQ is added
  /// atomically are chosen only when false; a fused config adds in order
  /// when true). launchBackward refuses a fused kernel built for the other
  /// value.
  bool deterministic = true;
};

/// The call a spec describes (no buffers yet).
Call callOf(const Params &p);

/// The spec for `call` on `target`, or an error naming the bad field.
llvm::Expected<KernelSpec> specOf(const Call &call, const Target &target);

/// Launches `call` with `kernel` (built for specOf(call)) on `stream`;
/// `smCount`, the multiprocessors of the GPU, caps a persistent grid. A
/// kernel that takes its tiles from a counter (config take, the default on
/// packed sequences) gets the counter from tilejit's stream-ordered pool
/// (StreamBuffer: zeroed, then given back, on the stream; a CUDA graph
/// capture records both), as split-K's partial sums do.
llvm::Error launch(const LoadedKernel &kernel, const Call &call, int smCount, CUstream stream);

/// One backward call: the forward's tensors (Q, K, V, O, LSE; `o` and `lse`
/// as the forward wrote them) and dO (as O), into dQ, dK and dV (as Q, K
/// and V). `workspace` holds backwardWorkspaceBytes(call) bytes, 16-byte
/// aligned; its contents on entry do not matter.
struct BackwardCall : Call {
  uint64_t dO = 0, dQ = 0, dK = 0, dV = 0, workspace = 0;
  /// The bytes `workspace` holds; 0: backwardWorkspaceBytes(call). A fused
  /// kernel keeps dQ's f32 sums (for a deterministic call also the flags
  /// that order their additions) and its tile counter there when it holds
  /// backwardWorkspaceBytes(call, true), else in memory of tilejit's pool,
  /// taken and given back on the stream for the launch.
  int64_t workspaceSize = 0;
  /// Launch only kernel 0 (dQ, which fills the workspace; fused: the
  /// workspace's kernel) or 1 (dK and dV, which reads it, the sum of their
  /// parts where the heads are split; fused: dQ's conversion too, and the
  /// flags or the tile counter the dK/dV kernel counts from zeroed first,
  /// which the workspace's kernel zeroes otherwise); -1, all. For timing
  /// each alone.
  int only = -1;
  /// Where not null, set to the grid (x, y, z in programs) the dK/dV kernel
  /// was launched with: a persistent grid's cap made visible.
  std::array<int64_t, 3> *dkvGrid = nullptr;
};

/// The attn_bwd spec of `call` on `target`, or an error naming the bad field.
llvm::Expected<KernelSpec> backwardSpecOf(const Call &call, const Target &target);

/// Bytes of the workspace a backward call needs: LSE in the log2 domain and
/// D = rowsum(dO * O) of every query row, f32, rows padded to 128; where
/// few KV heads would leave the GPU idle (backwardHeadSplit > 1), the f32
/// sums of dK and dV of each part of the query heads too; for a kernel built
/// with a fused config (fusedBackward), room for dQ's f32 sums (as many as
/// dQ's elements, rows padded; THD, totalQ + 64 * b rows) too, for a
/// deterministic call the flags that order their additions (4 bytes per
/// query tile of 64 rows of each head), and 16 bytes for the counter a
/// persistent kernel that takes its tiles at run time (config take) counts
/// them with. -1 for sizes whose bytes would not fit in 64 bits.
int64_t backwardWorkspaceBytes(const Call &call, bool fused = false);

/// Whether a persistent grid that takes its tiles from a 32-bit counter
/// (config take) stays within it: the tiles, the product of `factors`
/// (counted without overflow), and each of min(cap, tiles) programs' one
/// take past the last, below 2^31 together (cap 0: the tiles alone).
bool takeCounterFits(llvm::ArrayRef<int64_t> factors, int64_t cap);

/// Whether `kernel` (built for backwardSpecOf) is a fused config's: dQ
/// added into f32 sums by the dK/dV kernel.
bool fusedBackward(const LoadedKernel &kernel);

/// Launches the backward `call` with `kernel` (built for backwardSpecOf) on
/// `stream`: the dQ kernel (which also fills the workspace), then the dK/dV
/// kernel, then (heads split) the sum of its parts; with a fused config the
/// workspace's kernel, dK/dV with dQ's sums, the parts' sum, then dQ.
llvm::Error launchBackward(const LoadedKernel &kernel, const BackwardCall &call, CUstream stream);

} // namespace tilejit::attention
