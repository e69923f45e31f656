//===- Passes.h - tile dialect passes ----------------------------*- C++ -*-===//
#pragma once

#include "dialects/Tile/TileDialect.h"
#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/Pass/Pass.h"

namespace tilejit {

/// Shared scratch (bytes) the reductions of `kernel` need, or -1 if a
/// reduction has a layout the device library cannot serve.
int64_t scratchBytesFor(tile::KernelOp kernel);

#define GEN_PASS_DECL
#include "compiler/passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "compiler/passes/Passes.h.inc"

} // namespace tilejit
