//===- SharedTuning.cpp -----------------------------------------------------===//
#include "service/SharedTuning.h"

#include <condition_variable>
#include <mutex>
#include <thread>
#include <unistd.h>

#include "runtime/Store.h"

namespace tilejit {

namespace {

llvm::Error err(const std::string &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

/// Renews a lease every third of its time to live until stopped, so that it
/// lapses only when this process stops renewing it (it died, or it is done).
class LeaseRenewal {
public:
  LeaseRenewal(Client &remote, const KernelSpec &spec, Backend backend, std::string holder,
               std::string leaseId)
      : thread_([this, &remote, spec, backend, holder, leaseId] {
          auto every = std::max(remote.options().leaseTtl / 3, std::chrono::milliseconds(1));
          std::unique_lock<std::mutex> lock(mu_);
          while (!cv_.wait_for(lock, every, [this] { return stop_; })) {
            lock.unlock();
            auto l = remote.acquireLease(spec, backend, holder, remote.options().leaseTtl, leaseId);
            lock.lock();
            if (!l)
              problem_ = "renewing the tuning lease: " + llvm::toString(l.takeError());
            else if (!l->granted)
              problem_ = "the tuning lease passed to " + l->holder + " while tuning";
          }
        }) {}
  /// Stops renewing; returns the last renewal's problem, or "".
  std::string stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable())
      thread_.join();
    return problem_;
  }
  ~LeaseRenewal() { stop(); }

private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::string problem_;
  std::thread thread_; // last: it starts once the members above exist
};

/// What a publication of `r` carries: the timings and winning kernel that
/// tune() recorded in `local`, or, without a store, the measured medians.
Publication publicationOf(const KernelSpec &spec, Backend backend, const std::string &leaseId,
                          const TuneResult &r, Store *local) {
  Publication p;
  p.leaseId = leaseId;
  p.spec = spec;
  p.backend = backend;
  p.winner = r.winner;
  p.winnerMs = r.winnerMs;
  p.reason = r.reason;
  if (local) {
    if (auto timings = local->timings(r.tuneKey))
      p.timings = std::move(*timings);
    else
      llvm::consumeError(timings.takeError());
    auto w = local->winner(r.tuneKey);
    if (!w)
      llvm::consumeError(w.takeError());
    else if (*w && !(*w)->kernelKey.empty()) {
      auto k = local->getKernel((*w)->kernelKey);
      if (!k)
        llvm::consumeError(k.takeError());
      else if (*k)
        p.kernel = std::move(**k);
    }
    return p;
  }
  for (const CandidateResult &c : r.candidates)
    if (c.status == "ok") {
      Timing t;
      t.tuneKey = r.tuneKey;
      t.config = c.config.canonical();
      t.medianMs = c.medianMs;
      t.p20Ms = c.p20Ms;
      t.p80Ms = c.p80Ms;
      t.reps = c.reps;
      p.timings.push_back(std::move(t));
    }
  return p;
}

/// Hands lease `leaseId` back; returns why it could not be, or "".
std::string releaseProblem(Client &remote, const KernelSpec &spec, Backend backend,
                           const std::string &leaseId) {
  auto released = remote.releaseLease(spec, backend, leaseId);
  if (!released)
    return "releasing the tuning lease: " + llvm::toString(released.takeError());
  return "";
}

} // namespace

std::string leaseHolderName() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || !*host)
    std::snprintf(host, sizeof host, "unknown-host");
  return std::string(host) + ":" + std::to_string(::getpid());
}

llvm::Expected<SharedTuning> tuneShared(const KernelSpec &spec, Store *local, Client &remote,
                                        const TuneOptions &options, const std::string &holder) {
  SharedTuning out;
  Backend backend = options.backend;
  auto lease = remote.acquireLease(spec, backend, holder, remote.options().leaseTtl);
  if (lease && lease->tuneKey != tuneKey(spec, backend))
    lease = err("server " + remote.options().address + " tunes " + spec.canonical() +
                " under key " + lease->tuneKey + ", this process under " + tuneKey(spec, backend) +
                " (another build identity)");
  if (!lease) {
    out.serverProblem = llvm::toString(lease.takeError());
    // A client the server does not let tune (no read-write token) still
    // reads: a published winner is used as is. Explain reads it without
    // compiling or sending a kernel (a server that did not answer the lease
    // is held unreachable by the client for a while: not asked again).
    if (auto ex = remote.explain(spec, backend);
        ex && ex->tuned && ex->tuneKey == tuneKey(spec, backend)) {
      out.config = ex->config;
      out.isWinner = true;
      return out;
    } else if (!ex) {
      llvm::consumeError(ex.takeError());
    }
    // Tuned here alone, as without a server; nothing is published.
    auto r = tune(spec, local, options);
    if (!r)
      return r.takeError();
    out.config = r->winner;
    out.isWinner = true;
    out.tuned = std::move(*r);
    return out;
  }
  if (!lease->granted || lease->bestIsTuned) {
    // Another process tunes the key (its best meanwhile), or a winner was
    // published since this process last asked: nothing to tune here. A lease
    // granted with a winner is handed back unused.
    out.config = lease->best;
    out.isWinner = lease->bestIsTuned;
    if (!lease->granted)
      out.otherHolder = lease->holder;
    else
      out.serverProblem = releaseProblem(remote, spec, backend, lease->id);
    return out;
  }
  llvm::Expected<TuneResult> r = [&] {
    LeaseRenewal renewal(remote, spec, backend, holder, lease->id);
    auto result = tune(spec, local, options);
    out.serverProblem = renewal.stop();
    return result;
  }();
  // A tuning that failed publishes nothing: its lease is handed back so
  // that the next process to ask tunes the key at once (were the server
  // unreachable now, the lease lapses instead).
  if (!r) {
    releaseProblem(remote, spec, backend, lease->id);
    return r.takeError();
  }
  out.config = r->winner;
  out.isWinner = true;
  auto published = remote.publish(publicationOf(spec, backend, lease->id, *r, local));
  if (published) {
    out.published = true;
  } else {
    // The winner stays here; the key is handed back for another to publish.
    out.serverProblem = "publishing the winner: " + llvm::toString(published.takeError());
    releaseProblem(remote, spec, backend, lease->id);
  }
  out.tuned = std::move(*r);
  return out;
}

} // namespace tilejit
