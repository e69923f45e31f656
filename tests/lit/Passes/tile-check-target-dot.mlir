// RUN: tilejit-opt %s --split-input-file --verify-diagnostics --tile-check-target=arch=sm_80
// RUN: tilejit-opt %s --split-input-file --verify-diagnostics --tile-check-target=arch=sm_89

// tile.dot and tile.dot_reg run on every target (mma.sync below sm_90a),
// but only sm_90a starts them asynchronously, and warp specialization is
// sm_90a's.
tile.kernel @dot_async(%d: memref<?x64xf32>) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %f0 = arith.constant 0.0 : f32
  %a = tile.alloc_ring : !tile.ring<stages = 2, rows = 64, cols = 64, bf16>
  %z = tile.splat %f0 : f32 -> tensor<64x64xf32, #tile.wgmma>
  %s = tile.dot %a[%c0, %c0], %a[%c0, %c0], %z : !tile.ring<stages = 2, rows = 64, cols = 64, bf16>, !tile.ring<stages = 2, rows = 64, cols = 64, bf16>, tensor<64x64xf32, #tile.wgmma> -> tensor<64x64xf32, #tile.wgmma>
  // expected-error @+1 {{'tile.dot' with async needs sm_90a (wgmma); the target is}}
  %r = tile.dot %a[%c0, %c0], %a[%c0, %c0], %s {async} : !tile.ring<stages = 2, rows = 64, cols = 64, bf16>, !tile.ring<stages = 2, rows = 64, cols = 64, bf16>, tensor<64x64xf32, #tile.wgmma> -> tensor<64x64xf32, #tile.wgmma>
  tile.return
}

// -----

tile.kernel @specialized() attributes {block_threads = 256 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  // expected-error @+1 {{'tile.warp_specialize' needs sm_90a (wgmma, setmaxnreg); the target is}}
  tile.warp_specialize attributes {consumers = 1, producer_regs = 40, consumer_regs = 232} {
    tile.yield
  }, {
  ^bb0(%i: index):
    tile.yield
  }
  tile.return
}

// -----

tile.kernel @dot_reg_async(%d: memref<?x64xf32>) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %f0 = arith.constant 0.0 : f32
  %v = tile.alloc_ring : !tile.ring<stages = 2, rows = 64, cols = 64, bf16>
  %z = tile.splat %f0 : f32 -> tensor<64x64xf32, #tile.wgmma>
  %p = tile.splat %f0 : f32 -> tensor<64x64xf32, #tile.wgmma>
  %pb = arith.truncf %p : tensor<64x64xf32, #tile.wgmma> to tensor<64x64xbf16, #tile.wgmma>
  // Without async it passes (mma.sync).
  %s = tile.dot_reg %pb, %v[%c0, %c0], %z {b_mn_major = true} : tensor<64x64xbf16, #tile.wgmma>, !tile.ring<stages = 2, rows = 64, cols = 64, bf16>, tensor<64x64xf32, #tile.wgmma> -> tensor<64x64xf32, #tile.wgmma>
  // expected-error @+1 {{'tile.dot_reg' with async needs sm_90a (wgmma); the target is}}
  %r = tile.dot_reg %pb, %v[%c0, %c0], %s {async, b_mn_major = true} : tensor<64x64xbf16, #tile.wgmma>, !tile.ring<stages = 2, rows = 64, cols = 64, bf16>, tensor<64x64xf32, #tile.wgmma> -> tensor<64x64xf32, #tile.wgmma>
  tile.return
}
