// RUN: tilejit-opt %s | tilejit-opt | FileCheck %s

// A GEMM epilogue through shared memory: the accumulator rounded to bf16,
// a 64-column panel of it sliced out, written into a buffer of D's ring,
// copied out with a TMA store, and the stores waited for.

#acc = #tile.wgmma
// CHECK-LABEL: tile.kernel @epilogue
tile.kernel @epilogue(%dmap: !tile.tensormap<rows = 64, cols = 64, bf16>) attributes {block_threads = 256 : i64, min_blocks = 1 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %c64 = arith.constant 64 : index
  %rd = tile.alloc_ring : !tile.ring<stages = 2, rows = 64, cols = 64, bf16>
  tile.warp_specialize attributes {consumers = 1, producer_regs = 40, consumer_regs = 232} {
    tile.yield
  }, {
  ^bb0(%c: index):
    %one = arith.constant 1.0 : f32
    %acc = tile.splat %one : f32 -> tensor<64x128xf32, #acc>
    %narrow = arith.truncf %acc : tensor<64x128xf32, #acc> to tensor<64x128xbf16, #acc>
    // CHECK: %[[P:.*]] = tile.slice %{{.*}} [0, 64] : tensor<64x128xbf16, #tile.wgmma> -> tensor<64x64xbf16, #tile.wgmma>
    %panel = tile.slice %narrow [0, 64] : tensor<64x128xbf16, #acc> -> tensor<64x64xbf16, #acc>
    // CHECK: tile.tma_store_wait {pending = 1 : i64, read}
    tile.tma_store_wait {pending = 1 : i64, read}
    tile.store_ring %panel, %rd[%c0, %c0] : tensor<64x64xbf16, #acc>, !tile.ring<stages = 2, rows = 64, cols = 64, bf16>
    // CHECK: tile.tma_store %{{.*}}[%{{.*}}], %{{.*}}[%{{.*}}, %{{.*}}] : {{.*}}<stages = 2, rows = 64, cols = 64, bf16>, {{.*}}<rows = 64, cols = 64, bf16>
    tile.tma_store %rd[%c0], %dmap[%c0, %c64] : !tile.ring<stages = 2, rows = 64, cols = 64, bf16>, !tile.tensormap<rows = 64, cols = 64, bf16>
    // CHECK: tile.tma_store_wait {pending = 0 : i64}
    tile.tma_store_wait {pending = 0 : i64}
    tile.yield
  }
  tile.return
}
