// RUN: tilejit-opt %s --tilejit-lower-to-llvm=arch=sm_80 | FileCheck %s
// RUN: tilejit-opt %s --tilejit-lower-to-llvm=arch=sm_90a | FileCheck %s

// tile.async_copy on a 128-thread block: a 128 x 64 bf16 stage is 1024
// copies of 16 bytes, 8 per thread, unrolled, each a cp.async.cg with its
// source size cut at the memref's edges; when the memref is not aligned to
// 16 bytes, a loop of 16-bit loads and stores.
// CHECK-LABEL: llvm.func @copy16
// CHECK: llvm.ptrtoint
// CHECK: llvm.or %{{.*}}, %{{.*}} : i64
// CHECK: llvm.and %{{.*}}, %{{.*}} : i64
// CHECK: llvm.icmp "eq"
// CHECK: llvm.cond_br
// The swizzle: the 16-byte chunk of the row XOR the row modulo 8.
// CHECK: llvm.xor %{{.*}}, %{{.*}} : i64
// CHECK-COUNT-8: nvvm.cp.async.shared.global %{{.*}}, %{{.*}}, 16, cache = cg, %{{.*}} : !llvm.ptr<3>, !llvm.ptr<1>, i32
// CHECK-NOT: nvvm.cp.async.shared.global
// The element loop.
// CHECK: llvm.load %{{.*}} : !llvm.ptr<1> -> i16
// CHECK: llvm.store %{{.*}}, %{{.*}} : i16, !llvm.ptr<3>
// CHECK: nvvm.cp.async.commit.group
// CHECK: nvvm.cp.async.wait.group 1
// CHECK: nvvm.barrier
tile.kernel @copy16(%a: memref<?x256xbf16>) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>, scratch_bytes = 0 : i64, dynamic_smem_bytes = 50176 : i64} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %r = tile.alloc_ring {offset = 0 : i64} : !tile.ring<stages = 3, rows = 128, cols = 64, bf16>
  tile.async_copy %a[%c64, %c64], %r[%c1] {vec = 8 : i64} : memref<?x256xbf16>, !tile.ring<stages = 3, rows = 128, cols = 64, bf16>
  tile.async_commit
  tile.async_wait {pending = 1 : i64}
  tile.block_barrier
  tile.return
}

// Rows of 63 elements: only element copies (no cp.async at all).
// CHECK-LABEL: llvm.func @copy_odd
// CHECK-NOT: nvvm.cp.async.shared.global
// CHECK: llvm.load %{{.*}} : !llvm.ptr<1> -> i16
// CHECK: llvm.select
// CHECK: llvm.store %{{.*}}, %{{.*}} : i16, !llvm.ptr<3>
// CHECK: llvm.return
tile.kernel @copy_odd(%a: memref<?x63xf16>) attributes {block_threads = 256 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>, scratch_bytes = 0 : i64, dynamic_smem_bytes = 17408 : i64} {
  %c0 = arith.constant 0 : index
  %r = tile.alloc_ring {offset = 0 : i64} : !tile.ring<stages = 2, rows = 64, cols = 64, f16>
  tile.async_copy %a[%c0, %c0], %r[%c0] {vec = 1 : i64} : memref<?x63xf16>, !tile.ring<stages = 2, rows = 64, cols = 64, f16>
  tile.return
}

// 4-byte copies go through L1 (.ca); 96 threads do not divide the 1024
// copies of a 64 x 64 stage: the last round is guarded.
// CHECK-LABEL: llvm.func @copy4
// CHECK-COUNT-11: nvvm.cp.async.shared.global %{{.*}}, %{{.*}}, 4, cache = ca, %{{.*}}
// CHECK: llvm.icmp "slt"
// CHECK: nvvm.cp.async.shared.global %{{.*}}, %{{.*}}, 4, cache = ca, %{{.*}}
tile.kernel @copy4(%a: memref<?x66xbf16>) attributes {block_threads = 96 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>, scratch_bytes = 0 : i64, dynamic_smem_bytes = 9216 : i64} {
  %c0 = arith.constant 0 : index
  %r = tile.alloc_ring {offset = 0 : i64} : !tile.ring<stages = 1, rows = 64, cols = 64, bf16>
  tile.async_copy %a[%c0, %c0], %r[%c0] {vec = 2 : i64} : memref<?x66xbf16>, !tile.ring<stages = 1, rows = 64, cols = 64, bf16>
  tile.return
}

// The warpgroup index: the thread index over 128.
// CHECK-LABEL: llvm.func @warpgroup
// CHECK: %[[TID:.*]] = nvvm.read.ptx.sreg.tid.x
// CHECK: %[[T64:.*]] = llvm.zext %[[TID]] : i32 to i64
// CHECK: %[[C128:.*]] = llvm.mlir.constant(128 : i64) : i64
// CHECK: llvm.udiv %[[T64]], %[[C128]] : i64
tile.kernel @warpgroup(%a: memref<?x64xbf16>) attributes {block_threads = 256 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>, scratch_bytes = 0 : i64} {
  %c0 = arith.constant 0 : index
  %g = tile.warpgroup_id
  %r = tile.alloc_ring {offset = 0 : i64} : !tile.ring<stages = 2, rows = 64, cols = 64, bf16>
  tile.async_copy %a[%g, %c0], %r[%c0] {vec = 8 : i64} : memref<?x64xbf16>, !tile.ring<stages = 2, rows = 64, cols = 64, bf16>
  tile.return
}
