// RUN: tilejit-opt %S/../Dialect/flags.mlir --tilejit-lower-to-llvm=arch=sm_90a | FileCheck %s --implicit-check-not=fence.proxy.async

// (Without async_proxy, no proxy fence.)

// The wait: the warpgroup's first thread spins on an acquiring load of the
// word at (tile, consumer), 4 bytes a word, then the warpgroup meets.
// CHECK: llvm.func @hand_on
// CHECK: %[[T:.*]] = llvm.urem %{{.*}}, %{{.*}} : i64
// CHECK-NEXT: llvm.mlir.constant(0 : i64)
// CHECK-NEXT: %[[Z:.*]] = llvm.icmp "eq" %[[T]], %{{.*}} : i64
// CHECK-NEXT: llvm.cond_br %[[Z]], ^[[LEAD:bb[0-9]+]], ^
// CHECK: ^[[LEAD]]:
// CHECK-NEXT: llvm.ptrtoint
// CHECK-NEXT: llvm.inline_asm has_side_effects {{.*}}ld.acquire.gpu.global.b32 seen, [$0]
// CHECK: "bar.sync $0, 128;"
// The partial sum in, the total out, then the hand-on: the warpgroup meets,
// one thread fences at GPU scope and stores the next value.
// CHECK: ld.global
// CHECK: st.global
// CHECK: "bar.sync $0, 128;"
// CHECK: llvm.cond_br
// CHECK: "fence.acq_rel.gpu;\0A\09st.relaxed.gpu.global.b32 [$0], $1;"
