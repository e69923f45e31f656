//===- Worker.h - candidates measured in a separate process --------*- C++ -*-===//
//
// A candidate that faults the GPU (an illegal address, a trap) poisons the
// CUDA context of the process that launched it, and one that hangs never
// returns. The tuner therefore hands compiled candidates to a worker process,
// `tilejit-worker`, which owns the GPU context, the inputs and the reference,
// and measures each candidate (Measure.h). When the worker faults, dies or
// overruns the time limit, the candidate is recorded as failed, the worker is
// killed and a fresh one takes the next candidate; the tuning process itself
// never touches the broken context.
//
// The worker makes its GPU context as soon as it starts, so a tuning process
// starts it first and compiles while it comes up. Protocol (WorkerProtocol.h):
// one socket pair; the parent sends {"op":"prepare", spec, seed, reps} (fresh
// inputs and reference; again for each spec tuned), then {"op":"measure", key,
// config, cubin, entries, workspace, cutoff_ms, timing, check} per candidate; the worker
// replies once to each. EOF ends the worker. The same program, started with
// --compile-fd, runs NVRTC for the tuner (CompilerProcess below).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <memory>
#include <string>
#include <sys/types.h>

#include <nlohmann/json.hpp>

#include "autotune/Measure.h"
#include "compiler/Compiler.h"
#include "compiler/Nvrtc.h"

namespace tilejit {

/// The worker executable: `explicitPath` when given; else $TILEJIT_WORKER;
/// else `tilejit-worker` beside the running program, beside the library
/// holding tilejit, in the install's libexec directory, or in the build tree.
/// The error lists every place looked at.
llvm::Expected<std::string> findWorker(const std::string &explicitPath = "");

class WorkerProcess {
public:
  struct Options {
    std::string path; // from findWorker()
    int device = 0;
    double startSeconds = 120;    // to start and prepare inputs and reference
    double candidateSeconds = 10; // for one candidate, check and timing
    int maxRestarts = 8;          // workers replaced in one tuning before giving up
  };

  /// Starts a worker on `options.device`.
  static llvm::Expected<std::unique_ptr<WorkerProcess>> start(const Options &options);

  /// Sends the spec to measure candidates of (inputs drawn from `seed`, `reps`
  /// timed samples each); returns at once: the worker prepares while the
  /// caller compiles. Starts a new tuning: the count of lost workers begins at zero.
  llvm::Error prepare(const KernelSpec &spec, uint64_t seed, int reps);
  void setCandidateSeconds(double seconds) { opt_.candidateSeconds = seconds; }
  ~WorkerProcess();
  WorkerProcess(const WorkerProcess &) = delete;
  WorkerProcess &operator=(const WorkerProcess &) = delete;

  /// Waits until the worker has prepared the spec (measure() does this too).
  llvm::Error waitReady() { return ready_ ? llvm::Error::success() : awaitReady(); }

  /// Measures one candidate of the prepared spec. A candidate that faults, kills or hangs the
  /// worker comes back with status "fault" or "timeout" and the worker is
  /// replaced before the next one. An error means no worker could be (re)started:
  /// the tuning cannot go on.
  llvm::Expected<Measurement> measure(const CompiledKernel &kernel, double cutoffMs = 0,
                                      TimingMode timing = TimingMode::Cold, bool check = true);

  /// Workers lost to candidates (fault, crash, timeout) since prepare().
  int lost() const { return lost_; }
  pid_t pid() const { return pid_; }

private:
  explicit WorkerProcess(Options o) : opt_(std::move(o)) {}
  llvm::Error spawn();
  llvm::Error sendPrepare(); // to the running worker, or a fresh one
  llvm::Error awaitReady();
  /// Kills (if needed) and reaps the worker; returns how it ended.
  std::string reap(bool kill);

  Options opt_;
  KernelSpec spec_;
  nlohmann::json prepare_; // the last prepare request, for a fresh worker
  pid_t pid_ = -1;
  int fd_ = -1;
  bool ready_ = false;
  int lost_ = 0;
};

/// NVRTC or ptxas in a process of its own (`tilejit-worker --compile-fd`).
/// NVRTC serializes the compiles of one process however many threads call it
/// (on the H200 machine 15 threads compile no faster than one), so the tuner
/// runs one compiler process per core. A compile that crashes or hangs the
/// toolchain costs that process, which the next compile replaces.
class CompilerProcess {
public:
  static llvm::Expected<std::unique_ptr<CompilerProcess>> start(const std::string &path);
  ~CompilerProcess();
  CompilerProcess(const CompilerProcess &) = delete;
  CompilerProcess &operator=(const CompilerProcess &) = delete;
  /// In the process: compileWithNvrtc() for Backend::Cuda (`source` is CUDA
  /// C++), else assembleWithPtxas() (`source` is PTX).
  llvm::Expected<NvrtcOutput> compile(std::string_view source, std::string_view name,
                                      std::string_view arch, Backend backend = Backend::Cuda);
  /// This process as the compile options' toolchains.
  void useFor(CompileOptions &options);
  pid_t pid() const { return pid_; }

private:
  explicit CompilerProcess(std::string path) : path_(std::move(path)) {}
  std::string path_;
  pid_t pid_ = -1;
  int fd_ = -1;
  double timeoutSeconds_ = 120;
};

/// The compiler process's side: serves compile requests on `fd` until EOF.
int runCompiler(int fd);

/// The worker's side: makes a context on `device`, then serves the protocol
/// on `fd` until EOF. Returns the process exit status.
int runWorker(int fd, int device);

} // namespace tilejit
