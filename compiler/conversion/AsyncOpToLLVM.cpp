//===- AsyncOpToLLVM.cpp - rings, barriers, TMA and warp specialization ----===//
//
// tile.alloc_ring / alloc_barriers / alloc_words -> addresses in the
// kernel's aligned dynamic shared memory (the barriers initialized by one
// thread, then a block barrier); tile.set_word / get_word -> a volatile store
// of a word there, or loads of words and then one barrier of the warpgroup;
// tile.fetch_add -> a relaxed atomic addition;
// tile.barrier_wait -> a parity wait loop; tile.barrier_arrive ->
// mbarrier.arrive by the first thread of the group; tile.tma_load ->
// mbarrier.arrive.expect_tx and one cp.async.bulk.tensor per 128-byte panel;
// tile.tma_store / tma_store_wait -> the warpgroup leader's bulk copies out
// of a stage, its commit and wait, and a barrier of the warpgroup;
// tile.bulk_reduce -> the leader's one non-tensor bulk addition of a stage
// into global memory, committed as a group; tile.flag_wait / flag_set ->
// the leader's acquiring spin or fenced store of a word in global memory,
// and a barrier of the warpgroup (in a helper region, these five and
// barrier_arrive on the helper's one thread, with no leader to pick and no
// barrier); tile.warp_specialize -> a branch on the
// warpgroup index, setmaxnreg in each branch, the producer's region on one
// thread, the helper's on another, the consumers' with their index.
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

/// The address `offset` bytes into the kernel's aligned dynamic shared memory.
FailureOr<Value> dynamicShared(Emitter &e, LoweringState &state, Operation *op,
                               std::optional<int64_t> offset) {
  KernelLowering &k = state.kernelOf(op);
  if (!offset || !k.dynamicBase)
    return failure();
  return e.offset(k.dynamicBase, e.i64(*offset));
}

/// tile.alloc_ring and tile.alloc_words: the address at their offset.
template <typename AllocOp> struct AllocAtOffsetLowering : ConvertOpToLLVMPattern<AllocOp> {
  AllocAtOffsetLowering(TileTypeConverter &tc, LoweringState &state)
      : ConvertOpToLLVMPattern<AllocOp>(tc), state(state) {}
  LogicalResult matchAndRewrite(AllocOp op, typename AllocOp::Adaptor,
                                ConversionPatternRewriter &rw) const override {
    Emitter e{rw, op.getLoc()};
    auto ptr = dynamicShared(e, state, op, op.getOffset());
    if (failed(ptr))
      return rw.notifyMatchFailure(op, "no offset: run tile-allocate-shared first");
    rw.replaceOp(op, *ptr);
    return success();
  }
  LoweringState &state;
};

struct AllocBarriersOpLowering : ConvertOpToLLVMPattern<AllocBarriersOp> {
  AllocBarriersOpLowering(TileTypeConverter &tc, LoweringState &state)
      : ConvertOpToLLVMPattern(tc), state(state) {}
  LogicalResult matchAndRewrite(AllocBarriersOp op, OpAdaptor,
                                ConversionPatternRewriter &rw) const override {
    Emitter e{rw, op.getLoc()};
    auto ptr = dynamicShared(e, state, op, op.getOffset());
    if (failed(ptr))
      return rw.notifyMatchFailure(op, "no offset: run tile-allocate-shared first");
    Value first = e.isZero(e.threadId());
    for (int64_t i = 0; i < op.getType().getCount(); ++i)
      NVVM::MBarrierInitOp::create(rw, e.loc, e.offset(*ptr, e.i64(8 * i)), e.i32(op.getArrivals()),
                                   first);
    NVVM::FenceMbarrierInitOp::create(rw, e.loc);
    // In a cluster the other blocks' copies and arrivals may reach these
    // barriers: every block's are initialized before any block goes on.
    if (state.kernelOf(op).clusterBlocks > 1) {
      NVVM::ClusterArriveOp::create(rw, e.loc, rw.getUnitAttr());
      NVVM::ClusterWaitOp::create(rw, e.loc, rw.getUnitAttr());
    } else {
      NVVM::Barrier0Op::create(rw, e.loc);
    }
    rw.replaceOp(op, *ptr);
    return success();
  }
  LoweringState &state;
};

Value barrierAt(Emitter &e, Value barriers, Value index) {
  return e.offset(barriers, e.mul(index, e.i64(8)));
}

struct BarrierWaitOpLowering : ConvertOpToLLVMPattern<BarrierWaitOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;
  LogicalResult matchAndRewrite(BarrierWaitOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rw) const override {
    Emitter e{rw, op.getLoc()};
    Value parity = LLVM::TruncOp::create(
        rw, e.loc, e.i32(), LLVM::AndOp::create(rw, e.loc, adaptor.getParity(), e.i64(1)));
    e.waitParity(barrierAt(e, adaptor.getBarriers(), adaptor.getIndex()), parity);
    rw.eraseOp(op);
    return success();
  }
};

/// One arrival per group: the producer's region runs on one thread, the
/// first of its warpgroup, and a consumer's on a whole warpgroup, so the
/// first thread of each warpgroup arrives; the helper's one thread arrives
/// for itself.
struct BarrierArriveOpLowering : ConvertOpToLLVMPattern<BarrierArriveOp> {
  BarrierArriveOpLowering(TileTypeConverter &tc, LoweringState &state)
      : ConvertOpToLLVMPattern(tc), state(state) {}
  LogicalResult matchAndRewrite(BarrierArriveOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rw) const override {
    Emitter e{rw, op.getLoc()};
    Value bar = barrierAt(e, adaptor.getBarriers(), adaptor.getIndex());
    Value leader = state.helperOps.contains(op)
                       ? LLVM::ConstantOp::create(rw, e.loc, rw.getI1Type(),
                                                  rw.getIntegerAttr(rw.getI1Type(), 1))
                             .getResult()
                       : e.isZero(e.urem(e.threadId(), 128));
    if (!op.getCluster()) {
      e.asmOp({}, ValueRange{e.addr64(bar), leader},
              "{\n\t.reg .b64 state;\n\t@$1 mbarrier.arrive.shared::cta.b64 state, [$0];\n\t}",
              "l,b", /*sideEffects=*/true);
      rw.eraseOp(op);
      return success();
    }
    // The same barrier in each block of the cluster (mapa), arrived on with
    // mbarrier.arrive's default semantics (release at CTA scope), as
    // CUTLASS's cluster pipelines release a stage: what the arrival orders
    // is the tensor cores' reads of the stage, complete once the product was
    // waited for. `.release.cluster` made ptxas put MEMBAR.ALL.GPU before
    // each arrival, twice a step: the GEMM with clusters of two ran at 0.59
    // of the plain one (ncu: tensor pipe active 47 % against 94 %).
    Value bar32 = LLVM::PtrToIntOp::create(rw, e.loc, e.i32(), bar);
    std::string text = "{\n\t.reg .b32 remote;\n";
    for (int64_t r = 0; r < state.kernelOf(op).clusterBlocks; ++r)
      text += "\t@$1 mapa.shared::cluster.u32 remote, $0, " + std::to_string(r) +
              ";\n\t@$1 mbarrier.arrive.shared::cluster.b64 _, [remote];\n";
    text += "\t}";
    e.asmOp({}, ValueRange{bar32, leader}, text, "r,b", /*sideEffects=*/true);
    rw.eraseOp(op);
    return success();
  }
  LoweringState &state;
};

/// `fn(address, column)` for each 128-byte panel of the stage at `slot`: the
/// panel's shared-memory address and its first column (i32) from `col`.
template <typename Fn> void forEachPanel(Emitter &e, RingType ring, Value slot, Value col, Fn fn) {
  for (int64_t p = 0; p < ring.getCols() / ring.getPanelCols(); ++p)
    fn(e.offset(slot, e.i64(p * ring.getPanelBytes())),
       p ? LLVM::AddOp::create(e.b, e.loc, col, e.i32(int32_t(p * ring.getPanelCols()))).getResult()
         : col);
}

/// A TMA copy's coordinates, innermost first: the column, the row, then the
/// outer dimensions' (i32).
SmallVector<Value> tmaCoords(Emitter &e, Value col, Value row, ValueRange outer) {
  SmallVector<Value> coords = {col, row};
  for (Value o : outer)
    coords.push_back(LLVM::TruncOp::create(e.b, e.loc, e.i32(), o));
  return coords;
}

struct TmaLoadOpLowering : ConvertOpToLLVMPattern<TmaLoadOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;
  LogicalResult matchAndRewrite(TmaLoadOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rw) const override {
    Emitter e{rw, op.getLoc()};
    RingType ring = op.getRing().getType();
    Value bar = barrierAt(e, adaptor.getBarriers(), adaptor.getBarrier());
    Value slot = ringStage(e, ring, adaptor.getRing(), adaptor.getStage());
    NVVM::MBarrierArriveExpectTxOp::create(rw, e.loc, Type(), bar,
                                           e.i32(int32_t(ring.getStageBytes())), {}, {}, Value());
    Value row = LLVM::TruncOp::create(rw, e.loc, e.i32(), adaptor.getRow());
    Value col = LLVM::TruncOp::create(rw, e.loc, e.i32(), adaptor.getCol());
    if (!op.getMulticast()) {
      forEachPanel(e, ring, slot, col, [&](Value dst, Value c) {
        NVVM::CpAsyncBulkTensorGlobalToSharedClusterOp::create(
            rw, e.loc, dst, adaptor.getMap(), tmaCoords(e, c, row, adaptor.getOuter()), bar,
            ValueRange{},
            /*multicastMask=*/Value(), /*l2CacheHint=*/Value(), NVVM::TMALoadModeAttr(),
            rw.getBoolAttr(true), NVVM::CTAGroupKindAttr(), Value());
      });
      rw.eraseOp(op);
      return success();
    }
    // Multicast: this block's part of the stage's boxes (row blocks of the
    // map's rows, outer; panels inner) into the same place of every block.
    int64_t n = *op.getMulticast(), boxRows = op.getMap().getType().getRows();
    int64_t panels = ring.getCols() / ring.getPanelCols();
    int64_t boxes = ring.getRows() / boxRows * panels, perBlock = boxes / n;
    Value rank = NVVM::ClusterId::create(rw, e.loc, e.i32());
    Value mask = LLVM::ConstantOp::create(rw, e.loc, rw.getI16Type(), int64_t((1 << n) - 1));
    Value first = LLVM::MulOp::create(rw, e.loc, rank, e.i32(int32_t(perBlock)));
    for (int64_t i = 0; i < perBlock; ++i) {
      // Box `first + i`: row block (first + i) / panels, panel (first + i) % panels.
      Value box = LLVM::AddOp::create(rw, e.loc, first, e.i32(int32_t(i)));
      Value rowBlock = LLVM::UDivOp::create(rw, e.loc, box, e.i32(int32_t(panels)));
      Value panel = LLVM::URemOp::create(rw, e.loc, box, e.i32(int32_t(panels)));
      Value rowOff = LLVM::MulOp::create(rw, e.loc, rowBlock, e.i32(int32_t(boxRows)));
      Value colOff = LLVM::MulOp::create(rw, e.loc, panel, e.i32(int32_t(ring.getPanelCols())));
      Value bytes = LLVM::AddOp::create(
          rw, e.loc, LLVM::MulOp::create(rw, e.loc, panel, e.i32(int32_t(ring.getPanelBytes()))),
          LLVM::MulOp::create(rw, e.loc, rowOff,
                              e.i32(int32_t(ring.getPanelCols() * ring.getElementBytes()))));
      // The destination in the shared::cluster window (this block's own
      // address there; the mask names the blocks).
      Value dst =
          LLVM::AddrSpaceCastOp::create(rw, e.loc, LLVM::LLVMPointerType::get(rw.getContext(), 7),
                                        e.offset(slot, e.zext64(bytes)));
      NVVM::CpAsyncBulkTensorGlobalToSharedClusterOp::create(
          rw, e.loc, dst, adaptor.getMap(),
          tmaCoords(e, LLVM::AddOp::create(rw, e.loc, col, colOff),
                    LLVM::AddOp::create(rw, e.loc, row, rowOff), adaptor.getOuter()),
          bar, ValueRange{}, mask, /*l2CacheHint=*/Value(), NVVM::TMALoadModeAttr(),
          /*isCTAOnly=*/rw.getBoolAttr(false), NVVM::CTAGroupKindAttr(), Value());
    }
    rw.eraseOp(op);
    return success();
  }
};

/// A lowering that reads the pass's LoweringState.
template <typename Op> struct StatefulLowering : ConvertOpToLLVMPattern<Op> {
  StatefulLowering(TileTypeConverter &tc, LoweringState &state)
      : ConvertOpToLLVMPattern<Op>(tc), state(state) {}
  /// Whether `op` runs on tile.warp_specialize's helper thread alone: no
  /// warpgroup leader to pick, no warpgroup to meet.
  bool runsAlone(Operation *op) const { return state.helperOps.contains(op); }
  LoweringState &state;
};

/// The warpgroup's barrier, but for an op that runs alone.
void warpgroupBarrierOf(bool alone, Emitter &e) {
  if (!alone)
    e.warpgroupBarrier();
}

/// Runs `body` on the first thread of the calling warpgroup only (a branch
/// around it for the others); for an op that runs `alone`, on its thread.
template <typename Fn>
void onWarpgroupLeader(bool alone, ConversionPatternRewriter &rw, Emitter &e, Fn body) {
  if (alone) {
    body();
    return;
  }
  Block *before = rw.getInsertionBlock();
  Block *after = rw.splitBlock(before, rw.getInsertionPoint());
  Block *leader = rw.createBlock(after);
  rw.setInsertionPointToEnd(before);
  LLVM::CondBrOp::create(rw, e.loc, e.isZero(e.urem(e.threadId(), 128)), leader, ValueRange{},
                         after, ValueRange{});
  rw.setInsertionPointToStart(leader);
  body();
  LLVM::BrOp::create(rw, e.loc, ValueRange{}, after);
  rw.setInsertionPointToStart(after);
}

/// tile.tma_store: the warpgroup's first thread starts one
/// cp.async.bulk.tensor (shared::cta -> global), or with `reduce`
/// cp.reduce.async.bulk.tensor .add, per panel of the stage and commits them
/// as one bulk group.
struct TmaStoreOpLowering : StatefulLowering<TmaStoreOp> {
  using StatefulLowering::StatefulLowering;
  LogicalResult matchAndRewrite(TmaStoreOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rw) const override {
    Emitter e{rw, op.getLoc()};
    RingType ring = op.getRing().getType();
    Value slot = ringStage(e, ring, adaptor.getRing(), adaptor.getStage());
    Value row = LLVM::TruncOp::create(rw, e.loc, e.i32(), adaptor.getRow());
    Value col = LLVM::TruncOp::create(rw, e.loc, e.i32(), adaptor.getCol());
    onWarpgroupLeader(runsAlone(op), rw, e, [&] {
      forEachPanel(e, ring, slot, col, [&](Value src, Value c) {
        SmallVector<Value> coords = tmaCoords(e, c, row, adaptor.getOuter());
        if (op.getReduce())
          NVVM::CpAsyncBulkTensorReduceOp::create(rw, e.loc, adaptor.getMap(), src,
                                                  NVVM::TMAReduxKind::ADD, NVVM::TMAStoreMode::TILE,
                                                  coords,
                                                  /*l2CacheHint=*/Value());
        else
          NVVM::CpAsyncBulkTensorSharedCTAToGlobalOp::create(
              rw, e.loc, adaptor.getMap(), src, coords, /*l2CacheHint=*/Value(),
              NVVM::TMAStoreMode::TILE, /*predicate=*/Value());
      });
      NVVM::CpAsyncBulkCommitGroupOp::create(rw, e.loc);
    });
    rw.eraseOp(op);
    return success();
  }
};

/// tile.tma_store_wait: the first thread waits for its bulk groups
/// (cp.async.bulk.wait_group[.read]), then the warpgroup meets (a helper's
/// thread waits alone).
struct TmaStoreWaitOpLowering : StatefulLowering<TmaStoreWaitOp> {
  using StatefulLowering::StatefulLowering;
  LogicalResult matchAndRewrite(TmaStoreWaitOp op, OpAdaptor,
                                ConversionPatternRewriter &rw) const override {
    Emitter e{rw, op.getLoc()};
    onWarpgroupLeader(runsAlone(op), rw, e, [&] {
      NVVM::CpAsyncBulkWaitGroupOp::create(rw, e.loc, int32_t(op.getPending()),
                                           op.getRead() ? rw.getUnitAttr() : UnitAttr());
    });
    warpgroupBarrierOf(runsAlone(op), e);
    rw.eraseOp(op);
    return success();
  }
};

/// tile.bulk_reduce: the warpgroup's first thread (a helper's thread alone)
/// adds the stage's bytes into global memory with one
/// cp.reduce.async.bulk (non-tensor) and commits it as a bulk group.
struct BulkReduceOpLowering : StatefulLowering<BulkReduceOp> {
  using StatefulLowering::StatefulLowering;
  LogicalResult matchAndRewrite(BulkReduceOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rw) const override {
    Emitter e{rw, op.getLoc()};
    RingType ring = op.getRing().getType();
    Value src = e.addr64(ringStage(e, ring, adaptor.getRing(), adaptor.getStage()));
    Value dst = e.addr64(
        llvmx::wordAddress(e, adaptor.getDest(), op.getDest().getType(), adaptor.getIndices()));
    int64_t bytes = ring.getRows() * ring.getCols() * 4;
    onWarpgroupLeader(runsAlone(op), rw, e, [&] {
      e.asmOp({}, ValueRange{dst, src},
              "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [$0], [$1], " +
                  std::to_string(bytes) + ";",
              "l,l", /*sideEffects=*/true);
      NVVM::CpAsyncBulkCommitGroupOp::create(rw, e.loc);
    });
    rw.eraseOp(op);
    return success();
  }
};

/// tile.flag_wait: the warpgroup's first thread spins on an acquiring load
/// (with async_proxy, then fences the async proxy), then the warpgroup meets
/// (a helper's thread spins alone).
struct FlagWaitOpLowering : StatefulLowering<FlagWaitOp> {
  using StatefulLowering::StatefulLowering;
  LogicalResult matchAndRewrite(FlagWaitOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rw) const override {
    Emitter e{rw, op.getLoc()};
    Value addr =
        llvmx::wordAddress(e, adaptor.getFlags(), op.getFlags().getType(), adaptor.getIndices());
    Value want = LLVM::TruncOp::create(rw, e.loc, e.i32(), adaptor.getValue());
    onWarpgroupLeader(runsAlone(op), rw, e, [&] {
      e.asmOp({}, ValueRange{e.addr64(addr), want},
              "{\n\t.reg .b32 seen;\n\t.reg .pred done;\n\twait:\n\t"
              "ld.acquire.gpu.global.b32 seen, [$0];\n\tsetp.eq.b32 done, seen, $1;\n\t"
              "@!done bra wait;\n\t}",
              "l,r", /*sideEffects=*/true);
      if (op.getAsyncProxy())
        e.asmOp({}, ValueRange{}, "fence.proxy.async.global;", "", /*sideEffects=*/true);
    });
    warpgroupBarrierOf(runsAlone(op), e);
    rw.eraseOp(op);
    return success();
  }
};

/// tile.flag_set: the warpgroup meets, then its first thread fences (with
/// async_proxy the async proxy first) at GPU scope and stores the word (a
/// helper's thread alone).
struct FlagSetOpLowering : StatefulLowering<FlagSetOp> {
  using StatefulLowering::StatefulLowering;
  LogicalResult matchAndRewrite(FlagSetOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rw) const override {
    Emitter e{rw, op.getLoc()};
    Value addr =
        llvmx::wordAddress(e, adaptor.getFlags(), op.getFlags().getType(), adaptor.getIndices());
    Value value = LLVM::TruncOp::create(rw, e.loc, e.i32(), adaptor.getValue());
    warpgroupBarrierOf(runsAlone(op), e);
    onWarpgroupLeader(runsAlone(op), rw, e, [&] {
      if (op.getAsyncProxy())
        e.asmOp({}, ValueRange{}, "fence.proxy.async.global;", "", /*sideEffects=*/true);
      e.asmOp({}, ValueRange{e.addr64(addr), value},
              "fence.acq_rel.gpu;\n\tst.relaxed.gpu.global.b32 [$0], $1;", "l,r",
              /*sideEffects=*/true);
    });
    rw.eraseOp(op);
    return success();
  }
};

/// tile.set_word / get_word: volatile 32-bit stores or loads of words (kept
/// where they are between the barrier's arrival and wait, which are inline
/// assembly with side effects); the loads widened, unsigned.
Value wordAt(Emitter &e, Value words, Value index) {
  return e.offset(words, e.mul(index, e.i64(4)));
}

struct SetWordOpLowering : ConvertOpToLLVMPattern<SetWordOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;
  LogicalResult matchAndRewrite(SetWordOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rw) const override {
    Emitter e{rw, op.getLoc()};
    Value value = LLVM::TruncOp::create(rw, e.loc, e.i32(), adaptor.getValue());
    LLVM::StoreOp::create(rw, e.loc, value, wordAt(e, adaptor.getWords(), adaptor.getIndex()),
                          /*alignment=*/4, /*isVolatile=*/true);
    rw.eraseOp(op);
    return success();
  }
};

/// (get_word: its words read, then the warpgroup meets once, but on the
/// helper's thread.)
struct GetWordOpLowering : StatefulLowering<GetWordOp> {
  using StatefulLowering::StatefulLowering;
  LogicalResult matchAndRewrite(GetWordOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rw) const override {
    Emitter e{rw, op.getLoc()};
    SmallVector<Value> wide;
    for (Value index : adaptor.getIndices()) {
      Value word = LLVM::LoadOp::create(rw, e.loc, e.i32(), wordAt(e, adaptor.getWords(), index),
                                        /*alignment=*/4, /*isVolatile=*/true);
      wide.push_back(LLVM::ZExtOp::create(rw, e.loc, rw.getI64Type(), word));
    }
    warpgroupBarrierOf(runsAlone(op), e);
    rw.replaceOp(op, wide);
    return success();
  }
};

/// tile.fetch_add: the thread's relaxed atomic addition at GPU scope
/// (atom.global.add.u32), its old value widened, unsigned.
struct FetchAddOpLowering : ConvertOpToLLVMPattern<FetchAddOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;
  LogicalResult matchAndRewrite(FetchAddOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rw) const override {
    Emitter e{rw, op.getLoc()};
    Value addr = llvmx::wordAddress(e, adaptor.getCounter(), op.getCounter().getType(),
                                    adaptor.getIndices());
    Value value = LLVM::TruncOp::create(rw, e.loc, e.i32(), adaptor.getValue());
    Value old = LLVM::AtomicRMWOp::create(rw, e.loc, LLVM::AtomicBinOp::add, addr, value,
                                          LLVM::AtomicOrdering::monotonic);
    rw.replaceOpWithNewOp<LLVM::ZExtOp>(op, rw.getI64Type(), old);
    return success();
  }
};

/// Splits the block at the op: the warpgroup index picks the producer's
/// branch (warpgroup 0, its first thread, or with a helper region its
/// thread 32 the helper's) or a consumer's (index - 1); every region ends
/// by branching past the op.
struct WarpSpecializeOpLowering : StatefulLowering<WarpSpecializeOp> {
  using StatefulLowering::StatefulLowering;
  LogicalResult matchAndRewrite(WarpSpecializeOp op, OpAdaptor,
                                ConversionPatternRewriter &rw) const override {
    Location loc = op.getLoc();
    Emitter e{rw, loc};
    Block *before = rw.getInsertionBlock();
    Block *after = rw.splitBlock(before, std::next(Block::iterator(op)));
    Region &parent = *before->getParent();
    bool helper = !op.getHelper().empty();
    SmallVector<Region *, 3> regions = {&op.getProducer(), &op.getConsumer()};
    if (helper) {
      regions.push_back(&op.getHelper());
      // Its ops lower for one thread (runsAlone), once moved out of it too:
      // the conversion reaches them after this op (pre-order), as the same
      // ops (moved, not rebuilt; none freed before it ends), and no pattern
      // makes tile ops, so the set names every op to lower alone.
      op.getHelper().walk([&](Operation *inner) { state.helperOps.insert(inner); });
    }

    for (Region *r : regions) {
      SmallVector<YieldOp> yields(r->getOps<YieldOp>());
      r->walk([&](YieldOp y) {
        if (!llvm::is_contained(yields, y))
          yields.push_back(y);
      });
      for (YieldOp y : yields) {
        rw.setInsertionPoint(y);
        LLVM::BrOp::create(rw, y.getLoc(), ValueRange{}, after);
        rw.eraseOp(y);
      }
    }
    // Every block's arguments (loops lowered to blocks carry tiles and
    // indices) in LLVM types, as the kernel's own body has them.
    for (Region *r : regions)
      if (failed(rw.convertRegionTypes(r, *getTypeConverter())))
        return failure();
    Block *producerEntry = &op.getProducer().front();
    Block *consumerEntry = &op.getConsumer().front();
    Block *helperEntry = helper ? &op.getHelper().front() : nullptr;
    rw.inlineRegionBefore(op.getProducer(), parent, after->getIterator());
    rw.inlineRegionBefore(op.getConsumer(), parent, after->getIterator());
    if (helper)
      rw.inlineRegionBefore(op.getHelper(), parent, after->getIterator());

    Block *producerPre = rw.createBlock(producerEntry);
    Block *consumerPre = rw.createBlock(consumerEntry);
    // The helper: thread 32 (its warp's first), past the producer's.
    Block *helperPre = helper ? rw.createBlock(helperEntry) : nullptr;

    rw.setInsertionPointToEnd(before);
    Value tid = e.threadId();
    Value group = e.udiv(tid, 128);
    LLVM::CondBrOp::create(rw, loc, e.isZero(group), producerPre, ValueRange{}, consumerPre,
                           ValueRange{});

    rw.setInsertionPointToEnd(producerPre);
    NVVM::SetMaxRegisterOp::create(
        rw, loc, rw.getI32IntegerAttr(int32_t(op.getProducerRegs())),
        NVVM::SetMaxRegisterActionAttr::get(rw.getContext(), NVVM::SetMaxRegisterAction::decrease));
    LLVM::CondBrOp::create(rw, loc, e.isZero(e.threadId()), producerEntry, ValueRange{},
                           helper ? helperPre : after, ValueRange{});
    if (helper) {
      rw.setInsertionPointToEnd(helperPre);
      Value thread = e.threadId(), c32 = e.i64(32);
      Value first = LLVM::ICmpOp::create(rw, loc, LLVM::ICmpPredicate::eq, thread, c32);
      LLVM::CondBrOp::create(rw, loc, first, helperEntry, ValueRange{}, after, ValueRange{});
    }

    rw.setInsertionPointToEnd(consumerPre);
    NVVM::SetMaxRegisterOp::create(
        rw, loc, rw.getI32IntegerAttr(int32_t(op.getConsumerRegs())),
        NVVM::SetMaxRegisterActionAttr::get(rw.getContext(), NVVM::SetMaxRegisterAction::increase));
    Value index = LLVM::SubOp::create(rw, loc, e.udiv(e.threadId(), 128), e.i64(1));
    LLVM::BrOp::create(rw, loc, ValueRange{index}, consumerEntry);
    rw.eraseOp(op);
    return success();
  }
};

} // namespace

void populateAsyncOpToLLVMPatterns(TileTypeConverter &converter, LoweringState &state,
                                   RewritePatternSet &patterns) {
  patterns.add<SetWordOpLowering, FetchAddOpLowering>(converter);
  patterns.add<AllocAtOffsetLowering<AllocRingOp>, AllocAtOffsetLowering<AllocWordsOp>,
               AllocBarriersOpLowering, BarrierArriveOpLowering, TmaStoreOpLowering,
               BulkReduceOpLowering, TmaStoreWaitOpLowering, FlagWaitOpLowering, FlagSetOpLowering,
               GetWordOpLowering, WarpSpecializeOpLowering>(converter, state);
  patterns.add<BarrierWaitOpLowering, TmaLoadOpLowering>(converter);
}

} // namespace tilejit
