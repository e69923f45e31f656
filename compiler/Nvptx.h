//===- Nvptx.h - LLVM IR to PTX with LLVM's NVPTX back end ---------*- C++ -*-===//
#pragma once

#include <string>

#include "llvm/Support/Error.h"

namespace llvm {
class Module;
} // namespace llvm
namespace mlir {
class ModuleOp;
} // namespace mlir

namespace tilejit {

/// The PTX ISA version tilejit's PTX declares (ptxas 13.0 takes up to 9.0).
constexpr const char *kPtxFeatures = "+ptx86";

/// Translates an LLVM-dialect module to LLVM IR, runs a light IR pipeline
/// (SROA, early CSE, simplification) for `arch` ("sm_90a", "sm_80", ...) and returns the NVPTX back
/// end's PTX. `llvmIR`, when given, receives the LLVM IR given to code generation.
llvm::Expected<std::string> translateToPtx(mlir::ModuleOp module, const std::string &arch,
                                           std::string *llvmIR = nullptr);

/// "LLVM 22.1.8": the version of the LLVM that makes the PTX (part of keys).
std::string llvmVersionString();

} // namespace tilejit
