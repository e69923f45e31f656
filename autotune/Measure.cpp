//===- Measure.cpp --------------------------------------------------------===//
#include "autotune/Measure.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tilejit {

void summarizeSamples(std::vector<double> ms, Measurement &r) {
  std::sort(ms.begin(), ms.end());
  r.medianMs = ms[ms.size() / 2];
  r.p20Ms = ms[ms.size() / 5];
  r.p80Ms = ms[std::min(ms.size() - 1, ms.size() * 4 / 5)];
  r.reps = int(ms.size());
}

llvm::Expected<std::vector<double>>
timeSamples(int reps, double cutoffMs, const std::function<llvm::Expected<float>(int)> &sample) {
  std::vector<double> ms;
  int inner = 1;
  for (int s = 0; s < reps + 3; ++s) {
    auto t = sample(inner);
    if (!t)
      return t.takeError();
    if (s == 0) {
      inner = std::clamp(int(0.2 / std::max(*t, 1e-4f)), 1, 1000);
      // Samples of a slow kernel (milliseconds each) vary little: about
      // 60 ms of them, at least 5 (3 of 5 ms or more), where short ones take
      // `reps`; a kernel of 2 ms or more needs no second warm-up.
      bool slow = *t >= 2.0f;
      int least = std::min(reps, *t >= 5.0f ? 3 : 5);
      reps = std::clamp(int(60.0 / std::max(double(*t) * inner, 1e-3)), least, reps);
      if (slow)
        s = 2; // the next sample is the first one kept
      continue;
    }
    if (s < 3)
      continue; // warm-up
    ms.push_back(double(*t) / inner);
    if (s == 3 && cutoffMs > 0 && ms.back() > cutoffMs)
      break;
  }
  return ms;
}

llvm::Expected<std::vector<double>>
timeSustained(int samples, double sampleMs,
              const std::function<llvm::Expected<float>(int)> &sample) {
  auto t = sample(1);
  if (!t)
    return t.takeError();
  int inner = std::clamp(int(std::ceil(sampleMs / std::max(double(*t), 1e-4))), 1, 10000);
  std::vector<double> ms;
  for (int s = 0; s <= samples; ++s) {
    auto x = sample(inner);
    if (!x)
      return x.takeError();
    if (s > 0) // the first: the load comes up to its clocks
      ms.push_back(double(*x) / inner);
  }
  return ms;
}

llvm::Expected<std::unique_ptr<CandidateRunner>> CandidateRunner::create(const KernelSpec &spec,
                                                                         uint64_t seed, int reps) {
  auto drv = CudaDriver::get();
  if (!drv)
    return drv.takeError();
  std::unique_ptr<CandidateRunner> r(new CandidateRunner());
  r->drv_ = &*drv;
  r->reps_ = reps;
  r->harness_ = makeHarness(spec);
  if (!r->harness_)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "no tuning harness measures op '" + std::string(spec.opName()) +
                                       "'");
  if (auto e = r->harness_->prepare(spec, seed))
    return e;
  TJ_CU_CHECK(*drv, cuStreamCreate(&r->stream_, CU_STREAM_NON_BLOCKING));
  TJ_CU_CHECK(*drv, cuEventCreate(&r->a_, 0));
  TJ_CU_CHECK(*drv, cuEventCreate(&r->b_, 0));
  auto buf = DeviceBuffer::allocate(size_t(128) << 20);
  if (!buf)
    return buf.takeError();
  r->flush_ = std::move(*buf);
  return r;
}

CandidateRunner::~CandidateRunner() {
  if (!drv_)
    return;
  if (a_)
    drv_->cuEventDestroy_v2(a_);
  if (b_)
    drv_->cuEventDestroy_v2(b_);
  if (stream_)
    drv_->cuStreamDestroy_v2(stream_);
}

Measurement CandidateRunner::measure(const CompiledKernel &compiled, double cutoffMs,
                                     TimingMode timing, bool check) {
  const CudaDriver &drv = *drv_;
  Measurement m;
  // A launch-stage error may have poisoned the context (an illegal address,
  // a trap): then nothing after it can run in this context, and the error is
  // the candidate's fault.
  auto launchFailed = [&](llvm::Error e) {
    m.detail = llvm::toString(std::move(e));
    m.status = "launch";
    CUresult r = drv.cuCtxSynchronize();
    if (r != CUDA_SUCCESS) {
      m.status = "fault";
      m.detail = llvm::toString(drv.error(r, "the GPU context")) + " (after: " + m.detail + ")";
    }
    return m;
  };

  auto kernel = LoadedKernel::load(compiled);
  if (!kernel)
    return launchFailed(kernel.takeError());
  m.registers = (*kernel)->entry(0).registers;
  for (size_t e = 0; e < (*kernel)->numEntries(); ++e)
    m.spillBytes = std::max(m.spillBytes, (*kernel)->entry(e).spillBytes);
  if (m.spillBytes > kMaxSpillBytes) {
    m.status = "spills";
    m.detail = "uses " + std::to_string(m.spillBytes) +
               " bytes of local memory per thread (limit " + std::to_string(kMaxSpillBytes) +
               "): not measured";
    return m;
  }

  // Check first: poison, run once, verify (unless this binary passed the
  // check on these inputs already).
  llvm::Error checked = [&]() -> llvm::Error {
    if (auto e = harness_->bind(**kernel))
      return e;
    if (!check)
      return llvm::Error::success();
    if (auto e = harness_->poison(stream_))
      return e;
    if (auto e = harness_->run(**kernel, stream_, /*check=*/true))
      return e;
    TJ_CU_CHECK(drv, cuStreamSynchronize(stream_));
    return llvm::Error::success();
  }();
  if (checked)
    return launchFailed(std::move(checked));
  if (llvm::Error e = check ? harness_->verify() : llvm::Error::success()) {
    m.status = "verify";
    m.detail = llvm::toString(std::move(e));
    return m;
  }

  // Time: launches per sample so a sample lasts at least ~200 us. An error
  // here (the full problem may fail where the checked one ran) is the
  // candidate's.
  uint8_t fillValue = 0; // a new value per sample: the flush writes every byte
  bool sustained = timing == TimingMode::Sustained;
  auto sample = [&](int inner) -> llvm::Expected<float> {
    if (!sustained)
      if (auto e = flush_.fill(fillValue++, stream_))
        return e;
    TJ_CU_CHECK(drv, cuEventRecord(a_, stream_));
    for (int r = 0; r < inner; ++r)
      if (auto e = harness_->run(**kernel, stream_, /*check=*/false))
        return e;
    TJ_CU_CHECK(drv, cuEventRecord(b_, stream_));
    TJ_CU_CHECK(drv, cuEventSynchronize(b_));
    float t = 0;
    TJ_CU_CHECK(drv, cuEventElapsedTime_v2(&t, a_, b_));
    return t;
  };
  auto ms = sustained ? timeSustained(3, 10.0, sample) : timeSamples(reps_, cutoffMs, sample);
  if (!ms)
    return launchFailed(ms.takeError());
  summarizeSamples(std::move(*ms), m);
  m.status = "ok";
  return m;
}

} // namespace tilejit
