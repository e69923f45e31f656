// RUN: tilejit-opt %s | tilejit-opt | FileCheck %s

// What attention adds to the ops of a matmul parses, verifies and prints
// back: 4-D tensor maps with outer coordinates, row reductions and
// broadcasts of a warpgroup's accumulator, i32 coordinate tiles for masks,
// and the product with A from registers.

#acc = #tile.wgmma
#rows = #tile.slice<dim = 1, parent = #tile.wgmma>
// CHECK-LABEL: tile.kernel @attn
tile.kernel @attn(%q: !tile.tensormap<rows = 64, cols = 64, bf16, rank = 4>, %o: memref<?x?x64xbf16>, %lse: memref<?x1x?xf32>, %sk: index) attributes {block_threads = 256 : i64, min_blocks = 1 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %rq = tile.alloc_ring : !tile.ring<stages = 1, rows = 64, cols = 64, bf16>
  %full = tile.alloc_barriers {arrivals = 1} : !tile.barriers<1>
  tile.warp_specialize attributes {consumers = 1, producer_regs = 40, consumer_regs = 240} {
    // CHECK: tma_load %{{.*}}[%{{.*}}, %{{.*}}] at [%{{.*}}, %{{.*}}], {{.*}} : {{.*}}<rows = 64, cols = 64, bf16, rank = 4>
    tile.tma_load %q[%c0, %c0] at [%c0, %c0], %rq[%c0], %full[%c0] : !tile.tensormap<rows = 64, cols = 64, bf16, rank = 4>, !tile.ring<stages = 1, rows = 64, cols = 64, bf16>, !tile.barriers<1>
    tile.yield
  }, {
  ^bb0(%c: index):
    %zero = arith.constant 0.0 : f32
    %ninf = arith.constant 0xFF800000 : f32
    %s0 = tile.splat %zero : f32 -> tensor<64x64xf32, #acc>
    tile.barrier_wait %full[%c0], %c0 : !tile.barriers<1>
    %s = tile.dot %rq[%c0, %c0], %rq[%c0, %c0], %s0 : !tile.ring<stages = 1, rows = 64, cols = 64, bf16>, !tile.ring<stages = 1, rows = 64, cols = 64, bf16>, tensor<64x64xf32, #acc> -> tensor<64x64xf32, #acc>
    // CHECK: iota {dim = 1 : i64} : tensor<64x64xi32, #tile.wgmma>
    %cols = tile.iota {dim = 1} : tensor<64x64xi32, #acc>
    %n = arith.index_cast %sk : index to i32
    // CHECK: splat %{{.*}} : i32 -> tensor<64x64xi32, #tile.wgmma>
    %nt = tile.splat %n : i32 -> tensor<64x64xi32, #acc>
    %ok = arith.cmpi slt, %cols, %nt : tensor<64x64xi32, #acc>
    %ninft = tile.splat %ninf : f32 -> tensor<64x64xf32, #acc>
    %masked = arith.select %ok, %s, %ninft : tensor<64x64xi1, #acc>, tensor<64x64xf32, #acc>
    // CHECK: reduce max %{{.*}} {dim = 1 : i64} : tensor<64x64xf32, #tile.wgmma> -> tensor<64xf32, #tile.slice<dim = 1, parent = #tile.wgmma>>
    %m = tile.reduce max %masked {dim = 1 : i64} : tensor<64x64xf32, #acc> -> tensor<64xf32, #rows>
    // CHECK: broadcast %{{.*}} : tensor<64xf32, #tile.slice<dim = 1, parent = #tile.wgmma>> -> tensor<64x64xf32, #tile.wgmma>
    %mb = tile.broadcast %m : tensor<64xf32, #rows> -> tensor<64x64xf32, #acc>
    %e = arith.subf %masked, %mb : tensor<64x64xf32, #acc>
    %p = math.exp2 %e : tensor<64x64xf32, #acc>
    %p16 = arith.truncf %p : tensor<64x64xf32, #acc> to tensor<64x64xbf16, #acc>
    // CHECK: dot_reg %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}], %{{.*}} {b_mn_major = true} : tensor<64x64xbf16, #tile.wgmma>, {{.*}}, tensor<64x64xf32, #tile.wgmma> -> tensor<64x64xf32, #tile.wgmma>
    %out = tile.dot_reg %p16, %rq[%c0, %c0], %s0 {b_mn_major = true} : tensor<64x64xbf16, #acc>, !tile.ring<stages = 1, rows = 64, cols = 64, bf16>, tensor<64x64xf32, #acc> -> tensor<64x64xf32, #acc>
    tile.store %out, %o[%c0, %c0, %c0] : tensor<64x64xf32, #acc>, memref<?x?x64xbf16>
    %l = math.log2 %m : tensor<64xf32, #rows>
    tile.store %l, %lse[%c0, %c0, %c0] : tensor<64xf32, #rows>, memref<?x1x?xf32>
    tile.yield
  }
  tile.return
}

// Products started with `async` and waited for later, several at a time.
// CHECK-LABEL: tile.kernel @overlap
tile.kernel @overlap(%o: memref<?x64xf32>) attributes {block_threads = 256 : i64, min_blocks = 1 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %r = tile.alloc_ring : !tile.ring<stages = 2, rows = 64, cols = 64, bf16>
  tile.warp_specialize attributes {consumers = 1, producer_regs = 24, consumer_regs = 240} {
    tile.yield
  }, {
  ^bb0(%c: index):
    %zero = arith.constant 0.0 : f32
    %z = tile.splat %zero : f32 -> tensor<64x64xf32, #acc>
    // CHECK: dot {{.*}} {async} :
    %s = tile.dot %r[%c0, %c0], %r[%c0, %c0], %z {async} : !tile.ring<stages = 2, rows = 64, cols = 64, bf16>, !tile.ring<stages = 2, rows = 64, cols = 64, bf16>, tensor<64x64xf32, #acc> -> tensor<64x64xf32, #acc>
    %p16 = arith.truncf %z : tensor<64x64xf32, #acc> to tensor<64x64xbf16, #acc>
    // CHECK: dot_reg {{.*}} {async, b_mn_major = true} :
    %pv = tile.dot_reg %p16, %r[%c0, %c0], %z {b_mn_major = true, async} : tensor<64x64xbf16, #acc>, !tile.ring<stages = 2, rows = 64, cols = 64, bf16>, tensor<64x64xf32, #acc> -> tensor<64x64xf32, #acc>
    // CHECK: dot_wait %{{.*}} {pending = 1 : i64} : tensor<64x64xf32, #tile.wgmma> -> tensor<64x64xf32, #tile.wgmma>
    %sr = tile.dot_wait %s {pending = 1 : i64} : tensor<64x64xf32, #acc> -> tensor<64x64xf32, #acc>
    // CHECK: dot_wait %{{.*}}, %{{.*}} {pending = 0 : i64}
    %a:2 = tile.dot_wait %sr, %pv {pending = 0 : i64} : tensor<64x64xf32, #acc>, tensor<64x64xf32, #acc> -> tensor<64x64xf32, #acc>, tensor<64x64xf32, #acc>
    %sum = arith.addf %a#0, %a#1 : tensor<64x64xf32, #acc>
    tile.store %sum, %o[%c0, %c0] : tensor<64x64xf32, #acc>, memref<?x64xf32>
    tile.yield
  }
  tile.return
}

// The columns of a warpgroup tile (the backward pass's per-query LSE and D,
// the queries along the columns): loaded, broadcast down the rows, stored.
#cols = #tile.slice<dim = 0, parent = #tile.wgmma>
// CHECK-LABEL: tile.kernel @columns
tile.kernel @columns(%w: memref<?x?xf32>, %o: memref<?x64xf32>) attributes {block_threads = 128 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  // CHECK: load %{{.*}} : memref<?x?xf32> -> tensor<64xf32, #tile.slice<dim = 0, parent = #tile.wgmma>>
  %v = tile.load %w[%c0, %c0] : memref<?x?xf32> -> tensor<64xf32, #cols>
  // CHECK: broadcast %{{.*}} : tensor<64xf32, #tile.slice<dim = 0, parent = #tile.wgmma>> -> tensor<64x64xf32, #tile.wgmma>
  %b = tile.broadcast %v : tensor<64xf32, #cols> -> tensor<64x64xf32, #acc>
  tile.store %b, %o[%c0, %c0] : tensor<64x64xf32, #acc>, memref<?x64xf32>
  %two = arith.addf %v, %v : tensor<64xf32, #cols>
  tile.store %two, %w[%c0, %c0] : tensor<64xf32, #cols>, memref<?x?xf32>
  tile.return
}

// The backward's dQ: a warpgroup's gradient tile (rows: keys) stored into
// its rows of a ring stage, read back transposed as A of another product
// (rows: queries), which is added into f32 memory.
// CHECK-LABEL: tile.kernel @scores_gradient
tile.kernel @scores_gradient(%acc: memref<?x64xf32>) attributes {block_threads = 256 : i64, min_blocks = 1 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %ds = tile.alloc_ring : !tile.ring<stages = 2, rows = 128, cols = 64, bf16>
  %k = tile.alloc_ring : !tile.ring<stages = 1, rows = 128, cols = 64, bf16>
  tile.warp_specialize attributes {consumers = 1, producer_regs = 24, consumer_regs = 240} {
    tile.yield
  }, {
  ^bb0(%c: index):
    %zero = arith.constant 0.0 : f32
    %z = tile.splat %zero : f32 -> tensor<64x64xf32, #acc>
    %g = arith.truncf %z : tensor<64x64xf32, #acc> to tensor<64x64xbf16, #acc>
    // CHECK: store_ring %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}] : tensor<64x64xbf16, #tile.wgmma>, {{.*}}<stages = 2, rows = 128, cols = 64, bf16>
    tile.store_ring %g, %ds[%c0, %c64] : tensor<64x64xbf16, #acc>, !tile.ring<stages = 2, rows = 128, cols = 64, bf16>
    // Half of a stage's columns, from column 32 (two warpgroups' halves of
    // one tile).
    %h = tile.splat %zero : f32 -> tensor<64x32xf32, #acc>
    %h16 = arith.truncf %h : tensor<64x32xf32, #acc> to tensor<64x32xbf16, #acc>
    %c32 = arith.constant 32 : index
    // CHECK: store_ring %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}] : tensor<64x32xbf16, #tile.wgmma>, {{.*}}<stages = 2, rows = 128, cols = 64, bf16>
    tile.store_ring %h16, %ds[%c1, %c0, %c32] : tensor<64x32xbf16, #acc>, !tile.ring<stages = 2, rows = 128, cols = 64, bf16>
    %dq = tile.dot %ds[%c0, %c0], %k[%c0, %c0], %z {a_mn_major = true, b_mn_major = true} : !tile.ring<stages = 2, rows = 128, cols = 64, bf16>, !tile.ring<stages = 1, rows = 128, cols = 64, bf16>, tensor<64x64xf32, #acc> -> tensor<64x64xf32, #acc>
    // CHECK: store %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}] {add} : tensor<64x64xf32, #tile.wgmma>, memref<?x64xf32>
    tile.store %dq, %acc[%c0, %c0] {add} : tensor<64x64xf32, #acc>, memref<?x64xf32>
    tile.yield
  }
  tile.return
}
