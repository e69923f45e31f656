//===- Harness.h - running and checking one op's candidates -------*- C++ -*-===//
//
// The tuner is op-agnostic; each op supplies a harness that owns device
// inputs (fresh random data), outputs, and its references (float64 on the
// host; attention's also a plain kernel on the device), launches a
// candidate kernel, and checks what it wrote. A new template joins the tuner
// by adding a harness, nothing else.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "runtime/DeviceBuffer.h"
#include "runtime/LoadedKernel.h"

namespace tilejit {

class OpHarness {
public:
  virtual ~OpHarness() = default;
  /// Allocates inputs filled with random values drawn from `seed`, outputs,
  /// and the reference for `spec`. Kernels whose sizes are launch-time values
  /// may be checked on a smaller problem than they are timed on.
  virtual llvm::Error prepare(const KernelSpec &spec, uint64_t seed) = 0;
  /// Prepares a candidate: e.g. the scratch memory its config needs.
  virtual llvm::Error bind(const LoadedKernel &kernel) = 0;
  /// Launches the candidate once on `stream`: on the problems that are
  /// checked (`check`: a smaller one, and the full one too where the
  /// harness has a reference at that size), or on the full problem that is
  /// timed.
  virtual llvm::Error run(const LoadedKernel &kernel, CUstream stream, bool check = true) = 0;
  /// Fills every output with NaN (0xFF bytes), so unwritten elements show.
  virtual llvm::Error poison(CUstream stream) = 0;
  /// Compares the outputs (after a synchronized run) with the reference:
  /// success, or an error naming the output and its error.
  virtual llvm::Error verify() = 0;
};

/// `count` random normal values of `t` (mean 0, deviation 1), drawn from a
/// table at random places: a draw per element would dominate the
/// preparation of large operands.
std::vector<unsigned char> randomValues(DType t, size_t count, uint64_t seed);

/// Runs `work(begin, end)` over [0, count) in blocks of `block` elements
/// (the last one shorter) on every host thread, the caller's among them, and
/// returns once all are done: the preparation of large operands and of their
/// references.
void parallelBlocks(size_t count, size_t block,
                    const std::function<void(size_t begin, size_t end)> &work);

/// Fills `dst` from byte `from` to its end with copies of the `bytes` at
/// device address `src` (outside that range), on a stream of its own (no
/// device-wide synchronization): the timed problems' inputs, larger than what
/// is worth drawing on the host.
llvm::Error repeatOnDevice(DeviceBuffer &dst, size_t from, CUdeviceptr src, size_t bytes);

/// `b` = a fresh device buffer of `bytes`.
llvm::Error allocate(DeviceBuffer &b, size_t bytes);

/// The harness for `spec`'s op, or null for an op without one.
std::unique_ptr<OpHarness> makeHarness(const KernelSpec &spec);

} // namespace tilejit
