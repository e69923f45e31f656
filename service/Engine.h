//===- Engine.h - kernels for a process: memory, store, compile, tune ---*- C++ -*-===//
//
// One Engine per process. get(spec) returns a loaded kernel from memory (a
// hash lookup under a shared lock), else from the store (the tuned winner's
// binary, hash-checked), else compiles it (tuning first when the policy says
// so) and records it. Its interface holds no CUDA runtime types: streams are
// opaque pointers.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>

#include "autotune/Tuner.h"
#include "runtime/LoadedKernel.h"
#include "runtime/Store.h"

namespace tilejit {

enum class TunePolicy { Off, OnMiss };

struct EngineOptions {
  std::string dbPath;          // "" : no persistent store
  TunePolicy policy = TunePolicy::Off;
  bool deterministic = false;  // never tune; use stored winners or defaults
  TuneOptions tune;
  int device = 0;

  /// Reads TILEJIT_TUNE (off | on-miss) and TILEJIT_CACHE_DIR once.
  static llvm::Expected<EngineOptions> fromEnvironment();
};

class Engine {
public:
  static llvm::Expected<std::unique_ptr<Engine>> create(EngineOptions options);

  /// The kernel for `spec`. `stream` is the caller's CUstream (may be null);
  /// while it is capturing a CUDA graph nothing is compiled, tuned or read
  /// from disk: a kernel not already loaded is an error then.
  llvm::Expected<const LoadedKernel &> get(const KernelSpec &spec, void *stream = nullptr);

  /// Where the kernel for `spec` came from on the last get(): "memory",
  /// "store", "tuned", "compiled".
  std::string lastSource() const;
  const std::string &arch() const { return arch_; }
  Store *store() { return store_.get(); }
  /// One line, set when the store file was found corrupt and moved aside.
  const std::string &storeNotice() const { return notice_; }

private:
  Engine() = default;
  llvm::Expected<const LoadedKernel &> miss(const KernelSpec &spec);
  /// The loaded kernel for `spec`, or null. Callers hold mu_.
  const LoadedKernel *findLoaded(const KernelSpec &spec) const;
  /// The config for `spec`: the stored winner, else tuned (policy), else the
  /// default. `tuned` tells whether it was tuned now.
  llvm::Expected<TileConfig> chooseConfig(const KernelSpec &spec, bool &tuned);

  EngineOptions options_;
  std::string arch_;
  std::string notice_;
  std::unique_ptr<Store> store_;
  mutable std::shared_mutex mu_;
  std::mutex missMu_;
  struct Loaded {
    KernelSpec spec;
    std::unique_ptr<LoadedKernel> kernel;
  };
  /// By KernelSpec::hash(); a hit compares the spec field by field.
  std::unordered_multimap<uint64_t, Loaded> loaded_;
  std::string lastSource_;
};

} // namespace tilejit
