//===- Tuner.cpp ----------------------------------------------------------===//
#include "autotune/Tuner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <random>
#include <thread>

#include "autotune/Harness.h"
#include "compiler/EmbeddedSources.h"
#include "compiler/Nvrtc.h"
#include "compiler/templates/Template.h"
#include "runtime/CudaDriver.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Store.h"

namespace tilejit {

std::string toolchainId(const KernelSpec &spec) {
  return std::string("tilejit=") + tilejitVersion() + " nvrtc=" + nvrtcVersionString() +
         " device=" + std::string(embedded::deviceLibraryHash()).substr(0, 16) +
         " template=" + std::string(getTemplate(spec.op).sourceHash()).substr(0, 16);
}

std::string tuneKey(const KernelSpec &spec) {
  return spec.canonical(/*withRuntimeSizes=*/true) + " | " + toolchainId(spec);
}

int chooseWinner(const std::vector<CandidateResult> &c, double noise, std::string *reason) {
  int best = -1;
  for (size_t i = 0; i < c.size(); ++i)
    if ((c[i].status == "ok" || c[i].status == "stored") &&
        (best < 0 || c[i].medianMs < c[best].medianMs))
      best = int(i);
  if (best < 0)
    return -1;
  double limit = c[best].medianMs * (1.0 + noise);
  int chosen = best, ties = 0;
  for (size_t i = 0; i < c.size(); ++i)
    if ((c[i].status == "ok" || c[i].status == "stored") && c[i].medianMs <= limit) {
      ++ties;
      if (int(i) < chosen)
        chosen = int(i);
    }
  if (reason) {
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "fastest median %.4f ms; %d candidate(s) within %.1f %% of it; the earliest "
                  "in config-space order wins (%.4f ms)",
                  c[best].medianMs, ties, noise * 100, c[chosen].medianMs);
    *reason = buf;
  }
  return chosen;
}

namespace {

llvm::Error err(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Compiled {
  size_t index;
  llvm::Expected<CompiledKernel> kernel;
};

/// Median, 20th and 80th percentiles of `ms`.
void summarize(std::vector<double> ms, CandidateResult &r) {
  std::sort(ms.begin(), ms.end());
  r.medianMs = ms[ms.size() / 2];
  r.p20Ms = ms[ms.size() / 5];
  r.p80Ms = ms[std::min(ms.size() - 1, ms.size() * 4 / 5)];
  r.reps = int(ms.size());
}

} // namespace

llvm::Expected<TuneResult> tune(const KernelSpec &spec, Store *store, const TuneOptions &opt) {
  auto t0 = std::chrono::steady_clock::now();
  if (auto e = spec.validate())
    return e;
  if (opt.reps < 1)
    return err("tuning needs at least one timed sample per config (reps = " +
               std::to_string(opt.reps) + ")");
  auto drv = CudaDriver::get();
  if (!drv)
    return drv.takeError();
  auto scope = ScopedDevice::enter(opt.device);
  if (!scope)
    return scope.takeError();
  auto dev = queryDevice(opt.device);
  if (!dev)
    return dev.takeError();
  if (dev->arch() != spec.arch)
    return err("cannot tune " + spec.canonical() + " on " + dev->name + " (" + dev->arch() + ")");

  TuneResult result;
  result.spec = spec;
  result.tuneKey = tuneKey(spec);
  std::vector<TileConfig> space = getTemplate(spec.op).configSpace(spec);
  if (opt.maxConfigs > 0 && int(space.size()) > opt.maxConfigs)
    space.resize(size_t(opt.maxConfigs));
  result.candidates.resize(space.size());

  // Configs the store knows failed are skipped; configs it has timed are reused.
  std::vector<size_t> toMeasure;
  for (size_t i = 0; i < space.size(); ++i) {
    CandidateResult &c = result.candidates[i];
    c.config = space[i];
    if (store) {
      auto bad = store->isKnownBad(result.tuneKey, space[i].canonical());
      if (!bad)
        return bad.takeError();
      if (*bad) {
        c.status = "known-bad";
        continue;
      }
    }
    toMeasure.push_back(i);
  }
  if (store) {
    auto stored = store->timings(result.tuneKey);
    if (!stored)
      return stored.takeError();
    for (const Timing &t : *stored) {
      // Timings from another GPU model (an H100 and an H200 share sm_90a)
      // are not this GPU's.
      if (t.gpu != dev->name || t.smCount != dev->smCount)
        continue;
      for (size_t k = 0; k < toMeasure.size(); ++k) {
        CandidateResult &c = result.candidates[toMeasure[k]];
        if (c.config.canonical() == t.config && c.status.empty()) {
          c.status = "stored";
          c.medianMs = t.medianMs;
          c.p20Ms = t.p20Ms;
          c.p80Ms = t.p80Ms;
          c.reps = t.reps;
          ++result.reused;
        }
      }
    }
    toMeasure.erase(
        std::remove_if(toMeasure.begin(), toMeasure.end(),
                       [&](size_t i) { return result.candidates[i].status == "stored"; }),
        toMeasure.end());
  }

  auto harness = makeHarness(spec.op);
  uint64_t seed = opt.seed ? opt.seed : std::random_device{}();
  if (!toMeasure.empty())
    if (auto e = harness->prepare(spec, seed))
      return e;

  // Compile on all cores; the GPU loop below takes kernels as they finish.
  std::mutex mu;
  std::condition_variable ready;
  std::deque<Compiled> done;
  std::atomic<size_t> next{0};
  std::atomic<bool> stop{false};
  // One core stays free for the thread that launches and times candidates:
  // a timing thread starved by compiles leaves the GPU idle between launches
  // of short kernels and inflates their times.
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  unsigned threads =
      opt.compileThreads > 0 ? unsigned(opt.compileThreads) : std::max(1u, cores - 1);
  threads = std::min<unsigned>(threads, std::max<size_t>(toMeasure.size(), 1));
  std::vector<std::thread> workers;
  // Every way out of this function (errors included) stops and joins the
  // compile workers first.
  struct JoinOnExit {
    std::atomic<bool> &stop;
    std::vector<std::thread> &workers;
    ~JoinOnExit() {
      stop = true;
      for (auto &w : workers)
        if (w.joinable())
          w.join();
    }
  } joinOnExit{stop, workers};
  for (unsigned w = 0; w < threads && !toMeasure.empty(); ++w)
    workers.emplace_back([&] {
      for (;;) {
        size_t k = next.fetch_add(1);
        if (k >= toMeasure.size())
          return;
        size_t i = toMeasure[k];
        // Past the budget every claimed config is still reported, so the
        // consumer below sees exactly one item per config.
        auto kernel = stop.load() ? llvm::Expected<CompiledKernel>(err("over budget"))
                                  : compileKernel(spec, space[i]);
        std::lock_guard<std::mutex> lock(mu);
        done.push_back({i, std::move(kernel)});
        ready.notify_one();
      }
    });

  CUstream stream = nullptr;
  CUevent a = nullptr, b = nullptr;
  struct ReleaseOnExit {
    const CudaDriver &drv;
    CUstream &stream;
    CUevent &a, &b;
    ~ReleaseOnExit() {
      if (a)
        drv.cuEventDestroy_v2(a);
      if (b)
        drv.cuEventDestroy_v2(b);
      if (stream)
        drv.cuStreamDestroy_v2(stream);
    }
  } releaseOnExit{*drv, stream, a, b};
  // Written before every timed sample so that no candidate finds its inputs
  // in L2 (60 MB on an H200) left by the one before: the timings are of cold
  // caches, as in training, and do not depend on the order of measurement.
  DeviceBuffer flush;
  if (!toMeasure.empty()) {
    TJ_CU_CHECK(*drv, cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    TJ_CU_CHECK(*drv, cuEventCreate(&a, 0));
    TJ_CU_CHECK(*drv, cuEventCreate(&b, 0));
    auto buf = DeviceBuffer::allocate(size_t(128) << 20);
    if (!buf)
      return buf.takeError();
    flush = std::move(*buf);
  }
  auto recordFailure = [&](CandidateResult &c, const char *stage, const std::string &why) {
    c.status = stage;
    c.detail = why;
    // Out of memory is the machine's state, not the config's: not remembered.
    bool transient = why.find("CUDA_ERROR_OUT_OF_MEMORY") != std::string::npos;
    if (store && !transient)
      if (auto e = store->addFailure({result.tuneKey, c.config.canonical(), stage, why, 0}))
        llvm::consumeError(std::move(e));
  };
  // After a launch-stage error: a fault poisons the context, and then every
  // later candidate would fail for it. Such an error ends the tuning without
  // recording the rest as bad.
  auto contextBroken = [&](const CandidateResult &c) -> llvm::Error {
    CUresult r = drv->cuCtxSynchronize();
    if (r == CUDA_SUCCESS)
      return llvm::Error::success();
    return drv->error(r, "the GPU context after candidate [" + c.config.canonical() + "] (" +
                             c.detail + ")");
  };

  std::vector<std::unique_ptr<LoadedKernel>> loaded(space.size());
  std::vector<CompiledKernel> binaries(space.size());
  double bestMs = 0;
  for (size_t got = 0; got < toMeasure.size(); ++got) {
    Compiled item{0, llvm::Expected<CompiledKernel>(CompiledKernel{})};
    {
      std::unique_lock<std::mutex> lock(mu);
      ready.wait(lock, [&] { return !done.empty(); });
      item.index = done.front().index;
      item.kernel = std::move(done.front().kernel);
      done.pop_front();
    }
    CandidateResult &c = result.candidates[item.index];
    bool overBudget = opt.budgetSeconds > 0 && secondsSince(t0) > opt.budgetSeconds;
    if (overBudget || stop.load()) {
      stop = true;
      c.status = "budget";
      if (!item.kernel)
        llvm::consumeError(item.kernel.takeError());
      continue;
    }
    if (!item.kernel) {
      recordFailure(c, "compile", llvm::toString(item.kernel.takeError()));
      continue;
    }
    auto tl = std::chrono::steady_clock::now();
    auto kernel = LoadedKernel::load(*item.kernel);
    if (!kernel) {
      recordFailure(c, "launch", llvm::toString(kernel.takeError()));
      if (auto e = contextBroken(c))
        return e;
      continue;
    }
    c.registers = (*kernel)->entry(0).registers;
    for (size_t e = 0; e < (*kernel)->numEntries(); ++e)
      c.spillBytes = std::max(c.spillBytes, (*kernel)->entry(e).spillBytes);
    // Check first: poison, run once, verify.
    llvm::Error checked = [&]() -> llvm::Error {
      if (auto e = harness->bind(**kernel))
        return e;
      if (auto e = harness->poison(stream))
        return e;
      if (auto e = harness->run(**kernel, stream, /*check=*/true))
        return e;
      TJ_CU_CHECK(*drv, cuStreamSynchronize(stream));
      return llvm::Error::success();
    }();
    if (checked) {
      recordFailure(c, "launch", llvm::toString(std::move(checked)));
      if (auto e = contextBroken(c))
        return e;
      continue;
    }
    if (auto e = harness->verify()) {
      recordFailure(c, "verify", llvm::toString(std::move(e)));
      continue;
    }
    // Time: launches per sample so a sample lasts at least ~200 us. An error
    // here (the full problem may fail where the checked one ran) is the
    // candidate's: recorded, and the next one is measured.
    std::vector<double> ms;
    llvm::Error timed = [&]() -> llvm::Error {
      int inner = 1;
      for (int s = 0; s < opt.reps + 3; ++s) {
        if (auto e = flush.fill(uint8_t(s), stream))
          return e;
        TJ_CU_CHECK(*drv, cuEventRecord(a, stream));
        for (int r = 0; r < inner; ++r)
          if (auto e = harness->run(**kernel, stream, /*check=*/false))
            return e;
        TJ_CU_CHECK(*drv, cuEventRecord(b, stream));
        TJ_CU_CHECK(*drv, cuEventSynchronize(b));
        float t = 0;
        TJ_CU_CHECK(*drv, cuEventElapsedTime_v2(&t, a, b));
        if (s == 0) {
          inner = std::clamp(int(0.2 / std::max(t, 1e-4f)), 1, 1000);
          continue;
        }
        if (s < 3)
          continue; // warm-up
        ms.push_back(double(t) / inner);
      }
      return llvm::Error::success();
    }();
    if (timed) {
      recordFailure(c, "launch", llvm::toString(std::move(timed)));
      if (auto e = contextBroken(c))
        return e;
      continue;
    }
    summarize(ms, c);
    c.status = "ok";
    ++result.measured;
    if (store) {
      Timing t{result.tuneKey,
               c.config.canonical(),
               c.medianMs,
               c.p20Ms,
               c.p80Ms,
               c.reps,
               dev->name,
               dev->smCount,
               dev->driverVersion,
               dev->clockKHz / 1000,
               dev->memClockKHz / 1000,
               0};
      if (auto e = store->addTiming(t))
        return e;
    }
    binaries[item.index] = std::move(*item.kernel);
    loaded[item.index] = std::move(*kernel);
    bestMs = bestMs == 0 ? c.medianMs : std::min(bestMs, c.medianMs);
    if (opt.progress) {
      double per = secondsSince(tl);
      opt.progress(int(got + 1), int(toMeasure.size()), bestMs,
                   per * double(toMeasure.size() - got - 1));
    }
  }
  stop = true;
  for (auto &w : workers)
    if (w.joinable())
      w.join();
  result.compileSeconds = secondsSince(t0);

  int win = chooseWinner(result.candidates, opt.noise, &result.reason);
  if (win < 0)
    return err("no config of " + spec.canonical() + " compiled, ran and verified (" +
               std::to_string(space.size()) + " tried)");
  result.winner = result.candidates[size_t(win)].config;
  result.winnerMs = result.candidates[size_t(win)].medianMs;
  if (store) {
    if (binaries[size_t(win)].cubin.empty()) {
      auto k = compileKernel(spec, result.winner);
      if (!k)
        return k.takeError();
      binaries[size_t(win)] = std::move(*k);
    }
    const CompiledKernel &k = binaries[size_t(win)];
    StoredKernel sk;
    sk.key = k.key;
    sk.spec = spec.canonical(false);
    sk.config = result.winner.canonical();
    sk.arch = spec.arch;
    sk.toolchain = toolchainId(spec);
    sk.cubin = k.cubin;
    sk.ptx = k.ptx;
    sk.launch = entriesToJson(k.entries);
    sk.workspaceBytes = k.workspaceBytes;
    if (auto e = store->putKernel(std::move(sk)))
      return e;
    if (auto e = store->setWinner(
            {result.tuneKey, result.winner.canonical(), k.key, result.winnerMs, result.reason, 0}))
      return e;
  }
  result.wallSeconds = secondsSince(t0);
  return result;
}

} // namespace tilejit
