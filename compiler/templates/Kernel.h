//===- Kernel.h - what every template builds a kernel with ---------*- C++ -*-===//
#pragma once

#include "core/KernelSpec.h"
#include "dialects/Tile/TileDialect.h"
#include "mlir/IR/Builders.h"

namespace tilejit {

/// The MLIR type of `t` (bf16, f16, f32).
mlir::Type elemType(mlir::MLIRContext &ctx, DType t);

/// The config as the kernel's `config` attribute (for printing and keys).
mlir::DictionaryAttr configAttr(mlir::MLIRContext &ctx, const TileConfig &cfg);

/// A tile.kernel named `name` with arguments `args` and its launch shape, and
/// an entry block whose arguments are the kernel's; the builder is left at
/// the end of that block. `cluster` > 1 groups blocks into clusters;
/// `minBlocks` > 0 asks that many blocks fit on a multiprocessor.
tile::KernelOp makeKernel(mlir::OpBuilder &b, mlir::Location loc, llvm::StringRef name,
                          llvm::ArrayRef<mlir::Type> args, int64_t threads, mlir::AffineMap grid,
                          llvm::ArrayRef<int64_t> gridOperands, const TileConfig &cfg,
                          int64_t cluster = 1, int64_t minBlocks = 0);

} // namespace tilejit
