//===- AttentionHarness.cpp - tuning harnesses for attention ----------------===//
//
// The sequence lengths and the batch are launch-time sizes. A candidate is
// checked twice from poisoned outputs, each problem with its own random
// inputs:
// - on a small problem against float64 on the host: two sequences of at
//   most 333 queries and keys (not a multiple of any tile; a causal spec
//   keeps sq == sk when they are equal) with every head of the spec; packed
//   sequences (THD) on three of ragged lengths, one of them a single row
//   (checkedSequences). Every element of O and LSE must be written and
//   finite, and 48 sampled rows (each sequence's first and last among them)
//   must match a float64 softmax(scale Q K^T) V and log-sum-exp within
//   bf16/f16 rounding of O plus the rounding of P to 16 bits (Bounds);
// - on the tuning problem it is timed on (the spec's bucketed sizes, its
//   sequences as long as the spec says; packed ones of ragged lengths, the
//   longest as the spec says: tuningSequences), every element against the
//   device reference (AttentionReference.h), whose f32 results carry the
//   magnitudes of their terms, so each element is held to the same bounds
//   (all its sequences, or as many as keep the reference's f32 arrays
//   within 4 GiB: referenceSequences). The reference is itself checked
//   against the float64 rows on the small problem first, in every tuning:
//   a disagreement stops the tuning, naming the reference, not the
//   candidate.
//
// The backward harness does the same for dQ, dK and dV: on the small
// problem from O and LSE computed on the host in float64 (O rounded to the
// type), a random dO, the gradients and the workspace poisoned; every
// element of dQ, dK and dV must be written, 48 sampled rows of dQ and 48
// of dK and dV (over every KV head) must match float64 gradients within
// the rounding of the outputs plus that of P and dS to 16 bits. On the
// tuning problem O and LSE come from the reference's forward (the
// candidates are timed on them too), and every element of the gradients is
// held to the reference's.
//
//===----------------------------------------------------------------------===//
#include "autotune/Harness.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <tuple>

#include "ops/attention/AttentionLaunch.h"
#include "ops/attention/AttentionReference.h"
#include "ops/attention/AttentionSequences.h"
#include "runtime/DeviceBuffer.h"

namespace tilejit {
namespace {

using attention::checkedSequences;
using attention::kvHeadOf;
using attention::Sequences;
using attention::tuningSequences;

llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

/// "[head h, row i]", with the sequence first where there are several.
std::string describeRow(const attention::Call &c, int64_t s, int64_t h, int64_t i) {
  return (c.b > 1 ? "[sequence " + std::to_string(s) + ", " : std::string("[")) + "head " +
         std::to_string(h) + ", row " + std::to_string(i) + "]";
}

/// Device buffers for Q, K, V, O and LSE of one call, filled from `seed`
/// (THD: the offsets of `seqs`).
struct Buffers {
  DeviceBuffer q, k, v, o, lse, cuQ, cuK;
  std::vector<unsigned char> hq, hk, hv; // host copies, for the reference

  llvm::Error make(attention::Call &c, const Sequences &seqs, uint64_t seed, bool keepHost) {
    size_t nq = size_t(seqs.rowsQ() * c.hq * c.d), nk = size_t(seqs.rowsK() * c.hkv * c.d);
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
      c.totalQ = seqs.rowsQ();
      c.totalK = seqs.rowsK();
      for (auto [buf, first, total, at] : {std::tuple{&cuQ, &seqs.q0, c.totalQ, &c.cuSeqlensQ},
                                           std::tuple{&cuK, &seqs.k0, c.totalK, &c.cuSeqlensK}}) {
        std::vector<int32_t> offsets(first->begin(), first->end());
        offsets.push_back(int32_t(total));
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

/// What a candidate's element may differ from the reference: its output's
/// rounding to the type (relative), P's and dS's rounding to 16 bits
/// (relative to `mag`, the sum of the magnitudes of the element's terms),
/// and a floor.
struct Bounds {
  double rounding, pRounding, floor = 1e-4;
  explicit Bounds(DType dt)
      : rounding(dt == DType::BF16 ? 1.6e-2 : 2e-3), pRounding(dt == DType::BF16 ? 8e-3 : 1e-3) {}
  double allowed(double ref, double mag) const {
    return rounding * std::fabs(ref) + pRounding * mag + floor;
  }
};

/// The reference kernels' f32 results against float64 (their own check
/// before they judge candidates): within 4e-5 of the magnitude of the
/// terms, or of the value.
bool referenceAgrees(double got, double want, double mag) {
  return std::fabs(got - want) <= 4e-5 * (mag + std::fabs(want)) + 1e-6;
}

llvm::Error referenceDisagrees(const llvm::Twine &what, double got, double want) {
  return fail("the attention reference kernel disagrees with float64 at " + what + ": " +
              std::to_string(got) + ", expected " + std::to_string(want) +
              " (not a candidate's fault: the tuning stops here)");
}

/// The sequences of the tuning problem `seqs` the device reference covers
/// (attention::referenceSequences): as many as keep its f32 arrays within 4
/// GiB and its work within 2^33 (query row, key, head) triples (a few
/// seconds of it); at least one cycle of the lengths. The others go
/// unchecked: in the forward's problem they have inputs of their own; in
/// the backward's they repeat the covered ones' (repeatBlocks), whose O and
/// LSE the reference makes, so what they compute is what those do.
int64_t referenceSequences(const attention::Call &c, const Sequences &seqs, size_t queryRowBytes,
                           size_t keyRowBytes) {
  return attention::referenceSequences(c, seqs, queryRowBytes, keyRowBytes, size_t(4) << 30,
                                       int64_t(1) << 33, attention::Reference::kMaxSequences);
}

/// Fills each of `buffers` past its first `bytes` with copies of them (the
/// covered sequences' rows, repeated over the others).
llvm::Error repeatBlocks(std::initializer_list<std::pair<DeviceBuffer *, size_t>> buffers) {
  for (auto [buf, bytes] : buffers)
    if (bytes)
      if (auto e = repeatOnDevice(*buf, bytes, buf->ptr(), bytes))
        return e;
  return llvm::Error::success();
}

/// `buf` of `bytes` for the device reference's arrays, or an error saying
/// so.
llvm::Error allocateReference(DeviceBuffer &buf, size_t bytes) {
  if (auto e = allocate(buf, bytes))
    return fail("the attention reference's arrays at the tuning size (" +
                llvm::Twine(int64_t(bytes >> 20)) + " MiB): " + llvm::toString(std::move(e)));
  return llvm::Error::success();
}

/// The device reference for `ks`'s target, and the two words its
/// comparisons count in.
llvm::Error loadReference(const KernelSpec &ks, std::unique_ptr<attention::Reference> &ref,
                          DeviceBuffer &words) {
  auto loaded = attention::Reference::load(attention::Params(ks).target);
  if (!loaded)
    return loaded.takeError();
  ref = std::move(*loaded);
  return allocate(words, 16);
}

/// "at the tuning size (b 2, sq 4096, ...)": where a candidate failed
/// (packed sequences: their lengths too).
std::string tuningSize(const attention::Call &c, const Sequences &seqs, int64_t covered) {
  std::string packed;
  if (c.layout == attention::Layout::THD)
    packed = "; packed, " + std::to_string(seqs.shortestQ()) + " to " +
             std::to_string(seqs.longestQ()) + " queries a sequence, " +
             std::to_string(seqs.rowsQ()) + " in all";
  return "at the tuning size (b " + std::to_string(c.b) + ", sq " + std::to_string(c.sq) + ", sk " +
         std::to_string(c.sk) + ", hq " + std::to_string(c.hq) + ", hkv " + std::to_string(c.hkv) +
         packed +
         (covered < c.b ? "; its first " + std::to_string(covered) + " sequences checked"
                        : std::string()) +
         ")";
}

/// Element `at` of a tuning problem's tensor of query rows (`keys`: key
/// rows) and `heads` heads, or of its LSE (`heads` 0): "[sequence s, head
/// h, row i, x]".
std::string describeElement(const attention::Call &c, const Sequences &seqs, bool keys,
                            int64_t heads, int64_t at) {
  int64_t x = 0, h, i, s;
  if (!heads) {
    i = at % c.sq;
    h = at / c.sq % c.hq;
    s = at / c.sq / c.hq;
  } else {
    x = at % c.d;
    int64_t r = at / c.d;
    if (c.layout == attention::Layout::BHSD) {
      int64_t rows = keys ? c.sk : c.sq;
      i = r % rows;
      h = r / rows % heads;
      s = r / rows / heads;
    } else {
      h = r % heads;
      std::tie(s, i) = Sequences::locate(keys ? seqs.k0 : seqs.q0, r / heads);
    }
  }
  return "[sequence " + std::to_string(s) + ", head " + std::to_string(h) + ", row " +
         std::to_string(i) + (heads ? ", " + std::to_string(x) : std::string()) + "]";
}

/// `got` (a tensor of query rows, `keys`: of key rows, and `heads` heads;
/// the rows of the first `covered` of `seqs`) held to the device reference
/// element by element (see compare).
llvm::Error expectClose(const attention::Reference &ref, const char *name, const attention::Call &c,
                        const Sequences &seqs, int64_t covered, bool keys, int64_t heads,
                        CUdeviceptr got, const DeviceBuffer &want, const DeviceBuffer &mag,
                        const DeviceBuffer &words) {
  Bounds bounds(c.dt);
  int64_t n = (keys ? seqs.rowsK(covered) : seqs.rowsQ(covered)) * heads * c.d;
  auto m = ref.compare(c.dt, got, want.ptr(), mag.ptr(), n, bounds.rounding, bounds.pRounding,
                       bounds.floor, words.ptr(), nullptr);
  if (!m)
    return m.takeError();
  if (!m->count)
    return llvm::Error::success();
  return fail(llvm::Twine(name) + " " + tuningSize(c, seqs, covered) + ": " +
              llvm::Twine(int64_t(m->count)) + " of " + llvm::Twine(n) +
              " elements outside the bounds, the first " +
              describeElement(c, seqs, keys, heads, m->first) + " = " + std::to_string(m->got) +
              ", expected " + std::to_string(m->ref) + " (allowed error " +
              std::to_string(m->allowed) + ")");
}

class AttentionHarness : public OpHarness {
public:
  llvm::Error prepare(const KernelSpec &ks, uint64_t seed) override {
    if (!attention::isForward(ks))
      return fail("the attention harness cannot measure " + std::string(ks.opName()));
    full_ = check_ = attention::callOf(attention::Params(ks));
    sms_ = attention::Params(ks).target.smCount();
    seqs_ = checkedSequences(check_);
    // A persistent config's programs then take several tiles each.
    check_.maxPrograms = 3;
    if (auto e = checked_.make(check_, seqs_, seed, /*keepHost=*/true))
      return e;
    timedSeqs_ = tuningSequences(full_);
    if (auto e = timed_.make(full_, timedSeqs_, seed + 1000003, /*keepHost=*/false))
      return e;

    // The sampled rows (every sequence's first and last among them) and
    // their float64 reference.
    std::mt19937_64 rng(seed * 8 + 4);
    std::uniform_int_distribution<int64_t> ph(0, check_.hq - 1), pr(0, seqs_.rowsQ() - 1);
    samples_.clear();
    for (int64_t s = 0; s < seqs_.count(); ++s) {
      samples_.push_back({check_.hq - 1, s, seqs_.qn[size_t(s)] - 1, {}, {}, 0});
      samples_.push_back({ph(rng), s, 0, {}, {}, 0});
    }
    while (samples_.size() < 48) {
      auto [s, i] = seqs_.locate(seqs_.q0, pr(rng));
      samples_.push_back({ph(rng), s, i, {}, {}, 0});
    }
    const attention::Call &c = check_;
    double scale = 1.0 / std::sqrt(double(c.d));
    std::vector<double> w(size_t(c.sk));
    for (Sample &s : samples_) {
      int64_t kvh = kvHeadOf(c, s.head), keys = seqs_.visible(c.causal, s.seq, s.row);
      size_t qo = seqs_.qAt(check_, s.seq, s.head, s.row);
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < keys; ++j) {
        size_t ko = seqs_.kAt(check_, s.seq, kvh, j);
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
        size_t vo = seqs_.kAt(check_, s.seq, kvh, j);
        for (int64_t x = 0; x < c.d; ++x) {
          double t =
              w[size_t(j)] / sum * double(loadElement(checked_.hv.data(), c.dt, vo + size_t(x)));
          s.o[size_t(x)] += t;
          s.mag[size_t(x)] += std::fabs(t);
        }
      }
      s.lse = mx + std::log(sum);
    }
    return prepareReference(ks);
  }

  llvm::Error bind(const LoadedKernel &) override { return llvm::Error::success(); }

  /// The check: the checked problem, then the tuning problem.
  llvm::Error run(const LoadedKernel &kernel, CUstream stream, bool check) override {
    if (check)
      if (auto e = attention::launch(kernel, check_, sms_, stream))
        return e;
    return attention::launch(kernel, full_, sms_, stream);
  }

  llvm::Error poison(CUstream stream) override {
    for (DeviceBuffer *b : {&checked_.o, &checked_.lse, &timed_.o, &timed_.lse})
      if (auto e = b->fill(0xFF, stream))
        return e;
    return llvm::Error::success();
  }

  llvm::Error verify() override {
    // The tuning problem, every element against the device reference.
    const attention::Call &f = full_;
    if (auto e = expectClose(*ref_, "O", f, timedSeqs_, covered_, /*keys=*/false, f.hq,
                             timed_.o.ptr(), refO_, refMag_, words_))
      return e;
    // (LSE's rows past a sequence are unspecified: THD.)
    std::vector<float> fullLse(refLse_.size());
    if (auto e = timed_.lse.download(fullLse))
      return e;
    for (size_t i = 0; i < fullLse.size(); ++i)
      if (int64_t(i) % f.sq < timedSeqs_.qn[i / size_t(f.sq * f.hq)] &&
          !(std::fabs(fullLse[i] - refLse_[i]) <= 2e-5 * std::fabs(refLse_[i]) + 2e-5))
        return fail("LSE " + tuningSize(f, timedSeqs_, covered_) + ": " +
                    describeElement(f, timedSeqs_, false, 0, int64_t(i)) + " = " +
                    std::to_string(fullLse[i]) + ", expected " + std::to_string(refLse_[i]));

    // The small problem against float64.
    const attention::Call &c = check_;
    size_t nq = size_t(seqs_.rowsQ() * c.hq * c.d);
    std::vector<unsigned char> o(nq * size_t(dtypeBytes(c.dt)));
    std::vector<float> lse(size_t(c.b * c.hq * c.sq));
    if (auto e = checked_.o.download(o))
      return e;
    if (auto e = checked_.lse.download(lse))
      return e;
    for (size_t i = 0; i < nq; ++i)
      if (!std::isfinite(loadElement(o.data(), c.dt, i)))
        return fail("O element " + llvm::Twine(int64_t(i)) + " is not finite (not written?)");
    // LSE's rows past a sequence are unspecified (THD).
    for (int64_t s = 0; s < seqs_.count(); ++s)
      for (int64_t h = 0; h < c.hq; ++h)
        for (int64_t i = 0; i < seqs_.qn[size_t(s)]; ++i)
          if (!std::isfinite(lse[Sequences::lseAt(check_, s, h, i)]))
            return fail("LSE" + where(s, h, i) + " is not finite (not written?)");
    Bounds bounds(c.dt);
    for (const Sample &s : samples_) {
      size_t base = seqs_.qAt(check_, s.seq, s.head, s.row);
      for (int64_t x = 0; x < c.d; ++x) {
        double got = loadElement(o.data(), c.dt, base + size_t(x)), ref = s.o[size_t(x)];
        double allowed = bounds.allowed(ref, s.mag[size_t(x)]);
        if (!(std::fabs(got - ref) <= allowed))
          return fail("O" + where(s.seq, s.head, s.row) + "[" + llvm::Twine(x) +
                      "] = " + std::to_string(got) + ", expected " + std::to_string(ref) +
                      " (allowed error " + std::to_string(allowed) + ")");
      }
      double got = lse[Sequences::lseAt(check_, s.seq, s.head, s.row)];
      if (!(std::fabs(got - s.lse) <= 2e-5 * std::fabs(s.lse) + 2e-5))
        return fail("LSE" + where(s.seq, s.head, s.row) + " = " + std::to_string(got) +
                    ", expected " + std::to_string(s.lse));
    }
    return llvm::Error::success();
  }

private:
  struct Sample {
    int64_t head, seq, row;
    std::vector<double> o, mag;
    double lse;
  };

  /// The device reference: checked against the float64 samples on the
  /// checked problem, then run on the tuning problem (O, the magnitudes of
  /// its terms, LSE, kept for verify).
  llvm::Error prepareReference(const KernelSpec &ks) {
    if (auto e = loadReference(ks, ref_, words_))
      return e;
    const attention::Call &c = check_;
    size_t n = size_t(seqs_.rowsQ() * c.hq * c.d), nl = size_t(c.b * c.hq * c.sq);
    DeviceBuffer o, mag, lse;
    for (auto [buf, bytes] :
         {std::pair<DeviceBuffer *, size_t>{&o, n * 4}, {&mag, n * 4}, {&lse, nl * 4}})
      if (auto e = allocate(*buf, bytes))
        return e;
    if (auto e = ref_->forward(c, c.b, o.ptr(), mag.ptr(), lse.ptr(), 0, nullptr))
      return e;
    std::vector<float> ho(n), hm(n), hl(nl);
    for (auto [buf, host] : {std::pair{&o, &ho}, {&mag, &hm}, {&lse, &hl}})
      if (auto e = buf->download(*host))
        return e;
    for (const Sample &s : samples_) {
      size_t base = seqs_.qAt(check_, s.seq, s.head, s.row);
      for (int64_t x = 0; x < c.d; ++x) {
        size_t at = base + size_t(x);
        if (!referenceAgrees(ho[at], s.o[size_t(x)], s.mag[size_t(x)]))
          return referenceDisagrees("O" + where(s.seq, s.head, s.row) + "[" + llvm::Twine(x) + "]",
                                    ho[at], s.o[size_t(x)]);
        if (!referenceAgrees(hm[at], s.mag[size_t(x)], s.mag[size_t(x)]))
          return referenceDisagrees("the magnitude of O" + where(s.seq, s.head, s.row) + "[" +
                                        llvm::Twine(x) + "]",
                                    hm[at], s.mag[size_t(x)]);
      }
      if (!referenceAgrees(hl[Sequences::lseAt(check_, s.seq, s.head, s.row)], s.lse, 0))
        return referenceDisagrees("LSE" + where(s.seq, s.head, s.row),
                                  hl[Sequences::lseAt(check_, s.seq, s.head, s.row)], s.lse);
    }

    const attention::Call &f = full_;
    covered_ = referenceSequences(f, timedSeqs_, size_t(f.hq * f.d) * 8, 0);
    size_t nf = size_t(timedSeqs_.rowsQ(covered_) * f.hq * f.d);
    DeviceBuffer fullLse;
    for (auto [buf, bytes] : {std::pair<DeviceBuffer *, size_t>{&refO_, nf * 4},
                              {&refMag_, nf * 4},
                              {&fullLse, size_t(f.b * f.hq * f.sq) * 4}})
      if (auto e = allocateReference(*buf, bytes))
        return e;
    if (auto e = ref_->forward(f, covered_, refO_.ptr(), refMag_.ptr(), fullLse.ptr(), 0, nullptr))
      return e;
    refLse_.resize(size_t(covered_ * f.hq * f.sq));
    return fullLse.download(refLse_.data(), refLse_.size() * 4);
  }

  std::string where(int64_t s, int64_t h, int64_t i) const { return describeRow(check_, s, h, i); }
  attention::Call check_, full_;
  Sequences seqs_, timedSeqs_; // of check_ and full_
  int sms_ = 0;
  Buffers checked_, timed_;
  std::vector<Sample> samples_;
  std::unique_ptr<attention::Reference> ref_;
  int64_t covered_ = 0; // the sequences of full_ the reference covers
  DeviceBuffer refO_, refMag_, words_;
  std::vector<float> refLse_;
};

/// The backward's extra buffers: dO, the gradients and the workspace.
struct Gradients {
  DeviceBuffer dO, dQ, dK, dV, ws;

  llvm::Error make(attention::BackwardCall &c, const Sequences &seqs,
                   const std::vector<unsigned char> &dout) {
    size_t nq = size_t(seqs.rowsQ() * c.hq * c.d), nk = size_t(seqs.rowsK() * c.hkv * c.d);
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
    seqs_ = checkedSequences(check_);
    // A persistent config's programs then take several tiles each.
    check_.maxPrograms = 3;
    if (auto e = checked_.make(check_, seqs_, seed, /*keepHost=*/true))
      return e;
    timedSeqs_ = tuningSequences(full_);
    if (auto e = timed_.make(full_, timedSeqs_, seed + 1000003, /*keepHost=*/false))
      return e;
    const attention::Call &c = check_;
    size_t nq = size_t(seqs_.rowsQ() * c.hq * c.d);
    hdo_ = randomValues(c.dt, nq, seed * 8 + 5);
    if (auto e = checkedGrads_.make(check_, seqs_, hdo_))
      return e;
    size_t nqFull = size_t(timedSeqs_.rowsQ() * full_.hq * full_.d);
    if (auto e = timedGrads_.make(full_, timedSeqs_, randomValues(c.dt, nqFull, seed * 8 + 6)))
      return e;

    // The forward in float64: P's row maxima and sums (LSE), O (uploaded
    // rounded), and D = rowsum(dO * O) of the rounded O with its magnitude. LSE's rows past
    // a sequence (THD) are NaN, as a forward may leave them.
    scale_ = 1.0 / std::sqrt(double(c.d));
    lse_.assign(size_t(c.b * c.hq * c.sq), 0.0);
    dsum_.assign(lse_.size(), 0.0);
    dmag_.assign(lse_.size(), 0.0);
    std::vector<unsigned char> o(nq * size_t(dtypeBytes(c.dt)));
    std::vector<float> lse(lse_.size(), NAN);
    // (A task a sequence's head, spread over the host's threads; no two
    // write the same element.)
    parallelBlocks(size_t(seqs_.count() * c.hq), 1, [&](size_t task, size_t) {
      int64_t s = int64_t(task) / c.hq, h = int64_t(task) % c.hq;
      std::vector<double> w(size_t(c.sk)), orow(size_t(c.d));
      for (int64_t i = 0; i < seqs_.qn[size_t(s)]; ++i) {
        int64_t keys = seqs_.visible(c.causal, s, i);
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < keys; ++j)
          mx = std::max(mx, w[size_t(j)] = score(s, h, i, j));
        for (int64_t j = 0; j < keys; ++j)
          sum += (w[size_t(j)] = std::exp(w[size_t(j)] - mx));
        std::fill(orow.begin(), orow.end(), 0.0);
        for (int64_t j = 0; j < keys; ++j) {
          size_t vo = seqs_.kAt(c, s, kvHeadOf(c, h), j);
          for (int64_t x = 0; x < c.d; ++x)
            orow[size_t(x)] += w[size_t(j)] / sum * el(checked_.hv, vo + size_t(x));
        }
        size_t r = Sequences::lseAt(c, s, h, i), qo = seqs_.qAt(c, s, h, i);
        lse_[r] = mx + std::log(sum);
        lse[r] = float(lse_[r]);
        for (int64_t x = 0; x < c.d; ++x) {
          // (D from O as the kernels read it: rounded to the type.)
          size_t at = qo + size_t(x);
          storeElement(o.data(), c.dt, at, float(orow[size_t(x)]));
          double dox = el(hdo_, at), ox = el(o, at);
          dsum_[r] += dox * ox;
          dmag_[r] += std::fabs(dox * ox);
        }
      }
    });
    if (auto e = checked_.o.upload(o))
      return e;
    if (auto e = checked_.lse.upload(lse))
      return e;

    // The sampled rows: 48 of dQ, 48 of dK and dV, every sequence's first
    // and last among them.
    std::mt19937_64 rng(seed * 8 + 4);
    std::uniform_int_distribution<int64_t> ph(0, c.hq - 1), pk(0, c.hkv - 1),
        pq(0, seqs_.rowsQ() - 1), pj(0, seqs_.rowsK() - 1);
    rows_.clear();
    for (int64_t s = 0; s < seqs_.count(); ++s) {
      rows_.push_back({false, c.hq - 1, s, seqs_.qn[size_t(s)] - 1, {}, {}, {}, {}});
      rows_.push_back({true, 0, s, 0, {}, {}, {}, {}});
      rows_.push_back({false, ph(rng), s, 0, {}, {}, {}, {}});
      rows_.push_back({true, c.hkv - 1, s, seqs_.kn[size_t(s)] - 1, {}, {}, {}, {}});
    }
    while (rows_.size() < 96)
      if (rows_.size() % 2) {
        auto [s, j] = seqs_.locate(seqs_.k0, pj(rng));
        rows_.push_back({true, pk(rng), s, j, {}, {}, {}, {}});
      } else {
        auto [s, i] = seqs_.locate(seqs_.q0, pq(rng));
        rows_.push_back({false, ph(rng), s, i, {}, {}, {}, {}});
      }
    int64_t group = c.hq / c.hkv;
    parallelBlocks(rows_.size(), 1, [&](size_t task, size_t) {
      Row &r = rows_[task];
      for (auto *v : {&r.a, &r.amag, &r.b, &r.bmag})
        v->assign(size_t(c.d), 0.0);
      // dQ of (head, query row): over the keys it sees. dK, dV of (KV head,
      // key row): over the queries of its group that see it.
      int64_t heads0 = r.kv ? r.head * group : r.head, heads1 = r.kv ? heads0 + group : heads0 + 1;
      int64_t s = r.seq;
      for (int64_t h = heads0; h < heads1; ++h)
        for (int64_t t = 0; t < (r.kv ? seqs_.qn[size_t(s)] : seqs_.visible(c.causal, s, r.row));
             ++t) {
          int64_t i = r.kv ? t : r.row, j = r.kv ? r.row : t;
          if (j >= seqs_.visible(c.causal, s, i))
            continue;
          size_t ri = Sequences::lseAt(c, s, h, i), qo = seqs_.qAt(c, s, h, i),
                 ko = seqs_.kAt(c, s, kvHeadOf(c, h), j);
          double pr = std::exp(score(s, h, i, j) - lse_[ri]), dp = 0;
          for (int64_t x = 0; x < c.d; ++x)
            dp += el(hdo_, qo + size_t(x)) * el(checked_.hv, ko + size_t(x));
          double ds = pr * (dp - dsum_[ri]), dsMag = pr * (std::fabs(dp) + dmag_[ri]);
          for (int64_t x = 0; x < c.d; ++x) {
            // dQ: scale dS K. dK: scale dS^T Q (into a), dV: P^T dO (into b).
            double other = r.kv ? el(checked_.hq, qo + size_t(x)) : el(checked_.hk, ko + size_t(x));
            r.a[size_t(x)] += scale_ * ds * other;
            r.amag[size_t(x)] += scale_ * dsMag * std::fabs(other);
            if (r.kv) {
              double dox = el(hdo_, qo + size_t(x));
              r.b[size_t(x)] += pr * dox;
              r.bmag[size_t(x)] += pr * std::fabs(dox);
            }
          }
        }
    });
    return prepareReference(ks);
  }

  llvm::Error bind(const LoadedKernel &kernel) override {
    if (auto err = checkedGrads_.fit(check_, kernel))
      return err;
    return timedGrads_.fit(full_, kernel);
  }

  /// The check: the checked problem, then the tuning problem.
  llvm::Error run(const LoadedKernel &kernel, CUstream stream, bool check) override {
    if (check)
      if (auto e = attention::launchBackward(kernel, check_, stream))
        return e;
    return attention::launchBackward(kernel, full_, stream);
  }

  llvm::Error poison(CUstream stream) override {
    for (Gradients *g : {&checkedGrads_, &timedGrads_})
      for (DeviceBuffer *b : {&g->dQ, &g->dK, &g->dV, &g->ws})
        if (auto e = b->fill(0xFF, stream))
          return e;
    return llvm::Error::success();
  }

  llvm::Error verify() override {
    // The tuning problem, every element against the device reference.
    const attention::Call &t = full_;
    for (auto [name, got, want, mag, keys, heads] :
         {std::tuple{"dQ", &timedGrads_.dQ, &refGrads_[0], &refGrads_[1], false, t.hq},
          std::tuple{"dK", &timedGrads_.dK, &refGrads_[2], &refGrads_[3], true, t.hkv},
          std::tuple{"dV", &timedGrads_.dV, &refGrads_[4], &refGrads_[5], true, t.hkv}})
      if (auto err = expectClose(*ref_, name, t, timedSeqs_, covered_, keys, heads, got->ptr(),
                                 *want, *mag, words_))
        return err;

    // The small problem against float64.
    const attention::Call &c = check_;
    size_t e = size_t(dtypeBytes(c.dt));
    std::vector<unsigned char> dq(size_t(seqs_.rowsQ() * c.hq * c.d) * e),
        dk(size_t(seqs_.rowsK() * c.hkv * c.d) * e), dv(dk.size());
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
    Bounds bounds(c.dt);
    auto compare = [&](const char *name, const std::vector<unsigned char> &got, size_t base,
                       const Row &r, const std::vector<double> &ref,
                       const std::vector<double> &mag) -> llvm::Error {
      for (int64_t x = 0; x < c.d; ++x) {
        double g = loadElement(got.data(), c.dt, base + size_t(x)), want = ref[size_t(x)];
        double allowed = bounds.allowed(want, mag[size_t(x)]);
        if (!(std::fabs(g - want) <= allowed))
          return fail(llvm::Twine(name) + describeRow(c, r.seq, r.head, r.row) + "[" +
                      llvm::Twine(x) + "] = " + std::to_string(g) + ", expected " +
                      std::to_string(want) + " (allowed error " + std::to_string(allowed) + ")");
      }
      return llvm::Error::success();
    };
    for (const Row &r : rows_) {
      if (!r.kv) {
        if (auto err = compare("dQ", dq, seqs_.qAt(check_, r.seq, r.head, r.row), r, r.a, r.amag))
          return err;
        continue;
      }
      size_t base = seqs_.kAt(c, r.seq, r.head, r.row);
      if (auto err = compare("dK", dk, base, r, r.a, r.amag))
        return err;
      if (auto err = compare("dV", dv, base, r, r.b, r.bmag))
        return err;
    }
    return llvm::Error::success();
  }

private:
  /// A sampled row of sequence `seq`: of dQ (query row `row` of head
  /// `head`), or of dK and dV (`kv`: key row `row` of KV head `head`); a is
  /// dQ or dK, b dV.
  struct Row {
    bool kv;
    int64_t head, seq, row;
    std::vector<double> a, amag, b, bmag;
  };
  double el(const std::vector<unsigned char> &v, size_t i) const {
    return double(loadElement(v.data(), check_.dt, i));
  }
  /// The device reference: its gradients checked against the float64
  /// rows on the checked problem (from the same O and LSE); then the
  /// tuning problem's O and LSE from its forward (what the candidates are
  /// timed on too), and its gradients with their magnitudes, kept for
  /// verify.
  llvm::Error prepareReference(const KernelSpec &ks) {
    if (auto e = loadReference(ks, ref_, words_))
      return e;
    const attention::BackwardCall &c = check_;
    size_t nq = size_t(seqs_.rowsQ() * c.hq * c.d), nk = size_t(seqs_.rowsK() * c.hkv * c.d);
    DeviceBuffer small[6], scratch;
    if (auto e = makeGradients(small, nq, nk, scratch, c))
      return e;
    if (auto e = ref_->backward(c, c.b, gradientsOf(small), scratch.ptr(), nullptr))
      return e;
    std::vector<float> host[6];
    for (int i = 0; i < 6; ++i) {
      host[i].resize(i < 2 ? nq : nk);
      if (auto e = small[i].download(host[i]))
        return e;
    }
    for (const Row &r : rows_) {
      size_t base =
          r.kv ? seqs_.kAt(c, r.seq, r.head, r.row) : seqs_.qAt(check_, r.seq, r.head, r.row);
      int first = r.kv ? 2 : 0;
      for (int k = 0; k < (r.kv ? 2 : 1); ++k) {
        const std::vector<double> &want = k ? r.b : r.a, &mag = k ? r.bmag : r.amag;
        const char *name = !r.kv ? "dQ" : k ? "dV" : "dK";
        for (int64_t x = 0; x < c.d; ++x) {
          float got = host[first + 2 * k][base + size_t(x)],
                gotMag = host[first + 2 * k + 1][base + size_t(x)];
          if (!referenceAgrees(got, want[size_t(x)], mag[size_t(x)]))
            return referenceDisagrees(name + describeRow(c, r.seq, r.head, r.row) + "[" +
                                          llvm::Twine(x) + "]",
                                      got, want[size_t(x)]);
          if (!referenceAgrees(gotMag, mag[size_t(x)], mag[size_t(x)]))
            return referenceDisagrees(std::string("the magnitude of ") + name +
                                          describeRow(c, r.seq, r.head, r.row) + "[" +
                                          llvm::Twine(x) + "]",
                                      gotMag, mag[size_t(x)]);
        }
      }
    }

    // The tuning problem: O (in its type) and LSE from the reference's
    // forward, then its gradients, for the sequences it covers; the others
    // repeat them.
    const attention::BackwardCall &f = full_;
    covered_ =
        referenceSequences(f, timedSeqs_, size_t(f.hq * f.d) * 8, size_t(2 * f.hkv * f.d) * 8);
    int64_t rowsQ = timedSeqs_.rowsQ(covered_), rowsK = timedSeqs_.rowsK(covered_);
    size_t e = size_t(dtypeBytes(f.dt)), qBytes = size_t(rowsQ * f.hq * f.d) * e,
           kBytes = size_t(rowsK * f.hkv * f.d) * e;
    if (auto err = repeatBlocks({{&timed_.q, qBytes},
                                 {&timed_.k, kBytes},
                                 {&timed_.v, kBytes},
                                 {&timedGrads_.dO, qBytes}}))
      return err;
    if (auto err = ref_->forward(f, covered_, 0, 0, f.lse, f.o, nullptr))
      return err;
    auto drv = CudaDriver::get();
    if (!drv)
      return drv.takeError();
    TJ_CU_CHECK(*drv, cuCtxSynchronize());
    if (auto err =
            repeatBlocks({{&timed_.o, qBytes}, {&timed_.lse, size_t(covered_ * f.hq * f.sq) * 4}}))
      return err;
    if (auto err = makeGradients(refGrads_, size_t(rowsQ * f.hq * f.d), size_t(rowsK * f.hkv * f.d),
                                 scratch, f))
      return err;
    if (auto err = ref_->backward(f, covered_, gradientsOf(refGrads_), scratch.ptr(), nullptr))
      return err;
    TJ_CU_CHECK(*drv, cuCtxSynchronize());
    return llvm::Error::success();
  }
  /// The reference's six f32 gradients (dQ, dK, dV, each with its
  /// magnitudes; nq and nk elements) and its scratch for `c`.
  static llvm::Error makeGradients(DeviceBuffer (&g)[6], size_t nq, size_t nk,
                                   DeviceBuffer &scratch, const attention::Call &c) {
    for (int i = 0; i < 6; ++i)
      if (auto e = allocateReference(g[i], (i < 2 ? nq : nk) * 4))
        return e;
    return allocateReference(scratch, size_t(2 * c.b * c.hq * c.sq) * 4);
  }
  static attention::Reference::Gradients gradientsOf(const DeviceBuffer (&g)[6]) {
    return {g[0].ptr(), g[1].ptr(), g[2].ptr(), g[3].ptr(), g[4].ptr(), g[5].ptr()};
  }

  double score(int64_t s, int64_t h, int64_t i, int64_t j) const {
    size_t qo = seqs_.qAt(check_, s, h, i), ko = seqs_.kAt(check_, s, kvHeadOf(check_, h), j);
    double dot = 0;
    for (int64_t x = 0; x < check_.d; ++x)
      dot += el(checked_.hq, qo + size_t(x)) * el(checked_.hk, ko + size_t(x));
    return scale_ * dot;
  }

  attention::BackwardCall check_, full_;
  Sequences seqs_, timedSeqs_; // of check_ and full_
  Buffers checked_, timed_;
  Gradients checkedGrads_, timedGrads_;
  std::vector<unsigned char> hdo_;
  std::vector<double> lse_, dsum_, dmag_;
  std::vector<Row> rows_;
  double scale_ = 1;
  std::unique_ptr<attention::Reference> ref_;
  int64_t covered_ = 0; // the sequences of full_ the reference covers
  DeviceBuffer refGrads_[6], words_;
};

} // namespace

std::unique_ptr<OpHarness> makeAttentionBackwardHarness() {
  return std::make_unique<AttentionBackwardHarness>();
}

std::unique_ptr<OpHarness> makeAttentionHarness() { return std::make_unique<AttentionHarness>(); }

} // namespace tilejit
