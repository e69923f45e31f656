//===- GemmHarness.cpp - tuning harness for GEMM ----------------------------===//
//
// M is given at launch, so a candidate is checked on at most 256 rows (every
// tile column, a ragged last tile row when M is not a multiple of the tile)
// with a grid of at most 16 programs, so that each program walks several
// tiles through the ring, and timed on the full problem with every
// multiprocessor, each with its own random inputs. Verification: every
// element of the checked D must be written (D is poisoned first) and finite,
// and 512 elements (the four corners among them) must match a float64 dot
// product of the inputs, within bf16/f16 rounding of the result plus f32
// accumulation of K products.
//
//===----------------------------------------------------------------------===//
#include "autotune/Harness.h"

#include <cmath>
#include <random>

#include "ops/gemm/GemmLaunch.h"
#include "runtime/CudaDriver.h"
#include "runtime/DeviceBuffer.h"

namespace tilejit {
namespace {

llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

class GemmHarness : public OpHarness {
public:
  llvm::Error prepare(const KernelSpec &ks, uint64_t seed) override {
    if (!gemm::isGemm(ks))
      return fail("the GEMM harness cannot measure " + std::string(ks.opName()));
    gemm::Params p(ks);
    auto info = queryDevice(0);
    if (!info)
      return info.takeError();
    sms_ = info->smCount;
    full_ = call_ = gemm::callOf(p);
    call_.m = std::min<int64_t>(p.m, 256);
    call_.maxPrograms = std::min(sms_, 16);
    int ab = dtypeBytes(p.ab), ob = dtypeBytes(p.out);

    // The checked problem and its reference.
    a_ = randomValues(p.ab, size_t(call_.m * p.k), seed * 4 + 1);
    b_ = randomValues(p.ab, size_t(p.k * p.n), seed * 4 + 2);
    c_ = p.hasC ? randomValues(p.out, size_t(call_.m * p.n), seed * 4 + 3)
                : std::vector<unsigned char>();
    bias_ =
        p.hasBias ? randomValues(p.ab, size_t(p.n), seed * 4 + 6) : std::vector<unsigned char>();
    if (auto e = allocate(da_, a_.size()))
      return e;
    if (auto e = allocate(db_, b_.size()))
      return e;
    if (auto e = allocate(dd_, size_t(call_.m * p.n) * ob))
      return e;
    if (auto e = da_.upload(a_))
      return e;
    if (auto e = db_.upload(b_))
      return e;
    if (p.hasC) {
      if (auto e = allocate(dc_, c_.size()))
        return e;
      if (auto e = dc_.upload(c_))
        return e;
    }
    if (p.hasBias) {
      if (auto e = allocate(dbias_, bias_.size()))
        return e;
      if (auto e = dbias_.upload(bias_))
        return e;
    }
    call_.a = da_.ptr();
    call_.b = db_.ptr();
    call_.d = dd_.ptr();
    call_.c = p.hasC ? dc_.ptr() : 0;
    call_.bias = p.hasBias ? dbias_.ptr() : 0;

    std::mt19937_64 rng(seed * 4 + 4);
    std::uniform_int_distribution<int64_t> pm(0, call_.m - 1), pn(0, p.n - 1);
    samples_.clear();
    for (auto [i, j] : {std::pair<int64_t, int64_t>{0, 0},
                        {0, p.n - 1},
                        {call_.m - 1, 0},
                        {call_.m - 1, p.n - 1}})
      samples_.push_back({i, j, 0, 0});
    while (samples_.size() < 512)
      samples_.push_back({pm(rng), pn(rng), 0, 0});
    for (Sample &s : samples_) {
      double sum = 0, mag = 0;
      for (int64_t k = 0; k < p.k; ++k) {
        size_t ai = p.transA ? size_t(k * call_.m + s.i) : size_t(s.i * p.k + k);
        size_t bi = p.transB ? size_t(s.j * p.k + k) : size_t(k * p.n + s.j);
        double x = loadElement(a_.data(), p.ab, ai), y = loadElement(b_.data(), p.ab, bi);
        sum += x * y;
        mag += std::fabs(x * y);
      }
      if (p.hasC)
        sum += loadElement(c_.data(), p.out, size_t(s.i * p.n + s.j));
      if (p.hasBias)
        sum += loadElement(bias_.data(), p.ab, size_t(s.j));
      s.ref = sum;
      s.mag = mag;
    }

    // The timed problem: full size, its own random inputs, no reference.
    if (auto e = allocate(ta_, size_t(full_.m * p.k) * ab))
      return e;
    if (auto e = allocate(td_, size_t(full_.m * p.n) * ob))
      return e;
    if (auto e = ta_.upload(randomValues(p.ab, size_t(full_.m * p.k), seed * 4 + 5)))
      return e;
    full_.a = ta_.ptr();
    full_.b = db_.ptr();
    full_.d = td_.ptr();
    full_.c = p.hasC ? td_.ptr() : 0; // accumulates into D, as main_grad does
    full_.bias = call_.bias;
    return llvm::Error::success();
  }

  llvm::Error bind(const LoadedKernel &) override { return llvm::Error::success(); }

  llvm::Error run(const LoadedKernel &kernel, CUstream stream, bool check) override {
    return gemm::launch(kernel, check ? call_ : full_, sms_, stream);
  }

  llvm::Error poison(CUstream stream) override { return dd_.fill(0xFF, stream); }

  llvm::Error verify() override {
    size_t n = size_t(call_.m * call_.n);
    std::vector<unsigned char> d(n * size_t(dtypeBytes(call_.out)));
    if (auto e = dd_.download(d))
      return e;
    // Every element written and finite: the exponent bits, word by word (a
    // conversion per element took most of a candidate's time at 29M elements).
    size_t bad = n;
    if (call_.out == DType::F32) {
      const uint32_t *w = reinterpret_cast<const uint32_t *>(d.data());
      for (size_t i = 0; i < n && bad == n; ++i)
        if ((w[i] & 0x7F800000u) == 0x7F800000u)
          bad = i;
    } else {
      const uint16_t *h = reinterpret_cast<const uint16_t *>(d.data());
      uint16_t mask = call_.out == DType::BF16 ? 0x7F80 : 0x7C00;
      for (size_t i = 0; i < n && bad == n; ++i)
        if ((h[i] & mask) == mask)
          bad = i;
    }
    if (bad != n)
      return fail("D[" + llvm::Twine(int64_t(bad) / call_.n) + ", " +
                  llvm::Twine(int64_t(bad) % call_.n) + "] is not finite (not written?)");
    double rounding = call_.out == DType::BF16 ? 1e-2 : call_.out == DType::F16 ? 2e-3 : 1e-6;
    for (const Sample &s : samples_) {
      double got = loadElement(d.data(), call_.out, size_t(s.i * call_.n + s.j));
      double allowed = rounding * std::fabs(s.ref) + 1e-4 * s.mag + 1e-6;
      if (!(std::fabs(got - s.ref) <= allowed))
        return fail("D[" + llvm::Twine(s.i) + ", " + llvm::Twine(s.j) +
                    "] = " + std::to_string(got) + ", expected " + std::to_string(s.ref) +
                    " (allowed error " + std::to_string(allowed) + ")");
    }
    return llvm::Error::success();
  }

private:
  struct Sample {
    int64_t i, j;
    double ref, mag;
  };
  gemm::Call call_, full_;
  int sms_ = 0;
  std::vector<unsigned char> a_, b_, c_, bias_;
  std::vector<Sample> samples_;
  DeviceBuffer da_, db_, dc_, dd_, ta_, td_, dbias_;
};

} // namespace

std::unique_ptr<OpHarness> makeGemmHarness() { return std::make_unique<GemmHarness>(); }

} // namespace tilejit
