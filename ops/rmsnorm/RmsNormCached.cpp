//===- RmsNormCached.cpp - RMSNorm through a KernelCache --------------------===//
//
// Apart from RmsNormLaunch.cpp: these compile on a miss, and the runtime
// (which the tuner's measuring worker and a C ABI link) has no compiler.
//
//===----------------------------------------------------------------------===//
#include "ops/rmsnorm/RmsNormCached.h"

namespace tilejit {

llvm::Error rmsNormForward(KernelCache &cache, const RmsNormForward &a, CUstream stream,
                           const Target &target, const TileConfig &config) {
  if (auto err = checkRmsNormShape(a.rows, a.cols))
    return err;
  if (a.rows == 0)
    return llvm::Error::success();
  auto kernel = cache.get(rmsNormSpec(a, target), config);
  if (!kernel)
    return kernel.takeError();
  return launchRmsNormForward(*kernel, a, stream);
}

llvm::Expected<int64_t> rmsNormBackwardWorkspace(KernelCache &cache, const RmsNormBackward &a,
                                                 const Target &target, const TileConfig &config) {
  if (auto err = checkRmsNormShape(a.rows, a.cols))
    return err;
  auto kernel = cache.get(rmsNormSpec(a, target), config);
  if (!kernel)
    return kernel.takeError();
  return kernel->workspaceBytes();
}

llvm::Error rmsNormBackward(KernelCache &cache, const RmsNormBackward &a, CUstream stream,
                            const Target &target, const TileConfig &config) {
  if (auto err = checkRmsNormShape(a.rows, a.cols))
    return err;
  auto kernel = cache.get(rmsNormSpec(a, target), config);
  if (!kernel)
    return kernel.takeError();
  return launchRmsNormBackward(*kernel, a, stream);
}

} // namespace tilejit
