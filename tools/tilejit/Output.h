//===- Output.h - what the CLI writes: terminals and files --------*- C++ -*-===//
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "llvm/Support/Error.h"

namespace tilejit::cli {

/// `text` with every byte outside printable ASCII written as \xNN: text from
/// a store (which an import may have filled) is data, never terminal control.
std::string shown(std::string_view text);

/// `j` as indented JSON text. Text from a store need not be UTF-8: a byte
/// that is not becomes U+FFFD rather than an exception.
std::string dumped(const nlohmann::json &j);

/// Writes `bytes` to `path` through a temporary file beside it, renamed into
/// place once complete and on disk: a failure (a full disk, a kill) leaves
/// `path` as it was and no temporary behind.
llvm::Error writeFileAtomically(const std::string &path, std::string_view bytes);

/// Flushes standard output; a write that failed (a full disk, a closed pipe)
/// turns exit status `rc` into 1 with a message.
int finishOutput(int rc);

} // namespace tilejit::cli
