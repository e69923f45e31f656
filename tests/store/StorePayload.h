//===- StorePayload.h - test data shared by the store tests ------*- C++ -*-===//
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/Sha256.h"

namespace tilejit::testing {

/// Deterministic bytes from `seed`: the test and the torture process write
/// and expect the same content for a key. Where there is room, they start
/// with the ELF header of a CUDA binary for sm_90, as `Store::verify` checks.
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
  if (n >= 64) {
    const unsigned char header[20] = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0x41, 8};
    std::copy(header, header + 20, v.begin());
    v[18] = char(190);                                       // EM_CUDA
    const unsigned char flags[4] = {0x04, 0x5a, 0x00, 0x06}; // sm_90, ELF ABI version 8
    std::copy(flags, flags + 4, v.begin() + 48);
  }
  return v;
}

} // namespace tilejit::testing
