//===- KernelOpToLLVM.cpp - kernels, their arguments and program ids --------===//
//
// tile.kernel -> llvm.func marked nvvm.kernel; tile.return -> llvm.return
// (after a cluster barrier where blocks exchange through shared memory);
// tile.program_id / num_programs / cluster_rank -> NVVM special registers;
// memref.dim of a kernel argument -> a field of its struct.
//
//===----------------------------------------------------------------------===//
#include "compiler/conversion/TileToLLVM.h"
#include "compiler/conversion/Utility.h"

#include "mlir/Conversion/LLVMCommon/Pattern.h"
#include "mlir/Transforms/DialectConversion.h"

using namespace mlir;
using namespace tilejit::tile;

namespace tilejit {
namespace {

/// No block of a cluster leaves, or starts exchanging, while another may
/// still touch its shared memory.
void clusterSync(OpBuilder &b, Location loc) {
  NVVM::ClusterArriveOp::create(b, loc, b.getUnitAttr());
  NVVM::ClusterWaitOp::create(b, loc, b.getUnitAttr());
}

/// tile.kernel -> llvm.func with the NVVM kernel attributes of its launch
/// shape. A kernel that reduces across its cluster first sets up the two
/// transaction barriers of that exchange (kernelOf(...).barriersOffset).
struct KernelOpLowering : ConvertOpToLLVMPattern<KernelOp> {
  KernelOpLowering(TileTypeConverter &tc, LoweringState &state)
      : ConvertOpToLLVMPattern(tc), state(state) {}

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
    MLIRContext *ctx = rw.getContext();
    auto fnType =
        LLVM::LLVMFunctionType::get(LLVM::LLVMVoidType::get(ctx), sig.getConvertedTypes());
    auto func = LLVM::LLVMFuncOp::create(rw, op.getLoc(), op.getSymName(), fnType);
    func->setAttr(NVVM::NVVMDialect::getKernelFuncAttrName(), rw.getUnitAttr());
    int32_t threads = int32_t(op.getBlockThreads());
    func->setAttr(NVVM::NVVMDialect::getMaxntidAttrName(),
                  rw.getDenseI32ArrayAttr({threads, 1, 1}));
    if (auto m = op.getMinBlocks())
      func->setAttr(NVVM::NVVMDialect::getMinctasmAttrName(), rw.getI32IntegerAttr(int32_t(*m)));
    if (op.getClusterBlocks() > 1)
      func->setAttr(NVVM::NVVMDialect::getClusterDimAttrName(),
                    rw.getDenseI32ArrayAttr({int32_t(op.getClusterBlocks()), 1, 1}));
    // A tensor map is a 128-byte parameter passed by value, which the copy
    // engine reads in place (__grid_constant__).
    for (auto [i, t] : llvm::enumerate(op.getArgumentTypes()))
      if (isa<TensorMapType>(t)) {
        func.setArgAttr(i, LLVM::LLVMDialect::getByValAttrName(),
                        TypeAttr::get(LLVM::LLVMArrayType::get(rw.getI8Type(), 128)));
        func.setArgAttr(i, LLVM::LLVMDialect::getAlignAttrName(), rw.getI64IntegerAttr(64));
        func.setArgAttr(i, "nvvm.grid_constant", rw.getUnitAttr());
      }
    rw.inlineRegionBefore(op.getBody(), func.getBody(), func.end());
    if (failed(rw.convertRegionTypes(&func.getBody(), conv, &sig)))
      return failure();

    KernelLowering &k = state.kernels[op.getSymName()];
    if (!k.dynamicName.empty()) {
      // The dynamic shared memory's base, rounded up to 1024 bytes (the
      // launch gives 1024 more than the rings and barriers take).
      OpBuilder::InsertionGuard guard(rw);
      rw.setInsertionPointToStart(&func.getBody().front());
      llvmx::Emitter e{rw, op.getLoc()};
      Value base = e.shared(k.dynamicName);
      Value addr = LLVM::PtrToIntOp::create(rw, op.getLoc(), e.i64(), base);
      Value aligned = LLVM::AndOp::create(rw, op.getLoc(), e.add(addr, e.i64(1023)), e.i64(~1023));
      k.dynamicBase = e.offset(base, LLVM::SubOp::create(rw, op.getLoc(), aligned, addr));
    }
    if (k.clusterRows > 0) {
      OpBuilder::InsertionGuard guard(rw);
      rw.setInsertionPointToStart(&func.getBody().front());
      llvmx::Emitter e{rw, op.getLoc()};
      auto ptrTy = LLVM::LLVMPointerType::get(ctx);
      k.clusterRound = LLVM::AllocaOp::create(rw, op.getLoc(), ptrTy, e.i32(), e.i64(1), 4);
      LLVM::StoreOp::create(rw, op.getLoc(), e.i32(0), k.clusterRound);
      Value first = e.isZero(e.threadId());
      for (int i = 0; i < 2; ++i)
        NVVM::MBarrierInitOp::create(
            rw, op.getLoc(), e.shared(k.sharedName, k.barriersOffset + 8 * i), e.i32(1), first);
      NVVM::FenceMbarrierInitOp::create(rw, op.getLoc());
      clusterSync(rw, op.getLoc());
    }
    rw.eraseOp(op);
    return success();
  }

  LoweringState &state;
};

struct ReturnOpLowering : ConvertOpToLLVMPattern<ReturnOp> {
  ReturnOpLowering(TileTypeConverter &tc, LoweringState &state)
      : ConvertOpToLLVMPattern(tc), state(state) {}
  LogicalResult matchAndRewrite(ReturnOp op, OpAdaptor,
                                ConversionPatternRewriter &rw) const override {
    if (state.kernelOf(op).clusterBlocks > 1)
      clusterSync(rw, op.getLoc());
    rw.replaceOpWithNewOp<LLVM::ReturnOp>(op, ValueRange{});
    return success();
  }
  LoweringState &state;
};

/// A grid query: the block register, or the cluster one in a kernel that
/// runs in clusters (a program instance is then a cluster).
template <typename OpTy, typename BlockReg, typename ClusterReg>
struct GridQueryLowering : ConvertOpToLLVMPattern<OpTy> {
  GridQueryLowering(TileTypeConverter &tc, LoweringState &state)
      : ConvertOpToLLVMPattern<OpTy>(tc), state(state) {}
  LogicalResult matchAndRewrite(OpTy op, typename OpTy::Adaptor,
                                ConversionPatternRewriter &rw) const override {
    llvmx::Emitter e{rw, op.getLoc()};
    Value r = state.kernelOf(op).clusterBlocks > 1
                  ? ClusterReg::create(rw, op.getLoc(), e.i32()).getResult()
                  : BlockReg::create(rw, op.getLoc(), e.i32()).getResult();
    rw.replaceOp(op, e.zext64(r));
    return success();
  }
  LoweringState &state;
};

struct ClusterRankOpLowering : ConvertOpToLLVMPattern<ClusterRankOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;
  LogicalResult matchAndRewrite(ClusterRankOp op, OpAdaptor,
                                ConversionPatternRewriter &rw) const override {
    llvmx::Emitter e{rw, op.getLoc()};
    rw.replaceOp(op, e.zext64(NVVM::ClusterId::create(rw, op.getLoc(), e.i32())));
    return success();
  }
};

/// memref.dim of a kernel argument: the size in its struct, or the static
/// size.
struct DimOpLowering : ConvertOpToLLVMPattern<memref::DimOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;
  LogicalResult matchAndRewrite(memref::DimOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rw) const override {
    std::optional<int64_t> d = op.getConstantIndex();
    auto type = dyn_cast<MemRefType>(op.getSource().getType());
    if (!d || !type || *d < 0 || *d >= type.getRank())
      return rw.notifyMatchFailure(op, "a size of a memref argument, by constant dimension");
    llvmx::Emitter e{rw, op.getLoc()};
    if (!type.isDynamicDim(*d))
      rw.replaceOp(op, e.i64(type.getDimSize(*d)));
    else
      rw.replaceOpWithNewOp<LLVM::ExtractValueOp>(op, adaptor.getSource(),
                                                  ArrayRef<int64_t>{1 + *d});
    return success();
  }
};

/// tile.load_word: every thread loads the word and widens it, signed.
struct LoadWordOpLowering : ConvertOpToLLVMPattern<LoadWordOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;
  LogicalResult matchAndRewrite(LoadWordOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rw) const override {
    llvmx::Emitter e{rw, op.getLoc()};
    Value addr =
        llvmx::wordAddress(e, adaptor.getSource(), op.getSource().getType(), adaptor.getIndices());
    Value word = LLVM::LoadOp::create(rw, e.loc, e.i32(), addr, /*alignment=*/4);
    rw.replaceOpWithNewOp<LLVM::SExtOp>(op, rw.getI64Type(), word);
    return success();
  }
};

/// tile.narrow: the pointer moved to row `start`, the first size replaced
/// by `size` cut to the source's rows (0 for a start outside them or a
/// negative size): offsets read from memory never move an access outside
/// the source. The other sizes and the row strides as they were.
struct NarrowOpLowering : ConvertOpToLLVMPattern<NarrowOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;
  LogicalResult matchAndRewrite(NarrowOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rw) const override {
    llvmx::Emitter e{rw, op.getLoc()};
    MemRefType type = op.getSource().getType();
    llvmx::GlobalView v = llvmx::unpackGlobal(e, adaptor.getSource(), type);
    Value start = adaptor.getStart(), rows = v.sizes[0];
    SmallVector<Value> first(size_t(type.getRank()), e.i64(0));
    first[0] = start;
    int64_t bytes = type.getElementType().getIntOrFloatBitWidth() / 8;
    Value ptr = e.offset(v.ptr(e), e.mul(v.offsetOf(e, first), e.i64(bytes)));
    // min(size, rows - start) at least 0, and 0 unless 0 <= start < rows.
    auto pred = [&](LLVM::ICmpPredicate p, Value a, Value b) {
      return LLVM::ICmpOp::create(rw, e.loc, p, a, b).getResult();
    };
    Value zero = e.i64(0), left = LLVM::SubOp::create(rw, e.loc, rows, start);
    Value size = adaptor.getSize();
    size =
        LLVM::SelectOp::create(rw, e.loc, pred(LLVM::ICmpPredicate::slt, size, left), size, left);
    size =
        LLVM::SelectOp::create(rw, e.loc, pred(LLVM::ICmpPredicate::sgt, size, zero), size, zero);
    Value inside = LLVM::AndOp::create(rw, e.loc, pred(LLVM::ICmpPredicate::sge, start, zero),
                                       pred(LLVM::ICmpPredicate::slt, start, rows));
    size = LLVM::SelectOp::create(rw, e.loc, inside, size, zero);
    Value out =
        LLVM::InsertValueOp::create(rw, e.loc, adaptor.getSource(), ptr, ArrayRef<int64_t>{0});
    out = LLVM::InsertValueOp::create(rw, e.loc, out, size, ArrayRef<int64_t>{1});
    rw.replaceOp(op, out);
    return success();
  }
};

} // namespace

KernelLowering &LoweringState::kernelOf(Operation *op) {
  auto func = op->getParentOfType<LLVM::LLVMFuncOp>();
  return kernels[func ? func.getSymName() : StringRef()];
}

void populateKernelOpToLLVMPatterns(TileTypeConverter &converter, LoweringState &state,
                                    RewritePatternSet &patterns) {
  patterns.add<KernelOpLowering, ReturnOpLowering,
               GridQueryLowering<ProgramIdOp, NVVM::BlockIdXOp, NVVM::ClusterIdXOp>,
               GridQueryLowering<NumProgramsOp, NVVM::GridDimXOp, NVVM::ClusterDimXOp>>(converter,
                                                                                        state);
  patterns.add<ClusterRankOpLowering, DimOpLowering, LoadWordOpLowering, NarrowOpLowering>(
      converter);
}

} // namespace tilejit
