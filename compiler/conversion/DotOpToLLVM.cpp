//===- DotOpToLLVM.cpp - tile.dot on Hopper's warpgroup tensor cores -------===//
//
// tile.dot -> wgmma.fence, one nvvm.wgmma.mma_async (m64nNk16) per 64-row
// block of the accumulator and 16 columns of K, commit, wait. A and B are
// read from ring stages through shared-memory matrix descriptors, built here
// (MLIR's nvgpu.warpgroup.mma takes one operand layout only):
//
//   bits  0-13  start address >> 4     bits 32-45  stride byte offset >> 4
//   bits 16-29  leading byte offset >> 4   bits 62-63  swizzle (1: 128 bytes)
//
// A ring stage (TileOps.td, !tile.ring) is panels of 64 columns, each `rows`
// rows of 128 swizzled bytes. An operand whose K runs along the ring's
// columns (K-major) steps 32 bytes per 16 of K within a panel, a panel per
// 64; its 8-row groups are 1024 bytes apart (the stride offset; the leading
// offset is unused). An operand whose M or N runs along the columns
// (MN-major) steps 16 rows (2048 bytes) per 16 of K; its 8-row groups are
// 1024 bytes apart (stride offset) and its 64-element panels a panel apart
// (leading offset).
//
//===----------------------------------------------------------------------===//
#include "compiler/conversion/TileToLLVM.h"
#include "compiler/conversion/Utility.h"

#include "mlir/Conversion/LLVMCommon/Pattern.h"
#include "mlir/Transforms/DialectConversion.h"

using namespace mlir;
using namespace tilejit::tile;
using tilejit::llvmx::Emitter;

namespace tilejit {
namespace {

/// The descriptor bits other than the start address.
uint64_t descriptorHigh(int64_t leadingBytes, int64_t strideBytes) {
  return (uint64_t((leadingBytes >> 4) & 0x3FFF) << 16) |
         (uint64_t((strideBytes >> 4) & 0x3FFF) << 32) | (uint64_t(1) << 62);
}

/// One operand of the product as the tensor cores read it.
struct Operand {
  Value stage;  // byte address (shared window) of the stage's first panel
  Value offset; // along M (A) or N (B), in elements
  RingType ring;
  bool mnMajor;

  /// Byte address of the block at (`mn` elements past `offset`, `k`).
  Value address(Emitter &e, int64_t mn, int64_t k) const {
    int64_t panelCols = ring.getPanelCols(), elemBytes = ring.getElementBytes();
    Value off = mn ? e.add(offset, e.i64(mn)) : offset;
    Value byOffset;
    int64_t kBytes;
    if (mnMajor) {
      byOffset = e.mul(e.udiv(off, panelCols), e.i64(ring.getPanelBytes()));
      kBytes = k * 128;
    } else {
      byOffset = e.mul(off, e.i64(128));
      kBytes = (k / panelCols) * ring.getPanelBytes() + (k % panelCols) * elemBytes;
    }
    return e.add(e.add(stage, byOffset), e.i64(kBytes));
  }

  Value descriptor(Emitter &e, int64_t mn, int64_t k) const {
    int64_t leading = mnMajor ? ring.getPanelBytes() : 16;
    Value start = LLVM::AndOp::create(
        e.b, e.loc, LLVM::LShrOp::create(e.b, e.loc, address(e, mn, k), e.i64(4)), e.i64(0x3FFF));
    return LLVM::OrOp::create(e.b, e.loc, start, e.i64(int64_t(descriptorHigh(leading, 1024))));
  }
};

struct DotOpLowering : ConvertOpToLLVMPattern<DotOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;

  LogicalResult matchAndRewrite(DotOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rw) const override {
    Emitter e{rw, op.getLoc()};
    MLIRContext *ctx = rw.getContext();
    RankedTensorType acc = op.getAcc().getType();
    int64_t m = acc.getDimSize(0), n = acc.getDimSize(1);
    RingType ra = op.getA().getType(), rb = op.getB().getType();
    int64_t k = op.getAMnMajor() ? ra.getRows() : ra.getCols();

    auto stageAddress = [&](Value ring, Value stage, RingType t) {
      Value base = LLVM::PtrToIntOp::create(rw, e.loc, e.i64(), ring);
      return e.add(base, e.mul(stage, e.i64(t.getStageBytes())));
    };
    Operand a{stageAddress(adaptor.getA(), adaptor.getAStage(), ra), adaptor.getAOffset(), ra,
              op.getAMnMajor()};
    Operand b{stageAddress(adaptor.getB(), adaptor.getBStage(), rb), adaptor.getBOffset(), rb,
              op.getBMnMajor()};

    auto elemType = ra.getElementType().isBF16() ? NVVM::WGMMATypes::bf16 : NVVM::WGMMATypes::f16;
    auto typeAB = NVVM::WGMMATypesAttr::get(ctx, elemType);
    auto typeD = NVVM::WGMMATypesAttr::get(ctx, NVVM::WGMMATypes::f32);
    auto shape = NVVM::MMAShapeAttr::get(ctx, 64, int(n), 16);
    auto scaleOut = NVVM::WGMMAScaleOutAttr::get(ctx, NVVM::WGMMAScaleOut::one);
    auto scaleIn = NVVM::WGMMAScaleInAttr::get(ctx, NVVM::WGMMAScaleIn::one);
    // Row-major A and column-major B are K-major.
    auto layoutA =
        NVVM::MMALayoutAttr::get(ctx, a.mnMajor ? NVVM::MMALayout::col : NVVM::MMALayout::row);
    auto layoutB =
        NVVM::MMALayoutAttr::get(ctx, b.mnMajor ? NVVM::MMALayout::row : NVVM::MMALayout::col);

    int64_t perBlock = n / 2, blocks = m / 64;
    Type f32 = rw.getF32Type();
    auto structTy = LLVM::LLVMStructType::getLiteral(ctx, SmallVector<Type>(perBlock, f32));
    SmallVector<Value> fragments;
    for (int64_t blk = 0; blk < blocks; ++blk) {
      Value s = LLVM::UndefOp::create(rw, e.loc, structTy);
      for (int64_t i = 0; i < perBlock; ++i)
        s = LLVM::InsertValueOp::create(
            rw, e.loc, s, e.extract(adaptor.getAcc(), blk * perBlock + i), ArrayRef<int64_t>{i});
      fragments.push_back(s);
    }

    NVVM::WgmmaFenceAlignedOp::create(rw, e.loc);
    for (int64_t kk = 0; kk < k; kk += 16) {
      Value descB = b.descriptor(e, 0, kk);
      for (int64_t blk = 0; blk < blocks; ++blk)
        fragments[blk] = NVVM::WgmmaMmaAsyncOp::create(
            rw, e.loc, structTy, fragments[blk], a.descriptor(e, 64 * blk, kk), descB, shape,
            typeAB, typeAB, typeD, scaleOut, scaleIn, scaleIn, layoutA, layoutB,
            NVVM::MMAIntOverflowAttr());
    }
    NVVM::WgmmaGroupSyncAlignedOp::create(rw, e.loc);
    NVVM::WgmmaWaitGroupSyncOp::create(rw, e.loc, rw.getI64IntegerAttr(0));

    SmallVector<Value> elems;
    for (int64_t blk = 0; blk < blocks; ++blk)
      for (int64_t i = 0; i < perBlock; ++i)
        elems.push_back(
            LLVM::ExtractValueOp::create(rw, e.loc, fragments[blk], ArrayRef<int64_t>{i}));
    rw.replaceOp(op, e.pack(VectorType::get({blocks * perBlock}, f32), elems));
    return success();
  }
};

} // namespace

void populateDotOpToLLVMPatterns(TileTypeConverter &converter, RewritePatternSet &patterns) {
  patterns.add<DotOpLowering>(converter);
}

} // namespace tilejit
