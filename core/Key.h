//===- Key.h - the one recipe for kernel and tuning keys ----------*- C++ -*-===//
//
// A kernel's key is the SHA-256 of its spec without launch-time sizes, its
// config and the build identity: every input that decides the binary's bytes
// (the back end, tilejit's version, the compiler's and the template's source
// hashes, the LLVM, ptxas and NVRTC versions, the device library's hash).
// A tuning key is the tuning spec (launch-time sizes in their buckets) and
// the same identity, so a toolchain or source change misses both; the spec
// part alone finds winners recorded under an older identity, which a tuner
// may try first (never use unmeasured).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>

#include "core/KernelSpec.h"

namespace tilejit {

/// Every input besides the spec and the config that decides a binary.
struct BuildIdentity {
  std::string backend; // "nvptx", "cuda"
  /// `name=value` lines: versions and source hashes, in a fixed order.
  std::string toolchain;
  /// A short hash of the whole identity, for tuning keys and messages.
  std::string digest() const;
};

std::string kernelKey(const KernelSpec &spec, const TileConfig &config,
                      const BuildIdentity &identity);

/// `<tuning spec> | <identity digest>`.
std::string tuneKey(const KernelSpec &spec, const BuildIdentity &identity);
/// `<tuning spec> | `: the prefix every tuning key of this spec has, whatever
/// the identity it was recorded under.
std::string tuneKeyPrefix(const KernelSpec &spec);

} // namespace tilejit
