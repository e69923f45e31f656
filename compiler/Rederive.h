//===- Rederive.h - does a binary come from its spec and config? -*- C++ -*-===//
//
// A binary that arrives from elsewhere (an imported store) is GPU code that
// someone else chose; its hash only shows it was not damaged on the way.
// Compiles are deterministic for one toolchain, so a binary can be trusted
// when compiling its spec and config here makes exactly its bytes.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string_view>

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

namespace tilejit {

/// Success when compiling `spec` with `config` (canonical texts) for `arch`,
/// with the back end whose kernel key is `key`, gives exactly `cubin`; else
/// an error saying what differs (no back end here makes `key`: another
/// tilejit or toolchain built it; other bytes; the spec does not parse).
llvm::Error checkRederives(std::string_view spec, std::string_view config, std::string_view arch,
                           std::string_view key, llvm::ArrayRef<char> cubin);

} // namespace tilejit
