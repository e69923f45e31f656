// RUN: tilejit-opt %s --split-input-file --tile-allocate-shared --convert-tile-to-llvm | FileCheck %s

// A kernel becomes an llvm.func marked nvvm.kernel with its launch bounds;
// memref arguments are structs of a global pointer and one i64 per size;
// program ids read the block registers, sizes come from the struct (or are
// constants where static).

// CHECK-LABEL: llvm.func @k(
// CHECK-SAME: %[[X:.*]]: !llvm.struct<(ptr<1>, i64, i64)>, %{{.*}}: f32, %{{.*}}: i64)
// CHECK-SAME: nvvm.kernel
// CHECK-SAME: nvvm.maxntid = array<i32: 128, 1, 1>
// CHECK-SAME: nvvm.minctasm = 2 : i32
// CHECK: nvvm.read.ptx.sreg.ctaid.x : i32
// CHECK: nvvm.read.ptx.sreg.nctaid.x : i32
// CHECK: llvm.extractvalue %[[X]][1] : !llvm.struct<(ptr<1>, i64, i64)>
// CHECK-NOT: llvm.extractvalue %[[X]][2]
// CHECK: llvm.return
tile.kernel @k(%x: memref<?x64xf32>, %s: f32, %n: index) attributes {block_threads = 128 : i64, min_blocks = 2 : i64, grid = affine_map<()[s0] -> (s0)>, grid_operands = array<i64: 2, -1>} {
  %pid = tile.program_id x
  %np = tile.num_programs x
  %c0 = arith.constant 0 : index
  %rows = memref.dim %x, %c0 : memref<?x64xf32>
  %c1 = arith.constant 1 : index
  %cols = memref.dim %x, %c1 : memref<?x64xf32>
  %a = arith.addi %pid, %np : index
  %b = arith.addi %rows, %cols : index
  tile.return
}

// -----

// In a kernel that runs in clusters a program is a cluster: ids read the
// cluster registers, the kernel carries its cluster shape, and every block
// meets its cluster before it leaves.

// CHECK-LABEL: llvm.func @in_clusters(
// CHECK-SAME: nvvm.cluster_dim = array<i32: 4, 1, 1>
// CHECK: nvvm.read.ptx.sreg.clusterid.x : i32
// CHECK: nvvm.read.ptx.sreg.nclusterid.x : i32
// CHECK: nvvm.read.ptx.sreg.cluster.ctarank : i32
// CHECK: nvvm.cluster.arrive {aligned}
// CHECK-NEXT: nvvm.cluster.wait {aligned}
// CHECK-NEXT: llvm.return
tile.kernel @in_clusters(%x: memref<?xf32>) attributes {block_threads = 32 : i64, cluster_size = 4 : i64, grid = affine_map<()[s0] -> (s0)>, grid_operands = array<i64: 0, 0>} {
  %pid = tile.program_id x
  %np = tile.num_programs x
  %r = tile.cluster_rank
  tile.return
}

