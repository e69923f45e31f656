//===- TileOps.cpp - operations of the tile dialect --------------------------===//
#include "dialects/Tile/TileDialect.h"

#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/FunctionImplementation.h"

using namespace mlir;
using namespace tilejit::tile;

//===----------------------------------------------------------------------===//
// KernelOp
//===----------------------------------------------------------------------===//

ParseResult KernelOp::parse(OpAsmParser &parser, OperationState &result) {
  auto buildFuncType = [](Builder &builder, ArrayRef<Type> argTypes, ArrayRef<Type> results,
                          function_interface_impl::VariadicFlag,
                          std::string &) { return builder.getFunctionType(argTypes, results); };
  return function_interface_impl::parseFunctionOp(
      parser, result, /*allowVariadic=*/false, getFunctionTypeAttrName(result.name), buildFuncType,
      getArgAttrsAttrName(result.name), getResAttrsAttrName(result.name));
}

void KernelOp::print(OpAsmPrinter &p) {
  function_interface_impl::printFunctionOp(p, *this, /*isVariadic=*/false,
                                           getFunctionTypeAttrName(), getArgAttrsAttrName(),
                                           getResAttrsAttrName());
}

static bool isKernelArgType(Type type) {
  return isGlobalMemRef(type) || type.isF32() || type.isIndex() || isa<TensorMapType>(type);
}

LogicalResult KernelOp::verify() {
  FunctionType type = getFunctionType();
  if (type.getNumResults() != 0)
    return emitOpError() << "must return nothing, has " << type.getNumResults() << " results";
  for (auto [i, argType] : llvm::enumerate(type.getInputs()))
    if (!isKernelArgType(argType))
      return emitOpError() << "argument " << i << " has type " << argType
                           << "; kernel arguments are row-major bf16/f16/f32 memrefs "
                              "(dense, or strided<[..., 1]> with offset 0), f32, index or "
                              "!tile.tensormap";
  Block &entry = getBody().front();
  if (entry.getNumArguments() != type.getNumInputs())
    return emitOpError() << "body has " << entry.getNumArguments() << " arguments, signature "
                         << type.getNumInputs();

  int64_t cluster = getClusterBlocks();
  // 8: the most every sm_90 part runs (larger needs a non-portable opt-in).
  if (cluster < 1 || cluster > 8)
    return emitOpError() << "cluster_size must be in [1, 8], got " << cluster;
  int64_t threads = getBlockThreads();
  if (threads < 32 || threads > 1024 || threads % 32 != 0)
    return emitOpError() << "block_threads must be a multiple of 32 in "
                            "[32, 1024], got "
                         << threads;

  if (auto raw = getMinBlocks()) {
    // The attribute is read as unsigned: compare as the signed value it was
    // written as, and divide rather than multiply (no wrap-around).
    int64_t m = int64_t(*raw);
    if (m < 1 || m > 2048 / threads)
      return emitOpError() << "min_blocks must be in [1, " << 2048 / threads
                           << "] (2048 threads per multiprocessor at most), got " << m;
  }
  // The lowering sizes shared memory from these: bound them before it
  // multiplies (228 KB is the most shared memory any block has).
  if (auto raw = getScratchBytes(); raw && (int64_t(*raw) < 0 || int64_t(*raw) > 228 * 1024))
    return emitOpError() << "scratch_bytes must be in [0, " << 228 * 1024 << "], got "
                         << int64_t(*raw);
  if (auto raw = getClusterRows(); raw && (int64_t(*raw) < 0 || int64_t(*raw) > 1024))
    return emitOpError() << "cluster_rows must be in [0, 1024], got " << int64_t(*raw);

  AffineMap grid = getGrid();
  ArrayRef<int64_t> ops = getGridOperands();
  if (grid.getNumDims() != 0 || grid.getNumResults() == 0)
    return emitOpError() << "grid must be an affine map of symbols only with "
                            "at least one result, got "
                         << AffineMapAttr::get(grid);
  if (ops.size() % 2 != 0 || (int64_t)ops.size() / 2 != grid.getNumSymbols())
    return emitOpError() << "grid has " << grid.getNumSymbols()
                         << " symbols but grid_operands holds " << ops.size()
                         << " values (expected (argument, dimension) pairs)";
  for (size_t i = 0; i < ops.size(); i += 2) {
    int64_t arg = ops[i], dim = ops[i + 1];
    if (arg < 0 || arg >= (int64_t)type.getNumInputs())
      return emitOpError() << "grid operand " << i / 2 << " names argument " << arg
                           << ", which does not exist";
    Type argType = type.getInput(arg);
    if (dim == -1) {
      if (!argType.isIndex())
        return emitOpError() << "grid operand " << i / 2 << " names argument " << arg
                             << " itself, which must then be an index";
    } else {
      auto memref = dyn_cast<MemRefType>(argType);
      if (!memref || dim < 0 || dim >= memref.getRank())
        return emitOpError() << "grid operand " << i / 2 << " names size " << dim << " of argument "
                             << arg << ", which is not a memref of that rank";
    }
  }

  // Every tile in the body must fit its layout and be laid out over exactly
  // this block.
  WalkResult walk = getBody().walk([&](Operation *op) {
    for (Type t : op->getResultTypes()) {
      auto tensor = dyn_cast<RankedTensorType>(t);
      if (!tensor)
        continue;
      auto slice = dyn_cast_or_null<SliceLayoutAttr>(tensor.getEncoding());
      if (isWarpgroupTile(tensor) || (slice && isa<WgmmaLayoutAttr>(slice.getParent()))) {
        if (!isTileType(tensor)) {
          op->emitOpError()
              << "produces " << t
              << ", whose shape does not fit #tile.wgmma (rows a multiple of 64, "
                 "columns a multiple of 8 up to 256; its slices rank 1, a column slice 8 to 256 "
                 "long)";
          return WalkResult::interrupt();
        }
        if (threads % 128 != 0) {
          op->emitOpError() << "produces a warpgroup tile in a kernel of " << threads
                            << " threads, not whole warpgroups";
          return WalkResult::interrupt();
        }
        continue;
      }
      BlockedLayoutAttr layout = getBlockedParent(tensor);
      if (layout && !isTileType(tensor)) {
        op->emitOpError() << "produces " << t
                          << ", whose shape does not fit its layout (a #tile.blocked "
                             "tile is rank 2 with rowThreads rows; a #tile.slice tile is "
                             "rank 1)";
        return WalkResult::interrupt();
      }
      if (!layout) {
        op->emitOpError() << "produces " << t << ", a tensor without a #tile layout";
        return WalkResult::interrupt();
      }
      if (layout.getNumThreads() != threads) {
        op->emitOpError() << "produces a tile laid out over " << layout.getNumThreads()
                          << " threads in a kernel of " << threads;
        return WalkResult::interrupt();
      }
    }
    return WalkResult::advance();
  });
  return failure(walk.wasInterrupted());
}

/// Tile operations describe what a thread block does: they only make sense
/// inside a kernel.
static LogicalResult verifyInKernel(Operation *op) {
  if (!op->getParentOfType<KernelOp>())
    return op->emitOpError() << "must be inside a tile.kernel";
  return success();
}

/// Ops that need the blocks of a program grouped into a cluster.
static LogicalResult verifyInClusterKernel(Operation *op) {
  if (failed(verifyInKernel(op)))
    return failure();
  if (op->getParentOfType<KernelOp>().getClusterBlocks() < 2)
    return op->emitOpError() << "needs a kernel with cluster_size of 2 or more";
  return success();
}

LogicalResult ClusterRankOp::verify() { return verifyInClusterKernel(*this); }
LogicalResult ProgramIdOp::verify() { return verifyInKernel(*this); }
LogicalResult NumProgramsOp::verify() { return verifyInKernel(*this); }

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

static LogicalResult verifyAccess(Operation *op, MemRefType memref, RankedTensorType tile,
                                  size_t numIndices) {
  if (numIndices != (size_t)memref.getRank())
    return op->emitOpError() << "needs " << memref.getRank() << " indices for " << memref
                             << ", got " << numIndices;
  if (tile.getRank() > memref.getRank())
    return op->emitOpError() << "tile of rank " << tile.getRank() << " does not fit in " << memref;
  // An f32 tile may read or write bf16/f16 memory: the access converts.
  Type elem = tile.getElementType(), mem = memref.getElementType();
  if (elem != mem && !(elem.isF32() && (mem.isBF16() || mem.isF16())))
    return op->emitOpError() << "tile element type " << elem << " differs from memory element type "
                             << mem << " (only an f32 tile may access bf16/f16 memory, converting)";
  return success();
}

LogicalResult LoadOp::verify() {
  if (failed(verifyInKernel(*this)))
    return failure();
  return verifyAccess(*this, getSource().getType(), getResult().getType(), getIndices().size());
}

namespace {
/// arith.extf of a loaded tile, the load's only use, becomes a widening load.
/// The new load takes the old one's place, not the extf's: a store between
/// them may write the same memory.
struct WidenLoad : OpRewritePattern<arith::ExtFOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(arith::ExtFOp ext, PatternRewriter &rw) const override {
    auto load = ext.getIn().getDefiningOp<LoadOp>();
    auto type = dyn_cast<RankedTensorType>(ext.getType());
    if (!load || !load->hasOneUse() || !type || !type.getElementType().isF32())
      return failure();
    rw.setInsertionPoint(load);
    auto wide = LoadOp::create(rw, load.getLoc(), type, load.getSource(), load.getIndices(),
                               load.getPaddingAttr(), load.getStreamingAttr());
    rw.replaceOp(ext, wide.getResult());
    rw.eraseOp(load);
    return success();
  }
};

/// A store of arith.truncf(f32 tile) rounding to nearest even stores the f32
/// tile, narrowing.
struct NarrowStore : OpRewritePattern<StoreOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(StoreOp store, PatternRewriter &rw) const override {
    auto trunc = store.getValue().getDefiningOp<arith::TruncFOp>();
    if (!trunc || !getElementTypeOrSelf(trunc.getIn().getType()).isF32())
      return failure();
    if (auto mode = trunc.getRoundingmodeAttr();
        mode && mode.getValue() != arith::RoundingMode::to_nearest_even)
      return failure();
    rw.modifyOpInPlace(store, [&] { store.getValueMutable().assign(trunc.getIn()); });
    return success();
  }
};
} // namespace

void LoadOp::getCanonicalizationPatterns(RewritePatternSet &patterns, MLIRContext *ctx) {
  patterns.add<WidenLoad>(ctx);
}
void StoreOp::getCanonicalizationPatterns(RewritePatternSet &patterns, MLIRContext *ctx) {
  patterns.add<NarrowStore>(ctx);
}

void LoadOp::getEffects(
    SmallVectorImpl<SideEffects::EffectInstance<MemoryEffects::Effect>> &effects) {
  effects.emplace_back(MemoryEffects::Read::get(), &getSourceMutable(),
                       SideEffects::DefaultResource::get());
}

LogicalResult StoreOp::verify() {
  if (failed(verifyInKernel(*this)))
    return failure();
  if (getAdd()) {
    Type v = getValue().getType().getElementType(), d = getDest().getType().getElementType();
    if (!v.isF32() || !d.isF32())
      return emitOpError() << "adds f32 tiles into f32 memory only, got " << v << " into " << d;
    if (getStreaming())
      return emitOpError() << "takes `add` or `streaming`, not both";
  }
  return verifyAccess(*this, getDest().getType(), getValue().getType(), getIndices().size());
}

/// A 32-bit integer word of global memory: an f32 memref (`what` names
/// its words in the error), one index per dimension.
static LogicalResult verifyWord(Operation *op, MemRefType type, ValueRange indices,
                                llvm::StringRef what) {
  if (!type.getElementType().isF32())
    return op->emitOpError() << what << " the 32-bit words of an f32 memref, got " << type;
  if (int64_t(indices.size()) != type.getRank())
    return op->emitOpError() << "a memref of rank " << type.getRank() << " takes " << type.getRank()
                             << " indices, got " << indices.size();
  return success();
}

LogicalResult LoadWordOp::verify() {
  if (failed(verifyInKernel(*this)))
    return failure();
  return verifyWord(*this, getSource().getType(), getIndices(), "reads");
}

void LoadWordOp::getEffects(
    SmallVectorImpl<SideEffects::EffectInstance<MemoryEffects::Effect>> &effects) {
  effects.emplace_back(MemoryEffects::Read::get(), &getSourceMutable(),
                       SideEffects::DefaultResource::get());
}

LogicalResult NarrowOp::verify() {
  if (failed(verifyInKernel(*this)))
    return failure();
  MemRefType type = getSource().getType();
  if (!type.isDynamicDim(0))
    return emitOpError() << "narrows a dynamic first dimension, got " << type;
  return success();
}

void StoreOp::getEffects(
    SmallVectorImpl<SideEffects::EffectInstance<MemoryEffects::Effect>> &effects) {
  // An add reads what it adds to.
  if (getAdd())
    effects.emplace_back(MemoryEffects::Read::get(), &getDestMutable(),
                         SideEffects::DefaultResource::get());
  effects.emplace_back(MemoryEffects::Write::get(), &getDestMutable(),
                       SideEffects::DefaultResource::get());
}

//===----------------------------------------------------------------------===//
// Tile arithmetic
//===----------------------------------------------------------------------===//

LogicalResult ReduceOp::verify() {
  if (failed(verifyInKernel(*this)))
    return failure();
  auto in = getOperand().getType();
  auto out = getResult().getType();
  Attribute layout = in.getEncoding();
  if (!isa_and_nonnull<BlockedLayoutAttr, WgmmaLayoutAttr>(layout))
    return emitOpError() << "operand must be a rank-2 #tile.blocked or #tile.wgmma tile, got "
                         << in;
  int64_t dim = getDim();
  if (dim != 0 && dim != 1)
    return emitOpError() << "dim must be 0 or 1, got " << dim;
  if (isa<WgmmaLayoutAttr>(layout) && (dim != 1 || getCluster()))
    return emitOpError() << "reduces a #tile.wgmma tile along its rows only (dim = 1, no "
                            "cluster)";
  auto slice = dyn_cast<SliceLayoutAttr>(out.getEncoding());
  if (!slice || slice.getDim() != dim || slice.getParent() != layout)
    return emitOpError() << "result layout must be #tile.slice<dim = " << dim
                         << ", parent = " << layout << ">, got " << out.getEncoding();
  if (out.getRank() != 1 || out.getDimSize(0) != in.getDimSize(1 - dim))
    return emitOpError() << "result shape must be [" << in.getDimSize(1 - dim) << "], got " << out;
  if (getCluster()) {
    if (dim != 1)
      return emitOpError() << "reduces across a cluster along rows only (dim = 1)";
    return verifyInClusterKernel(*this);
  }
  return success();
}

LogicalResult BroadcastOp::verify() {
  if (failed(verifyInKernel(*this)))
    return failure();
  auto in = getOperand().getType();
  auto out = getResult().getType();
  auto slice = dyn_cast<SliceLayoutAttr>(in.getEncoding());
  Attribute layout = out.getEncoding();
  if (!slice || !isa_and_nonnull<BlockedLayoutAttr, WgmmaLayoutAttr>(layout))
    return emitOpError() << "expands a #tile.slice tile into a #tile.blocked or #tile.wgmma "
                            "tile, got "
                         << in << " -> " << out;
  if (slice.getParent() != layout)
    return emitOpError() << "operand layout's parent " << slice.getParent()
                         << " differs from result layout " << layout;
  if (in.getElementType() != out.getElementType())
    return emitOpError() << "element type changes from " << in.getElementType() << " to "
                         << out.getElementType();
  if (out.getDimSize(1 - slice.getDim()) != in.getDimSize(0))
    return emitOpError() << "operand of " << in.getDimSize(0)
                         << " elements does not match dimension " << 1 - slice.getDim() << " of "
                         << out;
  return success();
}

LogicalResult SplatOp::verify() {
  if (failed(verifyInKernel(*this)))
    return failure();
  if (getValue().getType() != getResult().getType().getElementType())
    return emitOpError() << "scalar of type " << getValue().getType() << " cannot fill a tile of "
                         << getResult().getType().getElementType();
  return success();
}

LogicalResult IotaOp::verify() {
  if (failed(verifyInKernel(*this)))
    return failure();
  RankedTensorType t = getResult().getType();
  if (!t.getElementType().isInteger(32))
    return emitOpError() << "makes an i32 tile, got " << t;
  if (int64_t(getDim()) >= t.getRank())
    return emitOpError() << "dim = " << getDim() << " is not a dimension of " << t;
  return success();
}

//===----------------------------------------------------------------------===//
// Shared memory, barriers and asynchronous copies
//===----------------------------------------------------------------------===//

LogicalResult RingType::verify(function_ref<InFlightDiagnostic()> emitError, int64_t stages,
                               int64_t rows, int64_t cols, Type elementType) {
  if (!elementType.isBF16() && !elementType.isF16() && !elementType.isF32())
    return emitError() << "!tile.ring holds bf16, f16 or f32 tiles, got " << elementType;
  if (stages < 1 || stages > 16)
    return emitError() << "!tile.ring stages must be in [1, 16], got " << stages;
  if (rows < 8 || rows > 256 || rows % 8 != 0)
    return emitError() << "!tile.ring rows must be a multiple of 8 in [8, 256], got " << rows;
  int64_t panel = elementType.isF32() ? 32 : 64;
  if (cols < panel || cols > 256 || cols % panel != 0)
    return emitError() << "!tile.ring cols must be whole 128-byte panels (a multiple of " << panel
                       << " " << elementType << " elements) up to 256, got " << cols;
  return success();
}

LogicalResult BarriersType::verify(function_ref<InFlightDiagnostic()> emitError, int64_t count) {
  if (count < 1 || count > 32)
    return emitError() << "!tile.barriers count must be in [1, 32], got " << count;
  return success();
}

LogicalResult WordsType::verify(function_ref<InFlightDiagnostic()> emitError, int64_t count) {
  if (count < 1 || count > 64)
    return emitError() << "!tile.words count must be in [1, 64], got " << count;
  return success();
}

LogicalResult TensorMapType::verify(function_ref<InFlightDiagnostic()> emitError, int64_t rows,
                                    int64_t cols, Type elementType, int64_t rank) {
  if (rank < 2 || rank > 5)
    return emitError() << "!tile.tensormap rank must be in [2, 5], got " << rank;
  if (!elementType.isBF16() && !elementType.isF16() && !elementType.isF32())
    return emitError() << "!tile.tensormap describes bf16, f16 or f32 tensors, got " << elementType;
  if (rows < 1 || rows > 256)
    return emitError() << "!tile.tensormap box rows must be in [1, 256], got " << rows;
  int64_t panel = elementType.isF32() ? 32 : 64;
  if (cols != panel)
    return emitError() << "!tile.tensormap box cols must be 128 bytes (" << panel << " "
                       << elementType << " elements) for the 128-byte swizzle, got " << cols;
  return success();
}

/// Allocations sit at the top level of a kernel, where every thread passes.
static LogicalResult verifyTopLevel(Operation *op) {
  if (!isa_and_nonnull<KernelOp>(op->getParentOp()))
    return op->emitOpError() << "must be at the top level of a tile.kernel";
  return success();
}

LogicalResult AllocRingOp::verify() { return verifyTopLevel(*this); }

LogicalResult AllocBarriersOp::verify() {
  if (failed(verifyTopLevel(*this)))
    return failure();
  if (getArrivals() < 1 || getArrivals() > 1024)
    return emitOpError() << "arrivals must be in [1, 1024], got " << getArrivals();
  return success();
}

/// The warp-specialized region an op runs in, or an error.
static FailureOr<Region *> specializedRegion(Operation *op) {
  auto ws = op->getParentOfType<WarpSpecializeOp>();
  if (!ws)
    return op->emitOpError() << "must be inside a region of tile.warp_specialize";
  Region *r = op->getParentRegion();
  while (r->getParentOp() != ws.getOperation())
    r = r->getParentOp()->getParentRegion();
  return r;
}

LogicalResult BarrierWaitOp::verify() { return verifyInKernel(*this); }

/// The cluster size of the kernel around `op` (1 without clusters).
static int64_t clusterBlocksOf(Operation *op) {
  auto kernel = op->getParentOfType<KernelOp>();
  return kernel ? kernel.getClusterBlocks() : 1;
}

LogicalResult BarrierArriveOp::verify() {
  if (failed(specializedRegion(*this)))
    return failure();
  if (getCluster() && clusterBlocksOf(*this) < 2)
    return emitOpError() << "arrives across a cluster, but its kernel has no cluster_size";
  return success();
}

/// `op` in the producer (`consumer` false) or a consumer region of
/// tile.warp_specialize; with `helper`, in the helper region too.
static LogicalResult verifyInRegion(Operation *op, bool consumer, bool helper = false) {
  auto region = specializedRegion(op);
  if (failed(region))
    return failure();
  auto ws = cast<WarpSpecializeOp>((*region)->getParentOp());
  if (helper && *region == &ws.getHelper())
    return success();
  if (*region != (consumer ? &ws.getConsumer() : &ws.getProducer()))
    return op->emitOpError() << "must be in the " << (consumer ? "consumer" : "producer")
                             << (helper ? " or the helper" : "")
                             << " region of tile.warp_specialize";
  return success();
}

LogicalResult AllocWordsOp::verify() { return verifyTopLevel(*this); }

LogicalResult SetWordOp::verify() {
  return verifyInRegion(*this, /*consumer=*/false, /*helper=*/true);
}

LogicalResult GetWordOp::verify() {
  if (getIndices().empty())
    return emitOpError() << "reads no word: give it at least one index";
  return verifyInRegion(*this, /*consumer=*/true, /*helper=*/true);
}

/// One index result a word read.
LogicalResult GetWordOp::inferReturnTypes(MLIRContext *ctx, std::optional<Location>,
                                          ValueRange operands, DictionaryAttr, OpaqueProperties,
                                          RegionRange, SmallVectorImpl<Type> &types) {
  // (The first operand is the words; each other an index.)
  types.assign(operands.empty() ? 0 : operands.size() - 1, IndexType::get(ctx));
  return success();
}

LogicalResult FetchAddOp::verify() {
  if (failed(verifyInRegion(*this, /*consumer=*/false, /*helper=*/true)))
    return failure();
  return verifyWord(*this, getCounter().getType(), getIndices(), "adds to");
}

void FetchAddOp::getEffects(
    SmallVectorImpl<SideEffects::EffectInstance<MemoryEffects::Effect>> &effects) {
  effects.emplace_back(MemoryEffects::Read::get(), &getCounterMutable(),
                       SideEffects::DefaultResource::get());
  effects.emplace_back(MemoryEffects::Write::get(), &getCounterMutable(),
                       SideEffects::DefaultResource::get());
}

/// A TMA copy between `map` and `ring`: one element type, and the box one
/// panel of a stage.
static LogicalResult verifyBoxIsPanel(Operation *op, TensorMapType map, RingType ring) {
  if (map.getElementType() != ring.getElementType())
    return op->emitOpError() << "copies between " << map.getElementType()
                             << " in memory and a ring of " << ring.getElementType();
  if (map.getRows() != ring.getRows() || map.getCols() != ring.getPanelCols())
    return op->emitOpError() << "box of " << map.getRows() << " x " << map.getCols()
                             << " does not fill a panel of the ring's " << ring.getRows() << " x "
                             << ring.getPanelCols();
  return success();
}

/// A TMA copy between a ring and the tensor `map` describes, in the producer
/// region (loads) or a consumer's or the helper's (stores): a panel per box,
/// and one outer coordinate per dimension beyond two.
static LogicalResult verifyTmaCopy(Operation *op, TensorMapType map, RingType ring,
                                   ValueRange outer, bool consumer) {
  if (failed(verifyInRegion(op, consumer, /*helper=*/consumer)) ||
      failed(verifyBoxIsPanel(op, map, ring)))
    return failure();
  if (int64_t(outer.size()) != map.getRank() - 2)
    return op->emitOpError() << "a tensor map of rank " << map.getRank() << " takes "
                             << map.getRank() - 2 << " outer coordinates, got " << outer.size();
  return success();
}

LogicalResult TmaLoadOp::verify() {
  TensorMapType map = getMap().getType();
  RingType ring = getRing().getType();
  if (!getMulticast())
    return verifyTmaCopy(*this, map, ring, getOuter(), /*consumer=*/false);
  // Multicast: boxes of the map's rows (dividing the ring's) by a panel,
  // split evenly over the cluster.
  if (failed(verifyInRegion(*this, /*consumer=*/false)))
    return failure();
  int64_t n = *getMulticast();
  if (n < 2 || n > 8)
    return emitOpError() << "multicast = " << n << " must be 2 to 8 blocks";
  if (clusterBlocksOf(*this) != n)
    return emitOpError() << "multicast = " << n << " needs a kernel in clusters of " << n
                         << ", got cluster_size = " << clusterBlocksOf(*this);
  // (Boxes of whole 8-row groups keep each inside the 128-byte swizzle's
  // 1024-byte blocks.)
  if (map.getElementType() != ring.getElementType() || map.getCols() != ring.getPanelCols() ||
      ring.getRows() % map.getRows() != 0 || map.getRows() % 8 != 0)
    return emitOpError() << "box of " << map.getRows() << " x " << map.getCols()
                         << " does not tile the ring's panels of " << ring.getRows() << " x "
                         << ring.getPanelCols() << " " << ring.getElementType();
  int64_t boxes = ring.getRows() / map.getRows() * (ring.getCols() / ring.getPanelCols());
  if (boxes % n != 0)
    return emitOpError() << "the stage's " << boxes << " boxes do not split over " << n
                         << " blocks";
  if (int64_t(getOuter().size()) != map.getRank() - 2)
    return emitOpError() << "a tensor map of rank " << map.getRank() << " takes "
                         << map.getRank() - 2 << " outer coordinates, got " << getOuter().size();
  return success();
}

/// Ops every thread of the block runs together: in a kernel, outside any
/// warp-specialized region.
static LogicalResult verifyWholeBlock(Operation *op) {
  if (failed(verifyInKernel(op)))
    return failure();
  if (op->getParentOfType<WarpSpecializeOp>())
    return op->emitOpError() << "runs on every thread of the block; it cannot be inside "
                                "tile.warp_specialize";
  return success();
}

LogicalResult AsyncCopyOp::verify() {
  if (failed(verifyWholeBlock(*this)))
    return failure();
  MemRefType src = getSource().getType();
  RingType ring = getRing().getType();
  if (src.getRank() != 2)
    return emitOpError() << "copies from a rank-2 memref, got " << src;
  if (src.getElementType() != ring.getElementType())
    return emitOpError() << "copies " << src.getElementType() << " into a ring of "
                         << ring.getElementType();
  if (ring.getElementBytes() != 2)
    return emitOpError() << "copies bf16 or f16 tiles, got " << ring.getElementType();
  int64_t vec = getVec();
  if (vec != 1 && vec != 2 && vec != 4 && vec != 8)
    return emitOpError() << "vec must be 1, 2, 4 or 8 elements (2, 4, 8 or 16 bytes), got " << vec;
  int64_t cols = src.getDimSize(1);
  if (!ShapedType::isDynamic(cols) && cols % vec != 0)
    return emitOpError() << "rows of " << cols << " elements are not whole copies of vec = " << vec;
  return success();
}

LogicalResult AsyncCommitOp::verify() { return verifyWholeBlock(*this); }

LogicalResult AsyncWaitOp::verify() {
  if (failed(verifyWholeBlock(*this)))
    return failure();
  int64_t pending = int64_t(getPending());
  if (pending < 0 || pending > 16)
    return emitOpError() << "pending must be in [0, 16], got " << pending;
  return success();
}

LogicalResult BlockBarrierOp::verify() { return verifyWholeBlock(*this); }

LogicalResult WarpgroupIdOp::verify() {
  if (failed(verifyWholeBlock(*this)))
    return failure();
  int64_t threads = (*this)->getParentOfType<KernelOp>().getBlockThreads();
  if (threads % 128 != 0)
    return emitOpError() << "needs a kernel of whole warpgroups, not " << threads << " threads";
  return success();
}

LogicalResult DotOp::verify() {
  if (failed(verifyInKernel(*this)))
    return failure();
  RankedTensorType acc = getAcc().getType();
  if (acc != getResult().getType())
    return emitOpError() << "result type " << getResult().getType() << " differs from acc " << acc;
  if (!isWarpgroupTile(acc))
    return emitOpError() << "accumulates in a #tile.wgmma tile, got " << acc;
  RingType a = getA().getType(), b = getB().getType();
  if (a.getElementType() != b.getElementType())
    return emitOpError() << "A is " << a.getElementType() << " and B " << b.getElementType();
  if (a.getElementBytes() != 2)
    return emitOpError() << "multiplies bf16 or f16 tiles, got " << a.getElementType();
  bool aMn = getAMnMajor(), bMn = getBMnMajor();
  int64_t m = acc.getDimSize(0), n = acc.getDimSize(1);
  int64_t ka = aMn ? a.getRows() : a.getCols(), kb = bMn ? b.getRows() : b.getCols();
  if (ka != kb)
    return emitOpError() << "A's stages hold K = " << ka << " and B's K = " << kb;
  if (ka % 16 != 0)
    return emitOpError() << "K = " << ka << " is not a multiple of 16";
  int64_t aRows = aMn ? a.getCols() : a.getRows(), bCols = bMn ? b.getCols() : b.getRows();
  if (m > aRows)
    return emitOpError() << "M = " << m << " exceeds the " << aRows << " rows of A's stages";
  if (n > bCols)
    return emitOpError() << "N = " << n << " exceeds the " << bCols << " columns of B's stages";
  if (bMn && n % 64 != 0)
    return emitOpError() << "N = " << n
                         << " must be whole panels (a multiple of 64) when B is "
                            "stored K x N";
  if (n % 16 != 0)
    return emitOpError() << "N = " << n << " must be a multiple of 16";
  return success();
}

LogicalResult StoreRingOp::verify() {
  if (failed(verifyInKernel(*this)))
    return failure();
  RankedTensorType v = getValue().getType();
  RingType ring = getRing().getType();
  if (!isWarpgroupTile(v) ||
      (v.getElementType().getIntOrFloatBitWidth() != 16 && !v.getElementType().isF32()))
    return emitOpError() << "stores a 16-bit or f32 #tile.wgmma tile, got " << v;
  if (v.getElementType() != ring.getElementType())
    return emitOpError() << "the tile is " << v.getElementType() << " and the ring "
                         << ring.getElementType();
  if (getFragments()) {
    if (!v.getElementType().isF32() || getCol())
      return emitOpError() << "stores fragments of an f32 tile, without a column offset";
    if (getElemsPerThread(v) % 4 != 0 || ring.getCols() % 4 != 0)
      return emitOpError() << "stores fragments in 16-byte chunks from a row's start: "
                           << getElemsPerThread(v) << " elements a thread and " << ring.getCols()
                           << " columns a row must be multiples of 4";
    APInt row;
    int64_t at = matchPattern(getRow(), m_ConstantInt(&row)) ? row.getSExtValue() : 0;
    if (at < 0 || at * ring.getCols() + v.getNumElements() > ring.getRows() * ring.getCols())
      return emitOpError() << "a tile of " << v.getNumElements() << " elements from row " << at
                           << " does not fit a stage of " << ring.getRows() << "x"
                           << ring.getCols();
    return success();
  }
  if (!getCol() && (v.getDimSize(1) != ring.getCols() || v.getDimSize(0) > ring.getRows()))
    return emitOpError() << "a " << v.getDimSize(0) << "x" << v.getDimSize(1)
                         << " tile does not fit whole rows of a stage of " << ring.getRows() << "x"
                         << ring.getCols() << " (a column offset stores part of the rows)";
  if (v.getDimSize(1) > ring.getCols() || v.getDimSize(0) > ring.getRows())
    return emitOpError() << "a " << v.getDimSize(0) << "x" << v.getDimSize(1)
                         << " tile does not fit a stage of " << ring.getRows() << "x"
                         << ring.getCols();
  if (!v.getElementType().isF32() && v.getDimSize(1) % 16 != 0)
    return emitOpError() << "stores 16 x 16 blocks: " << v.getDimSize(1)
                         << " columns are not a multiple of 16";
  // (A column offset known only at run time is the caller's to keep to
  // these rules.)
  APInt col;
  if (getCol() && matchPattern(getCol(), m_ConstantInt(&col))) {
    bool f32 = v.getElementType().isF32();
    int64_t at = col.getSExtValue(), unit = f32 ? 2 : 8;
    if (at < 0 || at % unit != 0)
      return emitOpError() << "column " << at << " must be a multiple of " << unit
                           << (f32 ? " (8-byte pairs)" : " (whole 16-byte chunks of a row)");
    if (at + v.getDimSize(1) > ring.getCols())
      return emitOpError() << "columns " << at << " to " << at + v.getDimSize(1)
                           << " pass the stage's " << ring.getCols();
  }
  return success();
}

LogicalResult LoadRingOp::verify() {
  if (failed(verifyInKernel(*this)))
    return failure();
  RankedTensorType t = getResult().getType();
  RingType ring = getRing().getType();
  if (t.getRank() != 1)
    return emitOpError() << "reads one row into a rank-1 tile, got " << t;
  if (t.getElementType() != ring.getElementType())
    return emitOpError() << "the tile is " << t.getElementType() << " and the ring "
                         << ring.getElementType();
  if (t.getDimSize(0) > ring.getCols())
    return emitOpError() << "a tile of " << t.getDimSize(0)
                         << " elements is longer than the ring's " << ring.getCols() << " columns";
  // (A column offset known only at run time is the caller's to keep to
  // these rules.)
  APInt col;
  if (getCol() && matchPattern(getCol(), m_ConstantInt(&col))) {
    int64_t at = col.getSExtValue(), chunk = 16 / ring.getElementBytes();
    if (at < 0 || at % chunk != 0)
      return emitOpError() << "column " << at << " must be a multiple of " << chunk
                           << " (a 16-byte chunk)";
    if (at + t.getDimSize(0) > ring.getCols())
      return emitOpError() << "columns " << at << " to " << at + t.getDimSize(0)
                           << " pass the ring's " << ring.getCols();
  }
  // The reads are not masked: every element a thread holds must be one of
  // the tile's columns (a #tile.blocked parent may pad a row to its
  // threads' reach, past the stage).
  auto layout = cast<LayoutAttrInterface>(t.getEncoding());
  int64_t reach = 0;
  for (int64_t i = 0, n = getElemsPerThread(t); i < n; ++i)
    reach = std::max(reach, layout.getElemOffset(t.getShape(), i)[0]);
  AffineMap base = layout.getThreadBase();
  int64_t farthest = 0;
  for (int64_t th = 0; th < layout.getNumThreads(); ++th)
    farthest = std::max(farthest, base.compose(ArrayRef<int64_t>{th})[0]);
  if (farthest + reach >= t.getDimSize(0))
    return emitOpError() << "the layout places elements up to column " << farthest + reach
                         << " of a " << t.getDimSize(0)
                         << "-element tile: a row is read without masks, so every element "
                            "must be one of its columns";
  APInt row;
  if (matchPattern(getRow(), m_ConstantInt(&row)) &&
      (row.getSExtValue() < 0 || row.getSExtValue() >= ring.getRows()))
    return emitOpError() << "row " << row.getSExtValue() << " is outside the ring's "
                         << ring.getRows() << " rows";
  return success();
}

LogicalResult TmaStoreOp::verify() {
  return verifyTmaCopy(*this, getMap().getType(), getRing().getType(), getOuter(),
                       /*consumer=*/true);
}

LogicalResult BulkReduceOp::verify() {
  if (failed(verifyInRegion(*this, /*consumer=*/true, /*helper=*/true)))
    return failure();
  RingType ring = getRing().getType();
  MemRefType dest = getDest().getType();
  if (!ring.getElementType().isF32() || !dest.getElementType().isF32())
    return emitOpError() << "adds an f32 stage into f32 memory, got " << ring.getElementType()
                         << " into " << dest.getElementType();
  if (ring.getRows() * ring.getCols() * 4 % 16 != 0)
    return emitOpError() << "a stage of " << ring.getRows() * ring.getCols() * 4
                         << " bytes is not a multiple of 16";
  if (int64_t(getIndices().size()) != dest.getRank())
    return emitOpError() << "a memref of rank " << dest.getRank() << " takes " << dest.getRank()
                         << " indices, got " << getIndices().size();
  if (!dest.getLayout().isIdentity())
    return emitOpError() << "adds into consecutive elements: the memref's rows must be dense, got "
                         << dest;
  return success();
}

LogicalResult LoadFragmentsOp::verify() {
  if (failed(verifyInKernel(*this)))
    return failure();
  RankedTensorType t = getResult().getType();
  MemRefType source = getSource().getType();
  if (!isWarpgroupTile(t) || !t.getElementType().isF32() || !source.getElementType().isF32())
    return emitOpError() << "loads an f32 #tile.wgmma tile from f32 memory, got " << source
                         << " -> " << t;
  if (getElemsPerThread(t) % 4 != 0)
    return emitOpError() << "loads fragments in 16-byte chunks: " << getElemsPerThread(t)
                         << " elements a thread are not a multiple of 4";
  if (int64_t(getIndices().size()) != source.getRank())
    return emitOpError() << "a memref of rank " << source.getRank() << " takes " << source.getRank()
                         << " indices, got " << getIndices().size();
  if (!source.getLayout().isIdentity())
    return emitOpError() << "reads consecutive elements: the memref's rows must be dense, got "
                         << source;
  // A warpgroup's 128 threads read the tile: not in a producer or helper
  // region (one thread each).
  if (auto ws = (*this)->getParentOfType<WarpSpecializeOp>();
      ws && !ws.getConsumer().isAncestor((*this)->getParentRegion()))
    return emitOpError() << "reads a warpgroup's tile: outside tile.warp_specialize or in its "
                            "consumer region";
  return success();
}

void LoadFragmentsOp::getEffects(
    SmallVectorImpl<SideEffects::EffectInstance<MemoryEffects::Effect>> &effects) {
  effects.emplace_back(MemoryEffects::Read::get(), &getSourceMutable(),
                       SideEffects::DefaultResource::get());
}

LogicalResult TmaStoreWaitOp::verify() {
  if (failed(verifyInRegion(*this, /*consumer=*/true, /*helper=*/true)))
    return failure();
  if (getPendingAttr().getInt() < 0)
    return emitOpError() << "pending = " << getPendingAttr().getInt() << " is negative";
  return success();
}

/// A flag word: f32 memref, one index per dimension, in a consumer region
/// or the helper region.
static LogicalResult verifyFlag(Operation *op, MemRefType flags, ValueRange indices) {
  if (failed(verifyInRegion(op, /*consumer=*/true, /*helper=*/true)))
    return failure();
  return verifyWord(op, flags, indices, "flags are");
}

LogicalResult FlagWaitOp::verify() { return verifyFlag(*this, getFlags().getType(), getIndices()); }

LogicalResult FlagSetOp::verify() { return verifyFlag(*this, getFlags().getType(), getIndices()); }

LogicalResult SliceOp::verify() {
  RankedTensorType src = getSource().getType(), res = getResult().getType();
  if (!isWarpgroupTile(src) || !isWarpgroupTile(res))
    return emitOpError() << "slices a #tile.wgmma tile into one, got " << src << " -> " << res;
  if (src.getElementType() != res.getElementType())
    return emitOpError() << "the part is " << res.getElementType() << " and the tile "
                         << src.getElementType();
  ArrayRef<int64_t> off = getOffsets();
  if (off.size() != 2)
    return emitOpError() << "takes 2 offsets, got " << off.size();
  if (off[0] % 64 != 0 || off[1] % 8 != 0)
    return emitOpError() << "offsets [" << off[0] << ", " << off[1]
                         << "] are not whole 64-row blocks and 8-column groups";
  for (int d = 0; d < 2; ++d)
    if (off[d] < 0 || off[d] + res.getDimSize(d) > src.getDimSize(d))
      return emitOpError() << "a " << res.getDimSize(0) << "x" << res.getDimSize(1) << " part at ["
                           << off[0] << ", " << off[1] << "] is not inside the "
                           << src.getDimSize(0) << "x" << src.getDimSize(1) << " tile";
  return success();
}

LogicalResult DotRegOp::verify() {
  if (failed(verifyInKernel(*this)))
    return failure();
  RankedTensorType acc = getAcc().getType(), a = getA().getType();
  if (acc != getResult().getType())
    return emitOpError() << "result type " << getResult().getType() << " differs from acc " << acc;
  if (!isWarpgroupTile(acc) || !isWarpgroupTile(a))
    return emitOpError() << "takes A and accumulates in #tile.wgmma tiles, got " << a << " and "
                         << acc;
  RingType b = getB().getType();
  if (a.getElementType() != b.getElementType())
    return emitOpError() << "A is " << a.getElementType() << " and B " << b.getElementType();
  if (b.getElementBytes() != 2)
    return emitOpError() << "multiplies bf16 or f16 tiles, got " << b.getElementType();
  bool bMn = getBMnMajor();
  int64_t m = acc.getDimSize(0), n = acc.getDimSize(1), k = a.getDimSize(1);
  if (a.getDimSize(0) != m)
    return emitOpError() << "A has " << a.getDimSize(0) << " rows and acc " << m;
  int64_t kb = bMn ? b.getRows() : b.getCols();
  if (k != kb)
    return emitOpError() << "A holds K = " << k << " and B's stages K = " << kb;
  if (k % 16 != 0)
    return emitOpError() << "K = " << k << " is not a multiple of 16";
  int64_t bCols = bMn ? b.getCols() : b.getRows();
  if (n > bCols)
    return emitOpError() << "N = " << n << " exceeds the " << bCols << " columns of B's stages";
  if (bMn && n % 64 != 0)
    return emitOpError() << "N = " << n
                         << " must be whole panels (a multiple of 64) when B is "
                            "stored K x N";
  if (n % 16 != 0)
    return emitOpError() << "N = " << n << " must be a multiple of 16";
  return success();
}

LogicalResult DotWaitOp::verify() {
  if (failed(verifyInKernel(*this)))
    return failure();
  if (int64_t(getPending()) > 7)
    return emitOpError() << "pending must be in [0, 7], got " << getPending();
  if (getValues().getTypes() != getResults().getTypes())
    return emitOpError() << "returns types other than the values it waits for";
  for (Type t : getValues().getTypes()) {
    auto tile = cast<RankedTensorType>(t);
    if (!isWarpgroupTile(tile) || tile.getElementType().isInteger(32) ||
        tile.getElementType().isInteger(1))
      return emitOpError() << "waits for f32, bf16 or f16 #tile.wgmma tiles, got " << t;
  }
  return success();
}

LogicalResult WarpSpecializeOp::verify() {
  if (failed(verifyTopLevel(*this)))
    return failure();
  int64_t c = int64_t(getConsumers());
  int64_t pregs = int64_t(getProducerRegs()), cregs = int64_t(getConsumerRegs());
  if (c < 1 || c > 3)
    return emitOpError() << "consumers must be 1, 2 or 3, got " << c;
  auto kernel = cast<KernelOp>((*this)->getParentOp());
  if (int64_t(kernel.getBlockThreads()) != 128 * (c + 1))
    return emitOpError() << "needs " << 128 * (c + 1) << " threads for a producer and " << c
                         << " consumer warpgroups; the kernel has " << kernel.getBlockThreads();
  for (int64_t regs : {pregs, cregs})
    if (regs < 24 || regs > 256 || regs % 8 != 0)
      return emitOpError() << "register limits must be multiples of 8 in [24, 256], got " << regs;
  if (pregs * 128 + cregs * 128 * c > 65536)
    return emitOpError() << "register limits ask for " << pregs * 128 + cregs * 128 * c
                         << " registers; a multiprocessor has 65536";
  if (getProducer().empty() || getProducer().front().getNumArguments() != 0)
    return emitOpError() << "producer region must have one entry block without arguments";
  if (getConsumer().empty() || getConsumer().front().getNumArguments() != 1 ||
      !getConsumer().front().getArgument(0).getType().isIndex())
    return emitOpError() << "consumer region's entry block takes one index, the consumer's";
  if (!getHelper().empty() && getHelper().front().getNumArguments() != 0)
    return emitOpError() << "helper region must have one entry block without arguments";
  // The helper is one thread: of the tile ops, those a thread runs alone.
  Operation *collective = nullptr;
  getHelper().walk([&](Operation *op) {
    if (isa_and_nonnull<TileDialect>(op->getDialect()) &&
        !isa<BarrierWaitOp, BarrierArriveOp, TmaStoreOp, BulkReduceOp, TmaStoreWaitOp, FlagWaitOp,
             FlagSetOp, ProgramIdOp, NumProgramsOp, ClusterRankOp, LoadWordOp, GetWordOp, SetWordOp,
             FetchAddOp, YieldOp>(op))
      collective = op;
    return collective ? WalkResult::interrupt() : WalkResult::advance();
  });
  if (collective)
    return collective->emitOpError()
           << "cannot run in the helper region of tile.warp_specialize, which is one thread "
              "(there: "
              "tile.barrier_wait, barrier_arrive, tma_store, bulk_reduce, tma_store_wait, "
              "flag_wait, flag_set, "
              "program_id, num_programs, cluster_rank, load_word, get_word, set_word, fetch_add)";
  return success();
}

#define GET_OP_CLASSES
#include "dialects/Tile/TileOps.cpp.inc"
