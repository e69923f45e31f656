//===- Kernel.h - what every template builds a kernel with ---------*- C++ -*-===//
#pragma once

#include "compiler/templates/Template.h"
#include "core/KernelSpec.h"
#include "dialects/Tile/TileDialect.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/FunctionExtras.h"

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

/// What every template's build() does around its kernels: checks `spec`
/// and `cfg` (validate, then `tmpl`'s checkConfig), loads the tile and math
/// dialects, and calls `body` with a builder at the end of a new module.
llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>>
buildModule(mlir::MLIRContext &ctx, const KernelTemplate &tmpl, const KernelSpec &spec,
            const TileConfig &cfg,
            llvm::function_ref<void(mlir::OpBuilder &, mlir::Location)> body);

} // namespace tilejit
