// RUN: tilejit-opt %s --convert-tile-to-llvm --verify-diagnostics

// The lowering reads where shared memory lies; it does not work it out.

// expected-error @+1 {{kernel 'unplaced' has no scratch_bytes: run tile-allocate-shared first}}
tile.kernel @unplaced(%x: memref<?xf32>) attributes {block_threads = 32 : i64, grid = affine_map<()[s0] -> (s0)>, grid_operands = array<i64: 0, 0>} {
  tile.return
}
