// RUN: tilejit-opt %s --split-input-file --verify-diagnostics

// One case per diagnostic of the tile dialect's verifiers (TileOps.cpp,
// TileLayout.cpp). Layout attribute errors are reported while parsing, at the
// attribute.

//===----------------------------------------------------------------------===//
// tile.kernel
//===----------------------------------------------------------------------===//

// expected-error @+1 {{'tile.kernel' op must return nothing, has 1 results}}
tile.kernel @results() -> f32 attributes {block_threads = 32 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  tile.return
}

// -----

// expected-error @+1 {{'tile.kernel' op argument 1 has type 'i32'; kernel arguments are row-major bf16/f16/f32 memrefs (dense, or strided<[..., 1]> with offset 0), f32, index or !tile.tensormap}}
tile.kernel @int_arg(%a: f32, %b: i32) attributes {block_threads = 32 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  tile.return
}

// -----

// A memref of another element type is not a global memref.
// expected-error @+1 {{'tile.kernel' op argument 0 has type 'memref<?xi8>'; kernel arguments are row-major bf16/f16/f32 memrefs (dense, or strided<[..., 1]> with offset 0), f32, index or !tile.tensormap}}
tile.kernel @i8_memref(%a: memref<?xi8>) attributes {block_threads = 32 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  tile.return
}

// -----

// Nor a strided memref whose last dimension is not dense.
// expected-error @+1 {{'tile.kernel' op argument 0 has type 'memref<4x4xf32, strided<[8, 2]>>'; kernel arguments}}
tile.kernel @strided(%a: memref<4x4xf32, strided<[8, 2]>>) attributes {block_threads = 32 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  tile.return
}

// -----

// Nor a static row stride that is not a multiple of 16 bytes (8 f32 rows
// of 4 are 16 bytes, 6 are 24)...
// expected-error @+1 {{'tile.kernel' op argument 0 has type 'memref<4x4xf32, strided<[6, 1]>>'; kernel arguments}}
tile.kernel @stride_unaligned(%a: memref<4x4xf32, strided<[6, 1]>>) attributes {block_threads = 32 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  tile.return
}

// -----

// ... or shorter than a row.
// expected-error @+1 {{'tile.kernel' op argument 0 has type 'memref<4x16xf32, strided<[8, 1]>>'; kernel arguments}}
tile.kernel @stride_short(%a: memref<4x16xf32, strided<[8, 1]>>) attributes {block_threads = 32 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  tile.return
}

// -----

// Nor one with an offset.
// expected-error @+1 {{'tile.kernel' op argument 0 has type 'memref<4x4xf32, strided<[?, 1], offset: 4>>'; kernel arguments}}
tile.kernel @offset(%a: memref<4x4xf32, strided<[?, 1], offset: 4>>) attributes {block_threads = 32 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  tile.return
}

// -----

// Nor any other layout (a permutation).
// expected-error @+1 {{'tile.kernel' op argument 0 has type 'memref<4x4xf32, affine_map<(d0, d1) -> (d1, d0)>>'; kernel arguments}}
tile.kernel @permuted(%a: memref<4x4xf32, affine_map<(d0, d1) -> (d1, d0)>>) attributes {block_threads = 32 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  tile.return
}

// -----

// Nor a memref in another memory space.
// expected-error @+1 {{'tile.kernel' op argument 0 has type 'memref<4xf32, 3>'; kernel arguments}}
tile.kernel @space(%a: memref<4xf32, 3>) attributes {block_threads = 32 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  tile.return
}

// -----

// Nor a memref of rank above 4.
// expected-error @+1 {{'tile.kernel' op argument 0 has type 'memref<1x1x1x1x1xf32>'; kernel arguments}}
tile.kernel @rank5(%a: memref<1x1x1x1x1xf32>) attributes {block_threads = 32 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  tile.return
}

// -----

// A mismatch between the body and the signature is reported by the function
// interface before the kernel's own check ("body has N arguments, signature
// M") can run.
// expected-error @+1 {{'tile.kernel' op entry block must have 1 arguments to match function signature}}
"tile.kernel"() <{sym_name = "body_args", function_type = (f32) -> (), block_threads = 32 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>}> ({
^bb0:
  "tile.return"() : () -> ()
}) : () -> ()

// -----

// expected-error @+1 {{'tile.kernel' op block_threads must be a multiple of 32 in [32, 1024], got 48}}
tile.kernel @threads_48() attributes {block_threads = 48 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  tile.return
}

// -----

// expected-error @+1 {{'tile.kernel' op block_threads must be a multiple of 32 in [32, 1024], got 0}}
tile.kernel @threads_0() attributes {block_threads = 0 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  tile.return
}

// -----

// expected-error @+1 {{'tile.kernel' op block_threads must be a multiple of 32 in [32, 1024], got 2048}}
tile.kernel @threads_2048() attributes {block_threads = 2048 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  tile.return
}

// -----

// expected-error @+1 {{'tile.kernel' op grid must be an affine map of symbols only with at least one result, got affine_map<(d0) -> (d0)>}}
tile.kernel @grid_dims(%x: memref<?xf32>) attributes {block_threads = 32 : i64, grid = affine_map<(d0) -> (d0)>, grid_operands = array<i64>} {
  tile.return
}

// -----

// expected-error @+1 {{'tile.kernel' op grid must be an affine map of symbols only with at least one result, got affine_map<()[s0] -> ()>}}
tile.kernel @grid_no_results(%x: memref<?xf32>) attributes {block_threads = 32 : i64, grid = affine_map<()[s0] -> ()>, grid_operands = array<i64: 0, 0>} {
  tile.return
}

// -----

// expected-error @+1 {{'tile.kernel' op grid has 1 symbols but grid_operands holds 0 values (expected (argument, dimension) pairs)}}
tile.kernel @grid_too_few(%x: memref<?xf32>) attributes {block_threads = 32 : i64, grid = affine_map<()[s0] -> (s0)>, grid_operands = array<i64>} {
  tile.return
}

// -----

// expected-error @+1 {{'tile.kernel' op grid has 1 symbols but grid_operands holds 3 values (expected (argument, dimension) pairs)}}
tile.kernel @grid_odd(%x: memref<?xf32>) attributes {block_threads = 32 : i64, grid = affine_map<()[s0] -> (s0)>, grid_operands = array<i64: 0, 0, 0>} {
  tile.return
}

// -----

// expected-error @+1 {{'tile.kernel' op grid has 2 symbols but grid_operands holds 2 values (expected (argument, dimension) pairs)}}
tile.kernel @grid_missing_pair(%x: memref<?xf32>) attributes {block_threads = 32 : i64, grid = affine_map<()[s0, s1] -> (s0, s1)>, grid_operands = array<i64: 0, 0>} {
  tile.return
}

// -----

// expected-error @+1 {{'tile.kernel' op grid operand 1 names argument 2, which does not exist}}
tile.kernel @grid_bad_arg(%x: memref<?xf32>, %n: index) attributes {block_threads = 32 : i64, grid = affine_map<()[s0, s1] -> (s0, s1)>, grid_operands = array<i64: 0, 0, 2, -1>} {
  tile.return
}

// -----

// expected-error @+1 {{'tile.kernel' op grid operand 0 names argument -1, which does not exist}}
tile.kernel @grid_negative_arg(%x: memref<?xf32>) attributes {block_threads = 32 : i64, grid = affine_map<()[s0] -> (s0)>, grid_operands = array<i64: -1, 0>} {
  tile.return
}

// -----

// expected-error @+1 {{'tile.kernel' op grid operand 0 names argument 0 itself, which must then be an index}}
tile.kernel @grid_arg_not_index(%x: memref<?xf32>) attributes {block_threads = 32 : i64, grid = affine_map<()[s0] -> (s0)>, grid_operands = array<i64: 0, -1>} {
  tile.return
}

// -----

// expected-error @+1 {{'tile.kernel' op grid operand 0 names argument 1 itself, which must then be an index}}
tile.kernel @grid_arg_f32(%x: memref<?xf32>, %s: f32) attributes {block_threads = 32 : i64, grid = affine_map<()[s0] -> (s0)>, grid_operands = array<i64: 1, -1>} {
  tile.return
}

// -----

// expected-error @+1 {{'tile.kernel' op grid operand 0 names size 2 of argument 0, which is not a memref of that rank}}
tile.kernel @grid_dim_past_rank(%x: memref<?x?xf32>) attributes {block_threads = 32 : i64, grid = affine_map<()[s0] -> (s0)>, grid_operands = array<i64: 0, 2>} {
  tile.return
}

// -----

// expected-error @+1 {{'tile.kernel' op grid operand 0 names size 0 of argument 0, which is not a memref of that rank}}
tile.kernel @grid_dim_of_index(%n: index) attributes {block_threads = 32 : i64, grid = affine_map<()[s0] -> (s0)>, grid_operands = array<i64: 0, 0>} {
  tile.return
}

// -----

// expected-error @+1 {{'tile.kernel' op grid operand 1 names size -2 of argument 0, which is not a memref of that rank}}
tile.kernel @grid_dim_negative(%x: memref<?xf32>) attributes {block_threads = 32 : i64, grid = affine_map<()[s0, s1] -> (s0, s1)>, grid_operands = array<i64: 0, 0, 0, -2>} {
  tile.return
}

// -----

tile.kernel @plain_tensor() attributes {block_threads = 32 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  // expected-error @+1 {{'arith.constant' op produces 'tensor<4xf32>', a tensor without a #tile layout}}
  %t = arith.constant dense<0.0> : tensor<4xf32>
  tile.return
}

// -----

#L = #tile.blocked<vec = 4, rowThreads = 1, colThreads = 64>
tile.kernel @wrong_threads(%x: memref<?xf32>) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'tile.load' op produces a tile laid out over 64 threads in a kernel of 128}}
  %t = tile.load %x[%c0] : memref<?xf32> -> tensor<1x256xf32, #L>
  tile.return
}

// -----

// The check covers tiles nested in loops and slice layouts (through their
// parent), too.
#L = #tile.blocked<vec = 4, rowThreads = 2, colThreads = 32>
#S = #tile.slice<dim = 1, parent = #L>
tile.kernel @wrong_threads_nested(%n: index, %e: f32) attributes {block_threads = 32 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.for %i = %c0 to %n step %c1 {
    // expected-error @+1 {{'tile.splat' op produces a tile laid out over 64 threads in a kernel of 32}}
    %t = tile.splat %e : f32 -> tensor<2xf32, #S>
  }
  tile.return
}

//===----------------------------------------------------------------------===//
// tile.load, tile.store
//===----------------------------------------------------------------------===//

// -----

#L = #tile.blocked<vec = 4, rowThreads = 1, colThreads = 64>
tile.kernel @load_indices(%x: memref<?x256xf32>) attributes {block_threads = 64 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'tile.load' op needs 2 indices for 'memref<?x256xf32>', got 1}}
  %t = tile.load %x[%c0] : memref<?x256xf32> -> tensor<1x256xf32, #L>
  tile.return
}

// -----

#L = #tile.blocked<vec = 4, rowThreads = 1, colThreads = 64>
tile.kernel @store_indices(%x: memref<?x256xf32>, %y: memref<?x256xf32>) attributes {block_threads = 64 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %t = tile.load %x[%c0, %c0] : memref<?x256xf32> -> tensor<1x256xf32, #L>
  // expected-error @+1 {{'tile.store' op needs 2 indices for 'memref<?x256xf32>', got 3}}
  tile.store %t, %y[%c0, %c0, %c0] : tensor<1x256xf32, #L>, memref<?x256xf32>
  tile.return
}

// -----

#L = #tile.blocked<vec = 4, rowThreads = 1, colThreads = 64>
tile.kernel @load_rank(%x: memref<?xf32>) attributes {block_threads = 64 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'tile.load' op tile of rank 2 does not fit in 'memref<?xf32>'}}
  %t = tile.load %x[%c0] : memref<?xf32> -> tensor<1x256xf32, #L>
  tile.return
}

// -----

#L = #tile.blocked<vec = 4, rowThreads = 1, colThreads = 64>
tile.kernel @store_rank(%x: memref<?x256xf32>, %y: memref<256xf32>) attributes {block_threads = 64 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %t = tile.load %x[%c0, %c0] : memref<?x256xf32> -> tensor<1x256xf32, #L>
  // expected-error @+1 {{'tile.store' op tile of rank 2 does not fit in 'memref<256xf32>'}}
  tile.store %t, %y[%c0] : tensor<1x256xf32, #L>, memref<256xf32>
  tile.return
}

// -----

// A load may widen to f32, never narrow.
#L = #tile.blocked<vec = 4, rowThreads = 1, colThreads = 64>
tile.kernel @load_elem(%x: memref<?x256xf32>) attributes {block_threads = 64 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'tile.load' op tile element type 'bf16' differs from memory element type 'f32' (only an f32 tile may access bf16/f16 memory, converting)}}
  %t = tile.load %x[%c0, %c0] : memref<?x256xf32> -> tensor<1x256xbf16, #L>
  tile.return
}

// -----

// A store may narrow from f32 only, not from one 16-bit type to the other.
#L = #tile.blocked<vec = 4, rowThreads = 1, colThreads = 64>
#S = #tile.slice<dim = 0, parent = #L>
tile.kernel @store_elem(%x: memref<256xbf16>, %y: memref<?x256xf16>) attributes {block_threads = 64 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %t = tile.load %x[%c0] : memref<256xbf16> -> tensor<256xbf16, #S>
  // expected-error @+1 {{'tile.store' op tile element type 'bf16' differs from memory element type 'f16' (only an f32 tile may access bf16/f16 memory, converting)}}
  tile.store %t, %y[%c0, %c0] : tensor<256xbf16, #S>, memref<?x256xf16>
  tile.return
}

//===----------------------------------------------------------------------===//
// tile.reduce
//===----------------------------------------------------------------------===//

// -----

#L = #tile.blocked<vec = 4, rowThreads = 1, colThreads = 64>
#S = #tile.slice<dim = 0, parent = #L>
tile.kernel @reduce_slice_operand(%e: f32) attributes {block_threads = 64 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %t = tile.splat %e : f32 -> tensor<256xf32, #S>
  // expected-error @+1 {{'tile.reduce' op operand must be a rank-2 #tile.blocked or #tile.wgmma tile, got 'tensor<256xf32, #tile.slice<dim = 0, parent = #tile.blocked<vec = 4, rowThreads = 1, colThreads = 64>>>'}}
  %r = tile.reduce sum %t {dim = 0 : i64} : tensor<256xf32, #S> -> tensor<256xf32, #S>
  tile.return
}

// -----

#L = #tile.blocked<vec = 4, rowThreads = 1, colThreads = 64>
#S = #tile.slice<dim = 1, parent = #L>
tile.kernel @reduce_dim(%e: f32) attributes {block_threads = 64 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %t = tile.splat %e : f32 -> tensor<1x256xf32, #L>
  // expected-error @+1 {{'tile.reduce' op dim must be 0 or 1, got 2}}
  %r = tile.reduce max %t {dim = 2 : i64} : tensor<1x256xf32, #L> -> tensor<1xf32, #S>
  tile.return
}

// -----

#L = #tile.blocked<vec = 4, rowThreads = 1, colThreads = 64>
#S = #tile.slice<dim = 0, parent = #L>
tile.kernel @reduce_wrong_slice_dim(%e: f32) attributes {block_threads = 64 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %t = tile.splat %e : f32 -> tensor<1x256xf32, #L>
  // expected-error @+1 {{'tile.reduce' op result layout must be #tile.slice<dim = 1, parent = #tile.blocked<vec = 4, rowThreads = 1, colThreads = 64>>, got #tile.slice<dim = 0, parent = #tile.blocked<vec = 4, rowThreads = 1, colThreads = 64>>}}
  %r = tile.reduce sum %t {dim = 1 : i64} : tensor<1x256xf32, #L> -> tensor<256xf32, #S>
  tile.return
}

// -----

#L = #tile.blocked<vec = 4, rowThreads = 1, colThreads = 64>
#M = #tile.blocked<vec = 2, rowThreads = 1, colThreads = 64>
#S = #tile.slice<dim = 0, parent = #M>
tile.kernel @reduce_wrong_parent(%e: f32) attributes {block_threads = 64 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %t = tile.splat %e : f32 -> tensor<1x256xf32, #L>
  // expected-error @+1 {{'tile.reduce' op result layout must be #tile.slice<dim = 0, parent = #tile.blocked<vec = 4, rowThreads = 1, colThreads = 64>>, got #tile.slice<dim = 0, parent = #tile.blocked<vec = 2, rowThreads = 1, colThreads = 64>>}}
  %r = tile.reduce min %t {dim = 0 : i64} : tensor<1x256xf32, #L> -> tensor<256xf32, #S>
  tile.return
}

// -----

#L = #tile.blocked<vec = 4, rowThreads = 2, colThreads = 32>
tile.kernel @reduce_blocked_result(%e: f32) attributes {block_threads = 64 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %t = tile.splat %e : f32 -> tensor<2x256xf32, #L>
  // expected-error @+1 {{'tile.reduce' op result layout must be #tile.slice<dim = 1, parent = #tile.blocked<vec = 4, rowThreads = 2, colThreads = 32>>, got #tile.blocked<vec = 4, rowThreads = 2, colThreads = 32>}}
  %r = tile.reduce sum %t {dim = 1 : i64} : tensor<2x256xf32, #L> -> tensor<2x256xf32, #L>
  tile.return
}

// -----

#L = #tile.blocked<vec = 4, rowThreads = 1, colThreads = 64>
#S = #tile.slice<dim = 0, parent = #L>
tile.kernel @reduce_shape(%e: f32) attributes {block_threads = 64 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %t = tile.splat %e : f32 -> tensor<1x256xf32, #L>
  // expected-error @+1 {{'tile.reduce' op result shape must be [256], got 'tensor<128xf32, #tile.slice<dim = 0, parent = #tile.blocked<vec = 4, rowThreads = 1, colThreads = 64>>>'}}
  %r = tile.reduce sum %t {dim = 0 : i64} : tensor<1x256xf32, #L> -> tensor<128xf32, #S>
  tile.return
}

//===----------------------------------------------------------------------===//
// tile.broadcast
//===----------------------------------------------------------------------===//

// -----

#L = #tile.blocked<vec = 4, rowThreads = 1, colThreads = 64>
tile.kernel @broadcast_blocked(%e: f32) attributes {block_threads = 64 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %t = tile.splat %e : f32 -> tensor<1x256xf32, #L>
  // expected-error @+1 {{'tile.broadcast' op expands a #tile.slice tile into a #tile.blocked or #tile.wgmma tile, got 'tensor<1x256xf32, #tile.blocked<vec = 4, rowThreads = 1, colThreads = 64>>' -> 'tensor<1x256xf32, #tile.blocked<vec = 4, rowThreads = 1, colThreads = 64>>'}}
  %b = tile.broadcast %t : tensor<1x256xf32, #L> -> tensor<1x256xf32, #L>
  tile.return
}

// -----

#L = #tile.blocked<vec = 4, rowThreads = 1, colThreads = 64>
#S = #tile.slice<dim = 1, parent = #L>
tile.kernel @broadcast_to_slice(%e: f32) attributes {block_threads = 64 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %t = tile.splat %e : f32 -> tensor<1xf32, #S>
  // expected-error @+1 {{'tile.broadcast' op expands a #tile.slice tile into a #tile.blocked or #tile.wgmma tile, got}}
  %b = tile.broadcast %t : tensor<1xf32, #S> -> tensor<1xf32, #S>
  tile.return
}

// -----

#L = #tile.blocked<vec = 4, rowThreads = 1, colThreads = 64>
#M = #tile.blocked<vec = 8, rowThreads = 1, colThreads = 64>
#S = #tile.slice<dim = 1, parent = #L>
tile.kernel @broadcast_parent(%e: f32) attributes {block_threads = 64 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %t = tile.splat %e : f32 -> tensor<1xf32, #S>
  // expected-error @+1 {{'tile.broadcast' op operand layout's parent #tile.blocked<vec = 4, rowThreads = 1, colThreads = 64> differs from result layout #tile.blocked<vec = 8, rowThreads = 1, colThreads = 64>}}
  %b = tile.broadcast %t : tensor<1xf32, #S> -> tensor<1x256xf32, #M>
  tile.return
}

// -----

#L = #tile.blocked<vec = 4, rowThreads = 1, colThreads = 64>
#S = #tile.slice<dim = 1, parent = #L>
tile.kernel @broadcast_elem(%e: f32) attributes {block_threads = 64 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %t = tile.splat %e : f32 -> tensor<1xf32, #S>
  // expected-error @+1 {{'tile.broadcast' op element type changes from 'f32' to 'bf16'}}
  %b = tile.broadcast %t : tensor<1xf32, #S> -> tensor<1x256xbf16, #L>
  tile.return
}

// -----

#L = #tile.blocked<vec = 4, rowThreads = 1, colThreads = 64>
#S = #tile.slice<dim = 0, parent = #L>
tile.kernel @broadcast_shape(%e: f32) attributes {block_threads = 64 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %t = tile.splat %e : f32 -> tensor<128xf32, #S>
  // expected-error @+1 {{'tile.broadcast' op operand of 128 elements does not match dimension 1 of 'tensor<1x256xf32, #tile.blocked<vec = 4, rowThreads = 1, colThreads = 64>>'}}
  %b = tile.broadcast %t : tensor<128xf32, #S> -> tensor<1x256xf32, #L>
  tile.return
}

//===----------------------------------------------------------------------===//
// tile.splat
//===----------------------------------------------------------------------===//

// -----

#L = #tile.blocked<vec = 4, rowThreads = 1, colThreads = 64>
tile.kernel @splat_type(%e: f32) attributes {block_threads = 64 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  // expected-error @+1 {{'tile.splat' op scalar of type 'f32' cannot fill a tile of 'bf16'}}
  %t = tile.splat %e : f32 -> tensor<1x256xbf16, #L>
  tile.return
}

//===----------------------------------------------------------------------===//
// #tile.blocked, #tile.slice
//===----------------------------------------------------------------------===//

// -----

// expected-error @+1 {{#tile.blocked vec must be 1, 2, 4 or 8, got 3}}
#L = #tile.blocked<vec = 3, rowThreads = 1, colThreads = 64>

// -----

// expected-error @+1 {{#tile.blocked vec must be 1, 2, 4 or 8, got 16}}
#L = #tile.blocked<vec = 16, rowThreads = 1, colThreads = 64>

// -----

// expected-error @+1 {{#tile.blocked vec must be 1, 2, 4 or 8, got 0}}
#L = #tile.blocked<vec = 0, rowThreads = 1, colThreads = 64>

// -----

// expected-error @+1 {{#tile.blocked needs rowThreads and colThreads >= 1, got 0 and 64}}
#L = #tile.blocked<vec = 4, rowThreads = 0, colThreads = 64>

// -----

// expected-error @+1 {{#tile.blocked needs rowThreads and colThreads >= 1, got 4 and -32}}
#L = #tile.blocked<vec = 4, rowThreads = 4, colThreads = -32>

// -----

// expected-error @+1 {{#tile.blocked colThreads must be a power of two, got 48}}
#L = #tile.blocked<vec = 4, rowThreads = 2, colThreads = 48>

// -----

// expected-error @+1 {{#tile.blocked needs whole warps: rowThreads * colThreads = 24 is not a multiple of 32}}
#L = #tile.blocked<vec = 4, rowThreads = 3, colThreads = 8>

// -----

// expected-error @+1 {{#tile.blocked has 2048 threads; a block holds at most 1024}}
#L = #tile.blocked<vec = 4, rowThreads = 8, colThreads = 256>

// -----

// (2^57 + 2) * 128 wraps around to 256.
// expected-error @+1 {{#tile.blocked has 144115188075855874 * 128 threads; a block holds at most 1024}}
#L = #tile.blocked<vec = 4, rowThreads = 144115188075855874, colThreads = 128>

// -----

// The check also applies where a layout is written inline in a type.
tile.kernel @inline_layout(%e: f32) attributes {block_threads = 64 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  // expected-error @+1 {{#tile.blocked has 2048 threads; a block holds at most 1024}}
  %t = tile.splat %e : f32 -> tensor<1x256xf32, #tile.blocked<vec = 4, rowThreads = 1, colThreads = 2048>>
  tile.return
}

// -----

#L = #tile.blocked<vec = 4, rowThreads = 1, colThreads = 64>
// expected-error @+1 {{#tile.slice dim must be 0 or 1, got 2}}
#S = #tile.slice<dim = 2, parent = #L>

// -----

// expected-error @+1 {{#tile.slice dim must be 0 or 1, got -1}}
#S = #tile.slice<dim = -1, parent = #tile.blocked<vec = 4, rowThreads = 1, colThreads = 64>>

// -----

// Tile operations only make sense inside a kernel.
// expected-error @+1 {{'tile.program_id' op must be inside a tile.kernel}}
%p = tile.program_id x

// -----

#L = #tile.blocked<vec = 4, rowThreads = 1, colThreads = 32>
%s = arith.constant 1.0 : f32
// expected-error @+1 {{'tile.splat' op must be inside a tile.kernel}}
%t = tile.splat %s : f32 -> tensor<1x128xf32, #L>

// -----

// A blocked tile has rowThreads rows: two rows over one row of threads do not fit.
#L = #tile.blocked<vec = 4, rowThreads = 1, colThreads = 32>
tile.kernel @shape_misfit(%a: f32) attributes {block_threads = 32 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %t = tile.splat %a : f32 -> tensor<1x128xf32, #L>
  // expected-error @+1 {{'arith.addf' op produces 'tensor<2x128xf32, #tile.blocked<vec = 4, rowThreads = 1, colThreads = 32>>', whose shape does not fit its layout}}
  %u = "arith.addf"(%t, %t) : (tensor<1x128xf32, #L>, tensor<1x128xf32, #L>) -> tensor<2x128xf32, #L>
  tile.return
}

// -----

//===----------------------------------------------------------------------===//
// Clusters
//===----------------------------------------------------------------------===//

// expected-error @+1 {{'tile.kernel' op min_blocks must be in [1, 4] (2048 threads per multiprocessor at most), got 5}}
tile.kernel @too_many_blocks() attributes {block_threads = 512 : i64, min_blocks = 5 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  tile.return
}

// -----

// expected-error @+1 {{'tile.kernel' op min_blocks must be in [1, 64] (2048 threads per multiprocessor at most), got 0}}
tile.kernel @no_blocks() attributes {block_threads = 32 : i64, min_blocks = 0 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  tile.return
}

// -----

// Read as a signed value, not wrapped around by a multiplication.
// expected-error @+1 {{'tile.kernel' op min_blocks must be in [1, 64] (2048 threads per multiprocessor at most), got -9223372036854775808}}
tile.kernel @int64_min_blocks() attributes {block_threads = 32 : i64, min_blocks = -9223372036854775808 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  tile.return
}

// -----

// expected-error @+1 {{'tile.kernel' op min_blocks must be in [1, 8] (2048 threads per multiprocessor at most), got 2305843009213693952}}
tile.kernel @wrapping_min_blocks() attributes {block_threads = 256 : i64, min_blocks = 2305843009213693952 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  tile.return
}

// -----

// expected-error @+1 {{'tile.kernel' op scratch_bytes must be in [0, 233472], got -1}}
tile.kernel @negative_scratch() attributes {block_threads = 32 : i64, scratch_bytes = -1 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  tile.return
}

// -----

// expected-error @+1 {{'tile.kernel' op cluster_rows must be in [0, 1024], got 4611686018427387904}}
tile.kernel @huge_cluster_rows() attributes {block_threads = 32 : i64, cluster_size = 2 : i64, cluster_rows = 4611686018427387904 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  tile.return
}

// -----

// expected-error @+1 {{'tile.kernel' op cluster_size must be in [1, 8], got 9}}
tile.kernel @cluster_of_nine() attributes {block_threads = 32 : i64, cluster_size = 9 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  tile.return
}

// -----

tile.kernel @rank_without_cluster() attributes {block_threads = 32 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  // expected-error @+1 {{'tile.cluster_rank' op needs a kernel with cluster_size of 2 or more}}
  %r = tile.cluster_rank
  tile.return
}

// -----

#L = #tile.blocked<vec = 1, rowThreads = 1, colThreads = 32>
#S = #tile.slice<dim = 1, parent = #L>
tile.kernel @cluster_reduce_without_cluster(%x: memref<?x32xf32>) attributes {block_threads = 32 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %t = tile.load %x[%c0, %c0] : memref<?x32xf32> -> tensor<1x32xf32, #L>
  // expected-error @+1 {{'tile.reduce' op needs a kernel with cluster_size of 2 or more}}
  %r = tile.reduce sum %t {dim = 1 : i64, cluster} : tensor<1x32xf32, #L> -> tensor<1xf32, #S>
  tile.return
}

// -----

#L = #tile.blocked<vec = 1, rowThreads = 1, colThreads = 32>
#S = #tile.slice<dim = 0, parent = #L>
tile.kernel @cluster_reduce_of_columns(%x: memref<?x32xf32>) attributes {block_threads = 32 : i64, cluster_size = 2 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %t = tile.load %x[%c0, %c0] : memref<?x32xf32> -> tensor<1x32xf32, #L>
  // expected-error @+1 {{'tile.reduce' op reduces across a cluster along rows only (dim = 1)}}
  %r = tile.reduce sum %t {dim = 0 : i64, cluster} : tensor<1x32xf32, #L> -> tensor<32xf32, #S>
  tile.return
}

//===----------------------------------------------------------------------===//
// Rings, barriers, TMA, tile.dot, tile.warp_specialize
//===----------------------------------------------------------------------===//

// -----

tile.kernel @ring_cols() attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  // expected-error @+1 {{!tile.ring cols must be whole 128-byte panels (a multiple of 64 'bf16' elements) up to 256, got 32}}
  %r = tile.alloc_ring : !tile.ring<stages = 2, rows = 64, cols = 32, bf16>
  tile.return
}

// -----

tile.kernel @ring_i32() attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  // expected-error @+1 {{!tile.ring holds bf16, f16 or f32 tiles, got 'i32'}}
  %r = tile.alloc_ring : !tile.ring<stages = 2, rows = 64, cols = 64, i32>
  tile.return
}

// -----

tile.kernel @dot_reg_f32(%d: memref<?x64xf32>) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %rb = tile.alloc_ring : !tile.ring<stages = 1, rows = 64, cols = 64, f32>
  %z = arith.constant 0.0 : f32
  %a = tile.splat %z : f32 -> tensor<64x64xf32, #tile.wgmma>
  %acc = tile.splat %z : f32 -> tensor<64x64xf32, #tile.wgmma>
  // expected-error @+1 {{'tile.dot_reg' op multiplies bf16 or f16 tiles, got 'f32'}}
  %r = tile.dot_reg %a, %rb[%c0, %c0], %acc : tensor<64x64xf32, #tile.wgmma>, !tile.ring<stages = 1, rows = 64, cols = 64, f32>, tensor<64x64xf32, #tile.wgmma> -> tensor<64x64xf32, #tile.wgmma>
  tile.return
}

// -----

tile.kernel @async_copy_f32(%a: memref<?x64xf32>) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %r = tile.alloc_ring : !tile.ring<stages = 2, rows = 64, cols = 64, f32>
  // expected-error @+1 {{'tile.async_copy' op copies bf16 or f16 tiles, got 'f32'}}
  tile.async_copy %a[%c0, %c0], %r[%c0] {vec = 4 : i64} : memref<?x64xf32>, !tile.ring<stages = 2, rows = 64, cols = 64, f32>
  tile.return
}

// -----

tile.kernel @ring_f32_cols() attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  // expected-error @+1 {{!tile.ring cols must be whole 128-byte panels (a multiple of 32 'f32' elements) up to 256, got 48}}
  %r = tile.alloc_ring : !tile.ring<stages = 2, rows = 64, cols = 48, f32>
  tile.return
}

// -----

tile.kernel @dot_f32(%d: memref<?x64xf32>) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %ra = tile.alloc_ring : !tile.ring<stages = 1, rows = 64, cols = 64, f32>
  %rb = tile.alloc_ring : !tile.ring<stages = 1, rows = 64, cols = 64, f32>
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<64x64xf32, #tile.wgmma>
  // expected-error @+1 {{'tile.dot' op multiplies bf16 or f16 tiles, got 'f32'}}
  %r = tile.dot %ra[%c0, %c0], %rb[%c0, %c0], %acc : !tile.ring<stages = 1, rows = 64, cols = 64, f32>, !tile.ring<stages = 1, rows = 64, cols = 64, f32>, tensor<64x64xf32, #tile.wgmma> -> tensor<64x64xf32, #tile.wgmma>
  tile.return
}

// -----

// expected-error @+1 {{!tile.tensormap box cols must be 128 bytes (64 'bf16' elements) for the 128-byte swizzle, got 32}}
tile.kernel @map_cols(%a: !tile.tensormap<rows = 64, cols = 32, bf16>) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  tile.return
}

// -----

// expected-error @+1 {{!tile.tensormap box cols must be 128 bytes (32 'f32' elements) for the 128-byte swizzle, got 64}}
tile.kernel @map_f32_cols(%a: !tile.tensormap<rows = 64, cols = 64, f32>) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  tile.return
}

// -----

tile.kernel @ring_not_top(%n: index) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.for %i = %c0 to %n step %c1 {
    // expected-error @+1 {{'tile.alloc_ring' op must be at the top level of a tile.kernel}}
    %r = tile.alloc_ring : !tile.ring<stages = 2, rows = 64, cols = 64, bf16>
  }
  tile.return
}

// -----

tile.kernel @tma_outside(%a: !tile.tensormap<rows = 64, cols = 64, bf16>) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %r = tile.alloc_ring : !tile.ring<stages = 2, rows = 64, cols = 64, bf16>
  %f = tile.alloc_barriers {arrivals = 1} : !tile.barriers<2>
  // expected-error @+1 {{'tile.tma_load' op must be inside a region of tile.warp_specialize}}
  tile.tma_load %a[%c0, %c0], %r[%c0], %f[%c0] : !tile.tensormap<rows = 64, cols = 64, bf16>, !tile.ring<stages = 2, rows = 64, cols = 64, bf16>, !tile.barriers<2>
  tile.return
}

// -----

tile.kernel @tma_box(%a: !tile.tensormap<rows = 32, cols = 64, bf16>) attributes {block_threads = 256 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %r = tile.alloc_ring : !tile.ring<stages = 2, rows = 64, cols = 64, bf16>
  %f = tile.alloc_barriers {arrivals = 1} : !tile.barriers<2>
  tile.warp_specialize attributes {consumers = 1, producer_regs = 40, consumer_regs = 232} {
    // expected-error @+1 {{'tile.tma_load' op box of 32 x 64 does not fill a panel of the ring's 64 x 64}}
    tile.tma_load %a[%c0, %c0], %r[%c0], %f[%c0] : !tile.tensormap<rows = 32, cols = 64, bf16>, !tile.ring<stages = 2, rows = 64, cols = 64, bf16>, !tile.barriers<2>
    tile.yield
  }, {
  ^bb0(%c: index):
    tile.yield
  }
  tile.return
}

// -----

tile.kernel @ws_threads() attributes {block_threads = 256 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  // expected-error @+1 {{'tile.warp_specialize' op needs 384 threads for a producer and 2 consumer warpgroups; the kernel has 256}}
  tile.warp_specialize attributes {consumers = 2, producer_regs = 40, consumer_regs = 232} {
    tile.yield
  }, {
  ^bb0(%c: index):
    tile.yield
  }
  tile.return
}

// -----

tile.kernel @ws_regs() attributes {block_threads = 384 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  // expected-error @+1 {{'tile.warp_specialize' op register limits ask for 70656 registers; a multiprocessor has 65536}}
  tile.warp_specialize attributes {consumers = 2, producer_regs = 40, consumer_regs = 256} {
    tile.yield
  }, {
  ^bb0(%c: index):
    tile.yield
  }
  tile.return
}

// -----

tile.kernel @dot_k(%d: memref<?x128xf32>) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %ra = tile.alloc_ring : !tile.ring<stages = 2, rows = 64, cols = 64, bf16>
  %rb = tile.alloc_ring : !tile.ring<stages = 2, rows = 128, cols = 128, bf16>
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<64x128xf32, #tile.wgmma>
  // expected-error @+1 {{'tile.dot' op A's stages hold K = 64 and B's K = 128}}
  %r = tile.dot %ra[%c0, %c0], %rb[%c0, %c0], %acc : !tile.ring<stages = 2, rows = 64, cols = 64, bf16>, !tile.ring<stages = 2, rows = 128, cols = 128, bf16>, tensor<64x128xf32, #tile.wgmma> -> tensor<64x128xf32, #tile.wgmma>
  tile.return
}

// -----

tile.kernel @dot_n(%d: memref<?x128xf32>) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %ra = tile.alloc_ring : !tile.ring<stages = 2, rows = 64, cols = 64, bf16>
  %rb = tile.alloc_ring : !tile.ring<stages = 2, rows = 64, cols = 64, bf16>
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<64x128xf32, #tile.wgmma>
  // expected-error @+1 {{'tile.dot' op N = 128 exceeds the 64 columns of B's stages}}
  %r = tile.dot %ra[%c0, %c0], %rb[%c0, %c0], %acc : !tile.ring<stages = 2, rows = 64, cols = 64, bf16>, !tile.ring<stages = 2, rows = 64, cols = 64, bf16>, tensor<64x128xf32, #tile.wgmma> -> tensor<64x128xf32, #tile.wgmma>
  tile.return
}

// -----

tile.kernel @wgmma_shape() attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %z = arith.constant 0.0 : f32
  // expected-error @+1 {{'tile.splat' op produces 'tensor<32x128xf32, #tile.wgmma>', whose shape does not fit #tile.wgmma (rows a multiple of 64, columns a multiple of 8 up to 256}}
  %acc = tile.splat %z : f32 -> tensor<32x128xf32, #tile.wgmma>
  tile.return
}

// -----
// Attention: A from registers, coordinate tiles, warpgroup row reductions,
// tensor maps of higher rank

tile.kernel @dot_reg_k(%d: memref<?x128xf32>) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %rb = tile.alloc_ring : !tile.ring<stages = 2, rows = 128, cols = 128, bf16>
  %z = arith.constant 0.0 : f32
  %zb = arith.constant 0.0 : bf16
  %acc = tile.splat %z : f32 -> tensor<64x128xf32, #tile.wgmma>
  %p = tile.splat %zb : bf16 -> tensor<64x64xbf16, #tile.wgmma>
  // expected-error @+1 {{'tile.dot_reg' op A holds K = 64 and B's stages K = 128}}
  %r = tile.dot_reg %p, %rb[%c0, %c0], %acc {b_mn_major = true} : tensor<64x64xbf16, #tile.wgmma>, !tile.ring<stages = 2, rows = 128, cols = 128, bf16>, tensor<64x128xf32, #tile.wgmma> -> tensor<64x128xf32, #tile.wgmma>
  tile.return
}

// -----

tile.kernel @dot_reg_type(%d: memref<?x128xf32>) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %rb = tile.alloc_ring : !tile.ring<stages = 2, rows = 64, cols = 128, bf16>
  %z = arith.constant 0.0 : f32
  %zh = arith.constant 0.0 : f16
  %acc = tile.splat %z : f32 -> tensor<64x128xf32, #tile.wgmma>
  %p = tile.splat %zh : f16 -> tensor<64x64xf16, #tile.wgmma>
  // expected-error @+1 {{'tile.dot_reg' op A is 'f16' and B 'bf16'}}
  %r = tile.dot_reg %p, %rb[%c0, %c0], %acc {b_mn_major = true} : tensor<64x64xf16, #tile.wgmma>, !tile.ring<stages = 2, rows = 64, cols = 128, bf16>, tensor<64x128xf32, #tile.wgmma> -> tensor<64x128xf32, #tile.wgmma>
  tile.return
}

// -----

tile.kernel @iota_type() attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  // expected-error @+1 {{'tile.iota' op makes an i32 tile, got 'tensor<64x64xf32, #tile.wgmma>'}}
  %i = tile.iota {dim = 1} : tensor<64x64xf32, #tile.wgmma>
  tile.return
}

// -----

tile.kernel @iota_dim() attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  // expected-error @+1 {{'tile.iota' op dim = 2 is not a dimension of 'tensor<64x64xi32, #tile.wgmma>'}}
  %i = tile.iota {dim = 2} : tensor<64x64xi32, #tile.wgmma>
  tile.return
}

// -----

tile.kernel @wgmma_columns(%w: memref<?x?xf32>) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'tile.load' op produces 'tensor<12xf32, #tile.slice<dim = 0, parent = #tile.wgmma>>', whose shape does not fit #tile.wgmma (rows a multiple of 64, columns a multiple of 8 up to 256; its slices rank 1, a column slice 8 to 256 long)}}
  %c = tile.load %w[%c0, %c0] : memref<?x?xf32> -> tensor<12xf32, #tile.slice<dim = 0, parent = #tile.wgmma>>
  tile.return
}

// -----

tile.kernel @tma_outer(%a: !tile.tensormap<rows = 64, cols = 64, bf16, rank = 4>) attributes {block_threads = 256 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %r = tile.alloc_ring : !tile.ring<stages = 2, rows = 64, cols = 64, bf16>
  %f = tile.alloc_barriers {arrivals = 1} : !tile.barriers<2>
  tile.warp_specialize attributes {consumers = 1, producer_regs = 40, consumer_regs = 232} {
    // expected-error @+1 {{'tile.tma_load' op a tensor map of rank 4 takes 2 outer coordinates, got 1}}
    tile.tma_load %a[%c0, %c0] at [%c0], %r[%c0], %f[%c0] : !tile.tensormap<rows = 64, cols = 64, bf16, rank = 4>, !tile.ring<stages = 2, rows = 64, cols = 64, bf16>, !tile.barriers<2>
    tile.yield
  }, {
  ^bb0(%c: index):
    tile.yield
  }
  tile.return
}

// -----

// expected-error @+1 {{!tile.tensormap rank must be in [2, 5], got 6}}
tile.kernel @map_rank(%a: !tile.tensormap<rows = 64, cols = 64, bf16, rank = 6>) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  tile.return
}

// -----

tile.kernel @dot_wait_pending() attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<64x64xf32, #tile.wgmma>
  // expected-error @+1 {{'tile.dot_wait' op pending must be in [0, 7], got 9}}
  %r = tile.dot_wait %acc {pending = 9 : i64} : tensor<64x64xf32, #tile.wgmma> -> tensor<64x64xf32, #tile.wgmma>
  tile.return
}

// -----
// Asynchronous copies without a copy engine (sm_80)

tile.kernel @async_copy_type(%a: memref<?x64xf16>) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %r = tile.alloc_ring : !tile.ring<stages = 2, rows = 64, cols = 64, bf16>
  // expected-error @+1 {{'tile.async_copy' op copies 'f16' into a ring of 'bf16'}}
  tile.async_copy %a[%c0, %c0], %r[%c0] {vec = 8 : i64} : memref<?x64xf16>, !tile.ring<stages = 2, rows = 64, cols = 64, bf16>
  tile.return
}

// -----

tile.kernel @async_copy_vec(%a: memref<?x64xbf16>) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %r = tile.alloc_ring : !tile.ring<stages = 2, rows = 64, cols = 64, bf16>
  // expected-error @+1 {{'tile.async_copy' op vec must be 1, 2, 4 or 8 elements (2, 4, 8 or 16 bytes), got 16}}
  tile.async_copy %a[%c0, %c0], %r[%c0] {vec = 16 : i64} : memref<?x64xbf16>, !tile.ring<stages = 2, rows = 64, cols = 64, bf16>
  tile.return
}

// -----

tile.kernel @async_copy_rows(%a: memref<?x63xbf16>) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %r = tile.alloc_ring : !tile.ring<stages = 2, rows = 64, cols = 64, bf16>
  // expected-error @+1 {{'tile.async_copy' op rows of 63 elements are not whole copies of vec = 8}}
  tile.async_copy %a[%c0, %c0], %r[%c0] {vec = 8 : i64} : memref<?x63xbf16>, !tile.ring<stages = 2, rows = 64, cols = 64, bf16>
  tile.return
}

// -----

tile.kernel @async_copy_rank(%a: memref<?xbf16>) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %r = tile.alloc_ring : !tile.ring<stages = 2, rows = 64, cols = 64, bf16>
  // expected-error @+1 {{'tile.async_copy' op copies from a rank-2 memref, got 'memref<?xbf16>'}}
  tile.async_copy %a[%c0, %c0], %r[%c0] {vec = 8 : i64} : memref<?xbf16>, !tile.ring<stages = 2, rows = 64, cols = 64, bf16>
  tile.return
}

// -----

tile.kernel @async_copy_specialized(%a: memref<?x64xbf16>) attributes {block_threads = 256 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %r = tile.alloc_ring : !tile.ring<stages = 2, rows = 64, cols = 64, bf16>
  tile.warp_specialize attributes {consumers = 1, producer_regs = 40, consumer_regs = 232} {
    // expected-error @+1 {{'tile.async_copy' op runs on every thread of the block; it cannot be inside tile.warp_specialize}}
    tile.async_copy %a[%c0, %c0], %r[%c0] {vec = 8 : i64} : memref<?x64xbf16>, !tile.ring<stages = 2, rows = 64, cols = 64, bf16>
    tile.yield
  }, {
  ^bb0(%i: index):
    tile.yield
  }
  tile.return
}

// -----

// expected-error @+1 {{'tile.async_wait' op must be inside a tile.kernel}}
tile.async_wait {pending = 1 : i64}

// -----

tile.kernel @async_wait_pending() attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  // expected-error @+1 {{'tile.async_wait' op pending must be in [0, 16], got 17}}
  tile.async_wait {pending = 17 : i64}
  tile.return
}

// -----

// expected-error @+1 {{'tile.async_commit' op must be inside a tile.kernel}}
tile.async_commit

// -----

tile.kernel @block_barrier_specialized() attributes {block_threads = 256 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  tile.warp_specialize attributes {consumers = 1, producer_regs = 40, consumer_regs = 232} {
    tile.yield
  }, {
  ^bb0(%i: index):
    // expected-error @+1 {{'tile.block_barrier' op runs on every thread of the block; it cannot be inside tile.warp_specialize}}
    tile.block_barrier
    tile.yield
  }
  tile.return
}

// -----

tile.kernel @warpgroup_id_threads() attributes {block_threads = 96 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  // expected-error @+1 {{'tile.warpgroup_id' op needs a kernel of whole warpgroups, not 96 threads}}
  %g = tile.warpgroup_id
  tile.return
}

// -----
// A tile into a ring stage; a store that adds

tile.kernel @store_ring_type(%d: memref<?x128xf32>) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %r = tile.alloc_ring : !tile.ring<stages = 2, rows = 64, cols = 64, bf16>
  %z = arith.constant 0.0 : f32
  %t = tile.splat %z : f32 -> tensor<64x64xf32, #tile.wgmma>
  // expected-error @+1 {{'tile.store_ring' op the tile is 'f32' and the ring 'bf16'}}
  tile.store_ring %t, %r[%c0, %c0] : tensor<64x64xf32, #tile.wgmma>, !tile.ring<stages = 2, rows = 64, cols = 64, bf16>
  tile.return
}

// -----

tile.kernel @store_ring_i32(%d: memref<?x128xf32>) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %r = tile.alloc_ring : !tile.ring<stages = 2, rows = 64, cols = 64, bf16>
  %t = tile.iota {dim = 0} : tensor<64x64xi32, #tile.wgmma>
  // expected-error @+1 {{'tile.store_ring' op stores a 16-bit or f32 #tile.wgmma tile, got 'tensor<64x64xi32, #tile.wgmma>'}}
  tile.store_ring %t, %r[%c0, %c0] : tensor<64x64xi32, #tile.wgmma>, !tile.ring<stages = 2, rows = 64, cols = 64, bf16>
  tile.return
}

// -----

tile.kernel @store_ring_shape(%d: memref<?x128xf32>) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %r = tile.alloc_ring : !tile.ring<stages = 2, rows = 64, cols = 128, bf16>
  %z = arith.constant 0.0 : bf16
  %t = tile.splat %z : bf16 -> tensor<64x64xbf16, #tile.wgmma>
  // expected-error @+1 {{'tile.store_ring' op a 64x64 tile does not fit whole rows of a stage of 64x128}}
  tile.store_ring %t, %r[%c0, %c0] : tensor<64x64xbf16, #tile.wgmma>, !tile.ring<stages = 2, rows = 64, cols = 128, bf16>
  tile.return
}

// -----

tile.kernel @store_ring_column(%d: memref<?x128xf32>) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %r = tile.alloc_ring : !tile.ring<stages = 2, rows = 64, cols = 64, bf16>
  %z = arith.constant 0.0 : bf16
  %t = tile.splat %z : bf16 -> tensor<64x32xbf16, #tile.wgmma>
  // expected-error @+1 {{'tile.store_ring' op column 4 must be a multiple of 8 (whole 16-byte chunks of a row)}}
  tile.store_ring %t, %r[%c0, %c0, %c4] : tensor<64x32xbf16, #tile.wgmma>, !tile.ring<stages = 2, rows = 64, cols = 64, bf16>
  tile.return
}

// -----

tile.kernel @store_ring_past_the_stage(%d: memref<?x128xf32>) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %c48 = arith.constant 48 : index
  %r = tile.alloc_ring : !tile.ring<stages = 2, rows = 64, cols = 64, bf16>
  %z = arith.constant 0.0 : bf16
  %t = tile.splat %z : bf16 -> tensor<64x32xbf16, #tile.wgmma>
  // expected-error @+1 {{'tile.store_ring' op columns 48 to 80 pass the stage's 64}}
  tile.store_ring %t, %r[%c0, %c0, %c48] : tensor<64x32xbf16, #tile.wgmma>, !tile.ring<stages = 2, rows = 64, cols = 64, bf16>
  tile.return
}

// -----

tile.kernel @store_add_type(%d: memref<?x64xbf16>) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %z = arith.constant 0.0 : f32
  %t = tile.splat %z : f32 -> tensor<64x64xf32, #tile.wgmma>
  // expected-error @+1 {{'tile.store' op adds f32 tiles into f32 memory only, got 'f32' into 'bf16'}}
  tile.store %t, %d[%c0, %c0] {add} : tensor<64x64xf32, #tile.wgmma>, memref<?x64xbf16>
  tile.return
}

// -----

tile.kernel @store_add_streaming(%d: memref<?x64xf32>) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %z = arith.constant 0.0 : f32
  %t = tile.splat %z : f32 -> tensor<64x64xf32, #tile.wgmma>
  // expected-error @+1 {{'tile.store' op takes `add` or `streaming`, not both}}
  tile.store %t, %d[%c0, %c0] {add, streaming} : tensor<64x64xf32, #tile.wgmma>, memref<?x64xf32>
  tile.return
}

// -----

tile.kernel @tma_store_outside_consumer(%m: !tile.tensormap<rows = 64, cols = 64, bf16>) attributes {block_threads = 256 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %r = tile.alloc_ring : !tile.ring<stages = 2, rows = 64, cols = 64, bf16>
  tile.warp_specialize attributes {consumers = 1, producer_regs = 40, consumer_regs = 232} {
    // expected-error @+1 {{'tile.tma_store' op must be in the consumer or the helper region of tile.warp_specialize}}
    tile.tma_store %r[%c0], %m[%c0, %c0] : !tile.ring<stages = 2, rows = 64, cols = 64, bf16>, !tile.tensormap<rows = 64, cols = 64, bf16>
    tile.yield
  }, {
  ^bb0(%c: index):
    tile.yield
  }
  tile.return
}

// -----

tile.kernel @tma_store_outer(%m: !tile.tensormap<rows = 64, cols = 32, f32, rank = 4>) attributes {block_threads = 256 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %r = tile.alloc_ring : !tile.ring<stages = 2, rows = 64, cols = 64, f32>
  tile.warp_specialize attributes {consumers = 1, producer_regs = 40, consumer_regs = 232} {
    tile.yield
  }, {
  ^bb0(%c: index):
    // expected-error @+1 {{'tile.tma_store' op a tensor map of rank 4 takes 2 outer coordinates, got 1}}
    tile.tma_store %r[%c0], %m[%c0, %c0] at [%c0] {reduce} : !tile.ring<stages = 2, rows = 64, cols = 64, f32>, !tile.tensormap<rows = 64, cols = 32, f32, rank = 4>
    tile.yield
  }
  tile.return
}

// -----

tile.kernel @tma_store_box(%m: !tile.tensormap<rows = 128, cols = 64, bf16>) attributes {block_threads = 256 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %r = tile.alloc_ring : !tile.ring<stages = 2, rows = 64, cols = 64, bf16>
  tile.warp_specialize attributes {consumers = 1, producer_regs = 40, consumer_regs = 232} {
    tile.yield
  }, {
  ^bb0(%c: index):
    // expected-error @+1 {{'tile.tma_store' op box of 128 x 64 does not fill a panel of the ring's 64 x 64}}
    tile.tma_store %r[%c0], %m[%c0, %c0] : !tile.ring<stages = 2, rows = 64, cols = 64, bf16>, !tile.tensormap<rows = 128, cols = 64, bf16>
    tile.yield
  }
  tile.return
}

// -----

tile.kernel @tma_store_wait_outside(%d: memref<?x64xf32>) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  // expected-error @+1 {{'tile.tma_store_wait' op must be inside a region of tile.warp_specialize}}
  tile.tma_store_wait {pending = 0 : i64}
  tile.return
}

// -----

tile.kernel @slice_offsets(%d: memref<?x128xbf16>) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %one = arith.constant 1.0 : bf16
  %t = tile.splat %one : bf16 -> tensor<64x128xbf16, #tile.wgmma>
  // expected-error @+1 {{'tile.slice' op offsets [0, 4] are not whole 64-row blocks and 8-column groups}}
  %p = tile.slice %t [0, 4] : tensor<64x128xbf16, #tile.wgmma> -> tensor<64x64xbf16, #tile.wgmma>
  tile.return
}

// -----

tile.kernel @slice_bounds(%d: memref<?x128xbf16>) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %one = arith.constant 1.0 : bf16
  %t = tile.splat %one : bf16 -> tensor<64x128xbf16, #tile.wgmma>
  // expected-error @+1 {{'tile.slice' op a 64x64 part at [0, 96] is not inside the 64x128 tile}}
  %p = tile.slice %t [0, 96] : tensor<64x128xbf16, #tile.wgmma> -> tensor<64x64xbf16, #tile.wgmma>
  tile.return
}

// -----

tile.kernel @flag_type(%f: memref<?xbf16>, %t: index) attributes {block_threads = 256 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  tile.warp_specialize attributes {consumers = 1, producer_regs = 40, consumer_regs = 232} {
    tile.yield
  }, {
  ^bb0(%c: index):
    // expected-error @+1 {{'tile.flag_wait' op flags are the 32-bit words of an f32 memref, got 'memref<?xbf16>'}}
    tile.flag_wait %f[%t], %t : memref<?xbf16>
    tile.yield
  }
  tile.return
}

// -----

tile.kernel @flag_indices(%f: memref<?x2xf32>, %t: index) attributes {block_threads = 256 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  tile.warp_specialize attributes {consumers = 1, producer_regs = 40, consumer_regs = 232} {
    tile.yield
  }, {
  ^bb0(%c: index):
    // expected-error @+1 {{'tile.flag_set' op a memref of rank 2 takes 2 indices, got 1}}
    tile.flag_set %f[%t], %t : memref<?x2xf32>
    tile.yield
  }
  tile.return
}

// -----

tile.kernel @flag_outside(%f: memref<?xf32>, %t: index) attributes {block_threads = 256 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  tile.warp_specialize attributes {consumers = 1, producer_regs = 40, consumer_regs = 232} {
    // expected-error @+1 {{'tile.flag_set' op must be in the consumer or the helper region of tile.warp_specialize}}
    tile.flag_set %f[%t], %t : memref<?xf32>
    tile.yield
  }, {
  ^bb0(%c: index):
    tile.yield
  }
  tile.return
}

// -----

// A multicast copy needs the kernel in clusters of as many blocks.
tile.kernel @multicast_no_cluster(%b: !tile.tensormap<rows = 128, cols = 64, bf16>) attributes {block_threads = 256 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %rb = tile.alloc_ring : !tile.ring<stages = 2, rows = 256, cols = 64, bf16>
  %full = tile.alloc_barriers {arrivals = 1} : !tile.barriers<2>
  tile.warp_specialize attributes {consumers = 1, producer_regs = 40, consumer_regs = 232} {
    // expected-error @+1 {{'tile.tma_load' op multicast = 2 needs a kernel in clusters of 2, got cluster_size = 1}}
    tile.tma_load %b[%c0, %c0], %rb[%c0], %full[%c0] {multicast = 2} : !tile.tensormap<rows = 128, cols = 64, bf16>, !tile.ring<stages = 2, rows = 256, cols = 64, bf16>, !tile.barriers<2>
    tile.yield
  }, {
  ^bb0(%c: index):
    tile.yield
  }
  tile.return
}

// -----

// Its boxes must split evenly over the cluster.
tile.kernel @multicast_uneven(%b: !tile.tensormap<rows = 256, cols = 64, bf16>) attributes {block_threads = 256 : i64, cluster_size = 2 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %rb = tile.alloc_ring : !tile.ring<stages = 2, rows = 256, cols = 64, bf16>
  %full = tile.alloc_barriers {arrivals = 1} : !tile.barriers<2>
  tile.warp_specialize attributes {consumers = 1, producer_regs = 40, consumer_regs = 232} {
    // expected-error @+1 {{'tile.tma_load' op the stage's 1 boxes do not split over 2 blocks}}
    tile.tma_load %b[%c0, %c0], %rb[%c0], %full[%c0] {multicast = 2} : !tile.tensormap<rows = 256, cols = 64, bf16>, !tile.ring<stages = 2, rows = 256, cols = 64, bf16>, !tile.barriers<2>
    tile.yield
  }, {
  ^bb0(%c: index):
    tile.yield
  }
  tile.return
}

// -----

// Arriving across a cluster needs one.
tile.kernel @arrive_no_cluster() attributes {block_threads = 256 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %empty = tile.alloc_barriers {arrivals = 1} : !tile.barriers<2>
  tile.warp_specialize attributes {consumers = 1, producer_regs = 40, consumer_regs = 232} {
    tile.yield
  }, {
  ^bb0(%c: index):
    // expected-error @+1 {{'tile.barrier_arrive' op arrives across a cluster, but its kernel has no cluster_size}}
    tile.barrier_arrive %empty[%c0] {cluster} : !tile.barriers<2>
    tile.yield
  }
  tile.return
}

// -----
// A row of a ring stage into registers

tile.kernel @load_ring_rank(%d: memref<?x128xf32>) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %r = tile.alloc_ring : !tile.ring<stages = 2, rows = 8, cols = 64, f32>
  // expected-error @+1 {{'tile.load_ring' op reads one row into a rank-1 tile, got 'tensor<64x64xf32, #tile.wgmma>'}}
  %t = tile.load_ring %r[%c0, %c0] : !tile.ring<stages = 2, rows = 8, cols = 64, f32> -> tensor<64x64xf32, #tile.wgmma>
  tile.return
}

// -----

tile.kernel @load_ring_type(%d: memref<?x128xf32>) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %r = tile.alloc_ring : !tile.ring<stages = 2, rows = 8, cols = 64, bf16>
  // expected-error @+1 {{'tile.load_ring' op the tile is 'f32' and the ring 'bf16'}}
  %t = tile.load_ring %r[%c0, %c0] : !tile.ring<stages = 2, rows = 8, cols = 64, bf16> -> tensor<64xf32, #tile.slice<dim = 0, parent = #tile.wgmma>>
  tile.return
}

// -----

tile.kernel @load_ring_length(%d: memref<?x128xf32>) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %r = tile.alloc_ring : !tile.ring<stages = 2, rows = 8, cols = 32, f32>
  // expected-error @+1 {{'tile.load_ring' op a tile of 64 elements is longer than the ring's 32 columns}}
  %t = tile.load_ring %r[%c0, %c0] : !tile.ring<stages = 2, rows = 8, cols = 32, f32> -> tensor<64xf32, #tile.slice<dim = 0, parent = #tile.wgmma>>
  tile.return
}

// -----

tile.kernel @load_ring_row(%d: memref<?x128xf32>) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %c8 = arith.constant 8 : index
  %r = tile.alloc_ring : !tile.ring<stages = 2, rows = 8, cols = 64, f32>
  // expected-error @+1 {{'tile.load_ring' op row 8 is outside the ring's 8 rows}}
  %t = tile.load_ring %r[%c0, %c8] : !tile.ring<stages = 2, rows = 8, cols = 64, f32> -> tensor<64xf32, #tile.slice<dim = 0, parent = #tile.wgmma>>
  tile.return
}

// -----

tile.kernel @load_ring_column(%d: memref<?x128xf32>) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %c40 = arith.constant 40 : index
  %r = tile.alloc_ring : !tile.ring<stages = 2, rows = 8, cols = 64, f32>
  // expected-error @+1 {{'tile.load_ring' op columns 40 to 72 pass the ring's 64}}
  %t = tile.load_ring %r[%c0, %c0, %c40] : !tile.ring<stages = 2, rows = 8, cols = 64, f32> -> tensor<32xf32, #tile.slice<dim = 0, parent = #tile.wgmma>>
  tile.return
}

// -----

tile.kernel @load_ring_chunk(%d: memref<?x128xf32>) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %c6 = arith.constant 6 : index
  %r = tile.alloc_ring : !tile.ring<stages = 2, rows = 8, cols = 64, f32>
  // expected-error @+1 {{'tile.load_ring' op column 6 must be a multiple of 4 (a 16-byte chunk)}}
  %t = tile.load_ring %r[%c0, %c0, %c6] : !tile.ring<stages = 2, rows = 8, cols = 64, f32> -> tensor<32xf32, #tile.slice<dim = 0, parent = #tile.wgmma>>
  tile.return
}

// -----

tile.kernel @store_ring_pair(%d: memref<?x128xf32>) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %c3 = arith.constant 3 : index
  %r = tile.alloc_ring : !tile.ring<stages = 2, rows = 64, cols = 64, f32>
  %z = arith.constant 0.0 : f32
  %t = tile.splat %z : f32 -> tensor<64x32xf32, #tile.wgmma>
  // expected-error @+1 {{'tile.store_ring' op column 3 must be a multiple of 2 (8-byte pairs)}}
  tile.store_ring %t, %r[%c0, %c0, %c3] : tensor<64x32xf32, #tile.wgmma>, !tile.ring<stages = 2, rows = 64, cols = 64, f32>
  tile.return
}

// -----

tile.kernel @load_ring_padded(%d: memref<?x128xf32>) attributes {block_threads = 32 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %r = tile.alloc_ring : !tile.ring<stages = 2, rows = 8, cols = 64, f32>
  // expected-error @+1 {{'tile.load_ring' op the layout places elements up to column 127 of a 64-element tile: a row is read without masks, so every element must be one of its columns}}
  %t = tile.load_ring %r[%c0, %c0] : !tile.ring<stages = 2, rows = 8, cols = 64, f32> -> tensor<64xf32, #tile.slice<dim = 0, parent = #tile.blocked<vec = 4, rowThreads = 1, colThreads = 32>>>
  tile.return
}

// -----

tile.kernel @load_word_type(%cu: memref<?xbf16>, %t: index) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  // expected-error @+1 {{'tile.load_word' op reads the 32-bit words of an f32 memref, got 'memref<?xbf16>'}}
  %w = tile.load_word %cu[%t] : memref<?xbf16>
  tile.return
}

// -----

tile.kernel @load_word_indices(%cu: memref<?x2xf32>, %t: index) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  // expected-error @+1 {{'tile.load_word' op a memref of rank 2 takes 2 indices, got 1}}
  %w = tile.load_word %cu[%t] : memref<?x2xf32>
  tile.return
}

// -----

tile.kernel @narrow_static(%o: memref<64x512xf32>, %t: index) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  // expected-error @+1 {{'tile.narrow' op narrows a dynamic first dimension, got 'memref<64x512xf32>'}}
  %v = tile.narrow %o[%t, %t] : memref<64x512xf32>
  tile.return
}

// -----

tile.kernel @helper_with_argument() attributes {block_threads = 256 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  // expected-error @+1 {{'tile.warp_specialize' op helper region must have one entry block without arguments}}
  tile.warp_specialize attributes {consumers = 1, producer_regs = 40, consumer_regs = 232} {
    tile.yield
  }, {
  ^bb0(%c: index):
    tile.yield
  }, helper {
  ^bb0(%h: index):
    tile.yield
  }
  tile.return
}

// -----

tile.kernel @warpgroup_op_in_helper() attributes {block_threads = 256 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %r = tile.alloc_ring : !tile.ring<stages = 1, rows = 64, cols = 64, f32>
  tile.warp_specialize attributes {consumers = 1, producer_regs = 40, consumer_regs = 232} {
    tile.yield
  }, {
  ^bb0(%c: index):
    tile.yield
  }, helper {
    %one = arith.constant 1.0 : f32
    // expected-error @+1 {{'tile.splat' op cannot run in the helper region of tile.warp_specialize, which is one thread}}
    %t = tile.splat %one : f32 -> tensor<64x64xf32, #tile.wgmma>
    tile.store_ring %t, %r[%c0, %c0] : tensor<64x64xf32, #tile.wgmma>, !tile.ring<stages = 1, rows = 64, cols = 64, f32>
    tile.yield
  }
  tile.return
}

// -----

#acc = #tile.wgmma
tile.kernel @fragments_of_bf16() attributes {block_threads = 256 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %r = tile.alloc_ring : !tile.ring<stages = 1, rows = 64, cols = 64, bf16>
  tile.warp_specialize attributes {consumers = 1, producer_regs = 40, consumer_regs = 232} {
    tile.yield
  }, {
  ^bb0(%c: index):
    %one = arith.constant 1.0 : bf16
    %t = tile.splat %one : bf16 -> tensor<64x64xbf16, #acc>
    // expected-error @+1 {{stores fragments of an f32 tile, without a column offset}}
    tile.store_ring %t, %r[%c0, %c0] {fragments} : tensor<64x64xbf16, #acc>, !tile.ring<stages = 1, rows = 64, cols = 64, bf16>
    tile.yield
  }
  tile.return
}

// -----

tile.kernel @bulk_reduce_bf16(%m: memref<?x64xbf16>) attributes {block_threads = 256 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %r = tile.alloc_ring : !tile.ring<stages = 1, rows = 64, cols = 64, bf16>
  tile.warp_specialize attributes {consumers = 1, producer_regs = 40, consumer_regs = 232} {
    tile.yield
  }, {
  ^bb0(%c: index):
    // expected-error @+1 {{adds an f32 stage into f32 memory}}
    tile.bulk_reduce %r[%c0], %m[%c0, %c0] : !tile.ring<stages = 1, rows = 64, cols = 64, bf16>, memref<?x64xbf16>
    tile.yield
  }
  tile.return
}

// -----

tile.kernel @bulk_reduce_strided(%m: memref<?x64xf32, strided<[?, 1]>>) attributes {block_threads = 256 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %r = tile.alloc_ring : !tile.ring<stages = 1, rows = 64, cols = 64, f32>
  tile.warp_specialize attributes {consumers = 1, producer_regs = 40, consumer_regs = 232} {
    tile.yield
  }, {
  ^bb0(%c: index):
    // expected-error @+1 {{adds into consecutive elements: the memref's rows must be dense}}
    tile.bulk_reduce %r[%c0], %m[%c0, %c0] : !tile.ring<stages = 1, rows = 64, cols = 64, f32>, memref<?x64xf32, strided<[?, 1]>>
    tile.yield
  }
  tile.return
}

// -----

#acc = #tile.wgmma
tile.kernel @load_fragments_in_producer(%m: memref<?x64xf32>) attributes {block_threads = 256 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  tile.warp_specialize attributes {consumers = 1, producer_regs = 40, consumer_regs = 232} {
    // expected-error @+1 {{reads a warpgroup's tile: outside tile.warp_specialize or in its consumer region}}
    %t = tile.load_fragments %m[%c0, %c0] : memref<?x64xf32> -> tensor<64x64xf32, #acc>
    tile.yield
  }, {
  ^bb0(%c: index):
    tile.yield
  }
  tile.return
}

// -----

#acc = #tile.wgmma
tile.kernel @load_fragments_bf16(%m: memref<?x64xbf16>) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{loads an f32 #tile.wgmma tile from f32 memory}}
  %t = tile.load_fragments %m[%c0, %c0] : memref<?x64xbf16> -> tensor<64x64xf32, #acc>
  tile.return
}

// -----

#acc = #tile.wgmma
tile.kernel @fragments_past_the_stage() attributes {block_threads = 256 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %c32 = arith.constant 32 : index
  %r = tile.alloc_ring : !tile.ring<stages = 1, rows = 64, cols = 64, f32>
  tile.warp_specialize attributes {consumers = 1, producer_regs = 40, consumer_regs = 232} {
    tile.yield
  }, {
  ^bb0(%c: index):
    %one = arith.constant 1.0 : f32
    %t = tile.splat %one : f32 -> tensor<64x64xf32, #acc>
    // expected-error @+1 {{a tile of 4096 elements from row 32 does not fit a stage of 64x64}}
    tile.store_ring %t, %r[%c0, %c32] {fragments} : tensor<64x64xf32, #acc>, !tile.ring<stages = 1, rows = 64, cols = 64, f32>
    tile.yield
  }
  tile.return
}

// -----

tile.kernel @fetch_add_in_consumer(%counter: memref<?xf32>) attributes {block_threads = 256 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  tile.warp_specialize attributes {consumers = 1, producer_regs = 40, consumer_regs = 232} {
    tile.yield
  }, {
  ^bb0(%c: index):
    // expected-error @+1 {{'tile.fetch_add' op must be in the producer or the helper region of tile.warp_specialize}}
    %t = tile.fetch_add %counter[%c0], %c : memref<?xf32>
    tile.yield
  }
  tile.return
}

// -----

tile.kernel @fetch_add_type(%counter: memref<?xbf16>) attributes {block_threads = 256 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  tile.warp_specialize attributes {consumers = 1, producer_regs = 40, consumer_regs = 232} {
    // expected-error @+1 {{'tile.fetch_add' op adds to the 32-bit words of an f32 memref, got 'memref<?xbf16>'}}
    %t = tile.fetch_add %counter[%c0], %c0 : memref<?xbf16>
    tile.yield
  }, {
  ^bb0(%c: index):
    tile.yield
  }
  tile.return
}

// -----

tile.kernel @set_word_in_consumer() attributes {block_threads = 256 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %slots = tile.alloc_words : !tile.words<2>
  tile.warp_specialize attributes {consumers = 1, producer_regs = 40, consumer_regs = 232} {
    tile.yield
  }, {
  ^bb0(%c: index):
    // expected-error @+1 {{'tile.set_word' op must be in the producer or the helper region of tile.warp_specialize}}
    tile.set_word %slots[%c], %c : !tile.words<2>
    tile.yield
  }
  tile.return
}

// -----

tile.kernel @alloc_words_nested(%n: index) attributes {block_threads = 256 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.for %i = %c0 to %n step %c1 {
    // expected-error @+1 {{'tile.alloc_words' op must be at the top level of a tile.kernel}}
    %slots = tile.alloc_words : !tile.words<2>
  }
  tile.return
}

// -----

tile.kernel @words_count() attributes {block_threads = 256 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  // expected-error @+1 {{!tile.words count must be in [1, 64], got 0}}
  %slots = tile.alloc_words : !tile.words<0>
  tile.return
}

// -----

tile.kernel @get_word_of_no_word() attributes {block_threads = 256 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %slots = tile.alloc_words : !tile.words<2>
  tile.warp_specialize attributes {consumers = 1, producer_regs = 40, consumer_regs = 232} {
    tile.yield
  }, {
  ^bb0(%c: index):
    // expected-error @+1 {{'tile.get_word' op reads no word: give it at least one index}}
    tile.get_word %slots[] : !tile.words<2>
    tile.yield
  }
  tile.return
}

// -----

tile.kernel @get_word_in_producer() attributes {block_threads = 256 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %slots = tile.alloc_words : !tile.words<2>
  tile.warp_specialize attributes {consumers = 1, producer_regs = 40, consumer_regs = 232} {
    // expected-error @+1 {{'tile.get_word' op must be in the consumer or the helper region of tile.warp_specialize}}
    %t = tile.get_word %slots[%c0] : !tile.words<2>
    tile.yield
  }, {
  ^bb0(%c: index):
    tile.yield
  }
  tile.return
}
