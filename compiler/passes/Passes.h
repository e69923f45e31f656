//===- Passes.h - tile dialect passes ----------------------------*- C++ -*-===//
#pragma once

#include "dialects/Tile/TileDialect.h"
#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Pass/Pass.h"

namespace tilejit {

/// Shared scratch (bytes) the reductions of `kernel` need.
int64_t scratchBytesFor(tile::KernelOp kernel);
/// Sets `kernel`'s shared-memory attributes (scratch_bytes, cluster_rows):
/// what tile-allocate-shared does to each kernel.
void allocateShared(tile::KernelOp kernel);
/// Bytes of dynamic shared memory `kernel`'s rings, barriers and words take
/// as tile-allocate-shared lays them out (without the 1024 for alignment).
int64_t dynamicSharedBytes(tile::KernelOp kernel);

#define GEN_PASS_DECL
#include "compiler/passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "compiler/passes/Passes.h.inc"

} // namespace tilejit
