//===- GemmHarness.cpp - tuning harness for GEMM ----------------------------===//
//
// M is given at launch, so a candidate is checked on at most 256 rows (128
// where N is above 65536; every tile column, a ragged last tile row when M
// is not a multiple of the tile)
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

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "ops/gemm/GemmLaunch.h"
#include "runtime/CudaDriver.h"
#include "runtime/DeviceBuffer.h"

namespace tilejit {
namespace {

llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

/// `buf` = a fresh device buffer holding `packed` (rows x cols of
/// `elemBytes`) as rows `ld` apart, the gaps 0xFF; dense rows (ld = cols) go
/// up without a host copy (an LM head's operands are gigabytes).
llvm::Error uploadPitched(DeviceBuffer &buf, const std::vector<unsigned char> &packed, int64_t rows,
                          int64_t cols, int64_t ld, int elemBytes) {
  size_t e = size_t(elemBytes);
  if (auto err = allocate(buf, size_t(rows * ld) * e))
    return err;
  if (ld == cols)
    return buf.upload(packed);
  std::vector<unsigned char> out(size_t(rows * ld) * e, 0xFF);
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(out.data() + size_t(r * ld) * e, packed.data() + size_t(r * cols) * e,
                size_t(cols) * e);
  return buf.upload(out);
}

/// A leading dimension for rows of `cols`: one past the next 16-byte multiple
/// with `ld` (a spec with ld = 1 is measured on rows that are not packed),
/// else the row itself.
int64_t leadingDim(int64_t cols, int elemBytes, bool ld) {
  int64_t per = 16 / elemBytes;
  return ld ? (cols + per - 1) / per * per + per : cols;
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
    // 256 rows, or 128 where D is very wide (an LM head's 128256 columns:
    // each candidate's checked D is downloaded and scanned whole).
    call_.m = std::min<int64_t>(p.m, p.n > 65536 ? 128 : 256);
    call_.maxPrograms = std::min(sms_, 16);
    int ab = dtypeBytes(p.ab), ob = dtypeBytes(p.out);
    // What the spec compiles for: C and D (on sm_80 A and B too) a leading
    // dimension wide, D off 16 bytes by two elements.
    bool abLd = p.ld && !p.target.hasWgmma();
    int64_t aCols = p.transA ? call_.m : p.k, bRows = p.transB ? p.n : p.k;
    int64_t bCols = p.transB ? p.k : p.n;
    ldd_ = leadingDim(p.n, ob, p.ld);
    dShift_ = p.dAligned ? 0 : 2 * ob;
    call_.ldd = call_.ldc = full_.ldd = full_.ldc = p.ld ? ldd_ : 0;
    call_.lda = abLd ? leadingDim(aCols, ab, true) : 0;
    call_.ldb = full_.ldb = abLd ? leadingDim(bCols, ab, true) : 0;
    full_.lda = abLd ? leadingDim(p.transA ? full_.m : p.k, ab, true) : 0;

    // The checked problem and its reference.
    a_ = randomValues(p.ab, size_t(call_.m * p.k), seed * 4 + 1);
    b_ = randomValues(p.ab, size_t(p.k * p.n), seed * 4 + 2);
    c_ = p.hasC ? randomValues(p.out, size_t(call_.m * p.n), seed * 4 + 3)
                : std::vector<unsigned char>();
    bias_ =
        p.hasBias ? randomValues(p.ab, size_t(p.n), seed * 4 + 6) : std::vector<unsigned char>();
    if (auto e = uploadPitched(da_, a_, p.transA ? p.k : call_.m, aCols,
                               call_.lda ? call_.lda : aCols, ab))
      return e;
    // (B is shared with the timed problem.)
    if (auto e = uploadPitched(db_, b_, bRows, bCols, call_.ldb ? call_.ldb : bCols, ab))
      return e;
    if (auto e = allocate(dd_, size_t(call_.m * ldd_) * ob + size_t(dShift_)))
      return e;
    if (p.hasC)
      if (auto e = uploadPitched(dc_, c_, call_.m, p.n, ldd_, ob))
        return e;
    if (p.hasBias) {
      if (auto e = allocate(dbias_, bias_.size()))
        return e;
      if (auto e = dbias_.upload(bias_))
        return e;
    }
    call_.a = da_.ptr();
    call_.b = db_.ptr();
    call_.d = dd_.ptr() + uint64_t(dShift_);
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
    // The float64 references, the samples spread over the host's threads
    // (512 dot products of an LM head's K = 128256 took a second on one).
    auto reference = [&](size_t begin, size_t end) {
      for (size_t n = begin; n < end; ++n) {
        Sample &s = samples_[n];
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
    };
    // (Blocks of about a million multiply-adds.)
    parallelBlocks(samples_.size(), size_t(std::max<int64_t>(1, (int64_t(1) << 20) / p.k)),
                   reference);

    // The timed problem: full size, its own random inputs, no reference.
    int64_t taRows = p.transA ? p.k : full_.m, taCols = p.transA ? full_.m : p.k;
    int64_t lda = full_.lda ? full_.lda : taCols;
    if (auto e = allocate(td_, size_t(full_.m * ldd_) * ob + size_t(dShift_)))
      return e;
    size_t taElems = size_t(full_.m * p.k);
    constexpr size_t kPool = size_t(64) << 20; // elements
    if (lda == taCols && taElems > kPool) {
      // Gigabytes of A (an LM head's input gradient: 8192 x 128256): a pool
      // of 64M random elements uploaded once, then repeated on the device, as
      // gemm_bench fills its inputs; only the time of this problem is taken.
      if (auto e = allocate(ta_, taElems * size_t(ab)))
        return e;
      if (auto e = ta_.upload(randomValues(p.ab, kPool, seed * 4 + 5)))
        return e;
      size_t poolBytes = kPool * size_t(ab);
      if (auto e = repeatOnDevice(ta_, poolBytes, ta_.ptr(), poolBytes))
        return e;
    } else if (auto e = uploadPitched(ta_, randomValues(p.ab, taElems, seed * 4 + 5), taRows,
                                      taCols, lda, ab)) {
      return e;
    }
    full_.a = ta_.ptr();
    full_.b = db_.ptr();
    full_.d = td_.ptr() + uint64_t(dShift_);
    full_.c = p.hasC ? full_.d : 0; // accumulates into D, as main_grad does
    full_.bias = call_.bias;
    return llvm::Error::success();
  }

  llvm::Error bind(const LoadedKernel &) override { return llvm::Error::success(); }

  llvm::Error run(const LoadedKernel &kernel, CUstream stream, bool check) override {
    return gemm::launch(kernel, check ? call_ : full_, sms_, stream);
  }

  llvm::Error poison(CUstream stream) override { return dd_.fill(0xFF, stream); }

  llvm::Error verify() override {
    size_t n = size_t(call_.m * call_.n), e = size_t(dtypeBytes(call_.out));
    std::vector<unsigned char> raw(dd_.bytes()), packed;
    if (auto err = dd_.download(raw))
      return err;
    // D's rows out of its buffer; nothing may be written before or between
    // them (the poison's 0xFF bytes stay). Dense rows are read in place.
    size_t outside = 0;
    for (size_t i = 0; i < size_t(dShift_); ++i)
      outside += raw[i] != 0xFF;
    bool dense = dShift_ == 0 && ldd_ == call_.n;
    if (!dense) {
      packed.resize(n * e);
      for (int64_t r = 0; r < call_.m; ++r) {
        const unsigned char *row = raw.data() + size_t(dShift_) + size_t(r * ldd_) * e;
        std::memcpy(packed.data() + size_t(r * call_.n) * e, row, size_t(call_.n) * e);
        for (size_t i = size_t(call_.n) * e; i < size_t(ldd_) * e; ++i)
          outside += row[i] != 0xFF;
      }
    }
    const std::vector<unsigned char> &d = dense ? raw : packed;
    if (outside)
      return fail(llvm::Twine(int64_t(outside)) + " bytes written outside D's rows");
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
  int64_t ldd_ = 0, dShift_ = 0; // D's (and C's) row stride; D's bytes past its buffer
  std::vector<unsigned char> a_, b_, c_, bias_;
  std::vector<Sample> samples_;
  DeviceBuffer da_, db_, dc_, dd_, ta_, td_, dbias_;
};

} // namespace

std::unique_ptr<OpHarness> makeGemmHarness() { return std::make_unique<GemmHarness>(); }

} // namespace tilejit
