//===- Tuner.h - find the fastest correct config on the GPU -------*- C++ -*-===//
//
// Enumerates a template's config space (already statically pruned by the
// template's checks), drops configs the store knows failed, compiles the rest
// in parallel on all cores while the GPU times the ones already compiled,
// verifies each candidate against a float64 reference before it may win,
// records every timing and failure, and picks the winner noise-aware and
// deterministically.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "compiler/Compiler.h"
#include "llvm/Support/Error.h"

namespace tilejit {

class Store;
class WorkerProcess;
struct DeviceInfo;

struct CandidateResult {
  TileConfig config;
  /// "ok", "stored" (timing reused), "compile", "spills" (too much local
  /// memory, kMaxSpillBytes), "launch", "verify", "fault"
  /// (broke the GPU context), "timeout", "known-bad", "budget", "cancelled"
  std::string status;
  std::string detail;
  double medianMs = 0, p20Ms = 0, p80Ms = 0;
  int reps = 0;
  int registers = -1, spillBytes = 0;
  /// In the finals: the mean of its rounds' medians under sustained load
  /// (0: not a finalist, or finals not held); medianMs stays the
  /// screening's, which the store and TuneResult::winnerMs keep.
  double sustainedMs = 0;
};

struct TuneOptions {
  double budgetSeconds = 0; // 0: no limit
  int maxConfigs = 0;       // 0: the whole space
  int compileThreads = 0;   // 0: all cores but one
  int reps = 30;            // timed samples per candidate
  double noise = 0.03;      // candidates within this fraction of the best tie
  /// Templates tuned under load (KernelTemplate::tunedUnderLoad): the
  /// fastest this many candidates and the default config are timed again
  /// under sustained load, in turns, and the winner is chosen among them by
  /// those timings (not past budgetSeconds). 0: no finals.
  int finalists = 4;
  int finalRounds = 2;
  uint64_t seed = 0; // 0: fresh random inputs
  int device = 0;    // the GPU to tune on
  /// Where candidates are checked and timed. In a worker process
  /// (`tilejit-worker`, see Worker.h) a candidate that faults or hangs the GPU
  /// is recorded and costs only that worker; in this process it stops the
  /// tuning and leaves this process's context broken.
  enum class Isolation { Process, InProcess } isolation = Isolation::Process;
  std::string workerPath; // empty: findWorker()'s search
  /// A worker already started on `device` (it makes its context while the
  /// caller does other work, and serves several tunings); null: start one.
  WorkerProcess *worker = nullptr;
  double candidateSeconds = 10;     // time limit per candidate in a worker
  Backend backend = Backend::Nvptx; // the back end candidates are compiled with
  /// The GPU `device` is, where the caller has its description; null: asked
  /// of the driver. With `worker` and `compile` given too, tuning needs no
  /// driver in this process (the unit tests tune so with a fake worker).
  const DeviceInfo *deviceInfo = nullptr;
  /// Replaces compileKernel() (tests inject broken binaries with it).
  std::function<llvm::Expected<CompiledKernel>(const KernelSpec &, const TileConfig &)> compile;
  /// Called after each candidate: (done, total, best ms so far, seconds left estimate).
  std::function<void(int, int, double, double)> progress;
  /// Called once per candidate of the space as its outcome is decided (the
  /// reused and known-bad ones first), with how many are decided, this one
  /// included, and how many there are; on the calling thread.
  std::function<void(const CandidateResult &, int done, int total)> onCandidate;
  /// Asked before each candidate is measured; true stops the tuning, which
  /// then fails ("cancelled") and records no winner.
  std::function<bool()> cancelled;
};

struct TuneResult {
  KernelSpec spec; // as measured: the requested one's tuningSpec()
  std::string tuneKey;
  TileConfig winner;
  double winnerMs = 0;
  std::string reason;
  std::vector<CandidateResult> candidates; // in config-space order
  double wallSeconds = 0;
  double readySeconds = 0;   // until the measuring side had inputs and reference
  double waitSeconds = 0;    // measuring side idle, waiting for compiles
  double measureSeconds = 0; // checking and timing candidates
  double finalsSeconds = 0;  // timing the finalists again under sustained load
  int finalists = 0;         // candidates in the finals (0: none held)
  int measured = 0, reused = 0;
  int workersLost = 0; // workers replaced after a fault, crash or timeout
};

/// Kernels take their launch-time sizes (RMSNorm's rows) at launch, so one
/// tuning serves a bucket of them: those in (R/2, R] for R a power of two up
/// to the op's declared cap (ParamDecl::tuneBucketCap), and every size above
/// that (by then the grid runs many full waves and the ranking of configs no
/// longer moves). The tuner measures at R, the bucket's largest size:
/// KernelSpec::tuningSpec().

/// What was tuned, for `backend`: core/Key.h's tuneKey over the tuning spec
/// and the build identity.
std::string tuneKey(const KernelSpec &spec, Backend backend = Backend::Nvptx);
/// The build identity as one line, for the store's records.
std::string toolchainId(const KernelSpec &spec, Backend backend = Backend::Nvptx);

/// Tunes the bucket of `spec` (KernelSpec::tuningSpec) on `options.device`. With a store, timings
/// already stored for this tune key are reused rather than measured again, winners recorded for
/// the same spec under an older build identity are measured first, and the timings, failures,
/// winner and the winning kernel are recorded.
/// A failure of the store (reading it, or recording a result) is marked
/// apart from the tuning's own failures (no candidate passed, no GPU):
/// isStoreFailure says which, so that a server answers INTERNAL for it.
llvm::Expected<TuneResult> tune(const KernelSpec &spec, Store *store, const TuneOptions &options);

/// Whether `e` (from tune) is the store's failure.
bool isStoreFailure(const llvm::ErrorInfoBase &e);

/// The deterministic choice among measured candidates (exposed for tests):
/// the fastest median, except that candidates within `noise` of it tie and the
/// one earliest in config-space order wins. Returns the index, or -1.
int chooseWinner(const std::vector<CandidateResult> &candidates, double noise,
                 std::string *reason = nullptr);

} // namespace tilejit
