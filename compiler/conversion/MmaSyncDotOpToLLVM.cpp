//===- MmaSyncDotOpToLLVM.cpp - tile.dot on mma.sync (sm_80) ---------------===//
//
// tile.dot -> per 16 of K: ldmatrix.x4 of A's 16 x 16 fragment for each
// 16-row strip the warp owns (rows 64 b + 16 w of each 64-row block b, as
// #tile.wgmma places them), ldmatrix.x4 of B's 16 x 16 fragment for each
// pair of 8-column tiles, and one nvvm.mma.sync m16n8k16 (f32 accumulation)
// per strip and 8-column tile. The m16n8 accumulator fragment of mma.sync,
// (row l / 4 + {0, 8}, column 2 (l % 4) + {0, 1}) for lane l, is exactly
// what #tile.wgmma gives a warp for each 8-column block, in the same order,
// so the accumulator passes through unchanged.
//
// ldmatrix: lanes 8 j to 8 j + 7 give the rows of matrix j. A K-major
// operand (the ring's rows are A's rows or B's columns) is read as stored;
// an MN-major one (the ring's rows are K) with .trans, which hands each lane
// the pair along K that mma.sync expects. Matrices in fragment order:
//   A: (m 0-7, k 0-7), (m 8-15, k 0-7), (m 0-7, k 8-15), (m 8-15, k 8-15)
//   B: (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15)
// Each row address is swizzled as the ring is (ringElementOffset): eight
// lanes read eight rows of one 16-byte chunk column, which the swizzle
// spreads over all banks.
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

/// Four 32-bit registers of an ldmatrix.x4 at `addr` (shared).
SmallVector<Value> ldmatrix4(Emitter &e, Value addr, bool trans) {
  MLIRContext *ctx = e.b.getContext();
  Type i32 = e.i32();
  auto structTy = LLVM::LLVMStructType::getLiteral(ctx, {i32, i32, i32, i32});
  Value r = NVVM::LdMatrixOp::create(
      e.b, e.loc, structTy, addr, 4, trans ? NVVM::MMALayout::col : NVVM::MMALayout::row,
      NVVM::LdStMatrixShapeAttr::get(ctx, 8, 8), NVVM::LdStMatrixEltType::B16);
  SmallVector<Value> out;
  for (int64_t i = 0; i < 4; ++i)
    out.push_back(LLVM::ExtractValueOp::create(e.b, e.loc, r, ArrayRef<int64_t>{i}));
  return out;
}

/// The products of one tile.dot or tile.dot_reg on mma.sync: for each 16 of
/// K, A's fragment of each 64-row block from `fragA(blk, kk)` (four 32-bit
/// words), B's fragments of each pair of 8-column tiles by ldmatrix from
/// stage `stageB` of `rb` (columns from `bOffset`; `bMn`: the ring holds B
/// K x N), and one m16n8k16 per block and 8-column tile, accumulating into
/// `accs` (the #tile.wgmma elements of an m x n f32 tile, in order).
void mmaSyncProducts(Emitter &e, int64_t m, int64_t n, int64_t k, bool bf16, RingType rb,
                     Value stageB, Value bOffset, bool bMn,
                     llvm::function_ref<SmallVector<Value>(int64_t blk, int64_t kk)> fragA,
                     SmallVector<Value> &accs) {
  OpBuilder &rw = e.b;
  MLIRContext *ctx = rw.getContext();
  Value t = e.urem(e.threadId(), 128);
  Value lane = e.urem(t, 32);
  Value lane8 = e.urem(lane, 8), matrix = e.udiv(lane, 8);
  // Lane parts of B's row addresses (see the file comment).
  Value bRowLane = bMn ? e.add(e.mul(e.urem(matrix, 2), e.i64(8)), lane8)
                       : e.add(e.mul(e.udiv(matrix, 2), e.i64(8)), lane8);
  Value bColLane = bMn ? e.mul(e.udiv(matrix, 2), e.i64(8)) : e.mul(e.urem(matrix, 2), e.i64(8));
  // B's fragments of 8-column tiles 2 p and 2 p + 1 at `kk`.
  auto loadB = [&](int64_t p, int64_t kk) {
    Value nn = e.add(bOffset, e.i64(16 * p));
    Value row = bMn ? e.add(bRowLane, e.i64(kk)) : e.add(nn, bRowLane);
    Value col = bMn ? e.add(nn, bColLane) : e.add(bColLane, e.i64(kk));
    return ldmatrix4(e, e.offset(stageB, ringElementOffset(e, rb, row, col)), bMn);
  };
  int64_t blocks = m / 64, perBlock = n / 2;
  Type f32 = rw.getF32Type();
  auto resultTy = LLVM::LLVMStructType::getLiteral(ctx, {f32, f32, f32, f32});
  auto half2 = VectorType::get({2}, rw.getF16Type());
  // bf16 fragments pass as i32 registers; f16 as pairs of f16.
  auto operand = [&](Value word) -> Value {
    return bf16 ? word : LLVM::BitcastOp::create(rw, e.loc, half2, word).getResult();
  };
  NVVM::MMATypes type = bf16 ? NVVM::MMATypes::bf16 : NVVM::MMATypes::f16;
  std::array<NVVM::MMATypes, 2> types = {type, type};
  std::array<NVVM::MMALayout, 2> layouts = {NVVM::MMALayout::row, NVVM::MMALayout::col};

  for (int64_t kk = 0; kk < k; kk += 16) {
    SmallVector<SmallVector<Value>> a;
    for (int64_t blk = 0; blk < blocks; ++blk) {
      SmallVector<Value> frag;
      for (Value w : fragA(blk, kk))
        frag.push_back(operand(w));
      a.push_back(frag);
    }
    for (int64_t p = 0; p < n / 16; ++p) {
      SmallVector<Value> bw = loadB(p, kk);
      for (int64_t half = 0; half < 2; ++half) {
        int64_t tile = 2 * p + half;
        SmallVector<Value> b = {operand(bw[2 * half]), operand(bw[2 * half + 1])};
        for (int64_t blk = 0; blk < blocks; ++blk) {
          size_t at = size_t(blk * perBlock + 4 * tile);
          SmallVector<Value> c(accs.begin() + at, accs.begin() + at + 4);
          Value d =
              NVVM::MmaOp::create(rw, e.loc, resultTy, a[blk], b, c, ArrayRef<int64_t>{16, 8, 16},
                                  std::nullopt, std::nullopt, types, layouts);
          for (int64_t i = 0; i < 4; ++i)
            accs[at + size_t(i)] = LLVM::ExtractValueOp::create(rw, e.loc, d, ArrayRef<int64_t>{i});
        }
      }
    }
  }
}

/// The accumulator's elements: `acc`'s, or zeros with `overwrite` (mma.sync
/// has no scale for its accumulator).
SmallVector<Value> accElements(Emitter &e, Value acc, int64_t count, bool overwrite) {
  Value zero = overwrite ? e.f32(0.0f) : Value();
  SmallVector<Value> accs;
  for (int64_t i = 0; i < count; ++i)
    accs.push_back(zero ? zero : e.extract(acc, i));
  return accs;
}

struct MmaSyncDotOpLowering : ConvertOpToLLVMPattern<DotOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;

  LogicalResult matchAndRewrite(DotOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rw) const override {
    if (op.getAsync())
      return rw.notifyMatchFailure(op, "mma.sync has no asynchronous form");
    Emitter e{rw, op.getLoc()};
    RankedTensorType acc = op.getAcc().getType();
    int64_t m = acc.getDimSize(0), n = acc.getDimSize(1);
    RingType ra = op.getA().getType(), rb = op.getB().getType();
    bool aMn = op.getAMnMajor(), bMn = op.getBMnMajor();
    int64_t k = aMn ? ra.getRows() : ra.getCols();

    Value stageA = ringStage(e, ra, adaptor.getA(), adaptor.getAStage());
    Value stageB = ringStage(e, rb, adaptor.getB(), adaptor.getBStage());
    Value t = e.urem(e.threadId(), 128);
    Value warp = e.udiv(t, 32), lane = e.urem(t, 32);
    Value lane8 = e.urem(lane, 8), matrix = e.udiv(lane, 8);
    // Lane parts of A's row addresses (see the file comment).
    Value aRowLane = aMn ? e.add(e.mul(e.udiv(lane, 16), e.i64(8)), lane8) : e.urem(lane, 16);
    Value aColLane = aMn ? e.mul(e.urem(matrix, 2), e.i64(8)) : e.mul(e.udiv(lane, 16), e.i64(8));
    Value aStrip = e.add(adaptor.getAOffset(), e.mul(warp, e.i64(16)));
    // A's fragment of strip `blk` at `kk`: rows are M (K-major) or K.
    auto loadA = [&](int64_t blk, int64_t kk) {
      Value mm = e.add(aStrip, e.i64(64 * blk));
      Value row = aMn ? e.add(aRowLane, e.i64(kk)) : e.add(mm, aRowLane);
      Value col = aMn ? e.add(mm, aColLane) : e.add(aColLane, e.i64(kk));
      return ldmatrix4(e, e.offset(stageA, ringElementOffset(e, ra, row, col)), aMn);
    };
    SmallVector<Value> accs = accElements(e, adaptor.getAcc(), m / 64 * n / 2, op.getOverwrite());
    mmaSyncProducts(e, m, n, k, ra.getElementType().isBF16(), rb, stageB, adaptor.getBOffset(), bMn,
                    loadA, accs);
    rw.replaceOp(op, e.pack(getTypeConverter()->convertType(acc), accs));
    return success();
  }
};

/// tile.dot_reg on mma.sync: A's fragment for 16 of K is four words of the
/// register tile, as #tile.wgmma holds it: the m16n8 fragments of the 8
/// columns kk and kk + 8 (row g, then g + 8, of each) are, pair by pair,
/// the m16n8k16 A fragment's (rows g and g + 8 at k 2t and 2t + 8) in
/// order.
struct MmaSyncDotRegOpLowering : ConvertOpToLLVMPattern<DotRegOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;

  LogicalResult matchAndRewrite(DotRegOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rw) const override {
    if (op.getAsync())
      return rw.notifyMatchFailure(op, "mma.sync has no asynchronous form");
    Emitter e{rw, op.getLoc()};
    RankedTensorType acc = op.getAcc().getType(), aType = op.getA().getType();
    int64_t m = acc.getDimSize(0), n = acc.getDimSize(1), k = aType.getDimSize(1);
    RingType rb = op.getB().getType();
    Value stageB = ringStage(e, rb, adaptor.getB(), adaptor.getBStage());
    // A's elements per 64-row block: k / 2 (4 for each 8 columns), paired
    // into words.
    int64_t aPerBlock = k / 2;
    auto fragA = [&](int64_t blk, int64_t kk) {
      SmallVector<Value> words;
      int64_t first = blk * aPerBlock + kk / 2;
      for (int64_t w = 0; w < 4; ++w)
        words.push_back(e.word(e.extract(adaptor.getA(), first + 2 * w),
                               e.extract(adaptor.getA(), first + 2 * w + 1)));
      return words;
    };
    SmallVector<Value> accs = accElements(e, adaptor.getAcc(), m / 64 * n / 2, false);
    mmaSyncProducts(e, m, n, k, aType.getElementType().isBF16(), rb, stageB, adaptor.getBOffset(),
                    op.getBMnMajor(), fragA, accs);
    rw.replaceOp(op, e.pack(getTypeConverter()->convertType(acc), accs));
    return success();
  }
};

} // namespace

void populateMmaSyncDotOpToLLVMPatterns(TileTypeConverter &converter, RewritePatternSet &patterns) {
  patterns.add<MmaSyncDotOpLowering, MmaSyncDotRegOpLowering>(converter);
}

} // namespace tilejit
