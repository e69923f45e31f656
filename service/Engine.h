//===- Engine.h - kernels for a process: memory, store, compile, tune ---*- C++ -*-===//
//
// One Engine per process. get(spec) returns a loaded kernel from memory (a
// hash lookup under a shared lock), else from the store (the tuned winner's
// binary, hash-checked), else compiles it (tuning first when the policy says
// so) and records it. Its interface holds no CUDA runtime types: streams are
// opaque pointers.
//
// With a tuning-cache server (EngineOptions::server, TILEJIT_SERVER) the
// same interface gets its kernels through the server: on a miss the local
// store first, then the server's best kernel for the spec (its published
// winner, else the default, compiled there once for every client), and a
// compile here when the server cannot answer within its deadline, so that a
// process never waits on it for long. What comes from the server is recorded
// in the local store. A tuning takes the server's lease for its key first
// (service/SharedTuning.h): one process tunes and publishes, the others use
// the server's best meanwhile.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "autotune/Tuner.h"
#include "runtime/LoadedKernel.h"
#include "runtime/Store.h"
#include "service/Client.h"

namespace tilejit {

/// What a miss without a stored winner does: use the template's default
/// (Off), tune before the first launch (OnMiss), or launch the default now and
/// tune on a background thread, switching to the winner when it is known
/// (Background; its timings share the GPU with the caller's work).
enum class TunePolicy { Off, OnMiss, Background };

struct EngineOptions {
  std::string dbPath; // "" : no persistent store
  /// A store at dbPath that cannot be opened leaves the engine without one
  /// (its notice says why) instead of refusing it: the default place.
  bool storeOptional = false;
  TunePolicy policy = TunePolicy::Off;
  /// Never tune; use stored winners or defaults; only bitwise repeatable
  /// kernels (overrides allowNondeterministic).
  bool deterministic = false;
  /// Kernels whose results are not bitwise repeatable may be asked for
  /// (attn_bwd with deterministic = 0), unless `deterministic`.
  bool allowNondeterministic = false;
  TuneOptions tune;
  int device = 0;
  /// The tuning-cache server to get kernels from; none: in process only.
  std::optional<ClientOptions> server;

  /// Checks every setting (core/Settings.h; a bad one is an error naming
  /// it), then reads TILEJIT_TUNE (off | on-miss | background),
  /// TILEJIT_DETERMINISTIC (1: never tune), TILEJIT_ALLOW_NONDETERMINISTIC,
  /// TILEJIT_TUNE_ISOLATION (process | in-process: where candidates run,
  /// see TuneOptions), the store's place
  /// (settings::storePath: TILEJIT_CACHE_DIR, else the user's cache folder)
  /// and the server's settings (ClientOptions::fromEnvironment:
  /// TILEJIT_SERVER and the rest) once. The tuner itself reads
  /// TILEJIT_WORKER (the worker's path).
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
  /// Where the kernel came from on the last miss: "store", "server",
  /// "tuned", "compiled", "memory" (another spec's module), or
  /// "background-tuned" when a background tuning replaced it.
  std::string lastSource() const;
  /// Waits for background tunings started so far; returns the first error
  /// any of them met (they never stop the caller's work).
  llvm::Error waitForBackground();
  /// Deterministic mode from now on: no tuning at run time, stored winners or
  /// defaults only (a kernel already loaded stays), and nondeterministic()
  /// false.
  void setDeterministic(bool on) {
    std::lock_guard<std::mutex> lock(missMu_);
    options_.deterministic = on;
    nondeterministic_ = options_.allowNondeterministic && !on;
  }
  /// Whether callers may ask for kernels whose results are not bitwise
  /// repeatable (attn_bwd's deterministic = 0): allowed by the options (or
  /// setAllowNondeterministic) and not in deterministic mode. The C
  /// interface builds its specs so, reading it on every backward call:
  /// without a lock (missMu_ is held through whole compiles and tunings).
  bool nondeterministic() const { return nondeterministic_.load(std::memory_order_relaxed); }
  void setAllowNondeterministic(bool on) {
    std::lock_guard<std::mutex> lock(missMu_);
    options_.allowNondeterministic = on;
    nondeterministic_ = on && !options_.deterministic;
  }
  /// The device's target: specs for it carry it (arch and multiprocessors).
  const Target &target() const { return target_; }
  Store *store() { return store_.get(); }
  /// One line, set when the store file was found corrupt and moved aside.
  const std::string &storeNotice() const { return notice_; }
  /// The server's client, or null without a server.
  Client *client() { return client_.get(); }

private:
  Engine() = default;
  llvm::Expected<const LoadedKernel &> miss(const KernelSpec &spec);
  /// Loads the kernel for (spec, config): `fetched` when it is that
  /// kernel, else from the store, the server or a compile (fetchOrCompile,
  /// which records it).
  llvm::Expected<std::shared_ptr<LoadedKernel>>
  obtain(const KernelSpec &spec, const TileConfig &config, std::string &source,
         std::optional<KernelBinary> fetched = std::nullopt);
  void tuneInBackground(const KernelSpec &spec);
  /// The loaded kernel for `spec`, or null. Callers hold mu_.
  const LoadedKernel *findLoaded(const KernelSpec &spec) const;
  /// The config for `spec`: the stored winner, else the server's best, else
  /// tuned (policy), else the default. `tuned` tells whether it was tuned
  /// now; `fetched` receives the server's kernel when it sent one.
  llvm::Expected<TileConfig> chooseConfig(const KernelSpec &spec, bool &tuned,
                                          std::optional<KernelBinary> &fetched);
  /// A server that could not answer: said once on stderr, kept for explain.
  void serverProblem(const std::string &why);
  /// A store that could not be read: said once on stderr; the kernel is had
  /// without it (explain reads the store again and says whether it can).
  void storeProblem(const std::string &why);
  /// The last failure of something the engine goes on without (under mu_),
  /// and whether one was said.
  struct Problem {
    std::string last;
    bool said = false;
  };
  /// Keeps `why` in `p` and says it on stderr the first time.
  void sayProblem(Problem &p, const std::string &why, const char *without);

  EngineOptions options_;
  /// options_.allowNondeterministic && !options_.deterministic, kept by
  /// create and the setters (under missMu_).
  std::atomic<bool> nondeterministic_{false};
  Target target_;
  std::string notice_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Client> client_;
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
  /// The server's and the store's last failures.
  Problem serverProblem_, storeProblem_;
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
