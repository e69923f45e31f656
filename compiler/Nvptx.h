//===- Nvptx.h - LLVM IR to PTX with LLVM's NVPTX back end ---------*- C++ -*-===//
#pragma once

#include <string>

#include "llvm/Support/Error.h"

namespace llvm {
class Module;
} // namespace llvm
namespace mlir {
class DialectRegistry;
class ModuleOp;
} // namespace mlir

namespace tilejit {

/// The PTX ISA version tilejit's PTX declares (ptxas 13.0 takes up to 9.0).
constexpr const char *kPtxFeatures = "+ptx86";

/// Wall time of translateToPtx's stages.
struct NvptxTimes {
  double translateMs = 0; // LLVM dialect to LLVM IR, and its verification
  double optimizeMs = 0;  // the LLVM IR pipeline
  double codegenMs = 0;   // the NVPTX code generator
};

/// Translates an LLVM-dialect module to LLVM IR, runs a light IR pipeline
/// (SROA, early CSE, simplification) for `arch` ("sm_90a", "sm_80", ...) and returns the NVPTX back
/// end's PTX. `llvmIR`, when given, receives the LLVM IR given to code generation;
/// `times`, when given, the time each stage took.
llvm::Expected<std::string> translateToPtx(mlir::ModuleOp module, const std::string &arch,
                                           std::string *llvmIR = nullptr,
                                           NvptxTimes *times = nullptr);

/// Registers the translations of the builtin, LLVM and NVVM dialects to LLVM
/// IR, which translateToPtx needs in the module's context (it adds them to a
/// context that lacks them).
void registerLlvmIrTranslations(mlir::DialectRegistry &registry);

/// "LLVM 22.1.8": the version of the LLVM that makes the PTX (part of keys).
std::string llvmVersionString();

} // namespace tilejit
