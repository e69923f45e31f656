//===- Compiler.h - spec and config to a loadable kernel ----------*- C++ -*-===//
//
// The compile pipeline: template -> tile IR -> tile-check-target ->
// canonicalize -> tile-allocate-shared, then a back end (Backend below); the
// NVPTX one: convert-scf-to-cf -> convert-tile-to-llvm -> convert-nvvm-to-llvm
// -> reconcile-unrealized-casts, LLVM IR, a light LLVM pipeline and the NVPTX
// code generator, and ptxas through nvJitLink. All of it runs in process.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <array>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "compiler/Nvrtc.h"
#include "core/KernelBinary.h"
#include "core/Key.h"
#include "llvm/Support/Error.h"

namespace mlir {
class DialectRegistry;
class OpPassManager;
} // namespace mlir

namespace tilejit {

/// Where a compile stops. `Mlir` may stop after a named pass; `Cuda` is the
/// C++ back end's source (whatever the back end asked for); `Llvm` the LLVM
/// IR the NVPTX back end hands to code generation; `Ptx` the PTX, without
/// ptxas.
enum class Stage { Mlir, Cuda, Llvm, Ptx, Binary };

/// Which back end makes the binary:
///  - `Nvptx` (the default, and the one every new op is built on): tile IR
///    -> LLVM dialect + NVVM -> LLVM IR -> LLVM's NVPTX back end -> PTX ->
///    ptxas;
///  - `Cuda` (the reference): tile IR -> EmitC -> CUDA C++ over the device
///    library -> NVRTC.
enum class Backend { Nvptx, Cuda };

/// "nvptx" or "cuda"; parseBackend is its inverse.
const char *backendName(Backend b);
std::optional<Backend> parseBackend(std::string_view name);
/// The back ends by name, for messages: "nvptx, cuda".
const char *backendNames();

/// Turns source text (CUDA C++ or PTX) into a binary: NVRTC or ptxas.
using Toolchain = std::function<llvm::Expected<NvrtcOutput>(
    std::string_view source, std::string_view name, std::string_view arch)>;

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
  Backend backend = Backend::Nvptx;
  /// Runs NVRTC on generated C++ (default: compileWithNvrtc in this
  /// process). The tuner hands it to compiler processes: NVRTC serializes
  /// compiles within one process.
  Toolchain nvrtc;
  /// Runs ptxas on generated PTX (default: assembleWithPtxas in this
  /// process).
  Toolchain ptxas;
};

/// The wall time of one stage of a compile.
struct StageTime {
  std::string name;
  double ms = 0;
};

/// A binary with what the compile made on the way, for `tilejit compile`.
struct CompiledKernel : KernelBinary {
  std::string mlir; // the IR at the requested stage (Stage::Mlir)
  std::string cuda; // generated CUDA C++ (C++ back end)
  std::string llvm; // optimized LLVM IR (Stage::Llvm, NVPTX back end)
  std::string ptx;
  /// Template to source text (MLIR, then C++ or PTX), and source to binary
  /// (NVRTC or ptxas).
  double mlirMs = 0, binaryMs = 0;
  /// The same time by stage, in the order they ran: "setup" (spec, config,
  /// key, context), "build" (the template), each pass by its name,
  /// "translate" (to LLVM IR), "llvm-opt", "codegen" (PTX), then "ptxas" or
  /// "nvrtc" (the C++ back end's "emit-cpp" before it).
  std::vector<StageTime> stages;
};

/// The names of the passes `compileKernel` runs for `backend`, in order.
std::vector<std::string> pipelinePasses(Backend backend = Backend::Nvptx);
/// Adds pass `name` of a pipeline to `pm`, for target `arch`; false for a
/// name that is not in any pipeline.
bool addPipelinePass(mlir::OpPassManager &pm, const std::string &name, const std::string &arch);

/// Registers the dialects the pipeline uses.
void registerTileJitDialects(mlir::DialectRegistry &registry);
/// Registers `tilejit-lower-to-llvm{arch=...}`, the NVPTX back end's whole
/// pipeline from tile IR to the LLVM dialect, exactly as compileKernel runs
/// it (for tilejit-opt).
void registerTileJitPipelines();

/// Everything besides (spec, config) that decides what `backend` makes of
/// them: the back end, tilejit's version, the template's and the compiler's
/// source hashes, the LLVM, NVRTC and ptxas versions and the device library
/// hash. The one input of every kernel and tuning key (core/Key.h).
BuildIdentity buildIdentity(const KernelSpec &spec, Backend backend = Backend::Nvptx);

/// kernelKey(spec, config, buildIdentity(spec, backend)).
std::string kernelKey(const KernelSpec &spec, const TileConfig &config,
                      Backend backend = Backend::Nvptx);

/// An error naming the op where `backend` cannot build `spec`'s kernels (the
/// reference C++ back end has only the ops whose tile ops it lowers), or
/// where no template builds the op: decided before anything is compiled.
llvm::Error checkBackend(const KernelSpec &spec, Backend backend);

/// Compiles `spec` with `config` (the template's default if empty).
llvm::Expected<CompiledKernel> compileKernel(const KernelSpec &spec, TileConfig config,
                                             const CompileOptions &options = {});

/// What a kernel's signature cannot say about its launch: the grid rule of
/// each dimension and the dynamic shared memory of each block.
struct LaunchShape {
  std::string name; // the kernel's symbol
  std::array<GridRule, 3> grid;
  int dynamicSmemBytes = 0;
};

/// Compiles a module of kernels written in MLIR's LLVM dialect with NVVM ops
/// (`llvm.func` with `nvvm.kernel`) through the NVPTX back end and ptxas.
/// Each entry's launch information is derived from its signature once:
/// parameters (a `!llvm.ptr` passed `llvm.byval` as 128 bytes with
/// `nvvm.grid_constant` is a tensor map; `!llvm.ptr<1>` a pointer; i32, i64,
/// f32 scalars; a struct of a global pointer and i64 sizes a view), block
/// threads from `nvvm.maxntid` or `nvvm.reqntid`, cluster shape from
/// `nvvm.cluster_dim`; grid and dynamic shared memory come from `launch`,
/// one per kernel.
llvm::Expected<KernelBinary> compileLlvmDialectModule(std::string_view mlirText,
                                                      const Target &target,
                                                      const std::vector<LaunchShape> &launch);

/// tilejit's version string.
const char *tilejitVersion();

} // namespace tilejit
