//===- Harness.cpp - which harness measures which op ------------------------===//
//
// One line per op; each op's harness lives in its folder (ops/<op>/). And the
// random inputs the harnesses share.
//
//===----------------------------------------------------------------------===//
#include "autotune/Harness.h"

#include <algorithm>
#include <random>
#include <thread>

#include "runtime/DeviceBuffer.h"

#include "ops/attention/AttentionDecl.h"
#include "ops/gemm/GemmDecl.h"
#include "ops/rmsnorm/RmsNormDecl.h"

namespace tilejit {

std::vector<unsigned char> randomValues(DType t, size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> table(1 << 12);
  for (float &x : table)
    x = normal(rng);
  std::vector<unsigned char> out(count * size_t(dtypeBytes(t)));
  // Element i draws from a counter (SplitMix64 of state0 + (i + 1) * the
  // golden ratio), so that threads can fill parts of a large input (an
  // LM head's weights: half a billion elements) and the values are the same
  // whatever the split.
  const uint64_t state0 = rng();
  auto fill = [&](size_t begin, size_t end) {
    uint64_t state = state0 + uint64_t(begin) * 0x9e3779b97f4a7c15ull;
    for (size_t i = begin; i < end; ++i) {
      state += 0x9e3779b97f4a7c15ull;
      uint64_t z = (state ^ (state >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      storeElement(out.data(), t, i, table[(z ^ (z >> 31)) & 0xFFF]);
    }
  };
  size_t threads = std::min<size_t>(std::max(1u, std::thread::hardware_concurrency()),
                                    count / (size_t(1) << 22) + 1);
  if (threads <= 1) {
    fill(0, count);
    return out;
  }
  std::vector<std::thread> pool;
  size_t per = (count + threads - 1) / threads;
  for (size_t w = 0; w < threads; ++w)
    pool.emplace_back(fill, std::min(count, w * per), std::min(count, (w + 1) * per));
  for (auto &th : pool)
    th.join();
  return out;
}

llvm::Error allocate(DeviceBuffer &b, size_t bytes) {
  auto buf = DeviceBuffer::allocate(bytes);
  if (!buf)
    return buf.takeError();
  b = std::move(*buf);
  return llvm::Error::success();
}

std::unique_ptr<OpHarness> makeRmsNormHarness(bool backward);
std::unique_ptr<OpHarness> makeGemmHarness();
std::unique_ptr<OpHarness> makeAttentionHarness();
std::unique_ptr<OpHarness> makeAttentionBackwardHarness();

std::unique_ptr<OpHarness> makeHarness(const KernelSpec &spec) {
  static const struct {
    const OpDecl *op;
    std::unique_ptr<OpHarness> (*make)();
  } harnesses[] = {
      {&rmsnorm::forwardOp(), [] { return makeRmsNormHarness(false); }},
      {&rmsnorm::backwardOp(), [] { return makeRmsNormHarness(true); }},
      {&gemm::op(), [] { return makeGemmHarness(); }},
      {&attention::forwardOp(), [] { return makeAttentionHarness(); }},
      {&attention::backwardOp(), [] { return makeAttentionBackwardHarness(); }},
  };
  for (const auto &h : harnesses)
    if (spec.is(*h.op))
      return h.make();
  return nullptr;
}

} // namespace tilejit
