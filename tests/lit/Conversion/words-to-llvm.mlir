// RUN: tilejit-opt %S/../Dialect/words.mlir --tilejit-lower-to-llvm=arch=sm_90a | FileCheck %s

// The producer's thread takes a tile with one relaxed atomic addition on the
// counter's word (its old value widened, unsigned) and writes it into its slot
// of shared memory, 4 bytes a word after the barriers, with a volatile store
// before its arrival; the consumer reads the slot with a volatile load after
// its wait, and its warpgroup meets once after both of its words are read
// (so that an arrival after it would tell that every thread has read the
// slot).
// CHECK: llvm.func @take_tiles
// CHECK: %[[OLD:.*]] = llvm.atomicrmw add %{{.*}}, %{{.*}} monotonic : !llvm.ptr<1>, i32
// CHECK-NEXT: llvm.zext %[[OLD]] : i32 to i64
// CHECK: llvm.mul %{{.*}}, %{{.*}} : i64
// CHECK: llvm.store volatile %{{.*}}, %{{.*}} {alignment = 4 : i64} : i32, !llvm.ptr<3>
// CHECK: mbarrier.arrive.shared::cta.b64
// CHECK: mbarrier.try_wait
// CHECK-NOT: bar.sync
// CHECK: %[[W:.*]] = llvm.load volatile %{{.*}} {alignment = 4 : i64} : !llvm.ptr<3> -> i32
// CHECK-NEXT: llvm.zext %[[W]] : i32 to i64
// CHECK-NOT: bar.sync
// CHECK: %[[W2:.*]] = llvm.load volatile %{{.*}} {alignment = 4 : i64} : !llvm.ptr<3> -> i32
// CHECK-NEXT: llvm.zext %[[W2]] : i32 to i64
// CHECK: "bar.sync $0, 128;"
// CHECK-NOT: bar.sync
// CHECK: mbarrier.arrive

// The helper's one thread reads the slot alone: no warpgroup to meet.
// CHECK-LABEL: llvm.func @helper_words
// CHECK: llvm.atomicrmw add
// CHECK: llvm.store volatile
// CHECK: llvm.load volatile
// CHECK-NOT: bar.sync
// CHECK: llvm.load volatile
// CHECK-NOT: bar.sync
// CHECK: llvm.return
