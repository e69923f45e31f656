//===- ReduceOpToLLVM.cpp - reductions within a block and across a cluster --===//
//
// tile.reduce on a #tile.blocked<vec, TR, TC> tile (or the rows of a
// #tile.wgmma accumulator: reduceWarpgroupRows), in a fixed order so that
// the same inputs give the same bits in every thread that receives a result:
//  - along a row (dim = 1): the thread's elements in order, then butterfly
//    shuffles within the warp, then (TC > 32) across the row's warps through
//    the shared scratch, each lane reading the warps of its row in order;
//    with `cluster`, then across the blocks of the cluster, in rank order;
//  - along the columns (dim = 0, TR > 1): every row of threads writes its
//    elements to the scratch, then each lane sums its columns over the rows
//    in order.
// The scratch is reused by every reduction of the kernel: each begins with a
// barrier, so no thread writes it while another still reads the last one.
//
// Across a cluster: lane 0 of each row sends its block's row result to every
// block of the cluster (itself included) with st.async, which completes on
// the receiver's transaction barrier; each block waits for the C results and
// combines them in rank order. Two sets of slots and barriers alternate, so
// one reduction's slots are not overwritten while a slower block still reads
// the previous one's.
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

/// A barrier of the whole block, not marked aligned. nvvm.barrier0 is the
/// aligned form (bar.sync), past which ptxas moved the loads of the next rows
/// that the backward loop issues before its reduction (16384 x 4096, in the
/// SASS), so they waited for the slowest warp; it kept them before this one.
/// With this barrier and the loads' path (LoadStoreOpToLLVM.cpp) together
/// the backward pass matched the PTX writer on the H200 (bench/NOTES.md, v9).
void blockBarrier(Emitter &e) {
  LLVM::CallIntrinsicOp::create(e.b, e.loc, e.b.getStringAttr("llvm.nvvm.barrier.cta.sync.all"),
                                ValueRange{e.i32(0)});
}

struct ReduceOpLowering : ConvertOpToLLVMPattern<ReduceOp> {
  ReduceOpLowering(TileTypeConverter &tc, LoweringState &state)
      : ConvertOpToLLVMPattern(tc), state(state) {}

  LogicalResult matchAndRewrite(ReduceOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rw) const override {
    Emitter e{rw, op.getLoc()};
    if (isWarpgroupTile(op.getOperand().getType()))
      return reduceWarpgroupRows(op, adaptor, rw, e);
    auto layout = cast<BlockedLayoutAttr>(op.getOperand().getType().getEncoding());
    int64_t tr = layout.getRowThreads(), tc = layout.getColThreads();
    Value in = adaptor.getOperand();
    int64_t k = cast<VectorType>(in.getType()).getNumElements();
    Type outTy = getTypeConverter()->convertType(op.getType());
    KernelLowering &kernel = state.kernelOf(op);
    auto combine = [&](Value a, Value b) -> Value {
      return combineOf(op.getKind(), rw, e.loc, a, b);
    };
    Value tid = e.threadId();
    Value row = e.udiv(tid, tc), lane = e.urem(tid, tc);
    Type f32 = rw.getF32Type();
    auto scratchAt = [&](Value floatIndex) {
      return e.offset(e.shared(kernel.sharedName), e.mul(floatIndex, e.i64(4)));
    };
    auto load = [&](Value ptr) { return LLVM::LoadOp::create(rw, e.loc, f32, ptr).getResult(); };

    if (op.getDim() == 0) {
      if (tr == 1) {
        rw.replaceOp(op, in);
        return success();
      }
      if (kernel.scratchBytes < tr * tc * k * 4)
        return rw.notifyMatchFailure(op, "the kernel's scratch_bytes is too small");
      // scratch[(row * K + j) * TC + lane] = element j; then each lane sums
      // scratch[(q * K + j) * TC + lane] over the rows q in order.
      blockBarrier(e);
      for (int64_t j = 0; j < k; ++j)
        LLVM::StoreOp::create(
            rw, e.loc, e.extract(in, j),
            scratchAt(e.add(e.mul(e.add(e.mul(row, e.i64(k)), e.i64(j)), e.i64(tc)), lane)));
      blockBarrier(e);
      SmallVector<Value> out;
      for (int64_t j = 0; j < k; ++j) {
        Value acc;
        for (int64_t q = 0; q < tr; ++q) {
          Value v = load(scratchAt(e.add(lane, e.i64((q * k + j) * tc))));
          acc = q ? combine(acc, v) : v;
        }
        out.push_back(acc);
      }
      rw.replaceOp(op, e.pack(outTy, out));
      return success();
    }

    Value acc = e.extract(in, 0);
    for (int64_t i = 1; i < k; ++i)
      acc = combine(acc, e.extract(in, i));
    for (int64_t off = std::min<int64_t>(tc, 32) / 2; off > 0; off /= 2) {
      Value other = NVVM::ShflOp::create(
                        rw, e.loc, f32, e.i32(-1), acc, e.i32(int32_t(off)), e.i32(31),
                        NVVM::ShflKindAttr::get(rw.getContext(), NVVM::ShflKind::bfly), UnitAttr())
                        .getResult();
      acc = combine(acc, other);
    }
    if (tc > 32) {
      int64_t warps = tc / 32;
      if (kernel.scratchBytes < tr * warps * 4)
        return rw.notifyMatchFailure(op, "the kernel's scratch_bytes is too small");
      // Lane 0 of each warp writes the warp's result at tid / 32 (= row *
      // warps + the warp's place in its row); each thread reads its row's.
      blockBarrier(e);
      Value leader = e.isZero(e.urem(tid, 32));
      Value slot = e.addr64(scratchAt(e.udiv(tid, 32)));
      e.asmOp({}, ValueRange{slot, acc, leader}, "@$2 st.shared.f32 [$0], $1;", "l,f,b",
              /*sideEffects=*/true);
      blockBarrier(e);
      Value first = e.mul(row, e.i64(warps));
      for (int64_t w = 0; w < warps; ++w) {
        Value v = load(scratchAt(e.add(first, e.i64(w))));
        acc = w ? combine(acc, v) : v;
      }
    }
    if (op.getCluster()) {
      if (kernel.clusterRows < tr || kernel.clusterBlocks < 2 || !kernel.clusterRound)
        return rw.notifyMatchFailure(op, "cluster reduction without its cluster slots");
      acc = reduceCluster(e, kernel, acc, tr, tid, row, lane, combine, tc);
    }
    rw.replaceOp(op, e.splat(outTy, acc));
    return success();
  }

  /// The rows of a #tile.wgmma tile: a thread holds N / 4 elements of each
  /// of its rows (two per 64-row block); the four lanes of a quad hold the
  /// rest of the row. Each row's elements in order, then butterflies over
  /// the quad (xor 1, xor 2): every lane of the quad computes the same sums
  /// in the same pairing, so all four receive the same bits.
  LogicalResult reduceWarpgroupRows(ReduceOp op, OpAdaptor adaptor, ConversionPatternRewriter &rw,
                                    Emitter &e) const {
    RankedTensorType in = op.getOperand().getType();
    int64_t m = in.getDimSize(0), n = in.getDimSize(1), perBlock = n / 2;
    Value v = adaptor.getOperand();
    Type f32 = rw.getF32Type();
    SmallVector<Value> rows;
    for (int64_t blk = 0; blk < m / 64; ++blk)
      for (int64_t half = 0; half < 2; ++half) {
        Value acc;
        // Element j of the block: 8-column group j / 4, row half (j / 2) % 2.
        for (int64_t j = 0; j < perBlock; ++j) {
          if ((j / 2) % 2 != half)
            continue;
          Value x = e.extract(v, blk * perBlock + j);
          acc = acc ? combineOf(op.getKind(), rw, e.loc, acc, x) : x;
        }
        for (int32_t off : {1, 2}) {
          Value other =
              NVVM::ShflOp::create(rw, e.loc, f32, e.i32(-1), acc, e.i32(off), e.i32(31),
                                   NVVM::ShflKindAttr::get(rw.getContext(), NVVM::ShflKind::bfly),
                                   UnitAttr())
                  .getResult();
          acc = combineOf(op.getKind(), rw, e.loc, acc, other);
        }
        rows.push_back(acc);
      }
    rw.replaceOp(op, e.pack(getTypeConverter()->convertType(op.getType()), rows));
    return success();
  }

  static Value combineOf(ReduceKind kind, OpBuilder &b, Location loc, Value a, Value c) {
    switch (kind) {
    case ReduceKind::sum:
      return LLVM::FAddOp::create(b, loc, a, c);
    case ReduceKind::max:
      return LLVM::MaxNumOp::create(b, loc, a, c);
    case ReduceKind::min:
      return LLVM::MinNumOp::create(b, loc, a, c);
    }
    return a;
  }

  template <typename Combine>
  Value reduceCluster(Emitter &e, KernelLowering &kernel, Value acc, int64_t tr, Value tid,
                      Value row, Value lane, Combine &combine, int64_t tc) const {
    OpBuilder &b = e.b;
    Location loc = e.loc;
    int64_t c = kernel.clusterBlocks, rows = kernel.clusterRows;
    Type i32 = e.i32(), f32 = b.getF32Type();
    // round r uses set r % 2, whose barrier completes its phase (r / 2) % 2.
    Value round = LLVM::LoadOp::create(b, loc, i32, kernel.clusterRound);
    LLVM::StoreOp::create(b, loc, LLVM::AddOp::create(b, loc, round, e.i32(1)),
                          kernel.clusterRound);
    Value set = e.zext64(LLVM::AndOp::create(b, loc, round, e.i32(1)));
    Value parity =
        LLVM::AndOp::create(b, loc, LLVM::LShrOp::create(b, loc, round, e.i32(1)), e.i32(1));
    Value bar = e.offset(e.shared(kernel.sharedName, kernel.barriersOffset), e.mul(set, e.i64(8)));
    if (tc <= 32) // the row's result came without a barrier: none may still read the set
      blockBarrier(e);
    NVVM::MBarrierArriveExpectTxOp::create(b, loc, Type(), bar, e.i32(int32_t(c * tr * 4)),
                                           NVVM::MemScopeKind::CTA, /*relaxed=*/false,
                                           e.isZero(tid));
    // This row's slot in set `set` from this block: slots[set][rank][row].
    Value rank = e.zext64(NVVM::ClusterId::create(b, loc, i32));
    Value slotIndex = e.add(e.mul(e.add(e.mul(set, e.i64(c)), rank), e.i64(rows)), row);
    Value slot =
        e.offset(e.shared(kernel.sharedName, kernel.clusterOffset), e.mul(slotIndex, e.i64(4)));
    Value laneZero = e.isZero(lane);
    auto clusterPtr = LLVM::LLVMPointerType::get(b.getContext(), 7);
    for (int64_t q = 0; q < c; ++q) {
      Value peerSlot = NVVM::MapaOp::create(b, loc, clusterPtr, slot, e.i32(int32_t(q)));
      Value peerBar = NVVM::MapaOp::create(b, loc, clusterPtr, bar, e.i32(int32_t(q)));
      // No NVVM operation for st.async: one instruction.
      e.asmOp({}, ValueRange{e.addr64(peerSlot), acc, e.addr64(peerBar), laneZero},
              "@$3 st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [$0], $1, [$2];",
              "l,f,l,b", /*sideEffects=*/true);
    }
    e.waitParity(bar, parity);
    Value base = e.add(e.mul(set, e.i64(c * rows)), row);
    Value sum;
    for (int64_t q = 0; q < c; ++q) {
      Value ptr = e.offset(e.shared(kernel.sharedName, kernel.clusterOffset),
                           e.mul(e.add(base, e.i64(q * rows)), e.i64(4)));
      Value v = LLVM::LoadOp::create(b, loc, f32, ptr);
      sum = q ? combine(sum, v) : v;
    }
    return sum;
  }

  LoweringState &state;
};

} // namespace

void populateReduceOpToLLVMPatterns(TileTypeConverter &converter, LoweringState &state,
                                    RewritePatternSet &patterns) {
  patterns.add<ReduceOpLowering>(converter, state);
}

} // namespace tilejit
