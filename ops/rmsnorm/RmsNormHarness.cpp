//===- RmsNormHarness.cpp - tuning harness for RMSNorm forward/backward -----===//
//
// The kernels take the row count at launch, so a candidate is checked on a
// smaller problem (at most 2053 rows: enough for every persistent program to
// loop, with a ragged last tile) and timed on the full one. Verification: every
// output element must be written (outputs are poisoned first) and finite; up
// to 64 rows spread over the checked tensor (the first and the last among
// them) are compared with a float64 reference, and so is all of dw.
//
//===----------------------------------------------------------------------===//
#include "autotune/Harness.h"
#include "ops/rmsnorm/RmsNormDecl.h"

#include <cmath>
#include <cstring>
#include <random>

#include "ops/rmsnorm/RmsNormLaunch.h"
#include "runtime/DeviceBuffer.h"

namespace tilejit {
namespace {

llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

float load(const std::vector<unsigned char> &b, DType t, size_t i) {
  return loadElement(b.data(), t, i);
}

void store(std::vector<unsigned char> &b, DType t, size_t i, float v) {
  storeElement(b.data(), t, i, v);
}

double tolerance(DType t) { return t == DType::BF16 ? 1e-2 : t == DType::F16 ? 2e-3 : 1e-5; }

class RmsNormHarness : public OpHarness {
public:
  explicit RmsNormHarness(bool backward) : backward_(backward) {}

  llvm::Error prepare(const KernelSpec &ks, uint64_t seed) override {
    if (!rmsnorm::isRmsNorm(ks))
      return fail("the RMSNorm harness cannot measure " + std::string(ks.opName()));
    const rmsnorm::Params spec = rmsnorm::Params::of(ks);
    spec_ = spec;
    fullRows_ = spec.rows;
    rows_ = std::min<int64_t>(spec.rows, 2053);
    cols_ = spec.cols;
    size_t n = size_t(rows_ * cols_);
    int eb = dtypeBytes(spec.dtype), wb = dtypeBytes(spec.wdtype);
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    x_.assign(n * eb, 0);
    dy_.assign(backward_ ? n * eb : 0, 0);
    w_.assign(cols_ * wb, 0);
    fillNormal(x_, spec.dtype, n, seed * 4 + 1);
    if (backward_)
      fillNormal(dy_, spec.dtype, n, seed * 4 + 2);
    for (int64_t j = 0; j < cols_; ++j)
      store(w_, spec.wdtype, j, (spec.zeroCenteredGamma ? 0.0f : 1.0f) + 0.1f * normal(rng));

    // Sampled rows: spread evenly, always the first and the last.
    sample_.clear();
    int64_t want = std::min<int64_t>(rows_, 64);
    for (int64_t k = 0; k < want; ++k)
      sample_.push_back(want == 1 ? 0 : k * (rows_ - 1) / (want - 1));

    // Float64 reference for the sampled rows (and all of dw), plus f32 rstd
    // for every row as the backward kernel's input.
    rstd_.assign(rows_, 0.0f);
    std::vector<double> g(cols_);
    for (int64_t j = 0; j < cols_; ++j)
      g[j] = load(w_, spec.wdtype, j) + (spec.zeroCenteredGamma ? 1.0 : 0.0);
    refOut_.assign(sample_.size() * cols_, 0.0);
    refRstd_.assign(sample_.size(), 0.0);
    refDw_.assign(backward_ ? cols_ : 0, 0.0);
    std::vector<double> rowRstd(rows_);
    for (int64_t i = 0; i < rows_; ++i) {
      double ss = 0;
      for (int64_t j = 0; j < cols_; ++j) {
        double v = load(x_, spec.dtype, i * cols_ + j);
        ss += v * v;
      }
      rowRstd[i] = 1.0 / std::sqrt(ss / double(cols_) + eps_);
      rstd_[i] = float(rowRstd[i]);
      if (backward_)
        for (int64_t j = 0; j < cols_; ++j)
          refDw_[j] += double(load(dy_, spec.dtype, i * cols_ + j)) *
                       double(load(x_, spec.dtype, i * cols_ + j)) * double(rstd_[i]);
    }
    for (size_t s = 0; s < sample_.size(); ++s) {
      int64_t i = sample_[s];
      refRstd_[s] = rowRstd[i];
      double r = backward_ ? double(rstd_[i]) : rowRstd[i], dot = 0;
      if (backward_)
        for (int64_t j = 0; j < cols_; ++j)
          dot += double(load(dy_, spec.dtype, i * cols_ + j)) * g[j] *
                 double(load(x_, spec.dtype, i * cols_ + j)) * r;
      for (int64_t j = 0; j < cols_; ++j) {
        double xv = load(x_, spec.dtype, i * cols_ + j);
        if (!backward_) {
          refOut_[s * cols_ + j] = xv * r * g[j];
        } else {
          double dyg = double(load(dy_, spec.dtype, i * cols_ + j)) * g[j];
          refOut_[s * cols_ + j] = r * (dyg - xv * r * dot / double(cols_));
        }
      }
    }

    auto alloc = [](DeviceBuffer &b, size_t bytes) -> llvm::Error {
      auto buf = DeviceBuffer::allocate(bytes);
      if (!buf)
        return buf.takeError();
      b = std::move(*buf);
      return llvm::Error::success();
    };
    if (auto e = alloc(dx_, x_.size()))
      return e;
    if (auto e = alloc(dout_, x_.size()))
      return e;
    // The timed problem: full size, its own random inputs, no reference.
    size_t fullBytes = size_t(fullRows_ * cols_) * eb;
    if (auto e = alloc(tx_, fullBytes))
      return e;
    if (auto e = alloc(tout_, fullBytes))
      return e;
    if (auto e = alloc(trstd_, size_t(fullRows_) * 4))
      return e;
    if (backward_) {
      if (auto e = alloc(tdy_, fullBytes))
        return e;
      if (auto e = alloc(tdw_, w_.size()))
        return e;
    }
    if (auto e = alloc(dw_, w_.size()))
      return e;
    if (auto e = alloc(drstd_, size_t(rows_) * 4))
      return e;
    if (auto e = dx_.upload(x_.data(), x_.size()))
      return e;
    if (auto e = dw_.upload(w_.data(), w_.size()))
      return e;
    if (backward_) {
      if (auto e = alloc(ddy_, dy_.size()))
        return e;
      if (auto e = alloc(ddw_, w_.size()))
        return e;
      if (auto e = ddy_.upload(dy_.data(), dy_.size()))
        return e;
      if (auto e = drstd_.upload(rstd_.data(), rstd_.size() * 4))
        return e;
    }
    // The timed inputs repeat the checked random rows (never zeros or a
    // constant, which run faster than real data).
    if (auto e = repeatOnDevice(tx_, 0, dx_.ptr(), x_.size()))
      return e;
    if (auto e = repeatOnDevice(trstd_, 0, drstd_.ptr(), size_t(rows_) * 4))
      return e;
    if (backward_)
      if (auto e = repeatOnDevice(tdy_, 0, ddy_.ptr(), dy_.size()))
        return e;
    return llvm::Error::success();
  }

  llvm::Error bind(const LoadedKernel &kernel) override {
    if (!backward_ || kernel.workspaceBytes() <= int64_t(ws_.bytes()))
      return llvm::Error::success();
    auto buf = DeviceBuffer::allocate(size_t(kernel.workspaceBytes()));
    if (!buf)
      return buf.takeError();
    ws_ = std::move(*buf);
    return llvm::Error::success();
  }

  llvm::Error run(const LoadedKernel &kernel, CUstream stream, bool check) override {
    if (!backward_) {
      RmsNormForward a;
      a.dtype = spec_.dtype;
      a.wdtype = spec_.wdtype;
      a.x = check ? dx_.ptr() : tx_.ptr();
      a.w = dw_.ptr();
      a.y = check ? dout_.ptr() : tout_.ptr();
      a.rstd = check ? drstd_.ptr() : trstd_.ptr();
      a.rows = check ? rows_ : fullRows_;
      a.cols = cols_;
      a.eps = float(eps_);
      a.zeroCenteredGamma = spec_.zeroCenteredGamma;
      return launchRmsNormForward(kernel, a, stream);
    }
    RmsNormBackward a;
    a.dtype = spec_.dtype;
    a.wdtype = spec_.wdtype;
    a.dy = check ? ddy_.ptr() : tdy_.ptr();
    a.x = check ? dx_.ptr() : tx_.ptr();
    a.rstd = check ? drstd_.ptr() : trstd_.ptr();
    a.w = dw_.ptr();
    a.dx = check ? dout_.ptr() : tout_.ptr();
    a.dw = check ? ddw_.ptr() : tdw_.ptr();
    a.workspace = ws_.ptr();
    a.rows = check ? rows_ : fullRows_;
    a.cols = cols_;
    a.zeroCenteredGamma = spec_.zeroCenteredGamma;
    return launchRmsNormBackward(kernel, a, stream);
  }

  llvm::Error poison(CUstream stream) override {
    if (auto e = dout_.fill(0xFF, stream))
      return e;
    if (!backward_)
      return drstd_.fill(0xFF, stream);
    return ddw_.fill(0xFF, stream);
  }

  llvm::Error verify() override {
    std::vector<unsigned char> out(x_.size());
    if (auto e = dout_.download(out.data(), out.size()))
      return e;
    // Every element written and finite: checked on the raw bits (an all-ones
    // exponent is NaN or infinity; the poison is NaN).
    int64_t bad = firstNonFinite(out, spec_.dtype);
    if (bad >= 0)
      return fail(std::string(backward_ ? "dx" : "y") + " element " + std::to_string(bad) +
                  " is not finite (unwritten or overflowed)");
    if (auto e = compare(backward_ ? "dx" : "y", out, spec_.dtype, refOut_, tolerance(spec_.dtype)))
      return e;
    if (!backward_) {
      std::vector<unsigned char> r(size_t(rows_) * 4);
      if (auto e = drstd_.download(r.data(), r.size()))
        return e;
      std::vector<unsigned char> sampled(sample_.size() * 4);
      for (size_t s = 0; s < sample_.size(); ++s)
        std::memcpy(&sampled[s * 4], &r[sample_[s] * 4], 4);
      if (int64_t i = firstNonFinite(r, DType::F32); i >= 0)
        return fail("rstd element " + std::to_string(i) + " is not finite");
      return compareFlat("rstd", sampled, DType::F32, refRstd_, 1e-5);
    }
    std::vector<unsigned char> dw(w_.size());
    if (auto e = ddw_.download(dw.data(), dw.size()))
      return e;
    return compareFlat("dw", dw, spec_.wdtype, refDw_, tolerance(spec_.wdtype));
  }

private:
  /// Standard normal values into elements [0, n) of `b`, on all cores: blocks
  /// of 2^16 elements, each from its own generator seeded by (seed, block),
  /// so the values do not depend on the number of threads.
  static void fillNormal(std::vector<unsigned char> &b, DType t, size_t n, uint64_t seed) {
    constexpr size_t kBlock = size_t(1) << 16;
    parallelBlocks(n, kBlock, [&](size_t begin, size_t end) {
      std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + begin / kBlock);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      for (size_t i = begin; i < end; ++i)
        storeElement(b.data(), t, i, normal(rng));
    });
  }

  static int64_t firstNonFinite(const std::vector<unsigned char> &b, DType t) {
    if (t == DType::F32) {
      const size_t n = b.size() / 4;
      for (size_t i = 0; i < n; ++i) {
        uint32_t u;
        std::memcpy(&u, &b[i * 4], 4);
        if ((u & 0x7f800000u) == 0x7f800000u)
          return int64_t(i);
      }
      return -1;
    }
    const uint16_t mask = t == DType::BF16 ? 0x7f80 : 0x7c00;
    const size_t n = b.size() / 2;
    for (size_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, &b[i * 2], 2);
      if ((h & mask) == mask)
        return int64_t(i);
    }
    return -1;
  }

  /// Relative error of the sampled rows of `out` against `ref`.
  llvm::Error compare(const char *what, const std::vector<unsigned char> &out, DType t,
                      const std::vector<double> &ref, double tol) {
    std::vector<unsigned char> sampled(sample_.size() * cols_ * dtypeBytes(t));
    int eb = dtypeBytes(t);
    for (size_t s = 0; s < sample_.size(); ++s)
      std::memcpy(&sampled[s * cols_ * eb], &out[sample_[s] * cols_ * eb], cols_ * eb);
    return compareFlat(what, sampled, t, ref, tol);
  }

  llvm::Error compareFlat(const char *what, const std::vector<unsigned char> &out, DType t,
                          const std::vector<double> &ref, double tol) {
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      double v = load(out, t, i);
      if (!std::isfinite(v))
        return fail(std::string(what) + " element " + std::to_string(i) + " is not finite");
      num += (v - ref[i]) * (v - ref[i]);
      den += ref[i] * ref[i];
    }
    // Rows whose terms cancel (tiny hidden sizes) have tiny outputs; measure
    // against 1 then, as the absolute scale of the inputs.
    double err = std::sqrt(num / std::max(den, double(ref.size())));
    if (!(err < tol))
      return fail(std::string(what) + " differs from the float64 reference: relative error " +
                  std::to_string(err) + " (tolerance " + std::to_string(tol) + ")");
    return llvm::Error::success();
  }

  bool backward_;
  rmsnorm::Params spec_;
  int64_t rows_ = 0, fullRows_ = 0, cols_ = 0;
  const double eps_ = 1e-5;
  std::vector<unsigned char> x_, dy_, w_;
  std::vector<float> rstd_;
  std::vector<int64_t> sample_;
  std::vector<double> refOut_, refRstd_, refDw_;
  DeviceBuffer dx_, ddy_, dw_, dout_, ddw_, drstd_, ws_;
  DeviceBuffer tx_, tdy_, tout_, trstd_, tdw_; // the timed, full-size problem
};

} // namespace

std::unique_ptr<OpHarness> makeRmsNormHarness(bool backward) {
  return std::make_unique<RmsNormHarness>(backward);
}

} // namespace tilejit
