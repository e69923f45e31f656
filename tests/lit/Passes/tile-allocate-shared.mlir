// RUN: tilejit-opt %s --split-input-file --tile-allocate-shared | FileCheck %s

// Each kernel gets its reductions' scratch (the largest of them, reused) and,
// where it reduces across its cluster, the rows of threads exchanged.

// CHECK-LABEL: tile.kernel @two_reductions
// CHECK-SAME: scratch_bytes = 1024 : i64
// CHECK-NOT: cluster_rows
#L = #tile.blocked<vec = 1, rowThreads = 4, colThreads = 64>
#S0 = #tile.slice<dim = 0, parent = #L>
#S1 = #tile.slice<dim = 1, parent = #L>
tile.kernel @two_reductions(%x: memref<?x64xf32>, %c: memref<64xf32>, %r: memref<?xf32>) attributes {block_threads = 256 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %t = tile.load %x[%c0, %c0] : memref<?x64xf32> -> tensor<4x64xf32, #L>
  // rows: 4 rows x 2 warps x 4 bytes = 32; columns: 4 x 64 x 1 x 4 = 1024
  %s = tile.reduce sum %t {dim = 1 : i64} : tensor<4x64xf32, #L> -> tensor<4xf32, #S1>
  %u = tile.reduce sum %t {dim = 0 : i64} : tensor<4x64xf32, #L> -> tensor<64xf32, #S0>
  tile.store %s, %r[%c0] : tensor<4xf32, #S1>, memref<?xf32>
  tile.store %u, %c[%c0] : tensor<64xf32, #S0>, memref<64xf32>
  tile.return
}

// -----

// CHECK-LABEL: tile.kernel @in_cluster
// CHECK-SAME: cluster_rows = 2 : i64
// CHECK-SAME: scratch_bytes = 0 : i64
#L = #tile.blocked<vec = 4, rowThreads = 2, colThreads = 32>
#S = #tile.slice<dim = 1, parent = #L>
tile.kernel @in_cluster(%x: memref<?x256xf32>, %o: memref<?xf32>) attributes {block_threads = 64 : i64, cluster_size = 2 : i64, grid = affine_map<()[s0] -> (s0)>, grid_operands = array<i64: 0, 0>} {
  %c0 = arith.constant 0 : index
  %t = tile.load %x[%c0, %c0] : memref<?x256xf32> -> tensor<2x128xf32, #L>
  %s = tile.reduce sum %t {dim = 1 : i64, cluster} : tensor<2x128xf32, #L> -> tensor<2xf32, #S>
  tile.store %s, %o[%c0] : tensor<2xf32, #S>, memref<?xf32>
  tile.return
}
