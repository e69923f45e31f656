//===- Server.cpp -----------------------------------------------------------===//
#include "service/Server.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <shared_mutex>
#include <thread>
#include <unordered_map>

#include <absl/synchronization/mutex.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include "autotune/Tuner.h"
#include "compiler/templates/Template.h"
#include "core/Sha256.h"
#include "runtime/CudaDriver.h"
#include "service/Leases.h"
#include "service/Metrics.h"
#include "service/StatusPage.h"
#include "service/Wire.h"
#include "tilejit.grpc.pb.h"

#include "llvm/ADT/ScopeExit.h"

namespace tilejit {

namespace {

using grpc::ServerContext;
using grpc::Status;
using grpc::StatusCode;

constexpr const char *kServiceName = "tilejit.v1.TileJit";
constexpr int64_t kMinLeaseMs = 100;
constexpr int kMaxTimings = 100000;
constexpr size_t kMaxLeaseIdBytes = 64;
constexpr int kMaxTuneConfigs = 100000;
constexpr double kMaxTuneSeconds = 7 * 86400;
constexpr int kMaxTuneReps = 10000;
/// The most the server keeps of kernels in memory (cubins, mostly).
constexpr size_t kHotBytes = size_t(256) << 20;

bool sameSecret(const std::string &a, const std::string &b) {
  // Constant time in the length of the secret: a wrong guess learns nothing
  // from how long the comparison took.
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < b.size(); ++i)
    diff |= static_cast<unsigned char>((i < a.size() ? a[i] : 0) ^ b[i]);
  return diff == 0;
}

std::string shortKey(const std::string &key) { return key.substr(0, 16); }

} // namespace

/// The RPCs. Each checks its request first, then acts; service errors become
/// grpc::Status here and nowhere else.
class TileJitService final
    : public v1::TileJit::WithRawCallbackMethod_Lookup<v1::TileJit::Service> {
public:
  TileJitService(ServerOptions options, std::unique_ptr<Store> store, std::string notice)
      : options_(std::move(options)), store_(std::move(store)), notice_(std::move(notice)),
        started_(std::chrono::steady_clock::now()) {
    if (!options_.log)
      options_.log = [](const std::string &line) {
        std::fprintf(stderr, "tilejit serve: %s\n", line.c_str());
      };
  }

  const std::string &notice() const { return notice_; }
  int importsInFlight() const { return importsInFlight_.load(); }

  /// Lookup answers on gRPC's callback thread (no hand-over to a handler
  /// thread: about half the CPU of a hit on loopback). It never compiles,
  /// but it reads the store where a kernel is not held in memory and for
  /// the winner of a request without a config, under the store's lock: an
  /// Import or Export holding that lock for its transaction holds up the
  /// Lookups behind it (the other RPCs run on their own threads), as it held
  /// up the one that waited for it before; clients' deadlines and their
  /// local fallback bound what a caller waits. It parses the request itself,
  /// so that bytes that are no KernelRequest get INVALID_ARGUMENT naming it
  /// (gRPC's own callback handler answers them UNIMPLEMENTED).
  grpc::ServerUnaryReactor *Lookup(grpc::CallbackServerContext *ctx,
                                   const grpc::ByteBuffer *request,
                                   grpc::ByteBuffer *response) override {
    grpc::ServerUnaryReactor *reactor = ctx->DefaultReactor();
    v1::KernelRequest req;
    grpc::ByteBuffer in(*request);
    if (!grpc::GenericDeserialize<grpc::ProtoBufferReader, v1::KernelRequest>(&in, &req).ok()) {
      ++lookups_;
      reactor->Finish(
          counted(wire::invalid("request", "not a tilejit.v1.KernelRequest (" +
                                               std::to_string(request->Length()) + " bytes)")));
      return reactor;
    }
    v1::LookupResponse resp;
    Status s = lookup(&req, &resp);
    bool own = false;
    if (s.ok())
      s = grpc::GenericSerialize<grpc::ProtoBufferWriter, v1::LookupResponse>(resp, response, &own);
    reactor->Finish(s);
    return reactor;
  }

  Status lookup(const v1::KernelRequest *req, v1::LookupResponse *resp) {
    ++lookups_;
    if (!req->have_sha256().empty() && !wire::isSha256Hex(req->have_sha256()))
      return counted(
          wire::invalid("have_sha256", "not 64 lower-case hex digits (the SHA-256 of a cubin the "
                                       "caller holds): " +
                                           std::to_string(req->have_sha256().size()) + " bytes"));
    Resolved r;
    if (auto s = resolve(*req, r); !s.ok())
      return counted(s);
    std::shared_ptr<const StoredKernel> k;
    if (auto s = readKernel(r.key, k); !s.ok())
      return s;
    resp->set_tuned(r.tuned);
    if (k) {
      ++lookupHits_;
      resp->set_found(true);
      bool held = !req->have_sha256().empty() && req->have_sha256() == wire::sha256Of(*k);
      wire::kernelTo(*k, r.backend, *resp->mutable_kernel(), /*withCode=*/!held);
      resp->set_cubin_omitted(held);
    }
    return Status::OK;
  }

  Status GetKernel(ServerContext *ctx, const v1::KernelRequest *req,
                   v1::GetKernelResponse *resp) override {
    ++getKernels_;
    Resolved r;
    if (auto s = resolve(*req, r); !s.ok())
      return counted(s);
    resp->set_tuned(r.tuned);
    std::shared_ptr<const StoredKernel> k;
    if (auto s = readKernel(r.key, k); !s.ok())
      return s;
    if (k) {
      ++storeHits_;
      resp->set_source(v1::GetKernelResponse::SOURCE_STORE);
      wire::kernelTo(*k, r.backend, *resp->mutable_kernel());
      return Status::OK;
    }
    // Single flight: the first request for a missing key compiles it, the
    // others wait for that result.
    std::shared_ptr<Flight> flight;
    bool leader = false;
    {
      std::lock_guard<std::mutex> lock(flightsMu_);
      auto &slot = flights_[r.key];
      if (!slot) {
        slot = std::make_shared<Flight>();
        leader = true;
      }
      flight = slot;
    }
    if (leader) {
      compileFlight(r, *flight);
      std::lock_guard<std::mutex> lock(flightsMu_);
      flights_.erase(r.key);
    } else {
      ++sharedWaits_;
      std::unique_lock<std::mutex> lock(flight->mu);
      while (!flight->done)
        if (ctx->IsCancelled())
          return Status(StatusCode::CANCELLED, "the caller cancelled while waiting for a compile");
        else
          flight->cv.wait_for(lock, std::chrono::milliseconds(100));
    }
    if (!flight->status.ok())
      return flight->status;
    resp->set_source(leader ? flight->source : v1::GetKernelResponse::SOURCE_SHARED);
    wire::kernelTo(flight->kernel, r.backend, *resp->mutable_kernel());
    return Status::OK;
  }

  Status AcquireTuningLease(ServerContext *ctx, const v1::AcquireTuningLeaseRequest *req,
                            v1::AcquireTuningLeaseResponse *resp) override {
    // A write: a lease held keeps every other tuner off the key.
    if (auto s = authorize(*ctx, "AcquireTuningLease"); !s.ok())
      return s;
    KernelSpec spec;
    Backend backend;
    if (auto s = specAndBackend(req->spec(), req->backend(), spec, backend); !s.ok())
      return counted(s);
    if (auto s = checkName(req->holder(), "holder"); !s.ok())
      return counted(s);
    if (req->lease_id().size() > kMaxLeaseIdBytes)
      return counted(
          wire::invalid("lease_id", "longer than " + std::to_string(kMaxLeaseIdBytes) + " bytes"));
    if (auto s = wire::printable(req->lease_id(), "lease_id"); !s.ok())
      return counted(s);
    int64_t maxMs = options_.maxLeaseTtl.count();
    if (req->ttl_ms() < kMinLeaseMs || req->ttl_ms() > maxMs)
      return counted(wire::invalid("ttl_ms", std::to_string(req->ttl_ms()) + " is not in [" +
                                                 std::to_string(kMinLeaseMs) + ", " +
                                                 std::to_string(maxMs) + "]"));
    Resolved r;
    r.spec = spec;
    r.backend = backend;
    if (auto s = bestConfig(r); !s.ok())
      return s;
    std::string key = tuneKey(spec, backend);
    auto grant = leases_.acquire(key, req->holder(), std::chrono::milliseconds(req->ttl_ms()),
                                 req->lease_id());
    resp->set_granted(grant.granted);
    resp->set_lease_id(grant.leaseId);
    resp->set_expires_in_ms(grant.expiresIn.count());
    resp->set_tune_key(key);
    resp->set_holder(grant.holder);
    resp->set_best_config(r.config.canonical());
    resp->set_best_is_tuned(r.tuned);
    if (grant.granted) {
      ++leasesGranted_;
      options_.log("lease " + key + " to " + grant.holder + " for " +
                   std::to_string(req->ttl_ms()) + " ms");
    } else {
      ++leasesDenied_;
    }
    return Status::OK;
  }

  Status ReleaseTuningLease(ServerContext *ctx, const v1::ReleaseTuningLeaseRequest *req,
                            v1::ReleaseTuningLeaseResponse *resp) override {
    if (auto s = authorize(*ctx, "ReleaseTuningLease"); !s.ok())
      return s;
    KernelSpec spec;
    Backend backend;
    if (auto s = specAndBackend(req->spec(), req->backend(), spec, backend); !s.ok())
      return counted(s);
    if (req->lease_id().empty())
      return counted(wire::invalid("lease_id", "required (from AcquireTuningLease)"));
    if (req->lease_id().size() > kMaxLeaseIdBytes)
      return counted(
          wire::invalid("lease_id", "longer than " + std::to_string(kMaxLeaseIdBytes) + " bytes"));
    if (auto s = wire::printable(req->lease_id(), "lease_id"); !s.ok())
      return counted(s);
    std::string key = tuneKey(spec, backend);
    // A lease that already ended is no error: the holder's wish (nothing
    // held under it) is what the table says.
    bool released = leases_.release(key, req->lease_id());
    if (released) {
      ++leasesReleased_;
      options_.log("lease " + key + " released");
    }
    resp->set_released(released);
    resp->set_tune_key(key);
    return Status::OK;
  }

  Status PublishResult(ServerContext *ctx, const v1::PublishResultRequest *req,
                       v1::PublishResultResponse *resp) override {
    if (auto s = authorize(*ctx, "PublishResult"); !s.ok())
      return s;
    KernelSpec spec;
    Backend backend;
    TileConfig winner;
    if (auto s = specAndBackend(req->spec(), req->backend(), spec, backend); !s.ok())
      return counted(s);
    if (req->lease_id().empty() || req->lease_id().size() > kMaxLeaseIdBytes)
      return counted(wire::invalid("lease_id", "required (from AcquireTuningLease)"));
    if (req->winner_config().empty())
      return counted(wire::invalid("winner_config", "empty"));
    if (auto s = wire::configFrom(req->winner_config(), "winner_config", winner); !s.ok())
      return counted(s);
    if (auto s = checkConfig(spec, winner, "winner_config"); !s.ok())
      return counted(s);
    if (!std::isfinite(req->winner_ms()) || req->winner_ms() < 0)
      return counted(wire::invalid("winner_ms", "not a finite time >= 0"));
    if (req->reason().size() > wire::kMaxTextBytes)
      return counted(
          wire::invalid("reason", "longer than " + std::to_string(wire::kMaxTextBytes) + " bytes"));
    if (auto s = wire::printable(req->reason(), "reason"); !s.ok())
      return counted(s);
    if (auto s = wire::printable(req->lease_id(), "lease_id"); !s.ok())
      return counted(s);
    if (req->timings_size() > kMaxTimings)
      return counted(wire::invalid("timings", std::to_string(req->timings_size()) +
                                                  " entries, more than the " +
                                                  std::to_string(kMaxTimings) + " accepted"));
    std::string key = tuneKey(spec, backend);
    std::vector<Timing> timings(size_t(req->timings_size()));
    for (int i = 0; i < req->timings_size(); ++i) {
      if (auto s = wire::timingFrom(req->timings(i), "timings[" + std::to_string(i) + "]",
                                    timings[size_t(i)]);
          !s.ok())
        return counted(s);
      timings[size_t(i)].tuneKey = key;
    }
    std::string kernelKeyOfWinner = kernelKey(spec, winner, backend);
    std::optional<StoredKernel> kernel;
    if (req->has_kernel()) {
      kernel.emplace();
      if (auto s = wire::kernelFrom(req->kernel(), "kernel", *kernel); !s.ok())
        return counted(s);
      if (kernel->key != kernelKeyOfWinner)
        return counted(wire::invalid(
            "kernel.key", "is not the key of winner_config for spec under this server's build "
                          "identity (" +
                              kernelKeyOfWinner + ")"));
      kernel->spec = spec.canonical(false);
      kernel->config = winner.canonical();
      kernel->arch = std::string(spec.target.archName());
      kernel->toolchain = toolchainId(spec, backend);
    }
    // The lease ends before the writes: a second publish under it is
    // refused even while the first is writing. A write that fails after
    // this leaves the key free for the next tuner.
    if (!leases_.release(key, req->lease_id()))
      return Status(StatusCode::FAILED_PRECONDITION,
                    "lease_id: not the tuning lease of " + key +
                        " (it lapsed, was taken over, or was never granted)");
    for (Timing &t : timings)
      if (auto e = store_->addTiming(t))
        return storeError(std::move(e));
    std::string storedKey;
    if (kernel) {
      if (auto e = store_->putKernel(std::move(*kernel)))
        return storeError(std::move(e));
      storedKey = kernelKeyOfWinner;
    } else {
      std::shared_ptr<const StoredKernel> existing;
      if (auto s = readKernel(kernelKeyOfWinner, existing); !s.ok())
        return s;
      if (existing)
        storedKey = kernelKeyOfWinner;
    }
    Winner w;
    w.tuneKey = key;
    w.config = winner.canonical();
    w.kernelKey = storedKey;
    w.medianMs = req->winner_ms();
    w.reason = req->reason();
    if (auto e = store_->setWinner(w))
      return storeError(std::move(e));
    ++publishes_;
    options_.log("winner " + key + ": " + w.config + " (" + std::to_string(w.medianMs) + " ms, " +
                 std::to_string(timings.size()) + " timings)");
    resp->set_tune_key(key);
    resp->set_kernel_key(storedKey);
    resp->set_timings_written(int(timings.size()));
    return Status::OK;
  }

  Status Tune(ServerContext *ctx, const v1::TuneRequest *req,
              grpc::ServerWriter<v1::TuneProgress> *writer) override {
    if (auto s = authorize(*ctx, "Tune"); !s.ok())
      return s;
    KernelSpec spec;
    Backend backend;
    if (auto s = specAndBackend(req->spec(), req->backend(), spec, backend); !s.ok())
      return counted(s);
    if (!req->holder().empty())
      if (auto s = checkName(req->holder(), "holder"); !s.ok())
        return counted(s);
    std::string holder = req->holder().empty() ? ctx->peer() : req->holder();
    if (req->max_configs() < 0 || req->max_configs() > kMaxTuneConfigs)
      return counted(wire::invalid("max_configs", std::to_string(req->max_configs()) +
                                                      " is not in [0, " +
                                                      std::to_string(kMaxTuneConfigs) + "]"));
    if (!std::isfinite(req->budget_seconds()) || req->budget_seconds() < 0 ||
        req->budget_seconds() > kMaxTuneSeconds)
      return counted(wire::invalid("budget_seconds", "not a number of seconds in [0, " +
                                                         std::to_string(int64_t(kMaxTuneSeconds)) +
                                                         "]"));
    if (req->reps() < 0 || req->reps() > kMaxTuneReps)
      return counted(wire::invalid("reps", std::to_string(req->reps()) + " is not in [0, " +
                                               std::to_string(kMaxTuneReps) + "]"));

    // The GPU: asked before anything is held, so that a server without one
    // answers at once.
    TuneOptions opt;
    if (auto s = tuningDevice(opt); !s.ok())
      return s;
    auto gpu = opt.deviceInfo->target();
    if (!gpu)
      return Status(StatusCode::FAILED_PRECONDITION,
                    "this server's GPU " + opt.deviceInfo->name +
                        " is not one tilejit tunes on: " + llvm::toString(gpu.takeError()));
    if (auto e = spec.checkTarget(*gpu))
      return counted(wire::invalid(
          "spec", "cannot be tuned on this server's GPU (" + opt.deviceInfo->name + ", " +
                      std::string(gpu->archName()) + "): " + llvm::toString(std::move(e))));
    opt.backend = backend;
    opt.maxConfigs = req->max_configs();
    opt.budgetSeconds = req->budget_seconds();
    if (req->reps() > 0)
      opt.reps = req->reps();

    // The key's lease, as a client tuner would hold it: one tuning per key,
    // here or anywhere, at a time. Renewed as candidates finish; ended when
    // this call ends, however it ends.
    std::string key = tuneKey(spec, backend);
    auto ttl = options_.maxLeaseTtl;
    auto grant = leases_.acquire(key, holder, ttl, "");
    if (!grant.granted) {
      ++leasesDenied_;
      return Status(StatusCode::ABORTED, "a tuning of " + key +
                                             " is under way: its lease is held by " + grant.holder +
                                             " for " + std::to_string(grant.expiresIn.count()) +
                                             " ms more unless renewed");
    }
    ++leasesGranted_;
    struct ReleaseOnExit {
      LeaseTable &leases;
      std::string key, id;
      ~ReleaseOnExit() { leases.release(key, id); }
    } releaseOnExit{leases_, key, grant.leaseId};
    options_.log("lease " + key + " to " + holder + " for a tuning on this server's GPU");

    // Renews the lease under the id it holds now (a lease that lapsed and
    // was taken again has a new one); false once another holder has it.
    bool leaseLost = false;
    auto renew = [&] {
      if (leaseLost)
        return false;
      auto g = leases_.acquire(key, holder, ttl, releaseOnExit.id);
      if (!g.granted) {
        leaseLost = true;
        options_.log("tune " + key + ": the lease went to " + g.holder + "; stopping");
        return false;
      }
      releaseOnExit.id = g.leaseId;
      return true;
    };

    // One tuning at a time on the GPU: timings taken side by side are not
    // a kernel's own. The lease is renewed while this call waits.
    std::unique_lock<std::timed_mutex> gpuLock(gpuMu_, std::defer_lock);
    while (!gpuLock.try_lock_for(std::chrono::milliseconds(100))) {
      if (ctx->IsCancelled())
        return Status(StatusCode::CANCELLED, "the caller cancelled while waiting for the GPU");
      if (!renew())
        return Status(StatusCode::ABORTED, "the lease of " + key +
                                               " lapsed while waiting for the GPU and is held by "
                                               "another tuner now");
    }

    bool streamBroken = false;
    auto send = [&](const v1::TuneProgress &m) {
      if (!streamBroken && !writer->Write(m))
        streamBroken = true;
    };
    {
      v1::TuneProgress m;
      v1::TuneStarted *st = m.mutable_started();
      st->set_tune_key(key);
      st->set_spec(spec.tuningSpec().canonical());
      st->set_gpu(opt.deviceInfo->name);
      st->set_holder(holder);
      send(m);
    }
    opt.onCandidate = [&](const CandidateResult &c, int done, int total) {
      renew();
      v1::TuneProgress m;
      v1::TuneCandidate *tc = m.mutable_candidate();
      tc->set_done(done);
      tc->set_total(total);
      tc->set_config(c.config.canonical());
      tc->set_status(c.status);
      tc->set_detail(c.detail.substr(0, wire::kMaxTextBytes));
      tc->set_median_ms(c.medianMs);
      tc->set_p20_ms(c.p20Ms);
      tc->set_p80_ms(c.p80Ms);
      tc->set_reps(c.reps);
      send(m);
    };
    // A lease lost to another tuner stops the tuning before its next
    // candidate: no winner is recorded under a key someone else tunes.
    opt.cancelled = [&] { return streamBroken || leaseLost || ctx->IsCancelled(); };
    options_.log("tune " + key + " for " + holder + " on " + opt.deviceInfo->name);
    auto t0 = std::chrono::steady_clock::now();
    auto r = tilejit::tune(spec, store_.get(), opt);
    if (!r) {
      bool storeFailed = false;
      std::string msg;
      llvm::handleAllErrors(r.takeError(), [&](const llvm::ErrorInfoBase &e) {
        storeFailed = isStoreFailure(e);
        msg = e.message();
      });
      bool cancelled = opt.cancelled();
      ++tuneFailures_;
      options_.log("tune " + key + " failed: " + msg);
      if (leaseLost)
        return Status(StatusCode::ABORTED,
                      "tuning " + key + ": its lease went to another tuner; stopped: " + msg);
      if (cancelled)
        return Status(StatusCode::CANCELLED, "tuning " + key + ": " + msg);
      // The server's own store failing is its fault, not the request's.
      if (storeFailed)
        return Status(StatusCode::INTERNAL, "tuning " + key + ": " + msg);
      return Status(StatusCode::FAILED_PRECONDITION, "tuning " + key + ": " + msg);
    }
    auto w = store_->winner(r->tuneKey);
    if (!w)
      return storeError(w.takeError());
    ++tunes_;
    int failed = 0;
    const CandidateResult *best = nullptr;
    for (const CandidateResult &c : r->candidates) {
      failed += c.status != "ok" && c.status != "stored";
      if (c.config == r->winner && (c.status == "ok" || c.status == "stored"))
        best = &c;
    }
    char took[64];
    std::snprintf(took, sizeof took, " (%.4f ms) in %.1f s", r->winnerMs,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    options_.log("tuned " + key + ": " + r->winner.canonical() + took + ", " +
                 std::to_string(r->measured) + " measured, " + std::to_string(failed) + " failed");
    v1::TuneProgress m;
    v1::TuneFinished *f = m.mutable_finished();
    f->set_tune_key(r->tuneKey);
    f->set_winner_config(r->winner.canonical());
    f->set_reason(r->reason);
    f->set_kernel_key(*w ? (*w)->kernelKey : std::string());
    Timing t;
    t.tuneKey = r->tuneKey;
    t.config = r->winner.canonical();
    t.medianMs = r->winnerMs;
    if (best) {
      t.p20Ms = best->p20Ms;
      t.p80Ms = best->p80Ms;
      t.reps = best->reps;
    }
    t.gpu = opt.deviceInfo->name;
    t.smCount = opt.deviceInfo->smCount;
    t.driverVersion = opt.deviceInfo->driverVersion;
    t.smClockMHz = opt.deviceInfo->clockKHz / 1000;
    t.memClockMHz = opt.deviceInfo->memClockKHz / 1000;
    wire::timingTo(t, *f->mutable_winner());
    f->set_measured(r->measured);
    f->set_reused(r->reused);
    f->set_failed(failed);
    f->set_wall_seconds(r->wallSeconds);
    send(m);
    if (streamBroken)
      return Status(StatusCode::CANCELLED,
                    "the caller stopped reading; the winner was recorded all the same");
    return Status::OK;
  }

  Status Explain(ServerContext *, const v1::KernelRequest *req,
                 v1::ExplainResponse *resp) override {
    Resolved r;
    if (auto s = resolve(*req, r); !s.ok())
      return counted(s);
    std::string key = tuneKey(r.spec, r.backend);
    resp->set_tune_key(key);
    resp->set_toolchain(toolchainId(r.spec, r.backend));
    resp->set_config(r.config.canonical());
    resp->set_tuned(r.tuned);
    resp->set_default_config(getTemplate(r.spec).defaultConfig(r.spec).canonical());
    std::shared_ptr<const StoredKernel> k;
    if (auto s = readKernel(r.key, k); !s.ok())
      return s;
    resp->set_stored(bool(k));
    auto w = store_->winner(key);
    if (!w)
      return storeError(w.takeError());
    if (*w) {
      resp->set_winner_ms((*w)->medianMs);
      resp->set_winner_reason((*w)->reason);
      resp->set_winner_kernel_key((*w)->kernelKey);
    }
    auto timings = store_->timings(key);
    if (!timings)
      return storeError(timings.takeError());
    auto failures = store_->failures(key);
    if (!failures)
      return storeError(failures.takeError());
    size_t cap = size_t(options_.listCap);
    resp->set_truncated(timings->size() > cap || failures->size() > cap);
    for (size_t i = 0; i < timings->size() && i < cap; ++i)
      wire::timingTo((*timings)[i], *resp->add_timings());
    for (size_t i = 0; i < failures->size() && i < cap; ++i) {
      v1::TuneFailure *f = resp->add_failures();
      f->set_config((*failures)[i].config);
      f->set_stage((*failures)[i].stage);
      f->set_reason((*failures)[i].reason);
    }
    return Status::OK;
  }

  Status List(ServerContext *, const v1::ListRequest *req, v1::ListResponse *resp) override {
    if (req->limit() < 0 || req->limit() > options_.listCap)
      return counted(wire::invalid("limit", std::to_string(req->limit()) + " is not in [0, " +
                                                std::to_string(options_.listCap) + "]"));
    size_t limit = size_t(req->limit() == 0 ? options_.listCap : req->limit());
    auto all = store_->list();
    if (!all)
      return storeError(all.takeError());
    for (const Store::Summary &s : *all) {
      if (size_t(resp->entries_size()) == limit) {
        resp->set_truncated(true);
        break;
      }
      v1::ListEntry *e = resp->add_entries();
      e->set_kind(s.kind);
      e->set_key(s.key);
      e->set_spec(s.spec);
      e->set_config(s.config);
      e->set_arch(s.arch);
      e->set_bytes(s.bytes);
      e->set_created_at(s.createdAt);
    }
    for (const LeaseTable::Held &h : leases_.held()) {
      v1::LeaseInfo *l = resp->add_leases();
      l->set_tune_key(h.tuneKey);
      l->set_holder(h.holder);
      l->set_expires_in_ms(h.expiresIn.count());
    }
    return Status::OK;
  }

  Status Export(ServerContext *ctx, const v1::ExportRequest *,
                grpc::ServerWriter<v1::ExportChunk> *writer) override {
    auto image = store_->exportImage();
    if (!image)
      return storeError(image.takeError());
    // Chunks fit in a message with room for the framing, whatever the
    // option says.
    size_t chunk = std::clamp<size_t>(options_.chunkBytes, 1,
                                      size_t(std::max(options_.maxMessageBytes - 4096, 1)));
    if (!wire::writeImageChunks<v1::ExportChunk>(
            *image, sha256Hex(*image), chunk,
            [&](const v1::ExportChunk &c) { return writer->Write(c); }))
      return Status(StatusCode::CANCELLED, ctx->IsCancelled()
                                               ? "the caller cancelled the export"
                                               : "the caller stopped reading the export");
    ++exports_;
    options_.log("export: " + std::to_string(image->size()) + " bytes");
    return Status::OK;
  }

  Status Import(ServerContext *ctx, grpc::ServerReader<v1::ImportChunk> *reader,
                v1::ImportResponse *resp) override {
    if (auto s = authorize(*ctx, "Import"); !s.ok())
      return s;
    // Each import buffers its image: at most maxConcurrentImports at once.
    int before = importsInFlight_.fetch_add(1);
    llvm::scope_exit release([&] { importsInFlight_.fetch_sub(1); });
    if (before >= options_.maxConcurrentImports)
      return Status(StatusCode::RESOURCE_EXHAUSTED,
                    std::to_string(before) + " imports are in progress (this server takes " +
                        std::to_string(options_.maxConcurrentImports) +
                        " at once); try again when one has finished");
    // The first chunk declares the image's size (at most the server's
    // import cap) and digest; nothing more than that size is read, and
    // nothing is written unless every byte arrived as declared.
    wire::ImageAssembler got(options_.maxImportBytes);
    v1::ImportChunk chunk;
    while (reader->Read(&chunk))
      if (auto bad = got.add(chunk.total_bytes(), chunk.sha256(), chunk.data()))
        return counted(wire::invalid(bad->field, bad->what + "; nothing written"));
    if (ctx->IsCancelled())
      return Status(StatusCode::CANCELLED, "the caller cancelled the import; nothing written");
    if (auto bad = got.finish())
      return counted(wire::invalid(bad->field, bad->what + "; nothing written"));
    const std::string &image = got.image();
    int64_t chunks = got.chunks();
    ImportOptions options;
    options.checkRow = [this](const ImportedRow &row) { return checkImported(row); };
    // The token's holder may write kernels (as PublishResult does); a
    // kernel built under another identity is left out, as this server would
    // never hand it out.
    options.acceptKernel = [](const StoredKernel &k, std::string &why) {
      ImportedKernel parsed;
      if (!importedKernel(k, parsed).ok())
        return false;
      if (k.key == kernelKey(parsed.spec, parsed.config, parsed.backend))
        return true;
      why = "built under another build identity (its key is not this server's for its spec "
            "and config)";
      return false;
    };
    ImportReport report;
    auto rows = store_->importImage(image, "store", options, &report);
    if (!rows) {
      bool rejection = false;
      std::string msg;
      llvm::handleAllErrors(rows.takeError(), [&](const llvm::ErrorInfoBase &e) {
        rejection = isImportRejection(e);
        msg = e.message();
      });
      if (rejection)
        return counted(Status(StatusCode::INVALID_ARGUMENT, msg));
      options_.log("error: " + msg);
      return Status(StatusCode::INTERNAL, msg);
    }
    ++imports_;
    options_.log("import: " + std::to_string(*rows) + " rows written from " +
                 std::to_string(image.size()) + " bytes in " + std::to_string(chunks) +
                 " chunk(s)" +
                 (report.kernelsLeft ? ", " + std::to_string(report.kernelsLeft) +
                                           " kernel(s) left out (" + report.firstLeft + ")"
                                     : std::string()));
    resp->set_rows(*rows);
    resp->set_kernels_left(report.kernelsLeft);
    resp->set_first_left(report.firstLeft);
    return Status::OK;
  }

  Status Stats(ServerContext *, const v1::StatsRequest *, v1::StatsResponse *resp) override {
    resp->set_lookups(lookups_);
    resp->set_lookup_hits(lookupHits_);
    resp->set_get_kernels(getKernels_);
    resp->set_store_hits(storeHits_);
    resp->set_compiles(compiles_);
    resp->set_compile_failures(compileFailures_);
    resp->set_shared_waits(sharedWaits_);
    resp->set_leases_granted(leasesGranted_);
    resp->set_leases_denied(leasesDenied_);
    resp->set_publishes(publishes_);
    resp->set_invalid_requests(invalid_);
    resp->set_unauthenticated(unauthenticated_);
    resp->set_permission_denied(permissionDenied_);
    resp->set_exports(exports_);
    resp->set_imports(imports_);
    resp->set_leases_released(leasesReleased_);
    resp->set_tunes(tunes_);
    resp->set_tune_failures(tuneFailures_);
    resp->set_active_leases(int64_t(leases_.held().size()));
    resp->set_leases_expired(leases_.expired());
    resp->set_compiles_in_flight(compilesInFlight_);
    resp->set_uptime_seconds(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count());
    return Status::OK;
  }

  /// What `/status` shows.
  ServerStatus status() {
    ServerStatus st;
    st.version = tilejitVersion();
    st.uptimeSeconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
    st.storePath = store_->path();
    // A store that cannot be read says so on the page, which still shows
    // the leases.
    auto unreadable = [&](llvm::Error e) {
      st.storePath += " (cannot be read: " + llvm::toString(std::move(e)) + ")";
    };
    if (auto all = store_->list()) {
      for (const Store::Summary &e : *all)
        ++(e.kind == "kernel" ? st.kernels : st.winnerCount);
    } else {
      unreadable(all.takeError());
    }
    if (auto winners = store_->winnersWithPrefix("")) {
      if (winners->size() > size_t(options_.listCap))
        winners->resize(size_t(options_.listCap));
      st.winners = std::move(*winners);
    } else {
      unreadable(winners.takeError());
    }
    st.leases = leases_.held();
    return st;
  }

private:
  /// A request's kernel: the spec, the config it gets, and its key.
  struct Resolved {
    KernelSpec spec;
    TileConfig config;
    Backend backend = Backend::Nvptx;
    bool tuned = false; ///< the config is a published winner
    std::string key;
  };
  /// One compile of a missing key, which every concurrent request of the key
  /// waits for.
  struct Flight {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    Status status;
    StoredKernel kernel;
    v1::GetKernelResponse::Source source = v1::GetKernelResponse::SOURCE_COMPILED;
  };

  /// A kernel row of an imported store, parsed.
  struct ImportedKernel {
    KernelSpec spec;
    TileConfig config;
    Backend backend = Backend::Nvptx;
  };

  static llvm::Error importError(const Status &s) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), s.error_message());
  }

  /// What the server needs of an imported kernel: the spec and config as
  /// the RPCs would take them, the arch of the spec, the back end its
  /// toolchain names, and what a loader reads (wire::kernelFrom's checks).
  static Status importedKernel(const StoredKernel &k, ImportedKernel &out) {
    if (auto s = wire::specFrom(k.spec, "spec", out.spec); !s.ok())
      return s;
    if (!findTemplate(out.spec.op()))
      return wire::invalid("spec", "op '" + std::string(out.spec.opName()) + "' has no template");
    if (auto s = wire::configFrom(k.config, "config", out.config); !s.ok())
      return s;
    if (auto s = checkConfig(out.spec, out.config, "config"); !s.ok())
      return s;
    if (k.arch != out.spec.target.archName())
      return wire::invalid("arch", "'" + k.arch + "' is not the spec's arch (" +
                                       std::string(out.spec.target.archName()) + ")");
    if (k.toolchain.rfind("backend=nvptx ", 0) == 0)
      out.backend = Backend::Nvptx;
    else if (k.toolchain.rfind("backend=cuda ", 0) == 0)
      out.backend = Backend::Cuda;
    else
      return wire::invalid("toolchain", "does not start with backend=nvptx or backend=cuda");
    v1::Kernel wireKernel;
    wire::kernelTo(k, out.backend, wireKernel);
    StoredKernel checked;
    return wire::kernelFrom(wireKernel, "kernel", checked);
  }

  /// An imported row is one that the RPCs could have written: kernels as
  /// above, and the tuning keys and configs of timings, winners and failures
  /// parse (a winner's config is in range for its spec).
  static llvm::Error checkImported(const ImportedRow &row) {
    if (row.kernel) {
      ImportedKernel parsed;
      if (auto s = importedKernel(*row.kernel, parsed); !s.ok())
        return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                       "kernel " + row.kernel->key + ": " + s.error_message());
      return llvm::Error::success();
    }
    size_t bar = row.tuneKey.find(" | ");
    if (bar == std::string::npos)
      return importError(wire::invalid("tune_key", "not '<spec> | <build identity>'"));
    KernelSpec spec;
    if (auto s = wire::specFrom(row.tuneKey.substr(0, bar), "tune_key", spec); !s.ok())
      return importError(s);
    if (!findTemplate(spec.op()))
      return importError(
          wire::invalid("tune_key", "op '" + std::string(spec.opName()) + "' has no template"));
    if (auto s = checkName(row.tuneKey.substr(bar + 3), "tune_key"); !s.ok())
      return importError(s);
    TileConfig config;
    if (auto s = wire::configFrom(row.config, "config", config); !s.ok())
      return importError(s);
    if (row.table == "winners")
      if (auto s = checkConfig(spec, config, "config"); !s.ok())
        return importError(s);
    return llvm::Error::success();
  }

  Status counted(Status s) {
    if (s.error_code() == StatusCode::INVALID_ARGUMENT)
      ++invalid_;
    return s;
  }

  static Status checkName(const std::string &name, const std::string &field) {
    if (name.empty())
      return wire::invalid(field, "empty");
    if (name.size() > wire::kMaxNameBytes)
      return wire::invalid(field, "longer than " + std::to_string(wire::kMaxNameBytes) + " bytes");
    return wire::printable(name, field);
  }

  Status storeError(llvm::Error e) {
    std::string msg = "store " + store_->path() + ": " + llvm::toString(std::move(e));
    options_.log("error: " + msg);
    return Status(StatusCode::INTERNAL, msg);
  }

  /// A write named `what` may go ahead: the server has no tokens, or the
  /// request carries a read-write one.
  Status authorize(const ServerContext &ctx, const char *what) {
    if (options_.tokens.empty())
      return Status::OK;
    const auto &md = ctx.client_metadata();
    auto it = md.find("authorization");
    if (it == md.end()) {
      ++unauthenticated_;
      return Status(StatusCode::UNAUTHENTICATED,
                    "writes need a bearer token: metadata 'authorization: Bearer <token>'");
    }
    std::string value(it->second.data(), it->second.size());
    const std::string prefix = "Bearer ";
    const AccessToken *match = nullptr;
    if (value.compare(0, prefix.size(), prefix) == 0) {
      // Every token is compared, so that the time taken says nothing about
      // which one came close.
      std::string given = value.substr(prefix.size());
      for (const AccessToken &t : options_.tokens)
        if (sameSecret(given, t.secret))
          match = &t;
    }
    if (!match) {
      ++unauthenticated_;
      return Status(StatusCode::UNAUTHENTICATED, "the bearer token is not this server's");
    }
    if (match->readOnly) {
      ++permissionDenied_;
      return Status(StatusCode::PERMISSION_DENIED, std::string("the bearer token is read-only: ") +
                                                       what +
                                                       " writes and needs a read-write token");
    }
    return Status::OK;
  }

  /// Sets `opt` up to tune on this host's GPU (ServerOptions::tuneSetup's, or
  /// GPU 0 of the CUDA driver, described once); FAILED_PRECONDITION naming
  /// why there is none.
  Status tuningDevice(TuneOptions &opt) {
    if (options_.tuneSetup) {
      if (auto e = options_.tuneSetup(opt))
        return Status(StatusCode::FAILED_PRECONDITION,
                      "this server cannot tune: " + llvm::toString(std::move(e)));
      if (!opt.deviceInfo)
        return Status(StatusCode::INTERNAL, "the server's tuning set-up named no device");
      return Status::OK;
    }
    std::lock_guard<std::mutex> lock(deviceMu_);
    if (!device_) {
      auto drv = CudaDriver::get();
      if (!drv)
        return Status(StatusCode::FAILED_PRECONDITION,
                      "this server has no GPU to tune on: " + llvm::toString(drv.takeError()));
      auto d = queryDevice(0);
      if (!d)
        return Status(StatusCode::FAILED_PRECONDITION,
                      "this server has no GPU to tune on: " + llvm::toString(d.takeError()));
      device_ = std::move(*d);
    }
    opt.deviceInfo = &*device_;
    opt.device = device_->ordinal;
    return Status::OK;
  }

  static Status checkConfig(const KernelSpec &spec, const TileConfig &config,
                            const std::string &field) {
    const KernelTemplate &tmpl = getTemplate(spec);
    if (auto e = config.checkKeys(tmpl.configKeys()))
      return wire::invalid(field, llvm::toString(std::move(e)));
    if (auto e = tmpl.checkConfig(spec, config))
      return wire::invalid(field, llvm::toString(std::move(e)));
    return Status::OK;
  }

  /// The published winner of r.spec's tuning key when the template still
  /// accepts it, else the template's default.
  /// The stored winners bestConfig read, by tuning key (the config parsed,
  /// or none where the key has no usable winner), while the store is
  /// unchanged: its own commits are compared on every call (an atomic read),
  /// its data_version (commits by other processes sharing the file) once a
  /// millisecond at most, so another process's winner is served within a
  /// millisecond and this server's own at once. A Lookup without a config no
  /// longer reads SQLite each time (bench/NOTES.md, the server's section).
  /// The check of a winner against the spec and the default config are not
  /// kept: a tuning key covers specs whose launch sizes differ, and both
  /// read them.
  struct CachedWinner {
    std::optional<TileConfig> config;
  };
  static constexpr int64_t kDataVersionEveryNs = 1000000;

  /// True with `config` filled from the cache.
  bool cachedWinner(const std::string &tuneKey, std::optional<TileConfig> &config,
                    uint64_t &commits, int64_t &version) {
    commits = store_->commits();
    version = dataVersion_.load(std::memory_order_acquire);
    int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count();
    int64_t checked = versionCheckedNs_.load(std::memory_order_acquire);
    if (now - checked >= kDataVersionEveryNs &&
        versionCheckedNs_.compare_exchange_strong(checked, now)) {
      auto v = store_->dataVersion();
      if (!v) {
        llvm::consumeError(v.takeError());
        version = -1;                                                // unknown: read the store
        versionCheckedNs_.store(checked, std::memory_order_release); // and ask again
      } else {
        version = *v;
        dataVersion_.store(version, std::memory_order_release);
      }
    }
    {
      std::shared_lock<std::shared_mutex> lock(winnersMu_);
      if (version >= 0 && commits == winnersCommits_ && version == winnersVersion_) {
        auto it = winners_.find(tuneKey);
        if (it == winners_.end())
          return false;
        config = it->second.config;
        return true;
      }
    }
    std::unique_lock<std::shared_mutex> lock(winnersMu_);
    if (commits != winnersCommits_ || version != winnersVersion_) {
      winners_.clear();
      winnersCommits_ = commits;
      winnersVersion_ = version;
    }
    return false;
  }

  /// Keeps what bestConfig read under the stamps read before it.
  void keepWinner(const std::string &tuneKey, const std::optional<TileConfig> &config,
                  uint64_t commits, int64_t version) {
    if (version < 0)
      return;
    std::unique_lock<std::shared_mutex> lock(winnersMu_);
    if (commits != winnersCommits_ || version != winnersVersion_)
      return; // the store changed since: the next call reads it again
    if (winners_.size() >= kMaxCachedWinners)
      winners_.clear();
    winners_.emplace(tuneKey, CachedWinner{config});
  }

  /// The published winner of `r`'s tuning key where it holds for `r`'s spec,
  /// else the template's default for it.
  Status bestConfig(Resolved &r) {
    const KernelTemplate &tmpl = getTemplate(r.spec);
    std::string key = tuneKey(r.spec, r.backend);
    uint64_t commits = 0;
    int64_t version = -1;
    std::optional<TileConfig> stored;
    if (!cachedWinner(key, stored, commits, version)) {
      auto w = store_->winner(key);
      if (!w)
        return storeError(w.takeError());
      if (*w) {
        auto cfg = TileConfig::parse((*w)->config);
        if (cfg)
          stored = std::move(*cfg);
        else
          llvm::consumeError(cfg.takeError());
      }
      keepWinner(key, stored, commits, version);
    }
    if (stored) {
      if (auto bad = tmpl.checkConfig(r.spec, *stored)) {
        llvm::consumeError(std::move(bad));
      } else {
        r.config = std::move(*stored);
        r.tuned = true;
        return Status::OK;
      }
    }
    r.config = tmpl.defaultConfig(r.spec);
    r.tuned = false;
    return Status::OK;
  }

  /// A request's spec and back end, its op one with a template.
  static Status specAndBackend(const std::string &specText, v1::Backend wireBackend,
                               KernelSpec &spec, Backend &backend) {
    if (auto s = wire::specFrom(specText, "spec", spec); !s.ok())
      return s;
    if (auto s = wire::backendFrom(wireBackend, "backend", backend); !s.ok())
      return s;
    if (!findTemplate(spec.op()))
      return wire::invalid("spec", "op '" + std::string(spec.opName()) + "' has no template");
    if (auto err = checkBackend(spec, backend))
      return wire::invalid("backend", llvm::toString(std::move(err)));
    return Status::OK;
  }

  Status resolve(const v1::KernelRequest &req, Resolved &r) {
    if (auto s = specAndBackend(req.spec(), req.backend(), r.spec, r.backend); !s.ok())
      return s;
    if (!req.config().empty()) {
      if (auto s = wire::configFrom(req.config(), "config", r.config); !s.ok())
        return s;
      if (auto s = checkConfig(r.spec, r.config, "config"); !s.ok())
        return s;
    } else if (auto s = bestConfig(r); !s.ok()) {
      return s;
    }
    r.key = kernelKey(r.spec, r.config, r.backend);
    return Status::OK;
  }

  /// The kernel stored under `key`, or null: from the hot copies when one
  /// is there, else from the store (which checks its SHA-256), then kept.
  /// A key names its bytes, so a copy never goes stale; one deleted from
  /// the store since (a prune) is still the right kernel for its key.
  Status readKernel(const std::string &key, std::shared_ptr<const StoredKernel> &out) {
    {
      std::shared_lock<std::shared_mutex> lock(hotMu_);
      auto it = hot_.find(key);
      if (it != hot_.end()) {
        out = it->second;
        return Status::OK;
      }
    }
    std::string problem;
    auto k = store_->getKernel(key, &problem);
    if (!k)
      return storeError(k.takeError());
    if (!problem.empty())
      options_.log("warning: " + problem);
    out.reset();
    if (*k) {
      (*k)->ptx.clear(); // never sent: not kept
      auto kept = std::make_shared<const StoredKernel>(std::move(**k));
      keepHot(kept);
      out = std::move(kept);
    }
    return Status::OK;
  }

  void keepHot(std::shared_ptr<const StoredKernel> k) {
    std::unique_lock<std::shared_mutex> lock(hotMu_);
    size_t bytes = k->cubin.size() + k->launch.size() + k->spec.size() + 256;
    if (hotBytes_ + bytes > kHotBytes) {
      hot_.clear();
      hotBytes_ = 0;
    }
    if (hot_.emplace(k->key, std::move(k)).second)
      hotBytes_ += bytes;
  }

  void compileFlight(const Resolved &r, Flight &flight) {
    Status status;
    StoredKernel kernel;
    auto source = v1::GetKernelResponse::SOURCE_COMPILED;
    // A flight that ended just before this one began has left its kernel in
    // the store.
    std::shared_ptr<const StoredKernel> stored;
    status = readKernel(r.key, stored);
    if (status.ok() && stored) {
      kernel = *stored;
      source = v1::GetKernelResponse::SOURCE_STORE;
      ++storeHits_;
    } else if (status.ok()) {
      ++compilesInFlight_;
      ++compiles_;
      auto t0 = std::chrono::steady_clock::now();
      CompileOptions co;
      co.backend = r.backend;
      auto compiled = compileKernel(r.spec, r.config, co);
      --compilesInFlight_;
      double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (!compiled) {
        ++compileFailures_;
        std::string msg = llvm::toString(compiled.takeError());
        options_.log("compile failed " + r.spec.canonical(false) + " [" + r.config.canonical() +
                     "]: " + msg);
        status = Status(StatusCode::FAILED_PRECONDITION, "compiling " + r.spec.canonical(false) +
                                                             " with [" + r.config.canonical() +
                                                             "]: " + msg);
      } else {
        compiled->key = r.key;
        kernel = wire::storedFrom(*compiled, compiled->ptx, toolchainId(r.spec, r.backend));
        char line[64];
        std::snprintf(line, sizeof line, " in %.0f ms", ms);
        options_.log("compiled " + shortKey(r.key) + " " + r.spec.canonical(false) + " [" +
                     r.config.canonical() + "]" + line);
        StoredKernel copy = kernel;
        if (auto e = store_->putKernel(std::move(copy))) {
          // The kernel is good whether or not it could be recorded.
          options_.log("error: could not record kernel " + shortKey(r.key) + ": " +
                       llvm::toString(std::move(e)));
        }
      }
    }
    std::lock_guard<std::mutex> lock(flight.mu);
    flight.status = status;
    flight.kernel = std::move(kernel);
    flight.source = source;
    flight.done = true;
    flight.cv.notify_all();
  }

  ServerOptions options_;
  std::unique_ptr<Store> store_;
  std::string notice_;
  std::chrono::steady_clock::time_point started_;
  LeaseTable leases_;
  std::mutex deviceMu_;
  std::optional<DeviceInfo> device_; ///< the GPU Tune measures on, once found
  std::timed_mutex gpuMu_;           ///< held by the tuning on the GPU
  std::mutex flightsMu_;
  std::unordered_map<std::string, std::shared_ptr<Flight>> flights_;
  /// Winners by tuning key (cachedWinner), and the store's stamps they hold
  /// for.
  static constexpr size_t kMaxCachedWinners = 65536;
  std::shared_mutex winnersMu_;
  std::unordered_map<std::string, CachedWinner> winners_;
  uint64_t winnersCommits_ = 0;
  int64_t winnersVersion_ = -2;
  std::atomic<int64_t> dataVersion_{-1}, versionCheckedNs_{INT64_MIN / 2};
  /// Kernels read once (readKernel), by key, up to kHotBytes.
  std::shared_mutex hotMu_;
  std::unordered_map<std::string, std::shared_ptr<const StoredKernel>> hot_;
  size_t hotBytes_ = 0;
  std::atomic<uint64_t> lookups_{0}, lookupHits_{0}, getKernels_{0}, storeHits_{0}, compiles_{0},
      compileFailures_{0}, sharedWaits_{0}, leasesGranted_{0}, leasesDenied_{0}, publishes_{0},
      invalid_{0}, unauthenticated_{0}, permissionDenied_{0}, exports_{0}, imports_{0},
      leasesReleased_{0}, tunes_{0}, tuneFailures_{0};
  std::atomic<int64_t> compilesInFlight_{0};
  std::atomic<int> importsInFlight_{0};
};

llvm::Expected<std::vector<AccessToken>> parseTokenFile(const std::string &text,
                                                        const std::string &path) {
  auto fail = [&](int line, const std::string &what) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   path + ":" + std::to_string(line) + ": " + what);
  };
  std::vector<AccessToken> tokens;
  size_t at = 0;
  for (int line = 1; at < text.size(); ++line) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos)
      end = text.size();
    std::string l = text.substr(at, end - at);
    at = end + 1;
    if (!l.empty() && l.back() == '\r')
      l.pop_back();
    std::vector<std::string> words;
    size_t w = 0;
    while ((w = l.find_first_not_of(" \t", w)) != std::string::npos) {
      size_t e = l.find_first_of(" \t", w);
      words.push_back(l.substr(w, e == std::string::npos ? std::string::npos : e - w));
      w = e;
    }
    if (words.empty() || words[0][0] == '#')
      continue;
    if (words.size() > 2)
      return fail(line, "more than a token and its access (read-write or read-only)");
    for (char c : words[0])
      if (static_cast<unsigned char>(c) <= 0x20 || static_cast<unsigned char>(c) >= 0x7f)
        return fail(line, "a token is printable ASCII without spaces");
    AccessToken t;
    t.secret = words[0];
    if (words.size() == 2) {
      if (words[1] == "read-only")
        t.readOnly = true;
      else if (words[1] != "read-write")
        return fail(line, "'" + words[1] + "' is not read-write or read-only");
    }
    tokens.push_back(std::move(t));
  }
  if (tokens.empty())
    return llvm::createStringError(llvm::inconvertibleErrorCode(), path + ": no token in it");
  return tokens;
}

Server::Server() = default;

llvm::Expected<std::unique_ptr<Server>> Server::start(ServerOptions options,
                                                      const std::string &address) {
  std::string notice;
  auto store = Store::open(options.dbPath, &notice);
  if (!store)
    return store.takeError();
  std::unique_ptr<Server> s(new Server());
  if (options.tlsCert.empty() != options.tlsKey.empty())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "TLS needs both a certificate and its private key");
  if (!options.tlsClientCa.empty() && options.tlsCert.empty())
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "client certificates need TLS: a server certificate and private key");
  for (const AccessToken &t : options.tokens)
    if (t.secret.empty())
      return llvm::createStringError(llvm::inconvertibleErrorCode(), "an empty bearer token");
  struct {
    std::string cert, key, clientCa;
  } tls{options.tlsCert, options.tlsKey, options.tlsClientCa};
  int maxMessage = options.maxMessageBytes;
  std::string metricsAddress = options.metricsAddress;
  s->service_ = std::make_unique<TileJitService>(std::move(options), std::move(*store), notice);
  // Debian's Abseil checks every mutex acquisition for lock-order cycles (a
  // graph of held locks, updated on each lock gRPC takes): 5 % of a Lookup
  // hit's CPU on the server's thread. A debugging aid, turned off here for
  // the whole process (Abseil has no other switch), so also in a program
  // that embeds the server.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (!tls.cert.empty()) {
    grpc::SslServerCredentialsOptions ssl(
        tls.clientCa.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                             : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    ssl.pem_root_certs = tls.clientCa;
    ssl.pem_key_cert_pairs.push_back({tls.key, tls.cert});
    credentials = grpc::SslServerCredentials(ssl);
  }
  builder.AddListeningPort(address, credentials, &s->port_);
  builder.RegisterService(s->service_.get());
  builder.SetMaxReceiveMessageSize(maxMessage);
  s->server_ = builder.BuildAndStart();
  if (!s->server_ || s->port_ == 0)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "cannot listen on '" + address + "' (in use, or not host:port" +
                                       (tls.cert.empty() ? ")"
                                                         : ", or the TLS certificate, key or "
                                                           "client CA is not valid PEM)"));
  s->server_->GetHealthCheckService()->SetServingStatus(kServiceName, true);
  if (!metricsAddress.empty()) {
    TileJitService *service = s->service_.get();
    auto m = MetricsEndpoint::start(
        metricsAddress,
        [service] {
          v1::StatsResponse stats;
          service->Stats(nullptr, nullptr, &stats);
          return prometheusText(stats);
        },
        [service] { return statusPage(service->status()); });
    if (!m)
      return m.takeError();
    s->metrics_ = std::move(*m);
  }
  return s;
}

Server::~Server() {
  if (server_)
    drain(std::chrono::milliseconds(0), std::chrono::milliseconds(0));
}

const std::string &Server::storeNotice() const { return service_->notice(); }

int Server::importsInFlight() const { return service_->importsInFlight(); }

int Server::metricsPort() const { return metrics_ ? metrics_->port() : 0; }

void Server::drain(std::chrono::milliseconds grace, std::chrono::milliseconds deadline) {
  std::call_once(drained_, [&] {
    server_->GetHealthCheckService()->SetServingStatus(false);
    std::this_thread::sleep_for(grace);
    server_->Shutdown(std::chrono::system_clock::now() + deadline);
    metrics_.reset();
  });
  server_->Wait();
}

void Server::wait() { server_->Wait(); }

} // namespace tilejit
