//===- Parallel.h - host references spread over the CPU's cores ---*- C++ -*-===//
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <thread>
#include <vector>

namespace tilejit::testing {

/// Calls fn(i) for every i in [0, n), spread over the machine's cores; each
/// index runs once, on one thread. fn must write nothing another index
/// writes (then the result is the same as a loop's, whatever the order).
template <class Fn> void parallelFor(size_t n, Fn &&fn) {
  size_t threads = std::min<size_t>(n, std::max(1u, std::thread::hardware_concurrency()));
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < n;)
      fn(i);
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t)
    pool.emplace_back(work);
  work();
  for (std::thread &t : pool)
    t.join();
}

} // namespace tilejit::testing
