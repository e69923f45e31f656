//===- Seed.h - random seeds that a failing test names ------------*- C++ -*-===//
#pragma once

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>

namespace tilejit::testing {

/// TILEJIT_TEST_SEED when it is set (to replay a failure), else a fresh one.
inline uint64_t testSeed() {
  if (const char *s = std::getenv("TILEJIT_TEST_SEED"); s && *s)
    return std::strtoull(s, nullptr, 0);
  std::random_device rd;
  return uint64_t(rd()) << 32 | rd();
}

/// What a failing test prints about its seed.
inline std::string replayHint(uint64_t seed) {
  return "random seed " + std::to_string(seed) + " (TILEJIT_TEST_SEED=" + std::to_string(seed) +
         " replays it)";
}

} // namespace tilejit::testing
