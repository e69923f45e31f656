// RUN: tilejit-opt %S/../Dialect/flags.mlir --tilejit-lower-to-llvm=arch=sm_90a | FileCheck %s

// The wait: the warpgroup's first thread spins on an acquiring load of the
// word at (tile, consumer), 4 bytes a word, then the warpgroup meets.
// CHECK: llvm.func @hand_on
// CHECK: llvm.cond_br
// CHECK: ld.acquire.gpu.global.b32 seen, [$0]
// CHECK: "bar.sync $0, 128;"
// The partial sum in, the total out, then the hand-on: the warpgroup meets,
// one thread fences at GPU scope and stores the next value.
// CHECK: ld.global
// CHECK: st.global
// CHECK: "bar.sync $0, 128;"
// CHECK: llvm.cond_br
// CHECK: "fence.acq_rel.gpu;\0A\09st.relaxed.gpu.global.b32 [$0], $1;"
