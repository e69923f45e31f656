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
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "autotune/Tuner.h"
#include "runtime/LoadedKernel.h"
#include "runtime/Store.h"

namespace tilejit {

/// What a miss without a stored winner does: use the template's default
/// (Off), tune before the first launch (OnMiss), or launch the default now and
/// tune on a background thread, switching to the winner when it is known
/// (Background; its timings share the GPU with the caller's work).
enum class TunePolicy { Off, OnMiss, Background };

struct EngineOptions {
  std::string dbPath; // "" : no persistent store
  TunePolicy policy = TunePolicy::Off;
  bool deterministic = false; // never tune; use stored winners or defaults
  TuneOptions tune;
  int device = 0;

  /// Reads TILEJIT_TUNE (off | on-miss | background), TILEJIT_DETERMINISTIC
  /// (1: never tune), TILEJIT_TUNE_ISOLATION (process | in-process: where
  /// candidates run, see TuneOptions) and TILEJIT_CACHE_DIR once. The tuner
  /// itself reads TILEJIT_WORKER (the worker's path).
  static llvm::Expected<EngineOptions> fromEnvironment();
};

class Engine {
public:
  static llvm::Expected<std::unique_ptr<Engine>> create(EngineOptions options);
  ~Engine();

  /// The kernel for `spec`. `stream` is the caller's CUstream (may be null);
  /// while it is capturing a CUDA graph nothing is compiled, tuned or read
  /// from disk: a kernel not already loaded is an error then.
  llvm::Expected<const LoadedKernel &> get(const KernelSpec &spec, void *stream = nullptr);

  /// What a call of `spec` uses, in a few lines: the kernel loaded for it
  /// (its config and where it came from), or what a miss would do now (the
  /// stored winner, a tuning, or the default config). Reads the store; never
  /// compiles or tunes.
  llvm::Expected<std::string> explain(const KernelSpec &spec);
  /// Where the kernel came from on the last miss: "store", "tuned",
  /// "compiled", or "background-tuned" when a background tuning replaced it.
  std::string lastSource() const;
  /// Waits for background tunings started so far; returns the first error
  /// any of them met (they never stop the caller's work).
  llvm::Error waitForBackground();
  /// Deterministic mode from now on: no tuning at run time, stored winners or
  /// defaults only (a kernel already loaded stays).
  void setDeterministic(bool on) {
    std::lock_guard<std::mutex> lock(missMu_);
    options_.deterministic = on;
  }
  /// The device's target: specs for it carry it (arch and multiprocessors).
  const Target &target() const { return target_; }
  Store *store() { return store_.get(); }
  /// One line, set when the store file was found corrupt and moved aside.
  const std::string &storeNotice() const { return notice_; }

private:
  Engine() = default;
  llvm::Expected<const LoadedKernel &> miss(const KernelSpec &spec);
  /// Loads the kernel for (spec, config) from the store or compiles it (and
  /// records it).
  llvm::Expected<std::shared_ptr<LoadedKernel>>
  obtain(const KernelSpec &spec, const TileConfig &config, std::string &source);
  void tuneInBackground(const KernelSpec &spec);
  /// The loaded kernel for `spec`, or null. Callers hold mu_.
  const LoadedKernel *findLoaded(const KernelSpec &spec) const;
  /// The config for `spec`: the stored winner, else tuned (policy), else the
  /// default. `tuned` tells whether it was tuned now.
  llvm::Expected<TileConfig> chooseConfig(const KernelSpec &spec, bool &tuned);

  EngineOptions options_;
  Target target_;
  std::string notice_;
  std::unique_ptr<Store> store_;
  mutable std::shared_mutex mu_;
  std::mutex missMu_;
  struct Loaded {
    KernelSpec spec;
    std::shared_ptr<LoadedKernel> kernel;
    TileConfig config;
    std::string source;
  };
  /// By KernelSpec::hash(); a hit compares the spec field by field. Specs
  /// that differ only in launch-time sizes (rows) share one module through
  /// byKey_.
  std::unordered_multimap<uint64_t, Loaded> loaded_;
  std::unordered_map<std::string, std::shared_ptr<LoadedKernel>> byKey_;
  /// Kernels replaced by a background winner: callers may still hold them.
  std::vector<std::shared_ptr<LoadedKernel>> retired_;
  std::string lastSource_;
  /// Winners tuned in this process, by tune key (a row bucket); under missMu_.
  std::unordered_map<std::string, TileConfig> winners_;
  /// Row buckets tuned or being tuned in the background; under missMu_.
  std::unordered_set<std::string> backgroundKeys_;
  /// Held while tuning: one tuning at a time on the engine's GPU.
  std::mutex tuneMu_;
  std::vector<std::thread> background_;
  std::string backgroundError_;
};

} // namespace tilejit
