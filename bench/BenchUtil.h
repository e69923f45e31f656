//===- BenchUtil.h - what the benchmark programs share -------------*- C++ -*-===//
//
// A benchmark stops at the first failure with one line naming it: each
// program sets kProgram (its name) and calls these.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <cuda.h>

#include "llvm/Support/Error.h"

namespace tilejit::bench {

extern const char *const kProgram;

[[noreturn]] inline void die(const std::string &msg) {
  std::fprintf(stderr, "%s: %s\n", kProgram, msg.c_str());
  std::exit(1);
}
template <class T> T must(llvm::Expected<T> v) {
  if (!v)
    die(llvm::toString(v.takeError()));
  return std::move(*v);
}
inline void must(llvm::Error e) {
  if (e)
    die(llvm::toString(std::move(e)));
}
/// The median of `v` (the upper one of an even count; 0 for none).
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

inline void cu(CUresult r, const char *what) {
  if (r != CUDA_SUCCESS)
    die(std::string(what) + " failed: " + std::to_string(int(r)));
}

} // namespace tilejit::bench
