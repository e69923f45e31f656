//===- Client.cpp -----------------------------------------------------------===//
#include "service/Client.h"

#include "core/Settings.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "autotune/Tuner.h"
#include "core/Sha256.h"
#include "service/Wire.h"
#include "tilejit.grpc.pb.h"

namespace tilejit {

namespace {

llvm::Error err(const std::string &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

const char *sourceName(v1::GetKernelResponse::Source s) {
  switch (s) {
  case v1::GetKernelResponse::SOURCE_STORE:
    return "store";
  case v1::GetKernelResponse::SOURCE_COMPILED:
    return "compiled";
  case v1::GetKernelResponse::SOURCE_SHARED:
    return "shared";
  default:
    return "?";
  }
}

} // namespace

class ClientChannel {
public:
  explicit ClientChannel(const ClientOptions &o)
      : channel(grpc::CreateCustomChannel(o.address, credentials(o), args())),
        stub(v1::TileJit::NewStub(channel)) {}
  static std::shared_ptr<grpc::ChannelCredentials> credentials(const ClientOptions &o) {
    if (o.caPem.empty())
      return grpc::InsecureChannelCredentials();
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = o.caPem;
    ssl.pem_cert_chain = o.certPem;
    ssl.pem_private_key = o.keyPem;
    return grpc::SslCredentials(ssl);
  }
  static grpc::ChannelArguments args() {
    // gRPC's default of 4 MB would refuse a large cubin; the server takes
    // requests up to 64 MB (ServerOptions::maxMessageBytes).
    grpc::ChannelArguments a;
    a.SetMaxReceiveMessageSize(64 << 20);
    return a;
  }
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::TileJit::Stub> stub;

  /// UNAVAILABLE without asking while the server is held unreachable.
  grpc::Status refuseWhileDown(const ClientOptions &o) {
    std::lock_guard<std::mutex> lock(mu);
    auto now = std::chrono::steady_clock::now();
    if (now >= downUntil)
      return grpc::Status::OK;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(downUntil - now);
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "not asked: unreachable " + std::to_string((o.downFor - left).count()) +
                            " ms ago (" + downWhy + "); asked again in " +
                            std::to_string(left.count()) + " ms");
  }
  /// A call that found no server (refused, or its deadline passed before
  /// the channel ever connected) holds it unreachable for `downFor`: a
  /// process with many kernels to get waits one deadline, not one each.
  /// A deadline passed on a connected channel is a slow answer (a long
  /// compile), not a missing server.
  void noteOutcome(const ClientOptions &o, const grpc::Status &s) {
    bool unreachable = s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                       (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED &&
                        channel->GetState(false) != GRPC_CHANNEL_READY);
    if (!unreachable || o.downFor.count() <= 0)
      return;
    std::lock_guard<std::mutex> lock(mu);
    downUntil = std::chrono::steady_clock::now() + o.downFor;
    downWhy = std::to_string(int(s.error_code())) + " " + s.error_message();
  }
  std::mutex mu;
  std::chrono::steady_clock::time_point downUntil;
  std::string downWhy;
};

llvm::Expected<std::optional<ClientOptions>>
ClientOptions::fromEnvironment(const std::string &address) {
  std::string server = address.empty() ? settings::value("TILEJIT_SERVER") : address;
  if (server.empty())
    return std::nullopt;
  ClientOptions o;
  o.address = server;
  if (!address.empty()) // a --server address: TILEJIT_SERVER's rule, the flag's name
    if (llvm::Error e = settings::checkValue("TILEJIT_SERVER", address)) {
      llvm::consumeError(std::move(e));
      return err("server address '" + o.address + "' is not host:port");
    }
  // The client's variables, each checked as the settings table says.
  for (std::string_view var :
       {"TILEJIT_SERVER", "TILEJIT_TOKEN_FILE", "TILEJIT_CA", "TILEJIT_CLIENT_CERT",
        "TILEJIT_CLIENT_KEY", "TILEJIT_SERVER_DEADLINE_MS"}) {
    // A --server address stands in for TILEJIT_SERVER, which is not read.
    if (!address.empty() && var == "TILEJIT_SERVER")
      continue;
    if (auto e = settings::check(var))
      return e;
  }
  auto contents = [](const std::string &path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  if (std::string t = settings::value("TILEJIT_TOKEN"); !t.empty()) {
    o.token = t;
  } else if (std::string f = settings::value("TILEJIT_TOKEN_FILE"); !f.empty()) {
    o.token = contents(f);
    while (!o.token.empty() && std::isspace(static_cast<unsigned char>(o.token.back())))
      o.token.pop_back();
    if (o.token.empty())
      return err("TILEJIT_TOKEN_FILE='" + f + "' is empty");
  }
  // PEM files (checked above).
  for (auto [var, out] :
       {std::pair{"TILEJIT_CA", &o.caPem}, std::pair{"TILEJIT_CLIENT_CERT", &o.certPem},
        std::pair{"TILEJIT_CLIENT_KEY", &o.keyPem}})
    if (std::string path = settings::value(var); !path.empty())
      if ((*out = contents(path)).empty())
        return err(std::string(var) + "='" + path + "' cannot be read");
  if (o.certPem.empty() != o.keyPem.empty())
    return err("TILEJIT_CLIENT_CERT and TILEJIT_CLIENT_KEY go together");
  if (!o.certPem.empty() && o.caPem.empty())
    return err("TILEJIT_CLIENT_CERT needs TLS: set TILEJIT_CA to the server's CA");
  if (std::string d = settings::value("TILEJIT_SERVER_DEADLINE_MS"); !d.empty())
    o.deadline = std::chrono::milliseconds(std::stoll(d));
  return o;
}

Client::Client(ClientOptions options)
    : options_(std::move(options)), channel_(std::make_unique<ClientChannel>(options_)) {}

Client::~Client() = default;

void Client::authorize(grpc::ClientContext &ctx) const {
  if (!options_.token.empty())
    ctx.AddMetadata("authorization", "Bearer " + options_.token);
}

namespace {

/// Runs `call` (one attempt, given its context) until it succeeds, fails
/// with anything but UNAVAILABLE, runs out of attempts or passes the
/// deadline, which bounds every attempt and every wait between them.
template <typename Call> grpc::Status withRetries(const ClientOptions &o, Call &&call) {
  auto deadline = std::chrono::system_clock::now() + o.deadline;
  auto wait = o.backoff;
  grpc::Status s;
  for (int attempt = 0; attempt < std::max(1, o.attempts); ++attempt) {
    if (attempt > 0) {
      if (std::chrono::system_clock::now() + wait >= deadline)
        break;
      std::this_thread::sleep_for(wait);
      wait *= 2;
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline);
    s = call(ctx);
    if (s.error_code() != grpc::StatusCode::UNAVAILABLE)
      return s;
  }
  return s;
}

/// withRetries, unless `channel`'s server was found unreachable lately.
template <typename Call>
grpc::Status withRetries(const ClientOptions &o, ClientChannel &channel, Call &&call) {
  if (grpc::Status down = channel.refuseWhileDown(o); !down.ok())
    return down;
  grpc::Status s = withRetries(o, std::forward<Call>(call));
  channel.noteOutcome(o, s);
  return s;
}

llvm::Error statusError(const std::string &address, const grpc::Status &s) {
  return err("server " + address + ": " + std::to_string(int(s.error_code())) + " " +
             s.error_message());
}

llvm::Expected<RemoteKernel> remoteOf(const v1::Kernel &k, bool tuned, std::string source,
                                      bool withCode = true) {
  auto binary = wire::binaryFrom(k, withCode);
  if (!binary)
    return binary.takeError();
  RemoteKernel r;
  r.binary = std::move(*binary);
  r.sha256 = k.sha256();
  r.tuned = tuned;
  r.source = std::move(source);
  r.codeOmitted = !withCode;
  return r;
}

v1::KernelRequest requestOf(const KernelSpec &spec, const TileConfig &config, Backend backend) {
  v1::KernelRequest req;
  req.set_spec(spec.canonical());
  if (!config.values.empty())
    req.set_config(config.canonical());
  req.set_backend(wire::backendTo(backend));
  return req;
}

} // namespace

llvm::Expected<RemoteKernel> Client::getKernel(const KernelSpec &spec, const TileConfig &config,
                                               Backend backend) {
  v1::KernelRequest req = requestOf(spec, config, backend);
  v1::GetKernelResponse resp;
  grpc::Status s = withRetries(options_, *channel_, [&](grpc::ClientContext &ctx) {
    resp.Clear();
    return channel_->stub->GetKernel(&ctx, req, &resp);
  });
  if (!s.ok())
    return statusError(options_.address, s);
  return remoteOf(resp.kernel(), resp.tuned(), sourceName(resp.source()));
}

llvm::Expected<std::optional<RemoteKernel>> Client::lookup(const KernelSpec &spec,
                                                           const TileConfig &config,
                                                           Backend backend,
                                                           const std::string &haveSha256) {
  v1::KernelRequest req = requestOf(spec, config, backend);
  req.set_have_sha256(haveSha256);
  v1::LookupResponse resp;
  grpc::Status s = withRetries(options_, *channel_, [&](grpc::ClientContext &ctx) {
    resp.Clear();
    return channel_->stub->Lookup(&ctx, req, &resp);
  });
  if (!s.ok())
    return statusError(options_.address, s);
  if (!resp.found())
    return std::nullopt;
  if (resp.cubin_omitted() && (haveSha256.empty() || resp.kernel().sha256() != haveSha256))
    return err("server " + options_.address + " left out the cubin of kernel " +
               resp.kernel().key() + " (SHA-256 " + resp.kernel().sha256() +
               "), which is not the one this client holds");
  auto r = remoteOf(resp.kernel(), resp.tuned(), "store", !resp.cubin_omitted());
  if (!r)
    return r.takeError();
  return std::optional<RemoteKernel>(std::move(*r));
}

llvm::Expected<TuningLease> Client::acquireLease(const KernelSpec &spec, Backend backend,
                                                 const std::string &holder,
                                                 std::chrono::milliseconds ttl,
                                                 const std::string &leaseId) {
  v1::AcquireTuningLeaseRequest req;
  req.set_spec(spec.canonical());
  req.set_backend(wire::backendTo(backend));
  req.set_holder(holder);
  req.set_ttl_ms(ttl.count());
  req.set_lease_id(leaseId);
  v1::AcquireTuningLeaseResponse resp;
  grpc::Status s = withRetries(options_, *channel_, [&](grpc::ClientContext &ctx) {
    authorize(ctx);
    resp.Clear();
    return channel_->stub->AcquireTuningLease(&ctx, req, &resp);
  });
  if (!s.ok())
    return statusError(options_.address, s);
  return wire::leaseFrom(resp);
}

llvm::Expected<bool> Client::releaseLease(const KernelSpec &spec, Backend backend,
                                          const std::string &leaseId) {
  v1::ReleaseTuningLeaseRequest req;
  req.set_spec(spec.canonical());
  req.set_backend(wire::backendTo(backend));
  req.set_lease_id(leaseId);
  v1::ReleaseTuningLeaseResponse resp;
  grpc::Status s = withRetries(options_, *channel_, [&](grpc::ClientContext &ctx) {
    authorize(ctx);
    resp.Clear();
    return channel_->stub->ReleaseTuningLease(&ctx, req, &resp);
  });
  if (!s.ok())
    return statusError(options_.address, s);
  return resp.released();
}

llvm::Expected<RemoteTuning>
Client::tune(const KernelSpec &spec, const RemoteTuneOptions &o,
             const std::function<void(const RemoteTuning &)> &onStarted,
             const std::function<void(const CandidateResult &, int, int)> &onCandidate) {
  v1::TuneRequest req;
  req.set_spec(spec.canonical());
  req.set_backend(wire::backendTo(o.backend));
  req.set_holder(o.holder);
  req.set_max_configs(o.maxConfigs);
  req.set_budget_seconds(o.budgetSeconds);
  req.set_reps(o.reps);
  if (grpc::Status down = channel_->refuseWhileDown(options_); !down.ok())
    return statusError(options_.address, down);
  // One attempt: a tuning is not repeated behind the caller's back.
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + o.deadline);
  authorize(ctx);
  auto reader = channel_->stub->Tune(&ctx, req);
  RemoteTuning out;
  bool finished = false;
  std::string bad;
  v1::TuneProgress m;
  while (reader->Read(&m)) {
    if (m.has_started()) {
      out.tuneKey = m.started().tune_key();
      out.spec = m.started().spec();
      out.gpu = m.started().gpu();
      out.holder = m.started().holder();
      if (onStarted)
        onStarted(out);
    } else if (m.has_candidate()) {
      const v1::TuneCandidate &tc = m.candidate();
      CandidateResult c;
      if (auto cfg = TileConfig::parse(tc.config()))
        c.config = std::move(*cfg);
      else if (bad.empty())
        bad = "candidate config '" + tc.config() + "': " + llvm::toString(cfg.takeError());
      else
        llvm::consumeError(cfg.takeError());
      c.status = tc.status();
      c.detail = tc.detail();
      c.medianMs = tc.median_ms();
      c.p20Ms = tc.p20_ms();
      c.p80Ms = tc.p80_ms();
      c.reps = tc.reps();
      if (onCandidate)
        onCandidate(c, tc.done(), tc.total());
      out.candidates.push_back(std::move(c));
    } else if (m.has_finished()) {
      const v1::TuneFinished &f = m.finished();
      if (auto cfg = TileConfig::parse(f.winner_config()))
        out.winner = std::move(*cfg);
      else if (bad.empty())
        bad = "winner config '" + f.winner_config() + "': " + llvm::toString(cfg.takeError());
      else
        llvm::consumeError(cfg.takeError());
      out.tuneKey = f.tune_key();
      out.winnerMs = f.winner().median_ms();
      out.winnerP20Ms = f.winner().p20_ms();
      out.winnerP80Ms = f.winner().p80_ms();
      out.winnerReps = f.winner().reps();
      out.reason = f.reason();
      out.kernelKey = f.kernel_key();
      out.measured = f.measured();
      out.reused = f.reused();
      out.failed = f.failed();
      out.wallSeconds = f.wall_seconds();
      finished = true;
    }
  }
  grpc::Status s = reader->Finish();
  channel_->noteOutcome(options_, s);
  if (!s.ok())
    return statusError(options_.address, s);
  if (!bad.empty())
    return err("server " + options_.address + " sent an unreadable " + bad);
  if (!finished)
    return err("server " + options_.address + " ended the tuning without a winner");
  return out;
}

llvm::Expected<RemoteListing> Client::list(int limit) {
  v1::ListRequest req;
  req.set_limit(limit);
  v1::ListResponse resp;
  grpc::Status s = withRetries(options_, *channel_, [&](grpc::ClientContext &ctx) {
    resp.Clear();
    return channel_->stub->List(&ctx, req, &resp);
  });
  if (!s.ok())
    return statusError(options_.address, s);
  RemoteListing out;
  out.truncated = resp.truncated();
  for (const v1::ListEntry &e : resp.entries())
    out.entries.push_back(
        {e.kind(), e.key(), e.spec(), e.config(), e.arch(), e.bytes(), e.created_at()});
  for (const v1::LeaseInfo &l : resp.leases())
    out.leases.push_back({l.tune_key(), l.holder(), std::chrono::milliseconds(l.expires_in_ms())});
  return out;
}

llvm::Expected<RemoteExplanation> Client::explain(const KernelSpec &spec, Backend backend) {
  v1::KernelRequest req = requestOf(spec, {}, backend);
  v1::ExplainResponse resp;
  grpc::Status s = withRetries(options_, *channel_, [&](grpc::ClientContext &ctx) {
    resp.Clear();
    return channel_->stub->Explain(&ctx, req, &resp);
  });
  if (!s.ok())
    return statusError(options_.address, s);
  RemoteExplanation out;
  out.tuneKey = resp.tune_key();
  out.toolchain = resp.toolchain();
  auto config = TileConfig::parse(resp.config());
  if (!config)
    return err("server " + options_.address + " sent config '" + resp.config() +
               "': " + llvm::toString(config.takeError()));
  out.config = std::move(*config);
  auto def = TileConfig::parse(resp.default_config());
  if (!def)
    return err("server " + options_.address + " sent default config '" + resp.default_config() +
               "': " + llvm::toString(def.takeError()));
  out.defaultConfig = std::move(*def);
  out.tuned = resp.tuned();
  out.stored = resp.stored();
  out.truncated = resp.truncated();
  if (resp.tuned()) {
    Winner w;
    w.tuneKey = resp.tune_key();
    w.config = resp.config();
    w.kernelKey = resp.winner_kernel_key();
    w.medianMs = resp.winner_ms();
    w.reason = resp.winner_reason();
    out.winner = std::move(w);
  }
  for (const v1::Timing &t : resp.timings()) {
    Timing mine;
    if (grpc::Status bad = wire::timingFrom(t, "timings", mine); !bad.ok())
      return err("server " + options_.address + " sent " + bad.error_message());
    mine.tuneKey = resp.tune_key();
    out.timings.push_back(std::move(mine));
  }
  for (const v1::TuneFailure &f : resp.failures())
    out.failures.push_back({resp.tune_key(), f.config(), f.stage(), f.reason(), 0});
  return out;
}

llvm::Expected<std::string> Client::exportStore() {
  // The server's word is checked as the server checks an import's: a size
  // declared once, within the cap, no more bytes than it, a SHA-256 digest.
  constexpr int64_t kMaxExportBytes = int64_t(1) << 30;
  v1::ExportRequest req;
  std::optional<wire::ImageAssembler> got;
  std::optional<wire::ImageAssembler::Problem> bad;
  grpc::Status s = withRetries(options_, *channel_, [&](grpc::ClientContext &ctx) {
    got.emplace(kMaxExportBytes);
    bad.reset();
    auto reader = channel_->stub->Export(&ctx, req);
    v1::ExportChunk c;
    while (!bad && reader->Read(&c))
      if ((bad = got->add(c.total_bytes(), c.sha256(), c.data())))
        ctx.TryCancel();
    grpc::Status finished = reader->Finish();
    // Bad data is the server's answer, not a reason to ask again.
    return bad ? grpc::Status::OK : finished;
  });
  if (!bad && s.ok())
    bad = got->finish();
  if (bad)
    return err("server " + options_.address + ": the export's " + bad->field + ": " + bad->what);
  if (!s.ok())
    return statusError(options_.address, s);
  return got->image();
}

llvm::Expected<ImportReport> Client::importStore(const std::string &image) {
  v1::ImportResponse resp;
  std::string digest = sha256Hex(image);
  grpc::Status s = withRetries(options_, *channel_, [&](grpc::ClientContext &ctx) {
    authorize(ctx);
    resp.Clear();
    auto writer = channel_->stub->Import(&ctx, &resp);
    // A refused write means the server has answered already (a refusal):
    // Finish says what it was.
    wire::writeImageChunks<v1::ImportChunk>(
        image, digest, options_.chunkBytes,
        [&](const v1::ImportChunk &c) { return writer->Write(c); });
    writer->WritesDone();
    return writer->Finish();
  });
  if (!s.ok())
    return statusError(options_.address, s);
  ImportReport r;
  r.rows = resp.rows();
  r.kernelsLeft = resp.kernels_left();
  r.firstLeft = resp.first_left();
  return r;
}

llvm::Expected<std::string> Client::publish(const Publication &p) {
  v1::PublishResultRequest req;
  wire::publicationTo(p, req);
  v1::PublishResultResponse resp;
  grpc::Status s = withRetries(options_, *channel_, [&](grpc::ClientContext &ctx) {
    authorize(ctx);
    resp.Clear();
    return channel_->stub->PublishResult(&ctx, req, &resp);
  });
  if (!s.ok())
    return statusError(options_.address, s);
  return resp.kernel_key();
}

namespace {

/// Records `b` in `local`, saying why on stderr when it cannot: the kernel
/// is good whether or not it could be recorded (a read-only or full disk, a
/// lock held too long).
void record(Store *local, const KernelSpec &spec, Backend backend, const KernelBinary &b,
            const std::string &ptx) {
  if (!local)
    return;
  if (auto e = local->putKernel(wire::storedFrom(b, ptx, toolchainId(spec, backend))))
    std::fprintf(stderr, "tilejit: could not record kernel %s in %s: %s\n",
                 b.key.substr(0, 16).c_str(), local->path().c_str(),
                 llvm::toString(std::move(e)).c_str());
}

/// `r`, unless the server made it under another build identity (another
/// compiler or toolchain): this process's key would not find it again.
llvm::Error checkIdentity(const RemoteKernel &r, const std::string &key, const Client &remote) {
  if (r.binary.key == key)
    return llvm::Error::success();
  return err("server " + remote.options().address + " sent kernel " + r.binary.key + " for key " +
             key + " (another build identity)");
}

} // namespace

llvm::Expected<RemoteKernel> fetchBest(const KernelSpec &spec, Backend backend, Store *local,
                                       Client &remote) {
  auto r = remote.getKernel(spec, {}, backend);
  if (!r)
    return r.takeError();
  if (auto e = checkIdentity(*r, kernelKey(spec, r->binary.config, backend), remote))
    return e;
  r->binary.spec = spec;
  record(local, spec, backend, r->binary, "");
  if (local && r->tuned) {
    // Kept here as well, so that this host uses the winner while the server
    // cannot be reached.
    Winner w;
    w.tuneKey = tuneKey(spec, backend);
    w.config = r->binary.config.canonical();
    auto stored = local->getKernel(r->binary.key);
    if (stored && *stored)
      w.kernelKey = r->binary.key;
    else if (!stored)
      llvm::consumeError(stored.takeError());
    w.reason = "published on server " + remote.options().address;
    if (auto e = local->setWinner(w))
      std::fprintf(stderr, "tilejit: could not record the server's winner in %s: %s\n",
                   local->path().c_str(), llvm::toString(std::move(e)).c_str());
  }
  return r;
}

llvm::Expected<KernelBinary> fetchOrCompile(const KernelSpec &spec, const TileConfig &config,
                                            Backend backend, Store *local, Client *remote,
                                            KernelSource *source, std::string *remoteError,
                                            std::string *storeError) {
  std::string key = kernelKey(spec, config, backend);
  if (local) {
    std::string problem;
    std::optional<StoredKernel> found;
    if (auto stored = local->getKernel(key, &problem)) {
      found = std::move(*stored);
    } else {
      // The kernel is still to be had: from the server, else compiled.
      std::string why = "the kernel store " + local->path() + " could not be read (" +
                        llvm::toString(stored.takeError()) + ")";
      if (storeError)
        *storeError = why;
      else
        std::fprintf(stderr, "tilejit: %s; going on without it\n", why.c_str());
    }
    if (!problem.empty())
      std::fprintf(stderr, "tilejit: %s; fetching it again\n", problem.c_str());
    if (found) {
      auto entries = entriesFromJson(found->launch);
      if (entries) {
        KernelBinary b;
        b.spec = spec;
        b.config = config;
        b.key = key;
        b.backend = backendName(backend);
        b.cubin = std::move(found->cubin);
        b.entries = std::move(*entries);
        b.workspaceBytes = found->workspaceBytes;
        if (source)
          *source = KernelSource::Store;
        return b;
      }
      std::fprintf(stderr, "tilejit: stored kernel %s: %s; fetching it again\n",
                   key.substr(0, 16).c_str(), llvm::toString(entries.takeError()).c_str());
    }
  }
  if (remote) {
    auto r = remote->getKernel(spec, config, backend);
    if (r)
      if (auto e = checkIdentity(*r, key, *remote))
        r = std::move(e);
    if (r) {
      r->binary.spec = spec;
      record(local, spec, backend, r->binary, "");
      if (source)
        *source = KernelSource::Server;
      return std::move(r->binary);
    }
    std::string why = llvm::toString(r.takeError());
    if (remoteError)
      *remoteError = why;
  }
  CompileOptions co;
  co.backend = backend;
  auto compiled = compileKernel(spec, config, co);
  if (!compiled)
    return compiled.takeError();
  record(local, spec, backend, *compiled, compiled->ptx);
  if (source)
    *source = KernelSource::Compiled;
  return static_cast<KernelBinary &&>(std::move(*compiled));
}

} // namespace tilejit
