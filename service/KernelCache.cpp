//===- KernelCache.cpp ------------------------------------------------------===//
#include "service/KernelCache.h"

#include "runtime/CudaDriver.h"

namespace tilejit {

llvm::Expected<std::unique_ptr<LoadedKernel>> compileAndLoad(const KernelSpec &spec,
                                                             const TileConfig &config,
                                                             CompiledKernel *out,
                                                             const CompileOptions &options) {
  auto compiled = compileKernel(spec, config, options);
  if (!compiled)
    return compiled.takeError();
  auto loaded = LoadedKernel::load(*compiled);
  if (loaded && out)
    *out = std::move(*compiled);
  return loaded;
}

uint64_t KernelCache::hashOf(CUcontext ctx, const KernelSpec &spec, const TileConfig &config) {
  uint64_t h = spec.hash(/*withRuntimeSizes=*/false);
  auto mix = [&](uint64_t v) {
    h ^= v;
    h *= 1099511628211ull;
  };
  mix(reinterpret_cast<uintptr_t>(ctx));
  for (const auto &[name, value] : config.values) {
    for (char c : name)
      mix(uint64_t(uint8_t(c)));
    mix(uint64_t(value));
  }
  return h;
}

const LoadedKernel *KernelCache::findLocked(uint64_t h, CUcontext ctx, const KernelSpec &spec,
                                            const TileConfig &config) const {
  auto [begin, end] = kernels_.equal_range(h);
  for (auto it = begin; it != end; ++it)
    if (it->second.ctx == ctx && it->second.spec.sameKernel(spec) &&
        it->second.config.values == config.values)
      return it->second.kernel.get();
  return nullptr;
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
  CUcontext ctx = currentContext();
  uint64_t h = hashOf(ctx, spec, config);
  std::shared_lock lock(mu_);
  return findLocked(h, ctx, spec, config);
}

llvm::Expected<const LoadedKernel &> KernelCache::get(const KernelSpec &spec,
                                                      const TileConfig &config) {
  CUcontext ctx = currentContext();
  if (!ctx)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "no current CUDA context (call useDevice first)");
  uint64_t h = hashOf(ctx, spec, config);
  {
    std::shared_lock lock(mu_);
    if (const LoadedKernel *k = findLocked(h, ctx, spec, config))
      return *k;
  }
  // One compile at a time; a second caller for the same kernel finds it loaded.
  std::lock_guard<std::mutex> compileLock(compileMu_);
  {
    std::shared_lock lock(mu_);
    if (const LoadedKernel *k = findLocked(h, ctx, spec, config))
      return *k;
  }
  CompileOptions options;
  options.backend = backend_;
  auto loaded = compileAndLoad(spec, config, nullptr, options);
  if (!loaded)
    return loaded.takeError();
  std::unique_lock lock(mu_);
  auto it = kernels_.emplace(h, Entry{ctx, spec, config, std::move(*loaded)});
  return *it->second.kernel;
}

} // namespace tilejit
