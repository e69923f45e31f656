// RUN: tilejit-opt %s --split-input-file --tile-allocate-shared --convert-tile-to-llvm | FileCheck %s

// Rows a stride apart, the stride given at launch: the memref's struct holds
// the pointer, the two sizes and the row stride. A #tile.wgmma tile places
// each thread's elements on two rows 8 apart: the second row's accesses
// start from their own address (8 strides on), with the same constant
// offsets as the first's. Strides are multiples of 16 bytes, so a row of
// 255 columns still moves its whole runs as vectors (dense rows of 255
// would shift every other row's runs off their alignment).

// CHECK-LABEL: llvm.func @strided_rows(
// CHECK-SAME: %[[D:.*]]: !llvm.struct<(ptr<1>, i64, i64, i64)>, %[[C:.*]]: !llvm.struct<(ptr<1>, i64, i64, i64)>)
// CHECK: llvm.extractvalue %[[C]][3]
// CHECK: %[[CP:.*]] = llvm.extractvalue %[[C]][0]
// CHECK: %[[R0:.*]] = llvm.getelementptr %[[CP]][%{{.*}}]
// CHECK: %[[R8:.*]] = llvm.getelementptr %[[R0]][%{{.*}}]
// CHECK: "@$2 ld.global.b32 $0, [$1+0];", "=r,l,b,0" %[[R0]],
// CHECK: "@$2 ld.global.b32 $0, [$1+0];", "=r,l,b,0" %[[R8]],
// CHECK: "@$2 ld.global.b32 $0, [$1+16];", "=r,l,b,0" %[[R0]],
// CHECK: llvm.extractvalue %[[D]][3]
// CHECK: %[[DP:.*]] = llvm.extractvalue %[[D]][0]
// CHECK: %[[S0:.*]] = llvm.getelementptr %[[DP]][%{{.*}}]
// CHECK: %[[S8:.*]] = llvm.getelementptr %[[S0]][%{{.*}}]
// CHECK: "@$3 st.global.v2.f32 [$0+0], {$1, $2};", "l,f,f,b" %[[S0]],
// CHECK: "@$3 st.global.v2.f32 [$0+0], {$1, $2};", "l,f,f,b" %[[S8]],
// CHECK: "@$3 st.global.v2.f32 [$0+32], {$1, $2};", "l,f,f,b" %[[S0]],
tile.kernel @strided_rows(%d: memref<?x255xf32, strided<[?, 1]>>, %c: memref<?x255xbf16, strided<[?, 1]>>) attributes {block_threads = 128 : i64, grid = affine_map<()[s0] -> (s0)>, grid_operands = array<i64: 0, 0>} {
  %c0 = arith.constant 0 : index
  %pid = tile.program_id x
  %x = tile.load %c[%pid, %c0] : memref<?x255xbf16, strided<[?, 1]>> -> tensor<64x64xf32, #tile.wgmma>
  tile.store %x, %d[%pid, %c0] : tensor<64x64xf32, #tile.wgmma>, memref<?x255xf32, strided<[?, 1]>>
  tile.return
}

// -----

// A static stride is a constant: the second row's runs are offsets from
// the first row's address (8 rows of 264 f32, 8448 bytes on).

// CHECK-LABEL: llvm.func @static_stride(
// CHECK-SAME: !llvm.struct<(ptr<1>, i64, i64, i64)>
// CHECK: "@$3 st.global.v2.f32 [$0+0], {$1, $2};", "l,f,f,b" %[[P:[0-9]+]],
// CHECK: "@$3 st.global.v2.f32 [$0+8448], {$1, $2};", "l,f,f,b" %[[P]],
tile.kernel @static_stride(%d: memref<?x255xf32, strided<[264, 1]>>) attributes {block_threads = 128 : i64, grid = affine_map<()[s0] -> (s0)>, grid_operands = array<i64: 0, 0>} {
  %c0 = arith.constant 0 : index
  %f1 = arith.constant 1.0 : f32
  %pid = tile.program_id x
  %x = tile.splat %f1 : f32 -> tensor<64x64xf32, #tile.wgmma>
  tile.store %x, %d[%pid, %c0] : tensor<64x64xf32, #tile.wgmma>, memref<?x255xf32, strided<[264, 1]>>
  tile.return
}
