//===- RmsNormDecl.cpp ----------------------------------------------------===//
#include "ops/rmsnorm/RmsNormDecl.h"

#include "llvm/ADT/Twine.h"

namespace tilejit::rmsnorm {

namespace {
llvm::Error error(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

llvm::Error check(const KernelSpec &spec) {
  Params p(spec);
  int a = p.align;
  if (a != 1 && a != 2 && a != 4 && a != 8 && a != 16)
    return error("align must be 1, 2, 4, 8 or 16 bytes, got " + llvm::Twine(a));
  if (a < dtypeBytes(p.dtype))
    return error("align = " + llvm::Twine(a) + " is below the " + llvm::Twine(dtypeBytes(p.dtype)) +
                 "-byte size of " + llvm::Twine(dtypeName(p.dtype)));
  int64_t rowBytes = p.cols * dtypeBytes(p.dtype);
  if (rowBytes % a != 0)
    return error("align = " + llvm::Twine(a) + " cannot hold: a row of " + llvm::Twine(p.cols) +
                 " " + llvm::Twine(dtypeName(p.dtype)) + " is " + llvm::Twine(rowBytes) +
                 " bytes, so rows are at most " + llvm::Twine(alignmentOf({}, rowBytes)) +
                 "-byte aligned");
  return llvm::Error::success();
}

/// Tuning measures at most this many rows (the next power of two of the
/// call's rows): the winner at 65536 rows serves every larger count.
constexpr int64_t kTuningRowsCap = 65536;

std::vector<ParamDecl> params() {
  return {
      {"dtype", ParamDecl::Type, 0, 0, int64_t(DType::BF16), false, 0,
       "activations: x and y (forward), dy, x and dx (backward)"},
      {"wdtype", ParamDecl::Type, 0, 0, int64_t(DType::BF16), false, 0,
       "the weight and its gradient"},
      {"rows", ParamDecl::Int, 1, INT64_MAX, 1, true, kTuningRowsCap, "rows: given at launch"},
      {"cols", ParamDecl::Int, 1, int64_t(1) << 20, 1, false, 0, "the hidden size"},
      {"zcg", ParamDecl::Bool, 0, 1, 0, false, 0, "zero-centered gamma: g = 1 + w"},
      {"align", ParamDecl::Int, 1, 16, 16, false, 0,
       "bytes every operand address and row is aligned to"},
  };
}
} // namespace

const OpDecl &forwardOp() {
  static const OpDecl op{"rmsnorm_fwd", params(),
                         "y = x * rstd * g, rstd = 1/sqrt(mean(x^2) + eps)", check};
  return op;
}

const OpDecl &backwardOp() {
  static const OpDecl op{"rmsnorm_bwd", params(),
                         "dx = rstd * (dy*g - xhat * mean(dy*g*xhat)), dw = sum(dy * xhat)", check};
  return op;
}

bool isRmsNorm(const KernelSpec &spec) { return spec.is(forwardOp()) || spec.is(backwardOp()); }

Params::Params(const KernelSpec &s) : target(s.target) {
  if (!isRmsNorm(s))
    return;
  backward = s.is(backwardOp());
  dtype = DType(s[DTypeParam]);
  wdtype = DType(s[WDTypeParam]);
  rows = s[Rows];
  cols = s[Cols];
  zeroCenteredGamma = s[Zcg] != 0;
  align = int(s[Align]);
}

KernelSpec Params::spec() const {
  KernelSpec s(backward ? backwardOp() : forwardOp(), target);
  s.set(DTypeParam, int64_t(dtype))
      .set(WDTypeParam, int64_t(wdtype))
      .set(Rows, rows)
      .set(Cols, cols)
      .set(Zcg, zeroCenteredGamma ? 1 : 0)
      .set(Align, align);
  return s;
}

} // namespace tilejit::rmsnorm
