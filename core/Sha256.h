//===- Sha256.h - SHA-256 digests -------------------------------*- C++ -*-===//
#pragma once

#include <string>
#include <string_view>

namespace tilejit {
/// Lower-case hex SHA-256 of `data`.
std::string sha256Hex(std::string_view data);
} // namespace tilejit
