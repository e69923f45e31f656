//===- TuneCommand.cpp - `tilejit tune` and `tilejit explain` ---------------===//
#include "tools/tilejit/Commands.h"

#include "core/Settings.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "autotune/Tuner.h"
#include "autotune/Worker.h"
#include "compiler/templates/Template.h"
#include "runtime/CudaDriver.h"
#include "runtime/Store.h"
#include "service/Client.h"
#include "service/SharedTuning.h"
#include "tools/tilejit/Output.h"
#include "tools/tilejit/SpecOptions.h"

namespace tilejit::cli {

namespace {

struct TuneArgs {
  SpecOptions spec;
  std::string db;
  double budget = 0;
  int maxConfigs = 0;
  int reps = 30;
  bool json = false;
  bool inProcess = false;
  double candidateSeconds = 10;
  std::string server; ///< tune on this server's GPU (host:port)
  bool candidateTimeoutGiven = false;
};

/// The store `tune` writes to (made when missing), or the one `explain`
/// reads (opened read-only: null when there is none).
llvm::Expected<std::unique_ptr<Store>> openStore(const std::string &path, bool forReading) {
  std::string file = settings::storePath(path);
  if (forReading)
    return Store::openForReading(file);
  std::string notice;
  auto store = Store::open(file, &notice);
  if (store && !notice.empty())
    std::fprintf(stderr, "tilejit: %s\n", notice.c_str());
  return store;
}

nlohmann::json candidateJson(const CandidateResult &c) {
  return {{"config", c.config.canonical()},
          {"status", c.status},
          {"median_ms", c.medianMs},
          {"p20_ms", c.p20Ms},
          {"p80_ms", c.p80Ms},
          {"reps", c.reps},
          {"registers", c.registers},
          {"spill_bytes", c.spillBytes},
          {"sustained_ms", c.sustainedMs},
          {"detail", c.detail}};
}

/// The spec the flags describe, for `arch` and `sms` (the GPU here), and the
/// store they name.
llvm::Error specAndStore(const TuneArgs &a, const std::string &arch, int sms, KernelSpec &spec,
                         std::unique_ptr<Store> &store, bool forReading = false) {
  auto built = a.spec.build(arch, sms);
  if (!built)
    return built.takeError();
  auto opened = openStore(a.db, forReading);
  if (!opened)
    return opened.takeError();
  spec = std::move(*built);
  store = std::move(*opened);
  return llvm::Error::success();
}

/// `tilejit tune --server ADDR`: the server tunes on its GPU and publishes
/// the winner there; each candidate is printed as the server streams it.
int runRemoteTune(const TuneArgs &a) {
  if (a.inProcess || !a.db.empty() || a.candidateTimeoutGiven)
    return usageError("--in-process, --db and --candidate-timeout apply to a tuning here; with "
                      "--server the server tunes on its GPU into its own store");
  auto built = a.spec.build();
  if (!built)
    return usageError(llvm::toString(built.takeError()));
  auto options = ClientOptions::fromEnvironment(a.server);
  if (!options)
    return usageError(llvm::toString(options.takeError()));
  Client client(**options);
  RemoteTuneOptions ro;
  ro.holder = leaseHolderName();
  ro.maxConfigs = a.maxConfigs;
  ro.budgetSeconds = a.budget;
  ro.reps = a.reps;
  auto started = [&](const RemoteTuning &t) {
    if (a.json)
      return;
    std::printf("tuning   %s on %s (server %s)\n", shown(t.spec).c_str(), shown(t.gpu).c_str(),
                shown(a.server).c_str());
    std::fflush(stdout);
  };
  auto candidate = [&](const CandidateResult &c, int done, int total) {
    if (a.json)
      return;
    if (c.status == "ok" || c.status == "stored")
      std::printf("  %3d/%-3d %-44s %.4f ms [%.4f, %.4f]%s\n", done, total,
                  c.config.canonical().c_str(), c.medianMs, c.p20Ms, c.p80Ms,
                  c.status == "stored" ? " (stored)" : "");
    else
      std::printf("  %3d/%-3d %-44s %s%s%s\n", done, total, c.config.canonical().c_str(),
                  shown(c.status).c_str(), c.detail.empty() ? "" : ": ",
                  shown(c.detail.substr(0, 160)).c_str());
    std::fflush(stdout);
  };
  auto r = client.tune(*built, ro, started, candidate);
  if (!r)
    return fail(llvm::toString(r.takeError()));
  if (a.json) {
    nlohmann::json j = {{"server", a.server},
                        {"spec", r->spec},
                        {"gpu", r->gpu},
                        {"tune_key", r->tuneKey},
                        {"winner", r->winner.canonical()},
                        {"winner_ms", r->winnerMs},
                        {"winner_p20_ms", r->winnerP20Ms},
                        {"winner_p80_ms", r->winnerP80Ms},
                        {"kernel_key", r->kernelKey},
                        {"reason", r->reason},
                        {"wall_s", r->wallSeconds},
                        {"measured", r->measured},
                        {"reused", r->reused},
                        {"failed", r->failed},
                        {"candidates", nlohmann::json::array()}};
    for (auto &c : r->candidates)
      j["candidates"].push_back(candidateJson(c));
    std::printf("%s\n", dumped(j).c_str());
    return 0;
  }
  std::printf("winner   %s  %.4f ms [%.4f, %.4f], published on %s\nwhy      %s\n",
              r->winner.canonical().c_str(), r->winnerMs, r->winnerP20Ms, r->winnerP80Ms,
              shown(a.server).c_str(), shown(r->reason).c_str());
  std::printf("measured %d, reused %d stored timings, %d skipped or failed; %.2f s on the server\n",
              r->measured, r->reused, r->failed, r->wallSeconds);
  return 0;
}

int runTune(const TuneArgs &a) {
  // Bad flags are reported before anything else, GPU or not.
  if (auto checked = a.spec.build(); !checked)
    return usageError(llvm::toString(checked.takeError()));
  // Finite, so that nan and inf (and 1e400, read as inf) are refused too.
  if (!std::isfinite(a.budget) || a.budget < 0)
    return usageError("--budget " + std::to_string(a.budget) +
                      ": seconds must be a finite number >= 0");
  if (!std::isfinite(a.candidateSeconds) || !(a.candidateSeconds > 0) || a.candidateSeconds > 86400)
    return usageError("--candidate-timeout " + std::to_string(a.candidateSeconds) +
                      ": seconds must be a finite number in (0, 86400]");
  if (a.maxConfigs < 0 || a.reps < 3)
    return usageError("--max-configs must be >= 0 and --reps >= 3");
  if (!a.server.empty())
    return runRemoteTune(a);
  // The measuring worker makes its GPU context while this process queries
  // the GPU, opens the store and compiles.
  std::unique_ptr<WorkerProcess> worker;
  std::string workerPath;
  if (!a.inProcess) {
    auto path = findWorker();
    if (!path)
      return fail(llvm::toString(path.takeError()));
    workerPath = *path;
    WorkerProcess::Options wo;
    wo.path = workerPath;
    auto w = WorkerProcess::start(wo);
    if (!w)
      return fail(llvm::toString(w.takeError()));
    worker = std::move(*w);
  }
  std::string arch;
  int sms = 0;
  if (auto dev = queryDevice(0)) {
    arch = dev->arch();
    sms = dev->smCount;
  } else {
    return noGpu("tuning needs a GPU: " + llvm::toString(dev.takeError()));
  }
  KernelSpec spec;
  std::unique_ptr<Store> store;
  if (auto e = specAndStore(a, arch, sms, spec, store))
    return fail(llvm::toString(std::move(e)));

  TuneOptions opt;
  opt.budgetSeconds = a.budget;
  opt.maxConfigs = a.maxConfigs;
  opt.reps = a.reps;
  opt.candidateSeconds = a.candidateSeconds;
  if (a.inProcess)
    opt.isolation = TuneOptions::Isolation::InProcess;
  opt.worker = worker.get();
  opt.workerPath = workerPath; // the compiler processes are the same program
  bool tty = isatty(fileno(stderr)) && !a.json;
  if (tty)
    opt.progress = [](int done, int total, double best, double eta) {
      std::fprintf(stderr, "\r  config %d/%d  best %.4f ms  ETA %.1f s   ", done, total, best, eta);
      std::fflush(stderr);
    };
  auto r = tune(spec, store.get(), opt);
  if (tty)
    std::fprintf(stderr, "\n");
  if (!r)
    return fail(llvm::toString(r.takeError()));

  if (a.json) {
    nlohmann::json j = {{"spec", r->spec.canonical()},
                        {"tune_key", r->tuneKey},
                        {"winner", r->winner.canonical()},
                        {"winner_ms", r->winnerMs},
                        {"reason", r->reason},
                        {"wall_s", r->wallSeconds},
                        {"measured", r->measured},
                        {"reused", r->reused},
                        {"workers_lost", r->workersLost},
                        {"ready_s", r->readySeconds},
                        {"wait_s", r->waitSeconds},
                        {"measure_s", r->measureSeconds},
                        {"finalists", r->finalists},
                        {"finals_s", r->finalsSeconds}};
    for (auto &c : r->candidates)
      j["candidates"].push_back(candidateJson(c));
    std::printf("%s\n", dumped(j).c_str());
    return 0;
  }
  int failed = 0;
  for (auto &c : r->candidates)
    failed += c.status != "ok" && c.status != "stored";
  std::printf("spec     %s\n", r->spec.canonical().c_str());
  if (spec != r->spec)
    std::printf("         (measured at %s: the winner serves every size of its bucket)\n",
                r->spec.canonical().c_str());
  std::printf("winner   %s  %.4f ms\nwhy      %s\n", r->winner.canonical().c_str(), r->winnerMs,
              shown(r->reason).c_str());
  std::printf("measured %d, reused %d stored timings, %d skipped or failed; %.2f s\n", r->measured,
              r->reused, failed, r->wallSeconds);
  std::printf("time     measuring side ready after %.2f s; then %.2f s measuring, %.2f s waiting "
              "for compiles\n",
              r->readySeconds, r->measureSeconds, r->waitSeconds);
  if (r->finalists > 0) {
    std::printf("finals   %d candidates timed again under sustained load in %.2f s "
                "(screening ms -> sustained ms):\n",
                r->finalists, r->finalsSeconds);
    for (auto &c : r->candidates)
      if (c.sustainedMs > 0)
        std::printf("  %-60s %.4f -> %.4f\n", c.config.canonical().c_str(), c.medianMs,
                    c.sustainedMs);
  }
  for (auto &c : r->candidates)
    if (c.status == "fault" || c.status == "timeout")
      std::printf("  [%s] %s: %s\n", c.config.canonical().c_str(), c.status.c_str(),
                  shown(c.detail.substr(0, 200)).c_str());
  if (r->workersLost)
    std::printf("the measuring worker was replaced %d time(s)\n", r->workersLost);
  return 0;
}

int runExplain(const TuneArgs &a) {
  KernelSpec spec;
  std::string key, toolchain, defaultConfig;
  std::optional<Winner> winner;
  std::vector<Timing> timingRows;
  std::vector<Failure> failureRows;
  std::optional<RemoteExplanation> remote;
  if (!a.server.empty()) {
    // The server's tuning: its GPU, not this host's, so the spec is the
    // flags' (--arch, else sm_90a).
    if (!a.db.empty())
      return usageError("--db and --server do not combine: explain reads one store");
    auto built = a.spec.build();
    if (!built)
      return usageError(llvm::toString(built.takeError()));
    spec = std::move(*built);
    auto options = ClientOptions::fromEnvironment(a.server);
    if (!options)
      return usageError(llvm::toString(options.takeError()));
    Client client(**options);
    auto e = client.explain(spec);
    if (!e)
      return fail(llvm::toString(e.takeError()));
    remote = std::move(*e);
    key = remote->tuneKey;
    toolchain = remote->toolchain;
    defaultConfig = remote->defaultConfig.canonical();
    winner = remote->winner;
    timingRows = remote->timings;
    failureRows = remote->failures;
  } else {
    std::string arch;
    int sms = 0;
    if (auto dev = queryDevice(0)) {
      arch = dev->arch();
      sms = dev->smCount;
    } else {
      llvm::consumeError(dev.takeError());
    }
    if (auto checked = a.spec.build(arch, sms); !checked)
      return usageError(llvm::toString(checked.takeError()));
    std::unique_ptr<Store> store;
    if (auto e = specAndStore(a, arch, sms, spec, store, /*forReading=*/true))
      return fail(llvm::toString(std::move(e)));
    key = tuneKey(spec);
    toolchain = toolchainId(spec);
    defaultConfig = getTemplate(spec).defaultConfig(spec).canonical();
    // No store yet: nothing tuned, nothing measured.
    if (store) {
      auto w = store->winner(key);
      if (!w)
        return fail(llvm::toString(w.takeError()));
      winner = std::move(*w);
      auto timings = store->timings(key);
      if (!timings)
        return fail(llvm::toString(timings.takeError()));
      timingRows = std::move(*timings);
      auto failures = store->failures(key);
      if (!failures)
        return fail(llvm::toString(failures.takeError()));
      failureRows = std::move(*failures);
    }
  }
  const std::optional<Winner> *w = &winner;
  const std::vector<Failure> *failures = &failureRows;
  KernelSpec tuned = spec.tuningSpec();
  std::vector<Timing> t = timingRows;
  std::sort(t.begin(), t.end(),
            [](const Timing &x, const Timing &y) { return x.medianMs < y.medianMs; });
  if (a.json) {
    nlohmann::json j = {{"spec", spec.canonical()},
                        {"toolchain", toolchain},
                        {"tune_key", key},
                        {"tuned_at", tuned.canonical()},
                        {"timings", nlohmann::json::array()},
                        {"failures", nlohmann::json::array()}};
    if (*w)
      j["chosen"] = {{"config", (*w)->config},
                     {"median_ms", (*w)->medianMs},
                     {"kernel_key", (*w)->kernelKey},
                     {"reason", (*w)->reason}};
    else
      j["chosen"] = nullptr;
    j["default_config"] = defaultConfig;
    if (remote) {
      j["server"] = a.server;
      j["stored_on_server"] = remote->stored;
      j["truncated"] = remote->truncated;
    }
    for (const Timing &x : t)
      j["timings"].push_back({{"config", x.config},
                              {"median_ms", x.medianMs},
                              {"p20_ms", x.p20Ms},
                              {"p80_ms", x.p80Ms},
                              {"reps", x.reps},
                              {"gpu", x.gpu}});
    for (const Failure &f : *failures)
      j["failures"].push_back({{"config", f.config}, {"stage", f.stage}, {"reason", f.reason}});
    std::printf("%s\n", dumped(j).c_str());
    return 0;
  }
  std::printf("spec     %s\ntoolchain %s\n", spec.canonical().c_str(), shown(toolchain).c_str());
  if (remote)
    std::printf("server   %s: the config's kernel is %sin its store%s\n", shown(a.server).c_str(),
                remote->stored ? "" : "not ",
                remote->truncated ? "; timings or failures cut at its list cap" : "");
  for (size_t i = 0; i < spec.op()->params.size(); ++i) {
    const ParamDecl &p = spec.op()->params[i];
    int64_t at = tuned[int(i)];
    if (at == spec[int(i)])
      continue;
    bool top = at == p.tuneBucketCap;
    std::printf("bucket   tuned at %.*s=%lld, for every %.*s %s%lld%s\n", int(p.name.size()),
                p.name.data(), (long long)at, int(p.name.size()), p.name.data(),
                top ? "above " : "in (", (long long)at / 2,
                top ? "" : (", " + std::to_string(at) + "]").c_str());
  }
  if (!*w) {
    std::printf("not tuned: the heuristic default [%s] is used\n", shown(defaultConfig).c_str());
  } else {
    std::printf("chosen   [%s] %.4f ms, kernel %s\nwhy      %s\n", shown((*w)->config).c_str(),
                (*w)->medianMs, shown((*w)->kernelKey.substr(0, 16)).c_str(),
                shown((*w)->reason).c_str());
  }
  if (!t.empty())
    std::printf("timings  (%zu; median [p20, p80] ms, GPU)\n", t.size());
  for (const Timing &x : t)
    std::printf("  %-44s %.4f [%.4f, %.4f] %s\n", shown(x.config).c_str(), x.medianMs, x.p20Ms,
                x.p80Ms, shown(x.gpu).c_str());
  for (const Failure &f : *failures)
    std::printf("  %-44s failed at %s: %s\n", shown(f.config).c_str(), shown(f.stage).c_str(),
                shown(f.reason.substr(0, 160)).c_str());
  return 0;
}

} // namespace

Action addTune(CLI::App &app) {
  auto a = std::make_shared<TuneArgs>();
  auto *cmd = app.add_subcommand("tune", "Tune one kernel on the GPU and record the winner");
  a->spec.add(cmd);
  cmd->add_option("--db", a->db,
                  "Tuning cache file (default: TILEJIT_CACHE_DIR or ~/.cache/tilejit)");
  cmd->add_option("--budget", a->budget, "Stop measuring new configs after this many seconds");
  cmd->add_option("--max-configs", a->maxConfigs, "Measure at most this many configs");
  cmd->add_option("--reps", a->reps, "Timed samples per config (default 30)");
  cmd->add_option("--candidate-timeout", a->candidateSeconds,
                  "Seconds one config may take to check and time (default 10)")
      ->each([a](const std::string &) { a->candidateTimeoutGiven = true; });
  cmd->add_option("--server", a->server,
                  "Tune on this `tilejit serve`'s GPU (host:port) and publish the winner there; "
                  "writes need TILEJIT_TOKEN or TILEJIT_TOKEN_FILE (read-write)");
  cmd->add_flag("--in-process", a->inProcess,
                "Measure in this process, not in a worker (a config that faults the GPU "
                "then stops the tuning)");
  cmd->add_flag("--json", a->json, "Print the result as JSON");
  return [a] { return runTune(*a); };
}

Action addExplain(CLI::App &app) {
  auto a = std::make_shared<TuneArgs>();
  auto *cmd =
      app.add_subcommand("explain", "Show the chosen config for a kernel, why, and its timings");
  a->spec.add(cmd);
  cmd->add_option("--db", a->db, "Tuning cache file");
  cmd->add_option("--server", a->server,
                  "Explain the tuning a `tilejit serve` holds (host:port) instead");
  cmd->add_flag("--json", a->json, "Print the explanation as JSON");
  return [a] { return runExplain(*a); };
}

} // namespace tilejit::cli
