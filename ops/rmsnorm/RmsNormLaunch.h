//===- RmsNormLaunch.h - RMSNorm launches on device buffers --------*- C++ -*-===//
//
// Builds the kernel spec from the buffers (dtypes, sizes, the alignment the
// addresses actually have), fetches the kernel and launches it on `stream`.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "core/KernelSpec.h"
#include "runtime/LoadedKernel.h"

namespace tilejit {

struct RmsNormForward {
  DType dtype = DType::BF16, wdtype = DType::BF16;
  uint64_t x = 0, w = 0, y = 0, rstd = 0; // device addresses; rstd is f32[rows]
  int64_t rows = 0, cols = 0;
  float eps = 1e-5f;
  bool zeroCenteredGamma = false;
};

struct RmsNormBackward {
  DType dtype = DType::BF16, wdtype = DType::BF16;
  uint64_t dy = 0, x = 0, rstd = 0, w = 0, dx = 0, dw = 0;
  uint64_t workspace = 0; // f32, rmsNormBackwardWorkspace() bytes
  int64_t rows = 0, cols = 0;
  bool zeroCenteredGamma = false;
};

/// The spec for a call on `target` (the GPU's arch and multiprocessors).
KernelSpec rmsNormSpec(const RmsNormForward &a, const Target &target);
KernelSpec rmsNormSpec(const RmsNormBackward &a, const Target &target);

/// rows >= 0 and hidden size >= 1, or an error naming the bad one.
llvm::Error checkRmsNormShape(int64_t rows, int64_t cols);

/// Launches with a kernel already in hand (the tuner's candidates, the engine).
llvm::Error launchRmsNormForward(const LoadedKernel &kernel, const RmsNormForward &a,
                                 CUstream stream);
llvm::Error launchRmsNormBackward(const LoadedKernel &kernel, const RmsNormBackward &a,
                                  CUstream stream);

} // namespace tilejit
