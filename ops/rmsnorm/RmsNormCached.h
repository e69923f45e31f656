//===- RmsNormCached.h - RMSNorm through a KernelCache -------------*- C++ -*-===//
//
// The launches of ops/rmsnorm/RmsNormLaunch.h with the kernel fetched (compiled on a
// miss) from a KernelCache.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ops/rmsnorm/RmsNormLaunch.h"
#include "service/KernelCache.h"

namespace tilejit {

/// Launches the forward pass on `target` (DeviceInfo::target()), compiling
/// through `cache` on a miss. `config` empty: the template's default.
llvm::Error rmsNormForward(KernelCache &cache, const RmsNormForward &a, CUstream stream,
                           const Target &target, const TileConfig &config = {});
/// Launches the backward pass (two kernels: dx with dw partials, then dw).
llvm::Error rmsNormBackward(KernelCache &cache, const RmsNormBackward &a, CUstream stream,
                            const Target &target, const TileConfig &config = {});
/// Bytes of f32 workspace the backward pass needs.
llvm::Expected<int64_t> rmsNormBackwardWorkspace(KernelCache &cache, const RmsNormBackward &a,
                                                 const Target &target,
                                                 const TileConfig &config = {});

} // namespace tilejit
