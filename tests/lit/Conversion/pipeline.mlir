// RUN: tilejit-opt %s --tilejit-lower-to-llvm=arch=sm_90a | FileCheck %s
// RUN: tilejit-opt %s --tilejit-lower-to-llvm=arch=sm_90a | mlir-translate --mlir-to-llvmir | FileCheck %s --check-prefix=LLVM

// The NVPTX back end's whole pipeline, as the compiler runs it: the loop with
// a carried tile becomes LLVM branches with a vector block argument; nothing
// of the tile, scf, arith or cf dialects is left, and the module translates
// to LLVM IR (a ptx_kernel with its launch bounds).

// CHECK-LABEL: llvm.func @loop(
// CHECK: llvm.br ^bb1(%{{.*}}, %{{.*}} : i64, vector<4xf32>)
// CHECK: ^bb1(%{{.*}}: i64, %{{.*}}: vector<4xf32>):
// CHECK: llvm.cond_br
// CHECK-NOT: tile.
// CHECK-NOT: scf.
// CHECK-NOT: arith.
// CHECK-NOT: cf.
// LLVM: define ptx_kernel void @loop(
// LLVM: "nvvm.maxntid"="32,1,1"
#L = #tile.blocked<vec = 4, rowThreads = 1, colThreads = 32>
tile.kernel @loop(%x: memref<?x128xf32>, %y: memref<1x128xf32>) attributes {block_threads = 32 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %x, %c0 : memref<?x128xf32>
  %zero = arith.constant 0.0 : f32
  %z = tile.splat %zero : f32 -> tensor<1x128xf32, #L>
  %sum = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %z) -> (tensor<1x128xf32, #L>) {
    %t = tile.load %x[%i, %c0] : memref<?x128xf32> -> tensor<1x128xf32, #L>
    %a = arith.addf %acc, %t : tensor<1x128xf32, #L>
    scf.yield %a : tensor<1x128xf32, #L>
  }
  tile.store %sum, %y[%c0, %c0] : tensor<1x128xf32, #L>, memref<1x128xf32>
  tile.return
}
