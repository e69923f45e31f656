// RUN: tilejit-opt %s | tilejit-opt | FileCheck %s
// RUN: tilejit-opt %s --tile-allocate-shared | FileCheck %s --check-prefix=PLACE

// A persistent grid's programs take their tiles from a counter: the
// producer (one thread) waits until its slot of shared memory is free,
// takes the next tile with an atomic addition, writes it into the slot and
// arrives on the slot's barrier; the consumer waits for that phase, reads
// the slot (its two words: the tile and, here, the tile again as a place)
// and frees it. A value past the last tile ends both loops.

// CHECK-LABEL: tile.kernel @take_tiles
// PLACE-LABEL: tile.kernel @take_tiles
// PLACE-SAME: dynamic_smem_bytes = 1072 : i64
tile.kernel @take_tiles(%counter: memref<?xf32>, %tiles: index) attributes {block_threads = 256 : i64, min_blocks = 1 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  // PLACE: alloc_barriers {arrivals = 1 : i64, offset = 0 : i64} : <2>
  %full = tile.alloc_barriers {arrivals = 1} : !tile.barriers<2>
  %free = tile.alloc_barriers {arrivals = 1} : !tile.barriers<2>
  // CHECK: alloc_words : <4>
  // PLACE-NEXT: alloc_barriers {arrivals = 1 : i64, offset = 16 : i64} : <2>
  // PLACE-NEXT: alloc_words {offset = 32 : i64} : <4>
  %slots = tile.alloc_words : !tile.words<4>
  tile.warp_specialize attributes {consumers = 1, producer_regs = 40, consumer_regs = 232} {
    %n = scf.while (%j = %c0) : (index) -> index {
      %k = arith.remui %j, %c2 : index
      %round = arith.divui %j, %c2 : index
      %again = arith.addi %round, %c1 : index
      tile.barrier_wait %free[%k], %again : !tile.barriers<2>
      // CHECK: tile.fetch_add %{{.*}}[%{{.*}}], %{{.*}} : memref<?xf32>
      %t = tile.fetch_add %counter[%c0], %c1 : memref<?xf32>
      %w0 = arith.muli %k, %c2 : index
      %w1 = arith.addi %w0, %c1 : index
      // CHECK: tile.set_word %{{.*}}[%{{.*}}], %{{.*}} : <4>
      tile.set_word %slots[%w0], %t : !tile.words<4>
      tile.set_word %slots[%w1], %t : !tile.words<4>
      tile.barrier_arrive %full[%k] : !tile.barriers<2>
      %more = arith.cmpi ult, %t, %tiles : index
      scf.condition(%more) %j : index
    } do {
    ^bb0(%j: index):
      %next = arith.addi %j, %c1 : index
      scf.yield %next : index
    }
    tile.yield
  }, {
  ^bb0(%c: index):
    %n = scf.while (%j = %c0) : (index) -> index {
      %k = arith.remui %j, %c2 : index
      %round = arith.divui %j, %c2 : index
      tile.barrier_wait %full[%k], %round : !tile.barriers<2>
      %w0 = arith.muli %k, %c2 : index
      %w1 = arith.addi %w0, %c1 : index
      // The slot's two words in one read (one meeting of the warpgroup).
      // CHECK: %{{.*}}:2 = tile.get_word %{{.*}}[%{{.*}}, %{{.*}}] : <4>
      %t, %place = tile.get_word %slots[%w0, %w1] : !tile.words<4>
      tile.barrier_arrive %free[%k] : !tile.barriers<2>
      %more = arith.cmpi ult, %t, %tiles : index
      scf.condition(%more) %j : index
    } do {
    ^bb0(%j: index):
      %next = arith.addi %j, %c1 : index
      scf.yield %next : index
    }
    tile.yield
  }
  tile.return
}

// The helper (one thread) reads a slot alone, and may take from a counter
// and write a slot as the producer does.
// CHECK-LABEL: tile.kernel @helper_words
tile.kernel @helper_words(%counter: memref<?xf32>) attributes {block_threads = 256 : i64, min_blocks = 1 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %slots = tile.alloc_words : !tile.words<2>
  tile.warp_specialize attributes {consumers = 1, producer_regs = 40, consumer_regs = 232} {
    tile.yield
  }, {
  ^bb0(%c: index):
    tile.yield
  }, helper {
    // CHECK: tile.fetch_add
    %t = tile.fetch_add %counter[%c0], %c1 : memref<?xf32>
    // CHECK-NEXT: tile.set_word
    tile.set_word %slots[%c1], %t : !tile.words<2>
    // CHECK-NEXT: tile.get_word
    %u, %v = tile.get_word %slots[%c0, %c1] : !tile.words<2>
    tile.yield
  }
  tile.return
}
