//===- TileCheckTarget.cpp - check kernels against the target --------------===//
#include "compiler/passes/Passes.h"

#include "core/KernelSpec.h"

using namespace mlir;
using namespace tilejit::tile;

namespace tilejit {
#define GEN_PASS_DEF_TILECHECKTARGET
#include "compiler/passes/Passes.h.inc"

static constexpr int64_t kStaticSmemLimit = 48 * 1024;

namespace {

bool isElementwiseTileArith(Operation *op) {
  if (!isa<arith::ArithDialect, math::MathDialect>(op->getDialect()))
    return false;
  if (isa<arith::ExtFOp, arith::TruncFOp>(op))
    return false;
  return llvm::any_of(op->getResultTypes(), [](Type t) { return isa<RankedTensorType>(t); });
}

struct TileCheckTargetPass : impl::TileCheckTargetBase<TileCheckTargetPass> {
  using TileCheckTargetBase::TileCheckTargetBase;
  Target target;

  void runOnOperation() override {
    auto parsed = Target::parse(arch);
    if (!parsed) {
      getOperation().emitError() << "unknown target arch '" << arch
                                 << "' (known: " << Target::knownArchs() << ")";
      return signalPassFailure();
    }
    target = *parsed;
    bool failed = false;
    getOperation().walk([&](KernelOp kernel) {
      if (checkKernel(kernel))
        failed = true;
    });
    if (failed)
      signalPassFailure();
  }

  /// Returns true after reporting an error.
  bool checkKernel(KernelOp kernel) {
    if (kernel.getClusterBlocks() > 1 && !target.hasClusters()) {
      kernel.emitError() << "kernel '" << kernel.getSymName() << "' runs in clusters of "
                         << kernel.getClusterBlocks() << " blocks, which need sm_90 or later; the "
                         << "target is " << arch;
      return true;
    }
    int64_t scratch = scratchBytesFor(kernel);
    if (scratch > kStaticSmemLimit) {
      kernel.emitError() << "kernel '" << kernel.getSymName() << "' needs " << scratch
                         << " bytes of shared scratch for its reductions; the static "
                            "limit is "
                         << kStaticSmemLimit;
      return true;
    }
    WalkResult walk = kernel.walk([&](Operation *op) {
      if (auto pid = dyn_cast<ProgramIdOp>(op); pid && pid.getDim() != Dim::x) {
        op->emitError() << "only grid dimension x is supported";
        return WalkResult::interrupt();
      }
      if (auto np = dyn_cast<NumProgramsOp>(op); np && np.getDim() != Dim::x) {
        op->emitError() << "only grid dimension x is supported";
        return WalkResult::interrupt();
      }
      if (auto cst = dyn_cast<arith::ConstantOp>(op); cst && isa<RankedTensorType>(cst.getType())) {
        op->emitError() << "constant tiles are not lowered; use tile.splat of a scalar";
        return WalkResult::interrupt();
      }
      if (isElementwiseTileArith(op) || isa<SplatOp, ReduceOp>(op)) {
        for (Type t : op->getResultTypes())
          if (auto tensor = dyn_cast<RankedTensorType>(t);
              tensor && !tensor.getElementType().isF32()) {
            op->emitError() << "tile arithmetic is f32, but this produces " << t
                            << "; widen the operands with arith.extf first";
            return WalkResult::interrupt();
          }
      }
      for (Type t : op->getResultTypes()) {
        auto tensor = dyn_cast<RankedTensorType>(t);
        if (!tensor || !isTileType(tensor))
          continue;
        int64_t elems = getElemsPerThread(tensor);
        if (elems > int64_t(maxElemsPerThread)) {
          op->emitError() << "each thread would hold " << elems << " elements of " << t
                          << " (limit " << int64_t(maxElemsPerThread)
                          << "): use more threads or a narrower tile";
          return WalkResult::interrupt();
        }
      }
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return true;
    return false;
  }
};

} // namespace
} // namespace tilejit
