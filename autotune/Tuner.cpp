//===- Tuner.cpp ----------------------------------------------------------===//
#include "autotune/Tuner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "autotune/Measure.h"
#include "autotune/Worker.h"
#include "compiler/EmbeddedSources.h"
#include "compiler/Nvrtc.h"
#include "compiler/templates/Template.h"
#include "runtime/CudaDriver.h"
#include "runtime/Store.h"

namespace tilejit {

std::string toolchainId(const KernelSpec &spec, Backend backend) {
  BuildIdentity id = buildIdentity(spec, backend);
  std::string line = "backend=" + id.backend + " ";
  for (char c : id.toolchain)
    line += c == '\n' ? ' ' : c;
  return line;
}

std::string tuneKey(const KernelSpec &spec, Backend backend) {
  return tuneKey(spec, buildIdentity(spec, backend));
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

} // namespace

namespace {
/// `e`, from the store, marked as the store's (isStoreFailure).
llvm::Error storeFailure(llvm::Error e) {
  return llvm::createStringError(std::make_error_code(std::errc::io_error), "the store: %s",
                                 llvm::toString(std::move(e)).c_str());
}
} // namespace

bool isStoreFailure(const llvm::ErrorInfoBase &e) {
  return e.convertToErrorCode() == std::errc::io_error;
}

llvm::Expected<TuneResult> tune(const KernelSpec &requested, Store *store, const TuneOptions &opt) {
  auto t0 = std::chrono::steady_clock::now();
  if (auto e = requested.validate())
    return e;
  const KernelSpec spec = requested.tuningSpec();
  if (auto e = spec.validate())
    return e;
  if (opt.reps < 1)
    return err("tuning needs at least one timed sample per config (reps = " +
               std::to_string(opt.reps) + ")");
  std::optional<DeviceInfo> queried;
  const DeviceInfo *dev = opt.deviceInfo;
  if (!dev) {
    auto drv = CudaDriver::get();
    if (!drv)
      return drv.takeError();
    auto q = queryDevice(opt.device);
    if (!q)
      return q.takeError();
    queried = std::move(*q);
    dev = &*queried;
  }
  auto gpu = dev->target();
  if (!gpu)
    return gpu.takeError();
  if (auto e = spec.checkTarget(*gpu))
    return err("cannot tune on " + dev->name + ": " + llvm::toString(std::move(e)));

  TuneResult result;
  result.spec = spec;
  result.tuneKey = tuneKey(spec, opt.backend);
  const KernelTemplate &tmpl = getTemplate(spec);
  std::vector<TileConfig> space = tmpl.configSpace(spec);
  if (store) {
    // Winners of this spec under an older build identity (a toolchain or
    // source change) are likely winners again: measured first, never used
    // unmeasured.
    auto older = store->winnersWithPrefix(tuneKeyPrefix(spec));
    if (!older)
      return storeFailure(older.takeError());
    std::vector<TileConfig> first;
    for (const Winner &w : *older) {
      if (w.tuneKey == result.tuneKey)
        continue;
      auto c = TileConfig::parse(w.config);
      if (!c) {
        llvm::consumeError(c.takeError());
        continue;
      }
      if (auto bad = tmpl.checkConfig(spec, *c)) {
        llvm::consumeError(std::move(bad));
        continue;
      }
      if (std::find(first.begin(), first.end(), *c) == first.end())
        first.push_back(*c);
    }
    for (auto it = first.rbegin(); it != first.rend(); ++it) {
      space.erase(std::remove(space.begin(), space.end(), *it), space.end());
      space.insert(space.begin(), *it);
    }
  }
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
        return storeFailure(bad.takeError());
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
      return storeFailure(stored.takeError());
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

  // Where candidates run. In a worker process, which prepares its inputs
  // while the compiles below start, a candidate that faults or hangs the GPU
  // costs that worker only; in this process it ends the tuning.
  uint64_t seed = opt.seed ? opt.seed : std::random_device{}();
  std::optional<ScopedDevice> scope;
  std::unique_ptr<CandidateRunner> runner;
  std::unique_ptr<WorkerProcess> ownWorker;
  WorkerProcess *worker = nullptr;
  // tilejit-worker measures (unless the caller started one) and compiles:
  // NVRTC serializes the compiles of one process, so each compile thread
  // below sends its sources to a compiler process of its own. Without the
  // binary, a caller-started worker still measures and compiles run here.
  std::string helperPath;
  if (opt.isolation == TuneOptions::Isolation::Process) {
    auto path = findWorker(opt.workerPath);
    if (path)
      helperPath = *path;
    else if (!opt.worker)
      return path.takeError();
    else
      llvm::consumeError(path.takeError());
  }
  if (!toMeasure.empty() && opt.isolation == TuneOptions::Isolation::Process) {
    if (opt.worker) {
      worker = opt.worker;
    } else {
      WorkerProcess::Options wo;
      wo.path = helperPath;
      wo.device = opt.device;
      auto w = WorkerProcess::start(wo);
      if (!w)
        return w.takeError();
      ownWorker = std::move(*w);
      worker = ownWorker.get();
    }
    worker->setCandidateSeconds(opt.candidateSeconds);
    if (auto e = worker->prepare(spec, seed, opt.reps))
      return e;
  }
  auto compile = [&](size_t i, std::unique_ptr<CompilerProcess> &compiler) {
    if (opt.compile)
      return opt.compile(spec, space[i]);
    if (!compiler && !helperPath.empty()) {
      auto c = CompilerProcess::start(helperPath);
      if (c)
        compiler = std::move(*c);
      else
        llvm::consumeError(c.takeError());
    }
    CompileOptions co;
    co.backend = opt.backend;
    if (compiler)
      compiler->useFor(co);
    return compileKernel(spec, space[i], co);
  };

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
      std::unique_ptr<CompilerProcess> compiler;
      for (;;) {
        size_t k = next.fetch_add(1);
        if (k >= toMeasure.size())
          return;
        size_t i = toMeasure[k];
        // Past the budget every claimed config is still reported, so the
        // consumer below sees exactly one item per config.
        auto kernel =
            stop.load() ? llvm::Expected<CompiledKernel>(err("over budget")) : compile(i, compiler);
        std::lock_guard<std::mutex> lock(mu);
        done.push_back({i, std::move(kernel)});
        ready.notify_one();
      }
    });

  // The measuring side gets ready while the first configs compile.
  if (!toMeasure.empty()) {
    if (worker) {
      if (auto e = worker->waitReady())
        return e;
    } else {
      auto entered = ScopedDevice::enter(opt.device);
      if (!entered)
        return entered.takeError();
      scope.emplace(std::move(*entered));
      auto r = CandidateRunner::create(spec, seed, opt.reps);
      if (!r)
        return r.takeError();
      runner = std::move(*r);
    }
  }
  result.readySeconds = secondsSince(t0);

  auto recordFailure = [&](CandidateResult &c, const std::string &status, const char *stage,
                           const std::string &why, bool interrupted = false) {
    c.status = status;
    c.detail = why;
    // Out of memory, or a compile interrupted (its process lost, perhaps to
    // the machine's OOM killer), is the machine's state, not the config's:
    // not remembered.
    bool transient = interrupted || why.find("CUDA_ERROR_OUT_OF_MEMORY") != std::string::npos;
    if (store && !transient)
      if (auto e = store->addFailure({result.tuneKey, c.config.canonical(), stage, why, 0}))
        llvm::consumeError(std::move(e));
  };

  int decided = 0;
  auto report = [&](const CandidateResult &c) {
    ++decided;
    if (opt.onCandidate)
      opt.onCandidate(c, decided, int(space.size()));
  };
  for (const CandidateResult &c : result.candidates)
    if (c.status == "known-bad" || c.status == "stored")
      report(c);

  std::vector<CompiledKernel> binaries(space.size());
  double bestMs = 0;
  bool cancelled = false;
  for (size_t got = 0; got < toMeasure.size(); ++got) {
    Compiled item{0, llvm::Expected<CompiledKernel>(CompiledKernel{})};
    {
      auto tw = std::chrono::steady_clock::now();
      std::unique_lock<std::mutex> lock(mu);
      ready.wait(lock, [&] { return !done.empty(); });
      result.waitSeconds += secondsSince(tw);
      item.index = done.front().index;
      item.kernel = std::move(done.front().kernel);
      done.pop_front();
    }
    CandidateResult &c = result.candidates[item.index];
    bool overBudget = opt.budgetSeconds > 0 && secondsSince(t0) > opt.budgetSeconds;
    if (!cancelled && opt.cancelled && opt.cancelled())
      cancelled = true;
    if (overBudget || cancelled || stop.load()) {
      stop = true;
      c.status = cancelled ? "cancelled" : "budget";
      if (!item.kernel)
        llvm::consumeError(item.kernel.takeError());
      report(c);
      continue;
    }
    if (!item.kernel) {
      llvm::Error e = item.kernel.takeError();
      bool interrupted = e.isA<CompileInterrupted>();
      recordFailure(c, "compile", "compile", llvm::toString(std::move(e)), interrupted);
      report(c);
      continue;
    }
    auto tl = std::chrono::steady_clock::now();
    // A candidate 1.5x slower than the best so far stops after one sample:
    // it cannot win (it reaches the finals only where fewer than their
    // number are faster, or as the default).
    double cutoff = bestMs > 0 ? 1.5 * bestMs : 0;
    llvm::Expected<Measurement> measured =
        worker ? worker->measure(*item.kernel, cutoff) : runner->measure(*item.kernel, cutoff);
    result.measureSeconds += secondsSince(tl);
    if (!measured)
      return measured.takeError(); // no worker could be started
    const Measurement &m = *measured;
    c.registers = m.registers;
    c.spillBytes = m.spillBytes;
    if (m.status == "verify") {
      recordFailure(c, "verify", "verify", m.detail);
      report(c);
      continue;
    }
    if (m.status == "spills") {
      recordFailure(c, "spills", "compile", m.detail); // a property of the binary
      report(c);
      continue;
    }
    if (m.status != "ok") {
      // "launch", or a "fault" / "timeout" that cost a worker; all are
      // failures at launch for the store.
      recordFailure(c, m.status, "launch", m.detail);
      if (!worker && m.status == "fault")
        return err("tuning stopped: candidate [" + c.config.canonical() +
                   "] broke this process's GPU context: " + m.detail);
      report(c);
      continue;
    }
    c.medianMs = m.medianMs;
    c.p20Ms = m.p20Ms;
    c.p80Ms = m.p80Ms;
    c.reps = m.reps;
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
        return storeFailure(std::move(e));
    }
    binaries[item.index] = std::move(*item.kernel);
    bestMs = bestMs == 0 ? c.medianMs : std::min(bestMs, c.medianMs);
    report(c);
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

  // Finals: the screening times each candidate alone, after an L2 flush,
  // the GPU idle between samples; an arithmetic-bound kernel runs a
  // training step under sustained load, at the clocks that load leaves it,
  // which differ by config (bench/NOTES.md, GEMM g9). The fastest
  // candidates and the default config are timed again that way, in turns,
  // and the winner is chosen among them.
  // (Not past the budget, and only with a measuring side: where every
  // timing came from the store, none was started, and they decide.)
  std::vector<size_t> finals;
  bool overBudget = opt.budgetSeconds > 0 && secondsSince(t0) > opt.budgetSeconds;
  if (!cancelled && !overBudget && (worker || runner) && opt.finalists > 0 && opt.finalRounds > 0 &&
      tmpl.tunedUnderLoad()) {
    auto good = [&](size_t i) {
      const std::string &st = result.candidates[i].status;
      return st == "ok" || st == "stored";
    };
    std::vector<size_t> ranked;
    for (size_t i = 0; i < space.size(); ++i)
      if (good(i))
        ranked.push_back(i);
    std::stable_sort(ranked.begin(), ranked.end(), [&](size_t a, size_t b) {
      return result.candidates[a].medianMs < result.candidates[b].medianMs;
    });
    if (ranked.size() > size_t(opt.finalists))
      ranked.resize(size_t(opt.finalists));
    TileConfig dflt = tmpl.defaultConfig(spec);
    for (size_t i = 0; i < space.size(); ++i)
      if (space[i] == dflt && good(i) && std::find(ranked.begin(), ranked.end(), i) == ranked.end())
        ranked.push_back(i);
    // Reused timings have no binary here: compiled now.
    for (size_t i : ranked) {
      if (binaries[i].cubin.empty()) {
        std::unique_ptr<CompilerProcess> none;
        auto k = compile(i, none);
        if (!k) {
          llvm::consumeError(k.takeError());
          continue;
        }
        binaries[i] = std::move(*k);
      }
      finals.push_back(i);
    }
  }
  if (finals.size() > 1) {
    auto tf = std::chrono::steady_clock::now();
    std::vector<std::vector<double>> rounds(finals.size());
    bool noWorker = false;
    // Odd rounds in the reverse order: a drift of the clocks over the finals
    // favours no candidate.
    for (int r = 0; r < opt.finalRounds && !noWorker && !cancelled; ++r)
      for (size_t n = 0; n < finals.size() && !noWorker; ++n) {
        size_t f = r % 2 ? finals.size() - 1 - n : n;
        if (r > 0 && rounds[f].empty())
          continue; // out since an earlier round
        if (opt.cancelled && opt.cancelled()) {
          cancelled = true;
          break;
        }
        CandidateResult &c = result.candidates[finals[f]];
        // Checked once per tuning: a candidate measured in this screening
        // was, on the same inputs; a stored one is checked in the first round.
        bool check = r == 0 && c.status == "stored";
        llvm::Expected<Measurement> m =
            worker ? worker->measure(binaries[finals[f]], 0, TimingMode::Sustained, check)
                   : runner->measure(binaries[finals[f]], 0, TimingMode::Sustained, check);
        if (!m) {
          // No worker could be started again: the screening decides.
          llvm::consumeError(m.takeError());
          noWorker = true;
          break;
        }
        if (m->status != "ok") {
          // A failure under load is the candidate's, as in the screening:
          // recorded, and out of the finals and of the choice.
          const char *stage = m->status == "verify"   ? "verify"
                              : m->status == "spills" ? "compile"
                                                      : "launch";
          recordFailure(c, m->status, stage, m->detail + " (under sustained load)");
          if (!worker && m->status == "fault")
            return err("tuning stopped: candidate [" + c.config.canonical() +
                       "] broke this process's GPU context under sustained load: " + m->detail);
          rounds[f].clear();
          continue;
        }
        rounds[f].push_back(m->medianMs);
      }
    if (noWorker)
      for (auto &x : rounds)
        x.clear();
    for (size_t f = 0; f < finals.size(); ++f) {
      if (rounds[f].size() != size_t(opt.finalRounds))
        continue;
      double sum = 0;
      for (double x : rounds[f])
        sum += x;
      result.candidates[finals[f]].sustainedMs = sum / double(rounds[f].size());
      ++result.finalists;
    }
    result.finalsSeconds = secondsSince(tf);
    if (result.finalists < 2) {
      result.finalists = 0; // nothing to rank by: the screening decides
      for (CandidateResult &c : result.candidates)
        c.sustainedMs = 0;
    }
  }
  if (worker)
    result.workersLost = worker->lost();
  ownWorker.reset();
  runner.reset();
  if (cancelled)
    return err("tuning of " + spec.canonical() + " cancelled after " +
               std::to_string(result.measured) + " measured config(s); no winner recorded");

  int win = -1;
  if (result.finalists > 0) {
    // Among the finalists, by their sustained timings.
    std::vector<CandidateResult> ranked;
    std::vector<size_t> at;
    for (size_t i = 0; i < result.candidates.size(); ++i)
      if (result.candidates[i].sustainedMs > 0) {
        ranked.push_back(result.candidates[i]);
        ranked.back().medianMs = result.candidates[i].sustainedMs;
        at.push_back(i);
      }
    std::string why;
    int f = chooseWinner(ranked, opt.noise, &why);
    win = int(at[size_t(f)]);
    result.reason = "under sustained load (" + std::to_string(result.finalists) + " finalists, " +
                    std::to_string(opt.finalRounds) + " rounds): " + why;
  } else {
    win = chooseWinner(result.candidates, opt.noise, &result.reason);
  }
  if (win < 0)
    return err("no config of " + spec.canonical() + " compiled, ran and verified (" +
               std::to_string(space.size()) + " tried)");
  result.winner = result.candidates[size_t(win)].config;
  // The screening's median, as the store's timings have it (the sustained
  // one is in the reason and the candidate's sustainedMs).
  result.winnerMs = result.candidates[size_t(win)].medianMs;
  if (store) {
    if (binaries[size_t(win)].cubin.empty()) {
      std::unique_ptr<CompilerProcess> none;
      auto k = compile(size_t(win), none);
      if (!k)
        return k.takeError();
      binaries[size_t(win)] = std::move(*k);
    }
    const CompiledKernel &k = binaries[size_t(win)];
    StoredKernel sk;
    sk.key = k.key;
    sk.spec = spec.canonical(false);
    sk.config = result.winner.canonical();
    sk.arch = std::string(spec.target.archName());
    sk.toolchain = toolchainId(spec, opt.backend);
    sk.cubin = k.cubin;
    sk.ptx = k.ptx;
    sk.launch = entriesToJson(k.entries);
    sk.workspaceBytes = k.workspaceBytes;
    if (auto e = store->putKernel(std::move(sk)))
      return storeFailure(std::move(e));
    if (auto e = store->setWinner(
            {result.tuneKey, result.winner.canonical(), k.key, result.winnerMs, result.reason, 0}))
      return storeFailure(std::move(e));
  }
  result.wallSeconds = secondsSince(t0);
  return result;
}

} // namespace tilejit
