//===- RmsNormCachedOps.cpp - RMSNorm through a KernelCache -----------------===//
//
// Apart from RmsNormOps.cpp: these compile on a miss, and programs that only
// launch kernels they were given (the tuner's measuring worker) do not link
// the compiler.
//
//===----------------------------------------------------------------------===//
#include "runtime/RmsNormOps.h"

namespace tilejit {

llvm::Error rmsNormForward(KernelCache &cache, const RmsNormForward &a, CUstream stream,
                           const std::string &arch, int sms, const TileConfig &config) {
  if (auto err = checkRmsNormShape(a.rows, a.cols))
    return err;
  if (a.rows == 0)
    return llvm::Error::success();
  auto kernel = cache.get(rmsNormSpec(a, arch, sms), config);
  if (!kernel)
    return kernel.takeError();
  return launchRmsNormForward(*kernel, a, stream);
}

llvm::Expected<int64_t> rmsNormBackwardWorkspace(KernelCache &cache, const RmsNormBackward &a,
                                                 const std::string &arch, int sms,
                                                 const TileConfig &config) {
  if (auto err = checkRmsNormShape(a.rows, a.cols))
    return err;
  auto kernel = cache.get(rmsNormSpec(a, arch, sms), config);
  if (!kernel)
    return kernel.takeError();
  return kernel->workspaceBytes();
}

llvm::Error rmsNormBackward(KernelCache &cache, const RmsNormBackward &a, CUstream stream,
                            const std::string &arch, int sms, const TileConfig &config) {
  if (auto err = checkRmsNormShape(a.rows, a.cols))
    return err;
  auto kernel = cache.get(rmsNormSpec(a, arch, sms), config);
  if (!kernel)
    return kernel.takeError();
  return launchRmsNormBackward(*kernel, a, stream);
}

} // namespace tilejit
