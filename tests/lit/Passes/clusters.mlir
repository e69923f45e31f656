// RUN: tilejit-opt %s --split-input-file --tile-check-target=arch=sm_90a --tile-lower-to-emitc \
// RUN:   | mlir-translate --split-input-file --mlir-to-cpp | FileCheck %s
// RUN: not tilejit-opt %s --split-input-file --tile-check-target=arch=sm_80 2>&1 \
// RUN:   | FileCheck %s --check-prefix=SM80

// A row of 2048 split over a cluster of 2 blocks: each block holds its slice
// of 1024 columns, sums it, and the cluster combines the two sums. Programs
// count clusters; every block syncs with its cluster before it leaves.

// SM80: error: kernel 'split_row' runs in clusters of 2 blocks, which need sm_90 or later; the target is sm_80

// CHECK: extern "C" __global__ __launch_bounds__(128) __cluster_dims__(2, 1, 1) void split_row(
// CHECK-NEXT: __shared__ float tj_scratch[4];
// CHECK-NEXT: __shared__ tj::ClusterSlots<2, 1> tj_cluster;
// CHECK-NEXT: unsigned tj_cluster_phase = 0;
// CHECK-NEXT: tj::cluster_slots_init(tj_cluster);
// CHECK: size_t [[PID:v[0-9]+]] = tj::cluster_id_x();
// CHECK: size_t [[RANK:v[0-9]+]] = tj::cluster_rank();
// CHECK: tj::load_tile<float, 8, 1, 128, 1, 2048, -1, tj::kCached>(
// CHECK: tj::Frag<float, 1> {{v[0-9]+}} = tj::reduce_row_cluster<0, 1, 128, 8, 2>({{v[0-9]+}}, tj_scratch, tj_cluster, tj_cluster_phase);
// CHECK: tj::store_rows<float, 1, 128>(
// CHECK: tj::cluster_sync();
// CHECK-NEXT: return;

#L = #tile.blocked<vec = 8, rowThreads = 1, colThreads = 128>
#S = #tile.slice<dim = 1, parent = #L>
tile.kernel @split_row(%x: memref<?x2048xf32>, %out: memref<?xf32>) attributes {block_threads = 128 : i64, cluster_size = 2 : i64, grid = affine_map<()[s0] -> (s0)>, grid_operands = array<i64: 0, 0>} {
  %pid = tile.program_id x
  %rank = tile.cluster_rank
  %c1024 = arith.constant 1024 : index
  %col = arith.muli %rank, %c1024 : index
  %t = tile.load %x[%pid, %col] : memref<?x2048xf32> -> tensor<1x1024xf32, #L>
  %s = tile.reduce sum %t {dim = 1 : i64, cluster} : tensor<1x1024xf32, #L> -> tensor<1xf32, #S>
  tile.store %s, %out[%pid] : tensor<1xf32, #S>, memref<?xf32>
  tile.return
}

// -----

// SM80: error: kernel 'no_reduce' runs in clusters of 2 blocks

// A kernel in clusters without a cluster reduction: no slots are declared,
// no reduction header is needed, and it still syncs its cluster before it
// leaves (the queries and the sync come from the prelude).

// CHECK-NOT: #include "reduce.cuh"
// CHECK-LABEL: void no_reduce(
// CHECK-NOT: tj_cluster
// CHECK: size_t {{v[0-9]+}} = tj::cluster_id_x();
// CHECK: tj::cluster_sync();
// CHECK-NEXT: return;

tile.kernel @no_reduce(%x: memref<?x2048xf32>) attributes {block_threads = 128 : i64, cluster_size = 2 : i64, grid = affine_map<()[s0] -> (s0)>, grid_operands = array<i64: 0, 0>} {
  %pid = tile.program_id x
  %c0 = arith.constant 0 : index
  %t = tile.load %x[%pid, %c0] : memref<?x2048xf32> -> tensor<1x2048xf32, #tile.blocked<vec = 8, rowThreads = 1, colThreads = 128>>
  tile.store %t, %x[%pid, %c0] : tensor<1x2048xf32, #tile.blocked<vec = 8, rowThreads = 1, colThreads = 128>>, memref<?x2048xf32>
  tile.return
}
