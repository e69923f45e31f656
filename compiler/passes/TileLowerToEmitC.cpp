//===- TileLowerToEmitC.cpp - tile kernels to EmitC -------------------------===//
#include "compiler/passes/Passes.h"

#include "mlir/Conversion/ArithToEmitC/ArithToEmitC.h"
#include "mlir/Conversion/SCFToEmitC/SCFToEmitC.h"
#include "mlir/Dialect/EmitC/Transforms/TypeConversions.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Transforms/DialectConversion.h"

using namespace mlir;
using namespace tilejit::tile;

namespace tilejit {
#define GEN_PASS_DEF_TILELOWERTOEMITC
#include "compiler/passes/Passes.h.inc"

namespace {

constexpr const char *kScratchName = "tj_scratch";
constexpr const char *kClusterSlotsName = "tj_cluster";
constexpr const char *kClusterPhaseName = "tj_cluster_phase";
// Set before the conversion on the ops of a kernel that runs in clusters: the
// blocks per cluster (ops cannot see their kernel once it is being lowered).
constexpr const char *kClusterAttr = "tile.cluster_blocks";
// The kernel's scratch and cluster slots, carried from the tile.kernel to the
// emitc.func it becomes (and removed there).
constexpr const char *kScratchBytesAttr = "tile.scratch_bytes";
constexpr const char *kClusterSlotsAttr = "tile.cluster_slots";

std::string cTypeName(Type elem) {
  if (elem.isBF16())
    return "tj::bf16";
  if (elem.isF16())
    return "tj::f16";
  return "float";
}

Attribute tmpl(MLIRContext *ctx, const Twine &text) {
  return emitc::OpaqueAttr::get(ctx, text.str());
}
Attribute tmpl(MLIRContext *ctx, int64_t v) { return tmpl(ctx, Twine(v)); }

class TileTypeConverter : public TypeConverter {
public:
  explicit TileTypeConverter(MLIRContext *ctx) {
    addConversion([](Type t) { return t; });
    addConversion([ctx](FloatType t) -> Type {
      if (t.isF32())
        return t;
      return emitc::OpaqueType::get(ctx, cTypeName(t));
    });
    addConversion([ctx](RankedTensorType t) -> std::optional<Type> {
      if (!isTileType(t))
        return std::nullopt;
      return emitc::OpaqueType::get(ctx, "tj::Frag<" + cTypeName(t.getElementType()) + ", " +
                                             std::to_string(getElemsPerThread(t)) + ">");
    });
    addConversion([ctx](MemRefType t) -> std::optional<Type> {
      // tj::View has dense rows only: a memref with row strides stays
      // unconverted, and the pass fails naming it.
      if (!isGlobalMemRef(t) || hasRowStrides(t))
        return std::nullopt;
      return emitc::OpaqueType::get(ctx, "tj::View<" + cTypeName(t.getElementType()) + ", " +
                                             std::to_string(t.getRank()) + ">");
    });
    populateEmitCSizeTTypeConversions(*this);
  }
};

Value callOpaque(ConversionPatternRewriter &rw, Location loc, Type result, StringRef callee,
                 ValueRange operands, ArrayRef<Attribute> templateArgs = {}) {
  TypeRange results = result ? TypeRange(result) : TypeRange();
  auto call = emitc::CallOpaqueOp::create(rw, loc, results, callee, operands, /*args=*/ArrayAttr(),
                                          templateArgs.empty() ? ArrayAttr()
                                                               : rw.getArrayAttr(templateArgs));
  return result ? call.getResult(0) : Value();
}

//===----------------------------------------------------------------------===//
// Kernel structure
//===----------------------------------------------------------------------===//

struct KernelLowering : OpConversionPattern<KernelOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(KernelOp op, OpAdaptor,
                                ConversionPatternRewriter &rw) const override {
    const TypeConverter &conv = *getTypeConverter();
    TypeConverter::SignatureConversion sig(op.getNumArguments());
    for (auto [i, t] : llvm::enumerate(op.getArgumentTypes())) {
      Type converted = conv.convertType(t);
      if (!converted)
        return rw.notifyMatchFailure(op, "argument type cannot be lowered");
      sig.addInputs(i, converted);
    }
    auto fnType = rw.getFunctionType(sig.getConvertedTypes(), {});
    auto func = emitc::FuncOp::create(rw, op.getLoc(), op.getSymName(), fnType);
    std::string spec =
        "extern \"C\" __global__ __launch_bounds__(" + std::to_string(op.getBlockThreads());
    if (auto m = op.getMinBlocks())
      spec += ", " + std::to_string(*m);
    spec += ")";
    if (op.getClusterBlocks() > 1)
      spec += " __cluster_dims__(" + std::to_string(op.getClusterBlocks()) + ", 1, 1)";
    func.setSpecifiersAttr(rw.getStrArrayAttr({spec}));
    rw.inlineRegionBefore(op.getBody(), func.getBody(), func.end());
    if (failed(rw.convertRegionTypes(&func.getBody(), conv, &sig)))
      return failure();
    if (auto v = op.getScratchBytesAttr())
      func->setAttr(kScratchBytesAttr, v);
    for (StringRef name : {kClusterSlotsAttr, kClusterAttr})
      if (auto v = op->getAttrOfType<IntegerAttr>(name))
        func->setAttr(name, v);
    rw.eraseOp(op);
    return success();
  }
};

struct ReturnLowering : OpConversionPattern<ReturnOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(ReturnOp op, OpAdaptor,
                                ConversionPatternRewriter &rw) const override {
    // No block of a cluster leaves while another may still read its shared
    // memory.
    if (op->hasAttr(kClusterAttr))
      callOpaque(rw, op.getLoc(), Type(), "tj::cluster_sync", {});
    rw.replaceOpWithNewOp<emitc::ReturnOp>(op, Value());
    return success();
  }
};

/// Program queries: blocks, or clusters in a kernel that runs in clusters.
template <class OpTy> struct GridQueryLowering : OpConversionPattern<OpTy> {
  GridQueryLowering(const TypeConverter &tc, MLIRContext *ctx, StringRef callee,
                    StringRef clusterCallee)
      : OpConversionPattern<OpTy>(tc, ctx), callee(callee), clusterCallee(clusterCallee) {}
  LogicalResult matchAndRewrite(OpTy op, typename OpTy::Adaptor,
                                ConversionPatternRewriter &rw) const override {
    if (op.getDim() != Dim::x)
      return rw.notifyMatchFailure(op, "only grid dimension x is lowered");
    Type t = this->getTypeConverter()->convertType(op.getType());
    rw.replaceOp(
        op, callOpaque(rw, op.getLoc(), t, op->hasAttr(kClusterAttr) ? clusterCallee : callee, {}));
    return success();
  }
  std::string callee, clusterCallee;
};

struct ClusterRankLowering : OpConversionPattern<ClusterRankOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(ClusterRankOp op, OpAdaptor,
                                ConversionPatternRewriter &rw) const override {
    Type t = getTypeConverter()->convertType(op.getType());
    rw.replaceOp(op, callOpaque(rw, op.getLoc(), t, "tj::cluster_rank", {}));
    return success();
  }
};

struct DimLowering : OpConversionPattern<memref::DimOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(memref::DimOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rw) const override {
    std::optional<int64_t> dim = op.getConstantIndex();
    if (!dim)
      return rw.notifyMatchFailure(op, "memref.dim needs a constant dimension");
    Type t = getTypeConverter()->convertType(op.getType());
    rw.replaceOp(op, callOpaque(rw, op.getLoc(), t, "tj::dim", adaptor.getSource(),
                                {tmpl(getContext(), *dim)}));
    return success();
  }
};

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

/// Template arguments and callee that place `tile` in memory `memref`.
struct Access {
  std::string callee;
  SmallVector<Attribute> templateArgs;
};

// What the accesses need from the IR around them is noted on each access
// before the conversion starts (while operands are still the original values):
constexpr const char *kCol0Attr = "tile.col0";         // first column, -1 if not constant
constexpr const char *kCoherentAttr = "tile.coherent"; // the kernel also writes the source

/// Kernel arguments do not alias: a load may take the read-only cache path
/// unless the kernel also stores to the same memref.
void annotateAccesses(ModuleOp module) {
  Builder b(module.getContext());
  module.walk([&](Operation *op) {
    ValueRange indices;
    if (auto load = dyn_cast<LoadOp>(op)) {
      indices = load.getIndices();
      if (isStoredTo(load.getSource()))
        op->setAttr(kCoherentAttr, b.getUnitAttr());
    } else if (auto store = dyn_cast<StoreOp>(op)) {
      indices = store.getIndices();
    } else {
      return;
    }
    APInt v;
    int64_t col0 = -1;
    if (!indices.empty() && matchPattern(indices.back(), m_ConstantInt(&v)))
      col0 = v.getSExtValue();
    op->setAttr(kCol0Attr, b.getI64IntegerAttr(col0));
  });
}

/// Notes the cluster size on the ops whose lowering depends on it, and on the
/// kernel the rows of threads its cluster reductions need slots for.
void annotateClusters(ModuleOp module) {
  Builder b(module.getContext());
  for (KernelOp kernel : module.getOps<KernelOp>()) {
    int64_t blocks = kernel.getClusterBlocks();
    if (blocks < 2)
      continue;
    int64_t slots = kernel.getClusterRows().value_or(0);
    kernel.walk([&](Operation *op) {
      if (auto reduce = dyn_cast<ReduceOp>(op)) {
        if (!reduce.getCluster())
          return;
      } else if (!isa<ProgramIdOp, NumProgramsOp, ReturnOp>(op)) {
        return;
      }
      op->setAttr(kClusterAttr, b.getI64IntegerAttr(blocks));
    });
    if (slots) {
      kernel->setAttr(kClusterSlotsAttr, b.getI64IntegerAttr(slots));
      kernel->setAttr(kClusterAttr, b.getI64IntegerAttr(blocks));
    }
  }
}

Access accessFor(MLIRContext *ctx, StringRef verb, RankedTensorType tile, MemRefType memref,
                 Operation *access, bool streaming) {
  BlockedLayoutAttr layout = getBlockedParent(tile);
  Access a;
  // The memory's element type; the tile's, last, where the access converts.
  std::string elem = cTypeName(memref.getElementType());
  std::optional<Attribute> converted;
  if (tile.getElementType() != memref.getElementType())
    converted = tmpl(ctx, cTypeName(tile.getElementType()));
  int64_t cols = memref.getShape().back();
  int64_t staticCols = ShapedType::isDynamic(cols) ? -1 : cols;
  auto slice = dyn_cast<SliceLayoutAttr>(tile.getEncoding());
  if (slice && slice.getDim() == 1) {
    a.callee = ("tj::" + verb + "_rows").str();
    a.templateArgs = {tmpl(ctx, elem), tmpl(ctx, layout.getRowThreads()),
                      tmpl(ctx, layout.getColThreads())};
    if (converted)
      a.templateArgs.push_back(*converted);
    return a;
  }
  int64_t tileCols = tile.getShape().back();
  a.callee = ("tj::" + verb + (slice ? "_cols" : "_tile")).str();
  a.templateArgs = {tmpl(ctx, elem),
                    tmpl(ctx, layout.getVec()),
                    tmpl(ctx, layout.getRowThreads()),
                    tmpl(ctx, layout.getColThreads()),
                    tmpl(ctx, layout.getChunks(tileCols)),
                    tmpl(ctx, staticCols),
                    tmpl(ctx, access->getAttrOfType<IntegerAttr>(kCol0Attr).getInt()),
                    tmpl(ctx, access->hasAttr(kCoherentAttr) ? "tj::kCoherent"
                              : streaming                    ? "tj::kStream"
                                                             : "tj::kCached")};
  if (converted)
    a.templateArgs.push_back(*converted);
  return a;
}

Value makeIndex(ConversionPatternRewriter &rw, Location loc, ValueRange indices) {
  auto type =
      emitc::OpaqueType::get(rw.getContext(), "tj::Index<" + std::to_string(indices.size()) + ">");
  return callOpaque(rw, loc, type, "tj::idx", indices);
}

struct LoadLowering : OpConversionPattern<LoadOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(LoadOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rw) const override {
    Location loc = op.getLoc();
    Access a = accessFor(getContext(), "load", op.getType(), op.getSource().getType(), op,
                         op.getStreaming());
    double padding = op.getPadding() ? op.getPadding()->convertToDouble() : 0.0;
    Value pad =
        emitc::ConstantOp::create(rw, loc, rw.getF32Type(), rw.getF32FloatAttr(float(padding)));
    Value idx = makeIndex(rw, loc, adaptor.getIndices());
    Type t = getTypeConverter()->convertType(op.getType());
    rw.replaceOp(op,
                 callOpaque(rw, loc, t, a.callee, {adaptor.getSource(), idx, pad}, a.templateArgs));
    return success();
  }
};

struct StoreLowering : OpConversionPattern<StoreOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(StoreOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rw) const override {
    Location loc = op.getLoc();
    // The C++ back end has no atomic add: a plain store would lose sums.
    if (op.getAdd())
      return rw.notifyMatchFailure(op, "tile.store {add} has no C++ lowering");
    Access a = accessFor(getContext(), "store", op.getValue().getType(), op.getDest().getType(), op,
                         op.getStreaming());
    Value idx = makeIndex(rw, loc, adaptor.getIndices());
    callOpaque(rw, loc, Type(), a.callee, {adaptor.getValue(), adaptor.getDest(), idx},
               a.templateArgs);
    rw.eraseOp(op);
    return success();
  }
};

//===----------------------------------------------------------------------===//
// Tile arithmetic
//===----------------------------------------------------------------------===//

struct ReduceLowering : OpConversionPattern<ReduceOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(ReduceOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rw) const override {
    auto in = op.getOperand().getType();
    auto layout = cast<BlockedLayoutAttr>(in.getEncoding());
    MLIRContext *ctx = getContext();
    Value scratch = emitc::LiteralOp::create(
        rw, op.getLoc(), emitc::PointerType::get(rw.getF32Type()), kScratchName);
    SmallVector<Attribute> args = {
        tmpl(ctx, int64_t(op.getKind())), tmpl(ctx, layout.getRowThreads()),
        tmpl(ctx, layout.getColThreads()), tmpl(ctx, getElemsPerThread(in))};
    Type t = getTypeConverter()->convertType(op.getType());
    if (op.getCluster()) {
      auto blocks = op->getAttrOfType<IntegerAttr>(kClusterAttr);
      if (!blocks)
        return rw.notifyMatchFailure(op, "cluster reduction outside a cluster kernel");
      args.push_back(tmpl(ctx, blocks.getInt()));
      Value slots = emitc::LiteralOp::create(
          rw, op.getLoc(), emitc::OpaqueType::get(ctx, "tj::ClusterSlots"), kClusterSlotsName);
      Value phase = emitc::LiteralOp::create(
          rw, op.getLoc(), emitc::OpaqueType::get(ctx, "unsigned"), kClusterPhaseName);
      rw.replaceOp(op, callOpaque(rw, op.getLoc(), t, "tj::reduce_row_cluster",
                                  {adaptor.getOperand(), scratch, slots, phase}, args));
      return success();
    }
    rw.replaceOp(op, callOpaque(rw, op.getLoc(), t,
                                op.getDim() == 1 ? "tj::reduce_row" : "tj::reduce_col",
                                {adaptor.getOperand(), scratch}, args));
    return success();
  }
};

struct BroadcastLowering : OpConversionPattern<BroadcastOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(BroadcastOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rw) const override {
    auto slice = cast<SliceLayoutAttr>(op.getOperand().getType().getEncoding());
    if (slice.getDim() == 0) {
      // A row of columns is held per thread exactly as the rank-2 tile's
      // columns are: the fragment is already the broadcast.
      rw.replaceOp(op, adaptor.getOperand());
      return success();
    }
    Type t = getTypeConverter()->convertType(op.getType());
    rw.replaceOp(op, callOpaque(rw, op.getLoc(), t, "tj::broadcast_row", adaptor.getOperand(),
                                {tmpl(getContext(), getElemsPerThread(op.getType()))}));
    return success();
  }
};

struct SplatLowering : OpConversionPattern<SplatOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(SplatOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rw) const override {
    if (!op.getType().getElementType().isF32())
      return rw.notifyMatchFailure(op, "only f32 tiles are splatted");
    Type t = getTypeConverter()->convertType(op.getType());
    rw.replaceOp(op, callOpaque(rw, op.getLoc(), t, "tj::splat", adaptor.getValue(),
                                {tmpl(getContext(), getElemsPerThread(op.getType()))}));
    return success();
  }
};

/// An arith or math op applied elementwise to f32 tiles (and, for math ops,
/// to f32 scalars) becomes a call of the device library's function of the
/// same meaning.
template <class OpTy> struct ElementwiseLowering : OpConversionPattern<OpTy> {
  ElementwiseLowering(const TypeConverter &tc, MLIRContext *ctx, StringRef callee, bool scalarsToo)
      : OpConversionPattern<OpTy>(tc, ctx, /*benefit=*/2), callee(callee), scalarsToo(scalarsToo) {}
  LogicalResult matchAndRewrite(OpTy op, typename OpTy::Adaptor adaptor,
                                ConversionPatternRewriter &rw) const override {
    Type type = op->getResult(0).getType();
    bool tile = isa<RankedTensorType>(type);
    if (!(tile || (scalarsToo && type.isF32())))
      return rw.notifyMatchFailure(op, "not an f32 tile");
    Type t = this->getTypeConverter()->convertType(type);
    rw.replaceOp(op, callOpaque(rw, op.getLoc(), t, callee, adaptor.getOperands()));
    return success();
  }
  std::string callee;
  bool scalarsToo;
};

template <class OpTy> struct ConvertLowering : OpConversionPattern<OpTy> {
  ConvertLowering(const TypeConverter &tc, MLIRContext *ctx)
      : OpConversionPattern<OpTy>(tc, ctx, /*benefit=*/2) {}
  LogicalResult matchAndRewrite(OpTy op, typename OpTy::Adaptor adaptor,
                                ConversionPatternRewriter &rw) const override {
    auto type = dyn_cast<RankedTensorType>(op.getType());
    if (!type)
      return rw.notifyMatchFailure(op, "not a tile");
    Type t = this->getTypeConverter()->convertType(type);
    rw.replaceOp(op, callOpaque(rw, op.getLoc(), t, "tj::convert", adaptor.getIn(),
                                {tmpl(this->getContext(), cTypeName(type.getElementType()))}));
    return success();
  }
};

/// Unsigned division and remainder of index values: indices lower to size_t,
/// so C++'s `/` and `%` are the unsigned operations.
template <class OpTy, class EmitOpTy> struct IndexBinaryLowering : OpConversionPattern<OpTy> {
  IndexBinaryLowering(const TypeConverter &tc, MLIRContext *ctx)
      : OpConversionPattern<OpTy>(tc, ctx, /*benefit=*/2) {}
  LogicalResult matchAndRewrite(OpTy op, typename OpTy::Adaptor adaptor,
                                ConversionPatternRewriter &rw) const override {
    if (!op.getType().isIndex())
      return rw.notifyMatchFailure(op, "not an index operation");
    Type t = this->getTypeConverter()->convertType(op.getType());
    rw.replaceOpWithNewOp<EmitOpTy>(op, t, adaptor.getLhs(), adaptor.getRhs());
    return success();
  }
};

struct TileLowerToEmitCPass : impl::TileLowerToEmitCBase<TileLowerToEmitCPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *ctx = &getContext();

    // Shared memory as tile-allocate-shared places it (placed here when that
    // pass has not run), read before the kernels disappear.
    for (KernelOp kernel : module.getOps<KernelOp>())
      if (!kernel.getScratchBytes())
        allocateShared(kernel);
    annotateAccesses(module);
    annotateClusters(module);
    bool usesMemory = false, usesReduce = false;
    module.walk([&](Operation *op) {
      usesMemory |= isa<LoadOp, StoreOp>(op);
      usesReduce |= isa<ReduceOp>(op);
    });

    TileTypeConverter conv(ctx);
    ConversionTarget target(*ctx);
    target.addLegalDialect<emitc::EmitCDialect>();
    target.addIllegalDialect<TileDialect, arith::ArithDialect, math::MathDialect, scf::SCFDialect,
                             memref::MemRefDialect>();
    target.addLegalOp<ModuleOp>();

    for (KernelOp kernel : module.getOps<KernelOp>())
      for (auto [i, t] : llvm::enumerate(kernel.getArgumentTypes()))
        if (auto m = dyn_cast<MemRefType>(t); m && hasRowStrides(m)) {
          kernel.emitError() << "kernel '" << kernel.getSymName() << "': argument " << i << " ("
                             << t << ") has row strides, which the C++ back end does not "
                             << "take (the NVPTX back end does)";
          return signalPassFailure();
        }

    RewritePatternSet patterns(ctx);
    patterns.add<KernelLowering, ReturnLowering, DimLowering, LoadLowering, StoreLowering,
                 ReduceLowering, BroadcastLowering, SplatLowering>(conv, ctx);
    patterns.add<GridQueryLowering<ProgramIdOp>>(conv, ctx, "tj::program_id_x", "tj::cluster_id_x");
    patterns.add<GridQueryLowering<NumProgramsOp>>(conv, ctx, "tj::num_programs_x",
                                                   "tj::num_clusters_x");
    patterns.add<ClusterRankLowering>(conv, ctx);
    patterns.add<ElementwiseLowering<arith::AddFOp>>(conv, ctx, "tj::add", false);
    patterns.add<ElementwiseLowering<arith::SubFOp>>(conv, ctx, "tj::sub", false);
    patterns.add<ElementwiseLowering<arith::MulFOp>>(conv, ctx, "tj::mul", false);
    patterns.add<ElementwiseLowering<arith::DivFOp>>(conv, ctx, "tj::div", false);
    patterns.add<ElementwiseLowering<arith::MaximumFOp>>(conv, ctx, "tj::max", false);
    patterns.add<ElementwiseLowering<arith::MinimumFOp>>(conv, ctx, "tj::min", false);
    patterns.add<ElementwiseLowering<arith::NegFOp>>(conv, ctx, "tj::neg", false);
    patterns.add<ElementwiseLowering<math::RsqrtOp>>(conv, ctx, "tj::rsqrt", true);
    patterns.add<ElementwiseLowering<math::SqrtOp>>(conv, ctx, "tj::sqrt", true);
    patterns.add<ElementwiseLowering<math::ExpOp>>(conv, ctx, "tj::exp", true);
    patterns.add<ElementwiseLowering<math::Exp2Op>>(conv, ctx, "tj::exp2", true);
    patterns.add<ElementwiseLowering<math::AbsFOp>>(conv, ctx, "tj::abs", true);
    patterns.add<ConvertLowering<arith::ExtFOp>, ConvertLowering<arith::TruncFOp>>(conv, ctx);
    patterns.add<IndexBinaryLowering<arith::DivUIOp, emitc::DivOp>,
                 IndexBinaryLowering<arith::RemUIOp, emitc::RemOp>>(conv, ctx);
    populateArithToEmitCPatterns(conv, patterns);
    populateSCFToEmitCConversionPatterns(patterns, conv);

    if (failed(applyFullConversion(module, target, std::move(patterns))))
      return signalPassFailure();

    // Shared scratch for cross-warp reductions, at the top of each kernel.
    OpBuilder b(ctx);
    for (auto func : module.getOps<emitc::FuncOp>()) {
      auto scratch = func->getAttrOfType<IntegerAttr>(kScratchBytesAttr);
      func->removeAttr(kScratchBytesAttr);
      bool reduces = false;
      func.walk([&](emitc::LiteralOp lit) { reduces |= lit.getValue() == kScratchName; });
      if (!reduces)
        continue;
      // Reductions within a warp never touch the scratch; it is declared
      // (one float at least) because the call names it.
      int64_t floats = std::max<int64_t>(1, scratch ? scratch.getInt() / 4 : 0);
      b.setInsertionPointToStart(&func.getBody().front());
      emitc::VerbatimOp::create(b, func.getLoc(),
                                b.getStringAttr("__shared__ float " + std::string(kScratchName) +
                                                "[" + std::to_string(floats) + "];"));
      // Cluster reductions: where blocks exchange their row results, set up
      // before anything else runs, and the count of reductions so far.
      if (auto slots = func->getAttrOfType<IntegerAttr>(kClusterSlotsAttr)) {
        func->removeAttr(kClusterSlotsAttr);
        auto blocks = func->getAttrOfType<IntegerAttr>(kClusterAttr);
        func->removeAttr(kClusterAttr);
        b.setInsertionPointAfter(&func.getBody().front().front());
        std::string name = kClusterSlotsName;
        emitc::VerbatimOp::create(
            b, func.getLoc(),
            b.getStringAttr("__shared__ tj::ClusterSlots<" + std::to_string(blocks.getInt()) +
                            ", " + std::to_string(slots.getInt()) + "> " + name + ";\nunsigned " +
                            kClusterPhaseName + " = 0;\ntj::cluster_slots_init(" + name + ");"));
      }
    }
    b.setInsertionPointToStart(module.getBody());
    SmallVector<StringRef> includes = {"prelude.cuh", "frag.cuh"};
    if (usesMemory)
      includes.push_back("memory.cuh");
    if (usesReduce)
      includes.push_back("reduce.cuh");
    for (StringRef inc : includes)
      emitc::IncludeOp::create(b, module.getLoc(), inc);
  }
};

} // namespace
} // namespace tilejit
