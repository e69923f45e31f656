//===- DotOpToLLVM.cpp - tile.dot on Hopper's warpgroup tensor cores -------===//
//
// tile.dot -> wgmma.fence, one nvvm.wgmma.mma_async (m64nNk16) per 64-row
// block of the accumulator and 16 columns of K (the first with the scale of
// D at 0 for `overwrite`), commit, wait (the
// accumulators pinned before the fence and tied through the wait: fence,
// waitFor). A and B are
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

#include <cassert>

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

  /// Byte address of the block at `mn` elements past `offset` and K = 0,
  /// in 32 bits: a shared-window address fits them, and the descriptors
  /// built from it in 64 bits held twice the registers through a kernel's
  /// loops (the fused attention backward spilled 8-104 bytes of them).
  Value address(Emitter &e, int64_t mn) const {
    int64_t panelCols = ring.getPanelCols();
    Value off = LLVM::TruncOp::create(e.b, e.loc, e.i32(), offset);
    if (mn)
      off = e.add(off, e.i32(mn));
    Value byOffset;
    if (mnMajor) {
      Value panel = panelCols == 1
                        ? off
                        : LLVM::UDivOp::create(e.b, e.loc, off, e.i32(panelCols)).getResult();
      byOffset = e.mul(panel, e.i32(ring.getPanelBytes()));
    } else {
      byOffset = e.mul(off, e.i32(128));
    }
    Value base = LLVM::TruncOp::create(e.b, e.loc, e.i32(), stage);
    return e.add(base, byOffset);
  }

  /// Bytes from the block at K = 0 to the one at `k` (a multiple of 16).
  int64_t kBytes(int64_t k) const {
    if (mnMajor)
      return k * 128;
    int64_t panelCols = ring.getPanelCols();
    return (k / panelCols) * ring.getPanelBytes() + (k % panelCols) * ring.getElementBytes();
  }

  /// The descriptor's start field is the address / 16 in 14 bits. A
  /// block's own shared-window offsets are below 256 KB (sm_90 gives a
  /// block at most 227 KB) and fit them, but the address itself can carry
  /// bits above (in a cluster launch it does), and unmasked they reach the
  /// leading-byte-offset field, which MN-major operands read (wrong
  /// products on the GPU at cluster=2 for the nn and tn layouts). So the
  /// block at K = 0's address is masked once and each step of K adds
  /// kBytes / 16 (a multiple of 16) to it: the offset plus it stays below
  /// 256 KB, so the sum never carries out of the field. One addition per
  /// step on a start shared by the steps (computed per step, with the mask,
  /// it took four dependent instructions before every wgmma).
  Value descriptor(Emitter &e, int64_t mn, int64_t k) const {
    int64_t leading = mnMajor ? ring.getPanelBytes() : 16;
    assert(kBytes(k) % 16 == 0 && "a step of K moves by whole 16-byte units");
    // (One op at a time: the order of the IR does not hang on the order in
    // which a compiler evaluates arguments.)
    Value four = e.i32(4), mask = e.i32(0x3FFF);
    Value shifted = LLVM::LShrOp::create(e.b, e.loc, address(e, mn), four);
    Value start = LLVM::AndOp::create(e.b, e.loc, shifted, mask);
    if (int64_t step = kBytes(k) >> 4)
      start = e.add(start, e.i32(step));
    return LLVM::OrOp::create(e.b, e.loc, e.zext64(start),
                              e.i64(int64_t(descriptorHigh(leading, 1024))));
  }
};

/// `text` as inline assembly (with side effects) through which `vals` (f32
/// accumulators, i32 words of 16-bit A fragments) pass as operands tied to
/// its results: every definition of them comes before it, every use after.
SmallVector<Value> tied(Emitter &e, ArrayRef<Value> vals, const std::string &text) {
  std::string constraints;
  SmallVector<Type> types;
  for (Value v : vals) {
    types.push_back(v.getType());
    constraints += std::string(types.size() > 1 ? "," : "") + (v.getType().isF32() ? "=f" : "=r");
  }
  for (size_t i = 0; i < vals.size(); ++i)
    constraints += "," + std::to_string(i);
  Operation *wait = e.asmOp(types, vals, text, constraints, /*sideEffects=*/true);
  if (vals.size() == 1)
    return {wait->getResult(0)};
  SmallVector<Value> out;
  for (size_t i = 0; i < vals.size(); ++i)
    out.push_back(LLVM::ExtractValueOp::create(e.b, e.loc, wait->getResult(0),
                                               ArrayRef<int64_t>{int64_t(i)}));
  return out;
}

/// Waits until at most `pending` of the warpgroup's product groups run, and
/// returns `vals` as the wait leaves them: no use of them can be scheduled
/// before it (as an intrinsic with side effects alone would allow) and no
/// register of them reused while a product still reads it.
SmallVector<Value> waitFor(Emitter &e, ArrayRef<Value> vals, int64_t pending = 0) {
  return tied(e, vals, "wgmma.wait_group.sync.aligned " + std::to_string(pending) + ";");
}

/// The wgmma fence, after which the operands in registers (`vals`) must not
/// be written until the products complete: they are pinned before it (an
/// empty assembly statement they pass through), so that no definition of
/// them is scheduled among the products, where ptxas would serialize them
/// (C7513).
SmallVector<Value> fence(Emitter &e, ArrayRef<Value> vals) {
  SmallVector<Value> pinned = tied(e, vals, "");
  NVVM::WgmmaFenceAlignedOp::create(e.b, e.loc);
  return pinned;
}

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
    // With `overwrite` the first step of K ignores the accumulator (D = A B)
    // and the accumulator's registers start undefined: nothing is written
    // to them before the products.
    auto scaleFirst =
        op.getOverwrite() ? NVVM::WGMMAScaleOutAttr::get(ctx, NVVM::WGMMAScaleOut::zero) : scaleOut;
    auto scaleIn = NVVM::WGMMAScaleInAttr::get(ctx, NVVM::WGMMAScaleIn::one);
    // Row-major A and column-major B are K-major.
    auto layoutA =
        NVVM::MMALayoutAttr::get(ctx, a.mnMajor ? NVVM::MMALayout::col : NVVM::MMALayout::row);
    auto layoutB =
        NVVM::MMALayoutAttr::get(ctx, b.mnMajor ? NVVM::MMALayout::row : NVVM::MMALayout::col);

    int64_t perBlock = n / 2, blocks = m / 64;
    Type f32 = rw.getF32Type();
    auto structTy = LLVM::LLVMStructType::getLiteral(ctx, SmallVector<Type>(perBlock, f32));
    SmallVector<Value> accIn;
    for (int64_t i = 0; i < blocks * perBlock; ++i)
      accIn.push_back(op.getOverwrite() ? Value(LLVM::UndefOp::create(rw, e.loc, rw.getF32Type()))
                                        : e.extract(adaptor.getAcc(), i));
    accIn = fence(e, accIn);
    SmallVector<Value> fragments;
    for (int64_t blk = 0; blk < blocks; ++blk) {
      Value s = LLVM::UndefOp::create(rw, e.loc, structTy);
      for (int64_t i = 0; i < perBlock; ++i)
        s = LLVM::InsertValueOp::create(rw, e.loc, s, accIn[size_t(blk * perBlock + i)],
                                        ArrayRef<int64_t>{i});
      fragments.push_back(s);
    }

    for (int64_t kk = 0; kk < k; kk += 16) {
      Value descB = b.descriptor(e, 0, kk);
      for (int64_t blk = 0; blk < blocks; ++blk)
        fragments[blk] = NVVM::WgmmaMmaAsyncOp::create(
            rw, e.loc, structTy, fragments[blk], a.descriptor(e, 64 * blk, kk), descB, shape,
            typeAB, typeAB, typeD, kk == 0 ? scaleFirst : scaleOut, scaleIn, scaleIn, layoutA,
            layoutB, NVVM::MMAIntOverflowAttr());
    }
    SmallVector<Value> elems;
    for (int64_t blk = 0; blk < blocks; ++blk)
      for (int64_t i = 0; i < perBlock; ++i)
        elems.push_back(
            LLVM::ExtractValueOp::create(rw, e.loc, fragments[blk], ArrayRef<int64_t>{i}));
    NVVM::WgmmaGroupSyncAlignedOp::create(rw, e.loc);
    rw.replaceOp(op, e.pack(VectorType::get({blocks * perBlock}, f32),
                            op.getAsync() ? SmallVector<Value>(elems) : waitFor(e, elems)));
    return success();
  }
};

/// tile.dot_reg: wgmma with A from registers, which MLIR's NVVM dialect does
/// not offer (nvvm.wgmma.mma_async reads A from shared memory only), as
/// inline assembly whose accumulator operands are tied to its results.
///
/// A's fragment for 16 of K is four 32-bit registers of two 16-bit elements:
/// (row r, k 2c, 2c+1), (r + 8, same), (r, k + 8), (r + 8, k + 8) for thread
/// row r and quad lane c, which is exactly what the thread holds of columns
/// [16 t, 16 t + 16) of a #tile.wgmma tile: its elements 8 t to 8 t + 7 of the
/// 64-row block, in order.
struct DotRegOpLowering : ConvertOpToLLVMPattern<DotRegOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;

  LogicalResult matchAndRewrite(DotRegOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rw) const override {
    Emitter e{rw, op.getLoc()};
    RankedTensorType acc = op.getAcc().getType(), aType = op.getA().getType();
    int64_t m = acc.getDimSize(0), n = acc.getDimSize(1), k = aType.getDimSize(1);
    RingType rb = op.getB().getType();
    Value base = LLVM::PtrToIntOp::create(rw, e.loc, e.i64(), adaptor.getB());
    Operand b{e.add(base, e.mul(adaptor.getBStage(), e.i64(rb.getStageBytes()))),
              adaptor.getBOffset(), rb, op.getBMnMajor()};
    StringRef ty = aType.getElementType().isBF16() ? "bf16" : "f16";
    int64_t perBlock = n / 2, aPerBlock = k / 2;

    // "{ .reg .pred p; setp.ne.b32 p, 1, 0; wgmma... {$0..}, {a}, desc, p,
    //   1, 1, transB; }": outputs $0.. $(perBlock - 1), then A's four words,
    // the descriptor, and the accumulator tied to the outputs.
    std::string text = "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\nwgmma.mma_async.sync.aligned.m64n" +
                       std::to_string(n) + "k16.f32." + ty.str() + "." + ty.str() + " {";
    std::string constraints;
    for (int64_t i = 0; i < perBlock; ++i) {
      text += (i ? ", $" : "$") + std::to_string(i);
      constraints += (i ? ",=f" : "=f");
    }
    text += "}, {$" + std::to_string(perBlock) + ", $" + std::to_string(perBlock + 1) + ", $" +
            std::to_string(perBlock + 2) + ", $" + std::to_string(perBlock + 3) + "}, $" +
            std::to_string(perBlock + 4) + ", p, 1, 1, " + (b.mnMajor ? "1" : "0") + ";\n}";
    constraints += ",r,r,r,r,l";
    for (int64_t i = 0; i < perBlock; ++i)
      constraints += "," + std::to_string(i);
    SmallVector<Type> results(perBlock, rw.getF32Type());

    // The accumulator is pinned before the fence. A's words are not: a
    // tile.dot_wait that keeps them alive ties the same words (as its own
    // lowering makes them), which a pinned copy would not be.
    int64_t blocks = m / 64, aWords = blocks * aPerBlock / 2;
    SmallVector<Value> words, accIn;
    for (int64_t w = 0; w < aWords; ++w)
      words.push_back(
          e.word(e.extract(adaptor.getA(), 2 * w), e.extract(adaptor.getA(), 2 * w + 1)));
    for (int64_t i = 0; i < blocks * perBlock; ++i)
      accIn.push_back(e.extract(adaptor.getAcc(), i));
    accIn = fence(e, accIn);
    SmallVector<Value> out;
    for (int64_t blk = 0; blk < blocks; ++blk) {
      SmallVector<Value> d(accIn.begin() + blk * perBlock, accIn.begin() + (blk + 1) * perBlock);
      for (int64_t kk = 0; kk < k; kk += 16) {
        SmallVector<Value> operands;
        int64_t first = (blk * aPerBlock + kk / 2) / 2;
        for (int64_t w = 0; w < 4; ++w)
          operands.push_back(words[size_t(first + w)]);
        operands.push_back(b.descriptor(e, 0, kk));
        operands.append(d.begin(), d.end());
        Operation *mma = e.asmOp(results, operands, text, constraints, /*sideEffects=*/true);
        for (int64_t i = 0; i < perBlock; ++i)
          d[i] = LLVM::ExtractValueOp::create(rw, e.loc, mma->getResult(0), ArrayRef<int64_t>{i});
      }
      out.append(d.begin(), d.end());
    }
    NVVM::WgmmaGroupSyncAlignedOp::create(rw, e.loc);
    rw.replaceOp(op, e.pack(getTypeConverter()->convertType(acc),
                            op.getAsync() ? SmallVector<Value>(out) : waitFor(e, out)));
    return success();
  }
};

/// tile.dot_wait: one wait whose tied operands are every element of every
/// f32 value and every pair of elements (as one 32-bit word, as tile.dot_reg
/// reads them) of every 16-bit value.
struct DotWaitOpLowering : ConvertOpToLLVMPattern<DotWaitOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;

  LogicalResult matchAndRewrite(DotWaitOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rw) const override {
    Emitter e{rw, op.getLoc()};
    SmallVector<Value> all;
    for (Value v : adaptor.getValues()) {
      auto vec = cast<VectorType>(v.getType());
      bool wide = vec.getElementType().isF32();
      for (int64_t i = 0; i < vec.getNumElements(); i += wide ? 1 : 2)
        all.push_back(wide ? e.extract(v, i) : e.word(e.extract(v, i), e.extract(v, i + 1)));
    }
    SmallVector<Value> done = waitFor(e, all, op.getPending()), results;
    size_t at = 0;
    for (Value v : adaptor.getValues()) {
      auto vec = cast<VectorType>(v.getType());
      SmallVector<Value> elems;
      if (vec.getElementType().isF32()) {
        elems.append(done.begin() + at, done.begin() + at + size_t(vec.getNumElements()));
        at += size_t(vec.getNumElements());
      } else {
        auto pair = VectorType::get({2}, vec.getElementType());
        for (int64_t i = 0; i < vec.getNumElements(); i += 2) {
          Value two = LLVM::BitcastOp::create(rw, e.loc, pair, done[at++]);
          elems.push_back(e.extract(two, 0));
          elems.push_back(e.extract(two, 1));
        }
      }
      results.push_back(e.pack(v.getType(), elems));
    }
    rw.replaceOp(op, results);
    return success();
  }
};

} // namespace

void populateDotOpToLLVMPatterns(TileTypeConverter &converter, RewritePatternSet &patterns) {
  patterns.add<DotOpLowering, DotRegOpLowering, DotWaitOpLowering>(converter);
}

} // namespace tilejit
