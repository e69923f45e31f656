//===- LaunchGpuTest.cpp - launches beyond RMSNorm's, on the GPU -----------===//
//
// A kernel with a CUtensorMap parameter passed by value, a 3-D grid and more
// than 48 KB of dynamic shared memory: every element of a ragged tensor comes
// back through the TMA unit bit for bit, into outputs poisoned first.
//
//===----------------------------------------------------------------------===//
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "compiler/Compiler.h"
#include "runtime/CudaDriver.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/LoadedKernel.h"
#include "runtime/TensorMap.h"
#include "tests/support/Seed.h"
#include "tests/support/TmaCopyKernel.h"

using namespace tilejit;

namespace {

TEST(GpuLaunch, TensorMapThreeDimensionalGridAndLargeDynamicSharedMemory) {
  auto ctx = useDevice(0);
  if (!ctx)
    GTEST_SKIP() << "no GPU here: " << llvm::toString(ctx.takeError());
  auto info = queryDevice(0);
  ASSERT_TRUE(bool(info)) << llvm::toString(info.takeError());
  auto target = info->target();
  ASSERT_TRUE(bool(target)) << llvm::toString(target.takeError());
  if (!target->hasTma())
    GTEST_SKIP() << info->name << " (" << info->arch() << ") has no TMA";
  auto binary = compileLlvmDialectModule(tilejit::testing::tmaCopyKernel(), *target,
                                         {tilejit::testing::tmaCopyLaunch()});
  ASSERT_TRUE(bool(binary)) << llvm::toString(binary.takeError());
  auto kernel = LoadedKernel::load(*binary);
  ASSERT_TRUE(bool(kernel)) << llvm::toString(kernel.takeError());

  uint64_t seed = tilejit::testing::testSeed();
  SCOPED_TRACE(tilejit::testing::replayHint(seed));
  std::mt19937_64 rng(seed);
  // Neither size a multiple of its box; three planes.
  const int rows = 600, cols = 300, depth = 3;
  const size_t n = size_t(rows) * cols * depth;
  std::vector<float> in(n), out(n);
  std::normal_distribution<float> normal;
  for (float &v : in)
    v = normal(rng);
  auto src = DeviceBuffer::allocate(n * 4), dst = DeviceBuffer::allocate(n * 4);
  ASSERT_TRUE(bool(src) && bool(dst));
  ASSERT_FALSE(bool(src->upload(in.data(), n * 4)));
  ASSERT_FALSE(bool(dst->fill(0xFF))); // NaN wherever the kernel does not write

  TensorMapDesc d;
  d.dtype = DType::F32;
  d.rank = 3;
  d.address = src->ptr();
  d.dims[0] = cols;
  d.dims[1] = rows;
  d.dims[2] = depth;
  d.strideBytes[0] = int64_t(cols) * 4;
  d.strideBytes[1] = int64_t(cols) * rows * 4;
  d.box[0] = tilejit::testing::kTmaBoxCols;
  d.box[1] = tilejit::testing::kTmaBoxRows;
  d.box[2] = 1;
  auto map = encodeTensorMap(d);
  ASSERT_TRUE(bool(map)) << llvm::toString(map.takeError());
  // The same description again is the map made before, not a new encoding;
  // another address is another map (not the one kept for this one).
  uint64_t encodes = tensorMapEncodes();
  auto again = encodeTensorMap(d);
  ASSERT_TRUE(bool(again)) << llvm::toString(again.takeError());
  EXPECT_EQ(std::memcmp(&*again, &*map, sizeof(CUtensorMap)), 0);
  EXPECT_EQ(tensorMapEncodes(), encodes);
  TensorMapDesc other = d;
  other.address = dst->ptr();
  auto moved = encodeTensorMap(other);
  ASSERT_TRUE(bool(moved)) << llvm::toString(moved.takeError());
  EXPECT_NE(std::memcmp(&*moved, &*map, sizeof(CUtensorMap)), 0);

  KernelArg args[] = {KernelArg::tensorMap(*map), KernelArg::pointer(dst->ptr()),
                      KernelArg::i32(rows), KernelArg::i32(cols), KernelArg::i32(depth)};
  auto grid = (*kernel)->gridFor(0, args, 5);
  ASSERT_TRUE(bool(grid)) << llvm::toString(grid.takeError());
  EXPECT_EQ((*grid)[0], 5);
  EXPECT_EQ((*grid)[1], 3);
  EXPECT_EQ((*grid)[2], 3);
  auto launched = (*kernel)->launch(0, args, 5, nullptr);
  ASSERT_FALSE(bool(launched)) << llvm::toString(std::move(launched));
  ASSERT_EQ(CudaDriver::get()->cuCtxSynchronize(), CUDA_SUCCESS);
  ASSERT_FALSE(bool(dst->download(out.data(), n * 4)));
  size_t wrong = 0, first = n;
  for (size_t i = 0; i < n; ++i)
    if (std::memcmp(&in[i], &out[i], 4) != 0 && wrong++ == 0)
      first = i;
  EXPECT_EQ(wrong, 0u) << "first at element " << first << ": " << out[first] << " for "
                       << in[first];

  // An argument of the wrong kind is refused before anything is launched.
  KernelArg swapped[] = {KernelArg::pointer(dst->ptr()), KernelArg::pointer(dst->ptr()),
                         KernelArg::i32(rows), KernelArg::i32(cols), KernelArg::i32(depth)};
  auto refused = (*kernel)->launch(0, swapped, 5, nullptr);
  EXPECT_NE(llvm::toString(std::move(refused)).find("argument 0 (arg0): expected tensormap"),
            std::string::npos);
}

} // namespace
