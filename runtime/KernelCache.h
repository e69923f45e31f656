//===- KernelCache.h - compiled kernels loaded in this process -----*- C++ -*-===//
//
// Maps (context, kernel spec without launch-time sizes, config) to a loaded
// kernel. A hit is one hash lookup under a shared lock; a miss compiles
// (MLIR + NVRTC) and loads the module. The persistent store and the tuner sit
// above this (service/Engine).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>

#include "runtime/LoadedKernel.h"

namespace tilejit {

class KernelCache {
public:
  /// The kernel for `spec` with `config` (the template default when empty),
  /// loaded in the current context.
  llvm::Expected<const LoadedKernel &> get(const KernelSpec &spec, const TileConfig &config = {});
  /// The lookup alone: null when the kernel is not loaded yet.
  const LoadedKernel *find(const KernelSpec &spec, const TileConfig &config = {}) const;

private:
  static std::string lookupKey(CUcontext ctx, const KernelSpec &spec, const TileConfig &config);
  mutable std::shared_mutex mu_;
  std::mutex compileMu_;
  std::unordered_map<std::string, std::unique_ptr<LoadedKernel>> kernels_;
};

} // namespace tilejit
