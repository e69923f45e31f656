//===- Measure.h - checking and timing one candidate on the GPU ----*- C++ -*-===//
//
// What the tuner does with a compiled candidate, in whichever process holds
// the GPU context: load it, poison the outputs, run it once on the checked
// problem and compare with the float64 reference, then time it on the full
// problem with L2 flushed before every sample. The tuning process runs this
// in a worker process (Worker.h), so that a candidate that faults or hangs
// the GPU takes only the worker down.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autotune/Harness.h"
#include "compiler/Compiler.h"
#include "runtime/CudaDriver.h"
#include "runtime/DeviceBuffer.h"

namespace tilejit {

/// The outcome of one candidate.
struct Measurement {
  /// "ok"; "spills" (more local memory per thread than kMaxSpillBytes: not
  /// run), "launch" (load or launch failed), "verify" (wrong output),
  /// "fault" (the candidate broke the GPU context), "timeout" (it did not
  /// finish in time; set by the parent of a worker).
  std::string status;
  std::string detail;
  double medianMs = 0, p20Ms = 0, p80Ms = 0;
  int reps = 0;
  int registers = -1, spillBytes = 0;
};

/// A candidate using more local memory per thread than this (register spills
/// and arrays ptxas left in memory) is not measured: the ones seen (2.5 KB,
/// RMSNorm backward at 16384 columns) ran 13-15x slower than the best.
constexpr int kMaxSpillBytes = 2048;

/// Fills `m`'s median, 20th and 80th percentiles (the samples at ranks n/2,
/// n/5 and 4n/5 of the sorted samples) and reps from `ms`, which is not empty.
void summarizeSamples(std::vector<double> ms, Measurement &m);

/// The timing schedule of one candidate, apart from the GPU: `sample(inner)`
/// runs one sample of `inner` back-to-back launches and returns its elapsed
/// milliseconds. The first sample sizes `inner` so that a sample lasts about
/// 0.2 ms (1 to 1000 launches); the next two warm up (none follow a first
/// sample of 2 ms or more); then `reps` samples are kept, each divided by
/// `inner`, or fewer for a slow kernel: about 60 ms of samples, at least
/// min(reps, 5) (3 of 5 ms or more). With `cutoffMs` > 0 a first kept
/// sample slower than that is the only one: the candidate cannot win.
llvm::Expected<std::vector<double>>
timeSamples(int reps, double cutoffMs, const std::function<llvm::Expected<float>(int)> &sample);

/// Samples under sustained load: each sample `inner` launches back to back
/// lasting about `sampleMs` (sized by the first, a warm-up), `samples` of
/// them kept, per launch.
llvm::Expected<std::vector<double>>
timeSustained(int samples, double sampleMs,
              const std::function<llvm::Expected<float>(int)> &sample);

/// How a candidate is timed. Cold: each sample after an L2 flush, the GPU
/// idle between samples (screening every candidate; the timings of a
/// memory-bound kernel as training sees it). Sustained: samples of about
/// 10 ms of back-to-back launches, no flush in between: the clocks an
/// arithmetic-bound kernel keeps under a training step's load, which
/// differ by config (bench/NOTES.md, GEMM g9).
enum class TimingMode { Cold, Sustained };

/// Checks and times candidates of one spec on the current context's device.
class CandidateRunner {
public:
  /// Prepares fresh inputs drawn from `seed`, the reference, a stream,
  /// events and the L2 flush buffer. The device must be current.
  static llvm::Expected<std::unique_ptr<CandidateRunner>> create(const KernelSpec &spec,
                                                                 uint64_t seed, int reps);
  ~CandidateRunner();
  CandidateRunner(const CandidateRunner &) = delete;
  CandidateRunner &operator=(const CandidateRunner &) = delete;

  /// Checks then times `kernel`. A status other than "ok" names the stage
  /// that failed; after a "fault" the context is unusable and so is this
  /// runner. With `cutoffMs` > 0, a candidate whose first timed sample is
  /// slower than that is not timed further (one sample, reps = 1): it cannot
  /// win, and a hopeless config must not eat the tuning budget.
  /// `check` false: the binary passed the check on this runner's inputs
  /// already (the tuner's finals); it is only timed.
  Measurement measure(const CompiledKernel &kernel, double cutoffMs = 0,
                      TimingMode timing = TimingMode::Cold, bool check = true);

private:
  CandidateRunner() = default;
  const CudaDriver *drv_ = nullptr;
  std::unique_ptr<OpHarness> harness_;
  int reps_ = 0;
  CUstream stream_ = nullptr;
  CUevent a_ = nullptr, b_ = nullptr;
  // Written before every timed sample so that no candidate finds its inputs
  // in L2 (60 MB on an H200) left by the one before: the timings are of cold
  // caches, as in training, and do not depend on the order of measurement.
  DeviceBuffer flush_;
};

} // namespace tilejit
