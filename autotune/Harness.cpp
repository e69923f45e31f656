//===- Harness.cpp - which harness measures which op ------------------------===//
//
// One line per op; each op's harness lives in its folder (ops/<op>/).
//
//===----------------------------------------------------------------------===//
#include "autotune/Harness.h"

#include "ops/gemm/GemmDecl.h"
#include "ops/rmsnorm/RmsNormDecl.h"

namespace tilejit {

std::unique_ptr<OpHarness> makeRmsNormHarness(bool backward);
std::unique_ptr<OpHarness> makeGemmHarness();

std::unique_ptr<OpHarness> makeHarness(const KernelSpec &spec) {
  static const struct {
    const OpDecl *op;
    std::unique_ptr<OpHarness> (*make)();
  } harnesses[] = {
      {&rmsnorm::forwardOp(), [] { return makeRmsNormHarness(false); }},
      {&rmsnorm::backwardOp(), [] { return makeRmsNormHarness(true); }},
      {&gemm::op(), [] { return makeGemmHarness(); }},
  };
  for (const auto &h : harnesses)
    if (spec.is(*h.op))
      return h.make();
  return nullptr;
}

} // namespace tilejit
