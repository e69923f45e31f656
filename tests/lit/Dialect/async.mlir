// RUN: tilejit-opt %s | tilejit-opt | FileCheck %s

// The ops of a warp-specialized matmul parse, verify and print back.

#acc = #tile.wgmma
// CHECK-LABEL: tile.kernel @mm
tile.kernel @mm(%a: !tile.tensormap<rows = 128, cols = 64, bf16>, %b: !tile.tensormap<rows = 128, cols = 64, bf16>, %d: memref<?x128xf32>) attributes {block_threads = 384 : i64, min_blocks = 1 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  // CHECK: alloc_ring : {{.*}}<stages = 2, rows = 128, cols = 64, bf16>
  %ra = tile.alloc_ring : !tile.ring<stages = 2, rows = 128, cols = 64, bf16>
  %rb = tile.alloc_ring : !tile.ring<stages = 2, rows = 128, cols = 64, bf16>
  // CHECK: alloc_barriers {arrivals = 2 : i64} : {{.*}}<2>
  %full = tile.alloc_barriers {arrivals = 2} : !tile.barriers<2>
  %empty = tile.alloc_barriers {arrivals = 2} : !tile.barriers<2>
  // CHECK: warp_specialize attributes {consumer_regs = 232 : i64, consumers = 2 : i64, producer_regs = 40 : i64}
  tile.warp_specialize attributes {consumers = 2, producer_regs = 40, consumer_regs = 232} {
    tile.barrier_wait %empty[%c0], %c1 : !tile.barriers<2>
    // CHECK: tma_load %{{.*}}[%{{.*}}, %{{.*}}], %{{.*}}[%{{.*}}], %{{.*}}[%{{.*}}] : {{.*}}<rows = 128, cols = 64, bf16>, {{.*}}<stages = 2, rows = 128, cols = 64, bf16>, {{.*}}<2>
    tile.tma_load %a[%c0, %c0], %ra[%c0], %full[%c0] : !tile.tensormap<rows = 128, cols = 64, bf16>, !tile.ring<stages = 2, rows = 128, cols = 64, bf16>, !tile.barriers<2>
    tile.tma_load %b[%c0, %c0], %rb[%c0], %full[%c0] : !tile.tensormap<rows = 128, cols = 64, bf16>, !tile.ring<stages = 2, rows = 128, cols = 64, bf16>, !tile.barriers<2>
    tile.yield
  }, {
  ^bb0(%c: index):
    %zero = arith.constant 0.0 : f32
    %acc = tile.splat %zero : f32 -> tensor<64x128xf32, #acc>
    tile.barrier_wait %full[%c0], %c0 : !tile.barriers<2>
    // CHECK: dot %{{.*}}[%{{.*}}, %{{.*}}], %{{.*}}[%{{.*}}, %{{.*}}], %{{.*}} :
    %r = tile.dot %ra[%c0, %c0], %rb[%c0, %c0], %acc : !tile.ring<stages = 2, rows = 128, cols = 64, bf16>, !tile.ring<stages = 2, rows = 128, cols = 64, bf16>, tensor<64x128xf32, #tile.wgmma> -> tensor<64x128xf32, #tile.wgmma>
    tile.barrier_arrive %empty[%c0] : !tile.barriers<2>
    tile.store %r, %d[%c0, %c0] : tensor<64x128xf32, #acc>, memref<?x128xf32>
    tile.yield
  }
  tile.return
}

// The sm_80 pipeline's ops: copies into a ring by every thread, their
// groups, the block barrier, the warpgroup index.
// CHECK-LABEL: tile.kernel @cp_async_ring
// CHECK: %[[G:.*]] = warpgroup_id
// CHECK: async_copy %{{.*}}[%[[G]], %{{.*}}], %{{.*}}[%{{.*}}] {vec = 8 : i64} : memref<?x64xbf16>, <stages = 3, rows = 128, cols = 64, bf16>
// CHECK: async_commit
// CHECK: async_wait {pending = 1 : i64}
// CHECK: block_barrier
tile.kernel @cp_async_ring(%a: memref<?x64xbf16>) attributes {block_threads = 256 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %g = tile.warpgroup_id
  %r = tile.alloc_ring : !tile.ring<stages = 3, rows = 128, cols = 64, bf16>
  tile.async_copy %a[%g, %c0], %r[%c0] {vec = 8 : i64} : memref<?x64xbf16>, !tile.ring<stages = 3, rows = 128, cols = 64, bf16>
  tile.async_commit
  tile.async_wait {pending = 1 : i64}
  tile.block_barrier
  tile.return
}
