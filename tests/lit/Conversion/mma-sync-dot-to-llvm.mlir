// RUN: tilejit-opt %s --split-input-file --tilejit-lower-to-llvm=arch=sm_80 | FileCheck %s
// RUN: tilejit-opt %s --split-input-file --tilejit-lower-to-llvm=arch=sm_86 | FileCheck %s
// RUN: tilejit-opt %s --split-input-file --tilejit-lower-to-llvm=arch=sm_90a | FileCheck %s --check-prefix=WGMMA

// tile.dot below sm_90a: a 64 x 64 accumulator over K = 64 (four steps of
// 16) is, per warp and step, one ldmatrix.x4 of A (its 16 rows), four of B
// (pairs of 8-column tiles) and eight mma.sync m16n8k16; K-major A and B
// are read as stored. The same op on sm_90a is one wgmma per step.
// CHECK-LABEL: llvm.func @dot_nt
// CHECK-NOT: wgmma
// CHECK: llvm.xor
// CHECK: nvvm.ldmatrix %{{.*}} {eltType = #nvvm.ld_st_matrix_elt_type<b16>, layout = #nvvm.mma_layout<row>, num = 4 : i32, shape = #nvvm.ld_st_matrix_shape<m = 8, n = 8>} : (!llvm.ptr<3>) -> !llvm.struct<(i32, i32, i32, i32)>
// CHECK-COUNT-4: nvvm.ldmatrix %{{.*}} {eltType = #nvvm.ld_st_matrix_elt_type<b16>, layout = #nvvm.mma_layout<row>, num = 4 : i32
// CHECK-COUNT-8: nvvm.mma.sync A[{{.*}}] B[{{.*}}] C[{{.*}}] {layoutA = #nvvm.mma_layout<row>, layoutB = #nvvm.mma_layout<col>, multiplicandAPtxType = #nvvm.mma_type<bf16>, multiplicandBPtxType = #nvvm.mma_type<bf16>, shape = #nvvm.shape<m = 16, n = 8, k = 16>} : (i32, i32, f32) -> !llvm.struct<(f32, f32, f32, f32)>
// CHECK-COUNT-3: nvvm.ldmatrix
// CHECK-NOT: nvvm.mma.sync A[{{.*}}] B[{{.*}}] C[{{.*}}] {{.*}}layout = #nvvm.mma_layout<col>
// WGMMA-LABEL: llvm.func @dot_nt
// WGMMA-NOT: mma.sync
// WGMMA-COUNT-4: wgmma.mma_async
tile.kernel @dot_nt(%d: memref<?x64xf32>) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %f0 = arith.constant 0.0 : f32
  %a = tile.alloc_ring : !tile.ring<stages = 2, rows = 64, cols = 64, bf16>
  %b = tile.alloc_ring : !tile.ring<stages = 2, rows = 64, cols = 64, bf16>
  %z = tile.splat %f0 : f32 -> tensor<64x64xf32, #tile.wgmma>
  %r = tile.dot %a[%c0, %c0], %b[%c0, %c0], %z : !tile.ring<stages = 2, rows = 64, cols = 64, bf16>, !tile.ring<stages = 2, rows = 64, cols = 64, bf16>, tensor<64x64xf32, #tile.wgmma> -> tensor<64x64xf32, #tile.wgmma>
  tile.store %r, %d[%c0, %c0] : tensor<64x64xf32, #tile.wgmma>, memref<?x64xf32>
  tile.return
}

// -----

// MN-major operands (A stored K x M, B K x N: the ring's rows are K) are
// read transposed, f16 fragments pass as pairs of f16; a 128-row
// accumulator is two 16-row strips per warp, each with its own A fragment.
// CHECK-LABEL: llvm.func @dot_tn_f16
// CHECK-COUNT-2: nvvm.ldmatrix %{{.*}} {eltType = #nvvm.ld_st_matrix_elt_type<b16>, layout = #nvvm.mma_layout<col>, num = 4 : i32
// CHECK: nvvm.ldmatrix %{{.*}} {eltType = #nvvm.ld_st_matrix_elt_type<b16>, layout = #nvvm.mma_layout<col>, num = 4 : i32
// CHECK-COUNT-4: nvvm.mma.sync A[{{.*}}] B[{{.*}}] C[{{.*}}] {layoutA = #nvvm.mma_layout<row>, layoutB = #nvvm.mma_layout<col>, shape = #nvvm.shape<m = 16, n = 8, k = 16>} : (vector<2xf16>, vector<2xf16>, f32) -> !llvm.struct<(f32, f32, f32, f32)>
// CHECK-NOT: layout = #nvvm.mma_layout<row>, num = 4
// CHECK: llvm.return
tile.kernel @dot_tn_f16(%d: memref<?x64xf32>) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %f0 = arith.constant 0.0 : f32
  %a = tile.alloc_ring : !tile.ring<stages = 2, rows = 64, cols = 128, f16>
  %b = tile.alloc_ring : !tile.ring<stages = 2, rows = 64, cols = 64, f16>
  %z = tile.splat %f0 : f32 -> tensor<128x64xf32, #tile.wgmma>
  %r = tile.dot %a[%c0, %c0], %b[%c0, %c0], %z {a_mn_major = true, b_mn_major = true} : !tile.ring<stages = 2, rows = 64, cols = 128, f16>, !tile.ring<stages = 2, rows = 64, cols = 64, f16>, tensor<128x64xf32, #tile.wgmma> -> tensor<128x64xf32, #tile.wgmma>
  tile.store %r, %d[%c0, %c0] : tensor<128x64xf32, #tile.wgmma>, memref<?x64xf32>
  tile.return
}

// -----

// overwrite: the accumulator's values (here loaded, so not zeros) are not
// read; the first step's products start from one constant (zero) where the
// loaded values would be four different ones.
// CHECK-LABEL: llvm.func @dot_overwrite
// CHECK: nvvm.mma.sync A[{{.*}}] B[{{.*}}] C[%[[Z:[0-9]+]], %[[Z]], %[[Z]], %[[Z]]]
// CHECK: llvm.return
// WGMMA-LABEL: llvm.func @dot_overwrite
// WGMMA-COUNT-4: wgmma.mma_async
tile.kernel @dot_overwrite(%d: memref<?x64xf32>) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %a = tile.alloc_ring : !tile.ring<stages = 2, rows = 64, cols = 64, bf16>
  %b = tile.alloc_ring : !tile.ring<stages = 2, rows = 64, cols = 64, bf16>
  %acc = tile.load %d[%c0, %c0] : memref<?x64xf32> -> tensor<64x64xf32, #tile.wgmma>
  %r = tile.dot %a[%c0, %c0], %b[%c0, %c0], %acc {overwrite} : !tile.ring<stages = 2, rows = 64, cols = 64, bf16>, !tile.ring<stages = 2, rows = 64, cols = 64, bf16>, tensor<64x64xf32, #tile.wgmma> -> tensor<64x64xf32, #tile.wgmma>
  tile.store %r, %d[%c0, %c0] : tensor<64x64xf32, #tile.wgmma>, memref<?x64xf32>
  tile.return
}

// -----

// tile.dot_reg below sm_90a: P V of attention with P in registers. A's
// fragment for each 16 of K is four words packed from the register tile (no
// ldmatrix of A); B, stored K x N (V's rows are the keys), is read
// transposed. 64 rows, K = 32 keys, N = 64: per warp two steps, each of
// four ldmatrix.x4 .trans of B, each followed by the two mma.sync of its
// pair of 8-column tiles.
// CHECK-LABEL: llvm.func @dot_reg_pv
// CHECK-NOT: layout = #nvvm.mma_layout<row>, num = 4
// CHECK: nvvm.ldmatrix %{{.*}} {eltType = #nvvm.ld_st_matrix_elt_type<b16>, layout = #nvvm.mma_layout<col>, num = 4 : i32
// CHECK-NEXT: llvm.extractvalue
// CHECK: nvvm.mma.sync A[{{.*}}] B[{{.*}}] C[{{.*}}] {layoutA = #nvvm.mma_layout<row>, layoutB = #nvvm.mma_layout<col>, multiplicandAPtxType = #nvvm.mma_type<bf16>, multiplicandBPtxType = #nvvm.mma_type<bf16>, shape = #nvvm.shape<m = 16, n = 8, k = 16>}
// CHECK: nvvm.mma.sync
// CHECK: nvvm.ldmatrix %{{.*}} {eltType = #nvvm.ld_st_matrix_elt_type<b16>, layout = #nvvm.mma_layout<col>, num = 4 : i32
// CHECK-COUNT-2: nvvm.mma.sync
// CHECK: nvvm.ldmatrix %{{.*}} {eltType = #nvvm.ld_st_matrix_elt_type<b16>, layout = #nvvm.mma_layout<col>, num = 4 : i32
// CHECK-COUNT-2: nvvm.mma.sync
// CHECK: nvvm.ldmatrix %{{.*}} {eltType = #nvvm.ld_st_matrix_elt_type<b16>, layout = #nvvm.mma_layout<col>, num = 4 : i32
// CHECK-COUNT-2: nvvm.mma.sync
// CHECK: nvvm.ldmatrix %{{.*}} {eltType = #nvvm.ld_st_matrix_elt_type<b16>, layout = #nvvm.mma_layout<col>, num = 4 : i32
// CHECK-COUNT-2: nvvm.mma.sync
// CHECK: nvvm.ldmatrix %{{.*}} {eltType = #nvvm.ld_st_matrix_elt_type<b16>, layout = #nvvm.mma_layout<col>, num = 4 : i32
// CHECK-COUNT-2: nvvm.mma.sync
// CHECK: nvvm.ldmatrix %{{.*}} {eltType = #nvvm.ld_st_matrix_elt_type<b16>, layout = #nvvm.mma_layout<col>, num = 4 : i32
// CHECK-COUNT-2: nvvm.mma.sync
// CHECK: nvvm.ldmatrix %{{.*}} {eltType = #nvvm.ld_st_matrix_elt_type<b16>, layout = #nvvm.mma_layout<col>, num = 4 : i32
// CHECK-COUNT-2: nvvm.mma.sync
// CHECK-NOT: nvvm.mma.sync
// CHECK: llvm.return
// WGMMA-LABEL: llvm.func @dot_reg_pv
// WGMMA-COUNT-2: wgmma.mma_async
tile.kernel @dot_reg_pv(%d: memref<?x64xf32>, %p: memref<?x32xf32>) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %f0 = arith.constant 0.0 : f32
  %v = tile.alloc_ring : !tile.ring<stages = 2, rows = 32, cols = 64, bf16>
  %z = tile.splat %f0 : f32 -> tensor<64x64xf32, #tile.wgmma>
  %pf = tile.load %p[%c0, %c0] : memref<?x32xf32> -> tensor<64x32xf32, #tile.wgmma>
  %pb = arith.truncf %pf : tensor<64x32xf32, #tile.wgmma> to tensor<64x32xbf16, #tile.wgmma>
  %r = tile.dot_reg %pb, %v[%c0, %c0], %z {b_mn_major = true} : tensor<64x32xbf16, #tile.wgmma>, !tile.ring<stages = 2, rows = 32, cols = 64, bf16>, tensor<64x64xf32, #tile.wgmma> -> tensor<64x64xf32, #tile.wgmma>
  tile.store %r, %d[%c0, %c0] : tensor<64x64xf32, #tile.wgmma>, memref<?x64xf32>
  tile.return
}
