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

/// Lays out the rings, barriers and words of `kernel` (rings first, each on
/// a 1024-byte boundary, as the 128-byte swizzle needs; then the barriers,
/// 8-byte aligned; then the words), calling place(op, offset) on each, and
/// returns the bytes they take.
static int64_t layOutShared(KernelOp kernel, llvm::function_ref<void(Operation *, int64_t)> place) {
  int64_t offset = 0;
  for (AllocRingOp ring : kernel.getBody().getOps<AllocRingOp>()) {
    offset = llvm::alignTo(offset, 1024);
    place(ring, offset);
    offset += ring.getType().getBytes();
  }
  for (AllocBarriersOp bars : kernel.getBody().getOps<AllocBarriersOp>()) {
    offset = llvm::alignTo(offset, 8);
    place(bars, offset);
    offset += 8 * bars.getType().getCount();
  }
  for (AllocWordsOp words : kernel.getBody().getOps<AllocWordsOp>()) {
    place(words, offset);
    offset += 4 * words.getType().getCount();
  }
  return offset;
}

int64_t dynamicSharedBytes(KernelOp kernel) {
  return layOutShared(kernel, [](Operation *, int64_t) {});
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

  // Rings, barriers and words live in dynamic shared memory (layOutShared).
  // The kernel aligns the base itself: the launch gives it 1024 bytes more
  // (the loader places dynamic shared memory after any static, 16-byte
  // aligned at best).
  bool any = false;
  int64_t offset = layOutShared(kernel, [&](Operation *op, int64_t at) {
    op->setAttr("offset", b.getI64IntegerAttr(at));
    any = true;
  });
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
