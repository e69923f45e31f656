//===- TileAllocateShared.cpp - place each kernel's shared memory -----------===//
#include "compiler/passes/Passes.h"

#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace tilejit::tile;

namespace tilejit {
#define GEN_PASS_DEF_TILEALLOCATESHARED
#include "compiler/passes/Passes.h.inc"

int64_t scratchBytesFor(KernelOp kernel) {
  int64_t bytes = 0;
  kernel.walk([&](ReduceOp op) {
    auto in = op.getOperand().getType();
    // A warpgroup tile's rows reduce within quads of lanes: no scratch.
    auto layout = dyn_cast<BlockedLayoutAttr>(in.getEncoding());
    if (!layout)
      return;
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

  // Rings, barriers and words live in dynamic shared memory, rings first
  // (each on a 1024-byte boundary, as the 128-byte swizzle needs), then the
  // barriers (8-byte aligned), then the words.
  // The kernel aligns the base itself: the launch gives it 1024 bytes more
  // (the loader places dynamic shared memory after any static, 16-byte
  // aligned at best).
  int64_t offset = 0;
  bool any = false;
  for (AllocRingOp ring : kernel.getBody().getOps<AllocRingOp>()) {
    offset = llvm::alignTo(offset, 1024);
    ring.setOffsetAttr(b.getI64IntegerAttr(offset));
    offset += ring.getType().getBytes();
    any = true;
  }
  for (AllocBarriersOp bars : kernel.getBody().getOps<AllocBarriersOp>()) {
    offset = llvm::alignTo(offset, 8);
    bars.setOffsetAttr(b.getI64IntegerAttr(offset));
    offset += 8 * bars.getType().getCount();
    any = true;
  }
  for (AllocWordsOp words : kernel.getBody().getOps<AllocWordsOp>()) {
    words.setOffsetAttr(b.getI64IntegerAttr(offset));
    offset += 4 * words.getType().getCount();
    any = true;
  }
  if (any)
    kernel.setDynamicSmemBytesAttr(b.getI64IntegerAttr(offset + 1024));
  else
    kernel.removeDynamicSmemBytesAttr();
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
