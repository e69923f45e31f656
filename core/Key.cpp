//===- Key.cpp ------------------------------------------------------------===//
#include "core/Key.h"

#include "core/Sha256.h"

namespace tilejit {

std::string BuildIdentity::digest() const {
  return sha256Hex("backend=" + backend + "\n" + toolchain).substr(0, 16);
}

std::string kernelKey(const KernelSpec &spec, const TileConfig &config,
                      const BuildIdentity &identity) {
  return sha256Hex("spec=" + spec.canonical(/*withRuntimeSizes=*/false) +
                   "\nconfig=" + config.canonical() + "\nbackend=" + identity.backend + "\n" +
                   identity.toolchain);
}

std::string tuneKeyPrefix(const KernelSpec &spec) {
  return spec.tuningSpec().canonical(/*withRuntimeSizes=*/true) + " | ";
}

std::string tuneKey(const KernelSpec &spec, const BuildIdentity &identity) {
  return tuneKeyPrefix(spec) + identity.backend + "-" + identity.digest();
}

} // namespace tilejit
