//===- TileCheckTarget.cpp - check kernels against the target --------------===//
#include "compiler/passes/Passes.h"

#include "llvm/Support/MathExtras.h"

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
    // Rings, barriers and the tensor cores' warpgroup instructions.
    int64_t dynamic = dynamicSharedBytes(kernel);
    if (dynamic > 0 && dynamic + 1024 > target.maxSharedBytesPerBlock()) {
      kernel.emitError()
          << "kernel '" << kernel.getSymName() << "' needs " << dynamic + 1024
          << " bytes of shared memory for its rings, barriers and words (with 1024 for "
             "alignment); "
          << arch << " gives a block at most " << target.maxSharedBytesPerBlock();
      return true;
    }
    WalkResult walk = kernel.walk([&](Operation *op) {
      if (isa<TmaLoadOp, TmaStoreOp, BulkReduceOp, TmaStoreWaitOp, AllocBarriersOp>(op) &&
          !target.hasTma()) {
        op->emitError() << "'" << op->getName()
                        << "' needs the copy engine of sm_90; the target is " << arch;
        return WalkResult::interrupt();
      }
      // tile.dot and tile.dot_reg run everywhere (mma.sync below sm_90a),
      // but not started asynchronously there.
      auto dot = dyn_cast<DotOp>(op);
      auto dotReg = dyn_cast<DotRegOp>(op);
      if (((dot && dot.getAsync()) || (dotReg && dotReg.getAsync())) && !target.hasWgmma()) {
        op->emitError() << "'" << op->getName()
                        << "' with async needs sm_90a (wgmma); the target is " << arch;
        return WalkResult::interrupt();
      }
      if (isa<DotWaitOp, WarpSpecializeOp>(op) && !target.hasWgmma()) {
        op->emitError() << "'" << op->getName()
                        << "' needs sm_90a (wgmma, setmaxnreg); the target is " << arch;
        return WalkResult::interrupt();
      }
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
        // Floating-point tile arithmetic is f32; i32 and i1 tiles (indices
        // and masks from tile.iota) are integer arithmetic and comparisons.
        for (Type t : op->getResultTypes())
          if (auto tensor = dyn_cast<RankedTensorType>(t);
              tensor && !tensor.getElementType().isF32() &&
              !tensor.getElementType().isInteger(32) && !tensor.getElementType().isInteger(1)) {
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
        // A warpgroup's accumulator may take up to 128 registers a thread
        // (m64n256), as the consumers of a warp-specialized kernel raise
        // their register limit for it.
        int64_t limit = isWarpgroupTile(tensor) ? 128 : int64_t(maxElemsPerThread);
        if (elems > limit) {
          op->emitError() << "each thread would hold " << elems << " elements of " << t
                          << " (limit " << limit << "): use more threads or a narrower tile";
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
