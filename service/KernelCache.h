//===- KernelCache.h - compiled kernels loaded in this process -----*- C++ -*-===//
//
// Maps (context, kernel spec without launch-time sizes, config) to a loaded
// kernel. A hit hashes the fields and compares them under a shared lock (no
// allocation); a miss compiles
// (MLIR, then ptxas or NVRTC) and loads the module. The persistent store and the tuner sit
// above this (service/Engine).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>

#include "compiler/Compiler.h"
#include "runtime/LoadedKernel.h"

namespace tilejit {

/// Compiles (spec, config) with `options` and loads it in the current
/// context; `compiled`, when given, receives the binary (for the store).
llvm::Expected<std::unique_ptr<LoadedKernel>> compileAndLoad(const KernelSpec &spec,
                                                             const TileConfig &config,
                                                             CompiledKernel *compiled = nullptr,
                                                             const CompileOptions &options = {});

class KernelCache {
public:
  /// Kernels compiled by `backend` (every entry of one cache by the same).
  explicit KernelCache(Backend backend = Backend::Nvptx) : backend_(backend) {}

  /// The kernel for `spec` with `config` (the template default when empty),
  /// loaded in the current context.
  llvm::Expected<const LoadedKernel &> get(const KernelSpec &spec, const TileConfig &config = {});
  /// The lookup alone: null when the kernel is not loaded yet.
  const LoadedKernel *find(const KernelSpec &spec, const TileConfig &config = {}) const;

private:
  struct Entry {
    CUcontext ctx;
    KernelSpec spec; // launch-time sizes are not part of the kernel (sameKernel)
    TileConfig config;
    std::unique_ptr<LoadedKernel> kernel;
  };
  static uint64_t hashOf(CUcontext ctx, const KernelSpec &spec, const TileConfig &config);
  const LoadedKernel *findLocked(uint64_t h, CUcontext ctx, const KernelSpec &spec,
                                 const TileConfig &config) const;
  Backend backend_;
  mutable std::shared_mutex mu_;
  std::mutex compileMu_;
  std::unordered_multimap<uint64_t, Entry> kernels_;
};

} // namespace tilejit
