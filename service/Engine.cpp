//===- Engine.cpp -----------------------------------------------------------===//
#include "service/Engine.h"

#include <cstdlib>

#include "compiler/templates/Template.h"
#include "core/Settings.h"
#include "runtime/CudaDriver.h"
#include "service/SharedTuning.h"

namespace tilejit {

namespace {
llvm::Error err(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}
} // namespace

llvm::Expected<EngineOptions> EngineOptions::fromEnvironment() {
  // Every variable checked first (a bad one refuses the engine, named);
  // the values read below are then among those accepted.
  if (auto e = settings::checkAll())
    return e;
  EngineOptions o;
  std::string tune = settings::value("TILEJIT_TUNE");
  o.policy = tune == "on-miss"      ? TunePolicy::OnMiss
             : tune == "background" ? TunePolicy::Background
                                    : TunePolicy::Off;
  o.deterministic = settings::value("TILEJIT_DETERMINISTIC") == "1";
  o.allowNondeterministic = settings::value("TILEJIT_ALLOW_NONDETERMINISTIC") == "1";
  if (settings::value("TILEJIT_TUNE_ISOLATION") == "in-process")
    o.tune.isolation = TuneOptions::Isolation::InProcess;
  // The one rule of the store's place; where only the default decided it,
  // a store that cannot be opened leaves the engine without one (said in
  // its notice) rather than refusing it.
  std::string source;
  o.dbPath = settings::storePath({}, &source);
  o.storeOptional = source != "TILEJIT_CACHE_DIR";
  if (source.empty()) // no HOME, no cache folder: not a file in the working directory
    o.dbPath.clear();
  auto server = ClientOptions::fromEnvironment();
  if (!server)
    return server.takeError();
  o.server = std::move(*server);
  return o;
}

llvm::Expected<std::unique_ptr<Engine>> Engine::create(EngineOptions options) {
  std::unique_ptr<Engine> e(new Engine());
  e->options_ = std::move(options);
  e->nondeterministic_ = e->options_.allowNondeterministic && !e->options_.deterministic;
  auto ctx = useDevice(e->options_.device);
  if (!ctx)
    return ctx.takeError();
  auto dev = queryDevice(e->options_.device);
  if (!dev)
    return dev.takeError();
  auto target = dev->target();
  if (!target)
    return target.takeError();
  e->target_ = *target;
  e->options_.tune.device = e->options_.device;
  if (!e->options_.dbPath.empty()) {
    auto store = Store::open(e->options_.dbPath, &e->notice_);
    if (store) {
      e->store_ = std::move(*store);
    } else if (e->options_.storeOptional) {
      e->notice_ =
          "no store (kernels are compiled in each process): " + llvm::toString(store.takeError()) +
          "; set TILEJIT_CACHE_DIR to a folder this process can write";
    } else {
      return store.takeError();
    }
  }
  // The channel connects at the first call: a server down now is not an
  // error, only a reason to compile here then.
  if (e->options_.server)
    e->client_ = std::make_unique<Client>(*e->options_.server);
  return e;
}

void Engine::sayProblem(Problem &p, const std::string &why, const char *without) {
  std::unique_lock lock(mu_);
  p.last = why;
  if (std::exchange(p.said, true))
    return;
  std::fprintf(stderr, "tilejit: %s; going on without %s (explain shows later problems)\n",
               why.c_str(), without);
}

void Engine::serverProblem(const std::string &why) {
  sayProblem(serverProblem_, why, "the server");
}

void Engine::storeProblem(const std::string &why) { sayProblem(storeProblem_, why, "it"); }

Engine::~Engine() { llvm::consumeError(waitForBackground()); }

llvm::Error Engine::waitForBackground() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(missMu_);
    threads.swap(background_);
  }
  for (auto &t : threads)
    t.join();
  std::unique_lock lock(mu_);
  if (backgroundError_.empty())
    return llvm::Error::success();
  return err(std::exchange(backgroundError_, std::string()));
}

void Engine::tuneInBackground(const KernelSpec &spec) {
  // Called with missMu_ held. One tuning per row bucket: the other row
  // counts of the bucket wait for its winner.
  std::string key = tuneKey(spec);
  if (!backgroundKeys_.insert(key).second)
    return;
  background_.emplace_back([this, spec, key] {
    // This thread's driver calls must not break a graph the caller captures
    // meanwhile (PyTorch captures in global mode).
    if (auto drv = CudaDriver::get()) {
      CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
      drv->cuThreadExchangeStreamCaptureMode(&mode);
    } else {
      llvm::consumeError(drv.takeError());
    }
    auto fail = [&](llvm::Error e) {
      std::unique_lock lock(mu_);
      if (backgroundError_.empty())
        backgroundError_ =
            "background tuning of " + spec.canonical() + ": " + llvm::toString(std::move(e));
      else
        llvm::consumeError(std::move(e));
    };
    if (auto ctx = useDevice(options_.device); !ctx)
      return fail(ctx.takeError());
    llvm::Expected<SharedTuning> r = [&]() -> llvm::Expected<SharedTuning> {
      // Tunings one at a time: two at once would time each other.
      std::lock_guard<std::mutex> one(tuneMu_);
      if (client_)
        return tuneShared(spec, store_.get(), *client_, options_.tune);
      auto alone = tune(spec, store_.get(), options_.tune);
      if (!alone)
        return alone.takeError();
      SharedTuning t;
      t.config = alone->winner;
      t.isWinner = true;
      t.tuned = std::move(*alone);
      return t;
    }();
    if (!r)
      return fail(r.takeError());
    if (!r->serverProblem.empty())
      serverProblem(r->serverProblem);
    // Another process holds the lease and nothing is published yet: the
    // default stays until a later process gets the winner.
    if (!r->isWinner)
      return;
    std::lock_guard<std::mutex> missLock(missMu_);
    winners_[key] = r->config;
    // Every loaded row count of the bucket switches to the winner.
    std::vector<KernelSpec> specs;
    {
      std::shared_lock lock(mu_);
      for (auto &[hash, entry] : loaded_)
        if (tuneKey(entry.spec) == key)
          specs.push_back(entry.spec);
    }
    for (const KernelSpec &s : specs) {
      std::string source;
      auto kernel = obtain(s, r->config, source);
      if (!kernel)
        return fail(kernel.takeError());
      std::unique_lock lock(mu_);
      auto [begin, end] = loaded_.equal_range(s.hash());
      for (auto it = begin; it != end; ++it)
        if (it->second.spec == s && it->second.kernel != *kernel) {
          retired_.push_back(std::move(it->second.kernel));
          it->second.kernel = *kernel;
          it->second.config = r->config;
          it->second.source = "background-tuned";
          lastSource_ = "background-tuned";
        }
    }
  });
}

std::string Engine::lastSource() const {
  std::shared_lock lock(mu_);
  return lastSource_;
}

const LoadedKernel *Engine::findLoaded(const KernelSpec &spec) const {
  auto [begin, end] = loaded_.equal_range(spec.hash());
  for (auto it = begin; it != end; ++it)
    if (it->second.spec == spec)
      return it->second.kernel.get();
  return nullptr;
}

llvm::Expected<const LoadedKernel &> Engine::get(const KernelSpec &spec, void *stream) {
  {
    std::shared_lock lock(mu_);
    if (const LoadedKernel *k = findLoaded(spec))
      return *k;
  }
  if (stream) {
    auto drv = CudaDriver::get();
    if (!drv)
      return drv.takeError();
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    TJ_CU_CHECK(*drv, cuStreamIsCapturing(static_cast<CUstream>(stream), &status));
    if (status != CU_STREAM_CAPTURE_STATUS_NONE)
      return err("kernel for '" + spec.canonical() +
                 "' is not loaded and the stream is capturing a CUDA graph: nothing is "
                 "compiled, tuned or read during capture; run once before capturing, or "
                 "pretune");
  }
  std::lock_guard<std::mutex> missLock(missMu_);
  {
    std::shared_lock lock(mu_);
    if (const LoadedKernel *k = findLoaded(spec))
      return *k;
  }
  return miss(spec);
}

llvm::Expected<TileConfig> Engine::chooseConfig(const KernelSpec &spec, bool &tuned,
                                                std::optional<KernelBinary> &fetched) {
  tuned = false;
  std::string key = tuneKey(spec);
  if (auto it = winners_.find(key); it != winners_.end())
    return it->second; // tuned in this process, for another row count of the bucket
  if (store_) {
    // A store that cannot be read costs its winner, not the launch.
    auto w = store_->winner(key);
    if (!w)
      storeProblem("the kernel store " + store_->path() + " could not be read (" +
                   llvm::toString(w.takeError()) + ")");
    else if (*w) {
      // A winner the template no longer accepts (its rules changed since it
      // was stored) is passed over.
      auto cfg = TileConfig::parse((*w)->config);
      if (!cfg)
        llvm::consumeError(cfg.takeError());
      else if (auto invalid = getTemplate(spec).checkConfig(spec, *cfg))
        llvm::consumeError(std::move(invalid));
      else
        return *cfg;
    }
  }
  bool tunes = options_.policy != TunePolicy::Off && !options_.deterministic;
  if (client_) {
    auto best = fetchBest(spec, Backend::Nvptx, store_.get(), *client_);
    if (best) {
      TileConfig config = best->binary.config;
      if (best->tuned)
        winners_[key] = config;
      if (best->tuned || !tunes || options_.policy == TunePolicy::Background) {
        // The background tuning asks for the lease itself.
        if (!best->tuned && tunes)
          tuneInBackground(spec);
        fetched = std::move(best->binary);
        return config;
      }
      auto shared = [&] {
        std::lock_guard<std::mutex> one(tuneMu_);
        return tuneShared(spec, store_.get(), *client_, options_.tune);
      }();
      if (!shared)
        return shared.takeError();
      if (!shared->serverProblem.empty())
        serverProblem(shared->serverProblem);
      if (shared->isWinner)
        winners_[key] = shared->config;
      tuned = shared->tuned.has_value();
      if (shared->config == config)
        fetched = std::move(best->binary);
      return shared->config;
    }
    // Without the server, as without one configured.
    serverProblem(llvm::toString(best.takeError()));
  }
  if (options_.policy == TunePolicy::Background && !options_.deterministic) {
    tuneInBackground(spec);
  } else if (options_.policy == TunePolicy::OnMiss && !options_.deterministic) {
    auto r = [&] {
      std::lock_guard<std::mutex> one(tuneMu_);
      return tune(spec, store_.get(), options_.tune);
    }();
    if (!r)
      return r.takeError();
    tuned = true;
    winners_[key] = r->winner;
    return r->winner;
  }
  return getTemplate(spec).defaultConfig(spec);
}

llvm::Expected<const LoadedKernel &> Engine::miss(const KernelSpec &spec) {
  if (auto e = spec.checkTarget(target_))
    return err("device " + std::to_string(options_.device) + ": " + llvm::toString(std::move(e)));
  // Compile, load and tune on the engine's device, whatever the caller's
  // thread had current; the caller's context comes back after.
  auto scope = ScopedDevice::enter(options_.device);
  if (!scope)
    return scope.takeError();
  bool tuned = false;
  std::optional<KernelBinary> fetched;
  auto config = chooseConfig(spec, tuned, fetched);
  if (!config)
    return config.takeError();
  std::string source = tuned ? "tuned" : "compiled";
  auto kernel = obtain(spec, *config, source, std::move(fetched));
  if (!kernel)
    return kernel.takeError();
  std::unique_lock lock(mu_);
  lastSource_ = source;
  const LoadedKernel &result = **kernel;
  loaded_.emplace(spec.hash(), Loaded{spec, *kernel, *config, source});
  return result;
}

llvm::Expected<std::string> Engine::explain(const KernelSpec &spec) {
  if (auto e = spec.validate())
    return e;
  std::string out = "spec     " + spec.canonical() + "\n";
  {
    std::shared_lock lock(mu_);
    auto [begin, end] = loaded_.equal_range(spec.hash());
    for (auto it = begin; it != end; ++it)
      if (it->second.spec == spec)
        return out + "loaded   " + it->second.config.canonical() + " (from " +
               (it->second.source == "server" ? "the server " + client_->options().address
                                              : it->second.source) +
               ")\nkey      " + it->second.kernel->key() + "\n";
  }
  std::string key = tuneKey(spec);
  std::lock_guard<std::mutex> missLock(missMu_);
  if (auto it = winners_.find(key); it != winners_.end())
    return out + "next     " + it->second.canonical() + " (tuned in this process)\n";
  if (store_) {
    auto w = store_->winner(key);
    if (!w)
      out += "store    " + store_->path() + " could not be read (" + llvm::toString(w.takeError()) +
             "): launches go on without it\n";
    else if (*w)
      return out + "next     " + (*w)->config + " (the store's winner, " + store_->path() + ")\n";
  }
  std::string def = getTemplate(spec).defaultConfig(spec).canonical();
  if (client_) {
    std::string problem;
    {
      std::shared_lock lock(mu_);
      problem = serverProblem_.last;
    }
    bool tunes = !options_.deterministic && options_.policy != TunePolicy::Off;
    return out + "next     the server " + client_->options().address +
           "'s best config: its published winner, else the default " + def +
           (tunes ? " while one process tunes it under the server's lease" : "") +
           "; compiled here if the server cannot answer within " +
           std::to_string(client_->options().deadline.count()) + " ms\n" +
           (problem.empty() ? "" : "server   last problem: " + problem + "\n");
  }
  if (options_.deterministic || options_.policy == TunePolicy::Off)
    return out + "next     " + def + " (the default: not tuned" +
           (options_.deterministic ? ", deterministic mode" : ", TILEJIT_TUNE=off") + ")\n";
  return out + "next     tuned at first use (" +
         (options_.policy == TunePolicy::OnMiss
              ? "on-miss"
              : "background, the default " + def + " until then") +
         ")\n";
}

llvm::Expected<std::shared_ptr<LoadedKernel>> Engine::obtain(const KernelSpec &spec,
                                                             const TileConfig &config,
                                                             std::string &source,
                                                             std::optional<KernelBinary> fetched) {
  std::string key = kernelKey(spec, config);
  {
    std::shared_lock lock(mu_);
    auto it = byKey_.find(key);
    if (it != byKey_.end()) {
      if (source == "compiled")
        source = "memory";
      return it->second;
    }
  }
  llvm::Expected<KernelBinary> binary = [&]() -> llvm::Expected<KernelBinary> {
    if (fetched && fetched->key == key) {
      source = "server";
      return std::move(*fetched);
    }
    KernelSource from = KernelSource::Compiled;
    std::string why, storeWhy;
    auto b = fetchOrCompile(spec, config, Backend::Nvptx, store_.get(), client_.get(), &from, &why,
                            &storeWhy);
    if (!why.empty())
      serverProblem(why);
    if (!storeWhy.empty())
      storeProblem(storeWhy);
    if (b && from == KernelSource::Store && source == "compiled")
      source = "store";
    else if (b && from == KernelSource::Server && source == "compiled")
      source = "server";
    return b;
  }();
  if (!binary)
    return binary.takeError();
  auto loaded = LoadedKernel::load(*binary);
  if (!loaded)
    return loaded.takeError();
  std::shared_ptr<LoadedKernel> kernel = std::move(*loaded);
  std::unique_lock lock(mu_);
  byKey_.emplace(key, kernel);
  return kernel;
}

} // namespace tilejit
