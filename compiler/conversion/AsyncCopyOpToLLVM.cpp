//===- AsyncCopyOpToLLVM.cpp - cp.async into rings, groups, block barrier --===//
//
// tile.async_copy -> per thread, its share of the tile's copies (copy q of
// the tile goes to thread q % threads), each one nvvm.cp.async.shared.global
// of `vec` elements into the swizzled place of the ring stage, its source
// size cut to the elements inside the memref (zero past an edge; the source
// address then falls back to the memref's first element, which every
// non-empty memref has). Where the memref's start, its rows or the first
// column are not aligned to a copy (checked at run time, uniformly), or vec
// is 1, a loop of 16-bit loads and stores instead. tile.async_commit /
// async_wait -> cp.async.commit_group / wait_group; tile.block_barrier ->
// bar.sync 0; tile.warpgroup_id -> tid.x / 128; tile.store_ring ->
// stmatrix (16-bit) or 8-byte stores (f32) at the swizzled places, a proxy
// fence, the warpgroup's barrier; tile.load_ring -> each thread's runs of
// a stage row's columns as vector loads from the swizzled places. Both
// from a column offset where one is given.
//
//===----------------------------------------------------------------------===//
#include "compiler/conversion/TileToLLVM.h"
#include "compiler/conversion/Utility.h"

#include <cassert>
#include <map>

#include "mlir/Conversion/LLVMCommon/Pattern.h"
#include "mlir/Transforms/DialectConversion.h"

using namespace mlir;
using namespace tilejit::tile;
using tilejit::llvmx::Emitter;

namespace tilejit {

Value ringStage(Emitter &e, RingType ring, Value base, Value stage) {
  return e.offset(base, e.mul(stage, e.i64(ring.getStageBytes())));
}

std::map<std::pair<int64_t, int64_t>, int64_t> elementsByOffset(RankedTensorType tile) {
  auto layout = cast<LayoutAttrInterface>(tile.getEncoding());
  std::map<std::pair<int64_t, int64_t>, int64_t> index;
  for (int64_t i = 0, n = getElemsPerThread(tile); i < n; ++i) {
    SmallVector<int64_t> at = layout.getElemOffset(tile.getShape(), i);
    index[{at[0], at[1]}] = i;
  }
  return index;
}

Value ringElementOffset(Emitter &e, RingType ring, Value row, Value col) {
  int64_t panelCols = ring.getPanelCols(), elemBytes = ring.getElementBytes();
  int64_t chunkElems = 16 / elemBytes;
  Value panel = e.mul(e.udiv(col, panelCols), e.i64(ring.getPanelBytes()));
  Value within = e.urem(col, panelCols);
  Value chunk = e.udiv(within, chunkElems);
  Value swizzled = LLVM::XOrOp::create(e.b, e.loc, chunk, e.urem(row, 8));
  Value inChunk = e.mul(e.urem(within, chunkElems), e.i64(elemBytes));
  return e.add(e.add(panel, e.mul(row, e.i64(128))), e.add(e.mul(swizzled, e.i64(16)), inChunk));
}

namespace {

struct AsyncCopyOpLowering : ConvertOpToLLVMPattern<AsyncCopyOp> {
  AsyncCopyOpLowering(TileTypeConverter &tc, LoweringState &state)
      : ConvertOpToLLVMPattern(tc), state(state) {}

  /// Where the copies go and come from.
  struct Copy {
    RingType ring;
    Value base, rows, cols, pitch, row, col, stage; // pitch: elements from row to row
  };

  /// Copy `q` of the tile in copies of `vec` elements (q < the copies of
  /// the tile).
  static void copyOne(ConversionPatternRewriter &rw, Emitter &e, const Copy &x, Value q,
                      int64_t vec) {
    int64_t elemBytes = x.ring.getElementBytes(), perRow = x.ring.getCols() / vec;
    Value r = e.udiv(q, perRow), c = e.mul(e.urem(q, perRow), e.i64(vec));
    Value gr = e.add(x.row, r), gc = e.add(x.col, c);
    // Elements of this copy inside the memref: min(cols - gc, vec) when the
    // row is inside, else none; never negative.
    Value left = LLVM::SubOp::create(rw, e.loc, x.cols, gc);
    left = LLVM::SMinOp::create(rw, e.loc, left, e.i64(vec));
    left = LLVM::SMaxOp::create(rw, e.loc, left, e.i64(0));
    Value elems = LLVM::SelectOp::create(rw, e.loc, e.lessThan(gr, x.rows), left, e.i64(0));
    Value any = LLVM::ICmpOp::create(rw, e.loc, LLVM::ICmpPredicate::sgt, elems, e.i64(0));
    Value at = e.mul(e.add(e.mul(gr, x.pitch), gc), e.i64(elemBytes));
    at = LLVM::SelectOp::create(rw, e.loc, any, at, e.i64(0));
    Value from = e.offset(x.base, at);
    Value to = e.offset(x.stage, ringElementOffset(e, x.ring, r, c));
    if (vec == 1) {
      Type i16 = rw.getI16Type();
      Value v = LLVM::LoadOp::create(rw, e.loc, i16, from);
      v = LLVM::SelectOp::create(rw, e.loc, any, v,
                                 LLVM::ConstantOp::create(rw, e.loc, i16, int64_t(0)));
      LLVM::StoreOp::create(rw, e.loc, v, to);
      return;
    }
    Value bytes = LLVM::TruncOp::create(rw, e.loc, e.i32(), e.mul(elems, e.i64(elemBytes)));
    int64_t size = vec * elemBytes;
    // 16-byte copies bypass L1 (.cg); narrower ones may only go through it.
    auto cache = size == 16 ? NVVM::LoadCacheModifierKind::CG : NVVM::LoadCacheModifierKind::CA;
    NVVM::CpAsyncOp::create(rw, e.loc, to, from, rw.getI32IntegerAttr(int32_t(size)),
                            NVVM::LoadCacheModifierKindAttr::get(rw.getContext(), cache), bytes);
  }

  /// Ends the current block with a branch on `cond` to a new block (left
  /// as the insertion point) or to `otherwise`.
  static void branchInto(ConversionPatternRewriter &rw, Emitter &e, Value cond, Block *otherwise) {
    Block *here = rw.getInsertionBlock();
    Block *body = rw.createBlock(otherwise);
    rw.setInsertionPointToEnd(here);
    LLVM::CondBrOp::create(rw, e.loc, cond, body, ValueRange{}, otherwise, ValueRange{});
    rw.setInsertionPointToStart(body);
  }

  LogicalResult matchAndRewrite(AsyncCopyOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rw) const override {
    Emitter e{rw, op.getLoc()};
    int64_t threads = state.kernelOf(op).blockThreads;
    if (threads <= 0)
      return rw.notifyMatchFailure(op, "not in a converted kernel");
    RingType ring = op.getRing().getType();
    int64_t vec = op.getVec(), elemBytes = ring.getElementBytes();
    int64_t elements = ring.getRows() * ring.getCols();
    llvmx::GlobalView src = llvmx::unpackGlobal(e, adaptor.getSource(), op.getSource().getType());
    Copy x{ring,
           src.ptr(e),
           src.sizes[0],
           src.sizes[1],
           src.strided() ? src.strides[0] : src.sizes[1],
           adaptor.getRow(),
           adaptor.getCol(),
           ringStage(e, ring, adaptor.getRing(), adaptor.getStage())};
    Value tid = e.threadId();
    Block *before = rw.getInsertionBlock();
    Block *done = rw.splitBlock(before, rw.getInsertionPoint());
    Block *elementwise = rw.createBlock(done);
    rw.setInsertionPointToEnd(before);

    if (vec > 1) {
      // Whole copies need the memref's first element, its rows and the
      // first column aligned to a copy: checked here, the same for every
      // thread; else the element copies below. Each thread's share of the
      // whole copies is unrolled, the last round of a tile that is not
      // whole rounds guarded.
      int64_t mask = vec * elemBytes - 1;
      Value bits =
          LLVM::OrOp::create(rw, e.loc, e.addr64(x.base),
                             LLVM::OrOp::create(rw, e.loc, e.mul(x.pitch, e.i64(elemBytes)),
                                                e.mul(x.col, e.i64(elemBytes))));
      Value aligned = e.isZero(LLVM::AndOp::create(rw, e.loc, bits, e.i64(mask)));
      branchInto(rw, e, aligned, elementwise);
      int64_t copies = elements / vec;
      for (int64_t first = 0; first < copies; first += threads) {
        Value q = e.add(tid, e.i64(first));
        if (first + threads > copies) {
          Block *rest = rw.splitBlock(rw.getInsertionBlock(), rw.getInsertionPoint());
          branchInto(rw, e, e.lessThan(q, e.i64(copies)), rest);
          copyOne(rw, e, x, q, vec);
          LLVM::BrOp::create(rw, e.loc, ValueRange{}, rest);
          rw.setInsertionPointToStart(rest);
        } else {
          copyOne(rw, e, x, q, vec);
        }
      }
      LLVM::BrOp::create(rw, e.loc, ValueRange{}, done);
    } else {
      LLVM::BrOp::create(rw, e.loc, ValueRange{}, elementwise);
    }

    // Element by element (rows of odd length, or a misaligned memref): a
    // loop over the rounds, each thread one element a round.
    Block *header = rw.createBlock(done, {e.i64()}, {e.loc});
    Block *body = rw.createBlock(done);
    Block *exit = rw.createBlock(done);
    rw.setInsertionPointToEnd(elementwise);
    LLVM::BrOp::create(rw, e.loc, ValueRange{e.i64(0)}, header);
    rw.setInsertionPointToStart(header);
    Value q = e.add(tid, e.mul(header->getArgument(0), e.i64(threads)));
    Value more = LLVM::ICmpOp::create(rw, e.loc, LLVM::ICmpPredicate::ult, q, e.i64(elements));
    LLVM::CondBrOp::create(rw, e.loc, more, body, ValueRange{}, exit, ValueRange{});
    rw.setInsertionPointToStart(body);
    copyOne(rw, e, x, q, 1);
    LLVM::BrOp::create(rw, e.loc, ValueRange{e.add(header->getArgument(0), e.i64(1))}, header);
    rw.setInsertionPointToStart(exit);
    LLVM::BrOp::create(rw, e.loc, ValueRange{}, done);
    rw.setInsertionPointToStart(done);
    rw.eraseOp(op);
    return success();
  }
  LoweringState &state;
};

/// tile.store_ring: a 16-bit tile with stmatrix.x4 (sm_90) per 16 x 16
/// block of a warp's rows: matrices (rows 0-7, columns 0-7), (8-15, 0-7),
/// (0-7, 8-15), (8-15, 8-15) of the block, whose fragments are the
/// #tile.wgmma elements at those offsets; lanes 8 m to 8 m + 7 give the
/// swizzled addresses of matrix m's rows. An f32 tile with 8-byte stores;
/// with `fragments`, in its registers' order with 16-byte stores.
/// Then fence.proxy.async.shared::cta (generic-proxy writes a wgmma or a TMA
/// copy may read) and a barrier of the warpgroup.
struct StoreRingOpLowering : ConvertOpToLLVMPattern<StoreRingOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;

  LogicalResult matchAndRewrite(StoreRingOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rw) const override {
    Emitter e{rw, op.getLoc()};
    if (op.getFragments()) {
      storeFragments(rw, e, op, adaptor);
    } else if (op.getValue().getType().getElementType().isF32()) {
      storeWords(rw, e, op, adaptor);
    } else if (failed(storeMatrices(rw, e, op, adaptor))) {
      return failure();
    }
    e.asmOp({}, {}, "fence.proxy.async.shared::cta;", "", /*sideEffects=*/true);
    // Every warp of the warpgroup has written (and fenced) before any goes
    // on (to arrive on a barrier, or copy the stage out, one thread's work).
    e.warpgroupBarrier();
    rw.eraseOp(op);
    return success();
  }

  /// fragments: the thread's elements in register order, chunk j of four at
  /// 16 * (128 j + t) bytes from the row's start (t: the thread's place in
  /// its warpgroup): one 16-byte store a chunk, a warp's 32 side by side.
  static void storeFragments(ConversionPatternRewriter &rw, Emitter &e, StoreRingOp op,
                             OpAdaptor adaptor) {
    RankedTensorType tile = op.getValue().getType();
    RingType ring = op.getRing().getType();
    Value stage = ringStage(e, ring, adaptor.getRing(), adaptor.getStage());
    Value start = e.offset(stage, e.mul(adaptor.getRow(), e.i64(ring.getCols() * 4)));
    Value base = e.offset(start, e.mul(e.urem(e.threadId(), 128), e.i64(16)));
    auto quad = VectorType::get({4}, rw.getF32Type());
    Value frag = adaptor.getValue();
    for (int64_t j = 0, n = getElemsPerThread(tile); 4 * j < n; ++j) {
      SmallVector<Value> four;
      for (int64_t k = 0; k < 4; ++k)
        four.push_back(e.extract(frag, 4 * j + k));
      LLVM::StoreOp::create(rw, e.loc, e.pack(quad, four), e.offset(base, e.i64(j * 128 * 16)),
                            /*alignment=*/16);
    }
  }

  /// f32: each pair of a row's elements (2 c, 2 c + 1) as one 8-byte store
  /// (a 16-byte chunk holds 4 elements, so a pair never straddles two).
  static void storeWords(ConversionPatternRewriter &rw, Emitter &e, StoreRingOp op,
                         OpAdaptor adaptor) {
    RankedTensorType tile = op.getValue().getType();
    RingType ring = op.getRing().getType();
    Value stage = ringStage(e, ring, adaptor.getRing(), adaptor.getStage());
    Value frag = adaptor.getValue();
    auto pair = VectorType::get({2}, rw.getF32Type());
    auto layout = cast<LayoutAttrInterface>(tile.getEncoding());
    SmallVector<Value> base = e.apply(layout.getThreadBase(), e.threadId());
    Value row0 = e.add(adaptor.getRow(), base[0]);
    Value col0 = adaptor.getCol() ? e.add(adaptor.getCol(), base[1]) : base[1];
    auto index = elementsByOffset(tile);
    for (auto [at, i] : index) {
      if (at.second % 2 != 0)
        continue;
      assert(index.count({at.first, at.second + 1}) &&
             index.at({at.first, at.second + 1}) == i + 1 &&
             "a #tile.wgmma thread holds a row's elements in pairs");
      Value off =
          ringElementOffset(e, ring, e.add(row0, e.i64(at.first)), e.add(col0, e.i64(at.second)));
      Value word = LLVM::PoisonOp::create(rw, e.loc, pair);
      word = LLVM::InsertElementOp::create(rw, e.loc, word, e.extract(frag, i), e.i32(0));
      word = LLVM::InsertElementOp::create(rw, e.loc, word, e.extract(frag, i + 1), e.i32(1));
      LLVM::StoreOp::create(rw, e.loc, word, e.offset(stage, off), /*alignment=*/8);
    }
  }

  /// 16-bit: stmatrix.x4 per 16 x 16 block.
  static LogicalResult storeMatrices(ConversionPatternRewriter &rw, Emitter &e, StoreRingOp op,
                                     OpAdaptor adaptor) {
    RankedTensorType tile = op.getValue().getType();
    RingType ring = op.getRing().getType();
    int64_t rows = tile.getDimSize(0), cols = tile.getDimSize(1);
    if (cols % 16 != 0)
      return rw.notifyMatchFailure(op, "columns not a multiple of 16");
    auto index = elementsByOffset(tile);
    Value t = e.urem(e.threadId(), 128), lane = e.urem(t, 32);
    // This lane's row of its matrix: the warp's 16 rows, the matrix's half.
    Value rowInBlock = e.add(e.mul(e.udiv(t, 32), e.i64(16)),
                             e.add(e.mul(e.urem(e.udiv(lane, 8), 2), e.i64(8)), e.urem(lane, 8)));
    Value colInBlock = e.mul(e.udiv(lane, 16), e.i64(8));
    if (adaptor.getCol())
      colInBlock = e.add(adaptor.getCol(), colInBlock);
    Value row0 = e.add(adaptor.getRow(), rowInBlock);
    Value stage = ringStage(e, ring, adaptor.getRing(), adaptor.getStage());
    Value frag = adaptor.getValue();
    for (int64_t b = 0; b < rows; b += 64)
      for (int64_t c = 0; c < cols; c += 16) {
        SmallVector<Value> words;
        for (auto [dr, dc] : {std::pair{0, 0}, {8, 0}, {0, 8}, {8, 8}}) {
          auto it = index.find({b + dr, c + dc});
          if (it == index.end())
            return rw.notifyMatchFailure(op, "not the #tile.wgmma fragment");
          words.push_back(e.word(e.extract(frag, it->second), e.extract(frag, it->second + 1)));
        }
        Value at = ringElementOffset(e, ring, e.add(row0, e.i64(b)), e.add(colInBlock, e.i64(c)));
        NVVM::StMatrixOp::create(rw, e.loc, e.offset(stage, at), words, NVVM::MMALayout::row,
                                 NVVM::LdStMatrixShapeAttr::get(rw.getContext(), 8, 8),
                                 NVVM::LdStMatrixEltType::B16);
      }
    return success();
  }
};

/// tile.load_ring: each thread reads the elements it holds of one row of a
/// stage, each run of consecutive columns (the layout's contiguity, aligned
/// to its size, so never across a 16-byte chunk of the swizzle) as one
/// vector load from shared memory.
struct LoadRingOpLowering : ConvertOpToLLVMPattern<LoadRingOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;

  LogicalResult matchAndRewrite(LoadRingOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rw) const override {
    Emitter e{rw, op.getLoc()};
    RankedTensorType tile = op.getResult().getType();
    RingType ring = op.getRing().getType();
    auto layout = cast<LayoutAttrInterface>(tile.getEncoding());
    Type elem = getTypeConverter()->convertType(ring.getElementType());
    int64_t n = getElemsPerThread(tile), bytes = ring.getElementBytes();
    int64_t run = std::max<int64_t>(1, std::min<int64_t>(layout.getContiguity(), 16 / bytes));
    Value col0 = e.apply(layout.getThreadBase(), e.threadId())[0];
    if (adaptor.getCol())
      col0 = e.add(adaptor.getCol(), col0);
    Value stage = ringStage(e, ring, adaptor.getRing(), adaptor.getStage());
    SmallVector<Value> elems;
    for (int64_t i = 0; i < n;) {
      int64_t at = layout.getElemOffset(tile.getShape(), i)[0];
      // The run: elements i, i + 1, ... at consecutive columns.
      int64_t len = 1;
      while (len < run && i + len < n && at % run == 0 &&
             layout.getElemOffset(tile.getShape(), i + len)[0] == at + len)
        ++len;
      if (len != run)
        len = 1;
      Value where =
          e.offset(stage, ringElementOffset(e, ring, adaptor.getRow(), e.add(col0, e.i64(at))));
      if (len == 1) {
        elems.push_back(LLVM::LoadOp::create(rw, e.loc, elem, where, /*alignment=*/bytes));
      } else {
        auto vec = VectorType::get({len}, elem);
        Value v = LLVM::LoadOp::create(rw, e.loc, vec, where, /*alignment=*/len * bytes);
        for (int64_t j = 0; j < len; ++j)
          elems.push_back(e.extract(v, j));
      }
      i += len;
    }
    rw.replaceOp(op, e.pack(getTypeConverter()->convertType(tile), elems));
    return success();
  }
};

struct AsyncCommitOpLowering : ConvertOpToLLVMPattern<AsyncCommitOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;
  LogicalResult matchAndRewrite(AsyncCommitOp op, OpAdaptor,
                                ConversionPatternRewriter &rw) const override {
    rw.replaceOpWithNewOp<NVVM::CpAsyncCommitGroupOp>(op);
    return success();
  }
};

struct AsyncWaitOpLowering : ConvertOpToLLVMPattern<AsyncWaitOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;
  LogicalResult matchAndRewrite(AsyncWaitOp op, OpAdaptor,
                                ConversionPatternRewriter &rw) const override {
    rw.replaceOpWithNewOp<NVVM::CpAsyncWaitGroupOp>(op,
                                                    rw.getI32IntegerAttr(int32_t(op.getPending())));
    return success();
  }
};

struct BlockBarrierOpLowering : ConvertOpToLLVMPattern<BlockBarrierOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;
  LogicalResult matchAndRewrite(BlockBarrierOp op, OpAdaptor,
                                ConversionPatternRewriter &rw) const override {
    rw.replaceOpWithNewOp<NVVM::Barrier0Op>(op);
    return success();
  }
};

struct WarpgroupIdOpLowering : ConvertOpToLLVMPattern<WarpgroupIdOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;
  LogicalResult matchAndRewrite(WarpgroupIdOp op, OpAdaptor,
                                ConversionPatternRewriter &rw) const override {
    Emitter e{rw, op.getLoc()};
    rw.replaceOp(op, e.udiv(e.threadId(), 128));
    return success();
  }
};

} // namespace

void populateAsyncCopyOpToLLVMPatterns(TileTypeConverter &converter, LoweringState &state,
                                       RewritePatternSet &patterns) {
  patterns.add<AsyncCopyOpLowering>(converter, state);
  patterns.add<AsyncCommitOpLowering, AsyncWaitOpLowering, BlockBarrierOpLowering,
               WarpgroupIdOpLowering, StoreRingOpLowering, LoadRingOpLowering>(converter);
}

} // namespace tilejit
