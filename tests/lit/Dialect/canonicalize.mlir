// RUN: tilejit-opt %s --split-input-file --canonicalize | FileCheck %s

// Conversions fold into the memory accesses: arith.extf of a loaded tile
// becomes a widening load, arith.truncf of a stored tile a narrowing store.

#L = #tile.blocked<vec = 8, rowThreads = 1, colThreads = 64>
#S = #tile.slice<dim = 0, parent = #L>

// CHECK-LABEL: tile.kernel @fold
// CHECK-SAME: (%[[X:.+]]: memref<?x512xbf16>, %[[W:.+]]: memref<512xf16>, %[[Y:.+]]: memref<?x512xbf16>)
// Padding and streaming stay on the widened load.
// CHECK:      %[[XF:.+]] = load %[[X]][%{{.+}}, %{{.+}}] {padding = 1.000000e+00 : f64, streaming} : memref<?x512xbf16> -> tensor<1x512xf32, #{{.+}}>
// CHECK-NEXT: %[[WF:.+]] = load %[[W]][%{{.+}}] : memref<512xf16> -> tensor<512xf32, #{{.+}}>
// CHECK-NEXT: %[[WB:.+]] = broadcast %[[WF]]
// CHECK-NEXT: %[[P:.+]] = arith.mulf %[[XF]], %[[WB]]
// CHECK-NEXT: store %[[P]], %[[Y]][%{{.+}}, %{{.+}}] {streaming} : tensor<1x512xf32, #{{.+}}>, memref<?x512xbf16>
// CHECK-NEXT: return
tile.kernel @fold(%x: memref<?x512xbf16>, %w: memref<512xf16>, %y: memref<?x512xbf16>) attributes {block_threads = 64 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %t = tile.load %x[%c0, %c0] {padding = 1.0 : f64, streaming} : memref<?x512xbf16> -> tensor<1x512xbf16, #L>
  %tw = tile.load %w[%c0] : memref<512xf16> -> tensor<512xf16, #S>
  %f = arith.extf %t : tensor<1x512xbf16, #L> to tensor<1x512xf32, #L>
  %fw = arith.extf %tw : tensor<512xf16, #S> to tensor<512xf32, #S>
  %b = tile.broadcast %fw : tensor<512xf32, #S> -> tensor<1x512xf32, #L>
  %p = arith.mulf %f, %b : tensor<1x512xf32, #L>
  %n = arith.truncf %p : tensor<1x512xf32, #L> to tensor<1x512xbf16, #L>
  tile.store %n, %y[%c0, %c0] {streaming} : tensor<1x512xbf16, #L>, memref<?x512xbf16>
  tile.return
}

// -----

// The widened load stays where the load was: a store between the load and
// the extf may write the same memory.
#L = #tile.blocked<vec = 8, rowThreads = 1, colThreads = 64>

// CHECK-LABEL: tile.kernel @order
// CHECK:      %[[OLD:.+]] = load %[[M:.+]][%{{.+}}, %{{.+}}] : memref<?x512xbf16> -> tensor<1x512xf32, #{{.+}}>
// CHECK-NEXT: %[[NEW:.+]] = load
// CHECK-NEXT: store %[[NEW]], %[[M]]
// CHECK-NEXT: store %[[OLD]],
tile.kernel @order(%m: memref<?x512xbf16>, %v: memref<?x512xbf16>, %o: memref<?x512xf32>) attributes {block_threads = 64 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %old = tile.load %m[%c0, %c0] : memref<?x512xbf16> -> tensor<1x512xbf16, #L>
  %new = tile.load %v[%c0, %c0] : memref<?x512xbf16> -> tensor<1x512xbf16, #L>
  tile.store %new, %m[%c0, %c0] : tensor<1x512xbf16, #L>, memref<?x512xbf16>
  %f = arith.extf %old : tensor<1x512xbf16, #L> to tensor<1x512xf32, #L>
  tile.store %f, %o[%c0, %c0] : tensor<1x512xf32, #L>, memref<?x512xf32>
  tile.return
}

// -----

// Not folded: a loaded tile with another use (it would be loaded twice), and
// a truncf that does not round to nearest even.
#L = #tile.blocked<vec = 8, rowThreads = 1, colThreads = 64>

// CHECK-LABEL: tile.kernel @keep
// CHECK:      %[[T:.+]] = load %{{.+}} : memref<?x512xbf16> -> tensor<1x512xbf16, #{{.+}}>
// CHECK-NEXT: %[[F:.+]] = arith.extf %[[T]]
// CHECK-NEXT: store %[[T]], %{{.+}} : tensor<1x512xbf16, #{{.+}}>, memref<?x512xbf16>
// CHECK-NEXT: %[[SQ:.+]] = arith.mulf %[[F]], %[[F]]
// CHECK-NEXT: %[[N:.+]] = arith.truncf %[[SQ]] toward_zero
// CHECK-NEXT: store %[[N]], %{{.+}} : tensor<1x512xbf16, #{{.+}}>, memref<?x512xbf16>
tile.kernel @keep(%x: memref<?x512xbf16>, %y: memref<?x512xbf16>, %z: memref<?x512xbf16>) attributes {block_threads = 64 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>} {
  %c0 = arith.constant 0 : index
  %t = tile.load %x[%c0, %c0] : memref<?x512xbf16> -> tensor<1x512xbf16, #L>
  %f = arith.extf %t : tensor<1x512xbf16, #L> to tensor<1x512xf32, #L>
  tile.store %t, %y[%c0, %c0] : tensor<1x512xbf16, #L>, memref<?x512xbf16>
  %sq = arith.mulf %f, %f : tensor<1x512xf32, #L>
  %n = arith.truncf %sq toward_zero : tensor<1x512xf32, #L> to tensor<1x512xbf16, #L>
  tile.store %n, %z[%c0, %c0] : tensor<1x512xbf16, #L>, memref<?x512xbf16>
  tile.return
}
