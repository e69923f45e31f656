//===- RmsNormGpuTest.cpp - RMSNorm kernels on the GPU vs float64 ----------===//
//
// Fresh random inputs each run (the seed is printed on failure;
// TILEJIT_TEST_SEED replays it), outputs poisoned with NaN first, a float64
// reference on the host, compared element by element. Skips (and says why)
// where there is no GPU.
//
//===----------------------------------------------------------------------===//
#include <gtest/gtest.h>

#include <cmath>

#include "ops/rmsnorm/RmsNormDecl.h"
#include "ops/rmsnorm/RmsNormCached.h"
#include "tests/support/Compare.h"
#include "tests/support/RmsNormReference.h"
#include "tests/support/Seed.h"

using namespace tilejit;
using tilejit::testing::allClose;
using tilejit::testing::HostTensor;
using tilejit::testing::tolerance;

namespace {

#define ASSERT_OK(expr)                                                                            \
  do {                                                                                             \
    if (auto tj_err_ = (expr))                                                                     \
      FAIL() << llvm::toString(std::move(tj_err_));                                                \
  } while (0)

template <class T> T must(llvm::Expected<T> v) {
  if (!v) {
    ADD_FAILURE() << llvm::toString(v.takeError());
    std::abort();
  }
  return std::move(*v);
}

/// Bytes of guard after every output; they are poisoned with the output and
/// must still hold 0xFF after the kernels ran (nothing written past the end).
constexpr int kGuard = 256;

/// Checks that `buf`'s bytes from `from` to its end still hold 0xFF.
void expectGuardIntact(DeviceBuffer &buf, size_t from, const char *what) {
  std::vector<unsigned char> tail(buf.bytes() - from);
  auto drv = must(CudaDriver::get());
  ASSERT_EQ(drv.cuMemcpyDtoH_v2(tail.data(), buf.ptr() + from, tail.size()), CUDA_SUCCESS);
  for (size_t i = 0; i < tail.size(); ++i)
    if (tail[i] != 0xFF) {
      ADD_FAILURE() << what << ": written " << i << " bytes past its end";
      return;
    }
}

struct Case {
  int64_t rows, cols;
  DType dtype, wdtype;
  bool zcg;
  int misalign = 0; // bytes added to the x/dy/y/dx addresses
  // Configs to run instead of the defaults (empty: the default).
  const char *fwdConfig = "", *bwdConfig = "";
};

std::string name(const Case &c) {
  return std::to_string(c.rows) + "x" + std::to_string(c.cols) + " " +
         std::string(dtypeName(c.dtype)) + "/" + std::string(dtypeName(c.wdtype)) +
         (c.zcg ? " zcg" : "") + (c.misalign ? " misaligned" : "") +
         (*c.fwdConfig ? std::string(" fwd [") + c.fwdConfig + "]" : "") +
         (*c.bwdConfig ? std::string(" bwd [") + c.bwdConfig + "]" : "");
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (bool zcg : {false, true})
    for (auto [r, c] : std::vector<std::pair<int64_t, int64_t>>{{1, 1},
                                                                {1, 7},
                                                                {3, 1000},
                                                                {17, 4097},
                                                                {64, 8192},
                                                                {5, 16384},
                                                                {4099, 4096},
                                                                {65537, 7},
                                                                {2, 32768},
                                                                {1, 4096},
                                                                {300, 128},
                                                                // forward in segments
                                                                // (above 16384), backward
                                                                // in clusters of 2 to 8:
                                                                {200, 65536},
                                                                {301, 15000},
                                                                {33, 24576},
                                                                {257, 57344},
                                                                {7, 18432},
                                                                {300, 40960},
                                                                // both in segments:
                                                                {3, 65537},
                                                                {2, 100000}})
      out.push_back({r, c, DType::BF16, DType::BF16, zcg});
  out.push_back({33, 4096, DType::F16, DType::F16, false});
  out.push_back({9, 1000, DType::F16, DType::F16, true});
  out.push_back({33, 4096, DType::F32, DType::F32, false});
  out.push_back({7, 4097, DType::F32, DType::F32, true});
  out.push_back({33, 4096, DType::BF16, DType::F32, false});
  out.push_back({31, 4096, DType::BF16, DType::BF16, false, 2});
  out.push_back({31, 1000, DType::F16, DType::F16, true, 4});
  // Rows split over clusters (one program per row tile, and persistent with
  // the next rows loaded ahead), an odd row over four blocks, and segments
  // of tiles of several rows.
  out.push_back({37, 16384, DType::BF16, DType::BF16, false, 0,
                 "cluster=2 programs=0 rows=1 stream=1 threads=256 vec=8",
                 "cluster=2 prefetch=1 programs=66 rows=1 stream=0 threads=512 vec=8"});
  out.push_back({1000, 16384, DType::BF16, DType::BF16, true, 0,
                 "cluster=2 programs=66 rows=1 stream=0 threads=512 vec=8",
                 "cluster=4 prefetch=1 programs=33 rows=1 stream=0 threads=512 vec=8"});
  out.push_back({300, 20001, DType::BF16, DType::BF16, false, 0,
                 "cluster=4 programs=0 rows=1 stream=0 threads=1024 vec=1",
                 "cluster=4 prefetch=0 programs=33 rows=1 stream=1 threads=1024 vec=1"});
  out.push_back({300, 20480, DType::F16, DType::F16, true, 0,
                 "programs=0 rows=1 segs=2 stream=1 threads=1024 vec=8",
                 "prefetch=0 programs=132 rows=4 segs=10 stream=1 threads=1024 vec=8"});
  // The same configs where nothing divides: 301 rows over tiles of 4, and
  // 20008 columns over segments and vectors; the defaults (segments of
  // scalar accesses) at an odd width; a cluster over an odd width.
  out.push_back({301, 20008, DType::F16, DType::F16, true, 0,
                 "programs=0 rows=1 segs=2 stream=1 threads=1024 vec=8",
                 "prefetch=0 programs=132 rows=4 segs=10 stream=1 threads=1024 vec=8"});
  out.push_back({301, 20001, DType::BF16, DType::BF16, false});
  out.push_back({37, 16385, DType::BF16, DType::BF16, false, 0,
                 "cluster=2 programs=0 rows=1 stream=1 threads=256 vec=1",
                 "cluster=2 prefetch=1 programs=66 rows=1 stream=0 threads=512 vec=1"});
  return out;
}

/// Every test runs once per back end: the kernels must agree with float64
/// whichever made them.
class GpuRmsNorm : public ::testing::TestWithParam<Backend> {
protected:
  void SetUp() override {
    auto ctx = useDevice(0);
    if (!ctx)
      GTEST_SKIP() << "no GPU here: " << llvm::toString(ctx.takeError());
    auto info = queryDevice(0);
    if (!info)
      GTEST_SKIP() << "no GPU here: " << llvm::toString(info.takeError());
    auto t = info->target();
    if (!t)
      GTEST_FAIL() << llvm::toString(t.takeError());
    target = *t;
    seed = tilejit::testing::testSeed();
    rng.seed(seed);
  }
  void TearDown() override {
    if (HasFailure())
      std::printf("%s\n", tilejit::testing::replayHint(seed).c_str());
  }
  Target target;
  uint64_t seed = 0;
  std::mt19937_64 rng;
  KernelCache cache{GetParam()};
};

tilejit::testing::RmsNormReference reference(const Case &c, const HostTensor &x,
                                             const HostTensor &w, const HostTensor *dy,
                                             double eps) {
  return tilejit::testing::rmsNormReference(c.rows, c.cols, c.zcg, x, w, dy, eps);
}

TEST_P(GpuRmsNorm, ForwardMatchesFloat64) {
  for (const Case &c : cases()) {
    SCOPED_TRACE(name(c));
    size_t n = c.rows * c.cols;
    HostTensor x(c.dtype, n), w(c.wdtype, c.cols), y(c.dtype, n), rstd(DType::F32, c.rows);
    x.randomNormal(rng, 0.0f, 1.0f);
    w.randomNormal(rng, c.zcg ? 0.0f : 1.0f, 0.1f);
    const float eps = 1e-5f;
    int pad = 16;
    auto dx = must(DeviceBuffer::allocate(x.bytes.size() + pad));
    auto dw = must(DeviceBuffer::allocate(w.bytes.size()));
    auto dyb = must(DeviceBuffer::allocate(y.bytes.size() + pad + kGuard));
    auto dr = must(DeviceBuffer::allocate(rstd.bytes.size() + kGuard));
    ASSERT_OK(dx.fill(0));
    auto up = [&](DeviceBuffer &b, const HostTensor &t, int off) {
      auto drv = must(CudaDriver::get());
      return drv.cuMemcpyHtoD_v2(b.ptr() + off, t.bytes.data(), t.bytes.size());
    };
    ASSERT_EQ(up(dx, x, c.misalign), CUDA_SUCCESS);
    ASSERT_OK(dw.upload(w.bytes.data(), w.bytes.size()));
    ASSERT_OK(dyb.fill(0xFF)); // poison: NaN wherever the kernel does not write
    ASSERT_OK(dr.fill(0xFF));

    RmsNormForward a;
    a.dtype = c.dtype;
    a.wdtype = c.wdtype;
    a.x = dx.ptr() + c.misalign;
    a.w = dw.ptr();
    a.y = dyb.ptr() + c.misalign;
    a.rstd = dr.ptr();
    a.rows = c.rows;
    a.cols = c.cols;
    a.eps = eps;
    a.zeroCenteredGamma = c.zcg;
    ASSERT_OK(rmsNormForward(cache, a, nullptr, target, must(TileConfig::parse(c.fwdConfig))));
    auto drv = must(CudaDriver::get());
    ASSERT_EQ(drv.cuCtxSynchronize(), CUDA_SUCCESS);
    ASSERT_EQ(drv.cuMemcpyDtoH_v2(y.bytes.data(), dyb.ptr() + c.misalign, y.bytes.size()),
              CUDA_SUCCESS);
    ASSERT_OK(dr.download(rstd.bytes.data(), rstd.bytes.size()));
    expectGuardIntact(dyb, c.misalign + y.bytes.size(), "y");
    expectGuardIntact(dr, rstd.bytes.size(), "rstd");

    auto ref = reference(c, x, w, nullptr, eps);
    EXPECT_TRUE(allClose(y, ref.y, tolerance(c.dtype), c.cols)) << "y";
    EXPECT_TRUE(allClose(rstd, ref.rstd, tolerance(DType::F32), 0)) << "rstd";
    if (c.misalign) {
      EXPECT_LT(rmsnorm::Params(rmsNormSpec(a, target)).align, 16)
          << "misaligned operands must get a narrower kernel";
    }
  }
}

TEST_P(GpuRmsNorm, BackwardMatchesFloat64AndIsDeterministic) {
  for (const Case &c : cases()) {
    SCOPED_TRACE(name(c));
    size_t n = c.rows * c.cols;
    HostTensor x(c.dtype, n), w(c.wdtype, c.cols), dy(c.dtype, n), dx(c.dtype, n),
        dw(c.wdtype, c.cols), rstd(DType::F32, c.rows);
    x.randomNormal(rng, 0.0f, 1.0f);
    dy.randomNormal(rng, 0.0f, 1.0f);
    w.randomNormal(rng, c.zcg ? 0.0f : 1.0f, 0.1f);
    const double eps = 1e-5;
    auto ref = reference(c, x, w, &dy, eps);
    for (int64_t i = 0; i < c.rows; ++i)
      rstd.set(i, float(ref.rstd[i]));

    int pad = 16;
    auto bx = must(DeviceBuffer::allocate(x.bytes.size() + pad));
    auto bdy = must(DeviceBuffer::allocate(dy.bytes.size() + pad));
    auto bdx = must(DeviceBuffer::allocate(dx.bytes.size() + pad + kGuard));
    auto bw = must(DeviceBuffer::allocate(w.bytes.size()));
    auto bdw = must(DeviceBuffer::allocate(dw.bytes.size() + kGuard));
    auto br = must(DeviceBuffer::allocate(rstd.bytes.size()));
    auto drv = must(CudaDriver::get());
    ASSERT_EQ(drv.cuMemcpyHtoD_v2(bx.ptr() + c.misalign, x.bytes.data(), x.bytes.size()),
              CUDA_SUCCESS);
    ASSERT_EQ(drv.cuMemcpyHtoD_v2(bdy.ptr() + c.misalign, dy.bytes.data(), dy.bytes.size()),
              CUDA_SUCCESS);
    ASSERT_OK(bw.upload(w.bytes.data(), w.bytes.size()));
    ASSERT_OK(br.upload(rstd.bytes.data(), rstd.bytes.size()));

    RmsNormBackward a;
    a.dtype = c.dtype;
    a.wdtype = c.wdtype;
    a.dy = bdy.ptr() + c.misalign;
    a.x = bx.ptr() + c.misalign;
    a.rstd = br.ptr();
    a.w = bw.ptr();
    a.dx = bdx.ptr() + c.misalign;
    a.dw = bdw.ptr();
    a.rows = c.rows;
    a.cols = c.cols;
    a.zeroCenteredGamma = c.zcg;
    TileConfig config = must(TileConfig::parse(c.bwdConfig));
    int64_t wsBytes = must(rmsNormBackwardWorkspace(cache, a, target, config));
    auto ws = must(DeviceBuffer::allocate(size_t(wsBytes)));
    a.workspace = ws.ptr();

    std::vector<unsigned char> firstDx, firstDw;
    for (int run = 0; run < 2; ++run) {
      ASSERT_OK(bdx.fill(0xFF));
      ASSERT_OK(bdw.fill(0xFF));
      ASSERT_OK(ws.fill(0xFF));
      ASSERT_OK(rmsNormBackward(cache, a, nullptr, target, config));
      ASSERT_EQ(drv.cuCtxSynchronize(), CUDA_SUCCESS);
      ASSERT_EQ(drv.cuMemcpyDtoH_v2(dx.bytes.data(), bdx.ptr() + c.misalign, dx.bytes.size()),
                CUDA_SUCCESS);
      ASSERT_OK(bdw.download(dw.bytes.data(), dw.bytes.size()));
      expectGuardIntact(bdx, c.misalign + dx.bytes.size(), "dx");
      expectGuardIntact(bdw, dw.bytes.size(), "dw");
      if (run == 0) {
        EXPECT_TRUE(allClose(dx, ref.dx, tolerance(c.dtype), c.cols, ref.dxScale)) << "dx";
        EXPECT_TRUE(allClose(dw, ref.dw, tolerance(c.wdtype), 0, ref.dwScale)) << "dw";
        firstDx = dx.bytes;
        firstDw = dw.bytes;
      } else {
        EXPECT_EQ(firstDx, dx.bytes) << "dx differs between two runs";
        EXPECT_EQ(firstDw, dw.bytes) << "dw differs between two runs";
      }
    }
  }
}

TEST_P(GpuRmsNorm, EmptyBatchGivesZeroWeightGradient) {
  RmsNormBackward a;
  a.cols = 1000;
  HostTensor dw(DType::BF16, 1000);
  auto bw = must(DeviceBuffer::allocate(2000));
  auto bdw = must(DeviceBuffer::allocate(2000));
  ASSERT_OK(bw.fill(0));
  ASSERT_OK(bdw.fill(0xFF));
  a.w = bw.ptr();
  a.dw = bdw.ptr();
  a.rows = 0;
  int64_t wsBytes = must(rmsNormBackwardWorkspace(cache, a, target));
  auto ws = must(DeviceBuffer::allocate(size_t(wsBytes)));
  a.workspace = ws.ptr();
  ASSERT_OK(rmsNormBackward(cache, a, nullptr, target));
  ASSERT_OK(bdw.download(dw.bytes.data(), 2000));
  for (size_t j = 0; j < 1000; ++j)
    ASSERT_EQ(dw.get(j), 0.0f) << j;
}

TEST_P(GpuRmsNorm, WrongSizesAreRejectedBeforeLaunch) {
  RmsNormForward a;
  a.cols = 4096;
  a.rows = 8;
  auto b = must(DeviceBuffer::allocate(8 * 4096 * 2));
  a.x = a.y = a.w = a.rstd = b.ptr();
  auto kernelOr = cache.get(rmsNormSpec(a, target));
  ASSERT_TRUE(bool(kernelOr)) << llvm::toString(kernelOr.takeError());
  const LoadedKernel &kernel = *kernelOr;
  // The weight compiled for 4096 columns, passed as 4095: refused, nothing runs.
  KernelArg args[] = {KernelArg::view(a.x, {8, 4096}), KernelArg::view(a.w, {4095}),
                      KernelArg::view(a.y, {8, 4096}), KernelArg::view(a.rstd, {8}),
                      KernelArg::f32(1e-5f)};
  auto err = kernel.launch(0, args, 5, nullptr);
  ASSERT_TRUE(bool(err));
  EXPECT_NE(llvm::toString(std::move(err)).find("compiled for 4096"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Backend, GpuRmsNorm,
                         ::testing::Values(Backend::Nvptx, Backend::Cuda),
                         [](const ::testing::TestParamInfo<Backend> &i) {
                           return std::string(backendName(i.param));
                         });

} // namespace
