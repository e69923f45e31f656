// RUN: tilejit-opt %s --tile-lower-to-emitc --verify-diagnostics

// The C++ back end's views have dense rows: a kernel taking rows a stride
// apart is refused by name (the NVPTX back end lowers it).
// expected-error @+1 {{kernel 'strided_rows': argument 0 ('memref<?x256xbf16, strided<[?, 1]>>') has row strides, which the C++ back end does not take (the NVPTX back end does)}}
tile.kernel @strided_rows(%x: memref<?x256xbf16, strided<[?, 1]>>) attributes {block_threads = 32 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  tile.return
}
