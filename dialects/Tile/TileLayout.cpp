//===- TileLayout.cpp - layout attributes of the tile dialect ---------------===//
#include "dialects/Tile/TileDialect.h"

#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace tilejit::tile;

int64_t BlockedLayoutAttr::getChunks(int64_t cols) const {
  int64_t perPass = getColThreads() * getVec();
  return (cols + perPass - 1) / perPass;
}

// ---- the layout interface ----------------------------------------------------
//
// #tile.blocked<vec, TR, TC>: thread t holds row t / TC; chunk k of its row is
// the run of vec elements from column (k * TC + t % TC) * vec. A dim = 0 slice
// holds the same columns in every row of threads (row 0 stores them); a
// dim = 1 slice one value, its row's, in every lane (lane 0 stores it).

namespace {
/// The column of element `i` relative to the thread's first: run i / vec.
int64_t runOffset(BlockedLayoutAttr l, int64_t i) {
  return (i / l.getVec()) * l.getColThreads() * l.getVec() + i % l.getVec();
}
AffineExpr threadRow(BlockedLayoutAttr l) {
  return getAffineDimExpr(0, l.getContext()).floorDiv(l.getColThreads());
}
AffineExpr threadCol(BlockedLayoutAttr l) {
  return (getAffineDimExpr(0, l.getContext()) % l.getColThreads()) * l.getVec();
}
} // namespace

int64_t BlockedLayoutAttr::getElemsPerThread(ArrayRef<int64_t> shape) const {
  return getElemsPerThread(shape.back());
}
int64_t BlockedLayoutAttr::getNumThreads() const { return getRowThreads() * getColThreads(); }
int64_t BlockedLayoutAttr::getContiguity() const { return getVec(); }
AffineMap BlockedLayoutAttr::getThreadBase() const {
  return AffineMap::get(1, 0, {threadRow(*this), threadCol(*this)}, getContext());
}
SmallVector<int64_t> BlockedLayoutAttr::getElemOffset(ArrayRef<int64_t>, int64_t i) const {
  return {0, runOffset(*this, i)};
}
AffineMap BlockedLayoutAttr::getOwnerMap() const { return AffineMap::get(1, 0, getContext()); }

// A slice of #tile.wgmma. dim = 1, the rows: thread t holds, in each 64-row
// block, its rows 16 w + l / 4 and 8 below; the four threads of a quad hold
// copies (lane % 4 == 0 stores). dim = 0, the columns: thread t holds columns
// 8 j + 2 (l % 4) + {0, 1} of every 8-column block j, as every row of the
// accumulator does; the 32 threads of a warpgroup with one l % 4 hold copies
// (the first warp's first quad stores).
namespace {
bool isWgmmaColumns(SliceLayoutAttr s) { return !s.getBlockedParent() && s.getDim() == 0; }
} // namespace

int64_t SliceLayoutAttr::getElemsPerThread(ArrayRef<int64_t> shape) const {
  if (!getBlockedParent())
    return getDim() == 1 ? shape[0] / 64 * 2 : shape[0] / 4;
  return getDim() == 1 ? 1 : getBlockedParent().getElemsPerThread(shape.back());
}
int64_t SliceLayoutAttr::getNumThreads() const {
  return cast<LayoutAttrInterface>(getParent()).getNumThreads();
}
int64_t SliceLayoutAttr::getContiguity() const {
  if (!getBlockedParent())
    return getDim() == 1 ? 1 : 2;
  return getDim() == 1 ? 1 : getBlockedParent().getVec();
}
AffineMap SliceLayoutAttr::getThreadBase() const {
  BlockedLayoutAttr p = getBlockedParent();
  if (!p)
    return cast<LayoutAttrInterface>(getParent())
        .getThreadBase()
        .getSubMap({unsigned(1 - getDim())});
  return AffineMap::get(1, 0, getDim() == 1 ? threadRow(p) : threadCol(p), getContext());
}
SmallVector<int64_t> SliceLayoutAttr::getElemOffset(ArrayRef<int64_t>, int64_t i) const {
  if (!getBlockedParent())
    return {getDim() == 1 ? 64 * (i / 2) + 8 * (i % 2) : 8 * (i / 2) + i % 2};
  return {getDim() == 1 ? 0 : runOffset(getBlockedParent(), i)};
}
AffineMap SliceLayoutAttr::getOwnerMap() const {
  BlockedLayoutAttr p = getBlockedParent();
  AffineExpr t = getAffineDimExpr(0, getContext());
  if (isWgmmaColumns(*this))
    return AffineMap::get(1, 0, (t % 128).floorDiv(4), getContext());
  if (!p)
    return AffineMap::get(1, 0, t % 4, getContext());
  return AffineMap::get(1, 0, getDim() == 1 ? t % p.getColThreads() : threadRow(p), getContext());
}

// #tile.wgmma: element i of a thread lies in 64-row block i / (N / 2), 8-column
// block (i % (N / 2)) / 4, at row +8 for (i / 2) % 2 and column +1 for i % 2.
int64_t WgmmaLayoutAttr::getElemsPerThread(ArrayRef<int64_t> shape) const {
  return shape[0] / 64 * shape[1] / 2;
}
int64_t WgmmaLayoutAttr::getNumThreads() const { return 128; }
int64_t WgmmaLayoutAttr::getContiguity() const { return 2; }
AffineMap WgmmaLayoutAttr::getThreadBase() const {
  AffineExpr t = getAffineDimExpr(0, getContext()) % 128;
  AffineExpr lane = t % 32;
  return AffineMap::get(1, 0, {t.floorDiv(32) * 16 + lane.floorDiv(4), (lane % 4) * 2},
                        getContext());
}
SmallVector<int64_t> WgmmaLayoutAttr::getElemOffset(ArrayRef<int64_t> shape, int64_t i) const {
  int64_t perBlock = shape[1] / 2, block = i / perBlock, j = i % perBlock;
  return {64 * block + 8 * ((j / 2) % 2), 8 * (j / 4) + j % 2};
}
AffineMap WgmmaLayoutAttr::getOwnerMap() const { return AffineMap::get(1, 0, getContext()); }

LogicalResult BlockedLayoutAttr::verify(function_ref<InFlightDiagnostic()> emitError, int64_t vec,
                                        int64_t rowThreads, int64_t colThreads) {
  if (vec < 1 || vec > 8 || !llvm::isPowerOf2_64(vec))
    return emitError() << "#tile.blocked vec must be 1, 2, 4 or 8, got " << vec;
  if (rowThreads < 1 || colThreads < 1)
    return emitError() << "#tile.blocked needs rowThreads and colThreads >= 1, got " << rowThreads
                       << " and " << colThreads;
  // The product as written, not wrapped around: 2^57 + 2 rows of 128 would
  // otherwise pass as 256 threads.
  int64_t threads = 0;
  if (llvm::MulOverflow(rowThreads, colThreads, threads))
    return emitError() << "#tile.blocked has " << rowThreads << " * " << colThreads
                       << " threads; a block holds at most 1024";
  if (!llvm::isPowerOf2_64(colThreads))
    return emitError() << "#tile.blocked colThreads must be a power of two, got " << colThreads;
  if (colThreads < 32 && threads % 32 != 0)
    return emitError() << "#tile.blocked needs whole warps: rowThreads * "
                          "colThreads = "
                       << threads << " is not a multiple of 32";
  if (colThreads > 32 && colThreads % 32 != 0)
    return emitError() << "#tile.blocked colThreads above 32 must be whole warps";
  if (threads > 1024)
    return emitError() << "#tile.blocked has " << threads << " threads; a block holds at most 1024";
  return success();
}

LogicalResult SliceLayoutAttr::verify(function_ref<InFlightDiagnostic()> emitError, int64_t dim,
                                      Attribute parent) {
  if (dim != 0 && dim != 1)
    return emitError() << "#tile.slice dim must be 0 or 1, got " << dim;
  if (isa_and_nonnull<WgmmaLayoutAttr>(parent))
    return success();
  if (!isa_and_nonnull<BlockedLayoutAttr>(parent))
    return emitError() << "#tile.slice needs a #tile.blocked or #tile.wgmma parent";
  return success();
}

bool tilejit::tile::isTileType(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor || !tensor.hasStaticShape())
    return false;
  Attribute enc = tensor.getEncoding();
  if (auto blocked = dyn_cast_or_null<BlockedLayoutAttr>(enc))
    return tensor.getRank() == 2 && tensor.getDimSize(0) == blocked.getRowThreads();
  if (isa_and_nonnull<WgmmaLayoutAttr>(enc))
    return tensor.getRank() == 2 && tensor.getDimSize(0) % 64 == 0 && tensor.getDimSize(0) > 0 &&
           tensor.getDimSize(1) % 8 == 0 && tensor.getDimSize(1) >= 8 &&
           tensor.getDimSize(1) <= 256;
  if (auto slice = dyn_cast_or_null<SliceLayoutAttr>(enc)) {
    if (tensor.getRank() != 1)
      return false;
    if (!slice.getBlockedParent())
      return slice.getDim() == 1 ? tensor.getDimSize(0) % 64 == 0 && tensor.getDimSize(0) > 0
                                 : tensor.getDimSize(0) % 8 == 0 && tensor.getDimSize(0) >= 8 &&
                                       tensor.getDimSize(0) <= 256;
    // A per-row slice has one element per row of threads.
    if (slice.getDim() == 1)
      return tensor.getDimSize(0) == slice.getBlockedParent().getRowThreads();
    return true;
  }
  return false;
}

bool tilejit::tile::isWarpgroupTile(RankedTensorType tile) {
  return isa_and_nonnull<WgmmaLayoutAttr>(tile.getEncoding());
}

bool tilejit::tile::isStoredTo(Value memref) {
  return llvm::any_of(memref.getUsers(), [&](Operation *user) {
    auto store = dyn_cast<StoreOp>(user);
    return store && store.getDest() == memref;
  });
}

bool tilejit::tile::isGlobalMemRef(Type type) {
  auto memref = dyn_cast<MemRefType>(type);
  if (!memref || memref.getRank() < 1 || memref.getRank() > 4 || memref.getMemorySpace())
    return false;
  if (!memref.getLayout().isIdentity()) {
    // Row strides: offset 0, the last dimension dense, the others apart by
    // a stride each (given at launch where dynamic).
    auto strided = dyn_cast<StridedLayoutAttr>(memref.getLayout());
    if (!strided || strided.getOffset() != 0 || strided.getStrides().back() != 1)
      return false;
  }
  Type elem = memref.getElementType();
  if (!elem.isBF16() && !elem.isF16() && !elem.isF32())
    return false;
  // A static stride keeps rows apart (at least the next dimension's
  // extent, where static) and 16-byte aligned, as a launch's must.
  if (auto strided = dyn_cast<StridedLayoutAttr>(memref.getLayout())) {
    int64_t bytes = elem.isF32() ? 4 : 2;
    ArrayRef<int64_t> strides = strided.getStrides();
    for (int64_t d = 0; d + 1 < memref.getRank(); ++d) {
      int64_t s = strides[d], next = strides[d + 1], size = memref.getDimSize(d + 1);
      if (ShapedType::isDynamic(s))
        continue;
      if (s < 1 || (s * bytes) % 16 != 0)
        return false;
      if (!ShapedType::isDynamic(next) && !ShapedType::isDynamic(size) && s < next * size)
        return false;
    }
  }
  return true;
}

bool tilejit::tile::hasRowStrides(MemRefType type) { return !type.getLayout().isIdentity(); }

BlockedLayoutAttr tilejit::tile::getBlockedParent(RankedTensorType tile) {
  Attribute enc = tile.getEncoding();
  if (auto blocked = dyn_cast_or_null<BlockedLayoutAttr>(enc))
    return blocked;
  if (auto slice = dyn_cast_or_null<SliceLayoutAttr>(enc))
    return slice.getBlockedParent();
  return {};
}

int64_t tilejit::tile::getElemsPerThread(RankedTensorType tile) {
  return cast<LayoutAttrInterface>(tile.getEncoding()).getElemsPerThread(tile.getShape());
}
