//===- CompileAndLoad.cpp - LoadedKernel::compileAndLoad ------------------===//
//
// Apart from LoadedKernel.cpp so that programs that only load binaries (the
// tuner's measuring worker) do not link the compiler.
//
//===----------------------------------------------------------------------===//
#include "runtime/LoadedKernel.h"

namespace tilejit {

llvm::Expected<std::unique_ptr<LoadedKernel>>
LoadedKernel::compileAndLoad(const KernelSpec &spec, const TileConfig &config, CompiledKernel *out,
                             const CompileOptions &options) {
  auto compiled = compileKernel(spec, config, options);
  if (!compiled)
    return compiled.takeError();
  auto loaded = load(*compiled);
  if (loaded && out)
    *out = std::move(*compiled);
  return loaded;
}

} // namespace tilejit
