//===- AttentionHarness.cpp - tuning harness for attention forward ----------===//
//
// The sequence lengths and the batch are launch-time sizes: a candidate is
// checked on one sequence of at most 333 queries and keys (not a multiple
// of any tile; a causal spec keeps sq == sk when they are equal) with every
// head of the spec, and timed on the tuning problem (the spec's bucketed
// sizes), each with its own random inputs. Verification: every element of
// the checked O and LSE must be written (they are poisoned first) and
// finite, and 48 sampled rows (the last row of the last head among them)
// must match a float64 softmax(scale Q K^T) V and log-sum-exp within bf16/f16
// rounding of O plus the rounding of P to 16 bits.
//
//===----------------------------------------------------------------------===//
#include "autotune/Harness.h"

#include <cmath>
#include <random>

#include "ops/attention/AttentionLaunch.h"
#include "runtime/DeviceBuffer.h"

namespace tilejit {
namespace {

llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

/// Device buffers for Q, K, V, O and LSE of one call, filled from `seed`.
struct Buffers {
  DeviceBuffer q, k, v, o, lse;
  std::vector<unsigned char> hq, hk, hv; // host copies, for the reference

  llvm::Error make(attention::Call &c, uint64_t seed, bool keepHost) {
    size_t nq = size_t(c.b * c.sq * c.hq * c.d), nk = size_t(c.b * c.sk * c.hkv * c.d);
    int e = dtypeBytes(c.dt);
    auto q_ = randomValues(c.dt, nq, seed * 8 + 1), k_ = randomValues(c.dt, nk, seed * 8 + 2),
         v_ = randomValues(c.dt, nk, seed * 8 + 3);
    for (auto [buf, bytes] : {std::pair<DeviceBuffer *, size_t>{&q, nq * e},
                              {&k, nk * e},
                              {&v, nk * e},
                              {&o, nq * e},
                              {&lse, size_t(c.b * c.hq * c.sq) * 4}})
      if (auto err = allocate(*buf, bytes))
        return err;
    if (auto err = q.upload(q_))
      return err;
    if (auto err = k.upload(k_))
      return err;
    if (auto err = v.upload(v_))
      return err;
    c.q = q.ptr();
    c.k = k.ptr();
    c.v = v.ptr();
    c.o = o.ptr();
    c.lse = lse.ptr();
    if (keepHost) {
      hq = std::move(q_);
      hk = std::move(k_);
      hv = std::move(v_);
    }
    return llvm::Error::success();
  }
};

class AttentionHarness : public OpHarness {
public:
  llvm::Error prepare(const KernelSpec &ks, uint64_t seed) override {
    if (!attention::isForward(ks))
      return fail("the attention harness cannot measure " + std::string(ks.opName()));
    attention::Params p(ks);
    full_ = check_ = attention::callOf(p);
    check_.b = 1;
    check_.sq = std::min<int64_t>(p.sq, 333);
    check_.sk = p.sq == p.sk ? check_.sq : std::min<int64_t>(p.sk, 333);
    if (auto e = checked_.make(check_, seed, /*keepHost=*/true))
      return e;
    if (auto e = timed_.make(full_, seed + 1000003, /*keepHost=*/false))
      return e;

    // The sampled rows and their float64 reference.
    std::mt19937_64 rng(seed * 8 + 4);
    std::uniform_int_distribution<int64_t> ph(0, check_.hq - 1), pr(0, check_.sq - 1);
    samples_.clear();
    samples_.push_back({check_.hq - 1, check_.sq - 1, {}, {}, 0});
    samples_.push_back({0, 0, {}, {}, 0});
    while (samples_.size() < 48)
      samples_.push_back({ph(rng), pr(rng), {}, {}, 0});
    const attention::Call &c = check_;
    double scale = 1.0 / std::sqrt(double(c.d));
    auto at = [&](int64_t s, int64_t h, int64_t row, int64_t head) {
      return c.layout == attention::Layout::BSHD ? size_t((row * h + head) * c.d)
                                                 : size_t((head * s + row) * c.d);
    };
    std::vector<double> w(size_t(c.sk));
    for (Sample &s : samples_) {
      int64_t kvh = s.head / (c.hq / c.hkv), keys = c.causal ? std::min(c.sk, s.row + 1) : c.sk;
      size_t qo = at(c.sq, c.hq, s.row, s.head);
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < keys; ++j) {
        size_t ko = at(c.sk, c.hkv, j, kvh);
        double dot = 0;
        for (int64_t x = 0; x < c.d; ++x)
          dot += double(loadElement(checked_.hq.data(), c.dt, qo + size_t(x))) *
                 double(loadElement(checked_.hk.data(), c.dt, ko + size_t(x)));
        w[size_t(j)] = scale * dot;
        mx = std::max(mx, w[size_t(j)]);
      }
      for (int64_t j = 0; j < keys; ++j)
        sum += (w[size_t(j)] = std::exp(w[size_t(j)] - mx));
      s.o.assign(size_t(c.d), 0.0);
      s.mag.assign(size_t(c.d), 0.0);
      for (int64_t j = 0; j < keys; ++j) {
        size_t vo = at(c.sk, c.hkv, j, kvh);
        for (int64_t x = 0; x < c.d; ++x) {
          double t =
              w[size_t(j)] / sum * double(loadElement(checked_.hv.data(), c.dt, vo + size_t(x)));
          s.o[size_t(x)] += t;
          s.mag[size_t(x)] += std::fabs(t);
        }
      }
      s.lse = mx + std::log(sum);
    }
    return llvm::Error::success();
  }

  llvm::Error bind(const LoadedKernel &) override { return llvm::Error::success(); }

  llvm::Error run(const LoadedKernel &kernel, CUstream stream, bool check) override {
    return attention::launch(kernel, check ? check_ : full_, stream);
  }

  llvm::Error poison(CUstream stream) override {
    if (auto e = checked_.o.fill(0xFF, stream))
      return e;
    return checked_.lse.fill(0xFF, stream);
  }

  llvm::Error verify() override {
    const attention::Call &c = check_;
    size_t nq = size_t(c.sq * c.hq * c.d);
    std::vector<unsigned char> o(nq * size_t(dtypeBytes(c.dt)));
    std::vector<float> lse(size_t(c.hq * c.sq));
    if (auto e = checked_.o.download(o))
      return e;
    if (auto e = checked_.lse.download(lse))
      return e;
    for (size_t i = 0; i < nq; ++i)
      if (!std::isfinite(loadElement(o.data(), c.dt, i)))
        return fail("O element " + llvm::Twine(int64_t(i)) + " is not finite (not written?)");
    for (size_t i = 0; i < lse.size(); ++i)
      if (!std::isfinite(lse[i]))
        return fail("LSE element " + llvm::Twine(int64_t(i)) + " is not finite (not written?)");
    double rounding = c.dt == DType::BF16 ? 1.6e-2 : 2e-3,
           pRounding = c.dt == DType::BF16 ? 8e-3 : 1e-3;
    for (const Sample &s : samples_) {
      size_t base = c.layout == attention::Layout::BSHD ? size_t((s.row * c.hq + s.head) * c.d)
                                                        : size_t((s.head * c.sq + s.row) * c.d);
      for (int64_t x = 0; x < c.d; ++x) {
        double got = loadElement(o.data(), c.dt, base + size_t(x)), ref = s.o[size_t(x)];
        double allowed = rounding * std::fabs(ref) + pRounding * s.mag[size_t(x)] + 1e-4;
        if (!(std::fabs(got - ref) <= allowed))
          return fail("O[head " + llvm::Twine(s.head) + ", row " + llvm::Twine(s.row) + ", " +
                      llvm::Twine(x) + "] = " + std::to_string(got) + ", expected " +
                      std::to_string(ref) + " (allowed error " + std::to_string(allowed) + ")");
      }
      double got = lse[size_t(s.head * c.sq + s.row)];
      if (!(std::fabs(got - s.lse) <= 2e-5 * std::fabs(s.lse) + 2e-5))
        return fail("LSE[head " + llvm::Twine(s.head) + ", row " + llvm::Twine(s.row) +
                    "] = " + std::to_string(got) + ", expected " + std::to_string(s.lse));
    }
    return llvm::Error::success();
  }

private:
  struct Sample {
    int64_t head, row;
    std::vector<double> o, mag;
    double lse;
  };
  attention::Call check_, full_;
  Buffers checked_, timed_;
  std::vector<Sample> samples_;
};

} // namespace

std::unique_ptr<OpHarness> makeAttentionHarness() { return std::make_unique<AttentionHarness>(); }

} // namespace tilejit
