// RUN: tilejit-opt %S/../Dialect/helper.mlir --tilejit-lower-to-llvm=arch=sm_90a | FileCheck %s

// The producer's warpgroup: its thread 0 runs the producer's region (here
// empty); else thread 32 runs the helper's; the others go past.
// CHECK: nvvm.setmaxregister  decrease 40
// CHECK-NEXT: nvvm.read.ptx.sreg.tid.x
// CHECK: %[[P:.*]] = llvm.icmp "eq"
// CHECK-NEXT: llvm.cond_br %[[P]], ^[[PRODUCER:bb[0-9]+]], ^[[HELPERPRE:bb[0-9]+]]
// CHECK: ^[[PRODUCER]]:
// CHECK-NEXT: llvm.br ^[[AFTER:bb[0-9]+]]
// The consumer meets its warpgroup and its first thread arrives.
// CHECK: "bar.sync $0, 128;"
// CHECK: mbarrier.arrive.shared::cta.b64
// CHECK: ^[[HELPERPRE]]:
// CHECK-NEXT: nvvm.read.ptx.sreg.tid.x
// CHECK-NEXT: %[[T:.*]] = llvm.zext
// CHECK-NEXT: %[[C32:.*]] = llvm.mlir.constant(32 : i64)
// CHECK-NEXT: %[[H:.*]] = llvm.icmp "eq" %[[T]], %[[C32]]
// CHECK-NEXT: llvm.cond_br %[[H]], ^[[HELPER:bb[0-9]+]], ^[[AFTER]]
// The helper's loop: its ops, in the loop's body, run on its one thread: no
// leader picked (no thread index taken modulo 128, no branch), no warpgroup
// met; its arrival is its own.
// CHECK: ^[[HELPER]]:
// CHECK: ^[[HEADER:bb[0-9]+]](%{{.*}}: i64):
// CHECK: llvm.cond_br %{{.*}}, ^[[BODY:bb[0-9]+]], ^
// CHECK: ^[[BODY]]:
// CHECK-NOT: bar.sync
// CHECK-NOT: llvm.urem
// CHECK-NOT: llvm.cond_br
// CHECK: mbarrier.try_wait.parity
// CHECK-NOT: bar.sync
// CHECK-NOT: llvm.urem
// CHECK-NOT: llvm.cond_br
// CHECK: ld.acquire.gpu.global.b32
// CHECK-NEXT: "fence.proxy.async.global;"
// CHECK-NOT: bar.sync
// CHECK-NOT: llvm.cond_br
// CHECK: nvvm.cp.async.bulk.tensor.reduce
// CHECK: nvvm.cp.async.bulk.tensor.reduce
// CHECK-NEXT: nvvm.cp.async.bulk.commit.group
// CHECK-NEXT: nvvm.cp.async.bulk.wait_group 0 {read}
// CHECK-NOT: bar.sync
// CHECK-NOT: llvm.urem
// CHECK: %[[ME:.*]] = llvm.mlir.constant(true) : i1
// CHECK: mbarrier.arrive.shared::cta.b64 {{.*}} %[[ME]]
// CHECK-NEXT: nvvm.cp.async.bulk.wait_group 0
// CHECK-NOT: bar.sync
// CHECK-NOT: llvm.cond_br
// CHECK: "fence.proxy.async.global;"
// CHECK-NOT: nvvm.cp.async.bulk
// CHECK: llvm.inline_asm {{.*}}"fence.acq_rel.gpu;\0A\09st.relaxed.gpu.global.b32 [$0], $1;"
// CHECK: llvm.br ^[[HEADER]](
// CHECK: llvm.br ^[[AFTER]]
