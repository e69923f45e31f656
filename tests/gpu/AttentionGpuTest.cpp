//===- AttentionGpuTest.cpp - attention on the GPU vs float64 ---------------===//
//
// Forward: head dims 64, 128 and 256, bf16 and f16, causal or not, GQA and
// MQA, both layouts, ragged sequence lengths (1, and none a multiple of a
// tile), cross attention (sq != sk), a large scale (rows whose maximum moves
// from tile to tile) and configs other than the default: fresh random inputs
// each run (the seed is printed on failure; TILEJIT_TEST_SEED replays it), O
// and LSE poisoned with NaN first, compared element by element with a
// float64 reference on the host (every row of small cases, sampled rows of
// large ones).
//
// Backward: dQ, dK and dV from the forward's O and LSE and a random dO, the
// gradients and the workspace poisoned first, every element compared with
// float64 gradients computed from Q, K, V and dO alone; run twice, bitwise
// equal. Skips (and says why) where there is no GPU or it has no wgmma.
//
//===----------------------------------------------------------------------===//
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <regex>

#include "autotune/Harness.h"
#include "autotune/Tuner.h"
#include "compiler/Compiler.h"
#include "compiler/templates/Template.h"
#include "ops/attention/AttentionLaunch.h"
#include "ops/attention/AttentionReference.h"
#include "runtime/CudaDriver.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Store.h"
#include "service/Engine.h"
#include "tests/support/Compare.h"
#include "tests/support/GpuTarget.h"
#include "tests/support/Seed.h"
#include "tests/support/SpillRule.h"
#include "tests/support/TempDir.h"

using namespace tilejit;
using tilejit::attention::Layout;
using tilejit::testing::allClose;
using tilejit::testing::HostTensor;
using tilejit::testing::TempDir;

namespace {

struct Case {
  int64_t b, sq, sk, hq, hkv, d;
  bool causal = false;
  Layout layout = Layout::BSHD;
  DType dt = DType::BF16;
  float scale = 0.0f;
  const char *config = ""; // empty: the default
  int64_t programs = 0;    // a persistent grid's cap (0: the multiprocessors)
  // THD: each sequence's query and key rows (b of each; sq and sk the
  // longest, or more).
  std::vector<int64_t> lensQ = {}, lensK = {};
  // The backward's split of each KV head's query heads over the dK/dV
  // kernel's programs (0: backwardHeadSplit's choice).
  int64_t headSplit = 0;
  // A fused config for a deterministic call (its dQ added in order);
  // otherwise a fused config's call allows any order.
  bool ordered = false;
};

/// `c` with its fused config run for a deterministic call.
Case inOrder(Case c) {
  c.ordered = true;
  return c;
}

/// Where each sequence's rows start, and the rows in all (THD).
std::vector<int64_t> startsOf(const std::vector<int64_t> &lens) {
  std::vector<int64_t> starts = {0};
  for (int64_t n : lens)
    starts.push_back(starts.back() + n);
  return starts;
}

std::string name(const Case &c) {
  return "b" + std::to_string(c.b) + " sq" + std::to_string(c.sq) + " sk" + std::to_string(c.sk) +
         " h" + std::to_string(c.hq) + "/" + std::to_string(c.hkv) + " d" + std::to_string(c.d) +
         (c.causal ? " causal" : "") +
         (c.layout == Layout::BSHD   ? " bshd "
          : c.layout == Layout::BHSD ? " bhsd "
                                     : " thd ") +
         std::string(dtypeName(c.dt)) + (c.scale ? " scale " + std::to_string(c.scale) : "") +
         (*c.config ? std::string(" [") + c.config + "]" : "") +
         (c.programs ? " programs " + std::to_string(c.programs) : "") +
         (c.lensQ.empty() ? "" : " packed") +
         (c.headSplit ? " split " + std::to_string(c.headSplit) : "");
}

class GpuAttention : public ::testing::Test {
protected:
  void SetUp() override {
    tilejit::testing::Gpu gpu = tilejit::testing::currentGpu();
    if (!gpu.why.empty())
      GTEST_SKIP() << gpu.why;
    if (!gpu.target.hasWgmma())
      GTEST_SKIP() << "the GPU (" << gpu.target.archName() << ") has no wgmma";
    target = gpu.target;
  }

  /// Offset of element (batch, row, head, 0) of a [b, s, h, d] or
  /// [b, h, s, d] tensor, or (`starts`: THD) of row starts[batch] + row of a
  /// [tokens, h, d] one.
  static size_t at(const Case &c, int64_t s, int64_t h, int64_t batch, int64_t row, int64_t head,
                   const std::vector<int64_t> &starts = {}) {
    if (!starts.empty())
      return size_t(((starts[size_t(batch)] + row) * h + head) * c.d);
    if (c.layout == Layout::BSHD)
      return size_t(((batch * s + row) * h + head) * c.d);
    return size_t(((batch * h + head) * s + row) * c.d);
  }

  /// A kernel compiled and loaded once per (spec, config) for the whole
  /// test program: cases that differ only in their sizes share it. (Never
  /// freed: modules outlive the tests, not the driver.)
  struct Built {
    CompiledKernel compiled;
    std::unique_ptr<LoadedKernel> loaded;
  };
  static llvm::Expected<Built &> build(const KernelSpec &spec, TileConfig config) {
    static auto *built = new std::map<std::string, std::unique_ptr<Built>>();
    // (An empty config is the default for the spec's sizes, which the key
    // leaves out: resolved first.)
    if (config.values.empty())
      config = getTemplate(spec).defaultConfig(spec);
    std::string key = kernelKey(spec, config);
    auto it = built->find(key);
    if (it != built->end())
      return *it->second;
    auto compiled = compileKernel(spec, config);
    if (!compiled)
      return compiled.takeError();
    auto loaded = LoadedKernel::load(*compiled);
    if (!loaded)
      return loaded.takeError();
    auto entry = std::make_unique<Built>(Built{std::move(*compiled), std::move(*loaded)});
    return *built->emplace(key, std::move(entry)).first->second;
  }
  static llvm::Expected<const LoadedKernel &> loadBuilt(const KernelSpec &spec,
                                                        const TileConfig &config) {
    auto b = build(spec, config);
    if (!b)
      return b.takeError();
    return *b->loaded;
  }
  /// The forward's and the backward's default configs for case `c` pass
  /// the tuner's check (expectTheTunersCheckPasses).
  void expectTheDefaultsPassTheTunersCheck(const Case &c);
  /// The persistent configs over programs that walk several tiles each,
  /// `take` added to every config (" take=1", or "").
  void runPersistentGrids(const std::string &take);

  /// Packed sequences: the offsets of Q's and K's rows into device buffers
  /// (kept in cuQ and cuK), named in `call`.
  static void uploadOffsets(const std::vector<int64_t> &startsQ,
                            const std::vector<int64_t> &startsK, attention::Call &call,
                            std::optional<DeviceBuffer> &cuQ, std::optional<DeviceBuffer> &cuK) {
    for (auto [buf, starts, at] : {std::tuple{&cuQ, &startsQ, &call.cuSeqlensQ},
                                   std::tuple{&cuK, &startsK, &call.cuSeqlensK}}) {
      std::vector<int32_t> words(starts->begin(), starts->end());
      auto b = DeviceBuffer::allocate(words.size() * 4);
      ASSERT_TRUE(bool(b)) << llvm::toString(b.takeError());
      ASSERT_FALSE(bool(b->upload(words)));
      *at = b->ptr();
      buf->emplace(std::move(*b));
    }
  }

  /// The call `c` describes, no buffers yet.
  static attention::Call callOf(const Case &c) {
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
    call.maxPrograms = c.programs;
    call.headSplit = c.headSplit;
    if (!c.lensQ.empty()) {
      call.totalQ = startsOf(c.lensQ).back();
      call.totalK = startsOf(c.lensK).back();
    }
    return call;
  }

  void run(const Case &c) {
    SCOPED_TRACE(name(c));
    uint64_t seed = tilejit::testing::testSeed();
    SCOPED_TRACE(tilejit::testing::replayHint(seed));
    std::mt19937_64 rng(seed);
    attention::Call call = callOf(c);
    bool packed = !c.lensQ.empty();
    ASSERT_EQ(packed, c.layout == Layout::THD);
    std::vector<int64_t> startsQ, startsK;
    if (packed) {
      ASSERT_EQ(int64_t(c.lensQ.size()), c.b);
      ASSERT_EQ(int64_t(c.lensK.size()), c.b);
      startsQ = startsOf(c.lensQ);
      startsK = startsOf(c.lensK);
    }
    // Rows of sequence `batch`.
    auto rowsQ = [&](int64_t batch) { return packed ? c.lensQ[size_t(batch)] : c.sq; };
    auto rowsK = [&](int64_t batch) { return packed ? c.lensK[size_t(batch)] : c.sk; };

    size_t nq = size_t((packed ? call.totalQ : c.b * c.sq) * c.hq * c.d),
           nk = size_t((packed ? call.totalK : c.b * c.sk) * c.hkv * c.d);
    HostTensor q(c.dt, nq), k(c.dt, nk), v(c.dt, nk);
    q.randomNormal(rng, 0.0f, 1.0f);
    k.randomNormal(rng, 0.0f, 1.0f);
    v.randomNormal(rng, 0.0f, 1.0f);

    auto spec = attention::specOf(call, target);
    ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
    auto config = TileConfig::parse(c.config); // empty: the default
    ASSERT_TRUE(bool(config)) << llvm::toString(config.takeError());
    auto kernel = build(*spec, *config);
    ASSERT_TRUE(bool(kernel)) << llvm::toString(kernel.takeError());
    EXPECT_EQ(kernel->compiled.entries.front().spillBytes, 0) << kernel->compiled.log;

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
    std::optional<DeviceBuffer> cuQ, cuK;
    if (packed) {
      ASSERT_NO_FATAL_FAILURE(uploadOffsets(startsQ, startsK, call, cuQ, cuK));
    }
    if (auto err = attention::launch(*kernel->loaded, call, target.smCount(), nullptr))
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
    if (packed || c.b * c.hq * c.sq * c.sk * c.d <= (int64_t(1) << 26)) {
      for (int64_t bi = 0; bi < c.b; ++bi)
        for (int64_t h = 0; h < c.hq; ++h)
          for (int64_t i = 0; i < rowsQ(bi); ++i)
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
      int64_t kvh = w.head / (c.hq / c.hkv), sk = rowsK(w.batch);
      int64_t keys = c.causal ? std::min(sk, w.row + 1) : sk;
      size_t qo = at(c, c.sq, c.hq, w.batch, w.row, w.head, startsQ);
      double mx = -INFINITY;
      for (int64_t j = 0; j < keys; ++j) {
        size_t ko = at(c, c.sk, c.hkv, w.batch, j, kvh, startsK);
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
          double t = s[size_t(j)] / sum *
                     double(v.get(at(c, c.sk, c.hkv, w.batch, j, kvh, startsK) + size_t(x)));
          acc += t;
          mag += std::fabs(t);
        }
        refO.push_back(acc);
        magO.push_back(mag);
        gotO.set(r * size_t(c.d) + size_t(x), o.get(qo + size_t(x)));
      }
      // No keys (a packed sequence's): O = 0 (the sums above are empty), LSE = -inf.
      refL.push_back(keys ? mx + std::log(sum) : -INFINITY);
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

  /// Float64 gradients and the magnitudes of their terms, [b, h, s, d].
  struct Grads {
    std::vector<double> dq, dk, dv, mq, mk, mv;
  };
  /// The float64 gradients of case `c`: P, dP and dS from Q, K, V and dO,
  /// into dQ, dK and dV (dK and dV summed over the query heads of a KV
  /// head). Two passes, each spread over the cores: each query row's
  /// softmax (its LSE, D and the magnitude of D's terms) and dQ; then each
  /// key row's dK and dV from those. No two tasks write the same element.
  /// (Packed sequences: `starts` of Q's and K's rows; the gradients still
  /// [b, h, s, d], rows past a sequence's length left 0.)
  void reference(const Case &c, const HostTensor &q, const HostTensor &k, const HostTensor &v,
                 const HostTensor &dout, Grads &g, const std::vector<int64_t> &startsQ = {},
                 const std::vector<int64_t> &startsK = {}) {
    const int64_t d = c.d, group = c.hq / c.hkv, block = 64;
    const double scale = c.scale > 0 ? c.scale : 1.0 / std::sqrt(double(d));
    auto rowsQ = [&](int64_t b) { return c.lensQ.empty() ? c.sq : c.lensQ[size_t(b)]; };
    auto rowsK = [&](int64_t b) { return c.lensK.empty() ? c.sk : c.lensK[size_t(b)]; };
    // The inputs as float64, [b, h, s, d] (rows past a sequence's end 0).
    auto widen = [&](const HostTensor &t, int64_t s, int64_t heads, bool isQ) {
      std::vector<double> out(size_t(c.b * heads * s * d), 0.0);
      for (int64_t b = 0; b < c.b; ++b)
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t r = 0; r < (isQ ? rowsQ(b) : rowsK(b)); ++r) {
            size_t from = at(c, s, heads, b, r, h, isQ ? startsQ : startsK);
            size_t to = size_t(((b * heads + h) * s + r) * d);
            for (int64_t x = 0; x < d; ++x)
              out[to + size_t(x)] = t.get(from + size_t(x));
          }
      return out;
    };
    const std::vector<double> Q = widen(q, c.sq, c.hq, true), dO = widen(dout, c.sq, c.hq, true),
                              K = widen(k, c.sk, c.hkv, false), V = widen(v, c.sk, c.hkv, false);
    auto rowQ = [&](const std::vector<double> &t, int64_t b, int64_t h, int64_t i) {
      return &t[size_t(((b * c.hq + h) * c.sq + i) * d)];
    };
    auto rowK = [&](const std::vector<double> &t, int64_t b, int64_t h, int64_t j) {
      return &t[size_t(((b * c.hkv + h) * c.sk + j) * d)];
    };
    auto dot = [&](const double *a, const double *b) {
      double r = 0;
      for (int64_t x = 0; x < d; ++x)
        r += a[x] * b[x];
      return r;
    };
    // Keys query row i of sequence b sees.
    auto keysOf = [&](int64_t b, int64_t i) {
      return c.causal ? std::min(rowsK(b), i + 1) : rowsK(b);
    };
    size_t rq = size_t(c.b * c.hq * c.sq * d), rk = size_t(c.b * c.hkv * c.sk * d);
    for (auto *vec : {&g.dq, &g.mq})
      vec->assign(rq, 0.0);
    for (auto *vec : {&g.dk, &g.dv, &g.mk, &g.mv})
      vec->assign(rk, 0.0);
    // Per query row: LSE, D = rowsum(dO * O) and the magnitude of D's terms.
    std::vector<double> lse(size_t(c.b * c.hq * c.sq)), dsum(lse.size()), dmag(lse.size());
    int64_t qBlocks = (c.sq + block - 1) / block, kBlocks = (c.sk + block - 1) / block;
    // (Tasks of 64 rows, one at a time: parallelBlocks' begin is the task.)
    parallelBlocks(size_t(c.b * c.hq * qBlocks), 1, [&](size_t task, size_t) {
      int64_t b = int64_t(task) / (c.hq * qBlocks), h = int64_t(task) / qBlocks % c.hq;
      int64_t kvh = h / group, first = int64_t(task) % qBlocks * block;
      std::vector<double> p(size_t(c.sk)), dp(size_t(c.sk)), o(size_t(d), 0.0);
      for (int64_t i = first; i < std::min(rowsQ(b), first + block); ++i) {
        const double *qi = rowQ(Q, b, h, i), *doi = rowQ(dO, b, h, i);
        int64_t keys = keysOf(b, i);
        double mx = -INFINITY, sum = 0, ds = 0, e = 0;
        for (int64_t j = 0; j < keys; ++j)
          mx = std::max(mx, p[size_t(j)] = scale * dot(qi, rowK(K, b, kvh, j)));
        for (int64_t j = 0; j < keys; ++j)
          sum += (p[size_t(j)] = std::exp(p[size_t(j)] - mx));
        std::fill(o.begin(), o.end(), 0.0);
        for (int64_t j = 0; j < keys; ++j) {
          const double *vj = rowK(V, b, kvh, j);
          p[size_t(j)] /= sum;
          dp[size_t(j)] = dot(doi, vj);
          ds += p[size_t(j)] * dp[size_t(j)];
          for (int64_t x = 0; x < d; ++x)
            o[size_t(x)] += p[size_t(j)] * vj[x];
        }
        for (int64_t x = 0; x < d; ++x)
          e += std::fabs(doi[x] * o[size_t(x)]);
        size_t r = size_t((b * c.hq + h) * c.sq + i);
        lse[r] = mx + std::log(sum);
        dsum[r] = ds;
        dmag[r] = e;
        double *gq = &g.dq[r * size_t(d)], *mq = &g.mq[r * size_t(d)];
        for (int64_t j = 0; j < keys; ++j) {
          const double *kj = rowK(K, b, kvh, j);
          double pj = p[size_t(j)], s = pj * (dp[size_t(j)] - ds);
          // dS's terms: its rounding to 16 bits, and D's (from O in 16 bits).
          double as = pj * (std::fabs(dp[size_t(j)]) + e);
          for (int64_t x = 0; x < d; ++x) {
            gq[x] += scale * s * kj[x];
            mq[x] += scale * as * std::fabs(kj[x]);
          }
        }
      }
    });
    parallelBlocks(size_t(c.b * c.hkv * kBlocks), 1, [&](size_t task, size_t) {
      int64_t b = int64_t(task) / (c.hkv * kBlocks), kvh = int64_t(task) / kBlocks % c.hkv;
      int64_t first = int64_t(task) % kBlocks * block;
      for (int64_t j = first; j < std::min(rowsK(b), first + block); ++j) {
        const double *kj = rowK(K, b, kvh, j), *vj = rowK(V, b, kvh, j);
        size_t ko = size_t(((b * c.hkv + kvh) * c.sk + j) * d);
        double *gk = &g.dk[ko], *gv = &g.dv[ko], *mk = &g.mk[ko], *mv = &g.mv[ko];
        for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h)
          for (int64_t i = 0; i < rowsQ(b); ++i) {
            if (j >= keysOf(b, i))
              continue;
            const double *qi = rowQ(Q, b, h, i), *doi = rowQ(dO, b, h, i);
            size_t r = size_t((b * c.hq + h) * c.sq + i);
            double pj = std::exp(scale * dot(qi, kj) - lse[r]), dp = dot(doi, vj);
            double s = pj * (dp - dsum[r]), as = pj * (std::fabs(dp) + dmag[r]);
            for (int64_t x = 0; x < d; ++x) {
              gk[x] += scale * s * qi[x];
              mk[x] += scale * as * std::fabs(qi[x]);
              gv[x] += pj * doi[x];
              mv[x] += pj * std::fabs(doi[x]);
            }
          }
      }
    });
  }

  /// Head dim 256's backward under `config`: ragged, causal, both layouts,
  /// f16, GQA and MQA (`mqaBatch` sequences: the query heads split over
  /// programs, whose parts' sum adds 128 columns at a time), keys no query
  /// sees (zero dK and dV).
  void runHeadDim256(const char *config, int64_t mqaBatch) {
    runBackward({1, 256, 256, 2, 2, 256, false, Layout::BSHD, DType::BF16, 0.0f, config});
    runBackward({2, 200, 200, 4, 1, 256, true, Layout::BSHD, DType::BF16, 0.0f, config});
    runBackward({1, 300, 300, 4, 2, 256, false, Layout::BHSD, DType::BF16, 0.0f, config});
    runBackward({1, 129, 129, 2, 2, 256, true, Layout::BSHD, DType::F16, 0.0f, config});
    runBackward({mqaBatch, 128, 128, 4, 1, 256, true, Layout::BSHD, DType::BF16, 0.0f, config});
    runBackward({1, 100, 250, 2, 2, 256, true, Layout::BSHD, DType::BF16, 0.0f, config});
  }

  void runBackward(const Case &c) {
    SCOPED_TRACE("backward " + name(c));
    uint64_t seed = tilejit::testing::testSeed();
    SCOPED_TRACE(tilejit::testing::replayHint(seed));
    std::mt19937_64 rng(seed);
    attention::BackwardCall call;
    static_cast<attention::Call &>(call) = callOf(c);
    bool packed = !c.lensQ.empty();
    std::vector<int64_t> startsQ, startsK;
    if (packed) {
      startsQ = startsOf(c.lensQ);
      startsK = startsOf(c.lensK);
    }
    size_t nq = size_t((packed ? call.totalQ : c.b * c.sq) * c.hq * c.d),
           nk = size_t((packed ? call.totalK : c.b * c.sk) * c.hkv * c.d);
    HostTensor q(c.dt, nq), k(c.dt, nk), v(c.dt, nk), dout(c.dt, nq);
    q.randomNormal(rng, 0.0f, 1.0f);
    k.randomNormal(rng, 0.0f, 1.0f);
    v.randomNormal(rng, 0.0f, 1.0f);
    dout.randomNormal(rng, 0.0f, 1.0f);

    auto config = TileConfig::parse(c.config); // empty: the default
    ASSERT_TRUE(bool(config)) << llvm::toString(config.takeError());
    // A fused config adds dQ's parts in any order where its spec allows
    // that, in a fixed one where the case asks for deterministic results.
    bool fused = config->has("fused") && config->get("fused") != 0;
    call.deterministic = !fused || c.ordered;
    auto fspec = attention::specOf(call, target);
    ASSERT_TRUE(bool(fspec)) << llvm::toString(fspec.takeError());
    // (A persistent config's grid is capped at the target's multiprocessors:
    // `programs`, where given, stands for them, so that each program takes
    // several tiles; the second run below caps it at launch too.)
    Target bwdTarget = target;
    if (c.programs)
      bwdTarget.setSMs(int(c.programs));
    auto bspec = attention::backwardSpecOf(call, bwdTarget);
    ASSERT_TRUE(bool(bspec)) << llvm::toString(bspec.takeError());
    auto fwd = build(*fspec, {});
    ASSERT_TRUE(bool(fwd)) << llvm::toString(fwd.takeError());
    auto bwd = build(*bspec, *config);
    ASSERT_TRUE(bool(bwd)) << llvm::toString(bwd.takeError());
    for (const EntryInfo &e : bwd->compiled.entries)
      EXPECT_LE(e.spillBytes, tilejit::testing::allowedSpillBytes(*bspec, e)) << e.name << "\n"
                                                                              << bwd->compiled.log;
    const LoadedKernel &fk = *fwd->loaded, &bk = *bwd->loaded;

    size_t nlse = size_t(c.b * c.hq * c.sq);
    size_t wsBytes = size_t(attention::backwardWorkspaceBytes(call, attention::fusedBackward(bk)));
    std::vector<DeviceBuffer> bufs;
    for (size_t bytes : {q.bytes.size(), k.bytes.size(), v.bytes.size(), q.bytes.size(), nlse * 4,
                         q.bytes.size(), q.bytes.size(), k.bytes.size(), k.bytes.size(), wsBytes}) {
      auto buf = DeviceBuffer::allocate(bytes);
      ASSERT_TRUE(bool(buf)) << llvm::toString(buf.takeError());
      bufs.push_back(std::move(*buf));
    }
    ASSERT_FALSE(bool(bufs[0].upload(q.bytes)));
    ASSERT_FALSE(bool(bufs[1].upload(k.bytes)));
    ASSERT_FALSE(bool(bufs[2].upload(v.bytes)));
    ASSERT_FALSE(bool(bufs[5].upload(dout.bytes)));
    call.q = bufs[0].ptr();
    call.k = bufs[1].ptr();
    call.v = bufs[2].ptr();
    call.o = bufs[3].ptr();
    call.lse = bufs[4].ptr();
    call.dO = bufs[5].ptr();
    call.dQ = bufs[6].ptr();
    call.dK = bufs[7].ptr();
    call.dV = bufs[8].ptr();
    call.workspace = bufs[9].ptr();
    std::optional<DeviceBuffer> cuQ, cuK;
    if (packed) {
      ASSERT_NO_FATAL_FAILURE(uploadOffsets(startsQ, startsK, call, cuQ, cuK));
    }
    if (auto err = attention::launch(fk, call, target.smCount(), nullptr))
      FAIL() << llvm::toString(std::move(err));
    auto drv = CudaDriver::get();
    ASSERT_TRUE(bool(drv));
    // Twice, each time into poisoned gradients and workspace: bitwise equal
    // (but dQ with a fused config for a nondeterministic call, whose sums
    // are added in any order), and each against float64 below. A fused
    // config's second run is told the workspace holds only what the C
    // interface sizes (LSE, D, the parts): its dQ sums (and flags) then come
    // from tilejit's pool. The second run's call also allows fewer
    // programs than the spec's multiprocessors (a persistent grid's cap at
    // launch, as an engine's sm margin sets it; other kernels ignore it):
    // dK and dV, each tile's from one program in the same steps, stay
    // bitwise equal. A fused config runs a third time with its kernels
    // launched one at a time (the workspace's kernel, then the rest), the
    // words after dQ's sums (the flags and the counter, which the
    // workspace's kernel zeroes) poisoned again in between: the second
    // launch zeroes them itself where its kernel counts from them (ordered:
    // the flags; take: the counter), and its dK and dV (and an ordered dQ)
    // are the first run's; every run's dQ is checked against float64 below.
    HostTensor gq[3] = {HostTensor(c.dt, nq), HostTensor(c.dt, nq), HostTensor(c.dt, nq)};
    HostTensor gk[3] = {HostTensor(c.dt, nk), HostTensor(c.dt, nk), HostTensor(c.dt, nk)};
    HostTensor gv[3] = {HostTensor(c.dt, nk), HostTensor(c.dt, nk), HostTensor(c.dt, nk)};
    // The fused dK/dV grid: a program a tile (64 keys a consumer, for each
    // sequence's KV heads and part of the split), persistent at most the
    // target's multiprocessors and the call's cap.
    bool persistent = config->has("persist") && config->get("persist") != 0;
    int64_t split =
        c.headSplit > 0 ? c.headSplit : attention::backwardHeadSplit(c.b, c.hq, c.hkv, c.sk);
    int64_t keys = 64 * (config->has("consumers") ? config->get("consumers") : 1);
    int64_t tiles = (c.sk + keys - 1) / keys * c.b * c.hkv * split;
    // (The words after dQ's sums, at the workspace's end: where ordered,
    // kFlagsPerTile flags a query tile of kFusedQueryRows rows of each
    // head, then the counter's 16 bytes.)
    int64_t queryTiles = (c.sq + attention::kFusedQueryRows - 1) / attention::kFusedQueryRows;
    size_t tailBytes =
        size_t(call.deterministic ? c.b * c.hq * queryTiles * attention::kFlagsPerTile * 4 : 0) +
        16;
    for (int run = 0; run < (fused ? 3 : 2); ++run) {
      call.workspaceSize =
          run == 1 && fused ? attention::backwardWorkspaceBytes(call) : int64_t(wsBytes);
      call.maxPrograms = run == 1 ? (c.programs > 2 ? c.programs - 2 : 100) : 0;
      for (int i : {6, 7, 8, 9})
        ASSERT_FALSE(bool(bufs[size_t(i)].fill(0xFF)));
      std::array<int64_t, 3> grid = {0, 0, 0};
      call.dkvGrid = fused ? &grid : nullptr;
      if (run == 2) {
        call.only = 0;
        if (auto err = attention::launchBackward(bk, call, nullptr))
          FAIL() << llvm::toString(std::move(err));
        ASSERT_EQ(drv->cuCtxSynchronize(), CUDA_SUCCESS);
        ASSERT_GE(wsBytes, tailBytes);
        std::vector<uint8_t> poison(tailBytes, 0xFF);
        ASSERT_EQ(drv->cuMemcpyHtoD_v2(CUdeviceptr(call.workspace + (wsBytes - tailBytes)),
                                       poison.data(), tailBytes),
                  CUDA_SUCCESS);
      }
      call.only = run == 2 ? 1 : -1;
      if (auto err = attention::launchBackward(bk, call, nullptr))
        FAIL() << llvm::toString(std::move(err));
      if (fused) {
        int64_t cap = call.maxPrograms > 0 ? call.maxPrograms : INT32_MAX;
        EXPECT_EQ(grid[0],
                  persistent ? std::min({tiles, int64_t(bwdTarget.smCount()), cap}) : tiles)
            << "run " << run;
      }
      ASSERT_EQ(drv->cuCtxSynchronize(), CUDA_SUCCESS);
      ASSERT_FALSE(bool(bufs[6].download(gq[run].bytes)));
      ASSERT_FALSE(bool(bufs[7].download(gk[run].bytes)));
      ASSERT_FALSE(bool(bufs[8].download(gv[run].bytes)));
      // Told the workspace is smaller, a fused launch writes nothing past
      // it (its sums, flags and counter are in the pool's memory): the
      // poison there stays.
      if (run == 1 && fused) {
        std::vector<uint8_t> ws(wsBytes);
        ASSERT_FALSE(bool(bufs[9].download(ws)));
        size_t told = size_t(call.workspaceSize);
        EXPECT_EQ(std::count(ws.begin() + std::ptrdiff_t(told), ws.end(), uint8_t(0xFF)),
                  std::ptrdiff_t(ws.size() - told))
            << "a fused launch wrote past the workspace it was given";
      }
    }
    for (int run = 1; run < (fused ? 3 : 2); ++run) {
      if (call.deterministic) {
        EXPECT_EQ(gq[0].bytes, gq[run].bytes) << "dQ differs between runs 0 and " << run;
      }
      EXPECT_EQ(gk[0].bytes, gk[run].bytes) << "dK differs between runs 0 and " << run;
      EXPECT_EQ(gv[0].bytes, gv[run].bytes) << "dV differs between runs 0 and " << run;
    }

    // The reference, in [b, h, s, d] order (packed: s the longest, rows
    // past a sequence's end 0 in both).
    Grads g;
    reference(c, q, k, v, dout, g, startsQ, startsK);
    auto reorder = [&](const HostTensor &t, int64_t s, int64_t h, const std::vector<int64_t> &lens,
                       const std::vector<int64_t> &starts) {
      HostTensor out(c.dt, size_t(c.b * h * s * c.d));
      for (size_t i = 0; i < out.count; ++i)
        out.set(i, 0.0f);
      for (int64_t bi = 0; bi < c.b; ++bi)
        for (int64_t hh = 0; hh < h; ++hh)
          for (int64_t r = 0; r < (lens.empty() ? s : lens[size_t(bi)]); ++r)
            for (int64_t x = 0; x < c.d; ++x)
              out.set(size_t(((bi * h + hh) * s + r) * c.d + x),
                      t.get(at(c, s, h, bi, r, hh, starts) + size_t(x)));
      return out;
    };
    if (packed) {
      // Every row of a packed gradient is some sequence's: all were written
      // (nothing NaN from the poison).
      for (const HostTensor *t : {&gq[0], &gk[0], &gv[0]})
        for (size_t i = 0; i < t->count; ++i)
          ASSERT_TRUE(std::isfinite(t->get(i))) << "element " << i << " not written";
    }
    auto tol = tilejit::testing::tolerance(c.dt);
    tol.accum = c.dt == DType::BF16 ? 8e-3 : 1e-3;
    for (int run = 0; run < (fused ? 3 : 1); ++run)
      EXPECT_TRUE(
          allClose(reorder(gq[run], c.sq, c.hq, c.lensQ, startsQ), g.dq, tol, size_t(c.d), g.mq))
          << "dQ of run " << run;
    EXPECT_TRUE(
        allClose(reorder(gk[0], c.sk, c.hkv, c.lensK, startsK), g.dk, tol, size_t(c.d), g.mk))
        << "dK";
    EXPECT_TRUE(
        allClose(reorder(gv[0], c.sk, c.hkv, c.lensK, startsK), g.dv, tol, size_t(c.d), g.mv))
        << "dV";
  }

  /// The persistent backward's cases with `cfg` at head dim `d`, and the
  /// causal ones of its lpt order.
  void runPersistentCases(int64_t d, const std::string &cfg);
  void runLptCases(int64_t d, const std::string &cfg);

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
  // The two consumers taking turns: one tile, a few, many (with the ring
  // turning over), causal or not, a ragged end.
  for (int64_t s : {64, 333, 2500})
    for (bool causal : {true, false})
      run({1, s, s, 4, 2, 128, causal, Layout::BSHD, DType::BF16, 0.0f,
           "bm=128 bn=128 consumers=2 overlap=1 pingpong=1 raster=1 stages=2"});
  run({2, 700, 700, 2, 1, 64, true, Layout::BHSD, DType::BF16, 0.0f,
       "bm=128 bn=96 consumers=2 overlap=1 pingpong=1 stages=3"});
}

void GpuAttention::runPersistentGrids(const std::string &take) {
  const char *configs[] = {
      "bm=128 bn=128 consumers=2 overlap=1 persistent=1 pingpong=1 raster=1 stages=2",
      "bm=128 bn=128 consumers=2 overlap=1 persistent=1 raster=0 stages=2",
      "bm=128 bn=128 consumers=2 persistent=1 stages=2",
      "bm=64 bn=64 consumers=1 overlap=1 persistent=1 stages=2",
  };
  for (const char *c : configs) {
    std::string cfg = c + take;
    for (int64_t programs : {1, 3, 0})
      run({2, 333, 333, 2, 1, 128, true, Layout::BSHD, DType::BF16, 0.0f, cfg.c_str(), programs});
    run({1, 1000, 1000, 4, 4, 128, false, Layout::BHSD, DType::BF16, 0.0f, cfg.c_str(), 7});
    run({1, 64, 64, 1, 1, 128, true, Layout::BSHD, DType::BF16, 0.0f, cfg.c_str(), 1}); // one tile
  }
  std::string d64 = "bm=128 bn=128 consumers=2 overlap=1 persistent=1 pingpong=1 stages=2" + take;
  run({2, 700, 700, 2, 1, 64, true, Layout::BSHD, DType::BF16, 0.0f, d64.c_str(), 5});
  // Head dim 256: one Q stage (two do not fit beside the rings).
  std::string d256 = "bm=128 bn=64 consumers=2 persistent=1 stages=2" + take;
  run({1, 500, 500, 2, 2, 256, true, Layout::BSHD, DType::BF16, 0.0f, d256.c_str(), 3});
}

TEST_F(GpuAttention, PersistentGridAcrossTiles) {
  // Programs that walk several tiles each (1, 3 or one per multiprocessor):
  // the rings' steps, the Q stages and the consumers' turns run on from
  // tile to tile, and tiles of different lengths (causal) follow each other.
  runPersistentGrids("");
}

TEST_F(GpuAttention, PersistentGridTakesTilesFromACounter) {
  // take: each program takes its next tile from a counter in scratch
  // zeroed before each launch (every case a launch of the same kernel, so
  // a counter left counted would show), the producer handing the tile to
  // the consumers through two slots: the cases of PersistentGridAcrossTiles,
  // over 1, 3 and the GPU's own count of programs, ping-pong and not, both
  // rasters, head dims 64-256.
  runPersistentGrids(" take=1");
}

/// A THD case: sequences of lensQ query and lensK key rows (sq and sk the
/// longest, or `atLeast` where larger).
Case packed(std::vector<int64_t> lensQ, std::vector<int64_t> lensK, int64_t hq, int64_t hkv,
            int64_t d, bool causal, const char *config = "", int64_t programs = 0,
            DType dt = DType::BF16, int64_t atLeast = 1) {
  Case c{int64_t(lensQ.size()), atLeast, atLeast, hq, hkv, d, causal, Layout::THD, dt};
  for (int64_t n : lensQ)
    c.sq = std::max(c.sq, n);
  for (int64_t n : lensK)
    c.sk = std::max(c.sk, n);
  c.config = config;
  c.programs = programs;
  c.lensQ = std::move(lensQ);
  c.lensK = std::move(lensK);
  return c;
}

TEST_F(GpuAttention, PackedSequences) {
  // Sequences of 1 row, ragged ones, one longer than a persistent round:
  // each tile's keys and stores stop at its own sequence's end.
  std::vector<int64_t> lens = {1, 127, 300, 64, 1000, 1};
  for (int64_t d : {64, 128, 256})
    for (bool causal : {true, false})
      run(packed(lens, lens, 4, 2, d, causal));
  run(packed({5, 200, 77}, {300, 17, 129}, 2, 2, 128, false)); // cross lengths
  // Causal with cross lengths: row r sees the sequence's keys 0..r (top-left).
  run(packed({5, 200, 77}, {300, 17, 129}, 2, 2, 128, true));
  run(packed({5, 200, 77}, {5, 200, 77}, 8, 1, 64, true, "", 0, DType::F16)); // MQA, f16
  // A sequence with queries and no keys (O = 0, LSE = -inf), one with
  // neither, and a longest length given larger than any sequence.
  run(packed({10, 0, 50}, {0, 0, 60}, 2, 1, 128, false));
  run(packed({3, 190, 64}, {3, 190, 64}, 2, 2, 128, true, "", 0, DType::BF16, 2000));
}

TEST_F(GpuAttention, PackedSequencesOnPersistentGrids) {
  // Programs that walk tiles, among them ones past their sequence's rows
  // (skipped: the Q stages and the consumers' turns count only the tiles
  // with work).
  const char *configs[] = {
      "bm=128 bn=128 consumers=2 overlap=1 persistent=1 pingpong=1 raster=1 stages=2",
      "bm=128 bn=128 consumers=2 overlap=1 persistent=1 raster=0 stages=2",
      "bm=64 bn=64 consumers=1 overlap=1 persistent=1 stages=2",
      "bm=128 bn=64 consumers=2 stages=2",
      // (Taken from the counter: the producer passes over the tiles past
      // their sequence's rows; one with rows and no keys is handed out.)
      "bm=128 bn=128 consumers=2 overlap=1 persistent=1 pingpong=1 raster=1 stages=2 take=1",
      "bm=128 bn=128 consumers=2 overlap=1 persistent=1 raster=0 stages=2 take=1",
  };
  std::vector<int64_t> lensQ = {700, 1, 129, 0, 333}, lensK = {700, 1, 129, 40, 333};
  for (const char *cfg : configs)
    for (int64_t programs : {1, 3, 0})
      run(packed(lensQ, lensK, 2, 1, 128, true, cfg, programs));
  // Many short documents, some empty, beside a long one: most of the
  // grid's tiles have no rows, so most of the producer's takes are passed
  // over.
  std::vector<int64_t> many;
  for (int64_t i = 0; i < 24; ++i)
    many.push_back(i % 6 == 5 ? 0 : 1 + (i * 37) % 150);
  many.push_back(1100);
  for (const char *cfg : {configs[4], configs[5]}) {
    run(packed({10, 0, 50}, {0, 0, 60}, 2, 1, 128, false, cfg, 2));
    run(packed({1, 127, 300, 64, 1000, 1}, {1, 127, 300, 64, 1000, 1}, 4, 2, 128, true, cfg, 5));
    for (int64_t programs : {7, 0})
      run(packed(many, many, 4, 2, 128, true, cfg, programs));
  }
}

TEST_F(GpuAttention, RowTilesOfGroupsOfHeadsLastRowsFirst) {
  // raster_heads (with raster 1): the row tiles of groups of that many
  // heads, the last rows first, a row tile of each head of the group in
  // turn; here groups of 3 over 8 and 5 heads (the last group smaller), on
  // persistent grids shared out in advance and taken from the counter
  // over 1, 3 and the GPU's own count of programs, and a program a tile;
  // causal or not, both layouts, packed sequences.
  for (const char *cfg :
       {"bm=128 bn=128 consumers=2 overlap=1 persistent=1 pingpong=1 raster=1 raster_heads=3 "
        "stages=2",
        "bm=128 bn=128 consumers=2 overlap=1 persistent=1 pingpong=1 raster=1 raster_heads=3 "
        "stages=2 take=1",
        "bm=128 bn=128 consumers=2 overlap=1 pingpong=1 raster=1 raster_heads=3 stages=2"}) {
    for (int64_t programs : {1, 3, 0})
      run({2, 333, 333, 4, 2, 128, true, Layout::BSHD, DType::BF16, 0.0f, cfg, programs});
    run({1, 1000, 1000, 5, 5, 128, false, Layout::BHSD, DType::BF16, 0.0f, cfg, 7});
    run(packed({700, 1, 129, 0, 333}, {700, 1, 129, 40, 333}, 2, 1, 128, true, cfg, 3));
  }
}

} // namespace

namespace {

TEST_F(GpuAttention, BackwardHeadDimsMasksAndGroups) {
  for (int64_t d : {64, 128}) {
    runBackward({1, 256, 256, 2, 2, d});
    runBackward({2, 200, 200, 4, 1, d, true});                // ragged, causal, MQA
    runBackward({1, 300, 300, 4, 2, d, false, Layout::BHSD}); // GQA
  }
  // Query heads split over programs (fewer KV-head tiles than 512): into
  // two parts of two heads (256 tiles), and into every head (one tile).
  runBackward({256, 128, 128, 4, 1, 64, true});
  runBackward({2, 100, 100, 8, 2, 128, false, Layout::BHSD});
}

TEST_F(GpuAttention, BackwardHeadDim256SplitsTheColumns) {
  // Head dim 256: the dK/dV kernel's two consumers hold half of dK's and
  // dV's columns each for the same 64 keys (dsplit), here each computing a
  // step's scores for all of its 32 queries (the default, qsplit, splits
  // them: the next test); and three stages.
  runHeadDim256("bn=32 consumers=2 dsplit=1 kv_bm=32 overlap=1 sfirst=1 stages=2", 64);
  runBackward({1, 333, 333, 2, 1, 256, false, Layout::BSHD, DType::BF16, 0.0f,
               "bn=16 consumers=2 dsplit=1 kv_bm=32 overlap=1 stages=3"});
}

TEST_F(GpuAttention, BackwardHeadDim256SplitsTheQueries) {
  // qsplit (with dsplit; the default at head dim 256): each of the dK/dV
  // kernel's consumers computes the scores of half a step's 64 queries, and
  // both read P^T and dS^T whole from shared memory for their halves of
  // dV's and dK's columns. The diagonal's steps mask each half at its own
  // queries; also packed sequences, more queries than keys, one row.
  const char *q = "bn=32 consumers=2 dsplit=1 kv_bm=64 overlap=1 qsplit=1 stages=2";
  runHeadDim256(q, 16);
  runBackward({1, 250, 100, 2, 2, 256, true, Layout::BHSD, DType::BF16, 0.0f, q});
  runBackward({1, 1, 1, 2, 1, 256, true, Layout::BSHD, DType::BF16, 0.0f, q});
  runBackward(packed({3, 333, 129}, {3, 333, 129}, 2, 2, 256, true, q));
}

TEST_F(GpuAttention, BackwardRaggedAndCrossLengths) {
  for (int64_t s : {1, 63, 65, 129, 383})
    runBackward({1, s, s, 2, 2, 128, true});
  runBackward({2, 64, 300, 2, 2, 128});        // fewer queries than keys
  runBackward({1, 300, 17, 2, 1, 64});         // keys below one tile
  runBackward({1, 250, 100, 2, 2, 128, true}); // causal, sq > sk
  runBackward({1, 100, 250, 2, 2, 64, true});  // causal, keys no query sees: zero dK, dV
  runBackward({1, 1024, 1024, 4, 2, 128, true});
}

TEST_F(GpuAttention, BackwardTypesScalesAndConfigs) {
  runBackward({1, 300, 300, 2, 2, 128, true, Layout::BSHD, DType::F16});
  runBackward({1, 300, 300, 2, 2, 64, false, Layout::BHSD, DType::F16});
  runBackward({1, 500, 500, 2, 2, 64, true, Layout::BSHD, DType::BF16, 1.0f});
  runBackward({1, 333, 333, 2, 1, 64, true, Layout::BSHD, DType::BF16, 0.0f,
               "bn=32 consumers=1 kv_bm=32 stages=3"});
  runBackward({1, 333, 333, 2, 2, 64, false, Layout::BSHD, DType::BF16, 0.0f,
               "bn=64 consumers=2 kv_bm=32 stages=1"});
  runBackward({1, 500, 500, 2, 2, 64, true, Layout::BHSD, DType::BF16, 0.0f,
               "bn=128 consumers=2 kv_bm=64 stages=2"});
  runBackward({1, 333, 333, 2, 2, 128, false, Layout::BSHD, DType::BF16, 0.0f,
               "bn=64 consumers=1 kv_bm=32 stages=3"});
  // Two consumers (the default where the dK/dV kernel has programs enough).
  runBackward({2, 383, 383, 4, 2, 128, true, Layout::BSHD, DType::BF16, 0.0f,
               "bn=128 consumers=2 kv_bm=64 stages=2"});
  runBackward({1, 300, 300, 2, 1, 128, false, Layout::BHSD, DType::F16, 0.0f,
               "bn=64 consumers=2 kv_bm=32 stages=2"});
  // Products started together (overlap).
  runBackward({2, 383, 383, 4, 2, 128, true, Layout::BSHD, DType::BF16, 0.0f,
               "bn=128 consumers=2 kv_bm=64 overlap=1 stages=2"});
  runBackward({1, 333, 333, 4, 1, 128, true, Layout::BHSD, DType::F16, 0.0f,
               "bn=128 consumers=1 kv_bm=32 overlap=1 stages=2"});
  runBackward({1, 257, 257, 2, 2, 64, false, Layout::BSHD, DType::BF16, 0.0f,
               "bn=128 consumers=2 kv_bm=64 overlap=1 stages=3"});
  // The dQ kernel's dP product started once S's is done (sfirst: the default
  // at head dims 128 and 256), at 64 and without it at 128.
  runBackward({1, 383, 383, 4, 1, 64, true, Layout::BSHD, DType::BF16, 0.0f,
               "bn=128 consumers=2 kv_bm=64 overlap=1 sfirst=1 stages=2"});
  runBackward({1, 333, 333, 2, 2, 128, true, Layout::BHSD, DType::F16, 0.0f,
               "bn=128 consumers=2 kv_bm=64 overlap=1 stages=2"});
  // The dK/dV kernel's dP^T after S^T and dV's product behind it
  // (kvsfirst): GQA, causal and not, one consumer, the head dim split.
  runBackward({2, 383, 383, 4, 2, 128, true, Layout::BSHD, DType::BF16, 0.0f,
               "bn=128 consumers=2 kv_bm=64 kvsfirst=1 overlap=1 stages=2"});
  runBackward({1, 300, 300, 4, 1, 64, false, Layout::BHSD, DType::F16, 0.0f,
               "bn=128 consumers=2 kv_bm=64 kvsfirst=1 overlap=1 stages=2"});
  runBackward({1, 333, 333, 4, 1, 128, true, Layout::BSHD, DType::BF16, 0.0f,
               "bn=128 consumers=1 kv_bm=32 kvsfirst=1 overlap=1 stages=2"});
  runBackward({1, 300, 300, 2, 2, 256, true, Layout::BSHD, DType::BF16, 0.0f,
               "bn=32 consumers=2 dsplit=1 kv_bm=32 kvsfirst=1 overlap=1 stages=2"});
}

// The kernel of targets without wgmma (cp.async, ldmatrix, mma.sync), on
// any GPU of sm_80 or later: on Hopper built for sm_90 (the newest target
// of its major version without wgmma).
class GpuAttentionSm80 : public GpuAttention {
protected:
  void SetUp() override {
    tilejit::testing::Gpu gpu = tilejit::testing::currentGpuWithoutWgmma();
    if (!gpu.why.empty())
      GTEST_SKIP() << gpu.why;
    target = gpu.target;
  }
};

/// The cases both passes below sm_90a take, each given to `each`: head dims
/// `dims`, masks, ragged and cross lengths, MQA, GQA with BHSD, f16, a large
/// scale.
template <class F> void sm80Cases(std::initializer_list<int64_t> dims, F each) {
  for (int64_t d : dims) {
    each(Case{1, 256, 256, 2, 2, d});
    each(Case{2, 200, 200, 4, 1, d, true}); // ragged, causal, MQA
  }
  for (int64_t s : {1, 63, 65, 129, 1000})
    each(Case{1, s, s, 2, 2, 128, true});
  each(Case{2, 64, 300, 2, 2, 128});                                  // fewer queries than keys
  each(Case{1, 250, 100, 2, 2, 64, true});                            // causal, sq > sk
  each(Case{2, 333, 333, 8, 2, 64, false, Layout::BHSD});             // GQA, BHSD
  each(Case{1, 300, 300, 2, 2, 128, true, Layout::BSHD, DType::F16}); // f16
  each(Case{1, 500, 500, 2, 2, 64, true, Layout::BSHD, DType::BF16, 1.0f}); // a large scale
}

TEST_F(GpuAttentionSm80, HeadDimsMasksLayoutsAgainstFloat64) {
  sm80Cases({64, 128, 256}, [&](const Case &c) { run(c); });
  run({1, 700, 700, 2, 1, 128, true, Layout::BHSD, DType::BF16, 0.0f,
       "bm=64 bn=32 consumers=1 stages=3 raster=1"});
  run({1, 333, 333, 2, 2, 128, false, Layout::BSHD, DType::BF16, 0.0f,
       "bm=128 bn=128 consumers=2 stages=2"});
  std::vector<int64_t> lens = {1, 127, 300, 64, 1000, 1};
  for (bool causal : {true, false})
    run(packed(lens, lens, 4, 2, 128, causal));
  run(packed({10, 0, 50}, {0, 0, 60}, 2, 1, 64, false)); // a sequence without keys
}

TEST_F(GpuAttentionSm80, BackwardAgainstFloat64) {
  // The backward's kernels below sm_90a (cp.async, ldmatrix, mma.sync):
  // every head dim (256: the consumers split dQ's, dK's and dV's columns),
  // masks, ragged and cross lengths, MQA with the heads split, both layouts
  // and types, packed sequences, configs of the tuning space.
  sm80Cases({64, 128, 256}, [&](const Case &c) { runBackward(c); });
  runBackward({1, 300, 300, 4, 2, 256, true, Layout::BHSD, DType::F16, 0.0f,
               "bn=48 consumers=2 dsplit=1 kv_bm=16 stages=2"});
  runBackward({1, 200, 333, 2, 1, 256, false, Layout::BSHD, DType::BF16, 0.0f,
               "bn=16 consumers=2 dsplit=1 kv_bm=16 stages=3"});
  runBackward(packed({1, 127, 300}, {1, 127, 300}, 4, 2, 256, true));
  runBackward({1, 700, 700, 4, 1, 128, true, Layout::BHSD, DType::BF16, 0.0f,
               "bn=48 consumers=1 kv_bm=16 stages=3"});
  runBackward({1, 333, 333, 2, 2, 64, false, Layout::BSHD, DType::BF16, 0.0f,
               "bn=64 consumers=2 kv_bm=32 stages=2"});
  std::vector<int64_t> lens = {1, 127, 300, 64, 1000, 1};
  for (int64_t d : {64, 128})
    for (bool causal : {true, false})
      runBackward(packed(lens, lens, 4, 2, d, causal));
  runBackward(packed({5, 200, 77}, {300, 17, 129}, 2, 1, 128, true)); // cross lengths
  runBackward(packed({10, 0, 50}, {0, 0, 60}, 2, 1, 128, false));     // queries without keys
  // Causal with keys no query sees (programs of no step), keys fewer than
  // a tile, two consumers under the causal mask.
  runBackward({1, 100, 250, 2, 2, 64, true});
  runBackward({1, 300, 17, 2, 1, 64});
  runBackward({1, 333, 333, 2, 2, 64, true, Layout::BSHD, DType::BF16, 0.0f,
               "bn=64 consumers=2 kv_bm=32 stages=2"});
  // A program over several query heads of its KV head's group (the head
  // each step copies ahead wraps to the next head's first tile), the
  // group whole (split 1: dK and dV stored directly) or in two parts.
  for (int64_t split : {1, 2}) {
    Case c{2, 200, 200, 4, 1, 128, true};
    c.headSplit = split;
    runBackward(c);
    Case p = packed({5, 200, 77}, {5, 200, 77}, 4, 1, 64, false);
    p.headSplit = split;
    runBackward(p);
  }
}

TEST_F(GpuAttention, AKernelBuiltForOtherSizesIsRefusedByName) {
  // A launch checks the kernel against the call's compile-time sizes, the
  // scale and the backward's own fields before anything runs (so the
  // addresses here are never read).
  Case c{1, 128, 128, 4, 2, 64, true, Layout::BSHD, DType::BF16};
  attention::Call call = callOf(c);
  call.q = call.k = call.v = call.o = call.lse = 0x100000;
  auto fspec = attention::specOf(call, target);
  ASSERT_TRUE(bool(fspec)) << llvm::toString(fspec.takeError());
  auto bspec = attention::backwardSpecOf(call, target);
  ASSERT_TRUE(bool(bspec)) << llvm::toString(bspec.takeError());
  auto fwd = loadBuilt(*fspec, {});
  ASSERT_TRUE(bool(fwd)) << llvm::toString(fwd.takeError());
  auto bwd = loadBuilt(*bspec, {});
  ASSERT_TRUE(bool(bwd)) << llvm::toString(bwd.takeError());
  int sms = target.smCount();
  auto refused = [&](llvm::Error err, const std::string &want) {
    ASSERT_TRUE(bool(err)) << "not refused: " << want;
    std::string msg = llvm::toString(std::move(err));
    EXPECT_NE(msg.find(want), std::string::npos) << msg;
  };
  auto with = [&](auto change) {
    attention::Call other = call;
    change(other);
    return other;
  };
  refused(attention::launch(*fwd, with([](auto &o) { o.hkv = 4; }), sms, nullptr),
          "the kernel is built for hkv=2, the call has hkv=4");
  refused(attention::launch(*fwd, with([](auto &o) { o.hq = 8; }), sms, nullptr),
          "the kernel is built for hq=4, the call has hq=8");
  refused(attention::launch(*fwd, with([](auto &o) { o.d = 128; }), sms, nullptr),
          "the kernel is built for d=64, the call has d=128");
  refused(attention::launch(*fwd, with([](auto &o) { o.causal = false; }), sms, nullptr),
          "the kernel is built for causal=1, the call has causal=0");
  refused(attention::launch(*fwd, with([](auto &o) { o.layout = Layout::BHSD; }), sms, nullptr),
          "the kernel is built for layout=bshd, the call has layout=bhsd");
  refused(attention::launch(*fwd, with([](auto &o) { o.dt = DType::F16; }), sms, nullptr),
          "the kernel is built for dt=bf16, the call has dt=f16");
  refused(attention::launch(*fwd, with([](auto &o) { o.scale = -1.0f; }), sms, nullptr),
          "scale must be positive and finite");
  refused(attention::launch(*fwd, with([](auto &o) { o.maxPrograms = -1; }), sms, nullptr),
          "maxPrograms must be >= 0");
  refused(attention::launch(*bwd, call, sms, nullptr), "the kernel is not attn_fwd's");
  attention::BackwardCall back;
  static_cast<attention::Call &>(back) = call;
  back.dO = back.dQ = back.dK = back.dV = back.workspace = 0x200000;
  refused(attention::launchBackward(*fwd, back, nullptr), "the kernel is not attn_bwd's");
  auto backWith = [&](auto change) {
    attention::BackwardCall other = back;
    change(other);
    return attention::launchBackward(*bwd, other, nullptr);
  };
  refused(backWith([](auto &o) { o.only = 2; }), "only must be -1 (every kernel), 0 or 1, got 2");
  refused(backWith([](auto &o) { o.headSplit = -1; }), "headSplit and workspaceSize must be >= 0");
  refused(backWith([](auto &o) { o.workspaceSize = -1; }),
          "headSplit and workspaceSize must be >= 0");
  refused(backWith([](auto &o) { o.hkv = 1; }),
          "the kernel is built for hkv=2, the call has hkv=1");
  refused(backWith([](auto &o) { o.scale = std::numeric_limits<float>::infinity(); }),
          "scale must be positive and finite");
}

TEST_F(GpuAttention, OffsetsThatBreakTheContractEndWithoutStrayWrites) {
  // Packed sequences whose offsets break the call's contract: sequences
  // longer than the call's longest (sq, sk), of a negative count (the
  // offsets decreasing), running past the rows or starting there. Held to
  // [0, 200] rows: queries 200, 0, 200, 200 (the last from row 380 of
  // 400), keys 0, 200, 20 and 200 (all past the rows). The results are
  // undefined, but every kernel ends (no loop longer than a valid call's,
  // no wait that never ends; before the hold a negative count gave the
  // unfused backward's kernels about 2^58 steps) and writes nothing
  // outside its outputs: 64 KiB on each side of every buffer keep their
  // bytes.
  auto drv = CudaDriver::get();
  ASSERT_TRUE(bool(drv));
  constexpr size_t kGuard = 64 << 10;
  constexpr uint8_t kMark = 0x5A;
  const int64_t b = 4, hq = 4, hkv = 2, longest = 200, total = 400;
  const std::vector<int32_t> offsetsQ = {0, 390, 150, 380, 600},
                             offsetsK = {50, 10, 380, 400, 5000};
  struct Guarded {
    DeviceBuffer buf;
    size_t bytes;
    uint64_t ptr() const { return buf.ptr() + kGuard; }
  };
  auto guarded = [&](size_t bytes, std::vector<Guarded> &all) {
    auto buf = DeviceBuffer::allocate(bytes + 2 * kGuard);
    EXPECT_TRUE(bool(buf)) << llvm::toString(buf.takeError());
    if (!buf)
      return uint64_t(0);
    EXPECT_FALSE(bool(buf->fill(kMark)));
    all.push_back({std::move(*buf), bytes});
    return all.back().ptr();
  };
  auto expectGuardsKept = [&](const std::vector<Guarded> &all, const std::string &what) {
    for (size_t i = 0; i < all.size(); ++i) {
      std::vector<uint8_t> host(all[i].bytes + 2 * kGuard);
      ASSERT_FALSE(bool(all[i].buf.download(host)));
      for (size_t at : {size_t(0), kGuard + all[i].bytes}) {
        size_t changed = 0;
        for (size_t j = 0; j < kGuard; ++j)
          changed += host[at + j] != kMark;
        EXPECT_EQ(changed, 0u) << what << ": buffer " << i << (at ? ", after" : ", before");
      }
    }
  };
  for (int64_t d : {64, 128})
    for (bool causal : {true, false}) {
      std::string where = "d " + std::to_string(d) + (causal ? " causal" : "");
      SCOPED_TRACE(where);
      std::mt19937_64 rng(tilejit::testing::testSeed());
      attention::Call call;
      call.dt = DType::BF16;
      call.d = d;
      call.hq = hq;
      call.hkv = hkv;
      call.causal = causal;
      call.layout = Layout::THD;
      call.b = b;
      call.sq = call.sk = longest;
      call.totalQ = call.totalK = total;
      size_t nq = size_t(total * hq * d), nk = size_t(total * hkv * d);
      HostTensor q(call.dt, nq), k(call.dt, nk), v(call.dt, nk), dout(call.dt, nq);
      for (HostTensor *t : {&q, &k, &v, &dout})
        t->randomNormal(rng, 0.0f, 1.0f);
      std::vector<Guarded> inputs, outputs;
      auto upload = [&](const HostTensor &t) {
        uint64_t at = guarded(t.bytes.size(), inputs);
        EXPECT_EQ(drv->cuMemcpyHtoD_v2(CUdeviceptr(at), t.bytes.data(), t.bytes.size()),
                  CUDA_SUCCESS);
        return at;
      };
      call.q = upload(q);
      call.k = upload(k);
      call.v = upload(v);
      auto words = [&](const std::vector<int32_t> &w) {
        uint64_t at = guarded(w.size() * 4, inputs);
        EXPECT_EQ(drv->cuMemcpyHtoD_v2(CUdeviceptr(at), w.data(), w.size() * 4), CUDA_SUCCESS);
        return at;
      };
      call.cuSeqlensQ = words(offsetsQ);
      call.cuSeqlensK = words(offsetsK);
      uint64_t dO = upload(dout);
      call.o = guarded(q.bytes.size(), outputs);
      call.lse = guarded(size_t(b * hq * longest * 4), outputs);
      ASSERT_FALSE(HasFailure());
      auto fspec = attention::specOf(call, target);
      ASSERT_TRUE(bool(fspec)) << llvm::toString(fspec.takeError());
      // The forward: its default (tiles taken from a counter) and the
      // default with its share fixed in advance.
      for (bool take : {true, false}) {
        TileConfig config = getTemplate(*fspec).defaultConfig(*fspec);
        ASSERT_TRUE(config.has("take")) << config.canonical();
        if (!take)
          config.set("take", 0);
        std::string what = "forward '" + config.canonical() + "'";
        auto fwd = build(*fspec, config);
        ASSERT_TRUE(bool(fwd)) << what << ": " << llvm::toString(fwd.takeError());
        if (auto err = attention::launch(*fwd->loaded, call, target.smCount(), nullptr))
          FAIL() << what << ": " << llvm::toString(std::move(err));
        ASSERT_EQ(drv->cuCtxSynchronize(), CUDA_SUCCESS) << what;
        expectGuardsKept(outputs, what);
      }
      // The backward: the default of each mode (here the dQ and dK/dV
      // kernels), and fused: adding dQ in order, and persistent, taking its
      // tiles (under the causal mask longest first) in any order.
      std::string c = d == 128 ? "bn=128 consumers=2" : "bn=128 consumers=1";
      std::string lpt = causal ? " lpt=1" : "";
      for (auto [deterministic, cfg] :
           {std::pair{true, std::string()}, std::pair{false, std::string()},
            std::pair{true, c + " dqfrag=1 fused=1 kv_bm=64 overlap=1 stages=2"},
            std::pair{false, c + " dqfrag=1 fused=1 kv_bm=64" + lpt +
                                 " overlap=1 persist=1 stages=2 take=1"}}) {
        SCOPED_TRACE(std::string(deterministic ? "deterministic" : "any order") + " '" + cfg + "'");
        attention::BackwardCall bc;
        static_cast<attention::Call &>(bc) = call;
        bc.deterministic = deterministic;
        auto bspec = attention::backwardSpecOf(bc, target);
        ASSERT_TRUE(bool(bspec)) << llvm::toString(bspec.takeError());
        auto config = TileConfig::parse(cfg);
        ASSERT_TRUE(bool(config));
        auto bwd = build(*bspec, *config);
        ASSERT_TRUE(bool(bwd)) << llvm::toString(bwd.takeError());
        std::vector<Guarded> mine;
        bc.dO = dO;
        bc.dQ = guarded(q.bytes.size(), mine);
        bc.dK = guarded(k.bytes.size(), mine);
        bc.dV = guarded(k.bytes.size(), mine);
        // (Its size given: a fused kernel's sums, flags and counter then
        // lie in it, guarded, not in tilejit's pool.)
        bc.workspaceSize =
            attention::backwardWorkspaceBytes(bc, attention::fusedBackward(*bwd->loaded));
        bc.workspace = guarded(size_t(bc.workspaceSize), mine);
        ASSERT_FALSE(HasFailure());
        if (auto err = attention::launchBackward(*bwd->loaded, bc, nullptr))
          FAIL() << llvm::toString(std::move(err));
        ASSERT_EQ(drv->cuCtxSynchronize(), CUDA_SUCCESS);
        expectGuardsKept(mine, "backward");
        expectGuardsKept(inputs, "backward's inputs");
        expectGuardsKept(outputs, "backward's O and LSE");
      }
    }
}

TEST_F(GpuAttention, BackwardPackedSequences) {
  // Each program's queries, keys and stores stop at its sequence's end;
  // the workspace's rows past it are +inf whatever the forward's LSE holds
  // there. MQA splits the group's heads over programs (the parts' sum).
  std::vector<int64_t> lens = {1, 127, 300, 64, 1000, 1};
  for (int64_t d : {64, 128})
    for (bool causal : {true, false})
      runBackward(packed(lens, lens, 4, 2, d, causal));
  runBackward(packed({3, 333, 129}, {3, 333, 129}, 2, 2, 256, true));
  runBackward(packed({5, 200, 77}, {300, 17, 129}, 2, 2, 128, false)); // cross lengths
  // Causal with cross lengths (top-left): more queries than keys in one
  // sequence (its dK/dV programs past the keys compute what they do not
  // store), fewer in the others.
  runBackward(packed({5, 200, 77}, {300, 17, 129}, 2, 1, 128, true));
  runBackward(packed({5, 200, 77}, {5, 200, 77}, 8, 1, 64, true, "", 0, DType::F16)); // MQA
  // Queries without keys, a sequence of neither, and the longest given
  // larger than any.
  runBackward(packed({10, 0, 50}, {0, 0, 60}, 2, 1, 128, false));
  runBackward(packed({3, 190, 64}, {3, 190, 64}, 2, 2, 128, true, "", 0, DType::BF16, 700));
  // One consumer, 32 queries a step (the default where programs are few).
  runBackward(packed({700, 1, 129}, {700, 1, 129}, 2, 1, 128, true,
                     "bn=128 consumers=1 kv_bm=32 overlap=1 stages=2"));
}

TEST_F(GpuAttention, BackwardFusedAddsDqOverKeyTiles) {
  // dQ in the dK/dV kernel, each program adding its keys' part into f32
  // sums: head dim 64 with one consumer, 128 with two (each adding its 64
  // columns of dQ); ragged and long sequences (many key tiles add into each
  // query row), causal or not, GQA and MQA with the heads split, cross
  // lengths, both layouts and types, with and without overlap.
  struct Variant {
    int64_t d;
    const char *overlapped, *plain;
  };
  for (const Variant &v : {Variant{64, "bn=128 consumers=1 fused=1 kv_bm=64 overlap=1 stages=2",
                                   "bn=64 consumers=1 fused=1 kv_bm=64 stages=3"},
                           Variant{128, "bn=128 consumers=2 fused=1 kv_bm=64 overlap=1 stages=2",
                                   "bn=128 consumers=2 fused=1 kv_bm=64 stages=2"}}) {
    const char *cfg = v.overlapped;
    for (bool causal : {true, false}) {
      runBackward({1, 383, 383, 2, 2, v.d, causal, Layout::BSHD, DType::BF16, 0.0f, cfg});
      runBackward({2, 1024, 1024, 4, 1, v.d, causal, Layout::BHSD, DType::BF16, 0.0f, cfg});
    }
    runBackward({1, 65, 300, 2, 2, v.d, false, Layout::BSHD, DType::F16, 0.0f, cfg});
    runBackward({1, 250, 100, 2, 2, v.d, true, Layout::BSHD, DType::BF16, 0.0f, cfg});
    // Keys no query sees: programs without a query tile (no step, so no
    // part of dQ to add after the loops).
    runBackward({1, 100, 250, 2, 2, v.d, true, Layout::BSHD, DType::BF16, 0.0f, cfg});
    runBackward({64, 128, 128, 8, 1, v.d, true, Layout::BSHD, DType::BF16, 0.0f, cfg});
    runBackward({1, 700, 700, 4, 2, v.d, true, Layout::BHSD, DType::BF16, 1.0f, v.plain});
  }
}

TEST_F(GpuAttention, BackwardFusedInOrderRepeatsBitwise) {
  // The fused kernel for a deterministic call: each query tile's parts of
  // dQ added from its last key tile to its first, the helper thread
  // waiting for each program's turn on flags. dQ bitwise equal over two
  // runs (the second with its sums and flags from tilejit's pool) and
  // against float64: causal and not, ragged and long sequences (up to 32
  // key tiles of 64 or 16 of 128 adding into a query tile), more queries
  // than keys, keys no query sees (programs without a turn), f16, both
  // layouts, with and without overlap; head dim 64 (one consumer) and 128
  // (two). GQA and MQA with the heads split (flags per query head), and
  // four query heads a program.
  for (auto [d, cfg] :
       {std::pair{int64_t(64), "bn=128 consumers=1 fused=1 kv_bm=64 overlap=1 stages=2"},
        std::pair{int64_t(128), "bn=128 consumers=2 fused=1 kv_bm=64 overlap=1 stages=2"}}) {
    runBackward(inOrder({1, 383, 383, 2, 2, d, true, Layout::BSHD, DType::BF16, 0.0f, cfg}));
    runBackward(inOrder({2, 1024, 1024, 4, 1, d, true, Layout::BHSD, DType::BF16, 0.0f, cfg}));
    runBackward(inOrder({1, 2048, 2048, 2, 2, d, true, Layout::BSHD, DType::BF16, 0.0f, cfg}));
    runBackward(inOrder({1, 250, 100, 2, 2, d, true, Layout::BSHD, DType::BF16, 0.0f, cfg}));
    runBackward(inOrder({1, 100, 250, 2, 2, d, true, Layout::BSHD, DType::BF16, 0.0f, cfg}));
    runBackward(inOrder({16, 512, 512, 8, 1, d, true, Layout::BSHD, DType::BF16, 0.0f, cfg}));
    runBackward(inOrder({1, 129, 129, 2, 2, d, true, Layout::BSHD, DType::F16, 1.0f, cfg}));
    // Without a mask every key tile adds into every query tile (GQA and
    // MQA at both head dims): where the query tiles are R per key tile (R
    // = a program's keys / 64; 383, 512 and 2048 rows at head dim 128)
    // each program walks them from its own place, the turns in the order
    // the programs come to a tile; elsewhere (250 and 100, 700) from the
    // first, each program a turn after the one before it in the grid.
    runBackward(inOrder({1, 383, 383, 2, 2, d, false, Layout::BSHD, DType::BF16, 0.0f, cfg}));
    runBackward(inOrder({1, 2048, 2048, 2, 1, d, false, Layout::BHSD, DType::BF16, 0.0f, cfg}));
    runBackward(inOrder({4, 512, 512, 8, 1, d, false, Layout::BSHD, DType::BF16, 0.0f, cfg}));
    Case whole{1, 512, 512, 8, 2, d, false, Layout::BHSD, DType::BF16, 0.0f, cfg};
    whole.headSplit = 1;
    runBackward(inOrder(whole));
    runBackward(inOrder({1, 250, 100, 2, 2, d, false, Layout::BSHD, DType::F16, 0.0f, cfg}));
    runBackward(inOrder({1, 100, 250, 2, 2, d, false, Layout::BSHD, DType::BF16, 0.0f, cfg}));
    // Four query heads a program (the group whole), and two (the group
    // split in two): the tile before a head's first is the previous head's
    // last.
    for (int64_t split : {1, 2}) {
      Case group{1, 512, 512, 8, 2, d, true, Layout::BSHD, DType::BF16, 0.0f, cfg};
      group.headSplit = split;
      runBackward(inOrder(group));
    }
  }
  runBackward(inOrder({1, 700, 700, 4, 2, 128, true, Layout::BHSD, DType::BF16, 0.0f,
                       "bn=128 consumers=2 fused=1 kv_bm=64 stages=2"}));
  runBackward(inOrder({2, 700, 700, 4, 4, 128, false, Layout::BSHD, DType::BF16, 0.0f,
                       "bn=128 consumers=2 fused=1 kv_bm=64 stages=2"}));
  runBackward(inOrder({1, 700, 700, 4, 2, 64, true, Layout::BHSD, DType::BF16, 0.0f,
                       "bn=128 consumers=1 fused=1 kv_bm=64 stages=2"}));
  // 133 key tiles of 64 keys for one head, more than half the
  // multiprocessors (more than an H100's 132 at once): walked from the
  // first tile, as a rotated walk's order could wait on a program that
  // cannot start.
  runBackward(inOrder({1, 8500, 8500, 1, 1, 64, false, Layout::BSHD, DType::BF16, 0.0f,
                       "bn=128 consumers=1 fused=1 kv_bm=64 overlap=1 stages=2"}));
}

TEST_F(GpuAttention, BackwardFusedPartsInRegisterOrder) {
  // dqfrag: each consumer's part of dQ stored in its registers' order and
  // added by one bulk copy into sums laid out so, which the last kernel
  // reads back so: every element against float64, in any order and in a
  // fixed one (then bitwise equal over two runs), both layouts (their
  // blocks of the sums are placed apart), causal or not, ragged and long
  // sequences, GQA and MQA with the heads split, f16, without overlap;
  // head dims 64 (one consumer) and 128 (two).
  for (auto [d, cfg] :
       {std::pair{int64_t(64), "bn=128 consumers=1 dqfrag=1 fused=1 kv_bm=64 overlap=1 stages=2"},
        std::pair{int64_t(128),
                  "bn=128 consumers=2 dqfrag=1 fused=1 kv_bm=64 overlap=1 stages=2"}}) {
    for (bool ordered : {false, true}) {
      auto run = [&](Case c) { runBackward(ordered ? inOrder(c) : c); };
      for (bool causal : {true, false}) {
        run({1, 383, 383, 2, 2, d, causal, Layout::BSHD, DType::BF16, 0.0f, cfg});
        run({2, 1024, 1024, 4, 1, d, causal, Layout::BHSD, DType::BF16, 0.0f, cfg});
        run({2, 300, 300, 3, 3, d, causal, Layout::BSHD, DType::BF16, 0.0f, cfg});
      }
      run({1, 65, 300, 2, 2, d, false, Layout::BSHD, DType::F16, 0.0f, cfg});
      run({1, 250, 100, 2, 2, d, true, Layout::BHSD, DType::BF16, 0.0f, cfg});
      run({1, 100, 250, 2, 2, d, true, Layout::BSHD, DType::BF16, 0.0f, cfg});
      run({4, 256, 256, 8, 2, d, true, Layout::BSHD, DType::BF16, 0.0f, cfg});
    }
  }
  runBackward({1, 700, 700, 4, 2, 128, true, Layout::BHSD, DType::BF16, 1.0f,
               "bn=128 consumers=2 dqfrag=1 fused=1 kv_bm=64 stages=2"});
  runBackward(inOrder({1, 700, 700, 4, 2, 128, false, Layout::BSHD, DType::BF16, 0.0f,
                       "bn=128 consumers=2 dqfrag=1 fused=1 kv_bm=64 stages=2"}));
}

// The persistent backward's configs and cases: head dims 64 and 128, dQ's
// parts through the tensor map and in the registers' order (lpt: under a
// causal mask, in the registers' order); `programs` stands for the
// multiprocessors, so that each program takes several tiles.
constexpr std::pair<int64_t, const char *> kPersistentConfigs[] = {
    {64, "bn=128 consumers=1 fused=1 kv_bm=64 overlap=1 persist=1 stages=2"},
    {64, "bn=128 consumers=1 dqfrag=1 fused=1 kv_bm=64 overlap=1 persist=1 stages=2"},
    {128, "bn=128 consumers=2 dqfrag=1 fused=1 kv_bm=64 overlap=1 persist=1 stages=2"}};
constexpr std::pair<int64_t, const char *> kLptConfigs[] = {
    {64, "bn=128 consumers=1 dqfrag=1 fused=1 kv_bm=64 lpt=1 overlap=1 persist=1 stages=2"},
    {128, "bn=128 consumers=2 dqfrag=1 fused=1 kv_bm=64 lpt=1 overlap=1 persist=1 stages=2"}};

void GpuAttention::runPersistentCases(int64_t d, const std::string &cfg) {
  const char *c = cfg.c_str();
  for (bool causal : {true, false}) {
    runBackward({1, 383, 383, 2, 2, d, causal, Layout::BSHD, DType::BF16, 0.0f, c, 5});
    runBackward({2, 1024, 1024, 4, 1, d, causal, Layout::BHSD, DType::BF16, 0.0f, c, 16});
    runBackward({2, 300, 300, 3, 3, d, causal, Layout::BSHD, DType::F16, 0.0f, c, 8});
  }
  runBackward({1, 65, 300, 2, 2, d, false, Layout::BSHD, DType::BF16, 0.0f, c, 5});
  // (Two programs: one takes a tile without a step, keys past every
  // query, and then one with steps.)
  runBackward({1, 100, 250, 2, 2, d, true, Layout::BSHD, DType::BF16, 0.0f, c, 2});
  runBackward({1, 250, 100, 2, 2, d, true, Layout::BHSD, DType::BF16, 0.0f, c, 5});
  runBackward({4, 256, 256, 8, 2, d, true, Layout::BSHD, DType::BF16, 0.0f, c, 8});
  runBackward({4, 2048, 2048, 4, 4, d, false, Layout::BSHD, DType::BF16, 0.0f, c});
}

void GpuAttention::runLptCases(int64_t d, const std::string &cfg) {
  // (GQA with the heads split, MQA, ragged, both layouts; 7 and 16
  // programs: rounds of both parities, the last one short.)
  const char *c = cfg.c_str();
  runBackward({2, 1024, 1024, 4, 1, d, true, Layout::BHSD, DType::BF16, 0.0f, c, 16});
  runBackward({3, 383, 383, 4, 2, d, true, Layout::BSHD, DType::BF16, 0.0f, c, 7});
  runBackward({1, 250, 100, 2, 2, d, true, Layout::BSHD, DType::F16, 0.0f, c, 7});
}

TEST_F(GpuAttention, BackwardFusedPersistentTakesTilesInTurn) {
  // persist: one program a multiprocessor (here as many as `programs`
  // says, so that each takes several tiles: 5, 8 and 16 programs; in the
  // second run two fewer, or 100 on the GPU's own count, capped at launch), each
  // taking its share of the tiles (round j's in the programs' order, or
  // the reverse in odd rounds), the next tile's K and V loaded once its
  // consumers are done with the last one's, the steps' stages counted over
  // the program's tiles: every element against float64, head dims 64 and
  // 128, causal or not, ragged, cross lengths, keys no query sees (tiles
  // without a step), GQA and MQA with the heads split, both layouts, f16,
  // dQ's parts through the tensor map and in the registers' order; and on
  // the GPU's own multiprocessors.
  for (auto [d, cfg] : kPersistentConfigs)
    runPersistentCases(d, cfg);
  runBackward({1, 700, 700, 4, 2, 128, false, Layout::BHSD, DType::BF16, 0.0f,
               "bn=128 consumers=2 fused=1 kv_bm=64 overlap=1 persist=1 stages=2", 8});
  // lpt: under a causal mask every head's first key tile, then every
  // head's second, ...
  for (auto [d, cfg] : kLptConfigs)
    runLptCases(d, cfg);
}

TEST_F(GpuAttention, BackwardFusedPersistentTakesTilesFromACounter) {
  // take: each persistent program takes its next tile from a counter in
  // the workspace (zeroed before each launch: every case runs twice, the
  // second time capped lower), the producer handing the tile and its place
  // to the consumers through shared memory; tiles in each head's order or
  // (lpt) longest first. The same configs and cases as
  // BackwardFusedPersistentTakesTilesInTurn.
  for (auto [d, cfg] : kPersistentConfigs)
    runPersistentCases(d, std::string(cfg) + " take=1");
  for (auto [d, cfg] : kLptConfigs)
    runLptCases(d, std::string(cfg) + " take=1");
}

TEST_F(GpuAttention, BackwardFusedTakesTilesLongestFirstByGroupsOfHeads) {
  // lpt_heads (with lpt and take): the tiles longest first across groups
  // of that many KV heads (a split group's parts each counted), the groups
  // in turn; groups of 2, of 3 (a smaller last group where 3 does not
  // divide the units) and of 16 (more than the units: one group).
  for (auto [d, cfg] : kLptConfigs)
    for (int64_t heads : {2, 3, 16})
      runLptCases(d, std::string(cfg) + " take=1 lpt_heads=" + std::to_string(heads));
}

TEST_F(GpuAttention, BackwardFusedOnPackedSequences) {
  // Fused on packed sequences (THD): each program's parts of dQ go to its
  // sequence's rows of the f32 sums (kFusedQueryRows more rows a sequence
  // before it, so that no tile reaches the next one's), and the keys past
  // its sequence, which TMA loads from the next one, are masked where its
  // tile reaches past them. Sequences of 1 row, ragged and long ones, cross
  // lengths (more queries than keys under a causal mask: the programs past
  // the keys take no step), queries without keys, a sequence of neither,
  // the longest given larger than any; GQA, MQA with the heads split, f16.
  // In any order (through the tensor map and in the registers' order), in
  // a fixed one (bitwise repeatable, flags of each sequence's query tiles,
  // the turns from its own last key tile), and persistent (in turn, taken
  // from the counter, longest first alone and in groups of heads) over few
  // programs.
  std::vector<int64_t> lens = {1, 127, 300, 64, 1000, 1};
  // (`causalOnly`: lpt's configs, which need the mask.)
  auto cases = [&](int64_t d, const std::string &cfg, bool ordered, int64_t programs,
                   bool causalOnly = false) {
    const char *c = cfg.c_str();
    auto run = [&](Case k) {
      if (causalOnly && !k.causal)
        return;
      k.programs = programs;
      runBackward(ordered ? inOrder(k) : k);
    };
    for (bool causal : {true, false}) {
      run(packed(lens, lens, 4, 2, d, causal, c));
      run(packed({5, 200, 77}, {300, 17, 129}, 2, 2, d, causal, c)); // cross lengths
    }
    run(packed({5, 200, 77}, {5, 200, 77}, 8, 1, d, true, c, 0, DType::F16)); // MQA, split
    run(packed({10, 0, 50}, {0, 0, 60}, 2, 1, d, false, c));
    run(packed({3, 190, 64}, {3, 190, 64}, 2, 2, d, true, c, 0, DType::BF16, 700));
  };
  // (Head dim 128 under a causal mask only in the registers' order: the
  // rules refuse the tensor map's there.)
  cases(64, "bn=128 consumers=1 fused=1 kv_bm=64 overlap=1 stages=2", false, 0);
  cases(64, "bn=128 consumers=1 dqfrag=1 fused=1 kv_bm=64 overlap=1 stages=2", true, 0);
  cases(128, "bn=128 consumers=2 dqfrag=1 fused=1 kv_bm=64 overlap=1 stages=2", false, 0);
  cases(128, "bn=128 consumers=2 dqfrag=1 fused=1 kv_bm=64 overlap=1 stages=2", true, 0);
  // (Without a mask, through the tensor map: the deterministic default's.)
  Case map = packed(lens, lens, 4, 4, 128, false,
                    "bn=128 consumers=2 fused=1 kv_bm=64 overlap=1 stages=2");
  runBackward(map);
  runBackward(inOrder(map));
  const char *persistent =
      "bn=128 consumers=2 dqfrag=1 fused=1 kv_bm=64 overlap=1 persist=1 stages=2";
  cases(128, persistent, false, 5);
  cases(128, std::string(persistent) + " take=1", false, 7);
  // (lpt: each sequence's key tiles counted from its own last one, taken
  // from the counter, alone and in groups of heads; also with a sequence
  // whose queries have no keys, its rotation by none.)
  const char *lpt = "bn=128 consumers=2 dqfrag=1 fused=1 kv_bm=64 lpt=1 overlap=1 persist=1 "
                    "stages=2 take=1";
  cases(128, lpt, false, 7, /*causalOnly=*/true);
  cases(128, std::string(lpt) + " lpt_heads=2", false, 5, /*causalOnly=*/true);
  runBackward(packed({10, 90, 300}, {10, 0, 300}, 2, 2, 128, true, lpt, 3));
}

/// The tuner's check of each of `configs` (empty: the default) on `spec`:
/// the harness prepares its problems once (checking its device reference
/// against float64); each candidate runs from poisoned outputs and must
/// pass. Then each half of the check must fail on its own: poisoned and
/// not run, the tuning size's check (first) finds every element it covers
/// outside the bounds (its message naming `size` where given); run on the
/// tuning size alone, the small problem's check finds its outputs
/// unwritten.
void expectTheTunersCheckPasses(
    const KernelSpec &spec, const std::vector<const char *> &configs,
    llvm::function_ref<llvm::Expected<const LoadedKernel &>(const KernelSpec &, const TileConfig &)>
        load,
    const char *size = "at the tuning size") {
  std::unique_ptr<OpHarness> harness = makeHarness(spec);
  ASSERT_TRUE(harness);
  uint64_t seed = tilejit::testing::testSeed();
  SCOPED_TRACE(tilejit::testing::replayHint(seed));
  llvm::Error prepared = harness->prepare(spec, seed);
  ASSERT_FALSE(bool(prepared)) << llvm::toString(std::move(prepared));
  auto drv = CudaDriver::get();
  ASSERT_TRUE(bool(drv));
  const LoadedKernel *first = nullptr;
  for (const char *cfg : configs) {
    SCOPED_TRACE(cfg);
    auto config = TileConfig::parse(cfg);
    ASSERT_TRUE(bool(config)) << llvm::toString(config.takeError());
    auto k = load(spec, *config);
    ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
    if (!first)
      first = &*k;
    ASSERT_FALSE(bool(harness->bind(*k)));
    ASSERT_FALSE(bool(harness->poison(nullptr)));
    ASSERT_FALSE(bool(harness->run(*k, nullptr, /*check=*/true)));
    ASSERT_EQ(drv->cuCtxSynchronize(), CUDA_SUCCESS);
    llvm::Error err = harness->verify();
    EXPECT_FALSE(bool(err)) << llvm::toString(std::move(err));
  }
  ASSERT_TRUE(first);
  ASSERT_FALSE(bool(harness->bind(*first)));
  ASSERT_FALSE(bool(harness->poison(nullptr)));
  ASSERT_EQ(drv->cuCtxSynchronize(), CUDA_SUCCESS);
  llvm::Error unrun = harness->verify();
  ASSERT_TRUE(bool(unrun)) << "poisoned outputs passed the check";
  std::string why = llvm::toString(std::move(unrun));
  std::smatch counts;
  ASSERT_TRUE(std::regex_search(why, counts, std::regex("(\\d+) of (\\d+) elements outside")))
      << why;
  EXPECT_EQ(counts[1].str(), counts[2].str()) << why;
  EXPECT_NE(why.find(size), std::string::npos) << why;
  ASSERT_FALSE(bool(harness->poison(nullptr)));
  ASSERT_FALSE(bool(harness->run(*first, nullptr, /*check=*/false)));
  ASSERT_EQ(drv->cuCtxSynchronize(), CUDA_SUCCESS);
  llvm::Error smallUnrun = harness->verify();
  ASSERT_TRUE(bool(smallUnrun)) << "the small problem's poisoned outputs passed the check";
  why = llvm::toString(std::move(smallUnrun));
  EXPECT_NE(why.find("not finite"), std::string::npos) << why;
  EXPECT_EQ(why.find("at the tuning size"), std::string::npos) << why;
}

void GpuAttention::expectTheDefaultsPassTheTunersCheck(const Case &c) {
  SCOPED_TRACE(name(c));
  attention::Call call = callOf(c);
  auto fwd = attention::specOf(call, target);
  ASSERT_TRUE(bool(fwd)) << llvm::toString(fwd.takeError());
  expectTheTunersCheckPasses(*fwd, {""}, loadBuilt);
  auto bwd = attention::backwardSpecOf(call, target);
  ASSERT_TRUE(bool(bwd)) << llvm::toString(bwd.takeError());
  expectTheTunersCheckPasses(*bwd, {""}, loadBuilt);
}

TEST_F(GpuAttention, TheTunersCheckRunsPersistentBackwardsOverSeveralTiles) {
  // The tuner checks each candidate on a smaller problem (sampled rows of
  // dQ, dK and dV against float64), where a persistent dK/dV grid is capped
  // at 3 programs so that each takes several tiles (rounds of both orders;
  // lpt's across the heads), and on the spec's (every element against the
  // device reference), where it is timed. Every candidate here passes from
  // poisoned outputs; unrun, each half of the check fails.
  attention::Call call = callOf({1, 4096, 4096, 4, 4, 128, true});
  call.deterministic = false;
  auto spec = attention::backwardSpecOf(call, target);
  ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
  TileConfig def = getTemplate(*spec).defaultConfig(*spec);
  EXPECT_EQ(def.canonical(),
            "bn=128 consumers=2 dqfrag=1 fused=1 kv_bm=64 lpt=1 overlap=1 persist=1 stages=2")
      << "128 tiles under a causal mask: persist, longest first";
  expectTheTunersCheckPasses(
      *spec,
      {"", "bn=128 consumers=2 dqfrag=1 fused=1 kv_bm=64 overlap=1 persist=1 stages=2",
       "bn=128 consumers=2 dqfrag=1 fused=1 kv_bm=64 overlap=1 stages=2"},
      loadBuilt);
}

TEST_F(GpuAttention, TheForwardsGroupedTakeDefaultPassesTheTunersCheck) {
  // Programs by head under a causal mask take their tiles from the counter
  // in groups of 8 heads by default where a share fixed in advance would be
  // uneven (B1 H16): the default's O and LSE from poisoned outputs held to
  // the device reference element by element at its size (and sampled rows
  // to float64 on the small problem); unrun, each half of the check fails.
  attention::Call call = callOf({1, 4096, 4096, 16, 16, 128, true});
  auto fwd = attention::specOf(call, target);
  ASSERT_TRUE(bool(fwd)) << llvm::toString(fwd.takeError());
  TileConfig def = getTemplate(*fwd).defaultConfig(*fwd);
  EXPECT_EQ(def.canonical(), "bm=128 bn=128 consumers=2 overlap=1 persistent=1 pingpong=1 "
                             "raster=1 raster_heads=8 stages=2 take=1");
  expectTheTunersCheckPasses(*fwd, {""}, loadBuilt);
}

TEST_F(GpuAttention, TheTunersCheckRunsPackedSequencesOfRaggedLengths) {
  // On packed sequences the check's problem is three sequences (about two
  // thirds of the rows, one row, all of them): a tile past its sequence,
  // the masks of rows and keys past it and (fused) dQ's sums of each
  // sequence are checked before a THD winner is stored. Forward and
  // backward, causal and not, cross lengths, GQA; the backward's two
  // kernels, fused in any order, in order, and persistent.
  for (bool causal : {true, false}) {
    Case c = packed({4096, 4096}, {4096, 4096}, 4, 2, 128, causal);
    attention::Call call = callOf(c);
    auto fwd = attention::specOf(call, target);
    ASSERT_TRUE(bool(fwd)) << llvm::toString(fwd.takeError());
    expectTheTunersCheckPasses(*fwd, {""}, loadBuilt);
    call.deterministic = false;
    auto fast = attention::backwardSpecOf(call, target);
    ASSERT_TRUE(bool(fast)) << llvm::toString(fast.takeError());
    std::vector<const char *> configs = {
        "", "bn=128 consumers=2 dqfrag=1 fused=1 kv_bm=64 overlap=1 stages=2",
        "bn=128 consumers=2 dqfrag=1 fused=1 kv_bm=64 overlap=1 persist=1 stages=2"};
    if (!causal) // (through the tensor map: refused at head dim 128 under a mask)
      configs.push_back("bn=128 consumers=2 fused=1 kv_bm=64 overlap=1 stages=2");
    expectTheTunersCheckPasses(*fast, configs, loadBuilt);
    call.deterministic = true;
    auto det = attention::backwardSpecOf(call, target);
    ASSERT_TRUE(bool(det)) << llvm::toString(det.takeError());
    expectTheTunersCheckPasses(
        *det, {"", "bn=128 consumers=2 dqfrag=1 fused=1 kv_bm=64 overlap=1 stages=2"}, loadBuilt);
  }
  expectTheDefaultsPassTheTunersCheck(packed({700, 90}, {300, 900}, 4, 1, 64, false));
}

TEST_F(GpuAttention, TheTunersTimedPackIsRaggedAndCoveredByWholeCycles) {
  // A THD spec's timed problem packs its count of sequences at ragged
  // lengths, the longest as its max_seqlen (attention::tuningSequences);
  // where the device reference cannot cover them all (2^33 (row, key,
  // head) triples: two cycles of four here, 8 of 12 sequences), the
  // backward's others repeat the covered ones' inputs, all 8 a block at a
  // time. Every covered element of the defaults' outputs is held to the
  // reference, forward and both backward modes; poisoned and unrun, every
  // one of them fails.
  Case c = packed(std::vector<int64_t>(12, 16384), std::vector<int64_t>(12, 16384), 8, 2, 64, true);
  attention::Call call = callOf(c);
  const char *size = "packed, 1424 to 16384 queries a sequence, 96162 in all; its first 8 "
                     "sequences checked";
  auto fwd = attention::specOf(call, target);
  ASSERT_TRUE(bool(fwd)) << llvm::toString(fwd.takeError());
  expectTheTunersCheckPasses(*fwd, {""}, loadBuilt, size);
  for (bool deterministic : {false, true}) {
    call.deterministic = deterministic;
    auto bwd = attention::backwardSpecOf(call, target);
    ASSERT_TRUE(bool(bwd)) << llvm::toString(bwd.takeError());
    expectTheTunersCheckPasses(*bwd, {""}, loadBuilt, size);
  }
}

TEST_F(GpuAttention, TheTunersReferenceAgreesWithFloat64AcrossTheCoverage) {
  // Each harness checks the device reference against float64 on its small
  // problem before it judges a candidate at the tuning size (prepare fails
  // otherwise): head dims 64, 128 and 256, both types, causal or not, GQA
  // and MQA, cross lengths, every layout; forward and backward (the
  // backward's reference also makes the tuning problem's O and LSE). The
  // default candidate of each passes both checks.
  std::vector<Case> cases = {
      {2, 1000, 1000, 4, 2, 64, true, Layout::BSHD},
      {1, 700, 300, 4, 1, 128, false, Layout::BHSD, DType::F16},
      {1, 520, 520, 2, 2, 256, true, Layout::BSHD},
      {1, 300, 900, 8, 1, 64, false, Layout::BSHD, DType::F16},
      packed({1500, 1500}, {1500, 1500}, 8, 1, 128, true),
      packed({600, 600}, {900, 900}, 4, 2, 256, false, "", 0, DType::F16),
  };
  for (const Case &c : cases)
    expectTheDefaultsPassTheTunersCheck(c);
}

TEST_F(GpuAttention, TheTunersReferenceFindsOneWrongElement) {
  // At the tuning size a candidate is held to the device reference element
  // by element: the default forward passes, and one element of its O moved
  // by 5 % (or made NaN) is found, by its index.
  Case c{2, 1100, 1100, 4, 2, 128, true, Layout::BSHD};
  attention::Call call = callOf(c);
  auto spec = attention::specOf(call, target);
  ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
  auto kernel = loadBuilt(*spec, TileConfig());
  ASSERT_TRUE(bool(kernel)) << llvm::toString(kernel.takeError());
  auto ref = attention::Reference::load(target);
  ASSERT_TRUE(bool(ref)) << llvm::toString(ref.takeError());
  size_t n = size_t(c.b * c.sq * c.hq * c.d), nk = size_t(c.b * c.sk * c.hkv * c.d);
  uint64_t seed = tilejit::testing::testSeed();
  SCOPED_TRACE(tilejit::testing::replayHint(seed));
  std::vector<std::optional<DeviceBuffer>> bufs;
  for (size_t bytes : {n * 2, nk * 2, nk * 2, n * 2, size_t(c.b * c.hq * c.sq) * 4, n * 4, n * 4,
                       size_t(c.b * c.hq * c.sq) * 4, size_t(16)}) {
    auto b = DeviceBuffer::allocate(bytes);
    ASSERT_TRUE(bool(b)) << llvm::toString(b.takeError());
    bufs.emplace_back(std::move(*b));
  }
  for (int i = 0; i < 3; ++i)
    ASSERT_FALSE(bool(bufs[size_t(i)]->upload(randomValues(c.dt, i ? nk : n, seed * 3 + i))));
  call.q = bufs[0]->ptr();
  call.k = bufs[1]->ptr();
  call.v = bufs[2]->ptr();
  call.o = bufs[3]->ptr();
  call.lse = bufs[4]->ptr();
  ASSERT_FALSE(bool(bufs[3]->fill(0xFF)));
  ASSERT_FALSE(bool(attention::launch(*kernel, call, target.smCount(), nullptr)));
  ASSERT_FALSE(
      bool((*ref)->forward(call, c.b, bufs[5]->ptr(), bufs[6]->ptr(), bufs[7]->ptr(), 0, nullptr)));
  auto compare = [&] {
    return (*ref)->compare(c.dt, call.o, bufs[5]->ptr(), bufs[6]->ptr(), int64_t(n), 1.6e-2, 8e-3,
                           1e-4, bufs[8]->ptr(), nullptr);
  };
  auto clean = compare();
  ASSERT_TRUE(bool(clean)) << llvm::toString(clean.takeError());
  EXPECT_EQ(clean->count, 0u) << "element " << clean->first << " = " << clean->got << ", expected "
                              << clean->ref;
  auto drv = CudaDriver::get();
  ASSERT_TRUE(bool(drv));
  for (size_t at : {n - 1, n / 3 + 17, size_t(5)}) {
    uint16_t word = 0;
    ASSERT_EQ(drv->cuMemcpyDtoH_v2(&word, call.o + at * 2, 2), CUDA_SUCCESS);
    float value = bf16ToFloat(word);
    for (uint16_t wrong :
         {floatToBf16(value * 1.05f + (value >= 0 ? 0.05f : -0.05f)), uint16_t(0xFFFF)}) {
      ASSERT_EQ(drv->cuMemcpyHtoD_v2(call.o + at * 2, &wrong, 2), CUDA_SUCCESS);
      auto found = compare();
      ASSERT_TRUE(bool(found)) << llvm::toString(found.takeError());
      EXPECT_EQ(found->count, 1u) << "element " << at;
      EXPECT_EQ(found->first, int64_t(at));
    }
    ASSERT_EQ(drv->cuMemcpyHtoD_v2(call.o + at * 2, &word, 2), CUDA_SUCCESS);
  }
}

TEST_F(GpuAttention, AFusedWinnerRunsOnlyInTheModeItWasBuiltFor) {
  // The same call's two specs, deterministic or not, are tuned and stored
  // apart. A fused winner stored for the nondeterministic one is handed out
  // for it and not for the deterministic one, which gets its default; one
  // stored for a deterministic spec (here MQA under a causal mask at head
  // dim 128) is built to add in order (the flags its last argument). An
  // engine builds nondeterministic specs only where allowed and not in
  // deterministic mode.
  TempDir dir;
  attention::Call call = callOf({2, 300, 300, 4, 2, 128, true});
  call.deterministic = false;
  auto fast = attention::backwardSpecOf(call, target);
  ASSERT_TRUE(bool(fast)) << llvm::toString(fast.takeError());
  call.deterministic = true;
  auto det = attention::backwardSpecOf(call, target);
  ASSERT_TRUE(bool(det)) << llvm::toString(det.takeError());
  EXPECT_NE(tuneKey(*fast), tuneKey(*det));
  call.hkv = 1;
  auto ordered = attention::backwardSpecOf(call, target);
  ASSERT_TRUE(bool(ordered)) << llvm::toString(ordered.takeError());
  const char *fused = "bn=128 consumers=2 fused=1 kv_bm=64 overlap=1 stages=2";
  EngineOptions o;
  o.dbPath = dir.file("a.db");
  {
    auto store = Store::open(o.dbPath);
    ASSERT_TRUE(bool(store)) << llvm::toString(store.takeError());
    for (const KernelSpec *s : {&*fast, &*ordered})
      ASSERT_FALSE(bool((*store)->setWinner({tuneKey(*s), fused, "", 0.5, "planted", 0})));
  }
  auto engine = Engine::create(o);
  ASSERT_TRUE(bool(engine)) << llvm::toString(engine.takeError());
  auto kf = (*engine)->get(*fast);
  ASSERT_TRUE(bool(kf)) << llvm::toString(kf.takeError());
  EXPECT_TRUE(attention::fusedBackward(*kf));
  EXPECT_EQ(kf->key(), kernelKey(*fast, *TileConfig::parse(fused)));
  auto kd = (*engine)->get(*det);
  ASSERT_TRUE(bool(kd)) << llvm::toString(kd.takeError());
  EXPECT_FALSE(attention::fusedBackward(*kd));
  EXPECT_EQ(kd->key(), kernelKey(*det, getTemplate(*det).defaultConfig(*det)));
  auto ko = (*engine)->get(*ordered);
  ASSERT_TRUE(bool(ko)) << llvm::toString(ko.takeError());
  EXPECT_TRUE(attention::fusedBackward(*ko));
  EXPECT_EQ(ko->key(), kernelKey(*ordered, *TileConfig::parse(fused)));
  EXPECT_EQ(ko->entry(1).params.size(), 15u) << "ordered: the flags come last";
  EXPECT_EQ(ko->entry(1).params[14].kind, ParamInfo::View) << "the flags, not persist's cap";
  EXPECT_FALSE((*engine)->nondeterministic()) << "not allowed by default";
  (*engine)->setAllowNondeterministic(true);
  EXPECT_TRUE((*engine)->nondeterministic());
  (*engine)->setDeterministic(true);
  EXPECT_FALSE((*engine)->nondeterministic()) << "deterministic mode overrides it";
}

} // namespace
