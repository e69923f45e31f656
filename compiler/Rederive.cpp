//===- Rederive.cpp ---------------------------------------------------------===//
#include "compiler/Rederive.h"

#include "compiler/Compiler.h"

namespace tilejit {

static llvm::Error notRederived(const llvm::Twine &why) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), why);
}

llvm::Error checkRederives(std::string_view specText, std::string_view configText,
                           std::string_view arch, std::string_view key,
                           llvm::ArrayRef<char> cubin) {
  auto spec = KernelSpec::parse(specText);
  if (!spec)
    return notRederived("its spec does not parse here: " + llvm::toString(spec.takeError()));
  auto config = TileConfig::parse(configText);
  if (!config)
    return notRederived("its config does not parse here: " + llvm::toString(config.takeError()));
  if (spec->target.archName() != arch)
    return notRederived("its arch '" + llvm::Twine(arch) + "' is not its spec's (" +
                        spec->target.archName() + ")");
  // The key names the back end, among everything else that made the binary.
  llvm::SmallVector<llvm::StringRef> names;
  llvm::StringRef(backendNames()).split(names, ", ");
  for (llvm::StringRef name : names) {
    auto backend = parseBackend(name);
    if (!backend || kernelKey(*spec, *config, *backend) != key)
      continue;
    CompileOptions opts;
    opts.backend = *backend;
    auto compiled = compileKernel(*spec, *config, opts);
    if (!compiled)
      return notRederived("compiling its spec and config here failed: " +
                          llvm::toString(compiled.takeError()));
    if (llvm::ArrayRef<char>(compiled->cubin) != cubin)
      return notRederived("compiling its spec and config here gives other bytes");
    return llvm::Error::success();
  }
  return notRederived("another tilejit or toolchain built it (no back end here makes its key)");
}

} // namespace tilejit
