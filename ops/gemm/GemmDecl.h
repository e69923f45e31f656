//===- GemmDecl.h - the GEMM op's declaration ---------------------*- C++ -*-===//
//
// gemm: D = alpha * op(A) @ op(B) + beta * C + bias, fp32 accumulation, as spec
// parameters, and a typed view of a gemm spec for the code that builds and
// launches it.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "core/KernelSpec.h"

namespace tilejit::gemm {

/// The parameters' positions in a spec, in canonical order.
enum Param : int { ABDType, OutDType, TransA, TransB, HasC, M, N, K, HasBias, Ld, DAligned };

const OpDecl &op();
bool isGemm(const KernelSpec &spec);

/// A spec of gemm, field by field. Storage, row-major: A is M x K (K x M
/// with transA), B is K x N (N x K with transB: a weight of F.linear), C
/// and D are M x N. NT (transB) is the forward of a linear layer, NN its
/// input gradient, TN its weight gradient.
struct Params {
  Params() = default;
  explicit Params(const KernelSpec &spec);

  DType ab = DType::BF16;  // A and B: bf16 or f16
  DType out = DType::BF16; // C and D: bf16, f16 or f32
  bool transA = false, transB = true;
  bool hasC = false;    // D = alpha A B + beta C (C may be D itself: main_grad accumulation)
  bool hasBias = false; // + bias: N elements of A's type, added to every row (F.linear's)
  int64_t m = 1;        // launch-time size; a tuning hint, not compiled in
  int64_t n = 1, k = 1;
  /// C's and D's rows lie a leading dimension apart, given at launch (a
  /// multiple of 16 bytes); the sm_80 kernel's A and B too (the sm_90a
  /// kernel's take theirs in their tensor maps either way). false: dense
  /// rows of N.
  bool ld = false;
  /// D starts on a 16-byte boundary, as TMA stores need (false: D is
  /// written by the consumers' own stores).
  bool dAligned = true;
  Target target;

  /// "nt", "nn", "tn" or "tt".
  std::string layoutName() const;
  KernelSpec spec() const;
  operator KernelSpec() const { return spec(); }
};

} // namespace tilejit::gemm
