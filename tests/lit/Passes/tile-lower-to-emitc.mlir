// RUN: tilejit-opt %s --split-input-file --tile-check-target --tile-lower-to-emitc | FileCheck %s
// RUN: tilejit-opt %s --split-input-file --tile-lower-to-emitc | FileCheck %s
// RUN: tilejit-opt %s --split-input-file --tile-check-target --tile-lower-to-emitc \
// RUN:   | mlir-translate --split-input-file --mlir-to-cpp | FileCheck %s --check-prefix=CPP

// The second RUN line shows the lowering computes the shared scratch itself
// when --tile-check-target has not recorded it.

//===----------------------------------------------------------------------===//
// Loads and stores of all three layouts, reductions and broadcasts along both
// dimensions, splat, extf/truncf, math on a tile and on a scalar, memref.dim,
// the grid queries, and a persistent scf.for carrying a tile.
//===----------------------------------------------------------------------===//

// CHECK:      emitc.include "prelude.cuh"
// CHECK-NEXT: emitc.include "frag.cuh"
// CHECK-NEXT: emitc.include "memory.cuh"
// CHECK-NEXT: emitc.include "reduce.cuh"
// CHECK-LABEL: emitc.func @layouts(
// CHECK-SAME: %[[X:[a-z0-9]+]]: !emitc.opaque<"tj::View<tj::bf16, 2>">, %[[W:[a-z0-9]+]]: !emitc.opaque<"tj::View<float, 1>">, %[[Y:[a-z0-9]+]]: !emitc.opaque<"tj::View<tj::bf16, 2>">,
// CHECK-SAME: %[[RS:[a-z0-9]+]]: !emitc.opaque<"tj::View<float, 1>">, %[[CM:[a-z0-9]+]]: !emitc.opaque<"tj::View<float, 2>">, %[[EPS:[a-z0-9]+]]: f32)
// CHECK-SAME: attributes {specifiers = ["extern \22C\22 __global__ __launch_bounds__(256)"]} {
// The column reduction is the larger: 2 * 128 * 8 * 4 bytes = 2048 floats.
// CHECK-NEXT: verbatim "__shared__ float tj_scratch[2048];"
// CHECK-NEXT: %[[PID:.+]] = call_opaque "tj::program_id_x"() : () -> !emitc.size_t
// CHECK-NEXT: %[[NP:.+]] = call_opaque "tj::num_programs_x"() : () -> !emitc.size_t
// CHECK-NEXT: %[[C0:.+]] = "emitc.constant"() <{value = 0 : index}> : () -> !emitc.size_t
// CHECK-NEXT: %[[C2:.+]] = "emitc.constant"() <{value = 2 : index}> : () -> !emitc.size_t
// CHECK-NEXT: %[[ROWS:.+]] = call_opaque "tj::dim"(%[[X]]) {template_args = [#emitc.opaque<"0">]} : (!emitc.opaque<"tj::View<tj::bf16, 2>">) -> !emitc.size_t
// CHECK-NEXT: %[[FIRST:.+]] = mul %[[PID]], %[[C2]] : (!emitc.size_t, !emitc.size_t) -> !emitc.size_t
// CHECK-NEXT: %[[STEP:.+]] = mul %[[NP]], %[[C2]] : (!emitc.size_t, !emitc.size_t) -> !emitc.size_t
//
// A slice of columns (dim = 0) of a rank-1 memref: one index; padding 0.
// CHECK-NEXT: %[[P0:.+]] = "emitc.constant"() <{value = 0.000000e+00 : f32}> : () -> f32
// CHECK-NEXT: %[[I0:.+]] = call_opaque "tj::idx"(%[[C0]]) : (!emitc.size_t) -> !emitc.opaque<"tj::Index<1>">
// CHECK-NEXT: %[[WT:.+]] = call_opaque "tj::load_cols"(%[[W]], %[[I0]], %[[P0]]) {template_args = [#emitc.opaque<"float">, #emitc.opaque<"4">, #emitc.opaque<"2">, #emitc.opaque<"128">, #emitc.opaque<"2">, #emitc.opaque<"1024">, #emitc.opaque<"0">, #emitc.opaque<"tj::kCached">]} : (!emitc.opaque<"tj::View<float, 1>">, !emitc.opaque<"tj::Index<1>">, f32) -> !emitc.opaque<"tj::Frag<float, 8>">
//
// The same layout from a rank-2 memref at a leading index, padded with -inf.
// (C++ spells it -INFINITY, which NVRTC does not define without <math.h>.)
// CHECK-NEXT: %[[NINF:.+]] = "emitc.constant"() <{value = 0xFF800000 : f32}> : () -> f32
// CHECK-NEXT: %[[I1:.+]] = call_opaque "tj::idx"(%[[PID]], %[[C0]]) : (!emitc.size_t, !emitc.size_t) -> !emitc.opaque<"tj::Index<2>">
// CHECK-NEXT: %[[INIT:.+]] = call_opaque "tj::load_cols"(%[[CM]], %[[I1]], %[[NINF]]) {template_args = [#emitc.opaque<"float">, #emitc.opaque<"4">, #emitc.opaque<"2">, #emitc.opaque<"128">, #emitc.opaque<"2">, #emitc.opaque<"1024">, #emitc.opaque<"0">, #emitc.opaque<"tj::kCoherent">]} : (!emitc.opaque<"tj::View<float, 2>">, !emitc.opaque<"tj::Index<2>">, f32) -> !emitc.opaque<"tj::Frag<float, 8>">
//
// math.rsqrt of an f32 scalar calls the library too; splat of a per-row slice
// (one element per thread).
// CHECK-NEXT: %[[REPS:.+]] = call_opaque "tj::rsqrt"(%[[EPS]]) : (f32) -> f32
// CHECK-NEXT: %[[ES:.+]] = call_opaque "tj::splat"(%[[REPS]]) {template_args = [#emitc.opaque<"1">]} : (f32) -> !emitc.opaque<"tj::Frag<float, 1>">
//
// The tile iter_arg becomes a variable assigned before the loop, read at the
// top of each iteration and assigned at its end.
// CHECK-NEXT: %[[ACCV:.+]] = "emitc.variable"() <{value = #emitc.opaque<"">}> : () -> !emitc.lvalue<!emitc.opaque<"tj::Frag<float, 8>">>
// CHECK-NEXT: assign %[[INIT]] : !emitc.opaque<"tj::Frag<float, 8>"> to %[[ACCV]]
// CHECK-NEXT: for %[[R:.+]] = %[[FIRST]] to %[[ROWS]] step %[[STEP]] : !emitc.size_t {
// CHECK-NEXT:   %[[ACC:.+]] = load %[[ACCV]] : <!emitc.opaque<"tj::Frag<float, 8>">>
//
// A blocked tile: 2 x 1024 bf16 over 2 x 128 threads of 4-wide vectors is
// 2 chunks and 8 elements per thread.
// CHECK-NEXT:   %[[PZ:.+]] = "emitc.constant"() <{value = 0.000000e+00 : f32}> : () -> f32
// CHECK-NEXT:   %[[I2:.+]] = call_opaque "tj::idx"(%[[R]], %[[C0]]) : (!emitc.size_t, !emitc.size_t) -> !emitc.opaque<"tj::Index<2>">
// CHECK-NEXT:   %[[T:.+]] = call_opaque "tj::load_tile"(%[[X]], %[[I2]], %[[PZ]]) {template_args = [#emitc.opaque<"tj::bf16">, #emitc.opaque<"4">, #emitc.opaque<"2">, #emitc.opaque<"128">, #emitc.opaque<"2">, #emitc.opaque<"1024">, #emitc.opaque<"0">, #emitc.opaque<"tj::kCached">]} : (!emitc.opaque<"tj::View<tj::bf16, 2>">, !emitc.opaque<"tj::Index<2>">, f32) -> !emitc.opaque<"tj::Frag<tj::bf16, 8>">
// CHECK-NEXT:   %[[F:.+]] = call_opaque "tj::convert"(%[[T]]) {template_args = [#emitc.opaque<"float">]} : (!emitc.opaque<"tj::Frag<tj::bf16, 8>">) -> !emitc.opaque<"tj::Frag<float, 8>">
// CHECK-NEXT:   %[[SQ:.+]] = call_opaque "tj::mul"(%[[F]], %[[F]]) : (!emitc.opaque<"tj::Frag<float, 8>">, !emitc.opaque<"tj::Frag<float, 8>">) -> !emitc.opaque<"tj::Frag<float, 8>">
//
// Row reduction: template arguments kind (sum = 0), rowThreads, colThreads,
// elements per thread.
// CHECK-NEXT:   %[[SCR1:.+]] = literal "tj_scratch" : !emitc.ptr<f32>
// CHECK-NEXT:   %[[S:.+]] = call_opaque "tj::reduce_row"(%[[SQ]], %[[SCR1]]) {template_args = [#emitc.opaque<"0">, #emitc.opaque<"2">, #emitc.opaque<"128">, #emitc.opaque<"8">]} : (!emitc.opaque<"tj::Frag<float, 8>">, !emitc.ptr<f32>) -> !emitc.opaque<"tj::Frag<float, 1>">
//
// A per-row slice (dim = 1): element type, rowThreads, colThreads only.
// CHECK-NEXT:   %[[P1:.+]] = "emitc.constant"() <{value = 1.000000e+00 : f32}> : () -> f32
// CHECK-NEXT:   %[[I3:.+]] = call_opaque "tj::idx"(%[[R]]) : (!emitc.size_t) -> !emitc.opaque<"tj::Index<1>">
// CHECK-NEXT:   %[[OLD:.+]] = call_opaque "tj::load_rows"(%[[RS]], %[[I3]], %[[P1]]) {template_args = [#emitc.opaque<"float">, #emitc.opaque<"2">, #emitc.opaque<"128">]} : (!emitc.opaque<"tj::View<float, 1>">, !emitc.opaque<"tj::Index<1>">, f32) -> !emitc.opaque<"tj::Frag<float, 1>">
// CHECK-NEXT:   %[[S2:.+]] = call_opaque "tj::add"(%[[S]], %[[OLD]])
// CHECK-NEXT:   %[[N:.+]] = call_opaque "tj::mul"(%[[S2]], %[[ES]])
// CHECK-NEXT:   %[[INV:.+]] = call_opaque "tj::rsqrt"(%[[N]]) : (!emitc.opaque<"tj::Frag<float, 1>">) -> !emitc.opaque<"tj::Frag<float, 1>">
// CHECK-NEXT:   %[[I4:.+]] = call_opaque "tj::idx"(%[[R]]) : (!emitc.size_t) -> !emitc.opaque<"tj::Index<1>">
// CHECK-NEXT:   call_opaque "tj::store_rows"(%[[INV]], %[[RS]], %[[I4]]) {template_args = [#emitc.opaque<"float">, #emitc.opaque<"2">, #emitc.opaque<"128">]} : (!emitc.opaque<"tj::Frag<float, 1>">, !emitc.opaque<"tj::View<float, 1>">, !emitc.opaque<"tj::Index<1>">) -> ()
//
// Broadcasting a per-row value calls the library; broadcasting a column slice
// (dim = 0) emits nothing: its fragment is used as is.
// CHECK-NEXT:   %[[B1:.+]] = call_opaque "tj::broadcast_row"(%[[INV]]) {template_args = [#emitc.opaque<"8">]} : (!emitc.opaque<"tj::Frag<float, 1>">) -> !emitc.opaque<"tj::Frag<float, 8>">
// CHECK-NEXT:   %[[M:.+]] = call_opaque "tj::mul"(%[[F]], %[[B1]])
// CHECK-NEXT:   %[[M2:.+]] = call_opaque "tj::mul"(%[[M]], %[[WT]]) : (!emitc.opaque<"tj::Frag<float, 8>">, !emitc.opaque<"tj::Frag<float, 8>">) -> !emitc.opaque<"tj::Frag<float, 8>">
// CHECK-NEXT:   %[[O:.+]] = call_opaque "tj::convert"(%[[M2]]) {template_args = [#emitc.opaque<"tj::bf16">]} : (!emitc.opaque<"tj::Frag<float, 8>">) -> !emitc.opaque<"tj::Frag<tj::bf16, 8>">
// CHECK-NEXT:   %[[I5:.+]] = call_opaque "tj::idx"(%[[R]], %[[C0]]) : (!emitc.size_t, !emitc.size_t) -> !emitc.opaque<"tj::Index<2>">
// CHECK-NEXT:   call_opaque "tj::store_tile"(%[[O]], %[[Y]], %[[I5]]) {template_args = [#emitc.opaque<"tj::bf16">, #emitc.opaque<"4">, #emitc.opaque<"2">, #emitc.opaque<"128">, #emitc.opaque<"2">, #emitc.opaque<"1024">, #emitc.opaque<"0">, #emitc.opaque<"tj::kCached">]} : (!emitc.opaque<"tj::Frag<tj::bf16, 8>">, !emitc.opaque<"tj::View<tj::bf16, 2>">, !emitc.opaque<"tj::Index<2>">) -> ()
//
// Column reduction (max = 1).
// CHECK-NEXT:   %[[SCR2:.+]] = literal "tj_scratch" : !emitc.ptr<f32>
// CHECK-NEXT:   %[[MX:.+]] = call_opaque "tj::reduce_col"(%[[M2]], %[[SCR2]]) {template_args = [#emitc.opaque<"1">, #emitc.opaque<"2">, #emitc.opaque<"128">, #emitc.opaque<"8">]} : (!emitc.opaque<"tj::Frag<float, 8>">, !emitc.ptr<f32>) -> !emitc.opaque<"tj::Frag<float, 8>">
// CHECK-NEXT:   %[[A:.+]] = call_opaque "tj::max"(%[[ACC]], %[[MX]])
// CHECK-NEXT:   assign %[[A]] : !emitc.opaque<"tj::Frag<float, 8>"> to %[[ACCV]]
// CHECK-NEXT: }
// CHECK-NEXT: %[[RES:.+]] = load %[[ACCV]]
// CHECK-NEXT: %[[I6:.+]] = call_opaque "tj::idx"(%[[PID]], %[[C0]]) : (!emitc.size_t, !emitc.size_t) -> !emitc.opaque<"tj::Index<2>">
// CHECK-NEXT: call_opaque "tj::store_cols"(%[[RES]], %[[CM]], %[[I6]]) {template_args = [#emitc.opaque<"float">, #emitc.opaque<"4">, #emitc.opaque<"2">, #emitc.opaque<"128">, #emitc.opaque<"2">, #emitc.opaque<"1024">, #emitc.opaque<"0">, #emitc.opaque<"tj::kCached">]} : (!emitc.opaque<"tj::Frag<float, 8>">, !emitc.opaque<"tj::View<float, 2>">, !emitc.opaque<"tj::Index<2>">) -> ()
// CHECK-NEXT: return
// CHECK-NEXT: }
// CHECK-NOT: tile.
// CHECK-NOT: tj::broadcast

// CPP:      #include "prelude.cuh"
// CPP-NEXT: #include "frag.cuh"
// CPP-NEXT: #include "memory.cuh"
// CPP-NEXT: #include "reduce.cuh"
// CPP-NEXT: extern "C" __global__ __launch_bounds__(256) void layouts(tj::View<tj::bf16, 2> [[X:v[0-9]+]], tj::View<float, 1> [[W:v[0-9]+]], tj::View<tj::bf16, 2> [[Y:v[0-9]+]], tj::View<float, 1> [[RS:v[0-9]+]], tj::View<float, 2> [[CM:v[0-9]+]], float [[EPS:v[0-9]+]]) {
// CPP-NEXT: __shared__ float tj_scratch[2048];
// CPP-NEXT: size_t [[PID:v[0-9]+]] = tj::program_id_x();
// CPP-NEXT: size_t [[NP:v[0-9]+]] = tj::num_programs_x();
// CPP-NEXT: size_t [[C0:v[0-9]+]] = 0;
// CPP-NEXT: size_t [[C2:v[0-9]+]] = 2;
// CPP-NEXT: size_t [[ROWS:v[0-9]+]] = tj::dim<0>([[X]]);
// CPP-NEXT: size_t [[FIRST:v[0-9]+]] = [[PID]] * [[C2]];
// CPP-NEXT: size_t [[STEP:v[0-9]+]] = [[NP]] * [[C2]];
// CPP-NEXT: float [[P0:v[0-9]+]] = 0.0e+00f;
// CPP-NEXT: tj::Index<1> [[I0:v[0-9]+]] = tj::idx([[C0]]);
// CPP-NEXT: tj::Frag<float, 8> [[WT:v[0-9]+]] = tj::load_cols<float, 4, 2, 128, 2, 1024, 0, tj::kCached>([[W]], [[I0]], [[P0]]);
// CPP-NEXT: float [[NINF:v[0-9]+]] = -INFINITY;
// CPP-NEXT: tj::Index<2> [[I1:v[0-9]+]] = tj::idx([[PID]], [[C0]]);
// CPP-NEXT: tj::Frag<float, 8> [[INIT:v[0-9]+]] = tj::load_cols<float, 4, 2, 128, 2, 1024, 0, tj::kCoherent>([[CM]], [[I1]], [[NINF]]);
// CPP-NEXT: float [[REPS:v[0-9]+]] = tj::rsqrt([[EPS]]);
// CPP-NEXT: tj::Frag<float, 1> [[ES:v[0-9]+]] = tj::splat<1>([[REPS]]);
// CPP-NEXT: tj::Frag<float, 8> [[ACCV:v[0-9]+]];
// CPP-NEXT: [[ACCV]] = [[INIT]];
// CPP-NEXT: for (size_t [[R:i[0-9]+]] = [[FIRST]]; [[R]] < [[ROWS]]; [[R]] += [[STEP]]) {
// CPP-NEXT:   tj::Frag<float, 8> [[ACC:v[0-9]+]] = [[ACCV]];
// CPP-NEXT:   float [[PZ:v[0-9]+]] = 0.0e+00f;
// CPP-NEXT:   tj::Index<2> [[I2:v[0-9]+]] = tj::idx([[R]], [[C0]]);
// CPP-NEXT:   tj::Frag<tj::bf16, 8> [[T:v[0-9]+]] = tj::load_tile<tj::bf16, 4, 2, 128, 2, 1024, 0, tj::kCached>([[X]], [[I2]], [[PZ]]);
// CPP-NEXT:   tj::Frag<float, 8> [[F:v[0-9]+]] = tj::convert<float>([[T]]);
// CPP-NEXT:   tj::Frag<float, 8> [[SQ:v[0-9]+]] = tj::mul([[F]], [[F]]);
// CPP-NEXT:   tj::Frag<float, 1> [[S:v[0-9]+]] = tj::reduce_row<0, 2, 128, 8>([[SQ]], tj_scratch);
// CPP-NEXT:   float [[P1:v[0-9]+]] = 1.000000000e+00f;
// CPP-NEXT:   tj::Index<1> [[I3:v[0-9]+]] = tj::idx([[R]]);
// CPP-NEXT:   tj::Frag<float, 1> [[OLD:v[0-9]+]] = tj::load_rows<float, 2, 128>([[RS]], [[I3]], [[P1]]);
// CPP-NEXT:   tj::Frag<float, 1> [[S2:v[0-9]+]] = tj::add([[S]], [[OLD]]);
// CPP-NEXT:   tj::Frag<float, 1> [[N:v[0-9]+]] = tj::mul([[S2]], [[ES]]);
// CPP-NEXT:   tj::Frag<float, 1> [[INV:v[0-9]+]] = tj::rsqrt([[N]]);
// CPP-NEXT:   tj::Index<1> [[I4:v[0-9]+]] = tj::idx([[R]]);
// CPP-NEXT:   tj::store_rows<float, 2, 128>([[INV]], [[RS]], [[I4]]);
// CPP-NEXT:   tj::Frag<float, 8> [[B1:v[0-9]+]] = tj::broadcast_row<8>([[INV]]);
// CPP-NEXT:   tj::Frag<float, 8> [[M:v[0-9]+]] = tj::mul([[F]], [[B1]]);
// CPP-NEXT:   tj::Frag<float, 8> [[M2:v[0-9]+]] = tj::mul([[M]], [[WT]]);
// CPP-NEXT:   tj::Frag<tj::bf16, 8> [[O:v[0-9]+]] = tj::convert<tj::bf16>([[M2]]);
// CPP-NEXT:   tj::Index<2> [[I5:v[0-9]+]] = tj::idx([[R]], [[C0]]);
// CPP-NEXT:   tj::store_tile<tj::bf16, 4, 2, 128, 2, 1024, 0, tj::kCached>([[O]], [[Y]], [[I5]]);
// CPP-NEXT:   tj::Frag<float, 8> [[MX:v[0-9]+]] = tj::reduce_col<1, 2, 128, 8>([[M2]], tj_scratch);
// CPP-NEXT:   tj::Frag<float, 8> [[A:v[0-9]+]] = tj::max([[ACC]], [[MX]]);
// CPP-NEXT:   [[ACCV]] = [[A]];
// CPP-NEXT: }
// CPP-NEXT: tj::Frag<float, 8> [[RES:v[0-9]+]] = [[ACCV]];
// CPP-NEXT: tj::Index<2> [[I6:v[0-9]+]] = tj::idx([[PID]], [[C0]]);
// CPP-NEXT: tj::store_cols<float, 4, 2, 128, 2, 1024, 0, tj::kCached>([[RES]], [[CM]], [[I6]]);
// CPP-NEXT: return;
// CPP-NEXT: }

#B = #tile.blocked<vec = 4, rowThreads = 2, colThreads = 128>
#R = #tile.slice<dim = 1, parent = #B>
#C = #tile.slice<dim = 0, parent = #B>
tile.kernel @layouts(%x: memref<?x1024xbf16>, %w: memref<1024xf32>, %y: memref<?x1024xbf16>, %rs: memref<?xf32>, %cm: memref<?x1024xf32>, %eps: f32) attributes {block_threads = 256 : i64, grid = affine_map<()[s0] -> (s0 ceildiv 2)>, grid_operands = array<i64: 0, 0>} {
  %pid = tile.program_id x
  %np = tile.num_programs x
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %rows = memref.dim %x, %c0 : memref<?x1024xbf16>
  %first = arith.muli %pid, %c2 : index
  %step = arith.muli %np, %c2 : index
  %wt = tile.load %w[%c0] : memref<1024xf32> -> tensor<1024xf32, #C>
  %init = tile.load %cm[%pid, %c0] {padding = 0xFFF0000000000000 : f64} : memref<?x1024xf32> -> tensor<1024xf32, #C>
  %reps = math.rsqrt %eps : f32
  %es = tile.splat %reps : f32 -> tensor<2xf32, #R>
  %res = scf.for %r = %first to %rows step %step iter_args(%acc = %init) -> (tensor<1024xf32, #C>) {
    %t = tile.load %x[%r, %c0] : memref<?x1024xbf16> -> tensor<2x1024xbf16, #B>
    %f = arith.extf %t : tensor<2x1024xbf16, #B> to tensor<2x1024xf32, #B>
    %sq = arith.mulf %f, %f : tensor<2x1024xf32, #B>
    %s = tile.reduce sum %sq {dim = 1 : i64} : tensor<2x1024xf32, #B> -> tensor<2xf32, #R>
    %old = tile.load %rs[%r] {padding = 1.0 : f64} : memref<?xf32> -> tensor<2xf32, #R>
    %s2 = arith.addf %s, %old : tensor<2xf32, #R>
    %n = arith.mulf %s2, %es : tensor<2xf32, #R>
    %inv = math.rsqrt %n : tensor<2xf32, #R>
    tile.store %inv, %rs[%r] : tensor<2xf32, #R>, memref<?xf32>
    %b1 = tile.broadcast %inv : tensor<2xf32, #R> -> tensor<2x1024xf32, #B>
    %b0 = tile.broadcast %wt : tensor<1024xf32, #C> -> tensor<2x1024xf32, #B>
    %m = arith.mulf %f, %b1 : tensor<2x1024xf32, #B>
    %m2 = arith.mulf %m, %b0 : tensor<2x1024xf32, #B>
    %o = arith.truncf %m2 : tensor<2x1024xf32, #B> to tensor<2x1024xbf16, #B>
    tile.store %o, %y[%r, %c0] : tensor<2x1024xbf16, #B>, memref<?x1024xbf16>
    %mx = tile.reduce max %m2 {dim = 0 : i64} : tensor<2x1024xf32, #B> -> tensor<1024xf32, #C>
    %a = arith.maximumf %acc, %mx : tensor<1024xf32, #C>
    scf.yield %a : tensor<1024xf32, #C>
  }
  tile.store %res, %cm[%pid, %c0] : tensor<1024xf32, #C>, memref<?x1024xf32>
  tile.return
}

// -----

//===----------------------------------------------------------------------===//
// One row of 4096 bf16 over 256 threads (RMSNorm): 8-wide vectors, 2 chunks,
// 16 elements per thread; the row reduction over 8 warps needs 8 floats.
//===----------------------------------------------------------------------===//

// CHECK:      emitc.include "prelude.cuh"
// CHECK-NEXT: emitc.include "frag.cuh"
// CHECK-NEXT: emitc.include "memory.cuh"
// CHECK-NEXT: emitc.include "reduce.cuh"
// CHECK-LABEL: emitc.func @rmsnorm(
// CHECK-SAME: specifiers = ["extern \22C\22 __global__ __launch_bounds__(256)"]
// CHECK-NEXT: verbatim "__shared__ float tj_scratch[8];"
// CHECK: call_opaque "tj::load_tile"(%{{.+}}) {template_args = [#emitc.opaque<"tj::bf16">, #emitc.opaque<"8">, #emitc.opaque<"1">, #emitc.opaque<"256">, #emitc.opaque<"2">, #emitc.opaque<"4096">, #emitc.opaque<"0">, #emitc.opaque<"tj::kStream">]} : ({{.*}}) -> !emitc.opaque<"tj::Frag<tj::bf16, 16>">
// CHECK: call_opaque "tj::reduce_row"(%{{.+}}) {template_args = [#emitc.opaque<"0">, #emitc.opaque<"1">, #emitc.opaque<"256">, #emitc.opaque<"16">]}
// CHECK: call_opaque "tj::store_rows"(%{{.+}}) {template_args = [#emitc.opaque<"float">, #emitc.opaque<"1">, #emitc.opaque<"256">]}
// CHECK: call_opaque "tj::broadcast_row"(%{{.+}}) {template_args = [#emitc.opaque<"16">]}
// CHECK: call_opaque "tj::store_tile"(%{{.+}}) {template_args = [#emitc.opaque<"tj::bf16">, #emitc.opaque<"8">, #emitc.opaque<"1">, #emitc.opaque<"256">, #emitc.opaque<"2">, #emitc.opaque<"4096">, #emitc.opaque<"0">, #emitc.opaque<"tj::kCached">]}

// CPP-LABEL: void rmsnorm(
// CPP-NEXT: __shared__ float tj_scratch[8];
// CPP: tj::Frag<tj::bf16, 16> {{v[0-9]+}} = tj::load_tile<tj::bf16, 8, 1, 256, 2, 4096, 0, tj::kStream>(
// CPP: tj::Frag<float, 1> {{v[0-9]+}} = tj::reduce_row<0, 1, 256, 16>({{v[0-9]+}}, tj_scratch);
// CPP: tj::store_tile<tj::bf16, 8, 1, 256, 2, 4096, 0, tj::kCached>(

#L = #tile.blocked<vec = 8, rowThreads = 1, colThreads = 256>
#S1 = #tile.slice<dim = 1, parent = #L>
tile.kernel @rmsnorm(%x: memref<?x4096xbf16>, %y: memref<?x4096xbf16>, %r: memref<?xf32>) attributes {block_threads = 256 : i64, grid = affine_map<()[s0] -> (s0)>, grid_operands = array<i64: 0, 0>} {
  %pid = tile.program_id x
  %c0 = arith.constant 0 : index
  %t = tile.load %x[%pid, %c0] {streaming} : memref<?x4096xbf16> -> tensor<1x4096xbf16, #L>
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

//===----------------------------------------------------------------------===//
// No memory access: no memory.cuh. A row reduction within one warp never
// touches the scratch, but the call names it, so one float is declared.
// Scalar arith goes through MLIR's own conversion; math on a scalar calls the
// library.
//===----------------------------------------------------------------------===//

// CHECK:      emitc.include "prelude.cuh"
// CHECK-NEXT: emitc.include "frag.cuh"
// CHECK-NEXT: emitc.include "reduce.cuh"
// CHECK-LABEL: emitc.func @warp_only(
// CHECK-SAME: %[[V:[a-z0-9]+]]: f32, %{{[a-z0-9]+}}: !emitc.size_t)
// CHECK-SAME: specifiers = ["extern \22C\22 __global__ __launch_bounds__(64)"]
// CHECK-NEXT: verbatim "__shared__ float tj_scratch[1];"
// CHECK-NEXT: %[[T:.+]] = call_opaque "tj::splat"(%[[V]]) {template_args = [#emitc.opaque<"4">]} : (f32) -> !emitc.opaque<"tj::Frag<float, 4>">
// CHECK-NEXT: %[[E:.+]] = call_opaque "tj::exp"(%[[T]]) : (!emitc.opaque<"tj::Frag<float, 4>">) -> !emitc.opaque<"tj::Frag<float, 4>">
// CHECK-NEXT: %[[SCR:.+]] = literal "tj_scratch" : !emitc.ptr<f32>
// CHECK-NEXT: call_opaque "tj::reduce_row"(%[[E]], %[[SCR]]) {template_args = [#emitc.opaque<"2">, #emitc.opaque<"2">, #emitc.opaque<"32">, #emitc.opaque<"4">]}
// CHECK-NEXT: %[[A:.+]] = add %[[V]], %[[V]] : (f32, f32) -> f32
// CHECK-NEXT: call_opaque "tj::sqrt"(%[[A]]) : (f32) -> f32
// CHECK-NEXT: return

// CPP:      #include "prelude.cuh"
// CPP-NEXT: #include "frag.cuh"
// CPP-NEXT: #include "reduce.cuh"
// CPP-NEXT: extern "C" __global__ __launch_bounds__(64) void warp_only(float [[V:v[0-9]+]], size_t {{v[0-9]+}}) {
// CPP-NEXT: __shared__ float tj_scratch[1];
// CPP-NEXT: tj::Frag<float, 4> [[T:v[0-9]+]] = tj::splat<4>([[V]]);
// CPP-NEXT: tj::Frag<float, 4> [[E:v[0-9]+]] = tj::exp([[T]]);
// CPP-NEXT: tj::Frag<float, 1> {{v[0-9]+}} = tj::reduce_row<2, 2, 32, 4>([[E]], tj_scratch);
// CPP-NEXT: float [[A:v[0-9]+]] = [[V]] + [[V]];
// CPP-NEXT: float {{v[0-9]+}} = tj::sqrt([[A]]);
// CPP-NEXT: return;

#W = #tile.blocked<vec = 2, rowThreads = 2, colThreads = 32>
#WR = #tile.slice<dim = 1, parent = #W>
tile.kernel @warp_only(%v: f32, %n: index) attributes {block_threads = 64 : i64, grid = affine_map<()[s0] -> (s0, 1024)>, grid_operands = array<i64: 1, -1>} {
  %t = tile.splat %v : f32 -> tensor<2x128xf32, #W>
  %e = math.exp %t : tensor<2x128xf32, #W>
  %s = tile.reduce min %e {dim = 1 : i64} : tensor<2x128xf32, #W> -> tensor<2xf32, #WR>
  %a = arith.addf %v, %v : f32
  %r = math.sqrt %a : f32
  tile.return
}

// -----

//===----------------------------------------------------------------------===//
// A tile at a column known only at run time: no chunk is taken as whole
// (COL0 = -1), even where one at column 0 would be. A memref the kernel also
// stores to is read coherently, not through the read-only cache.
//===----------------------------------------------------------------------===//

// CPP-LABEL: void segments(
// CPP: tj::load_tile<float, 4, 1, 128, 2, 4097, -1, tj::kCoherent>(
// CPP: tj::load_tile<float, 4, 1, 128, 2, 4097, -1, tj::kStream>(
// CPP: tj::store_tile<float, 4, 1, 128, 2, 4097, -1, tj::kCached>(
// CPP: tj::load_tile<float, 4, 1, 128, 2, 4097, 1024, tj::kCached>(
// CPP: tj::store_tile<float, 4, 1, 128, 2, 4097, 1024, tj::kCached>(

#L = #tile.blocked<vec = 4, rowThreads = 1, colThreads = 128>
tile.kernel @segments(%acc: memref<?x4097xf32>, %x: memref<?x4097xf32>, %k: index) attributes {block_threads = 128 : i64, grid = affine_map<()[s0] -> (s0)>, grid_operands = array<i64: 0, 0>} {
  %pid = tile.program_id x
  %c1024 = arith.constant 1024 : index
  %col = arith.muli %k, %c1024 : index
  %a = tile.load %acc[%pid, %col] : memref<?x4097xf32> -> tensor<1x1024xf32, #L>
  %t = tile.load %x[%pid, %col] {streaming} : memref<?x4097xf32> -> tensor<1x1024xf32, #L>
  %s = arith.addf %a, %t : tensor<1x1024xf32, #L>
  tile.store %s, %acc[%pid, %col] : tensor<1x1024xf32, #L>, memref<?x4097xf32>
  %u = tile.load %x[%pid, %c1024] : memref<?x4097xf32> -> tensor<1x1024xf32, #L>
  tile.store %u, %acc[%pid, %c1024] : tensor<1x1024xf32, #L>, memref<?x4097xf32>
  tile.return
}

// -----

//===----------------------------------------------------------------------===//
// Accesses that convert: an f32 tile from and to bf16/f16 memory. The memory's
// type comes first, as for any access; the tile's is the last template
// argument (the device library's default is the memory's).
//===----------------------------------------------------------------------===//

// CPP-LABEL: void converting(
// CPP: tj::Frag<float, 8> {{v[0-9]+}} = tj::load_tile<tj::bf16, 4, 2, 128, 2, 1024, 0, tj::kStream, float>(
// CPP: tj::Frag<float, 8> {{v[0-9]+}} = tj::load_cols<tj::f16, 4, 2, 128, 2, 1024, 0, tj::kCached, float>(
// CPP: tj::Frag<float, 1> {{v[0-9]+}} = tj::load_rows<tj::bf16, 2, 128, float>(
// CPP: tj::store_tile<tj::bf16, 4, 2, 128, 2, 1024, 0, tj::kStream, float>(
// CPP: tj::store_rows<tj::f16, 2, 128, float>(

#L = #tile.blocked<vec = 4, rowThreads = 2, colThreads = 128>
#C = #tile.slice<dim = 0, parent = #L>
#R = #tile.slice<dim = 1, parent = #L>
tile.kernel @converting(%x: memref<?x1024xbf16>, %w: memref<1024xf16>, %r: memref<?xbf16>, %y: memref<?x1024xbf16>, %s: memref<?xf16>) attributes {block_threads = 256 : i64, grid = affine_map<()[s0] -> (s0)>, grid_operands = array<i64: 0, 0>} {
  %pid = tile.program_id x
  %c0 = arith.constant 0 : index
  %t = tile.load %x[%pid, %c0] {streaming} : memref<?x1024xbf16> -> tensor<2x1024xf32, #L>
  %w32 = tile.load %w[%c0] : memref<1024xf16> -> tensor<1024xf32, #C>
  %r32 = tile.load %r[%pid] : memref<?xbf16> -> tensor<2xf32, #R>
  %wb = tile.broadcast %w32 : tensor<1024xf32, #C> -> tensor<2x1024xf32, #L>
  %rb = tile.broadcast %r32 : tensor<2xf32, #R> -> tensor<2x1024xf32, #L>
  %p = arith.mulf %t, %wb : tensor<2x1024xf32, #L>
  %q = arith.mulf %p, %rb : tensor<2x1024xf32, #L>
  tile.store %q, %y[%pid, %c0] {streaming} : tensor<2x1024xf32, #L>, memref<?x1024xbf16>
  tile.store %r32, %s[%pid] : tensor<2xf32, #R>, memref<?xf16>
  tile.return
}

// -----

// min_blocks: the second bound of __launch_bounds__.

// CHECK-LABEL: emitc.func @two_blocks_fit(
// CHECK-SAME: specifiers = ["extern \22C\22 __global__ __launch_bounds__(512, 2)"]
// CPP: extern "C" __global__ __launch_bounds__(512, 2) void two_blocks_fit(
tile.kernel @two_blocks_fit(%v: f32) attributes {block_threads = 512 : i64, min_blocks = 2 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  tile.return
}
