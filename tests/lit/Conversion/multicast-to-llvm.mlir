// RUN: tilejit-opt %s --tilejit-lower-to-llvm=arch=sm_90a | FileCheck %s

// Two blocks in a cluster share B's tile: each copies half of its boxes
// (one 128-row box of the ring's 256 rows) into both blocks' stage with a
// multicast mask of 0b11, and announces the whole stage's bytes on its own
// barrier. A consumer releases a stage in both blocks (mapa to each rank,
// then an arrive with the default semantics: no cluster-scope release,
// which costs a GPU-wide memory barrier). The barriers are initialized in every
// block before any block goes on (a cluster barrier, not the block's).

// CHECK-LABEL: llvm.func @shared_b(
// CHECK-SAME: nvvm.cluster_dim = array<i32: 2, 1, 1>
// CHECK: nvvm.fence.mbarrier.init
// CHECK-NEXT: nvvm.cluster.arrive
// CHECK-NEXT: nvvm.cluster.wait
// CHECK: nvvm.mbarrier.arrive.expect_tx %{{.*}}, %{{.*}} : !llvm.ptr<3>, i32
// CHECK: nvvm.cp.async.bulk.tensor.shared.cluster.global %{{.*}}, %arg0, %{{.*}}, box[%{{.*}}, %{{.*}}] {isCTAOnly = true}
// B's whole stage (256 x 64 bf16) is expected, though this block copies half.
// CHECK: %[[BYTES:.*]] = llvm.mlir.constant(32768 : i32) : i32
// CHECK: nvvm.mbarrier.arrive.expect_tx %{{.*}}, %[[BYTES]] : !llvm.ptr<3>, i32
// Block r copies box r: rows 128 r to 128 r + 127 of the tile, landing
// 128 r rows of 128 bytes into the stage; the box's coordinates are the
// tile's (column, row + 128 r).
// CHECK: %[[RANK:.*]] = nvvm.read.ptx.sreg.cluster.ctarank : i32
// CHECK: %[[MASK:.*]] = llvm.mlir.constant(3 : i16) : i16
// CHECK: %[[FIRST:.*]] = llvm.mul %[[RANK]], %{{.*}} : i32
// CHECK: %[[BOX:.*]] = llvm.add %[[FIRST]], %{{.*}} : i32
// CHECK: %[[RB:.*]] = llvm.udiv %[[BOX]], %{{.*}} : i32
// CHECK: %[[PANEL:.*]] = llvm.urem %[[BOX]], %{{.*}} : i32
// CHECK: %[[ROWS:.*]] = llvm.mlir.constant(128 : i32) : i32
// CHECK: %[[ROWOFF:.*]] = llvm.mul %[[RB]], %[[ROWS]] : i32
// CHECK: %[[COLOFF:.*]] = llvm.mul %[[PANEL]], %{{.*}} : i32
// CHECK: %[[ROWBYTES:.*]] = llvm.mul %[[ROWOFF]], %{{.*}} : i32
// CHECK: %[[PANELBYTES:.*]] = llvm.mul %[[PANEL]], %{{.*}} : i32
// CHECK: %[[BYTES:.*]] = llvm.add %[[PANELBYTES]], %[[ROWBYTES]] : i32
// CHECK: %[[WIDE:.*]] = llvm.zext %[[BYTES]] : i32 to i64
// CHECK: %[[DST:.*]] = llvm.getelementptr %{{.*}}[%[[WIDE]]]
// CHECK: %[[CLUSTERDST:.*]] = llvm.addrspacecast %[[DST]] : !llvm.ptr<3> to !llvm.ptr<7>
// CHECK: %[[ROW:.*]] = llvm.add %{{.*}}, %[[ROWOFF]] : i32
// CHECK: %[[COL:.*]] = llvm.add %{{.*}}, %[[COLOFF]] : i32
// CHECK: nvvm.cp.async.bulk.tensor.shared.cluster.global %[[CLUSTERDST]], %arg1, %{{.*}}, box[%[[COL]], %[[ROW]]] multicast_mask = %[[MASK]] : !llvm.ptr<7>
// CHECK-NOT: nvvm.cp.async.bulk.tensor
// CHECK: mapa.shared::cluster.u32 remote, $0, 0;
// CHECK-SAME: mbarrier.arrive.shared::cluster.b64 _, [remote];
// CHECK-SAME: mapa.shared::cluster.u32 remote, $0, 1;
// CHECK: nvvm.cluster.arrive
// CHECK: nvvm.cluster.wait
// CHECK: llvm.return
tile.kernel @shared_b(%a: !tile.tensormap<rows = 128, cols = 64, bf16>, %b: !tile.tensormap<rows = 128, cols = 64, bf16>, %d: memref<?x256xf32>) attributes {block_threads = 384 : i64, min_blocks = 1 : i64, cluster_size = 2 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %ra = tile.alloc_ring : !tile.ring<stages = 2, rows = 128, cols = 64, bf16>
  %rb = tile.alloc_ring : !tile.ring<stages = 2, rows = 256, cols = 64, bf16>
  %full = tile.alloc_barriers {arrivals = 2} : !tile.barriers<2>
  %empty = tile.alloc_barriers {arrivals = 4} : !tile.barriers<2>
  tile.warp_specialize attributes {consumers = 2, producer_regs = 40, consumer_regs = 232} {
    tile.barrier_wait %empty[%c0], %c1 : !tile.barriers<2>
    tile.tma_load %a[%c0, %c0], %ra[%c0], %full[%c0] : !tile.tensormap<rows = 128, cols = 64, bf16>, !tile.ring<stages = 2, rows = 128, cols = 64, bf16>, !tile.barriers<2>
    tile.tma_load %b[%c0, %c0], %rb[%c0], %full[%c0] {multicast = 2} : !tile.tensormap<rows = 128, cols = 64, bf16>, !tile.ring<stages = 2, rows = 256, cols = 64, bf16>, !tile.barriers<2>
    tile.yield
  }, {
  ^bb0(%c: index):
    %zero = arith.constant 0.0 : f32
    %acc = tile.splat %zero : f32 -> tensor<64x256xf32, #tile.wgmma>
    tile.barrier_wait %full[%c0], %c0 : !tile.barriers<2>
    %r = tile.dot %ra[%c0, %c0], %rb[%c0, %c0], %acc : !tile.ring<stages = 2, rows = 128, cols = 64, bf16>, !tile.ring<stages = 2, rows = 256, cols = 64, bf16>, tensor<64x256xf32, #tile.wgmma> -> tensor<64x256xf32, #tile.wgmma>
    tile.barrier_arrive %empty[%c0] {cluster} : !tile.barriers<2>
    tile.store %r, %d[%c0, %c0] : tensor<64x256xf32, #tile.wgmma>, memref<?x256xf32>
    tile.yield
  }
  tile.return
}
