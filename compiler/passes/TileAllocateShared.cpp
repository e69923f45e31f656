//===- TileAllocateShared.cpp - place each kernel's shared memory -----------===//
#include "compiler/passes/Passes.h"

using namespace mlir;
using namespace tilejit::tile;

namespace tilejit {
#define GEN_PASS_DEF_TILEALLOCATESHARED
#include "compiler/passes/Passes.h.inc"

int64_t scratchBytesFor(KernelOp kernel) {
  int64_t bytes = 0;
  kernel.walk([&](ReduceOp op) {
    auto in = op.getOperand().getType();
    auto layout = cast<BlockedLayoutAttr>(in.getEncoding());
    int64_t tr = layout.getRowThreads(), tc = layout.getColThreads();
    int64_t need = 0;
    if (op.getDim() == 1 && tc > 32)
      need = tr * (tc / 32) * 4;
    else if (op.getDim() == 0 && tr > 1)
      need = tr * tc * getElemsPerThread(in) * 4;
    bytes = std::max(bytes, need);
  });
  return bytes;
}

void allocateShared(KernelOp kernel) {
  Builder b(kernel.getContext());
  kernel.setScratchBytesAttr(b.getI64IntegerAttr(scratchBytesFor(kernel)));
  int64_t rows = 0;
  kernel.walk([&](ReduceOp op) {
    if (op.getCluster())
      rows = std::max(
          rows, cast<BlockedLayoutAttr>(op.getOperand().getType().getEncoding()).getRowThreads());
  });
  if (rows > 0)
    kernel.setClusterRowsAttr(b.getI64IntegerAttr(rows));
  else
    kernel.removeClusterRowsAttr();
}

namespace {
struct TileAllocateSharedPass : impl::TileAllocateSharedBase<TileAllocateSharedPass> {
  void runOnOperation() override {
    for (KernelOp kernel : getOperation().getOps<KernelOp>())
      allocateShared(kernel);
  }
};
} // namespace
} // namespace tilejit
