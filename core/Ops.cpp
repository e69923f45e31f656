//===- Ops.cpp - the ops tilejit knows ------------------------------------===//
//
// One line per op. Its template, launch and tuning harness register in their
// own layers by the op's declaration.
//
//===----------------------------------------------------------------------===//
#include "core/KernelSpec.h"
#include "ops/attention/AttentionDecl.h"
#include "ops/gemm/GemmDecl.h"
#include "ops/rmsnorm/RmsNormDecl.h"

namespace tilejit {

llvm::ArrayRef<const OpDecl *> allOps() {
  static const OpDecl *const ops[] = {
      &rmsnorm::forwardOp(),   &rmsnorm::backwardOp(),   &gemm::op(),
      &attention::forwardOp(), &attention::backwardOp(),
  };
  return ops;
}

} // namespace tilejit
