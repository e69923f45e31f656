//===- GemmLaunch.h - GEMM launches on device buffers -------------*- C++ -*-===//
//
// The spec of a call, and its launch with a kernel in hand: the tensor maps
// of A and B (boxes from the kernel's parameters), D and C, alpha, beta and
// the cap on the persistent grid.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ops/gemm/GemmDecl.h"
#include "runtime/LoadedKernel.h"

namespace tilejit::gemm {

/// One call: D = alpha * op(A) @ op(B) (+ beta * C) (+ bias). Row-major
/// storage with leading dimensions in elements (0: the row length): A is
/// M x K (K x M with transA), B is K x N (N x K with transB), C and D are
/// M x N (C may be D), the bias N.
struct Call {
  DType ab = DType::BF16, out = DType::BF16;
  bool transA = false, transB = true;
  int64_t m = 0, n = 0, k = 0;
  uint64_t a = 0, b = 0, c = 0, d = 0;
  /// N elements of A's type added to every row of D (with hasBias).
  uint64_t bias = 0;
  bool hasBias = false;
  /// Elements from one row to the next (0: the row length). A and B's may
  /// be any on sm_90a (a multiple of 16 bytes: their tensor maps); C's and
  /// D's, and on sm_80 A's and B's, a multiple of 16 bytes at least the row
  /// length, which the spec's `ld` then compiles for.
  int64_t lda = 0, ldb = 0, ldc = 0, ldd = 0;
  float alpha = 1.0f, beta = 0.0f;
  bool hasC = false;
  /// Most blocks the persistent grid may have (0: one per multiprocessor
  /// of the kernel's target); fewer leave multiprocessors to other work. A
  /// kernel in clusters runs this many / the cluster size clusters (at
  /// least one).
  int64_t maxPrograms = 0;
  /// Device memory for a kernel that splits K (config splitk): at least
  /// workspaceBytes(kernel, call) bytes, 16-byte aligned, used by one launch
  /// at a time. 0: the launch takes it from a memory pool of tilejit's and
  /// gives it back after the kernel, both ordered on the stream (so that
  /// launches on several streams never share one, and CUDA graph capture
  /// records them as the graph's own allocation).
  uint64_t workspace = 0;
  /// Bytes at `workspace`: a launch that needs more is refused, naming both.
  int64_t workspaceSize = 0;
};

/// The call a spec describes (no buffers yet; alpha 1, beta 1 with C).
Call callOf(const Params &p);

/// The spec for `call` on `target`, or an error naming the bad field: `ld`
/// where C or D (or on a target without wgmma, A or B) has a leading
/// dimension other than its row length, `d16` from D's address.
llvm::Expected<KernelSpec> specOf(const Call &call, const Target &target);

/// Launches `call` with `kernel` (built for specOf(call)) on `stream`: the
/// sm_90a kernel with tensor maps of A and B, the sm_80 kernel (any target
/// without wgmma) with plain views of them (dense rows; the grid is one
/// program per tile, so `maxPrograms` does not apply).
llvm::Error launch(const LoadedKernel &kernel, const Call &call, int smCount, CUstream stream);

/// The workspace a launch of `call` with `kernel` needs (0 unless the kernel
/// splits K in S parts): for every tile of D, S - 1 bm x bn f32 tiles of
/// partial sums and S - 1 flag words per consumer. A kernel that splits K
/// also needs all its programs resident at once: the launch caps its grid at
/// `smCount` (one program per multiprocessor), below which `maxPrograms` may
/// go.
int64_t workspaceBytes(const LoadedKernel &kernel, const Call &call);

} // namespace tilejit::gemm
