//===- Harness.cpp - which harness measures which op ------------------------===//
//
// One line per op; each op's harness lives in its folder (ops/<op>/). And the
// random inputs the harnesses share.
//
//===----------------------------------------------------------------------===//
#include "autotune/Harness.h"

#include <algorithm>
#include <atomic>
#include <random>
#include <thread>

#include "runtime/CudaDriver.h"
#include "runtime/DeviceBuffer.h"

#include "ops/attention/AttentionDecl.h"
#include "ops/gemm/GemmDecl.h"
#include "ops/rmsnorm/RmsNormDecl.h"

namespace tilejit {

void parallelBlocks(size_t count, size_t block,
                    const std::function<void(size_t begin, size_t end)> &work) {
  block = std::max<size_t>(block, 1);
  size_t blocks = (count + block - 1) / block;
  std::atomic<size_t> next{0};
  auto run = [&] {
    for (size_t k; (k = next.fetch_add(1)) < blocks;)
      work(k * block, std::min(count, (k + 1) * block));
  };
  size_t threads = std::min<size_t>(std::max(1u, std::thread::hardware_concurrency()), blocks);
  std::vector<std::thread> pool;
  for (size_t i = 1; i < threads; ++i)
    pool.emplace_back(run);
  run();
  for (auto &th : pool)
    th.join();
}

llvm::Error repeatOnDevice(DeviceBuffer &dst, size_t from, CUdeviceptr src, size_t bytes) {
  auto drv = CudaDriver::get();
  if (!drv)
    return drv.takeError();
  CUstream s = nullptr;
  TJ_CU_CHECK(*drv, cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUresult r = CUDA_SUCCESS;
  for (size_t off = from; off < dst.bytes() && r == CUDA_SUCCESS; off += bytes)
    r = drv->cuMemcpyDtoDAsync_v2(dst.ptr() + off, src, std::min(bytes, dst.bytes() - off), s);
  if (r == CUDA_SUCCESS)
    r = drv->cuStreamSynchronize(s);
  drv->cuStreamDestroy_v2(s);
  if (r != CUDA_SUCCESS)
    return drv->error(r, "copying the timed inputs");
  return llvm::Error::success();
}

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
  parallelBlocks(count, size_t(1) << 22, fill);
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
