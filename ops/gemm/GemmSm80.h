//===- GemmSm80.h - GEMM on Ampere tensor cores: the template's parts -*- C++ -*-===//
//
// The sm_80 kernel of gemm (GemmSm80Template.cpp), also the one every target
// without wgmma runs: its config keys, space, default and check, and its
// body. GemmTemplate.cpp hands a spec to these when its target has no wgmma.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <vector>

#include "core/KernelSpec.h"
#include "mlir/IR/Builders.h"
#include "llvm/Support/Error.h"

namespace tilejit::gemm::sm80 {

/// Whether `spec` (a gemm) is built by this kernel: its target has no wgmma.
bool applies(const KernelSpec &spec);

/// bm, bn, bk, stages, warps, vec, group.
llvm::ArrayRef<ConfigKeyDecl> configKeys();
/// The keys of the gemm template: `others` (the sm_90a kernel's) and these,
/// each optional where the other kernel lacks it.
std::vector<ConfigKeyDecl> mergedKeys(llvm::ArrayRef<ConfigKeyDecl> others);
std::vector<TileConfig> configSpace(const KernelSpec &spec);
TileConfig defaultConfig(const KernelSpec &spec);
llvm::Error checkConfig(const KernelSpec &spec, const TileConfig &cfg);

/// The kernel, built at `b`'s insertion point (spec and config checked).
void buildKernel(mlir::OpBuilder &b, mlir::Location loc, const KernelSpec &spec,
                 const TileConfig &cfg);

} // namespace tilejit::gemm::sm80
