//===- ElementwiseOpToLLVM.cpp - splats, broadcasts, NVVM math --------------===//
//
// Tiles are vectors of the thread's elements, so MLIR's own arith and math
// conversions lower elementwise tile arithmetic and casts as they do vector
// arithmetic. What is left here: tile.splat and tile.broadcast (a vector of
// copies; a dim = 0 slice is held as the tile's columns are), tile.slice (a
// vector of some of the source's elements), and the math
// functions whose LLVM intrinsics NVPTX does not serve as CUDA does:
// math.rsqrt is rsqrt.approx (CUDA's rsqrtf; LLVM's lowering would divide by
// a square root), math.exp and math.exp2 are ex2.approx.ftz (NVPTX has no
// libcall for llvm.exp; results below 2^-126 flush to zero, as CUDA's exp2f
// under --use_fast_math: without ftz ptxas wraps every MUFU.EX2 in a range
// check, a halving and a squaring, three instructions more for each of
// attention's probabilities), math.log2 is lg2.approx.
//
//===----------------------------------------------------------------------===//
#include "compiler/conversion/TileToLLVM.h"
#include "compiler/conversion/Utility.h"

#include <cmath>

#include "mlir/Conversion/LLVMCommon/Pattern.h"
#include "mlir/Transforms/DialectConversion.h"

using namespace mlir;
using namespace tilejit::tile;
using tilejit::llvmx::Emitter;

namespace tilejit {
namespace {

struct SplatOpLowering : ConvertOpToLLVMPattern<SplatOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;
  LogicalResult matchAndRewrite(SplatOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rw) const override {
    Emitter e{rw, op.getLoc()};
    rw.replaceOp(op, e.splat(getTypeConverter()->convertType(op.getType()), adaptor.getValue()));
    return success();
  }
};

/// tile.slice: the thread's elements of the part, picked out of the
/// source's by their offsets (the part's element at offset (r, c) from the
/// thread's first is the source's at (r, c) + offsets; the verifier keeps
/// the offsets on the layout's period, so the thread's first elements match).
struct SliceOpLowering : ConvertOpToLLVMPattern<SliceOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;
  LogicalResult matchAndRewrite(SliceOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rw) const override {
    RankedTensorType src = op.getSource().getType(), res = op.getType();
    auto resLayout = cast<LayoutAttrInterface>(res.getEncoding());
    auto index = elementsByOffset(src);
    ArrayRef<int64_t> off = op.getOffsets();
    Emitter e{rw, op.getLoc()};
    SmallVector<Value> elems;
    for (int64_t i = 0, n = getElemsPerThread(res); i < n; ++i) {
      SmallVector<int64_t> at = resLayout.getElemOffset(res.getShape(), i);
      auto it = index.find({at[0] + off[0], at[1] + off[1]});
      if (it == index.end())
        return rw.notifyMatchFailure(op, "an element of the part is not the thread's");
      elems.push_back(e.extract(adaptor.getSource(), it->second));
    }
    rw.replaceOp(op, e.pack(getTypeConverter()->convertType(res), elems));
    return success();
  }
};

struct BroadcastOpLowering : ConvertOpToLLVMPattern<BroadcastOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;
  LogicalResult matchAndRewrite(BroadcastOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rw) const override {
    auto slice = cast<SliceLayoutAttr>(op.getOperand().getType().getEncoding());
    Type to = getTypeConverter()->convertType(op.getType());
    Emitter e{rw, op.getLoc()};
    if (!slice.getBlockedParent()) {
      // A #tile.wgmma tile: element j of 64-row block `blk` lies on the
      // block's first row of the thread or 8 below ((j / 2) % 2), in
      // 8-column block j / 4, column + j % 2. A row slice holds the rows
      // (element 2 blk or 2 blk + 1), a column slice the columns (element
      // 2 (j / 4) + j % 2).
      RankedTensorType out = op.getType();
      int64_t perBlock = out.getDimSize(1) / 2;
      RankedTensorType in = op.getOperand().getType();
      SmallVector<Value> from, elems;
      for (int64_t i = 0; i < getElemsPerThread(in); ++i)
        from.push_back(e.extract(adaptor.getOperand(), i));
      for (int64_t i = 0; i < getElemsPerThread(out); ++i) {
        int64_t j = i % perBlock;
        elems.push_back(slice.getDim() == 1 ? from[2 * (i / perBlock) + (j / 2) % 2]
                                            : from[2 * (j / 4) + j % 2]);
      }
      rw.replaceOp(op, e.pack(to, elems));
      return success();
    }
    if (slice.getDim() == 0 && adaptor.getOperand().getType() == to) {
      rw.replaceOp(op, adaptor.getOperand());
      return success();
    }
    rw.replaceOp(op, e.splat(to, e.extract(adaptor.getOperand(), 0)));
    return success();
  }
};

/// Each element's coordinate along `dim`, from the layout: the thread's
/// base coordinate plus the element's offset.
struct IotaOpLowering : ConvertOpToLLVMPattern<IotaOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;
  LogicalResult matchAndRewrite(IotaOp op, OpAdaptor,
                                ConversionPatternRewriter &rw) const override {
    Emitter e{rw, op.getLoc()};
    RankedTensorType t = op.getType();
    auto layout = cast<LayoutAttrInterface>(t.getEncoding());
    int64_t dim = op.getDim();
    Value base = LLVM::TruncOp::create(rw, e.loc, e.i32(),
                                       e.apply(layout.getThreadBase(), e.threadId())[dim]);
    SmallVector<Value> elems;
    for (int64_t i = 0; i < layout.getElemsPerThread(t.getShape()); ++i) {
      int64_t off = layout.getElemOffset(t.getShape(), i)[dim];
      elems.push_back(off ? LLVM::AddOp::create(rw, e.loc, base, e.i32(off)).getResult() : base);
    }
    rw.replaceOp(op, e.pack(getTypeConverter()->convertType(t), elems));
    return success();
  }
};

/// arith.extf from bf16 to f32 as a shift (Emitter::widenToF32), ahead of
/// MLIR's own lowering to fpext.
struct ExtFOpLowering : ConvertOpToLLVMPattern<arith::ExtFOp> {
  ExtFOpLowering(TileTypeConverter &tc) : ConvertOpToLLVMPattern(tc, /*benefit=*/2) {}
  LogicalResult matchAndRewrite(arith::ExtFOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rw) const override {
    Type in = getElementTypeOrSelf(op.getIn().getType()), out = getElementTypeOrSelf(op.getType());
    if (!in.isBF16() || !out.isF32())
      return rw.notifyMatchFailure(op, "bf16 to f32 only");
    Emitter e{rw, op.getLoc()};
    rw.replaceOp(op, e.widenToF32(adaptor.getIn()));
    return success();
  }
};

/// An f32 math function as an NVVM intrinsic, element by element, with an
/// optional scale applied first (exp as ex2 of x * log2(e)).
template <typename OpTy> struct NvvmMathLowering : ConvertOpToLLVMPattern<OpTy> {
  NvvmMathLowering(TileTypeConverter &tc, StringRef intrinsic, float scale)
      : ConvertOpToLLVMPattern<OpTy>(tc, /*benefit=*/2), intrinsic(intrinsic), scale(scale) {}
  LogicalResult matchAndRewrite(OpTy op, typename OpTy::Adaptor adaptor,
                                ConversionPatternRewriter &rw) const override {
    Value in = adaptor.getOperand();
    Type type = in.getType();
    auto vec = dyn_cast<VectorType>(type);
    if (!(vec ? vec.getElementType() : type).isF32())
      return rw.notifyMatchFailure(op, "f32 only");
    Emitter e{rw, op.getLoc()};
    auto one = [&](Value x) -> Value {
      if (scale != 1.0f)
        x = LLVM::FMulOp::create(rw, e.loc, x, e.f32(scale));
      return LLVM::CallIntrinsicOp::create(rw, e.loc, rw.getF32Type(), rw.getStringAttr(intrinsic),
                                           ValueRange{x})
          .getResult(0);
    };
    if (!vec) {
      rw.replaceOp(op, one(in));
      return success();
    }
    SmallVector<Value> out;
    for (int64_t i = 0; i < vec.getNumElements(); ++i)
      out.push_back(one(e.extract(in, i)));
    rw.replaceOp(op, e.pack(vec, out));
    return success();
  }
  std::string intrinsic;
  float scale;
};

} // namespace

void populateElementwiseOpToLLVMPatterns(TileTypeConverter &converter,
                                         RewritePatternSet &patterns) {
  patterns
      .add<SplatOpLowering, SliceOpLowering, BroadcastOpLowering, IotaOpLowering, ExtFOpLowering>(
          converter);
  patterns.add<NvvmMathLowering<math::RsqrtOp>>(converter, "llvm.nvvm.rsqrt.approx.f", 1.0f);
  patterns.add<NvvmMathLowering<math::ExpOp>>(converter, "llvm.nvvm.ex2.approx.ftz.f32",
                                              float(M_LOG2E));
  patterns.add<NvvmMathLowering<math::Exp2Op>>(converter, "llvm.nvvm.ex2.approx.ftz.f32", 1.0f);
  patterns.add<NvvmMathLowering<math::Log2Op>>(converter, "llvm.nvvm.lg2.approx.f", 1.0f);
}

} // namespace tilejit
