//===- Compiler.h - spec and config to a loadable kernel ----------*- C++ -*-===//
//
// The compile pipeline: template -> tile IR -> tile-check-target ->
// canonicalize -> tile-lower-to-emitc -> CUDA C++ -> NVRTC (PTX + cubin).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "compiler/KernelSpec.h"
#include "compiler/LaunchInfo.h"
#include "compiler/Nvrtc.h"
#include "llvm/Support/Error.h"

namespace mlir {
class DialectRegistry;
class PassManager;
} // namespace mlir

namespace tilejit {

/// Where a compile stops. `Mlir` may stop after a named pass.
enum class Stage { Mlir, Cuda, Binary };

/// A compile that did not run to its end for reasons outside the kernel: the
/// process compiling it died or ran out of time. Trying again may succeed,
/// so a tuner does not remember it as the config's failure. An `nvrtc` hook
/// returns it; compileKernel passes it on with the kernel named.
class CompileInterrupted : public llvm::ErrorInfo<CompileInterrupted> {
public:
  static char ID;
  explicit CompileInterrupted(std::string msg) : msg_(std::move(msg)) {}
  void log(llvm::raw_ostream &os) const override { os << msg_; }
  std::error_code convertToErrorCode() const override { return llvm::inconvertibleErrorCode(); }

private:
  std::string msg_;
};

struct CompileOptions {
  Stage stopAt = Stage::Binary;
  /// With Stage::Mlir: print the IR after this pass ("" = the template's IR).
  std::string afterPass;
  /// Runs NVRTC on the generated source (default: compileWithNvrtc in this
  /// process). The tuner hands it to compiler processes: NVRTC serializes
  /// compiles within one process.
  std::function<llvm::Expected<NvrtcOutput>(std::string_view source, std::string_view name,
                                            std::string_view arch)>
      nvrtc;
};

struct CompiledKernel {
  KernelSpec spec;
  TileConfig config;
  std::string key;  // identity of the binary: see kernelKey()
  std::string mlir; // the IR at the requested stage (Stage::Mlir)
  std::string cuda; // generated CUDA C++
  std::string ptx;
  std::vector<char> cubin;
  std::string log; // NVRTC's log (ptxas resource report)
  std::vector<EntryInfo> entries;
  int64_t workspaceBytes = 0;
  double mlirMs = 0, nvrtcMs = 0;
};

/// The names of the passes `compileKernel` runs, in order.
std::vector<std::string> pipelinePasses();

/// Registers the dialects the pipeline uses.
void registerTileJitDialects(mlir::DialectRegistry &registry);

/// The key of the kernel binary for (spec, config): SHA-256 over the spec
/// (without launch-time sizes), the config, the arch, the template's source
/// hash, the tilejit version, the NVRTC version and the device library hash.
std::string kernelKey(const KernelSpec &spec, const TileConfig &config);

/// Compiles `spec` with `config` (the template's default if empty).
llvm::Expected<CompiledKernel> compileKernel(const KernelSpec &spec, TileConfig config,
                                             const CompileOptions &options = {});

/// tilejit's version string.
const char *tilejitVersion();

} // namespace tilejit
