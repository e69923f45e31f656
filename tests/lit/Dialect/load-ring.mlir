// RUN: tilejit-opt %s | tilejit-opt | FileCheck %s

// Attention's backward pass: the LSE (row 0 of a box of 8) and D (row 0 of
// another) of a step's 64 queries come into shared memory with TMA from a
// rank-3 map of the workspace ([rows, heads, 2]), and each consumer reads
// them as its accumulator's columns; here row 1 of the second ring too, and
// (as each of two consumers that split a step's queries reads its half)
// columns 32 to 63 of it.

#acc = #tile.wgmma
#col = #tile.slice<dim = 0, parent = #acc>
// CHECK-LABEL: tile.kernel @stats
tile.kernel @stats(%ws: !tile.tensormap<rows = 8, cols = 32, f32, rank = 3>, %out: memref<4x64xf32>) attributes {block_threads = 256 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %c32 = arith.constant 32 : index
  %h = arith.constant 5 : index
  %lse = tile.alloc_ring : !tile.ring<stages = 2, rows = 8, cols = 64, f32>
  %d = tile.alloc_ring : !tile.ring<stages = 2, rows = 8, cols = 64, f32>
  %full = tile.alloc_barriers {arrivals = 2} : !tile.barriers<2>
  tile.warp_specialize attributes {consumers = 1, producer_regs = 40, consumer_regs = 232} {
    tile.tma_load %ws[%h, %c0] at [%c0], %lse[%c1], %full[%c1] : !tile.tensormap<rows = 8, cols = 32, f32, rank = 3>, !tile.ring<stages = 2, rows = 8, cols = 64, f32>, !tile.barriers<2>
    tile.tma_load %ws[%h, %c0] at [%c1], %d[%c1], %full[%c1] : !tile.tensormap<rows = 8, cols = 32, f32, rank = 3>, !tile.ring<stages = 2, rows = 8, cols = 64, f32>, !tile.barriers<2>
    tile.yield
  }, {
  ^bb0(%c: index):
    tile.barrier_wait %full[%c1], %c0 : !tile.barriers<2>
    // CHECK: tile.load_ring %{{.*}}[%{{.*}}, %{{.*}}] : <stages = 2, rows = 8, cols = 64, f32> -> tensor<64xf32, #tile.slice<dim = 0, parent = #tile.wgmma>>
    %l = tile.load_ring %lse[%c1, %c0] : !tile.ring<stages = 2, rows = 8, cols = 64, f32> -> tensor<64xf32, #col>
    %v = tile.load_ring %d[%c1, %c0] : !tile.ring<stages = 2, rows = 8, cols = 64, f32> -> tensor<64xf32, #col>
    %w = tile.load_ring %d[%c1, %c1] : !tile.ring<stages = 2, rows = 8, cols = 64, f32> -> tensor<64xf32, #col>
    // CHECK: tile.load_ring %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}] : <stages = 2, rows = 8, cols = 64, f32> -> tensor<32xf32, #tile.slice<dim = 0, parent = #tile.wgmma>>
    %x = tile.load_ring %d[%c1, %c0, %c32] : !tile.ring<stages = 2, rows = 8, cols = 64, f32> -> tensor<32xf32, #col>
    tile.store %l, %out[%c0, %c0] : tensor<64xf32, #col>, memref<4x64xf32>
    tile.store %v, %out[%c1, %c0] : tensor<64xf32, #col>, memref<4x64xf32>
    tile.store %w, %out[%c2, %c0] : tensor<64xf32, #col>, memref<4x64xf32>
    tile.store %x, %out[%c3, %c0] : tensor<32xf32, #col>, memref<4x64xf32>
    tile.yield
  }
  tile.return
}
