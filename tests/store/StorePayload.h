//===- StorePayload.h - test data shared by the store tests ------*- C++ -*-===//
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/Sha256.h"

namespace tilejit::testing {

/// Deterministic bytes from `seed`: the test and the torture process write
/// and expect the same content for a key.
inline std::vector<char> payload(const std::string &seed, size_t n) {
  uint64_t x = 1469598103934665603ull;
  for (char c : seed) {
    x ^= uint8_t(c);
    x *= 1099511628211ull;
  }
  std::vector<char> v(n);
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v[i] = char(x);
  }
  return v;
}

} // namespace tilejit::testing
