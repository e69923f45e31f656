//===- AttentionHarness.cpp - tuning harnesses for attention ----------------===//
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
// The backward harness checks on the same problem, with O and LSE computed
// on the host in float64 (O rounded to the type), a random dO, and the
// gradients and workspace poisoned: every element of dQ, dK and dV must be
// written, 48 sampled rows of dQ and 48 of dK and dV (over every KV head)
// must match float64 gradients within the rounding of the outputs plus that
// of P and dS to 16 bits and of O to its type. It is timed on the tuning
// problem with random O (and LSE = 0), which its speed does not depend on.
//
//===----------------------------------------------------------------------===//
#include "autotune/Harness.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "ops/attention/AttentionLaunch.h"
#include "runtime/DeviceBuffer.h"

namespace tilejit {
namespace {

llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

/// Device buffers for Q, K, V, O and LSE of one call, filled from `seed`;
/// packed sequences (THD): b of sq query and sk key rows each.
struct Buffers {
  DeviceBuffer q, k, v, o, lse, cuQ, cuK;
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
    if (c.layout == attention::Layout::THD) {
      c.totalQ = c.b * c.sq;
      c.totalK = c.b * c.sk;
      for (auto [buf, rows, at] :
           {std::tuple{&cuQ, c.sq, &c.cuSeqlensQ}, std::tuple{&cuK, c.sk, &c.cuSeqlensK}}) {
        std::vector<int32_t> offsets(size_t(c.b + 1));
        for (int64_t i = 0; i <= c.b; ++i)
          offsets[size_t(i)] = int32_t(i * rows);
        if (auto err = allocate(*buf, offsets.size() * 4))
          return err;
        if (auto err = buf->upload(offsets.data(), offsets.size() * 4))
          return err;
        *at = buf->ptr();
      }
    }
    if (keepHost) {
      hq = std::move(q_);
      hk = std::move(k_);
      hv = std::move(v_);
    }
    return llvm::Error::success();
  }
};

/// The problem a candidate is checked on: one sequence of the tuning
/// problem, at most 333 queries and keys (sq == sk kept when they are equal).
void shrinkToCheck(attention::Call &c) {
  bool square = c.sq == c.sk;
  c.b = 1;
  c.sq = std::min<int64_t>(c.sq, 333);
  c.sk = square ? c.sq : std::min<int64_t>(c.sk, 333);
}

class AttentionHarness : public OpHarness {
public:
  llvm::Error prepare(const KernelSpec &ks, uint64_t seed) override {
    if (!attention::isForward(ks))
      return fail("the attention harness cannot measure " + std::string(ks.opName()));
    full_ = check_ = attention::callOf(attention::Params(ks));
    sms_ = attention::Params(ks).target.smCount();
    shrinkToCheck(check_);
    // A persistent config's programs then take several tiles each.
    check_.maxPrograms = 3;
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
      // (One sequence: THD's rows are BSHD's.)
      return c.layout != attention::Layout::BHSD ? size_t((row * h + head) * c.d)
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
    return attention::launch(kernel, check ? check_ : full_, sms_, stream);
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
      size_t base = c.layout != attention::Layout::BHSD ? size_t((s.row * c.hq + s.head) * c.d)
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
  int sms_ = 0;
  Buffers checked_, timed_;
  std::vector<Sample> samples_;
};

/// The backward's extra buffers: dO, the gradients and the workspace.
struct Gradients {
  DeviceBuffer dO, dQ, dK, dV, ws;

  llvm::Error make(attention::BackwardCall &c, const std::vector<unsigned char> &dout) {
    size_t nq = size_t(c.b * c.sq * c.hq * c.d), nk = size_t(c.b * c.sk * c.hkv * c.d);
    size_t e = size_t(dtypeBytes(c.dt));
    for (auto [buf, bytes] : {std::pair<DeviceBuffer *, size_t>{&dO, nq * e},
                              {&dQ, nq * e},
                              {&dK, nk * e},
                              {&dV, nk * e},
                              {&ws, size_t(attention::backwardWorkspaceBytes(c))}})
      if (auto err = allocate(*buf, bytes))
        return err;
    if (auto err = dO.upload(dout))
      return err;
    c.dO = dO.ptr();
    c.dQ = dQ.ptr();
    c.dK = dK.ptr();
    c.dV = dV.ptr();
    c.workspace = ws.ptr();
    c.workspaceSize = int64_t(ws.bytes());
    return llvm::Error::success();
  }

  /// The workspace made large enough for `kernel` (a fused config's holds
  /// dQ's sums too; made only when one is measured).
  llvm::Error fit(attention::BackwardCall &c, const LoadedKernel &kernel) {
    size_t bytes = size_t(attention::backwardWorkspaceBytes(c, attention::fusedBackward(kernel)));
    if (ws.bytes() >= bytes)
      return llvm::Error::success();
    if (auto err = allocate(ws, bytes))
      return err;
    c.workspace = ws.ptr();
    c.workspaceSize = int64_t(ws.bytes());
    return llvm::Error::success();
  }
};

class AttentionBackwardHarness : public OpHarness {
public:
  llvm::Error prepare(const KernelSpec &ks, uint64_t seed) override {
    if (!attention::isBackward(ks))
      return fail("the attention backward harness cannot measure " + std::string(ks.opName()));
    static_cast<attention::Call &>(full_) = attention::callOf(attention::Params(ks));
    check_ = full_;
    shrinkToCheck(check_);
    // A persistent config's programs then take several tiles each.
    check_.maxPrograms = 3;
    if (auto e = checked_.make(check_, seed, /*keepHost=*/true))
      return e;
    if (auto e = timed_.make(full_, seed + 1000003, /*keepHost=*/false))
      return e;
    const attention::Call &c = check_;
    size_t nq = size_t(c.sq * c.hq * c.d);
    hdo_ = randomValues(c.dt, nq, seed * 8 + 5);
    if (auto e = checkedGrads_.make(check_, hdo_))
      return e;
    size_t nqFull = size_t(full_.b * full_.sq * full_.hq * full_.d);
    if (auto e = timedGrads_.make(full_, randomValues(c.dt, nqFull, seed * 8 + 6)))
      return e;
    if (auto e = timed_.o.upload(randomValues(c.dt, nqFull, seed * 8 + 7)))
      return e;
    if (auto e = timed_.lse.fill(0))
      return e;

    // The forward in float64: P's row maxima and sums (LSE), O (uploaded
    // rounded), and D = rowsum(dO * O) with its magnitude.
    scale_ = 1.0 / std::sqrt(double(c.d));
    lse_.assign(size_t(c.hq * c.sq), 0.0);
    dsum_.assign(lse_.size(), 0.0);
    dmag_.assign(lse_.size(), 0.0);
    std::vector<unsigned char> o(nq * size_t(dtypeBytes(c.dt)));
    std::vector<float> lse(lse_.size());
    std::vector<double> w(size_t(c.sk)), orow(size_t(c.d));
    for (int64_t h = 0; h < c.hq; ++h)
      for (int64_t i = 0; i < c.sq; ++i) {
        int64_t keys = visible(i);
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < keys; ++j)
          mx = std::max(mx, w[size_t(j)] = score(h, i, j));
        for (int64_t j = 0; j < keys; ++j)
          sum += (w[size_t(j)] = std::exp(w[size_t(j)] - mx));
        std::fill(orow.begin(), orow.end(), 0.0);
        for (int64_t j = 0; j < keys; ++j)
          for (int64_t x = 0; x < c.d; ++x)
            orow[size_t(x)] += w[size_t(j)] / sum * el(checked_.hv, kat(h, j) + size_t(x));
        size_t r = size_t(h * c.sq + i);
        lse_[r] = mx + std::log(sum);
        lse[r] = float(lse_[r]);
        for (int64_t x = 0; x < c.d; ++x) {
          double dox = el(hdo_, qat(h, i) + size_t(x));
          dsum_[r] += dox * orow[size_t(x)];
          dmag_[r] += std::fabs(dox * orow[size_t(x)]);
          storeElement(o.data(), c.dt, qat(h, i) + size_t(x), float(orow[size_t(x)]));
        }
      }
    if (auto e = checked_.o.upload(o))
      return e;
    if (auto e = checked_.lse.upload(lse))
      return e;

    // The sampled rows: 48 of dQ, 48 of dK and dV.
    std::mt19937_64 rng(seed * 8 + 4);
    std::uniform_int_distribution<int64_t> ph(0, c.hq - 1), pk(0, c.hkv - 1), pq(0, c.sq - 1),
        pj(0, c.sk - 1);
    rows_.clear();
    rows_.push_back({false, c.hq - 1, c.sq - 1, {}, {}, {}, {}});
    rows_.push_back({true, 0, 0, {}, {}, {}, {}});
    rows_.push_back({true, c.hkv - 1, c.sk - 1, {}, {}, {}, {}});
    while (rows_.size() < 96)
      rows_.size() % 2 ? rows_.push_back({false, ph(rng), pq(rng), {}, {}, {}, {}})
                       : rows_.push_back({true, pk(rng), pj(rng), {}, {}, {}, {}});
    int64_t group = c.hq / c.hkv;
    for (Row &r : rows_) {
      for (auto *v : {&r.a, &r.amag, &r.b, &r.bmag})
        v->assign(size_t(c.d), 0.0);
      // dQ of (head, query row): over the keys it sees. dK, dV of (KV head,
      // key row): over the queries of its group that see it.
      int64_t heads0 = r.kv ? r.head * group : r.head, heads1 = r.kv ? heads0 + group : heads0 + 1;
      for (int64_t h = heads0; h < heads1; ++h)
        for (int64_t t = 0; t < (r.kv ? c.sq : visible(r.row)); ++t) {
          int64_t i = r.kv ? t : r.row, j = r.kv ? r.row : t;
          if (j >= visible(i))
            continue;
          size_t ri = size_t(h * c.sq + i);
          double pr = std::exp(score(h, i, j) - lse_[ri]), dp = 0;
          for (int64_t x = 0; x < c.d; ++x)
            dp += el(hdo_, qat(h, i) + size_t(x)) * el(checked_.hv, kat(h, j) + size_t(x));
          double ds = pr * (dp - dsum_[ri]), dsMag = pr * (std::fabs(dp) + dmag_[ri]);
          for (int64_t x = 0; x < c.d; ++x) {
            // dQ: scale dS K. dK: scale dS^T Q (into a), dV: P^T dO (into b).
            double other = r.kv ? el(checked_.hq, qat(h, i) + size_t(x))
                                : el(checked_.hk, kat(h, j) + size_t(x));
            r.a[size_t(x)] += scale_ * ds * other;
            r.amag[size_t(x)] += scale_ * dsMag * std::fabs(other);
            if (r.kv) {
              double dox = el(hdo_, qat(h, i) + size_t(x));
              r.b[size_t(x)] += pr * dox;
              r.bmag[size_t(x)] += pr * std::fabs(dox);
            }
          }
        }
    }
    return llvm::Error::success();
  }

  llvm::Error bind(const LoadedKernel &kernel) override {
    if (auto err = checkedGrads_.fit(check_, kernel))
      return err;
    return timedGrads_.fit(full_, kernel);
  }

  llvm::Error run(const LoadedKernel &kernel, CUstream stream, bool check) override {
    return attention::launchBackward(kernel, check ? check_ : full_, stream);
  }

  llvm::Error poison(CUstream stream) override {
    for (DeviceBuffer *b :
         {&checkedGrads_.dQ, &checkedGrads_.dK, &checkedGrads_.dV, &checkedGrads_.ws})
      if (auto e = b->fill(0xFF, stream))
        return e;
    return llvm::Error::success();
  }

  llvm::Error verify() override {
    const attention::Call &c = check_;
    size_t e = size_t(dtypeBytes(c.dt));
    std::vector<unsigned char> dq(size_t(c.sq * c.hq * c.d) * e),
        dk(size_t(c.sk * c.hkv * c.d) * e), dv(dk.size());
    if (auto err = checkedGrads_.dQ.download(dq))
      return err;
    if (auto err = checkedGrads_.dK.download(dk))
      return err;
    if (auto err = checkedGrads_.dV.download(dv))
      return err;
    for (auto [name, v] : {std::pair<const char *, const std::vector<unsigned char> *>{"dQ", &dq},
                           {"dK", &dk},
                           {"dV", &dv}})
      for (size_t i = 0; i < v->size() / e; ++i)
        if (!std::isfinite(loadElement(v->data(), c.dt, i)))
          return fail(llvm::Twine(name) + " element " + llvm::Twine(int64_t(i)) +
                      " is not finite (not written?)");
    double rounding = c.dt == DType::BF16 ? 1.6e-2 : 2e-3,
           pRounding = c.dt == DType::BF16 ? 8e-3 : 1e-3;
    auto compare = [&](const char *name, const std::vector<unsigned char> &got, size_t base,
                       const Row &r, const std::vector<double> &ref,
                       const std::vector<double> &mag) -> llvm::Error {
      for (int64_t x = 0; x < c.d; ++x) {
        double g = loadElement(got.data(), c.dt, base + size_t(x)), want = ref[size_t(x)];
        double allowed = rounding * std::fabs(want) + pRounding * mag[size_t(x)] + 1e-4;
        if (!(std::fabs(g - want) <= allowed))
          return fail(llvm::Twine(name) + "[head " + llvm::Twine(r.head) + ", row " +
                      llvm::Twine(r.row) + ", " + llvm::Twine(x) + "] = " + std::to_string(g) +
                      ", expected " + std::to_string(want) + " (allowed error " +
                      std::to_string(allowed) + ")");
      }
      return llvm::Error::success();
    };
    for (const Row &r : rows_) {
      if (!r.kv) {
        if (auto err = compare("dQ", dq, qat(r.head, r.row), r, r.a, r.amag))
          return err;
        continue;
      }
      size_t base = kat(r.head * (c.hq / c.hkv), r.row);
      if (auto err = compare("dK", dk, base, r, r.a, r.amag))
        return err;
      if (auto err = compare("dV", dv, base, r, r.b, r.bmag))
        return err;
    }
    return llvm::Error::success();
  }

private:
  /// A sampled row: of dQ (query row `row` of head `head`), or of dK and
  /// dV (`kv`: key row `row` of KV head `head`); a is dQ or dK, b dV.
  struct Row {
    bool kv;
    int64_t head, row;
    std::vector<double> a, amag, b, bmag;
  };
  double el(const std::vector<unsigned char> &v, size_t i) const {
    return double(loadElement(v.data(), check_.dt, i));
  }
  /// Offsets of row `row` of query head `h` (Q, dO, O, dQ) and of the KV
  /// head query head `h` reads (K, V).
  size_t qat(int64_t h, int64_t row) const {
    const attention::Call &c = check_;
    // (One sequence: THD's rows are BSHD's.)
    return c.layout != attention::Layout::BHSD ? size_t((row * c.hq + h) * c.d)
                                               : size_t((h * c.sq + row) * c.d);
  }
  size_t kat(int64_t h, int64_t row) const {
    const attention::Call &c = check_;
    int64_t kvh = h / (c.hq / c.hkv);
    return c.layout != attention::Layout::BHSD ? size_t((row * c.hkv + kvh) * c.d)
                                               : size_t((kvh * c.sk + row) * c.d);
  }
  int64_t visible(int64_t i) const {
    return check_.causal ? std::min(check_.sk, i + 1) : check_.sk;
  }
  double score(int64_t h, int64_t i, int64_t j) const {
    double dot = 0;
    for (int64_t x = 0; x < check_.d; ++x)
      dot += el(checked_.hq, qat(h, i) + size_t(x)) * el(checked_.hk, kat(h, j) + size_t(x));
    return scale_ * dot;
  }

  attention::BackwardCall check_, full_;
  Buffers checked_, timed_;
  Gradients checkedGrads_, timedGrads_;
  std::vector<unsigned char> hdo_;
  std::vector<double> lse_, dsum_, dmag_;
  std::vector<Row> rows_;
  double scale_ = 1;
};

} // namespace

std::unique_ptr<OpHarness> makeAttentionBackwardHarness() {
  return std::make_unique<AttentionBackwardHarness>();
}

std::unique_ptr<OpHarness> makeAttentionHarness() { return std::make_unique<AttentionHarness>(); }

} // namespace tilejit
