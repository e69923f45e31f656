//===- KernelCache.cpp ------------------------------------------------------===//
#include "runtime/KernelCache.h"

#include "runtime/CudaDriver.h"

namespace tilejit {

std::string KernelCache::lookupKey(CUcontext ctx, const KernelSpec &spec,
                                   const TileConfig &config) {
  std::string key = std::to_string(reinterpret_cast<uintptr_t>(ctx));
  key += '|';
  key += spec.canonical(/*withRuntimeSizes=*/false);
  key += '|';
  key += config.canonical();
  return key;
}

static CUcontext currentContext() {
  auto drv = CudaDriver::get();
  if (!drv) {
    llvm::consumeError(drv.takeError());
    return nullptr;
  }
  CUcontext ctx = nullptr;
  drv->cuCtxGetCurrent(&ctx);
  return ctx;
}

const LoadedKernel *KernelCache::find(const KernelSpec &spec, const TileConfig &config) const {
  std::string key = lookupKey(currentContext(), spec, config);
  std::shared_lock lock(mu_);
  auto it = kernels_.find(key);
  return it == kernels_.end() ? nullptr : it->second.get();
}

llvm::Expected<const LoadedKernel &> KernelCache::get(const KernelSpec &spec,
                                                      const TileConfig &config) {
  CUcontext ctx = currentContext();
  if (!ctx)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "no current CUDA context (call useDevice first)");
  std::string key = lookupKey(ctx, spec, config);
  {
    std::shared_lock lock(mu_);
    auto it = kernels_.find(key);
    if (it != kernels_.end())
      return *it->second;
  }
  // One compile at a time; a second caller for the same key finds it loaded.
  std::lock_guard<std::mutex> compileLock(compileMu_);
  {
    std::shared_lock lock(mu_);
    auto it = kernels_.find(key);
    if (it != kernels_.end())
      return *it->second;
  }
  auto loaded = LoadedKernel::compileAndLoad(spec, config);
  if (!loaded)
    return loaded.takeError();
  std::unique_lock lock(mu_);
  auto &slot = kernels_[key];
  slot = std::move(*loaded);
  return *slot;
}

} // namespace tilejit
