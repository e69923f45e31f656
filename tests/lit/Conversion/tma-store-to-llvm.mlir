// RUN: tilejit-opt %S/../Dialect/tma-store.mlir --tilejit-lower-to-llvm=arch=sm_90a | FileCheck %s
// RUN: not tilejit-opt %S/../Dialect/tma-store.mlir --tilejit-lower-to-llvm=arch=sm_80 2>&1 | FileCheck %s --check-prefix=SM80

// D's tensor map is a by-value parameter like A's and B's.
// CHECK: llvm.func @epilogue(%{{.*}}: !llvm.ptr {llvm.align = 64 : i64, llvm.byval = !llvm.array<128 x i8>, nvvm.grid_constant}
// The wait for the buffer: the warpgroup's first thread, then its barrier.
// CHECK: llvm.cond_br
// CHECK: nvvm.cp.async.bulk.wait_group 1 {read}
// CHECK: "bar.sync $0, 128;"
// The panel: 64 x 64 bf16, sixteen elements a thread, as four stmatrix.x4
// of 16 x 16 blocks, fenced for the copy engine, then the warpgroup meets.
// CHECK-COUNT-4: nvvm.stmatrix
// CHECK: "fence.proxy.async.shared::cta;"
// CHECK: "bar.sync $0, 128;"
// One thread copies the panel out at column 64 and commits the group.
// CHECK: llvm.cond_br
// CHECK: nvvm.cp.async.bulk.tensor.global.shared.cta %arg0, %{{.*}}, box[%{{.*}}, %{{.*}}]
// CHECK-NEXT: nvvm.cp.async.bulk.commit.group
// The last wait: the writes done, not only the reads.
// CHECK: nvvm.cp.async.bulk.wait_group 0
// CHECK-NOT: {read}
// CHECK: "bar.sync $0, 128;"

// SM80: 'tile.tma_store_wait' needs the copy engine of sm_90; the target is sm_80
