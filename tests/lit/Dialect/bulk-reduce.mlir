// RUN: tilejit-opt %s | tilejit-opt | FileCheck %s

// A part of attention's dQ in its registers' order: stored into the
// consumer's stage with `fragments`, added into f32 sums by one bulk copy
// (no tensor map), and read back so by another kernel.

#acc = #tile.wgmma
// CHECK-LABEL: tile.kernel @dq_fragments
tile.kernel @dq_fragments(%sums: memref<?x?x4096xf32>) attributes {block_threads = 256 : i64, min_blocks = 1 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %part = tile.alloc_ring : !tile.ring<stages = 2, rows = 64, cols = 64, f32>
  tile.warp_specialize attributes {consumers = 1, producer_regs = 40, consumer_regs = 232} {
    tile.yield
  }, {
  ^bb0(%c: index):
    %one = arith.constant 1.0 : f32
    %dq = tile.splat %one : f32 -> tensor<64x64xf32, #acc>
    tile.tma_store_wait {pending = 0 : i64, read}
    // CHECK: tile.store_ring %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}] {fragments} : tensor<64x64xf32, #tile.wgmma>, <stages = 2, rows = 64, cols = 64, f32>
    tile.store_ring %dq, %part[%c1, %c0] {fragments} : tensor<64x64xf32, #acc>, !tile.ring<stages = 2, rows = 64, cols = 64, f32>
    // CHECK: tile.bulk_reduce %{{.*}}[%{{.*}}], %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}] : <stages = 2, rows = 64, cols = 64, f32>, memref<?x?x4096xf32>
    tile.bulk_reduce %part[%c1], %sums[%c1, %c64, %c0] : !tile.ring<stages = 2, rows = 64, cols = 64, f32>, memref<?x?x4096xf32>
    tile.tma_store_wait {pending = 0 : i64}
    tile.yield
  }
  tile.return
}

// CHECK-LABEL: tile.kernel @dq_read
tile.kernel @dq_read(%sums: memref<?x?x4096xf32>, %dq: memref<?x?x4096xbf16>) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  // CHECK: load_fragments %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}] : memref<?x?x4096xf32> -> tensor<64x64xf32, #tile.wgmma>
  %t = tile.load_fragments %sums[%c1, %c64, %c0] : memref<?x?x4096xf32> -> tensor<64x64xf32, #acc>
  tile.store %t, %dq[%c1, %c64, %c0] : tensor<64x64xf32, #acc>, memref<?x?x4096xbf16>
  tile.return
}
