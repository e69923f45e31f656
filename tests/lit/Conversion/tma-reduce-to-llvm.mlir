// RUN: tilejit-opt %S/../Dialect/tma-reduce.mlir --tile-allocate-shared --convert-tile-to-llvm | FileCheck %s
// RUN: tilejit-opt %S/../Dialect/tma-reduce.mlir --tilejit-lower-to-llvm=arch=sm_90a | FileCheck %s --check-prefix=NVVM

// overwrite: the accumulator's registers start undefined (no zeros are
// written to them), and only the first of the eight steps of K (128) ignores D.
// CHECK-COUNT-32: llvm.mlir.undef : f32
// CHECK-NOT: llvm.mlir.undef : f32
// CHECK: nvvm.wgmma.fence.aligned
// CHECK: nvvm.wgmma.mma_async {{.*}} D[<f32>, <zero>]
// CHECK-COUNT-7: nvvm.wgmma.mma_async {{.*}} D[<f32>, <one>]
// CHECK-NOT: nvvm.wgmma.mma_async

// The f32 part: sixteen 8-byte shared stores a thread (32 elements), fenced
// for the copy engine, then the warpgroup meets; one thread adds the two
// 32-column panels into the tensor at columns 64 and 96, with the head and
// the sequence as outer coordinates, and commits them as one group.
// NVVM: nvvm.cp.async.bulk.wait_group 0 {read}
// NVVM-COUNT-16: llvm.store %{{.*}}, %{{.*}} {alignment = 8 : i64} : vector<2xf32>, !llvm.ptr<3>
// NVVM-NOT: llvm.store
// NVVM: "fence.proxy.async.shared::cta;"
// NVVM: "bar.sync $0, 128;"
// NVVM: llvm.cond_br
// NVVM: nvvm.cp.async.bulk.tensor.reduce %arg0, %{{.*}}, box[%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}] {redKind = #nvvm.tma_redux_kind<add>}
// NVVM: %[[PANEL:.*]] = llvm.mlir.constant(8192 : i64)
// NVVM: llvm.getelementptr %{{.*}}[%[[PANEL]]]
// NVVM: nvvm.cp.async.bulk.tensor.reduce %arg0, %{{.*}}, box[%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}] {redKind = #nvvm.tma_redux_kind<add>}
// NVVM-NEXT: nvvm.cp.async.bulk.commit.group
// NVVM: nvvm.cp.async.bulk.wait_group 0
// NVVM-NOT: {read}
