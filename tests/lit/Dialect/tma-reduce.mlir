// RUN: tilejit-opt %s | tilejit-opt | FileCheck %s

// A part of attention's dQ added into f32 sums: a product that overwrites
// its accumulator (no zeros first), the f32 part written into the
// consumer's stage of a ring, added into a rank-4 tensor at (row, column)
// of head %h of sequence %b by TMA reductions, and the additions waited for.

#acc = #tile.wgmma
// CHECK-LABEL: tile.kernel @dq_part
tile.kernel @dq_part(%sums: !tile.tensormap<rows = 64, cols = 32, f32, rank = 4>) attributes {block_threads = 256 : i64, min_blocks = 1 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %c64 = arith.constant 64 : index
  %h = arith.constant 3 : index
  %b = arith.constant 1 : index
  %ds = tile.alloc_ring : !tile.ring<stages = 2, rows = 128, cols = 64, bf16>
  %k = tile.alloc_ring : !tile.ring<stages = 1, rows = 128, cols = 128, bf16>
  %part = tile.alloc_ring : !tile.ring<stages = 2, rows = 64, cols = 64, f32>
  tile.warp_specialize attributes {consumers = 1, producer_regs = 40, consumer_regs = 232} {
    tile.yield
  }, {
  ^bb0(%c: index):
    %zero = arith.constant 0.0 : f32
    %init = tile.splat %zero : f32 -> tensor<64x64xf32, #acc>
    // CHECK: tile.dot {{.*}} {a_mn_major = true, b_mn_major = true, overwrite}
    %dq = tile.dot %ds[%c0, %c0], %k[%c0, %c64], %init {a_mn_major = true, b_mn_major = true, overwrite} : !tile.ring<stages = 2, rows = 128, cols = 64, bf16>, !tile.ring<stages = 1, rows = 128, cols = 128, bf16>, tensor<64x64xf32, #acc> -> tensor<64x64xf32, #acc>
    tile.tma_store_wait {pending = 0 : i64, read}
    // CHECK: tile.store_ring %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}] : tensor<64x64xf32, #tile.wgmma>, <stages = 2, rows = 64, cols = 64, f32>
    tile.store_ring %dq, %part[%c0, %c0] : tensor<64x64xf32, #acc>, !tile.ring<stages = 2, rows = 64, cols = 64, f32>
    // CHECK: tile.tma_store %{{.*}}[%{{.*}}], %{{.*}}[%{{.*}}, %{{.*}}] at [%{{.*}}, %{{.*}}] {reduce} : {{.*}}<stages = 2, rows = 64, cols = 64, f32>, {{.*}}<rows = 64, cols = 32, f32, rank = 4>
    tile.tma_store %part[%c0], %sums[%c64, %c64] at [%h, %b] {reduce} : !tile.ring<stages = 2, rows = 64, cols = 64, f32>, !tile.tensormap<rows = 64, cols = 32, f32, rank = 4>
    tile.tma_store_wait {pending = 0 : i64}
    tile.yield
  }
  tile.return
}
