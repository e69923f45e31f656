// RUN: tilejit-opt %S/../Dialect/attention.mlir --tilejit-lower-to-llvm=arch=sm_90a | FileCheck %s

// A 4-D copy takes the head and batch coordinates after the column and row.
// CHECK: nvvm.cp.async.bulk.tensor.shared.cluster.global %{{.*}}, %arg0, %{{.*}}, box[%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}] {isCTAOnly = true}
// The rows of a warpgroup tile reduce over the quad: lanes xor 1, then 2.
// CHECK: nvvm.shfl.sync  bfly %{{.*}}, %{{.*}}, %[[ONE:.*]], %{{.*}} : f32 -> f32
// CHECK: nvvm.shfl.sync  bfly
// exp2 is ex2.approx.ftz; P V is wgmma with A in four 32-bit registers and the
// accumulator tied to the results.
// CHECK: llvm.nvvm.ex2.approx.ftz.f32
// CHECK: nvvm.wgmma.fence.aligned
// CHECK: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {$0, {{.*}}, $31}, {$32, $33, $34, $35}, $36, p, 1, 1, 1;
// CHECK-SAME: "=f,{{.*}},=f,r,r,r,r,l,0,1,{{.*}},31"
// CHECK: nvvm.wgmma.commit.group.sync.aligned
// CHECK: "wgmma.wait_group.sync.aligned 0;"
// LSE's rows: one of the four lanes of a quad stores each.
// CHECK: llvm.nvvm.lg2.approx.f

// Started products are committed and not waited for; each wait ties the
// accumulators it returns (one 64x64 tile: 32 registers a thread; two: 64).
// CHECK-LABEL: llvm.func @overlap
// CHECK: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16
// CHECK: nvvm.wgmma.commit.group.sync.aligned
// CHECK-NOT: wgmma.wait_group
// CHECK: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {$0
// CHECK: nvvm.wgmma.commit.group.sync.aligned
// CHECK: "wgmma.wait_group.sync.aligned 1;", "=f,{{.*}},=f,0,{{.*}},31"
// CHECK: "wgmma.wait_group.sync.aligned 0;", "=f,{{.*}},=f,0,{{.*}},63"

// A column slice: each thread reads its two columns of every 8-column block
// (8 bytes at 32-byte steps) and broadcasts them down its rows, and stores
// its columns back.
// CHECK-LABEL: llvm.func @columns
// CHECK: ld.global.v2.f32 {$0, $1}, [$2+0];
// CHECK: ld.global.v2.f32 {$0, $1}, [$2+32];
// CHECK: st.global.v2.f32 [$0+224], {$1, $2};

// A tile into a ring stage: a warp's 16 x 16 blocks by stmatrix.x4 at the
// swizzled places (chunk xor row % 8), then the proxy fence and the
// warpgroup's barrier before a product reads the stage; the f32 result
// added into memory two columns at a time.
// Then a 64 x 32 tile into columns 32 to 63: the offset added to each
// lane's column, two stmatrix.x4, the fence and the barrier again.
// CHECK-LABEL: llvm.func @scores_gradient
// CHECK: %[[COL:.*]] = llvm.mlir.constant(32 : index) : i64
// CHECK: llvm.xor
// CHECK: nvvm.stmatrix %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {eltType = #nvvm.ld_st_matrix_elt_type<b16>, layout = #nvvm.mma_layout<row>, shape = #nvvm.ld_st_matrix_shape<m = 8, n = 8>}
// CHECK-COUNT-3: nvvm.stmatrix
// CHECK-NOT: nvvm.stmatrix
// CHECK: "fence.proxy.async.shared::cta;"
// CHECK: "bar.sync $0, 128;"
// CHECK: llvm.add %[[COL]], %{{.*}} : i64
// CHECK-COUNT-2: nvvm.stmatrix
// CHECK-NOT: nvvm.stmatrix
// CHECK: "fence.proxy.async.shared::cta;"
// CHECK: "bar.sync $0, 128;"
// CHECK: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16
// CHECK: red.global.add.v2.f32 [$0+0], {$1, $2};
