// RUN: tilejit-opt %S/../Dialect/async.mlir --tilejit-lower-to-llvm=arch=sm_90a | FileCheck %s
// RUN: not tilejit-opt %S/../Dialect/async.mlir --tilejit-lower-to-llvm=arch=sm_80 2>&1 | FileCheck %s --check-prefix=SM80

// Rings and barriers live in the kernel's dynamic shared memory, its base
// aligned to 1024 bytes by the kernel; tensor maps are 128-byte by-value
// parameters the copy engine reads in place.
// CHECK: llvm.mlir.global external @mm_dynamic() {addr_space = 3 : i32, alignment = 1024 : i64} : !llvm.array<0 x i8>
// CHECK: llvm.func @mm(%{{.*}}: !llvm.ptr {llvm.align = 64 : i64, llvm.byval = !llvm.array<128 x i8>, nvvm.grid_constant}
// CHECK: llvm.and %{{.*}}, %{{.*}} : i64
// The barriers: one thread initializes each, then the block meets.
// CHECK-COUNT-4: mbarrier.init.shared.b64
// CHECK: nvvm.fence.mbarrier.init
// CHECK: nvvm.barrier
// The producer: its warpgroup gives up registers, one thread loads.
// CHECK: nvvm.setmaxregister  decrease 40
// CHECK: mbarrier.try_wait.parity.shared::cta.b64
// CHECK: nvvm.mbarrier.arrive.expect_tx %{{.*}}, %{{.*}} : !llvm.ptr<3>, i32
// CHECK: nvvm.cp.async.bulk.tensor.shared.cluster.global %{{.*}}, %arg0, %{{.*}}, box[%{{.*}}, %{{.*}}] {isCTAOnly = true}
// CHECK: nvvm.cp.async.bulk.tensor.shared.cluster.global %{{.*}}, %arg1, %{{.*}}, box[%{{.*}}, %{{.*}}] {isCTAOnly = true}
// The consumers: more registers, the tensor cores over K = 64 in four steps.
// CHECK: nvvm.setmaxregister  increase 232
// A descriptor's start field is the block's shared-window address / 16 in
// 14 bits, masked once (the address may carry bits above them); each later
// step of K adds its offset (16 bf16 = 32 bytes: 2) to the first step's.
// CHECK: nvvm.wgmma.fence.aligned
// CHECK: %[[MASK0:.*]] = llvm.mlir.constant(16383 : i32) : i32
// CHECK: %[[SHR0:.*]] = llvm.lshr %{{.*}}, %{{.*}} : i32
// CHECK-NEXT: llvm.and %[[SHR0]], %[[MASK0]] : i32
// CHECK: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16
// CHECK: %[[MASK:.*]] = llvm.mlir.constant(16383 : i32) : i32
// CHECK: %[[SHR:.*]] = llvm.lshr %{{.*}}, %{{.*}} : i32
// CHECK-NEXT: %[[START:.*]] = llvm.and %[[SHR]], %[[MASK]] : i32
// CHECK-NEXT: %[[STEP:.*]] = llvm.mlir.constant(2 : i32) : i32
// CHECK-NEXT: llvm.add %[[START]], %[[STEP]] : i32
// CHECK-COUNT-3: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16
// CHECK: nvvm.wgmma.commit.group.sync.aligned
// CHECK: "wgmma.wait_group.sync.aligned 0;"
// CHECK: @$1 mbarrier.arrive.shared::cta.b64
// The accumulator's rows 8 apart are 4096 bytes apart in a 128-column f32 D.
// CHECK: st.global.v2.f32 [$0+0]
// CHECK: st.global.v2.f32 [$0+4096]

// SM80: 'tile.alloc_barriers' needs the copy engine of sm_90; the target is sm_80
