// RUN: tilejit-opt %s | tilejit-opt | FileCheck %s

// A helper beside the producer and the consumer: the consumer leaves its
// f32 part in a stage and arrives on `full`; the helper (one thread), step
// by step, waits for it and for its turn on a flag, adds the part into the
// sums by TMA, gives the stage back once it is read (`free`), and sets the
// flag once the addition is whole (the flags ordered with the TMA
// reductions they guard: async_proxy).

#acc = #tile.wgmma
// CHECK-LABEL: tile.kernel @in_turn
tile.kernel @in_turn(%sums: !tile.tensormap<rows = 64, cols = 32, f32, rank = 4>, %flags: memref<?x?x2xf32>, %t: index, %turn: index, %steps: index) attributes {block_threads = 256 : i64, min_blocks = 1 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %part = tile.alloc_ring : !tile.ring<stages = 1, rows = 64, cols = 64, f32>
  %full = tile.alloc_barriers {arrivals = 1} : !tile.barriers<1>
  %free = tile.alloc_barriers {arrivals = 1} : !tile.barriers<1>
  tile.warp_specialize attributes {consumers = 1, producer_regs = 40, consumer_regs = 232} {
    tile.yield
  }, {
  ^bb0(%c: index):
    %one = arith.constant 1.0 : f32
    %mine = tile.splat %one : f32 -> tensor<64x64xf32, #acc>
    tile.store_ring %mine, %part[%c0, %c0] : tensor<64x64xf32, #acc>, !tile.ring<stages = 1, rows = 64, cols = 64, f32>
    tile.barrier_arrive %full[%c0] : !tile.barriers<1>
    tile.barrier_wait %free[%c0], %c0 : !tile.barriers<1>
    tile.yield
  // CHECK: }, helper {
  }, helper {
    // CHECK: scf.for
    scf.for %i = %c0 to %steps step %c1 {
      // CHECK: tile.barrier_wait
      tile.barrier_wait %full[%c0], %i : !tile.barriers<1>
      // CHECK-NEXT: tile.flag_wait {{.*}} {async_proxy}
      tile.flag_wait %flags[%t, %i, %c0], %turn {async_proxy} : memref<?x?x2xf32>
      // CHECK-NEXT: tile.tma_store {{.*}} {reduce}
      tile.tma_store %part[%c0], %sums[%c0, %c0] at [%c0, %c0] {reduce} : !tile.ring<stages = 1, rows = 64, cols = 64, f32>, !tile.tensormap<rows = 64, cols = 32, f32, rank = 4>
      // CHECK-NEXT: tile.tma_store_wait {pending = 0 : i64, read}
      tile.tma_store_wait {pending = 0 : i64, read}
      // CHECK-NEXT: tile.barrier_arrive
      tile.barrier_arrive %free[%c0] : !tile.barriers<1>
      // CHECK-NEXT: tile.tma_store_wait {pending = 0 : i64}
      tile.tma_store_wait {pending = 0 : i64}
      %next = arith.addi %turn, %c1 : index
      // CHECK: tile.flag_set {{.*}} {async_proxy}
      tile.flag_set %flags[%t, %i, %c0], %next {async_proxy} : memref<?x?x2xf32>
    }
    tile.yield
  }
  tile.return
}
