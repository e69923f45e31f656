// RUN: tilejit-opt %s | tilejit-opt | FileCheck %s
// RUN: tilejit-opt %s --mlir-print-op-generic | tilejit-opt | FileCheck %s

// Round trip of every tile op and attribute: the printed form parses back to
// the same IR (the second RUN line also goes through the generic form).

#L = #tile.blocked<vec = 8, rowThreads = 1, colThreads = 256>
#L1 = #tile.slice<dim = 1, parent = #L>
#L0 = #tile.slice<dim = 0, parent = #L>

#B = #tile.blocked<vec = 4, rowThreads = 4, colThreads = 64>
#R = #tile.slice<dim = 1, parent = #B>
#C = #tile.slice<dim = 0, parent = #B>

#W = #tile.blocked<vec = 1, rowThreads = 8, colThreads = 4>

// Affine maps are printed as aliases at the top of the module.
// CHECK-DAG: #[[$ROWS:.+]] = affine_map<()[s0] -> (s0)>
// CHECK-DAG: #[[$MIN2:.+]] = affine_map<()[s0, s1] -> (s0 ceildiv 4, s1)>

// A one-row blocked tile of bf16: load, widen, reduce a row, a math op on the
// per-row slice, broadcast back, narrow, store; the slice is stored into a
// rank-1 memref.
// CHECK-LABEL: tile.kernel @rmsnorm_row
// CHECK-SAME: (%[[X:.+]]: memref<?x4096xbf16>, %[[Y:.+]]: memref<?x4096xbf16>, %[[RS:.+]]: memref<?xf32>)
// CHECK-SAME: attributes {block_threads = 256 : i64, grid = #[[$ROWS]], grid_operands = array<i64: 0, 0>}
// CHECK: %[[PID:.+]] = program_id x
// CHECK: %[[C0:.+]] = arith.constant 0 : index
// CHECK: %[[T:.+]] = load %[[X]][%[[PID]], %[[C0]]] : memref<?x4096xbf16> -> tensor<1x4096xbf16, #tile.blocked<vec = 8, rowThreads = 1, colThreads = 256>>
// CHECK: %[[F:.+]] = arith.extf %[[T]] : tensor<1x4096xbf16, #tile.blocked<vec = 8, rowThreads = 1, colThreads = 256>> to tensor<1x4096xf32, #tile.blocked<vec = 8, rowThreads = 1, colThreads = 256>>
// CHECK: %[[SQ:.+]] = arith.mulf %[[F]], %[[F]] : tensor<1x4096xf32, #tile.blocked<vec = 8, rowThreads = 1, colThreads = 256>>
// CHECK: %[[S:.+]] = reduce sum %[[SQ]] {dim = 1 : i64} : tensor<1x4096xf32, #tile.blocked<vec = 8, rowThreads = 1, colThreads = 256>> -> tensor<1xf32, #tile.slice<dim = 1, parent = #tile.blocked<vec = 8, rowThreads = 1, colThreads = 256>>>
// CHECK: %[[INV:.+]] = math.rsqrt %[[S]] : tensor<1xf32, #tile.slice<dim = 1, parent = #tile.blocked<vec = 8, rowThreads = 1, colThreads = 256>>>
// CHECK: store %[[INV]], %[[RS]][%[[PID]]] : tensor<1xf32, #tile.slice<dim = 1, parent = #tile.blocked<vec = 8, rowThreads = 1, colThreads = 256>>>, memref<?xf32>
// CHECK: %[[BC:.+]] = broadcast %[[INV]] : tensor<1xf32, #tile.slice<dim = 1, parent = #tile.blocked<vec = 8, rowThreads = 1, colThreads = 256>>> -> tensor<1x4096xf32, #tile.blocked<vec = 8, rowThreads = 1, colThreads = 256>>
// CHECK: %[[M:.+]] = arith.mulf %[[F]], %[[BC]] : tensor<1x4096xf32, #tile.blocked<vec = 8, rowThreads = 1, colThreads = 256>>
// CHECK: %[[O:.+]] = arith.truncf %[[M]] : tensor<1x4096xf32, #tile.blocked<vec = 8, rowThreads = 1, colThreads = 256>> to tensor<1x4096xbf16, #tile.blocked<vec = 8, rowThreads = 1, colThreads = 256>>
// CHECK: store %[[O]], %[[Y]][%[[PID]], %[[C0]]] : tensor<1x4096xbf16, #tile.blocked<vec = 8, rowThreads = 1, colThreads = 256>>, memref<?x4096xbf16>
// CHECK: return
tile.kernel @rmsnorm_row(%x: memref<?x4096xbf16>, %y: memref<?x4096xbf16>, %r: memref<?xf32>) attributes {block_threads = 256 : i64, grid = affine_map<()[s0] -> (s0)>, grid_operands = array<i64: 0, 0>} {
  %pid = tile.program_id x
  %c0 = arith.constant 0 : index
  %t = tile.load %x[%pid, %c0] : memref<?x4096xbf16> -> tensor<1x4096xbf16, #L>
  %f = arith.extf %t : tensor<1x4096xbf16, #L> to tensor<1x4096xf32, #L>
  %sq = arith.mulf %f, %f : tensor<1x4096xf32, #L>
  %s = tile.reduce sum %sq {dim = 1 : i64} : tensor<1x4096xf32, #L> -> tensor<1xf32, #L1>
  %rs = math.rsqrt %s : tensor<1xf32, #L1>
  tile.store %rs, %r[%pid] : tensor<1xf32, #L1>, memref<?xf32>
  %b = tile.broadcast %rs : tensor<1xf32, #L1> -> tensor<1x4096xf32, #L>
  %m = arith.mulf %f, %b : tensor<1x4096xf32, #L>
  %o = arith.truncf %m : tensor<1x4096xf32, #L> to tensor<1x4096xbf16, #L>
  tile.store %o, %y[%pid, %c0] : tensor<1x4096xbf16, #L>, memref<?x4096xbf16>
  tile.return
}

// A 2-D blocked tile (4 rows of threads): a padded load, reductions of every
// kind along both dimensions into both slice layouts, splat, broadcasts from
// both slices, a persistent scf.for carrying a tile, and a rank-1 tile stored
// into a rank-2 memref at a leading index. The grid is the min of two results,
// the second bound to the index argument %n itself (dimension -1); the config
// dictionary is kept as is.
// CHECK-LABEL: tile.kernel @blocked_2d
// CHECK-SAME: (%[[X:.+]]: memref<?x?xf32>, %[[W:.+]]: memref<512xf32>, %[[OUT:.+]]: memref<?x512xf32>, %[[N:.+]]: index, %[[EPS:.+]]: f32)
// CHECK-SAME: attributes {block_threads = 256 : i64, config = {rows_per_block = 4 : i64, vec = 4 : i64}, grid = #[[$MIN2]], grid_operands = array<i64: 0, 0, 3, -1>}
// CHECK: %[[PID:.+]] = program_id x
// CHECK: %[[NP:.+]] = num_programs x
// CHECK: %[[C0:.+]] = arith.constant 0 : index
// CHECK: %[[T:.+]] = load %[[X]][%[[PID]], %[[C0]]] {padding = 0xFFF0000000000000 : f64} : memref<?x?xf32> -> tensor<4x512xf32, #tile.blocked<vec = 4, rowThreads = 4, colThreads = 64>>
// CHECK: %[[WT:.+]] = load %[[W]][%[[C0]]] : memref<512xf32> -> tensor<512xf32, #tile.slice<dim = 0, parent = #tile.blocked<vec = 4, rowThreads = 4, colThreads = 64>>>
// CHECK: %[[P:.+]] = load %[[X]][%[[PID]], %[[C0]]] {padding = 1.000000e+00 : f64} : memref<?x?xf32> -> tensor<512xf32, #tile.slice<dim = 0, parent = #tile.blocked<vec = 4, rowThreads = 4, colThreads = 64>>>
// CHECK: %[[SUM:.+]] = reduce sum %[[T]] {dim = 1 : i64} : tensor<4x512xf32, #tile.blocked<vec = 4, rowThreads = 4, colThreads = 64>> -> tensor<4xf32, #tile.slice<dim = 1, parent = #tile.blocked<vec = 4, rowThreads = 4, colThreads = 64>>>
// CHECK: %[[MAX:.+]] = reduce max %[[T]] {dim = 0 : i64} : tensor<4x512xf32, #tile.blocked<vec = 4, rowThreads = 4, colThreads = 64>> -> tensor<512xf32, #tile.slice<dim = 0, parent = #tile.blocked<vec = 4, rowThreads = 4, colThreads = 64>>>
// CHECK: %[[MIN:.+]] = reduce min %[[T]] {dim = 1 : i64} : tensor<4x512xf32, #tile.blocked<vec = 4, rowThreads = 4, colThreads = 64>> -> tensor<4xf32, #tile.slice<dim = 1, parent = #tile.blocked<vec = 4, rowThreads = 4, colThreads = 64>>>
// CHECK: %[[E:.+]] = splat %[[EPS]] : f32 -> tensor<4xf32, #tile.slice<dim = 1, parent = #tile.blocked<vec = 4, rowThreads = 4, colThreads = 64>>>
// CHECK: %[[SE:.+]] = arith.addf %[[SUM]], %[[E]] : tensor<4xf32, #tile.slice<dim = 1, parent = #tile.blocked<vec = 4, rowThreads = 4, colThreads = 64>>>
// CHECK: %[[B1:.+]] = broadcast %[[SE]] : tensor<4xf32, #tile.slice<dim = 1, parent = #tile.blocked<vec = 4, rowThreads = 4, colThreads = 64>>> -> tensor<4x512xf32, #tile.blocked<vec = 4, rowThreads = 4, colThreads = 64>>
// CHECK: %[[B0:.+]] = broadcast %[[MAX]] : tensor<512xf32, #tile.slice<dim = 0, parent = #tile.blocked<vec = 4, rowThreads = 4, colThreads = 64>>> -> tensor<4x512xf32, #tile.blocked<vec = 4, rowThreads = 4, colThreads = 64>>
// CHECK: %[[SUB:.+]] = arith.subf %[[B1]], %[[B0]] : tensor<4x512xf32, #tile.blocked<vec = 4, rowThreads = 4, colThreads = 64>>
// CHECK: %[[LOOP:.+]] = scf.for %[[I:.+]] = %[[PID]] to %[[N]] step %[[NP]] iter_args(%[[ACC:.+]] = %[[SUB]]) -> (tensor<4x512xf32, #tile.blocked<vec = 4, rowThreads = 4, colThreads = 64>>) {
// CHECK:   %[[NEXT:.+]] = arith.addf %[[ACC]], %[[T]] : tensor<4x512xf32, #tile.blocked<vec = 4, rowThreads = 4, colThreads = 64>>
// CHECK:   scf.yield %[[NEXT]] : tensor<4x512xf32, #tile.blocked<vec = 4, rowThreads = 4, colThreads = 64>>
// CHECK: }
// CHECK: store %[[LOOP]], %[[OUT]][%[[PID]], %[[C0]]] : tensor<4x512xf32, #tile.blocked<vec = 4, rowThreads = 4, colThreads = 64>>, memref<?x512xf32>
// CHECK: store %[[WT]], %[[OUT]][%[[PID]], %[[C0]]] : tensor<512xf32, #tile.slice<dim = 0, parent = #tile.blocked<vec = 4, rowThreads = 4, colThreads = 64>>>, memref<?x512xf32>
// CHECK: store %[[MIN]], %[[OUT]][%[[PID]], %[[C0]]] : tensor<4xf32, #tile.slice<dim = 1, parent = #tile.blocked<vec = 4, rowThreads = 4, colThreads = 64>>>, memref<?x512xf32>
// CHECK: store %[[P]], %[[OUT]][%[[PID]], %[[C0]]] : tensor<512xf32, #tile.slice<dim = 0, parent = #tile.blocked<vec = 4, rowThreads = 4, colThreads = 64>>>, memref<?x512xf32>
// CHECK: return
tile.kernel @blocked_2d(%x: memref<?x?xf32>, %w: memref<512xf32>, %out: memref<?x512xf32>, %n: index, %eps: f32) attributes {
    block_threads = 256 : i64,
    grid = affine_map<()[s0, s1] -> (s0 ceildiv 4, s1)>,
    grid_operands = array<i64: 0, 0, 3, -1>,
    config = {vec = 4 : i64, rows_per_block = 4 : i64}} {
  %pid = tile.program_id x
  %np = tile.num_programs x
  %c0 = arith.constant 0 : index
  %t = tile.load %x[%pid, %c0] {padding = 0xFFF0000000000000 : f64} : memref<?x?xf32> -> tensor<4x512xf32, #B>
  %wt = tile.load %w[%c0] : memref<512xf32> -> tensor<512xf32, #C>
  %p = tile.load %x[%pid, %c0] {padding = 1.0 : f64} : memref<?x?xf32> -> tensor<512xf32, #C>
  %sum = tile.reduce sum %t {dim = 1 : i64} : tensor<4x512xf32, #B> -> tensor<4xf32, #R>
  %max = tile.reduce max %t {dim = 0 : i64} : tensor<4x512xf32, #B> -> tensor<512xf32, #C>
  %min = tile.reduce min %t {dim = 1 : i64} : tensor<4x512xf32, #B> -> tensor<4xf32, #R>
  %e = tile.splat %eps : f32 -> tensor<4xf32, #R>
  %se = arith.addf %sum, %e : tensor<4xf32, #R>
  %b1 = tile.broadcast %se : tensor<4xf32, #R> -> tensor<4x512xf32, #B>
  %b0 = tile.broadcast %max : tensor<512xf32, #C> -> tensor<4x512xf32, #B>
  %sub = arith.subf %b1, %b0 : tensor<4x512xf32, #B>
  %loop = scf.for %i = %pid to %n step %np iter_args(%acc = %sub) -> (tensor<4x512xf32, #B>) {
    %next = arith.addf %acc, %t : tensor<4x512xf32, #B>
    scf.yield %next : tensor<4x512xf32, #B>
  }
  tile.store %loop, %out[%pid, %c0] : tensor<4x512xf32, #B>, memref<?x512xf32>
  tile.store %wt, %out[%pid, %c0] : tensor<512xf32, #C>, memref<?x512xf32>
  tile.store %min, %out[%pid, %c0] : tensor<4xf32, #R>, memref<?x512xf32>
  tile.store %p, %out[%pid, %c0] : tensor<512xf32, #C>, memref<?x512xf32>
  tile.return
}

// Grid dimensions y and z, f16 tiles, a splat of a narrow scalar, a rank-4
// memref, a blocked layout of narrow rows (4 lanes of 8 rows), and an
// operation without a tile result (memref.dim): all are valid tile IR, though
// only x and f32 arithmetic pass --tile-check-target.
// CHECK-LABEL: tile.kernel @other_dims
// CHECK-SAME: (%[[A:.+]]: memref<2x3x?x16xf16>, %[[H:.+]]: f32)
// CHECK-SAME: attributes {block_threads = 32 : i64, grid = #[[$ROWS]], grid_operands = array<i64: 0, 2>}
// CHECK: %[[Y:.+]] = program_id y
// CHECK: %[[Z:.+]] = program_id z
// CHECK: %{{.+}} = num_programs y
// CHECK: %{{.+}} = num_programs z
// CHECK: %[[C2:.+]] = arith.constant 2 : index
// CHECK: %[[D:.+]] = memref.dim %[[A]], %[[C2]] : memref<2x3x?x16xf16>
// CHECK: %[[T:.+]] = load %[[A]][%[[Y]], %[[Z]], %[[D]], %[[Y]]] : memref<2x3x?x16xf16> -> tensor<8x16xf16, #tile.blocked<vec = 1, rowThreads = 8, colThreads = 4>>
// CHECK: %[[HF:.+]] = arith.truncf %[[H]] : f32 to f16
// CHECK: %[[S:.+]] = splat %[[HF]] : f16 -> tensor<8x16xf16, #tile.blocked<vec = 1, rowThreads = 8, colThreads = 4>>
// CHECK: %[[SUM:.+]] = arith.addf %[[T]], %[[S]] : tensor<8x16xf16, #tile.blocked<vec = 1, rowThreads = 8, colThreads = 4>>
// CHECK: store %[[SUM]], %[[A]][%[[Z]], %[[Y]], %[[D]], %[[Z]]] : tensor<8x16xf16, #tile.blocked<vec = 1, rowThreads = 8, colThreads = 4>>, memref<2x3x?x16xf16>
// CHECK: return
tile.kernel @other_dims(%a: memref<2x3x?x16xf16>, %h: f32) attributes {block_threads = 32 : i64, grid = affine_map<()[s0] -> (s0)>, grid_operands = array<i64: 0, 2>} {
  %y = tile.program_id y
  %z = tile.program_id z
  %ny = tile.num_programs y
  %nz = tile.num_programs z
  %c2 = arith.constant 2 : index
  %d = memref.dim %a, %c2 : memref<2x3x?x16xf16>
  %t = tile.load %a[%y, %z, %d, %y] : memref<2x3x?x16xf16> -> tensor<8x16xf16, #W>
  %hf = arith.truncf %h : f32 to f16
  %s = tile.splat %hf : f16 -> tensor<8x16xf16, #W>
  %sum = arith.addf %t, %s : tensor<8x16xf16, #W>
  tile.store %sum, %a[%z, %y, %d, %z] : tensor<8x16xf16, #W>, memref<2x3x?x16xf16>
  tile.return
}

// The smallest kernel: no arguments, a constant grid, an empty body.
// CHECK-LABEL: tile.kernel @empty()
// CHECK-SAME: attributes {block_threads = 1024 : i64, grid = #{{.+}}, grid_operands = array<i64>}
// CHECK-NEXT: return
tile.kernel @empty() attributes {block_threads = 1024 : i64, grid = affine_map<()[] -> (1)>, grid_operands = array<i64>} {
  tile.return
}
