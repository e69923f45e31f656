//===- TmaCopyKernel.h - a kernel that copies boxes through TMA -----*- C++ -*-===//
//
// Written in MLIR's LLVM dialect with NVVM ops: each block of a 3-D grid has
// the TMA unit copy one 64 x 256 box of an f32 tensor of shape
// [depth][rows][cols] into 64 KB of dynamic shared memory, waits on an
// mbarrier for the bytes, and writes the box's in-bounds elements to `out`
// (same shape). It takes a CUtensorMap by value.
//
// The box's destination must be 128-byte aligned, and the declared alignment
// of a dynamic shared array is not what a kernel gets: linked by nvJitLink,
// dynamic shared memory began 16 bytes after an 8-byte static barrier (the
// TMA copy then failed with CUDA_ERROR_MISALIGNED_ADDRESS on the H200). So
// the kernel has no static shared memory and aligns its dynamic base itself,
// with 128 bytes of slack; the mbarrier follows the box.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "compiler/Compiler.h"

namespace tilejit::testing {

constexpr int kTmaBoxCols = 64, kTmaBoxRows = 256;
constexpr int kTmaBoxBytes = kTmaBoxCols * kTmaBoxRows * 4;
/// The box, 128 bytes of slack to align it, and the mbarrier.
constexpr int kTmaDynamicSmemBytes = kTmaBoxBytes + 128 + 8;

inline const char *tmaCopyKernel() {
  return R"mlir(
module {
  llvm.mlir.global external @tj_dsmem() {addr_space = 3 : i32, alignment = 16 : i64} : !llvm.array<0 x i8>
  llvm.func @tma_box_copy(%tmap: !llvm.ptr {llvm.byval = !llvm.array<128 x i8>, llvm.align = 64 : i64, nvvm.grid_constant},
                          %out: !llvm.ptr<1>, %rows: i32, %cols: i32, %depth: i32)
      attributes {nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} {
    %c0 = llvm.mlir.constant(0 : i32) : i32
    %c1 = llvm.mlir.constant(1 : i32) : i32
    %c64 = llvm.mlir.constant(64 : i32) : i32
    %c128 = llvm.mlir.constant(128 : i32) : i32
    %c256 = llvm.mlir.constant(256 : i32) : i32
    %box = llvm.mlir.constant(16384 : i32) : i32
    %bytes = llvm.mlir.constant(65536 : i32) : i32
    %ticks = llvm.mlir.constant(1000000 : i32) : i32
    %c127 = llvm.mlir.constant(127 : i32) : i32
    %cm128 = llvm.mlir.constant(-128 : i32) : i32
    %base = llvm.mlir.addressof @tj_dsmem : !llvm.ptr<3>
    %bi = llvm.ptrtoint %base : !llvm.ptr<3> to i32
    %bu = llvm.add %bi, %c127 : i32
    %ai = llvm.and %bu, %cm128 : i32
    %buf = llvm.inttoptr %ai : i32 to !llvm.ptr<3>
    %bar = llvm.getelementptr %buf[65536] : (!llvm.ptr<3>) -> !llvm.ptr<3>, i8
    %tid = nvvm.read.ptx.sreg.tid.x : i32
    %bx = nvvm.read.ptx.sreg.ctaid.x : i32
    %by = nvvm.read.ptx.sreg.ctaid.y : i32
    %bz = nvvm.read.ptx.sreg.ctaid.z : i32
    %col0 = llvm.mul %bx, %c64 : i32
    %row0 = llvm.mul %by, %c256 : i32
    %lead = llvm.icmp "eq" %tid, %c0 : i32
    llvm.cond_br %lead, ^init, ^synced
  ^init:
    nvvm.mbarrier.init %bar, %c1 : !llvm.ptr<3>, i32
    nvvm.fence.mbarrier.init
    llvm.br ^synced
  ^synced:
    nvvm.barrier0
    llvm.cond_br %lead, ^issue, ^wait
  ^issue:
    %st = nvvm.mbarrier.arrive.expect_tx %bar, %bytes : !llvm.ptr<3>, i32 -> i64
    %cbuf = llvm.addrspacecast %buf : !llvm.ptr<3> to !llvm.ptr<7>
    nvvm.cp.async.bulk.tensor.shared.cluster.global %cbuf, %tmap, %bar, box[%col0, %row0, %bz] : !llvm.ptr<7>, !llvm.ptr
    llvm.br ^wait
  ^wait:
    nvvm.mbarrier.try_wait.parity %bar, %c0, %ticks : !llvm.ptr<3>, i32, i32
    llvm.br ^loop(%tid : i32)
  ^loop(%i: i32):
    %more = llvm.icmp "slt" %i, %box : i32
    llvm.cond_br %more, ^body, ^done
  ^body:
    %r = llvm.sdiv %i, %c64 : i32
    %c = llvm.srem %i, %c64 : i32
    %gr = llvm.add %row0, %r : i32
    %gc = llvm.add %col0, %c : i32
    %inr = llvm.icmp "slt" %gr, %rows : i32
    %inc = llvm.icmp "slt" %gc, %cols : i32
    %in = llvm.and %inr, %inc : i1
    %next = llvm.add %i, %c128 : i32
    llvm.cond_br %in, ^store, ^loop(%next : i32)
  ^store:
    %src = llvm.getelementptr %buf[%i] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, f32
    %v = llvm.load %src : !llvm.ptr<3> -> f32
    %plane = llvm.mul %bz, %rows : i32
    %prow = llvm.add %plane, %gr : i32
    %prow64 = llvm.sext %prow : i32 to i64
    %cols64 = llvm.sext %cols : i32 to i64
    %gc64 = llvm.sext %gc : i32 to i64
    %lin = llvm.mul %prow64, %cols64 : i64
    %idx = llvm.add %lin, %gc64 : i64
    %dst = llvm.getelementptr %out[%idx] : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, f32
    llvm.store %v, %dst : f32, !llvm.ptr<1>
    llvm.br ^loop(%next : i32)
  ^done:
    llvm.return
  }
}
)mlir";
}

/// Its launch: x over column boxes, y over row boxes, z over the depth, each
/// block with one box of dynamic shared memory.
inline LaunchShape tmaCopyLaunch() {
  LaunchShape l;
  l.name = "tma_box_copy";
  auto boxes = [](int param, int box) {
    return GridRule{{{{GridRule::Sym, 0}, {GridRule::Const, box}, {GridRule::CeilDiv, 0}}},
                    {{param, -1}}};
  };
  l.grid[0] = boxes(3, kTmaBoxCols);
  l.grid[1] = boxes(2, kTmaBoxRows);
  l.grid[2] = GridRule{{{{GridRule::Sym, 0}}}, {{4, -1}}};
  l.dynamicSmemBytes = kTmaDynamicSmemBytes;
  return l;
}

} // namespace tilejit::testing
