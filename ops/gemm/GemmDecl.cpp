//===- GemmDecl.cpp -------------------------------------------------------===//
#include "ops/gemm/GemmDecl.h"

#include "llvm/ADT/Twine.h"

namespace tilejit::gemm {

namespace {
llvm::Error error(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

llvm::Error check(const KernelSpec &spec) {
  Params p(spec);
  if (p.ab == DType::F32)
    return error("gemm takes bf16 or f16 A and B, got ab=f32");
  return llvm::Error::success();
}

/// Tuning measures at most this many rows (the next power of two of M).
constexpr int64_t kTuningRowsCap = 16384;
constexpr int64_t kMaxSize = int64_t(1) << 24;

std::vector<ParamDecl> params() {
  return {
      {"ab", ParamDecl::Type, 0, 0, int64_t(DType::BF16), false, 0, "A and B: bf16 or f16"},
      {"out", ParamDecl::Type, 0, 0, int64_t(DType::BF16), false, 0, "C and D"},
      {"ta", ParamDecl::Bool, 0, 1, 0, false, 0, "A is stored K x M (op(A) = A^T)"},
      {"tb", ParamDecl::Bool, 0, 1, 1, false, 0, "B is stored N x K (op(B) = B^T)"},
      {"c", ParamDecl::Bool, 0, 1, 0, false, 0, "adds beta * C (C may be D: accumulation)"},
      {"m", ParamDecl::Int, 1, kMaxSize, 1, true, kTuningRowsCap, "rows of D: given at launch"},
      {"n", ParamDecl::Int, 1, kMaxSize, 1, false, 0, "columns of D"},
      {"k", ParamDecl::Int, 1, kMaxSize, 1, false, 0, "the reduction"},
      {"bias", ParamDecl::Bool, 0, 1, 0, false, 0,
       "adds a bias of N elements of A's type to every row of D (F.linear's)"},
      {"ld", ParamDecl::Bool, 0, 1, 0, false, 0,
       "C and D rows a leading dimension apart, given at launch (a multiple of 16 bytes; "
       "the sm_80 kernel's A and B too)"},
      {"d16", ParamDecl::Bool, 0, 1, 1, false, 0,
       "D starts on a 16-byte boundary (TMA stores need it)"},
  };
}
} // namespace

const OpDecl &op() {
  static const OpDecl decl{"gemm", params(), "D = alpha * op(A) @ op(B) + beta * C + bias", check};
  return decl;
}

bool isGemm(const KernelSpec &spec) { return spec.is(op()); }

Params::Params(const KernelSpec &s) : target(s.target) {
  if (!isGemm(s))
    return;
  ab = DType(s[ABDType]);
  out = DType(s[OutDType]);
  transA = s[TransA] != 0;
  transB = s[TransB] != 0;
  hasC = s[HasC] != 0;
  m = s[M];
  n = s[N];
  k = s[K];
  hasBias = s[HasBias] != 0;
  ld = s[Ld] != 0;
  dAligned = s[DAligned] != 0;
}

std::string Params::layoutName() const {
  return std::string(transA ? "t" : "n") + (transB ? "t" : "n");
}

KernelSpec Params::spec() const {
  KernelSpec s(op(), target);
  s.set(ABDType, int64_t(ab))
      .set(OutDType, int64_t(out))
      .set(TransA, transA)
      .set(TransB, transB)
      .set(HasC, hasC)
      .set(M, m)
      .set(N, n)
      .set(K, k)
      .set(HasBias, hasBias)
      .set(Ld, ld)
      .set(DAligned, dAligned);
  return s;
}

} // namespace tilejit::gemm
