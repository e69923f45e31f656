//===- AttentionGpuTest.cpp - attention forward on the GPU vs float64 ------===//
//
// Head dims 64, 128 and 256, bf16 and f16, causal or not, GQA and MQA, both
// layouts, ragged sequence lengths (1, and none a multiple of a tile),
// cross attention (sq != sk), a large scale (rows whose maximum moves from
// tile to tile) and configs other than the default: fresh random inputs each
// run (the seed is printed on failure; TILEJIT_TEST_SEED replays it), O and
// LSE poisoned with NaN first, compared element by element with a float64
// reference on the host (every row of small cases, sampled rows of large
// ones). Skips (and says why) where there is no GPU or it has no wgmma.
//
//===----------------------------------------------------------------------===//
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "compiler/Compiler.h"
#include "ops/attention/AttentionLaunch.h"
#include "runtime/CudaDriver.h"
#include "runtime/DeviceBuffer.h"
#include "tests/support/Compare.h"
#include "tests/support/Seed.h"

using namespace tilejit;
using tilejit::attention::Layout;
using tilejit::testing::allClose;
using tilejit::testing::HostTensor;

namespace {

struct Case {
  int64_t b, sq, sk, hq, hkv, d;
  bool causal = false;
  Layout layout = Layout::BSHD;
  DType dt = DType::BF16;
  float scale = 0.0f;
  const char *config = ""; // empty: the default
};

std::string name(const Case &c) {
  return "b" + std::to_string(c.b) + " sq" + std::to_string(c.sq) + " sk" + std::to_string(c.sk) +
         " h" + std::to_string(c.hq) + "/" + std::to_string(c.hkv) + " d" + std::to_string(c.d) +
         (c.causal ? " causal" : "") + (c.layout == Layout::BSHD ? " bshd " : " bhsd ") +
         std::string(dtypeName(c.dt)) + (c.scale ? " scale " + std::to_string(c.scale) : "") +
         (*c.config ? std::string(" [") + c.config + "]" : "");
}

class GpuAttention : public ::testing::Test {
protected:
  void SetUp() override {
    auto ctx = useDevice(0);
    if (!ctx)
      GTEST_SKIP() << "no GPU here: " << llvm::toString(ctx.takeError());
    auto info = queryDevice(0);
    ASSERT_TRUE(bool(info)) << llvm::toString(info.takeError());
    auto t = info->target();
    ASSERT_TRUE(bool(t)) << llvm::toString(t.takeError());
    if (!t->hasWgmma())
      GTEST_SKIP() << info->name << " (" << info->arch() << ") has no wgmma";
    target = *t;
  }

  /// Offset of element (batch, row, head, 0) of a [b, s, h, d] or
  /// [b, h, s, d] tensor.
  static size_t at(const Case &c, int64_t s, int64_t h, int64_t batch, int64_t row, int64_t head) {
    if (c.layout == Layout::BSHD)
      return size_t(((batch * s + row) * h + head) * c.d);
    return size_t(((batch * h + head) * s + row) * c.d);
  }

  void run(const Case &c) {
    SCOPED_TRACE(name(c));
    uint64_t seed = tilejit::testing::testSeed();
    SCOPED_TRACE(tilejit::testing::replayHint(seed));
    std::mt19937_64 rng(seed);
    attention::Call call;
    call.dt = c.dt;
    call.d = c.d;
    call.hq = c.hq;
    call.hkv = c.hkv;
    call.causal = c.causal;
    call.layout = c.layout;
    call.b = c.b;
    call.sq = c.sq;
    call.sk = c.sk;
    call.scale = c.scale;

    size_t nq = size_t(c.b * c.sq * c.hq * c.d), nk = size_t(c.b * c.sk * c.hkv * c.d);
    HostTensor q(c.dt, nq), k(c.dt, nk), v(c.dt, nk);
    q.randomNormal(rng, 0.0f, 1.0f);
    k.randomNormal(rng, 0.0f, 1.0f);
    v.randomNormal(rng, 0.0f, 1.0f);

    auto spec = attention::specOf(call, target);
    ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
    TileConfig config;
    if (*c.config) {
      auto parsed = TileConfig::parse(c.config);
      ASSERT_TRUE(bool(parsed)) << llvm::toString(parsed.takeError());
      config = *parsed;
    }
    auto compiled = compileKernel(*spec, config);
    ASSERT_TRUE(bool(compiled)) << llvm::toString(compiled.takeError());
    EXPECT_EQ(compiled->entries.front().spillBytes, 0) << compiled->log;
    auto kernel = LoadedKernel::load(*compiled);
    ASSERT_TRUE(bool(kernel)) << llvm::toString(kernel.takeError());

    size_t nlse = size_t(c.b * c.hq * c.sq);
    auto dq = DeviceBuffer::allocate(q.bytes.size()), dk = DeviceBuffer::allocate(k.bytes.size());
    auto dv = DeviceBuffer::allocate(v.bytes.size()), dO = DeviceBuffer::allocate(q.bytes.size());
    auto dl = DeviceBuffer::allocate(nlse * 4);
    ASSERT_TRUE(dq && dk && dv && dO && dl);
    ASSERT_FALSE(bool(dq->upload(q.bytes)));
    ASSERT_FALSE(bool(dk->upload(k.bytes)));
    ASSERT_FALSE(bool(dv->upload(v.bytes)));
    ASSERT_FALSE(bool(dO->fill(0xFF))); // NaN wherever the kernel does not write
    ASSERT_FALSE(bool(dl->fill(0xFF)));
    call.q = dq->ptr();
    call.k = dk->ptr();
    call.v = dv->ptr();
    call.o = dO->ptr();
    call.lse = dl->ptr();
    if (auto err = attention::launch(**kernel, call, nullptr))
      FAIL() << llvm::toString(std::move(err));
    auto drv = CudaDriver::get();
    ASSERT_TRUE(bool(drv));
    ASSERT_EQ(drv->cuCtxSynchronize(), CUDA_SUCCESS);
    HostTensor o(c.dt, nq), lse(DType::F32, nlse);
    ASSERT_FALSE(bool(dO->download(o.bytes)));
    ASSERT_FALSE(bool(dl->download(lse.bytes)));

    // Every (sequence, head, row) up to 2^26 products, else 64 random
    // rows and the last one of the last head.
    struct Row {
      int64_t batch, head, row;
    };
    std::vector<Row> rows;
    if (c.b * c.hq * c.sq * c.sk * c.d <= (int64_t(1) << 26)) {
      for (int64_t bi = 0; bi < c.b; ++bi)
        for (int64_t h = 0; h < c.hq; ++h)
          for (int64_t i = 0; i < c.sq; ++i)
            rows.push_back({bi, h, i});
    } else {
      std::uniform_int_distribution<int64_t> pb(0, c.b - 1), ph(0, c.hq - 1), pr(0, c.sq - 1);
      for (int i = 0; i < 64; ++i)
        rows.push_back({pb(rng), ph(rng), pr(rng)});
      rows.push_back({c.b - 1, c.hq - 1, c.sq - 1});
    }
    double scale = c.scale > 0 ? c.scale : 1.0 / std::sqrt(double(c.d));
    std::vector<double> refO, magO, refL;
    HostTensor gotO(c.dt, rows.size() * size_t(c.d)), gotL(DType::F32, rows.size());
    std::vector<double> s(size_t(c.sk));
    for (size_t r = 0; r < rows.size(); ++r) {
      const Row &w = rows[r];
      int64_t kvh = w.head / (c.hq / c.hkv);
      int64_t keys = c.causal ? std::min(c.sk, w.row + 1) : c.sk;
      size_t qo = at(c, c.sq, c.hq, w.batch, w.row, w.head);
      double mx = -INFINITY;
      for (int64_t j = 0; j < keys; ++j) {
        size_t ko = at(c, c.sk, c.hkv, w.batch, j, kvh);
        double dot = 0;
        for (int64_t x = 0; x < c.d; ++x)
          dot += double(q.get(qo + size_t(x))) * double(k.get(ko + size_t(x)));
        s[size_t(j)] = scale * dot;
        mx = std::max(mx, s[size_t(j)]);
      }
      double sum = 0;
      for (int64_t j = 0; j < keys; ++j)
        sum += (s[size_t(j)] = std::exp(s[size_t(j)] - mx));
      for (int64_t x = 0; x < c.d; ++x) {
        double acc = 0, mag = 0;
        for (int64_t j = 0; j < keys; ++j) {
          double t =
              s[size_t(j)] / sum * double(v.get(at(c, c.sk, c.hkv, w.batch, j, kvh) + size_t(x)));
          acc += t;
          mag += std::fabs(t);
        }
        refO.push_back(acc);
        magO.push_back(mag);
        gotO.set(r * size_t(c.d) + size_t(x), o.get(qo + size_t(x)));
      }
      refL.push_back(mx + std::log(sum));
      gotL.set(r, lse.get(size_t((w.batch * c.hq + w.head) * c.sq + w.row)));
    }
    // O: the output's rounding, plus P rounded to 16 bits before P V
    // (relative to the magnitudes of the terms).
    auto tol = tilejit::testing::tolerance(c.dt);
    tol.accum = c.dt == DType::BF16 ? 8e-3 : 1e-3;
    EXPECT_TRUE(allClose(gotO, refO, tol, size_t(c.d), magO)) << "O";
    // LSE: f32 throughout, with exp2 and log2 approximations.
    EXPECT_TRUE(allClose(gotL, refL, {2e-5, 2e-5}, 0)) << "LSE";
  }

  Target target;
};

TEST_F(GpuAttention, HeadDimsAgainstFloat64) {
  for (int64_t d : {64, 128, 256}) {
    run({1, 256, 256, 2, 2, d});
    run({2, 200, 200, 2, 1, d, true}); // ragged, causal, GQA
  }
}

TEST_F(GpuAttention, CausalAndRaggedLengths) {
  for (int64_t s : {1, 63, 64, 65, 127, 129, 383, 1000})
    run({1, s, s, 2, 2, 128, true});
  run({1, 1000, 1000, 1, 1, 64, false});
  run({3, 77, 77, 4, 2, 128, true});
}

TEST_F(GpuAttention, CrossAttention) {
  run({2, 64, 300, 2, 2, 128});        // fewer queries than keys
  run({1, 300, 17, 2, 1, 64});         // keys below one tile
  run({1, 130, 1, 1, 1, 128});         // one key
  run({1, 250, 100, 2, 2, 128, true}); // causal with sq > sk: rows past sk see every key
}

TEST_F(GpuAttention, GqaMqaAndLayouts) {
  for (Layout l : {Layout::BSHD, Layout::BHSD}) {
    run({2, 333, 333, 8, 1, 128, true, l}); // MQA
    run({2, 333, 333, 8, 2, 64, false, l});
    run({1, 4096, 4096, 4, 4, 128, true, l}); // sampled rows
  }
}

TEST_F(GpuAttention, TypesScalesAndConfigs) {
  run({1, 300, 300, 2, 2, 128, true, Layout::BSHD, DType::F16});
  run({1, 300, 300, 2, 2, 64, false, Layout::BHSD, DType::F16});
  // Scores with a spread of +-30: each row's maximum moves from tile to tile.
  run({1, 500, 500, 2, 2, 64, true, Layout::BSHD, DType::BF16, 1.0f});
  run({1, 500, 500, 2, 2, 128, true, Layout::BSHD, DType::BF16, 0.0f,
       "bm=64 bn=64 consumers=1 stages=3"});
  run({1, 500, 500, 2, 2, 128, false, Layout::BSHD, DType::BF16, 0.0f,
       "bm=128 bn=176 consumers=2 stages=1"});
  run({1, 700, 700, 2, 2, 64, true, Layout::BSHD, DType::BF16, 0.0f,
       "bm=128 bn=192 consumers=2 stages=2"});
  // The next tile's Q K^T started before the softmax of this one.
  run({2, 333, 333, 2, 1, 64, true, Layout::BSHD, DType::BF16, 0.0f,
       "bm=64 bn=64 consumers=1 overlap=1 stages=2"});
  run({1, 700, 700, 2, 2, 64, false, Layout::BHSD, DType::BF16, 0.0f,
       "bm=128 bn=96 consumers=2 overlap=1 stages=3"});
  run({1, 129, 129, 2, 2, 128, true, Layout::BSHD, DType::F16, 0.0f,
       "bm=128 bn=64 consumers=2 overlap=1 stages=1"});
}

} // namespace
