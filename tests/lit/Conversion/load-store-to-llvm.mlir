// RUN: tilejit-opt %s --split-input-file --tile-allocate-shared --convert-tile-to-llvm | FileCheck %s

// A run that lies wholly inside the row for every thread moves as 16-byte
// vector accesses under the row's predicate alone, with no element accesses.
// Thread t holds row t / 64 and columns (k * 64 + t % 64) * 8 + [0, 8): base
// offset (t % 64) * 8, runs 512 columns (1024 bytes) apart.

// CHECK-LABEL: llvm.func @whole_runs(
// CHECK: nvvm.read.ptx.sreg.tid.x
// CHECK: llvm.urem %{{.*}}, %{{.*}} : i64
// CHECK: "@$5 ld.global.v4.b32 {$0, $1, $2, $3}, [$4+0];", "=r,=r,=r,=r,l,b,0,1,2,3"
// CHECK: "@$5 ld.global.v4.b32 {$0, $1, $2, $3}, [$4+1024];", "=r,=r,=r,=r,l,b,0,1,2,3"
// CHECK-NOT: u16
// bf16 widens to f32 by words: the low half shifted up, the high half masked.
// CHECK: llvm.bitcast %{{.*}} : vector<16xbf16> to vector<8xi32>
// CHECK: llvm.shl
// CHECK: llvm.and
// CHECK: llvm.bitcast %{{.*}} : vector<16xi32> to vector<16xf32>
// CHECK: llvm.fptrunc %{{.*}} : vector<16xf32> to vector<16xbf16>
// CHECK: "@$5 st.global.cs.v4.b32 [$0+0], {$1, $2, $3, $4};", "l,r,r,r,r,b"
// CHECK: "@$5 st.global.cs.v4.b32 [$0+1024], {$1, $2, $3, $4};", "l,r,r,r,r,b"
// CHECK-NOT: u16
#L = #tile.blocked<vec = 8, rowThreads = 1, colThreads = 64>
tile.kernel @whole_runs(%x: memref<1x1024xbf16>, %y: memref<1x1024xbf16>) attributes {block_threads = 64 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %t = tile.load %x[%c0, %c0] : memref<1x1024xbf16> -> tensor<1x1024xf32, #L>
  tile.store %t, %y[%c0, %c0] {streaming} : tensor<1x1024xf32, #L>, memref<1x1024xbf16>
  tile.return
}

// -----

// Rows of a dynamic count: every access is predicated on its row; a masked-off
// load keeps the padding (-inf here, 0xff80 in bf16) tied to its outputs.
// A streaming load bypasses L1.

// CHECK-LABEL: llvm.func @ragged_rows(
// CHECK: llvm.icmp "slt"
// CHECK: llvm.mlir.constant(0xFF80 : bf16)
// CHECK: "@$5 ld.global.L1::no_allocate.v4.b32 {$0, $1, $2, $3}, [$4+0];", "=r,=r,=r,=r,l,b,0,1,2,3"
// CHECK: "@$5 st.global.v4.b32 [$0+0], {$1, $2, $3, $4};", "l,r,r,r,r,b"
#L = #tile.blocked<vec = 8, rowThreads = 2, colThreads = 32>
tile.kernel @ragged_rows(%x: memref<?x256xbf16>, %y: memref<?x256xbf16>) attributes {block_threads = 64 : i64, grid = affine_map<()[s0] -> (s0)>, grid_operands = array<i64: 0, 0>} {
  %c0 = arith.constant 0 : index
  %pid = tile.program_id x
  %t = tile.load %x[%pid, %c0] {padding = 0xFFF0000000000000 : f64, streaming} : memref<?x256xbf16> -> tensor<2x256xbf16, #L>
  tile.store %t, %y[%pid, %c0] : tensor<2x256xbf16, #L>, memref<?x256xbf16>
  tile.return
}

// -----

// A row of 1001 columns: the last run of 8 is whole for some lanes only. It
// takes the vector access when it lies inside, element accesses (each under
// its own column's predicate, and not where the vector one ran) otherwise.
// Runs 0 to 2 are whole for every lane: vector accesses only.

// CHECK-LABEL: llvm.func @ragged_columns(
// CHECK: "@$5 ld.global.v4.f32 {$0, $1, $2, $3}, [$4+0];", "=f,=f,=f,=f,l,b,0,1,2,3"
// CHECK-NOT: ld.global.f32
// CHECK: "@$5 ld.global.v4.f32 {$0, $1, $2, $3}, [$4+2064];", "=f,=f,=f,=f,l,b,0,1,2,3"
// CHECK-NOT: ld.global.f32
// CHECK: "@$5 ld.global.v4.f32 {$0, $1, $2, $3}, [$4+3072];", "=f,=f,=f,=f,l,b,0,1,2,3"
// CHECK: "@$2 ld.global.f32 $0, [$1+3072];", "=f,l,b,0"
// CHECK: "@$2 ld.global.f32 $0, [$1+3100];", "=f,l,b,0"
// CHECK-NOT: ld.global
// CHECK: "@$5 st.global.v4.f32 [$0+2064], {$1, $2, $3, $4};", "l,f,f,f,f,b"
// CHECK: "@$5 st.global.v4.f32 [$0+3072], {$1, $2, $3, $4};", "l,f,f,f,f,b"
// CHECK: "@$2 st.global.f32 [$0+3100], $1;", "l,f,b"
#L = #tile.blocked<vec = 8, rowThreads = 1, colThreads = 32>
tile.kernel @ragged_columns(%x: memref<1x1001xf32>, %y: memref<1x1001xf32>) attributes {block_threads = 32 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %t = tile.load %x[%c0, %c0] : memref<1x1001xf32> -> tensor<1x1001xf32, #L>
  tile.store %t, %y[%c0, %c0] : tensor<1x1001xf32, #L>, memref<1x1001xf32>
  tile.return
}

// -----

// Of the copies of a dim = 0 slice, row 0 of threads stores; of a dim = 1
// slice, lane 0 of each row.

// CHECK-LABEL: llvm.func @slices(
// CHECK: "@$2 ld.global.f32 $0, [$1+0];"
// CHECK: llvm.udiv %{{.*}}, %{{.*}} : i64
// CHECK: llvm.icmp "eq"
// CHECK: "@$2 st.global.f32 [$0+0], $1;", "l,f,b"
// CHECK: llvm.urem
// CHECK: llvm.icmp "eq"
// CHECK: "@$2 st.global.u16 [$0+0], $1;", "l,h,b"
#L = #tile.blocked<vec = 1, rowThreads = 4, colThreads = 8>
#C = #tile.slice<dim = 0, parent = #L>
#R = #tile.slice<dim = 1, parent = #L>
tile.kernel @slices(%acc: memref<?xf32>, %rows: memref<?xbf16>) attributes {block_threads = 32 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %a = tile.load %acc[%c0] : memref<?xf32> -> tensor<8xf32, #C>
  tile.store %a, %acc[%c0] : tensor<8xf32, #C>, memref<?xf32>
  %one = arith.constant 1.0 : f32
  %r = tile.splat %one : f32 -> tensor<4xf32, #R>
  tile.store %r, %rows[%c0] : tensor<4xf32, #R>, memref<?xbf16>
  tile.return
}
