// RUN: tilejit-opt %S/../Dialect/varlen.mlir --tilejit-lower-to-llvm=arch=sm_90a | FileCheck %s

// cu_seqlens[seq] and cu_seqlens[seq + 1]: 4-byte words, widened signed.
// CHECK: llvm.func @one_sequence
// CHECK: %[[W0:.*]] = llvm.load %{{.*}} {alignment = 4 : i64} : !llvm.ptr<1> -> i32
// CHECK-NEXT: %[[S:.*]] = llvm.sext %[[W0]] : i32 to i64
// CHECK: %[[W1:.*]] = llvm.load %{{.*}} {alignment = 4 : i64} : !llvm.ptr<1> -> i32
// CHECK-NEXT: %[[E:.*]] = llvm.sext %[[W1]] : i32 to i64
// CHECK-NEXT: %[[LEN:.*]] = llvm.sub %[[E]], %[[S]] : i64
// The view: the pointer moved by `start` rows of 512 f32, 4 bytes each,
// the row count replaced by the length cut to the rows left from `start`,
// at least 0, and 0 unless 0 <= start < rows.
// CHECK: %[[ROWS:.*]] = llvm.extractvalue %arg1[1]
// CHECK: %[[ROW:.*]] = llvm.add %{{.*}}, %[[S]] : i64
// CHECK-NEXT: %[[EL:.*]] = llvm.mul %[[ROW]], %{{.*}} : i64
// CHECK-NEXT: %[[BY:.*]] = llvm.mul %[[EL]], %{{.*}} : i64
// CHECK: %[[PTR:.*]] = llvm.getelementptr %{{.*}}[%[[BY]]]
// CHECK-NEXT: %[[Z:.*]] = llvm.mlir.constant(0 : i64)
// CHECK-NEXT: %[[LEFT:.*]] = llvm.sub %[[ROWS]], %[[S]] : i64
// CHECK-NEXT: %[[C1:.*]] = llvm.icmp "slt" %[[LEN]], %[[LEFT]] : i64
// CHECK-NEXT: %[[M1:.*]] = llvm.select %[[C1]], %[[LEN]], %[[LEFT]]
// CHECK-NEXT: %[[C2:.*]] = llvm.icmp "sgt" %[[M1]], %[[Z]] : i64
// CHECK-NEXT: %[[M2:.*]] = llvm.select %[[C2]], %[[M1]], %[[Z]]
// CHECK-NEXT: %[[C3:.*]] = llvm.icmp "slt" %[[S]], %[[ROWS]] : i64
// CHECK-NEXT: %[[C4:.*]] = llvm.icmp "sge" %[[S]], %[[Z]] : i64
// CHECK-NEXT: %[[IN:.*]] = llvm.and %[[C4]], %[[C3]]
// CHECK-NEXT: %[[SIZE:.*]] = llvm.select %[[IN]], %[[M2]], %[[Z]]
// CHECK-NEXT: %[[P:.*]] = llvm.insertvalue %[[PTR]], %{{.*}}[0] : !llvm.struct<(ptr<1>, i64, i64)>
// CHECK-NEXT: %[[V:.*]] = llvm.insertvalue %[[SIZE]], %[[P]][1] : !llvm.struct<(ptr<1>, i64, i64)>
// The store masks its row with the view's row count.
// CHECK: %[[N:.*]] = llvm.extractvalue %[[V]][1]
// CHECK: %[[OK:.*]] = llvm.icmp "slt" %{{.*}}, %[[N]] : i64
// CHECK: llvm.extractvalue %[[V]][0]
// CHECK: "@$5 st.global.v4.f32 [$0+0], {$1, $2, $3, $4};", "l,f,f,f,f,b" {{.*}}, %[[OK]]
