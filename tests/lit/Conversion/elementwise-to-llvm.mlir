// RUN: tilejit-opt %s --tile-allocate-shared --convert-tile-to-llvm | FileCheck %s

// Tiles are vectors of the thread's elements: arith on tiles goes through
// MLIR's own conversion as vector arithmetic; a splat is a shuffle of one
// element; a broadcast of a row's value splats it, one of a row of columns
// is the same vector; rsqrt is rsqrt.approx and exp is ex2.approx.ftz of x *
// log2(e).

// CHECK-LABEL: llvm.func @elementwise(
// CHECK: llvm.shufflevector %{{.*}} [0, 0, 0, 0, 0, 0, 0, 0] : vector<8xf32>
// CHECK: llvm.fmul %{{.*}}, %{{.*}} : vector<8xf32>
// CHECK: llvm.fadd %{{.*}}, %{{.*}} : vector<8xf32>
// CHECK: llvm.call_intrinsic "llvm.nvvm.rsqrt.approx.f"
// CHECK: llvm.mlir.constant(1.44269502 : f32)
// CHECK: llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f32"
// CHECK: llvm.extractelement
// CHECK: llvm.shufflevector
#L = #tile.blocked<vec = 4, rowThreads = 1, colThreads = 32>
#S = #tile.slice<dim = 1, parent = #L>
#C = #tile.slice<dim = 0, parent = #L>
tile.kernel @elementwise(%x: memref<1x256xf32>, %y: memref<1x256xf32>, %a: f32) attributes {block_threads = 32 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %t = tile.load %x[%c0, %c0] : memref<1x256xf32> -> tensor<1x256xf32, #L>
  %s = tile.splat %a : f32 -> tensor<1x256xf32, #L>
  %m = arith.mulf %t, %s : tensor<1x256xf32, #L>
  %p = arith.addf %m, %t : tensor<1x256xf32, #L>
  %r = math.rsqrt %p : tensor<1x256xf32, #L>
  %e = math.exp %r : tensor<1x256xf32, #L>
  %one = arith.constant 1.0 : f32
  %row = tile.splat %one : f32 -> tensor<1xf32, #S>
  %b = tile.broadcast %row : tensor<1xf32, #S> -> tensor<1x256xf32, #L>
  %w = tile.load %x[%c0, %c0] : memref<1x256xf32> -> tensor<256xf32, #C>
  %bw = tile.broadcast %w : tensor<256xf32, #C> -> tensor<1x256xf32, #L>
  %q = arith.mulf %e, %b : tensor<1x256xf32, #L>
  %z = arith.mulf %q, %bw : tensor<1x256xf32, #L>
  tile.store %z, %y[%c0, %c0] : tensor<1x256xf32, #L>, memref<1x256xf32>
  tile.return
}
