// RUN: tilejit-opt %s | tilejit-opt | FileCheck %s
// RUN: tilejit-opt %s --mlir-print-op-generic | tilejit-opt | FileCheck %s

// Packed sequences: a program reads where its sequence starts and ends
// (cu_seqlens, integers in the words of an f32 memref), then stores its rows
// through a view of that sequence's rows only.

#row = #tile.blocked<vec = 4, rowThreads = 1, colThreads = 128>
// CHECK-LABEL: tile.kernel @one_sequence
tile.kernel @one_sequence(%cu: memref<?xf32>, %o: memref<?x512xf32>, %seq: index) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  // CHECK: %[[S:.*]] = load_word %{{.*}}[%{{.*}}] : memref<?xf32>
  %start = tile.load_word %cu[%seq] : memref<?xf32>
  %next = arith.addi %seq, %c1 : index
  // CHECK: load_word %{{.*}}[%{{.*}}] : memref<?xf32>
  %end = tile.load_word %cu[%next] : memref<?xf32>
  %len = arith.subi %end, %start : index
  // CHECK: %[[V:.*]] = narrow %{{.*}}[%[[S]], %{{.*}}] : memref<?x512xf32>
  %mine = tile.narrow %o[%start, %len] : memref<?x512xf32>
  %one = arith.constant 1.0 : f32
  %t = tile.splat %one : f32 -> tensor<1x512xf32, #row>
  // CHECK: store %{{.*}}, %[[V]]
  tile.store %t, %mine[%c0, %c0] : tensor<1x512xf32, #row>, memref<?x512xf32>
  tile.return
}
