//===- AttentionReference.h - a plain attention on the device ------*- C++ -*-===//
//
// The tuner's reference for attention at the size a candidate is timed on:
// deliberately simple CUDA C++ (one warp a query or key row, f32
// throughout, exact expf and logf, the two-pass backward written out as
// the math reads, no shared memory and no tensor cores), compiled by NVRTC
// for the GPU once per process. Beside each output it writes the sum of the
// magnitudes of its terms, so that a candidate can be held to bounds of the
// roundings it is allowed (its 16-bit P and dS, its output's type) element
// by element, on the device (compare). The tuning harness checks the
// reference itself against float64 before using it (AttentionHarness.cpp),
// and so does every tuning.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cuda.h>
#include <memory>
#include <string>

#include "core/Target.h"
#include "ops/attention/AttentionLaunch.h"
#include "runtime/CudaDriver.h"
#include "llvm/Support/Error.h"

namespace tilejit::attention {

class Reference {
public:
  /// Compiles (once per process and target) and loads the reference's
  /// kernels into the current context.
  static llvm::Expected<std::unique_ptr<Reference>> load(const Target &target);
  /// Only compiles them for `target` (no GPU needed): NVRTC's errors.
  static llvm::Error compile(const Target &target);
  /// The most sequences one call covers, and the most heads (a grid's
  /// third and second dimensions).
  static constexpr int64_t kMaxSequences = 65535, kMaxHeads = 65535;
  Reference(const Reference &) = delete;
  Reference &operator=(const Reference &) = delete;

  /// The forward of the first `batches` sequences of `call` (its Q, K, V,
  /// offsets): O in f32 and the sum of |P V| of each element into `o` and
  /// `mag` (laid out as O; either 0: not written), LSE into `lse` ([b, hq,
  /// sq], f32, natural log; -inf for rows without keys; always written,
  /// never 0) and O in the call's type into `o16` where not 0.
  llvm::Error forward(const Call &call, int64_t batches, CUdeviceptr o, CUdeviceptr mag,
                      CUdeviceptr lse, CUdeviceptr o16, CUstream stream) const;

  /// Where the backward's outputs go, f32, laid out as dQ, dK and dV: each
  /// gradient and the sum of the magnitudes of its terms (dS's with those
  /// of dP and of D, as the harness bounds them).
  struct Gradients {
    CUdeviceptr dq = 0, dqMag = 0, dk = 0, dkMag = 0, dv = 0, dvMag = 0;
  };
  /// The backward of the first `batches` sequences of `call` from its Q, K,
  /// V, O, LSE and dO (P from LSE, D = rowsum(dO * O) from O as given).
  /// `scratch`: 2 * b * hq * sq f32 (D and its magnitude).
  llvm::Error backward(const BackwardCall &call, int64_t batches, const Gradients &out,
                       CUdeviceptr scratch, CUstream stream) const;

  /// A candidate's output held to the reference: element x of `got` (`n`
  /// elements of type `dt`) passes where |got - ref| <= rel * |ref| + prel
  /// * mag + abs (NaN fails). `words`: 2 uint64 of device memory.
  struct Mismatches {
    uint64_t count = 0;
    int64_t first = -1; // the first failing element's index
    double got = 0, ref = 0, allowed = 0;
  };
  llvm::Expected<Mismatches> compare(DType dt, CUdeviceptr got, CUdeviceptr ref, CUdeviceptr mag,
                                     int64_t n, double rel, double prel, double abs,
                                     CUdeviceptr words, CUstream stream) const;

private:
  Reference() = default;
  LoadedModule module_;
  CUfunction fwd_[3] = {}, dq_[3] = {}, dkdv_[3] = {}, dsum_ = nullptr, compare_ = nullptr;
};

} // namespace tilejit::attention
