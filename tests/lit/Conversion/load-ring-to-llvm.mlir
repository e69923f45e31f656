// RUN: tilejit-opt %S/../Dialect/load-ring.mlir --tile-allocate-shared --convert-tile-to-llvm | FileCheck %s
// RUN: tilejit-opt %S/../Dialect/load-ring.mlir --tile-allocate-shared --convert-tile-to-llvm | FileCheck %s --check-prefix=LOADS

// CHECK: %[[COL:.*]] = llvm.mlir.constant(32 : index) : i64

// The producer's two copies of the workspace's rows: each a 32-column
// panel at a time (two per 64-column stage), the map's coordinates
// (column, head, LSE or D) innermost first.
// CHECK: nvvm.mbarrier.arrive.expect_tx
// CHECK-COUNT-2: nvvm.cp.async.bulk.tensor.shared.cluster.global %{{.*}}, %arg0, %{{.*}}, box[%{{.*}}, %{{.*}}, %{{.*}}]
// CHECK: nvvm.mbarrier.arrive.expect_tx
// CHECK-COUNT-2: nvvm.cp.async.bulk.tensor.shared.cluster.global %{{.*}}, %arg0, %{{.*}}, box[%{{.*}}, %{{.*}}, %{{.*}}]

// Each read: a thread holds 16 of the 64 columns (8 j + 2 (lane % 4) + {0,
// 1}), in 8 pairs, each one 8-byte shared load at its place in the
// 128-byte swizzle (the 16-byte chunk XOR the row).
// CHECK: llvm.xor %{{.*}}, %{{.*}} : i64
// CHECK: llvm.load %{{.*}} {alignment = 8 : i64} : !llvm.ptr<3> -> vector<2xf32>

// The read from column 32 adds the offset (COL, above) to each thread's
// first column.
// CHECK: llvm.add %[[COL]], %{{.*}} : i64
// CHECK-COUNT-4: llvm.load %{{.*}} {alignment = 8 : i64} : !llvm.ptr<3> -> vector<2xf32>

// Three reads of 64 columns, 8 loads each, one of 32 from column 32, 4
// loads, and no other load from shared memory.
// LOADS-NOT: llvm.load %{{.*}} : !llvm.ptr<3>
// LOADS-COUNT-28: llvm.load %{{.*}} {alignment = 8 : i64} : !llvm.ptr<3> -> vector<2xf32>
// LOADS-NOT: llvm.load %{{.*}} : !llvm.ptr<3>
