// RUN: tilejit-opt %s | tilejit-opt | FileCheck %s

// Split K: a part waits for the flag of its tile, adds the partial sum the
// previous part left, and hands the total on with the next flag value.

#acc = #tile.wgmma
// CHECK-LABEL: tile.kernel @hand_on
tile.kernel @hand_on(%ws: memref<?x64x128xf32>, %flags: memref<?x1xf32>, %t: index, %part: index) attributes {block_threads = 256 : i64, min_blocks = 1 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  tile.warp_specialize attributes {consumers = 1, producer_regs = 40, consumer_regs = 232} {
    tile.yield
  }, {
  ^bb0(%c: index):
    %one = arith.constant 1.0 : f32
    %mine = tile.splat %one : f32 -> tensor<64x128xf32, #acc>
    // CHECK: tile.flag_wait %{{.*}}[%{{.*}}, %{{.*}}], %{{.*}} : memref<?x1xf32>
    tile.flag_wait %flags[%t, %c], %part : memref<?x1xf32>
    %before = tile.load %ws[%t, %c0, %c0] : memref<?x64x128xf32> -> tensor<64x128xf32, #acc>
    %sum = arith.addf %before, %mine : tensor<64x128xf32, #acc>
    tile.store %sum, %ws[%t, %c0, %c0] : tensor<64x128xf32, #acc>, memref<?x64x128xf32>
    %next = arith.addi %part, %c1 : index
    // CHECK: tile.flag_set %{{.*}}[%{{.*}}, %{{.*}}], %{{.*}} : memref<?x1xf32>
    tile.flag_set %flags[%t, %c], %next : memref<?x1xf32>
    tile.yield
  }
  tile.return
}
