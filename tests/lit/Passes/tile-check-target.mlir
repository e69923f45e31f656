// RUN: tilejit-opt %s --split-input-file --verify-diagnostics --tile-check-target --tile-allocate-shared | FileCheck %s
// RUN: tilejit-opt %s --split-input-file --verify-diagnostics --tile-check-target=arch=sm_80 --tile-allocate-shared | FileCheck %s
// RUN: tilejit-opt %s --split-input-file --verify-diagnostics --tile-check-target=arch=sm_86 --tile-allocate-shared | FileCheck %s
// RUN: tilejit-opt %s --split-input-file --verify-diagnostics --tile-check-target=arch=sm_89 --tile-allocate-shared | FileCheck %s
// RUN: tilejit-opt %s --split-input-file --verify-diagnostics --tile-check-target=arch=sm_90 --tile-allocate-shared | FileCheck %s
// RUN: tilejit-opt %s --split-input-file --verify-diagnostics '--tile-check-target=arch=sm_90a max-elems-per-thread=64' --tile-allocate-shared | FileCheck %s
// RUN: not tilejit-opt %s --split-input-file --tile-check-target=max-elems-per-thread=8 2>&1 | FileCheck %s --check-prefix=LIMIT8
// RUN: not tilejit-opt %s --split-input-file --tile-check-target=arch=sm_99 2>&1 | FileCheck %s --check-prefix=ARCH

// The arch is checked before any kernel: every split fails the same way.
// ARCH: error: unknown target arch 'sm_99' (known: sm_80, sm_86, sm_89, sm_90, sm_90a)
// ARCH-NOT: scratch_bytes

// With a limit of 8 elements per thread, the first kernel's bf16 load
// (1x4096 over 256 threads, 16 per thread) is already too large (LIMIT8
// below). Every message names the limit it applied: 8 there, the default 64
// (which the sm_90a run passes explicitly) in the expected errors below.

//===----------------------------------------------------------------------===//
// Kernels the target accepts; tile-allocate-shared then sets scratch_bytes.
//===----------------------------------------------------------------------===//

// A row reduction over 256 lanes (8 warps) needs one float per warp and row:
// 1 * (256 / 32) * 4 = 32 bytes. bf16 tiles may be loaded, widened, narrowed
// and stored; the per-row slice is accessed one element at a time.
// CHECK-LABEL: tile.kernel @rmsnorm
// CHECK-SAME: scratch_bytes = 32 : i64
#L = #tile.blocked<vec = 8, rowThreads = 1, colThreads = 256>
#S1 = #tile.slice<dim = 1, parent = #L>
tile.kernel @rmsnorm(%x: memref<?x4096xbf16>, %y: memref<?x4096xbf16>, %r: memref<?xf32>) attributes {block_threads = 256 : i64, grid = affine_map<()[s0] -> (s0)>, grid_operands = array<i64: 0, 0>} {
  %pid = tile.program_id x
  %n = tile.num_programs x
  %c0 = arith.constant 0 : index
  // LIMIT8: tile-check-target.mlir:[[# @LINE + 2]]:8: error: each thread would hold 16 elements of 'tensor<1x4096xbf16, #tile.blocked<vec = 8, rowThreads = 1, colThreads = 256>>'
  // LIMIT8-SAME: (limit 8): use more threads or a narrower tile
  %t = tile.load %x[%pid, %c0] : memref<?x4096xbf16> -> tensor<1x4096xbf16, #L>
  %f = arith.extf %t : tensor<1x4096xbf16, #L> to tensor<1x4096xf32, #L>
  %sq = arith.mulf %f, %f : tensor<1x4096xf32, #L>
  %s = tile.reduce sum %sq {dim = 1 : i64} : tensor<1x4096xf32, #L> -> tensor<1xf32, #S1>
  %rs = math.rsqrt %s : tensor<1xf32, #S1>
  tile.store %rs, %r[%pid] : tensor<1xf32, #S1>, memref<?xf32>
  %b = tile.broadcast %rs : tensor<1xf32, #S1> -> tensor<1x4096xf32, #L>
  %m = arith.mulf %f, %b : tensor<1x4096xf32, #L>
  %o = arith.truncf %m : tensor<1x4096xf32, #L> to tensor<1x4096xbf16, #L>
  tile.store %o, %y[%pid, %c0] : tensor<1x4096xbf16, #L>, memref<?x4096xbf16>
  tile.return
}

// -----

// No reduction across warps: no scratch. 64 elements per thread is the
// default limit exactly (1x16384 bf16 over 256 threads).
// CHECK-LABEL: tile.kernel @at_elem_limit
// CHECK-SAME: scratch_bytes = 0 : i64
#L = #tile.blocked<vec = 8, rowThreads = 1, colThreads = 256>
tile.kernel @at_elem_limit(%x: memref<?x16384xbf16>) attributes {block_threads = 256 : i64, grid = affine_map<()[s0] -> (s0)>, grid_operands = array<i64: 0, 0>} {
  %c0 = arith.constant 0 : index
  %t = tile.load %x[%c0, %c0] : memref<?x16384xbf16> -> tensor<1x16384xbf16, #L>
  tile.store %t, %x[%c0, %c0] : tensor<1x16384xbf16, #L>, memref<?x16384xbf16>
  tile.return
}

// -----

// A row reduction within one warp (32 lanes) needs no scratch either.
// CHECK-LABEL: tile.kernel @warp_rows
// CHECK-SAME: scratch_bytes = 0 : i64
#L = #tile.blocked<vec = 4, rowThreads = 4, colThreads = 32>
#S1 = #tile.slice<dim = 1, parent = #L>
tile.kernel @warp_rows(%x: memref<?x512xf32>, %r: memref<?xf32>) attributes {block_threads = 128 : i64, grid = affine_map<()[s0] -> (s0 ceildiv 4)>, grid_operands = array<i64: 0, 0>} {
  %pid = tile.program_id x
  %c0 = arith.constant 0 : index
  %t = tile.load %x[%pid, %c0] : memref<?x512xf32> -> tensor<4x512xf32, #L>
  %s = tile.reduce max %t {dim = 1 : i64} : tensor<4x512xf32, #L> -> tensor<4xf32, #S1>
  tile.store %s, %r[%pid] : tensor<4xf32, #S1>, memref<?xf32>
  tile.return
}

// -----

// A column reduction over 32 x 32 threads holding 12 elements each needs
// 32 * 32 * 12 * 4 = 49152 bytes: exactly the static limit. The largest
// scratch of the kernel's reductions is kept (a row reduction over 32 lanes
// needs none).
// CHECK-LABEL: tile.kernel @at_scratch_limit
// CHECK-SAME: scratch_bytes = 49152 : i64
#L = #tile.blocked<vec = 4, rowThreads = 32, colThreads = 32>
#S0 = #tile.slice<dim = 0, parent = #L>
#S1 = #tile.slice<dim = 1, parent = #L>
tile.kernel @at_scratch_limit(%x: memref<?x384xf32>, %c: memref<384xf32>, %r: memref<?xf32>) attributes {block_threads = 1024 : i64, grid = affine_map<()[s0] -> (s0 ceildiv 32)>, grid_operands = array<i64: 0, 0>} {
  %pid = tile.program_id x
  %c0 = arith.constant 0 : index
  %t = tile.load %x[%pid, %c0] : memref<?x384xf32> -> tensor<32x384xf32, #L>
  %s = tile.reduce sum %t {dim = 0 : i64} : tensor<32x384xf32, #L> -> tensor<384xf32, #S0>
  tile.store %s, %c[%c0] : tensor<384xf32, #S0>, memref<384xf32>
  %m = tile.reduce min %t {dim = 1 : i64} : tensor<32x384xf32, #L> -> tensor<32xf32, #S1>
  tile.store %m, %r[%pid] : tensor<32xf32, #S1>, memref<?xf32>
  tile.return
}

//===----------------------------------------------------------------------===//
// Tile arithmetic is f32.
//===----------------------------------------------------------------------===//

// -----

#L = #tile.blocked<vec = 8, rowThreads = 1, colThreads = 256>
tile.kernel @bf16_arith(%x: memref<?x4096xbf16>) attributes {block_threads = 256 : i64, grid = affine_map<()[s0] -> (s0)>, grid_operands = array<i64: 0, 0>} {
  %c0 = arith.constant 0 : index
  %t = tile.load %x[%c0, %c0] : memref<?x4096xbf16> -> tensor<1x4096xbf16, #L>
  // expected-error @+1 {{tile arithmetic is f32, but this produces 'tensor<1x4096xbf16, #tile.blocked<vec = 8, rowThreads = 1, colThreads = 256>>'; widen the operands with arith.extf first}}
  %s = arith.addf %t, %t : tensor<1x4096xbf16, #L>
  tile.store %s, %x[%c0, %c0] : tensor<1x4096xbf16, #L>, memref<?x4096xbf16>
  tile.return
}

// -----

#L = #tile.blocked<vec = 8, rowThreads = 1, colThreads = 256>
#S1 = #tile.slice<dim = 1, parent = #L>
tile.kernel @f16_math(%x: memref<?x4096xf16>, %r: memref<?xf16>) attributes {block_threads = 256 : i64, grid = affine_map<()[s0] -> (s0)>, grid_operands = array<i64: 0, 0>} {
  %c0 = arith.constant 0 : index
  %t = tile.load %x[%c0, %c0] : memref<?x4096xf16> -> tensor<1x4096xf16, #L>
  %f = arith.extf %t : tensor<1x4096xf16, #L> to tensor<1x4096xf32, #L>
  %s = tile.reduce sum %f {dim = 1 : i64} : tensor<1x4096xf32, #L> -> tensor<1xf32, #S1>
  %h = arith.truncf %s : tensor<1xf32, #S1> to tensor<1xf16, #S1>
  // expected-error @+1 {{tile arithmetic is f32, but this produces 'tensor<1xf16, #tile.slice<dim = 1, parent = #tile.blocked<vec = 8, rowThreads = 1, colThreads = 256>>>'; widen the operands with arith.extf first}}
  %e = math.exp %h : tensor<1xf16, #S1>
  tile.store %e, %r[%c0] : tensor<1xf16, #S1>, memref<?xf16>
  tile.return
}

// -----

#L = #tile.blocked<vec = 8, rowThreads = 1, colThreads = 256>
tile.kernel @bf16_splat(%x: memref<?x4096xbf16>, %v: f32) attributes {block_threads = 256 : i64, grid = affine_map<()[s0] -> (s0)>, grid_operands = array<i64: 0, 0>} {
  %c0 = arith.constant 0 : index
  %b = arith.truncf %v : f32 to bf16
  // expected-error @+1 {{tile arithmetic is f32, but this produces 'tensor<1x4096xbf16, #tile.blocked<vec = 8, rowThreads = 1, colThreads = 256>>'}}
  %t = tile.splat %b : bf16 -> tensor<1x4096xbf16, #L>
  tile.store %t, %x[%c0, %c0] : tensor<1x4096xbf16, #L>, memref<?x4096xbf16>
  tile.return
}

//===----------------------------------------------------------------------===//
// Per-thread fragment size.
//===----------------------------------------------------------------------===//

// -----

// 1x32768 bf16 over 256 threads is 128 elements per thread.
#L = #tile.blocked<vec = 8, rowThreads = 1, colThreads = 256>
tile.kernel @too_many_elems(%x: memref<?x32768xbf16>) attributes {block_threads = 256 : i64, grid = affine_map<()[s0] -> (s0)>, grid_operands = array<i64: 0, 0>} {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{each thread would hold 128 elements of 'tensor<1x32768xbf16, #tile.blocked<vec = 8, rowThreads = 1, colThreads = 256>>' (limit 64): use more threads or a narrower tile}}
  %t = tile.load %x[%c0, %c0] : memref<?x32768xbf16> -> tensor<1x32768xbf16, #L>
  tile.store %t, %x[%c0, %c0] : tensor<1x32768xbf16, #L>, memref<?x32768xbf16>
  tile.return
}

// -----

// Any tile counts, not only loads: the per-row value (one per thread) is
// fine, the tile it is broadcast to, 1 x 16384 over 64 lanes, is not.
#L = #tile.blocked<vec = 2, rowThreads = 1, colThreads = 64>
#S1 = #tile.slice<dim = 1, parent = #L>
tile.kernel @too_many_elems_broadcast(%v: f32) attributes {block_threads = 64 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %s = tile.splat %v : f32 -> tensor<1xf32, #S1>
  // expected-error @+1 {{each thread would hold 256 elements of 'tensor<1x16384xf32, #tile.blocked<vec = 2, rowThreads = 1, colThreads = 64>>' (limit 64): use more threads or a narrower tile}}
  %b = tile.broadcast %s : tensor<1xf32, #S1> -> tensor<1x16384xf32, #L>
  tile.return
}

//===----------------------------------------------------------------------===//
// Shared scratch for reductions is at most 48 KiB.
//===----------------------------------------------------------------------===//

// -----

// A column reduction over 32 x 32 threads holding 16 elements each:
// 32 * 32 * 16 * 4 = 65536 bytes.
#L = #tile.blocked<vec = 4, rowThreads = 32, colThreads = 32>
#S0 = #tile.slice<dim = 0, parent = #L>
// expected-error @+1 {{kernel 'big_scratch' needs 65536 bytes of shared scratch for its reductions; the static limit is 49152}}
tile.kernel @big_scratch(%x: memref<?x512xf32>, %c: memref<512xf32>) attributes {block_threads = 1024 : i64, grid = affine_map<()[s0] -> (s0 ceildiv 32)>, grid_operands = array<i64: 0, 0>} {
  %pid = tile.program_id x
  %c0 = arith.constant 0 : index
  %t = tile.load %x[%pid, %c0] : memref<?x512xf32> -> tensor<32x512xf32, #L>
  %s = tile.reduce sum %t {dim = 0 : i64} : tensor<32x512xf32, #L> -> tensor<512xf32, #S0>
  tile.store %s, %c[%c0] : tensor<512xf32, #S0>, memref<512xf32>
  tile.return
}

//===----------------------------------------------------------------------===//
// Only grid dimension x.
//===----------------------------------------------------------------------===//

// -----

tile.kernel @program_id_y() attributes {block_threads = 32 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  // expected-error @+1 {{only grid dimension x is supported}}
  %y = tile.program_id y
  tile.return
}

// -----

tile.kernel @num_programs_z() attributes {block_threads = 32 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %x = tile.program_id x
  // expected-error @+1 {{only grid dimension x is supported}}
  %z = tile.num_programs z
  tile.return
}

// -----

// Constant tiles have no lowering; a splat of a scalar does the same.
#L = #tile.blocked<vec = 4, rowThreads = 1, colThreads = 32>
tile.kernel @constant_tile() attributes {block_threads = 32 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  // expected-error @+1 {{constant tiles are not lowered; use tile.splat of a scalar}}
  %c = arith.constant dense<1.0> : tensor<1x128xf32, #L>
  tile.return
}
