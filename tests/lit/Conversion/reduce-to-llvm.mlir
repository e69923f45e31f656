// RUN: tilejit-opt %s --split-input-file --tile-allocate-shared --convert-tile-to-llvm | FileCheck %s

// Along a row of 32 lanes: the thread's elements in order, then butterflies
// at offsets 16 to 1; no shared memory.

// CHECK-LABEL: llvm.func @row_in_a_warp(
// CHECK: llvm.fadd
// CHECK: nvvm.shfl.sync bfly
// CHECK: nvvm.shfl.sync bfly
// CHECK: nvvm.shfl.sync bfly
// CHECK: nvvm.shfl.sync bfly
// CHECK: nvvm.shfl.sync bfly
// CHECK-NOT: nvvm.shfl.sync
// CHECK-NOT: barrier.cta.sync
#L = #tile.blocked<vec = 2, rowThreads = 1, colThreads = 32>
#S = #tile.slice<dim = 1, parent = #L>
tile.kernel @row_in_a_warp(%x: memref<1x64xf32>, %o: memref<1xf32>) attributes {block_threads = 32 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %t = tile.load %x[%c0, %c0] : memref<1x64xf32> -> tensor<1x64xf32, #L>
  %s = tile.reduce sum %t {dim = 1 : i64} : tensor<1x64xf32, #L> -> tensor<1xf32, #S>
  tile.store %s, %o[%c0] : tensor<1xf32, #S>, memref<1xf32>
  tile.return
}

// -----

// Along a row of 4 warps: after the butterflies, lane 0 of each warp writes
// its result to the scratch (16 bytes, from offset 0), and each thread reads
// the 4 of its row in order. A max combines with maxnum.

// CHECK: llvm.mlir.global internal @row_over_warps_shared() {addr_space = 3 : i32, alignment = 16 : i64} : !llvm.array<16 x i8>
// CHECK-LABEL: llvm.func @row_over_warps(
// CHECK: llvm.intr.maxnum
// CHECK: nvvm.shfl.sync bfly
// CHECK: llvm.call_intrinsic "llvm.nvvm.barrier.cta.sync.all"
// CHECK: "@$2 st.shared.f32 [$0], $1;", "l,f,b"
// CHECK: llvm.call_intrinsic "llvm.nvvm.barrier.cta.sync.all"
// CHECK-COUNT-4: llvm.load %{{.*}} : !llvm.ptr<3> -> f32
#L = #tile.blocked<vec = 4, rowThreads = 1, colThreads = 128>
#S = #tile.slice<dim = 1, parent = #L>
tile.kernel @row_over_warps(%x: memref<1x512xf32>, %o: memref<1xf32>) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %t = tile.load %x[%c0, %c0] : memref<1x512xf32> -> tensor<1x512xf32, #L>
  %s = tile.reduce max %t {dim = 1 : i64} : tensor<1x512xf32, #L> -> tensor<1xf32, #S>
  tile.store %s, %o[%c0] : tensor<1xf32, #S>, memref<1xf32>
  tile.return
}

// -----

// Along the columns of 4 rows of threads: each row of threads writes its 2
// elements, then each lane sums its columns over the 4 rows in order
// (4 rows x 8 lanes x 2 elements x 4 bytes = 256 bytes of scratch).

// CHECK: llvm.mlir.global internal @columns_shared() {{.*}} : !llvm.array<256 x i8>
// CHECK-LABEL: llvm.func @columns(
// CHECK: llvm.call_intrinsic "llvm.nvvm.barrier.cta.sync.all"
// CHECK-COUNT-2: llvm.store %{{.*}}, %{{.*}} : f32, !llvm.ptr<3>
// CHECK: llvm.call_intrinsic "llvm.nvvm.barrier.cta.sync.all"
// CHECK-COUNT-8: llvm.load %{{.*}} : !llvm.ptr<3> -> f32
#L = #tile.blocked<vec = 1, rowThreads = 4, colThreads = 8>
#C = #tile.slice<dim = 0, parent = #L>
tile.kernel @columns(%x: memref<?x16xf32>, %o: memref<16xf32>) attributes {block_threads = 32 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %t = tile.load %x[%c0, %c0] : memref<?x16xf32> -> tensor<4x16xf32, #L>
  %s = tile.reduce sum %t {dim = 0 : i64} : tensor<4x16xf32, #L> -> tensor<16xf32, #C>
  tile.store %s, %o[%c0] : tensor<16xf32, #C>, memref<16xf32>
  tile.return
}

// -----

// Across a cluster of 2: the kernel sets up two transaction barriers and a
// counter of reductions; lane 0 of each row sends its block's result to both
// blocks with st.async, every block waits for the phase and adds the two
// results in rank order. Slots: 2 sets x 2 blocks x 1 row x 4 bytes from
// offset 16 (after the 16 bytes of scratch), the barriers from offset 32.

// CHECK: llvm.mlir.global internal @across_cluster_shared() {{.*}} : !llvm.array<48 x i8>
// CHECK-LABEL: llvm.func @across_cluster(
// CHECK: llvm.alloca
// CHECK: nvvm.mbarrier.init
// CHECK: nvvm.mbarrier.init
// CHECK: nvvm.fence.mbarrier.init
// CHECK: nvvm.cluster.arrive {aligned}
// CHECK: nvvm.cluster.wait {aligned}
// CHECK: nvvm.mbarrier.arrive.expect_tx
// CHECK: nvvm.mapa
// CHECK: "@$3 st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [$0], $1, [$2];"
// CHECK: nvvm.mapa
// CHECK: st.async
// CHECK: mbarrier.try_wait.parity.shared::cta.b64
// CHECK-COUNT-2: llvm.load %{{.*}} : !llvm.ptr<3> -> f32
#L = #tile.blocked<vec = 4, rowThreads = 1, colThreads = 128>
#S = #tile.slice<dim = 1, parent = #L>
tile.kernel @across_cluster(%x: memref<?x1024xf32>, %o: memref<?xf32>) attributes {block_threads = 128 : i64, cluster_size = 2 : i64, grid = affine_map<()[s0] -> (s0)>, grid_operands = array<i64: 0, 0>} {
  %pid = tile.program_id x
  %rank = tile.cluster_rank
  %c512 = arith.constant 512 : index
  %col = arith.muli %rank, %c512 : index
  %t = tile.load %x[%pid, %col] : memref<?x1024xf32> -> tensor<1x512xf32, #L>
  %s = tile.reduce sum %t {dim = 1 : i64, cluster} : tensor<1x512xf32, #L> -> tensor<1xf32, #S>
  tile.store %s, %o[%pid] : tensor<1xf32, #S>, memref<?xf32>
  tile.return
}
