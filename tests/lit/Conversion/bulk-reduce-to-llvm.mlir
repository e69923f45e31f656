// RUN: tilejit-opt %S/../Dialect/bulk-reduce.mlir --tilejit-lower-to-llvm=arch=sm_90a | FileCheck %s

// The part in its registers' order: stage 1 (16384 bytes in), the row's
// start (row * 64 columns * 4 bytes), the thread's place in its warpgroup
// times 16 bytes; eight 16-byte shared stores a thread (32 elements), the
// chunks 2048 bytes apart; fenced for the copy engine, then the warpgroup
// meets; one thread adds the stage's 16384 bytes into the sums at element
// ((1 * rows) + 64) * 4096 with one bulk copy and commits it.
// CHECK-LABEL: llvm.func @dq_fragments
// CHECK: nvvm.cp.async.bulk.wait_group 0 {read}
// CHECK: %[[S:.*]] = llvm.mlir.constant(16384 : i64)
// CHECK: %[[STAGE:.*]] = llvm.getelementptr %{{.*}}[%[[S]]]
// CHECK: %[[R:.*]] = llvm.mlir.constant(256 : i64)
// CHECK: %[[ROWB:.*]] = llvm.mul %{{.*}}, %[[R]]
// CHECK: %[[ROW:.*]] = llvm.getelementptr %[[STAGE]][%[[ROWB]]]
// CHECK: %[[SIXTEEN:.*]] = llvm.mlir.constant(16 : i64)
// CHECK: %[[TID:.*]] = nvvm.read.ptx.sreg.tid.x
// CHECK: %[[T64:.*]] = llvm.zext %[[TID]]
// CHECK: %[[WG:.*]] = llvm.mlir.constant(128 : i64)
// CHECK: %[[T:.*]] = llvm.urem %[[T64]], %[[WG]]
// CHECK: %[[TB:.*]] = llvm.mul %[[T]], %[[SIXTEEN]]
// CHECK: %[[BASE:.*]] = llvm.getelementptr %[[ROW]][%[[TB]]]
// CHECK: llvm.store %{{.*}}, %[[BASE]] {alignment = 16 : i64} : vector<4xf32>, !llvm.ptr<3>
// CHECK: %[[C1:.*]] = llvm.mlir.constant(2048 : i64)
// CHECK: llvm.getelementptr %[[BASE]][%[[C1]]]
// CHECK: llvm.store %{{.*}} {alignment = 16 : i64} : vector<4xf32>, !llvm.ptr<3>
// CHECK-COUNT-5: llvm.store %{{.*}} {alignment = 16 : i64} : vector<4xf32>, !llvm.ptr<3>
// CHECK: %[[C7:.*]] = llvm.mlir.constant(14336 : i64)
// CHECK: llvm.getelementptr %[[BASE]][%[[C7]]]
// CHECK: llvm.store %{{.*}} {alignment = 16 : i64} : vector<4xf32>, !llvm.ptr<3>
// CHECK-NOT: llvm.store
// CHECK: "fence.proxy.async.shared::cta;"
// CHECK: "bar.sync $0, 128;"
// CHECK: %[[SRCP:.*]] = llvm.getelementptr %{{.*}}[%{{.*}}] : (!llvm.ptr<3>, i64)
// CHECK: %[[SRC:.*]] = llvm.ptrtoint %[[SRCP]]
// CHECK: %[[COLS:.*]] = llvm.mlir.constant(4096 : i64)
// CHECK: llvm.add
// CHECK: llvm.mul
// CHECK: %[[ROWS:.*]] = llvm.add %{{.*}}, %{{.*}} : i64
// CHECK: %[[EL:.*]] = llvm.mul %[[ROWS]], %[[COLS]]
// CHECK: %[[FOUR:.*]] = llvm.mlir.constant(4 : i64)
// CHECK: %[[BYTES:.*]] = llvm.mul %[[EL]], %[[FOUR]]
// CHECK: %[[DSTP:.*]] = llvm.getelementptr %{{.*}}[%[[BYTES]]] : (!llvm.ptr<1>, i64)
// CHECK: %[[DST:.*]] = llvm.ptrtoint %[[DSTP]]
// CHECK: llvm.cond_br
// CHECK: "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [$0], [$1], 16384;", "l,l" %[[DST]], %[[SRC]]
// CHECK-NEXT: nvvm.cp.async.bulk.commit.group
// CHECK: nvvm.cp.async.bulk.wait_group 0
// CHECK-NOT: {read}

// Read back: the thread's place times 16 bytes from the element's address,
// eight 16-byte loads a thread, 2048 bytes apart.
// CHECK-LABEL: llvm.func @dq_read
// CHECK: llvm.mlir.constant(16 : i64)
// CHECK: llvm.urem
// CHECK: %[[RB:.*]] = llvm.getelementptr %{{.*}}[%{{.*}}] : (!llvm.ptr<1>, i64)
// CHECK: "ld.global.v4.f32 {$0, $1, $2, $3}, [$4];", "=f,=f,=f,=f,l" %[[RB]]
// CHECK: %[[L1:.*]] = llvm.mlir.constant(2048 : i64)
// CHECK: %[[A1:.*]] = llvm.getelementptr %[[RB]][%[[L1]]]
// CHECK: "ld.global.v4.f32 {$0, $1, $2, $3}, [$4];", "=f,=f,=f,=f,l" %[[A1]]
// CHECK-COUNT-6: ld.global.v4.f32
// CHECK-NOT: ld.global.v4.f32
