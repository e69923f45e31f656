//===- ServerTest.cpp - the tuning-cache server over real gRPC -------------===//
//
// Every test starts a server on 127.0.0.1 (a free port) over a store file in
// a fresh directory and talks to it through the generated stubs; GetKernel
// compiles for real (no GPU is needed to compile).
//
//===----------------------------------------------------------------------===//
#include <gtest/gtest.h>

#include <tuple>

#include <atomic>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <thread>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <httplib.h>
#include <sqlite3.h>

#include "autotune/Tuner.h"
#include "compiler/templates/Template.h"
#include "core/Sha256.h"
#include "health.grpc.pb.h"
#include "service/Client.h"
#include "service/Server.h"
#include "service/StatusPage.h"
#include "service/Wire.h"
#include "tests/support/TempDir.h"
#include "tilejit.grpc.pb.h"

using namespace tilejit;
using grpc::StatusCode;

namespace {

/// A server on a free loopback port over `dir`/t.db, and a client of it.
struct Fixture {
  explicit Fixture(ServerOptions options = {}) {
    options.dbPath = dir.file("t.db");
    options.log = [this](const std::string &line) {
      std::lock_guard<std::mutex> lock(logMu);
      log.push_back(line);
    };
    auto s = Server::start(std::move(options), "127.0.0.1:0");
    if (!s) {
      ADD_FAILURE() << llvm::toString(s.takeError());
      return;
    }
    server = std::move(*s);
    channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server->port()),
                                  grpc::InsecureChannelCredentials());
    stub = v1::TileJit::NewStub(channel);
    health = grpc::health::v1::Health::NewStub(channel);
  }

  std::unique_ptr<grpc::ClientContext> context(const std::string &token = "") {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    if (!token.empty())
      ctx->AddMetadata("authorization", "Bearer " + token);
    return ctx;
  }

  grpc::Status lookup(const v1::KernelRequest &req, v1::LookupResponse &resp) {
    return stub->Lookup(context().get(), req, &resp);
  }
  grpc::Status getKernel(const v1::KernelRequest &req, v1::GetKernelResponse &resp) {
    return stub->GetKernel(context().get(), req, &resp);
  }
  grpc::Status acquire(const v1::AcquireTuningLeaseRequest &req,
                       v1::AcquireTuningLeaseResponse &resp) {
    return stub->AcquireTuningLease(context().get(), req, &resp);
  }
  grpc::Status publish(const v1::PublishResultRequest &req, v1::PublishResultResponse &resp,
                       const std::string &token = "") {
    return stub->PublishResult(context(token).get(), req, &resp);
  }
  v1::StatsResponse stats() {
    v1::StatsResponse resp;
    EXPECT_TRUE(stub->Stats(context().get(), v1::StatsRequest(), &resp).ok());
    return resp;
  }
  grpc::health::v1::HealthCheckResponse::ServingStatus healthOf(const std::string &service) {
    grpc::health::v1::HealthCheckRequest req;
    req.set_service(service);
    grpc::health::v1::HealthCheckResponse resp;
    auto s = health->Check(context().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.status();
  }

  tilejit::testing::TempDir dir;
  std::mutex logMu;
  std::vector<std::string> log;
  std::unique_ptr<Server> server;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::TileJit::Stub> stub;
  std::unique_ptr<grpc::health::v1::Health::Stub> health;
};

v1::KernelRequest request(const std::string &spec, const std::string &config = "") {
  v1::KernelRequest r;
  r.set_spec(spec);
  r.set_config(config);
  return r;
}

v1::AcquireTuningLeaseRequest leaseRequest(const std::string &spec, const std::string &holder,
                                           int64_t ttlMs, const std::string &leaseId = "") {
  v1::AcquireTuningLeaseRequest r;
  r.set_spec(spec);
  r.set_holder(holder);
  r.set_ttl_ms(ttlMs);
  r.set_lease_id(leaseId);
  return r;
}

KernelSpec specOf(const std::string &text) {
  auto s = KernelSpec::parse(text);
  EXPECT_TRUE(bool(s)) << (s ? "" : llvm::toString(s.takeError()));
  return s ? *s : KernelSpec();
}

/// A config of `spec` other than its default: the default with another
/// thread count.
std::string otherConfig(const KernelSpec &spec) {
  TileConfig c = getTemplate(spec).defaultConfig(spec);
  c.set("threads", c.get("threads") == 256 ? 512 : 256);
  EXPECT_FALSE(bool(getTemplate(spec).checkConfig(spec, c)));
  return c.canonical();
}

constexpr const char *kSpec = "rmsnorm_fwd rows=4096 cols=4096";

} // namespace

TEST(Server, EveryCallRoundTrips) {
  Fixture f;
  ASSERT_TRUE(f.server);
  KernelSpec spec = specOf(kSpec);
  std::string key = kernelKey(spec, getTemplate(spec).defaultConfig(spec));

  // Lookup never compiles: a miss stays a miss.
  v1::LookupResponse miss;
  ASSERT_TRUE(f.lookup(request(kSpec), miss).ok());
  EXPECT_FALSE(miss.found());
  EXPECT_EQ(f.stats().compiles(), 0u);

  v1::GetKernelResponse got;
  auto s = f.getKernel(request(kSpec), got);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(got.source(), v1::GetKernelResponse::SOURCE_COMPILED);
  EXPECT_FALSE(got.tuned());
  EXPECT_EQ(got.kernel().key(), key);
  EXPECT_EQ(got.kernel().sha256(), sha256Hex(got.kernel().cubin()));
  EXPECT_EQ(got.kernel().backend(), v1::BACKEND_NVPTX);
  auto binary = wire::binaryFrom(got.kernel());
  ASSERT_TRUE(bool(binary)) << llvm::toString(binary.takeError());
  EXPECT_TRUE(binary->spec.sameKernel(spec));
  ASSERT_FALSE(binary->entries.empty());
  EXPECT_EQ(binary->entries[0].name.rfind("rmsnorm_fwd", 0), 0u);

  v1::LookupResponse hit;
  ASSERT_TRUE(f.lookup(request(kSpec), hit).ok());
  ASSERT_TRUE(hit.found());
  EXPECT_EQ(hit.kernel().cubin(), got.kernel().cubin());
  v1::GetKernelResponse again;
  ASSERT_TRUE(f.getKernel(request(kSpec), again).ok());
  EXPECT_EQ(again.source(), v1::GetKernelResponse::SOURCE_STORE);
  EXPECT_EQ(again.kernel().cubin(), got.kernel().cubin());

  // A tuner takes the lease, publishes a winner other than the default;
  // from then on requests without a config get the winner.
  std::string winner = otherConfig(spec);
  v1::AcquireTuningLeaseResponse lease;
  ASSERT_TRUE(f.acquire(leaseRequest(kSpec, "tuner-a", 60000), lease).ok());
  ASSERT_TRUE(lease.granted());
  EXPECT_EQ(lease.tune_key(), tuneKey(spec));
  EXPECT_FALSE(lease.best_is_tuned());
  EXPECT_EQ(lease.best_config(), getTemplate(spec).defaultConfig(spec).canonical());
  v1::PublishResultRequest pub;
  pub.set_lease_id(lease.lease_id());
  pub.set_spec(kSpec);
  pub.set_winner_config(winner);
  pub.set_winner_ms(0.25);
  pub.set_reason("fastest median");
  for (const std::string &c : {winner, lease.best_config()}) {
    v1::Timing *t = pub.add_timings();
    t->set_config(c);
    t->set_median_ms(c == winner ? 0.25 : 0.3);
    t->set_reps(50);
    t->set_gpu("NVIDIA H200");
  }
  v1::PublishResultResponse published;
  s = f.publish(pub, published);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(published.tune_key(), tuneKey(spec));
  EXPECT_EQ(published.timings_written(), 2);
  EXPECT_EQ(published.kernel_key(), ""); // the winner was never compiled

  v1::LookupResponse tunedMiss;
  ASSERT_TRUE(f.lookup(request(kSpec), tunedMiss).ok());
  EXPECT_TRUE(tunedMiss.tuned());
  EXPECT_FALSE(tunedMiss.found());
  v1::GetKernelResponse tuned;
  ASSERT_TRUE(f.getKernel(request(kSpec), tuned).ok());
  EXPECT_TRUE(tuned.tuned());
  EXPECT_EQ(tuned.kernel().config(), winner);
  EXPECT_EQ(tuned.kernel().key(), kernelKey(spec, *TileConfig::parse(winner)));
  // An explicit config is served as asked.
  v1::GetKernelResponse asked;
  ASSERT_TRUE(f.getKernel(request(kSpec, lease.best_config()), asked).ok());
  EXPECT_EQ(asked.kernel().key(), key);
  EXPECT_EQ(asked.source(), v1::GetKernelResponse::SOURCE_STORE);

  v1::ListResponse list;
  ASSERT_TRUE(f.stub->List(f.context().get(), v1::ListRequest(), &list).ok());
  std::set<std::string> kernels, winners;
  for (const auto &e : list.entries())
    (e.kind() == "kernel" ? kernels : winners).insert(e.key());
  EXPECT_EQ(kernels, (std::set<std::string>{key, tuned.kernel().key()}));
  EXPECT_EQ(winners, std::set<std::string>{tuneKey(spec)});
  EXPECT_FALSE(list.truncated());
  EXPECT_EQ(list.leases_size(), 0); // publishing ended the lease
  v1::ListRequest one;
  one.set_limit(1);
  v1::ListResponse first;
  ASSERT_TRUE(f.stub->List(f.context().get(), one, &first).ok());
  EXPECT_EQ(first.entries_size(), 1);
  EXPECT_TRUE(first.truncated());

  v1::StatsResponse st = f.stats();
  EXPECT_EQ(st.compiles(), 2u);
  EXPECT_EQ(st.lookups(), 3u);
  EXPECT_EQ(st.lookup_hits(), 1u);
  EXPECT_EQ(st.get_kernels(), 4u);
  EXPECT_EQ(st.store_hits(), 2u);
  EXPECT_EQ(st.leases_granted(), 1u);
  EXPECT_EQ(st.publishes(), 1u);
  EXPECT_EQ(st.invalid_requests(), 0u);

  EXPECT_EQ(f.healthOf(""), grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_EQ(f.healthOf("tilejit.v1.TileJit"), grpc::health::v1::HealthCheckResponse::SERVING);

  // What the server wrote is in the SQLite file, for any other reader.
  auto store = Store::open(f.dir.file("t.db"));
  ASSERT_TRUE(bool(store)) << llvm::toString(store.takeError());
  auto w = (*store)->winner(tuneKey(spec));
  ASSERT_TRUE(w && *w);
  EXPECT_EQ((**w).config, winner);
  auto timings = (*store)->timings(tuneKey(spec));
  ASSERT_TRUE(bool(timings));
  EXPECT_EQ(timings->size(), 2u);
  auto k = (*store)->getKernel(key);
  ASSERT_TRUE(k && *k);
  EXPECT_EQ(std::string((**k).cubin.begin(), (**k).cubin.end()), got.kernel().cubin());
}

TEST(Server, ConcurrentRequestsForOneMissingKeyCompileOnce) {
  Fixture f;
  ASSERT_TRUE(f.server);
  constexpr int kClients = 64;
  const std::string spec = "rmsnorm_fwd rows=64 cols=2048 dtype=f16";
  std::vector<v1::GetKernelResponse> responses(kClients);
  std::vector<grpc::Status> statuses(kClients);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i)
    threads.emplace_back([&, i] {
      ++ready;
      while (ready.load() < kClients)
        std::this_thread::yield();
      statuses[size_t(i)] = f.getKernel(request(spec), responses[size_t(i)]);
    });
  for (auto &t : threads)
    t.join();
  int compiled = 0;
  for (int i = 0; i < kClients; ++i) {
    ASSERT_TRUE(statuses[size_t(i)].ok()) << statuses[size_t(i)].error_message();
    EXPECT_FALSE(responses[size_t(i)].kernel().cubin().empty());
    EXPECT_EQ(responses[size_t(i)].kernel().cubin(), responses[0].kernel().cubin());
    EXPECT_EQ(responses[size_t(i)].kernel().key(), responses[0].kernel().key());
    compiled += responses[size_t(i)].source() == v1::GetKernelResponse::SOURCE_COMPILED;
  }
  EXPECT_EQ(compiled, 1);
  v1::StatsResponse st = f.stats();
  EXPECT_EQ(st.compiles(), 1u);
  EXPECT_EQ(st.get_kernels(), uint64_t(kClients));
  EXPECT_EQ(st.shared_waits() + st.store_hits(), uint64_t(kClients - 1));
  EXPECT_GT(st.shared_waits(), 0u) << "no request waited on another's compile";
}

TEST(Server, LeasesLapseAndPassToTheNextTuner) {
  Fixture f;
  ASSERT_TRUE(f.server);
  KernelSpec spec = specOf(kSpec);
  v1::AcquireTuningLeaseResponse a, b;
  ASSERT_TRUE(f.acquire(leaseRequest(kSpec, "tuner-a", 1000), a).ok());
  ASSERT_TRUE(a.granted());
  // Another tuner is told who tunes and what to use meanwhile.
  ASSERT_TRUE(f.acquire(leaseRequest(kSpec, "tuner-b", 1000), b).ok());
  EXPECT_FALSE(b.granted());
  EXPECT_EQ(b.holder(), "tuner-a");
  EXPECT_EQ(b.lease_id(), "");
  EXPECT_EQ(b.best_config(), getTemplate(spec).defaultConfig(spec).canonical());
  EXPECT_GT(b.expires_in_ms(), 0);
  // Renewals keep it: past the first time to live, still tuner-a's.
  for (int i = 0; i < 6; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    v1::AcquireTuningLeaseResponse renewed;
    ASSERT_TRUE(f.acquire(leaseRequest(kSpec, "tuner-a", 1000, a.lease_id()), renewed).ok());
    ASSERT_TRUE(renewed.granted());
    EXPECT_EQ(renewed.lease_id(), a.lease_id());
  }
  ASSERT_TRUE(f.acquire(leaseRequest(kSpec, "tuner-b", 1000), b).ok());
  EXPECT_FALSE(b.granted());
  v1::ListResponse list;
  ASSERT_TRUE(f.stub->List(f.context().get(), v1::ListRequest(), &list).ok());
  ASSERT_EQ(list.leases_size(), 1);
  EXPECT_EQ(list.leases(0).holder(), "tuner-a");

  // tuner-a stops renewing (it died): the key passes to tuner-b.
  std::this_thread::sleep_for(std::chrono::milliseconds(1300));
  ASSERT_TRUE(f.acquire(leaseRequest(kSpec, "tuner-b", 5000), b).ok());
  ASSERT_TRUE(b.granted());
  EXPECT_NE(b.lease_id(), a.lease_id());
  EXPECT_GE(f.stats().leases_expired(), 1u);

  // The old holder's result is refused; the new holder's is taken.
  v1::PublishResultRequest pub;
  pub.set_spec(kSpec);
  pub.set_winner_config(otherConfig(spec));
  pub.set_winner_ms(0.5);
  pub.set_lease_id(a.lease_id());
  v1::PublishResultResponse resp;
  auto s = f.publish(pub, resp);
  EXPECT_EQ(s.error_code(), StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_NE(s.error_message().find("lease_id"), std::string::npos) << s.error_message();
  pub.set_lease_id(b.lease_id());
  s = f.publish(pub, resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  // The lease ended with the result: the next asker gets it, and the winner.
  v1::AcquireTuningLeaseResponse c;
  ASSERT_TRUE(f.acquire(leaseRequest(kSpec, "tuner-c", 1000), c).ok());
  EXPECT_TRUE(c.granted());
  EXPECT_TRUE(c.best_is_tuned());
  EXPECT_EQ(c.best_config(), otherConfig(spec));
  // A publish a second time under the ended lease is refused.
  s = f.publish(pub, resp);
  EXPECT_EQ(s.error_code(), StatusCode::FAILED_PRECONDITION);
}

TEST(Server, WritesNeedTheToken) {
  ServerOptions o;
  o.tokens = {{"s3cret-token", false}};
  Fixture f(o);
  ASSERT_TRUE(f.server);
  KernelSpec spec = specOf(kSpec);
  // A lease is a write too: it keeps every other tuner off the key.
  v1::AcquireTuningLeaseResponse lease;
  auto unleased =
      f.stub->AcquireTuningLease(f.context().get(), leaseRequest(kSpec, "tuner", 60000), &lease);
  EXPECT_EQ(unleased.error_code(), StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(f.stub
                ->AcquireTuningLease(f.context("s3cret").get(), leaseRequest(kSpec, "tuner", 60000),
                                     &lease)
                .error_code(),
            StatusCode::UNAUTHENTICATED);
  v1::ListResponse list;
  ASSERT_TRUE(f.stub->List(f.context().get(), v1::ListRequest(), &list).ok());
  EXPECT_EQ(list.leases_size(), 0);
  ASSERT_TRUE(f.stub
                  ->AcquireTuningLease(f.context("s3cret-token").get(),
                                       leaseRequest(kSpec, "tuner", 60000), &lease)
                  .ok());
  ASSERT_TRUE(lease.granted());
  v1::PublishResultRequest pub;
  pub.set_spec(kSpec);
  pub.set_winner_config(otherConfig(spec));
  pub.set_lease_id(lease.lease_id());
  v1::PublishResultResponse resp;
  auto none = f.publish(pub, resp);
  EXPECT_EQ(none.error_code(), StatusCode::UNAUTHENTICATED);
  EXPECT_NE(none.error_message().find("bearer token"), std::string::npos);
  auto wrong = f.publish(pub, resp, "s3cret-tokem");
  EXPECT_EQ(wrong.error_code(), StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(f.publish(pub, resp, "s3cret").error_code(), StatusCode::UNAUTHENTICATED);
  // Nothing was written, and the lease still holds.
  v1::LookupResponse l;
  ASSERT_TRUE(f.lookup(request(kSpec), l).ok()); // reads need no token
  EXPECT_FALSE(l.tuned());
  EXPECT_EQ(f.stats().unauthenticated(), 5u);
  auto right = f.publish(pub, resp, "s3cret-token");
  ASSERT_TRUE(right.ok()) << right.error_message();
  ASSERT_TRUE(f.lookup(request(kSpec), l).ok());
  EXPECT_TRUE(l.tuned());
}

// A tuner that finished without a result, or failed, hands its lease back:
// the next tuner gets the key at once, not when the lease would lapse.
TEST(Server, AReleasedLeaseFreesTheKeyAtOnce) {
  ServerOptions o;
  o.tokens = {{"writer", false}, {"reader", true}};
  Fixture f(o);
  ASSERT_TRUE(f.server);
  auto acquire = [&](const std::string &holder, const std::string &token,
                     v1::AcquireTuningLeaseResponse &resp) {
    return f.stub->AcquireTuningLease(f.context(token).get(), leaseRequest(kSpec, holder, 600000),
                                      &resp);
  };
  auto release = [&](const std::string &leaseId, const std::string &token,
                     v1::ReleaseTuningLeaseResponse &resp, const std::string &spec = kSpec) {
    v1::ReleaseTuningLeaseRequest r;
    r.set_spec(spec);
    r.set_lease_id(leaseId);
    return f.stub->ReleaseTuningLease(f.context(token).get(), r, &resp);
  };
  v1::AcquireTuningLeaseResponse a, b;
  // A read-only token takes no lease.
  grpc::Status s = acquire("tuner-r", "reader", a);
  EXPECT_EQ(s.error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(
      s.error_message(),
      "the bearer token is read-only: AcquireTuningLease writes and needs a read-write token");
  ASSERT_TRUE(acquire("tuner-a", "writer", a).ok());
  ASSERT_TRUE(a.granted());
  ASSERT_TRUE(acquire("tuner-b", "writer", b).ok());
  EXPECT_FALSE(b.granted());

  // Releasing is a write, of a lease named by its id.
  v1::ReleaseTuningLeaseResponse r;
  EXPECT_EQ(release(a.lease_id(), "", r).error_code(), StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(release(a.lease_id(), "reader", r).error_code(), StatusCode::PERMISSION_DENIED);
  s = release("", "writer", r);
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message().rfind("lease_id: ", 0), 0u) << s.error_message();
  s = release(a.lease_id(), "writer", r, "rmsnorm_fwd rows=4096 cols=-1");
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message().rfind("spec: ", 0), 0u) << s.error_message();
  // Another key's lease, or another id, releases nothing.
  ASSERT_TRUE(release(a.lease_id(), "writer", r, "rmsnorm_fwd rows=8 cols=1024").ok());
  EXPECT_FALSE(r.released());
  ASSERT_TRUE(release("0123456789abcdef0123456789abcdef", "writer", r).ok());
  EXPECT_FALSE(r.released());
  ASSERT_TRUE(acquire("tuner-b", "writer", b).ok());
  EXPECT_FALSE(b.granted());

  ASSERT_TRUE(release(a.lease_id(), "writer", r).ok());
  EXPECT_TRUE(r.released());
  EXPECT_EQ(r.tune_key(), a.tune_key());
  ASSERT_TRUE(acquire("tuner-b", "writer", b).ok());
  EXPECT_TRUE(b.granted());
  EXPECT_NE(b.lease_id(), a.lease_id());
  // Released once: a second release, or a publish under it, finds no lease.
  ASSERT_TRUE(release(a.lease_id(), "writer", r).ok());
  EXPECT_FALSE(r.released());
  v1::PublishResultRequest pub;
  pub.set_spec(kSpec);
  pub.set_winner_config(otherConfig(specOf(kSpec)));
  pub.set_lease_id(a.lease_id());
  v1::PublishResultResponse published;
  EXPECT_EQ(f.publish(pub, published, "writer").error_code(), StatusCode::FAILED_PRECONDITION);
  v1::StatsResponse st = f.stats();
  EXPECT_EQ(st.leases_released(), 1u);
  EXPECT_EQ(st.leases_expired(), 0u);
  EXPECT_EQ(st.active_leases(), 1);
}

TEST(Server, PublishedKernelIsServedWithoutCompiling) {
  Fixture f;
  ASSERT_TRUE(f.server);
  KernelSpec spec = specOf(kSpec);
  TileConfig winner = *TileConfig::parse(otherConfig(spec));
  auto compiled = compileKernel(spec, winner);
  ASSERT_TRUE(bool(compiled)) << llvm::toString(compiled.takeError());
  v1::AcquireTuningLeaseResponse lease;
  ASSERT_TRUE(f.acquire(leaseRequest(kSpec, "tuner", 60000), lease).ok());
  v1::PublishResultRequest pub;
  pub.set_spec(kSpec);
  pub.set_winner_config(winner.canonical());
  pub.set_lease_id(lease.lease_id());
  StoredKernel sk = wire::storedFrom(*compiled, "", "");
  wire::kernelTo(sk, Backend::Nvptx, *pub.mutable_kernel());
  // A kernel whose bytes do not match its hash, or whose key is another's,
  // is refused and nothing is written.
  v1::PublishResultResponse resp;
  pub.mutable_kernel()->set_sha256(std::string(64, '0'));
  auto s = f.publish(pub, resp);
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message().rfind("kernel.sha256: ", 0), 0u) << s.error_message();
  wire::kernelTo(sk, Backend::Nvptx, *pub.mutable_kernel());
  pub.mutable_kernel()->set_key(kernelKey(spec, getTemplate(spec).defaultConfig(spec)));
  s = f.publish(pub, resp);
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message().rfind("kernel.key: ", 0), 0u) << s.error_message();
  wire::kernelTo(sk, Backend::Nvptx, *pub.mutable_kernel());
  s = f.publish(pub, resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.kernel_key(), compiled->key);
  v1::GetKernelResponse got;
  ASSERT_TRUE(f.getKernel(request(kSpec), got).ok());
  EXPECT_EQ(got.source(), v1::GetKernelResponse::SOURCE_STORE);
  EXPECT_TRUE(got.tuned());
  EXPECT_EQ(got.kernel().cubin(), std::string(compiled->cubin.begin(), compiled->cubin.end()));
  EXPECT_EQ(f.stats().compiles(), 0u);
}

namespace {

struct Malformed {
  std::string name;
  std::function<grpc::Status(Fixture &)> call;
  StatusCode code;
  std::string prefix; // the message starts with it: the field
};

grpc::Status lookupOf(Fixture &f, v1::KernelRequest req) {
  v1::LookupResponse resp;
  return f.lookup(req, resp);
}

v1::PublishResultRequest goodPublish() {
  v1::PublishResultRequest p;
  p.set_spec(kSpec);
  p.set_lease_id("0123456789abcdef0123456789abcdef");
  p.set_winner_config(otherConfig(specOf(kSpec)));
  p.set_winner_ms(1);
  return p;
}

} // namespace

TEST(Server, MalformedRequestsAreAnsweredAndNameTheField) {
  ServerOptions o;
  o.maxMessageBytes = 1 << 20;
  o.maxLeaseTtl = std::chrono::minutes(5);
  Fixture f(o);
  ASSERT_TRUE(f.server);
  using C = StatusCode;
  auto publishOf = [](std::function<void(v1::PublishResultRequest &)> edit) {
    return [edit](Fixture &f) {
      v1::PublishResultRequest p = goodPublish();
      edit(p);
      v1::PublishResultResponse r;
      return f.publish(p, r);
    };
  };
  auto leaseOf = [](v1::AcquireTuningLeaseRequest r) {
    return [r](Fixture &f) {
      v1::AcquireTuningLeaseResponse resp;
      return f.acquire(r, resp);
    };
  };
  auto lookupSpec = [](std::string spec, std::string config = "") {
    return [spec, config](Fixture &f) { return lookupOf(f, request(spec, config)); };
  };
  std::vector<Malformed> cases = {
      {"empty spec", lookupSpec(""), C::INVALID_ARGUMENT, "spec: empty"},
      {"unknown op", lookupSpec("softmax cols=8"), C::INVALID_ARGUMENT, "spec: unknown op"},
      {"unknown field", lookupSpec("rmsnorm_fwd cols=8 depth=3"), C::INVALID_ARGUMENT,
       "spec: unknown spec field 'depth'"},
      {"zero size", lookupSpec("rmsnorm_fwd cols=0"), C::INVALID_ARGUMENT, "spec: cols must be"},
      {"negative size", lookupSpec("rmsnorm_fwd rows=-4 cols=8"), C::INVALID_ARGUMENT,
       "spec: rows must be"},
      {"huge size", lookupSpec("rmsnorm_fwd cols=99999999999"), C::INVALID_ARGUMENT,
       "spec: cols = 99999999999 is above"},
      {"not a number", lookupSpec("rmsnorm_fwd cols=1e9"), C::INVALID_ARGUMENT, "spec: 'cols=1e9'"},
      {"beyond int64", lookupSpec("rmsnorm_fwd cols=99999999999999999999999"), C::INVALID_ARGUMENT,
       "spec: 'cols="},
      {"product overflows", lookupSpec("rmsnorm_fwd rows=4611686018427387904 cols=4096"),
       C::INVALID_ARGUMENT, "spec: rows * cols elements of 4 bytes overflow"},
      {"bad dtype", lookupSpec("rmsnorm_fwd cols=8 dtype=int4"), C::INVALID_ARGUMENT,
       "spec: unknown dtype 'int4'"},
      {"bad arch", lookupSpec("rmsnorm_fwd cols=8 arch=sm_99"), C::INVALID_ARGUMENT,
       "spec: unknown arch 'sm_99'"},
      {"control character", lookupSpec(std::string("rmsnorm_fwd cols=8\0x", 20)),
       C::INVALID_ARGUMENT, "spec: byte 0x00 at offset 18 is not printable ASCII"},
      {"not ASCII", lookupSpec("rmsnorm_fwd cols=8\xff"), C::INVALID_ARGUMENT,
       "spec: byte 0xff at offset 18"},
      {"holder not ASCII", leaseOf(leaseRequest(kSpec, "t\xc3\xa9", 1000)), C::INVALID_ARGUMENT,
       "holder: byte 0xc3 at offset 1"},
      {"long spec", lookupSpec("rmsnorm_fwd cols=8 " + std::string(5000, ' ')), C::INVALID_ARGUMENT,
       "spec: 5019 bytes, more than the 4096 accepted"},
      {"unknown config key", lookupSpec(kSpec, "warps=4"), C::INVALID_ARGUMENT,
       "config: unknown config key 'warps'"},
      {"config out of range", lookupSpec(kSpec, "programs=0 rows=1 stream=0 threads=100 vec=8"),
       C::INVALID_ARGUMENT, "config: "},
      {"config not text", lookupSpec(kSpec, "threads"), C::INVALID_ARGUMENT, "config: "},
      {"bad back end",
       [](Fixture &f) {
         v1::KernelRequest r = request(kSpec);
         r.set_backend(static_cast<v1::Backend>(7));
         return lookupOf(f, r);
       },
       C::INVALID_ARGUMENT, "backend: unknown back end 7"},
      {"have_sha256 not hex",
       [](Fixture &f) {
         v1::KernelRequest r = request(kSpec);
         r.set_have_sha256(std::string(64, 'G'));
         return lookupOf(f, r);
       },
       C::INVALID_ARGUMENT, "have_sha256: not 64 lower-case hex digits"},
      {"have_sha256 short",
       [](Fixture &f) {
         v1::KernelRequest r = request(kSpec);
         r.set_have_sha256("abc");
         return lookupOf(f, r);
       },
       C::INVALID_ARGUMENT, "have_sha256: not 64 lower-case hex digits"},
      {"lease without holder", leaseOf(leaseRequest(kSpec, "", 1000)), C::INVALID_ARGUMENT,
       "holder: empty"},
      {"lease ttl zero", leaseOf(leaseRequest(kSpec, "t", 0)), C::INVALID_ARGUMENT,
       "ttl_ms: 0 is not in [100, 300000]"},
      {"lease ttl huge", leaseOf(leaseRequest(kSpec, "t", INT64_MAX)), C::INVALID_ARGUMENT,
       "ttl_ms: "},
      {"lease holder long", leaseOf(leaseRequest(kSpec, std::string(300, 'h'), 1000)),
       C::INVALID_ARGUMENT, "holder: longer than 256"},
      {"lease bad spec", leaseOf(leaseRequest("gemm m=0", "t", 1000)), C::INVALID_ARGUMENT,
       "spec: m must be"},
      {"publish without lease", publishOf([](auto &p) { p.clear_lease_id(); }), C::INVALID_ARGUMENT,
       "lease_id: required"},
      {"publish without winner", publishOf([](auto &p) { p.clear_winner_config(); }),
       C::INVALID_ARGUMENT, "winner_config: empty"},
      {"publish bad winner", publishOf([](auto &p) { p.set_winner_config("vec=3"); }),
       C::INVALID_ARGUMENT, "winner_config: "},
      {"publish NaN time", publishOf([](auto &p) { p.set_winner_ms(std::nan("")); }),
       C::INVALID_ARGUMENT, "winner_ms: "},
      {"publish bad timing", publishOf([](auto &p) {
         auto *t = p.add_timings();
         t->set_config("threads=256");
         t->set_median_ms(-1);
       }),
       C::INVALID_ARGUMENT, "timings[0].median_ms: "},
      {"publish timing without config", publishOf([](auto &p) { p.add_timings(); }),
       C::INVALID_ARGUMENT, "timings[0].config: empty"},
      {"publish bad kernel", publishOf([](auto &p) { p.mutable_kernel()->set_key("xyz"); }),
       C::INVALID_ARGUMENT, "kernel.key: "},
      {"publish unknown lease", publishOf([](auto &) {}), C::FAILED_PRECONDITION, "lease_id: "},
      {"list limit",
       [](Fixture &f) {
         v1::ListRequest r;
         r.set_limit(-1);
         v1::ListResponse resp;
         return f.stub->List(f.context().get(), r, &resp);
       },
       C::INVALID_ARGUMENT, "limit: -1 is not in"},
      {"oversized", lookupSpec(std::string(2 << 20, 'x')), C::RESOURCE_EXHAUSTED, ""},
  };
  for (const Malformed &m : cases) {
    grpc::Status s = m.call(f);
    EXPECT_EQ(s.error_code(), m.code) << m.name << ": " << s.error_message();
    EXPECT_EQ(s.error_message().rfind(m.prefix, 0), 0u) << m.name << ": " << s.error_message();
  }

  // Bytes that are not a request at all: truncated, or garbage.
  grpc::GenericStub generic(f.channel);
  for (std::string bytes : {std::string("\x0a\xff\xff\xff\xff\x0f", 6),
                            std::string("\x0a\x05"
                                        "ab",
                                        4),
                            std::string("\xff\xff\xff", 3), std::string(1000, '\x80')}) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    grpc::Slice slice(bytes.data(), bytes.size());
    grpc::ByteBuffer req(&slice, 1), resp;
    grpc::CompletionQueue cq;
    auto call = generic.PrepareUnaryCall(&ctx, "/tilejit.v1.TileJit/Lookup", req, &cq);
    call->StartCall();
    grpc::Status s;
    call->Finish(&resp, &s, reinterpret_cast<void *>(1));
    void *tag;
    bool ok;
    ASSERT_TRUE(cq.Next(&tag, &ok));
    EXPECT_FALSE(s.ok()) << "garbage of " << bytes.size() << " bytes accepted";
    cq.Shutdown();
    while (cq.Next(&tag, &ok)) {
    }
  }

  // Random edits of a good spec: each is answered, OK or INVALID_ARGUMENT.
  std::mt19937 rng(1234);
  const std::string good = kSpec;
  const std::string alphabet = "=- 0123456789abcdefghijklmnopqrstuvwxyz_\xff\x01";
  int answered = 0;
  for (int i = 0; i < 1000; ++i) {
    std::string text = good;
    int edits = 1 + int(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      size_t at = rng() % (text.size() + 1);
      switch (rng() % 3) {
      case 0:
        text.insert(at, 1, alphabet[rng() % alphabet.size()]);
        break;
      case 1:
        if (at < text.size())
          text.erase(at, 1);
        break;
      default:
        if (at < text.size())
          text[at] = alphabet[rng() % alphabet.size()];
      }
    }
    v1::KernelRequest r = request(text);
    if (rng() % 4 == 0)
      r.set_config(std::string(1, alphabet[rng() % alphabet.size()]) + "=" +
                   std::to_string(int(rng() % 2048) - 1024));
    grpc::Status s = lookupOf(f, r);
    EXPECT_TRUE(s.ok() || s.error_code() == StatusCode::INVALID_ARGUMENT)
        << "'" << text << "': " << s.error_code() << " " << s.error_message();
    answered += s.ok() || s.error_code() == StatusCode::INVALID_ARGUMENT;
  }
  EXPECT_EQ(answered, 1000);

  // Still serving, and nothing was compiled or written.
  v1::LookupResponse l;
  EXPECT_TRUE(f.lookup(request(kSpec), l).ok());
  EXPECT_EQ(f.healthOf(""), grpc::health::v1::HealthCheckResponse::SERVING);
  v1::StatsResponse st = f.stats();
  EXPECT_EQ(st.compiles(), 0u);
  EXPECT_GE(st.invalid_requests(), uint64_t(cases.size() - 2));
  v1::ListResponse list;
  ASSERT_TRUE(f.stub->List(f.context().get(), v1::ListRequest(), &list).ok());
  EXPECT_EQ(list.entries_size(), 0);
}

TEST(Server, DrainingFinishesCallsInFlight) {
  Fixture f;
  ASSERT_TRUE(f.server);
  // A compile in flight when the drain begins: a GEMM takes long enough to
  // be seen running.
  const std::string gemm = "gemm m=4096 n=4096 k=4096";
  v1::GetKernelResponse got;
  grpc::Status gotStatus;
  std::atomic<bool> returned{false};
  std::thread caller([&] {
    gotStatus = f.getKernel(request(gemm), got);
    returned = true;
  });
  while (f.stats().compiles_in_flight() == 0 && !returned)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_FALSE(returned) << "the compile ended before it was seen in flight";
  f.server->drain(std::chrono::milliseconds(0), std::chrono::seconds(60));
  caller.join();
  ASSERT_TRUE(gotStatus.ok()) << gotStatus.error_message();
  EXPECT_FALSE(got.kernel().cubin().empty());
  // Stopped: new calls are refused.
  v1::LookupResponse l;
  EXPECT_EQ(f.lookup(request(kSpec), l).error_code(), StatusCode::UNAVAILABLE);
}

TEST(Server, DrainingTurnsHealthOffFirst) {
  Fixture f;
  ASSERT_TRUE(f.server);
  std::thread drainer(
      [&] { f.server->drain(std::chrono::milliseconds(500), std::chrono::seconds(10)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // During the grace period health says NOT_SERVING and calls still work.
  EXPECT_EQ(f.healthOf(""), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(f.healthOf("tilejit.v1.TileJit"), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  v1::LookupResponse l;
  EXPECT_TRUE(f.lookup(request(kSpec), l).ok());
  drainer.join();
  EXPECT_EQ(f.lookup(request(kSpec), l).error_code(), StatusCode::UNAVAILABLE);
}

// The client: deadlines, retries, and the local store and compile around the
// server.

namespace {

ClientOptions clientOf(int port, std::chrono::milliseconds deadline) {
  ClientOptions o;
  o.address = "127.0.0.1:" + std::to_string(port);
  o.deadline = deadline;
  return o;
}

double msSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

/// A loopback port nobody listens on: a server's, after it stopped.
int closedPort() {
  ServerOptions o;
  o.dbPath = ":memory:";
  o.log = [](const std::string &) {};
  auto s = Server::start(std::move(o), "127.0.0.1:0");
  EXPECT_TRUE(bool(s));
  if (!s) {
    llvm::consumeError(s.takeError());
    return 1;
  }
  int port = (*s)->port();
  (*s)->drain(std::chrono::milliseconds(0), std::chrono::milliseconds(0));
  return port;
}

} // namespace

TEST(Client, KernelsComeFromTheServerAndStayInTheLocalStore) {
  Fixture f;
  ASSERT_TRUE(f.server);
  auto local = Store::open(f.dir.file("local.db"));
  ASSERT_TRUE(bool(local)) << llvm::toString(local.takeError());
  Client client(clientOf(f.server->port(), std::chrono::seconds(60)));
  KernelSpec spec = specOf("rmsnorm_bwd rows=512 cols=1024");
  TileConfig config = getTemplate(spec).defaultConfig(spec);

  KernelSource source;
  std::string why;
  auto k = fetchOrCompile(spec, config, Backend::Nvptx, local->get(), &client, &source, &why);
  ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
  EXPECT_EQ(source, KernelSource::Server) << why;
  EXPECT_EQ(k->key, kernelKey(spec, config));
  EXPECT_EQ(f.stats().compiles(), 1u);
  auto stored = (*local)->getKernel(k->key);
  ASSERT_TRUE(stored && *stored);
  EXPECT_EQ((**stored).cubin, k->cubin);

  auto again = fetchOrCompile(spec, config, Backend::Nvptx, local->get(), &client, &source);
  ASSERT_TRUE(bool(again));
  EXPECT_EQ(source, KernelSource::Store);
  EXPECT_EQ(again->cubin, k->cubin);
  EXPECT_EQ(f.stats().get_kernels(), 1u);

  auto looked = client.lookup(spec, config);
  ASSERT_TRUE(looked && *looked);
  EXPECT_EQ((**looked).binary.cubin, k->cubin);
  auto missing = client.lookup(specOf("rmsnorm_bwd rows=512 cols=1032"));
  ASSERT_TRUE(bool(missing));
  EXPECT_FALSE(*missing);
}

TEST(Client, PublishedWinnerReachesEveryClientAfter) {
  Fixture f;
  ASSERT_TRUE(f.server);
  KernelSpec spec = specOf(kSpec);
  std::string winner = otherConfig(spec);
  v1::AcquireTuningLeaseResponse lease;
  ASSERT_TRUE(f.acquire(leaseRequest(kSpec, "tuner", 60000), lease).ok());
  v1::PublishResultRequest pub;
  pub.set_spec(kSpec);
  pub.set_winner_config(winner);
  pub.set_lease_id(lease.lease_id());
  v1::PublishResultResponse resp;
  ASSERT_TRUE(f.publish(pub, resp).ok());
  Client client(clientOf(f.server->port(), std::chrono::seconds(60)));
  auto k = client.getKernel(spec);
  ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
  EXPECT_TRUE(k->tuned);
  EXPECT_EQ(k->binary.config.canonical(), winner);
  EXPECT_EQ(k->source, "compiled");
}

TEST(Client, ServerDownFallsBackToACompileWithinTheDeadline) {
  tilejit::testing::TempDir dir;
  auto local = Store::open(dir.file("local.db"));
  ASSERT_TRUE(bool(local));
  int port = closedPort();
  Client client(clientOf(port, std::chrono::milliseconds(300)));
  KernelSpec spec = specOf(kSpec);
  auto t0 = std::chrono::steady_clock::now();
  auto k = client.getKernel(spec);
  double ms = msSince(t0);
  ASSERT_FALSE(bool(k));
  std::string msg = llvm::toString(k.takeError());
  EXPECT_NE(msg.find("server 127.0.0.1:" + std::to_string(port) + ": 14 "), std::string::npos)
      << msg;
  EXPECT_LT(ms, 300 + 100) << "the client waited past its deadline";

  KernelSource source;
  std::string why;
  TileConfig config = getTemplate(spec).defaultConfig(spec);
  auto compiled =
      fetchOrCompile(spec, config, Backend::Nvptx, local->get(), &client, &source, &why);
  ASSERT_TRUE(bool(compiled)) << llvm::toString(compiled.takeError());
  EXPECT_EQ(source, KernelSource::Compiled);
  EXPECT_NE(why.find("server 127.0.0.1:"), std::string::npos) << why;
  auto stored = (*local)->getKernel(compiled->key);
  ASSERT_TRUE(stored && *stored);
}

TEST(Client, SlowServerIsLeftAtTheDeadline) {
  Fixture f;
  ASSERT_TRUE(f.server);
  // A GEMM compiles for far longer than 20 ms.
  Client client(clientOf(f.server->port(), std::chrono::milliseconds(20)));
  auto t0 = std::chrono::steady_clock::now();
  auto k = client.getKernel(specOf("gemm m=2048 n=2048 k=2048"));
  double ms = msSince(t0);
  ASSERT_FALSE(bool(k));
  std::string msg = llvm::toString(k.takeError());
  EXPECT_NE(msg.find(": 4 "), std::string::npos) << msg; // DEADLINE_EXCEEDED
  EXPECT_LT(ms, 20 + 100);
}

TEST(Client, SettingsFromTheEnvironment) {
  auto with = [](std::vector<std::pair<const char *, const char *>> vars) {
    for (const char *name :
         {"TILEJIT_SERVER", "TILEJIT_TOKEN", "TILEJIT_TOKEN_FILE", "TILEJIT_SERVER_DEADLINE_MS"})
      ::unsetenv(name);
    for (auto [name, value] : vars)
      ::setenv(name, value, 1);
    auto o = ClientOptions::fromEnvironment();
    for (auto [name, value] : vars)
      ::unsetenv(name);
    return o;
  };
  auto none = with({});
  ASSERT_TRUE(bool(none));
  EXPECT_FALSE(*none);
  auto some = with({{"TILEJIT_SERVER", "cache.internal:7070"},
                    {"TILEJIT_TOKEN", "t0k"},
                    {"TILEJIT_SERVER_DEADLINE_MS", "250"}});
  ASSERT_TRUE(some && *some);
  EXPECT_EQ((**some).address, "cache.internal:7070");
  EXPECT_EQ((**some).token, "t0k");
  EXPECT_EQ((**some).deadline, std::chrono::milliseconds(250));
  auto bad = with({{"TILEJIT_SERVER", "cache.internal"}});
  ASSERT_FALSE(bool(bad));
  EXPECT_NE(llvm::toString(bad.takeError()).find("TILEJIT_SERVER='cache.internal'"),
            std::string::npos);
  auto badDeadline = with({{"TILEJIT_SERVER", "h:1"}, {"TILEJIT_SERVER_DEADLINE_MS", "soon"}});
  ASSERT_FALSE(bool(badDeadline));
  EXPECT_NE(llvm::toString(badDeadline.takeError()).find("TILEJIT_SERVER_DEADLINE_MS='soon'"),
            std::string::npos);
  auto noFile = with({{"TILEJIT_SERVER", "h:1"}, {"TILEJIT_TOKEN_FILE", "/nonexistent/t"}});
  ASSERT_FALSE(bool(noFile));
  EXPECT_NE(llvm::toString(noFile.takeError()).find("TILEJIT_TOKEN_FILE"), std::string::npos);
}

TEST(Server, MetricsInPrometheusText) {
  ServerOptions o;
  o.metricsAddress = "127.0.0.1:0";
  Fixture f(o);
  ASSERT_TRUE(f.server);
  ASSERT_GT(f.server->metricsPort(), 0);
  v1::GetKernelResponse got;
  ASSERT_TRUE(f.getKernel(request(kSpec), got).ok());
  v1::LookupResponse l;
  ASSERT_TRUE(f.lookup(request(""), l).error_code() == StatusCode::INVALID_ARGUMENT);
  httplib::Client http("127.0.0.1", f.server->metricsPort());
  auto res = http.Get("/metrics");
  ASSERT_TRUE(res) << "no answer from /metrics";
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type").rfind("text/plain; version=0.0.4", 0), 0u);
  const std::string &body = res->body;
  for (const char *line : {"# TYPE tilejit_compiles_total counter\ntilejit_compiles_total 1\n",
                           "\ntilejit_get_kernel_total 1\n", "\ntilejit_lookups_total 1\n",
                           "\ntilejit_invalid_requests_total 1\n",
                           "# TYPE tilejit_active_leases gauge\ntilejit_active_leases 0\n",
                           "\ntilejit_uptime_seconds "})
    EXPECT_NE(body.find(line), std::string::npos) << line << "\nnot in:\n" << body;
  EXPECT_EQ(http.Get("/other")->status, 404);
  // Stopped with the server.
  f.server->drain(std::chrono::milliseconds(0), std::chrono::seconds(1));
  EXPECT_FALSE(http.Get("/metrics"));
}

TEST(Client, ServerAndLocalProcessShareOneStoreFile) {
  Fixture f;
  ASSERT_TRUE(f.server);
  // A process on the server's host opens the server's own file.
  auto local = Store::open(f.dir.file("t.db"));
  ASSERT_TRUE(bool(local)) << llvm::toString(local.takeError());
  KernelSpec spec = specOf("rmsnorm_fwd rows=8 cols=3000");
  TileConfig config = getTemplate(spec).defaultConfig(spec);
  // Compiled here (no server asked), then found by the server.
  KernelSource source;
  auto here = fetchOrCompile(spec, config, Backend::Nvptx, local->get(), nullptr, &source);
  ASSERT_TRUE(bool(here)) << llvm::toString(here.takeError());
  EXPECT_EQ(source, KernelSource::Compiled);
  v1::LookupResponse l;
  ASSERT_TRUE(f.lookup(request(spec.canonical()), l).ok());
  ASSERT_TRUE(l.found());
  EXPECT_EQ(l.kernel().cubin(), std::string(here->cubin.begin(), here->cubin.end()));
  // Compiled by the server, then found here without asking it.
  KernelSpec other = specOf("rmsnorm_fwd rows=8 cols=3008");
  v1::GetKernelResponse got;
  ASSERT_TRUE(f.getKernel(request(other.canonical()), got).ok());
  auto there = fetchOrCompile(other, getTemplate(other).defaultConfig(other), Backend::Nvptx,
                              local->get(), nullptr, &source);
  ASSERT_TRUE(bool(there)) << llvm::toString(there.takeError());
  EXPECT_EQ(source, KernelSource::Store);
  EXPECT_EQ(std::string(there->cubin.begin(), there->cubin.end()), got.kernel().cubin());
  EXPECT_EQ(f.stats().compiles(), 1u);
}

TEST(Client, AWinnerAnotherProcessWritesIsServedWithinAMillisecond) {
  // The server keeps the winners it resolved in memory; one written into its
  // file by another connection (another process's) is served once a
  // millisecond has passed, one published through the server at once
  // (PublishedWinnerReachesEveryClientAfter).
  Fixture f;
  ASSERT_TRUE(f.server);
  KernelSpec spec = specOf("rmsnorm_fwd rows=8 cols=3000");
  const KernelTemplate &t = getTemplate(spec);
  v1::GetKernelResponse first;
  ASSERT_TRUE(f.getKernel(request(spec.canonical()), first).ok());
  EXPECT_FALSE(first.tuned());
  EXPECT_EQ(first.kernel().config(), t.defaultConfig(spec).canonical());
  // Kept in memory now (the compile's commit is behind it).
  v1::LookupResponse kept;
  ASSERT_TRUE(f.lookup(request(spec.canonical()), kept).ok());
  ASSERT_TRUE(kept.found());
  EXPECT_FALSE(kept.tuned());
  std::string other;
  for (const TileConfig &c : t.configSpace(spec))
    if (c != t.defaultConfig(spec)) {
      other = c.canonical();
      break;
    }
  ASSERT_FALSE(other.empty());
  auto local = Store::open(f.dir.file("t.db"));
  ASSERT_TRUE(bool(local)) << llvm::toString(local.takeError());
  Winner w;
  w.tuneKey = tuneKey(spec);
  w.config = other;
  w.medianMs = 1;
  if (llvm::Error e = (*local)->setWinner(w))
    FAIL() << llvm::toString(std::move(e));
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  v1::GetKernelResponse second;
  ASSERT_TRUE(f.getKernel(request(spec.canonical()), second).ok());
  EXPECT_TRUE(second.tuned());
  EXPECT_EQ(second.kernel().config(), other);
  v1::LookupResponse l;
  ASSERT_TRUE(f.lookup(request(spec.canonical()), l).ok());
  EXPECT_TRUE(l.tuned());
  EXPECT_EQ(l.kernel().config(), other);
}

TEST(Server, SpecsOfOneTuningKeyKeepTheirOwnDefaults) {
  // A tuning key covers specs whose launch sizes differ (rows, m, lengths
  // in buckets), and the template's default reads those sizes: the winners
  // the server keeps in memory must not hand one spec's default to another.
  std::optional<std::pair<KernelSpec, KernelSpec>> pair;
  for (const char *form : {"rmsnorm_fwd rows=%d cols=3000", "gemm m=%d n=4096 k=4096"}) {
    std::map<std::string, KernelSpec> seen;
    for (int m = 1; m <= 100000 && !pair; m = m < 64 ? m + 1 : m + m / 16) {
      char text[160];
      std::snprintf(text, sizeof text, form, m);
      KernelSpec spec = specOf(text);
      auto [it, fresh] = seen.emplace(tuneKey(spec), spec);
      const KernelTemplate &t = getTemplate(spec);
      if (!fresh && t.defaultConfig(it->second) != t.defaultConfig(spec))
        pair = std::make_pair(it->second, spec);
    }
    if (pair)
      break;
  }
  ASSERT_TRUE(pair) << "no two specs of one tuning key with different defaults";
  const KernelTemplate &t = getTemplate(pair->first);
  Fixture f;
  ASSERT_TRUE(f.server);
  for (const KernelSpec &spec : {pair->first, pair->second, pair->first}) {
    SCOPED_TRACE(spec.canonical());
    v1::GetKernelResponse got;
    ASSERT_TRUE(f.getKernel(request(spec.canonical()), got).ok());
    EXPECT_FALSE(got.tuned());
    EXPECT_EQ(got.kernel().config(), t.defaultConfig(spec).canonical());
    v1::LookupResponse l;
    ASSERT_TRUE(f.lookup(request(spec.canonical()), l).ok());
    ASSERT_TRUE(l.found());
    EXPECT_EQ(l.kernel().config(), t.defaultConfig(spec).canonical());
  }
}

TEST(Client, AStoreThatCannotBeReadCostsNoKernel) {
  tilejit::testing::TempDir dir;
  auto local = Store::open(dir.file("t.db"));
  ASSERT_TRUE(bool(local)) << llvm::toString(local.takeError());
  KernelSpec spec = specOf("rmsnorm_fwd rows=8 cols=2048");
  TileConfig config = getTemplate(spec).defaultConfig(spec);
  KernelSource source;
  auto first = fetchOrCompile(spec, config, Backend::Nvptx, local->get(), nullptr, &source);
  ASSERT_TRUE(bool(first)) << llvm::toString(first.takeError());
  // Another process breaks the file under the open store: its kernel table
  // is gone, so every read of it fails.
  sqlite3 *other = nullptr;
  ASSERT_EQ(sqlite3_open(dir.file("t.db").c_str(), &other), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other, "DROP TABLE kernels", nullptr, nullptr, nullptr), SQLITE_OK)
      << sqlite3_errmsg(other);
  sqlite3_close(other);
  std::string remoteWhy, storeWhy;
  auto again = fetchOrCompile(spec, config, Backend::Nvptx, local->get(), nullptr, &source,
                              &remoteWhy, &storeWhy);
  ASSERT_TRUE(bool(again)) << llvm::toString(again.takeError());
  EXPECT_EQ(source, KernelSource::Compiled);
  EXPECT_EQ(again->key, first->key);
  EXPECT_FALSE(again->cubin.empty());
  EXPECT_NE(storeWhy.find("the kernel store " + dir.file("t.db") + " could not be read"),
            std::string::npos)
      << storeWhy;
  EXPECT_TRUE(remoteWhy.empty());
}

namespace {

/// A client of `f`'s server with `token`.
Client clientOf(Fixture &f, const std::string &token = "") {
  ClientOptions o;
  o.address = "127.0.0.1:" + std::to_string(f.server->port());
  o.token = token;
  o.deadline = std::chrono::seconds(120);
  o.downFor = std::chrono::milliseconds(0);
  return Client(o);
}

/// Publishes `winner` of kSpec with its compiled kernel on `f`'s server.
void publishWinner(Fixture &f, const TileConfig &winner, const std::string &token = "",
                   const std::string &reason = "",
                   const std::vector<std::pair<TileConfig, double>> &timings = {}) {
  KernelSpec spec = specOf(kSpec);
  auto compiled = compileKernel(spec, winner);
  ASSERT_TRUE(bool(compiled)) << llvm::toString(compiled.takeError());
  v1::AcquireTuningLeaseResponse lease;
  ASSERT_TRUE(f.acquire(leaseRequest(kSpec, "tuner", 60000), lease).ok());
  v1::PublishResultRequest pub;
  pub.set_spec(kSpec);
  pub.set_winner_config(winner.canonical());
  pub.set_winner_ms(0.5);
  pub.set_reason(reason);
  pub.set_lease_id(lease.lease_id());
  for (const auto &[cfg, ms] : timings) {
    v1::Timing *t = pub.add_timings();
    t->set_config(cfg.canonical());
    t->set_median_ms(ms);
    t->set_reps(30);
    t->set_gpu("Test GPU");
  }
  wire::kernelTo(wire::storedFrom(*compiled, "", ""), Backend::Nvptx, *pub.mutable_kernel());
  v1::PublishResultResponse resp;
  auto s = f.publish(pub, resp, token);
  ASSERT_TRUE(s.ok()) << s.error_message();
}

/// What a server's List holds, as text, to compare before and after.
std::string listing(Fixture &f) {
  v1::ListResponse resp;
  EXPECT_TRUE(f.stub->List(f.context().get(), v1::ListRequest(), &resp).ok());
  std::string out;
  for (const auto &e : resp.entries())
    out += e.kind() + " " + e.key() + " " + e.config() + "\n";
  return out;
}

std::string errorText(llvm::Error e) { return e ? llvm::toString(std::move(e)) : ""; }

} // namespace

TEST(Server, LookupLeavesOutTheCubinTheCallerHolds) {
  Fixture f;
  ASSERT_TRUE(f.server);
  KernelSpec spec = specOf(kSpec);
  v1::GetKernelResponse got;
  ASSERT_TRUE(f.getKernel(request(kSpec), got).ok());
  // The caller's hash is the stored kernel's: its identity without bytes.
  v1::KernelRequest held = request(kSpec);
  held.set_have_sha256(got.kernel().sha256());
  v1::LookupResponse small;
  ASSERT_TRUE(f.lookup(held, small).ok());
  ASSERT_TRUE(small.found());
  EXPECT_TRUE(small.cubin_omitted());
  EXPECT_TRUE(small.kernel().cubin().empty());
  EXPECT_TRUE(small.kernel().entries_json().empty());
  EXPECT_EQ(small.kernel().sha256(), got.kernel().sha256());
  EXPECT_EQ(small.kernel().key(), got.kernel().key());
  EXPECT_EQ(small.kernel().config(), got.kernel().config());
  // Another hash: the whole kernel.
  held.set_have_sha256(std::string(64, '0'));
  v1::LookupResponse full;
  ASSERT_TRUE(f.lookup(held, full).ok());
  EXPECT_FALSE(full.cubin_omitted());
  EXPECT_EQ(full.kernel().cubin(), got.kernel().cubin());

  // Through the client: the held kernel comes back marked, with no code;
  // once a winner is published, the same question gets the winner whole.
  Client c = clientOf(f);
  auto same = c.lookup(spec, {}, Backend::Nvptx, got.kernel().sha256());
  ASSERT_TRUE(bool(same)) << llvm::toString(same.takeError());
  ASSERT_TRUE(same->has_value());
  EXPECT_TRUE((*same)->codeOmitted);
  EXPECT_TRUE((*same)->binary.cubin.empty());
  EXPECT_EQ((*same)->binary.key, got.kernel().key());
  TileConfig winner = *TileConfig::parse(otherConfig(spec));
  publishWinner(f, winner);
  auto changed = c.lookup(spec, {}, Backend::Nvptx, got.kernel().sha256());
  ASSERT_TRUE(bool(changed)) << llvm::toString(changed.takeError());
  ASSERT_TRUE(changed->has_value());
  EXPECT_FALSE((*changed)->codeOmitted);
  EXPECT_EQ((*changed)->binary.config, winner);
  EXPECT_FALSE((*changed)->binary.cubin.empty());
  EXPECT_NE((*changed)->sha256, got.kernel().sha256());
}

/// `a`'s store, exported through the RPC after `winner` is published there.
llvm::Expected<std::string> exportWithWinner(Fixture &a, const TileConfig &winner) {
  publishWinner(a, winner);
  return clientOf(a).exportStore();
}

// Export from one server, import into another: a client of the second gets
// the winner's kernel from its store without a compile.
TEST(Server, ExportFromOneServerImportsIntoAnother) {
  Fixture a;
  ASSERT_TRUE(a.server);
  KernelSpec spec = specOf(kSpec);
  TileConfig winner = *TileConfig::parse(otherConfig(spec));
  auto image = exportWithWinner(a, winner);
  ASSERT_TRUE(bool(image)) << llvm::toString(image.takeError());
  EXPECT_EQ(image->substr(0, 16), std::string("SQLite format 3\0", 16));
  EXPECT_EQ(a.stats().exports(), 1u);

  ServerOptions o;
  o.tokens = {{"writer", false}, {"reader", true}};
  Fixture b(o);
  ASSERT_TRUE(b.server);
  std::string empty = listing(b);
  // A read-only token reads but cannot import; no token is not a writer.
  Client reader = clientOf(b, "reader");
  std::string refused = errorText(reader.importStore(*image).takeError());
  EXPECT_NE(refused.find(std::to_string(int(StatusCode::PERMISSION_DENIED)) +
                         " the bearer token is read-only: Import writes"),
            std::string::npos)
      << refused;
  Client anonymous = clientOf(b);
  refused = errorText(anonymous.importStore(*image).takeError());
  EXPECT_NE(refused.find(std::to_string(int(StatusCode::UNAUTHENTICATED)) + " writes need a "),
            std::string::npos)
      << refused;
  EXPECT_EQ(listing(b), empty);
  EXPECT_EQ(b.stats().imports(), 0u);

  Client writer = clientOf(b, "writer");
  auto report = writer.importStore(*image);
  ASSERT_TRUE(bool(report)) << llvm::toString(report.takeError());
  EXPECT_GT(report->rows, 0);
  EXPECT_EQ(report->kernelsLeft, 0) << report->firstLeft;
  EXPECT_EQ(b.stats().imports(), 1u);
  EXPECT_EQ(listing(b), listing(a));

  auto got = reader.getKernel(spec);
  ASSERT_TRUE(bool(got)) << llvm::toString(got.takeError());
  EXPECT_EQ(got->source, "store");
  EXPECT_TRUE(got->tuned);
  EXPECT_EQ(got->binary.config.canonical(), winner.canonical());
  EXPECT_EQ(got->binary.key, kernelKey(spec, winner));
  EXPECT_EQ(b.stats().compiles(), 0u);
}

// A store larger than one chunk travels both ways in chunks, each checked
// against the size and digest the first declared; an import whose chunks
// do not add up to what it declared writes nothing.
TEST(Server, ExportAndImportTravelInChunks) {
  ServerOptions small;
  small.chunkBytes = 4096;
  Fixture a(small);
  ASSERT_TRUE(a.server);
  KernelSpec spec = specOf(kSpec);
  TileConfig winner = *TileConfig::parse(otherConfig(spec));
  publishWinner(a, winner);
  v1::GetKernelResponse other;
  ASSERT_TRUE(a.getKernel(request("rmsnorm_fwd rows=8 cols=1024"), other).ok());

  // Export: several chunks of at most 4 KiB, the first declaring the whole.
  auto ctx = a.context();
  auto reader = a.stub->Export(ctx.get(), v1::ExportRequest());
  std::vector<v1::ExportChunk> chunks;
  v1::ExportChunk c;
  while (reader->Read(&c))
    chunks.push_back(c);
  ASSERT_TRUE(reader->Finish().ok());
  ASSERT_GT(chunks.size(), 2u);
  std::string joined;
  for (size_t i = 0; i < chunks.size(); ++i) {
    EXPECT_LE(chunks[i].data().size(), 4096u);
    if (i > 0) {
      EXPECT_EQ(chunks[i].total_bytes(), 0);
      EXPECT_EQ(chunks[i].sha256(), "");
    }
    joined += chunks[i].data();
  }
  EXPECT_EQ(chunks[0].total_bytes(), int64_t(joined.size()));
  EXPECT_EQ(chunks[0].sha256(), sha256Hex(joined));
  auto image = clientOf(a).exportStore();
  ASSERT_TRUE(bool(image)) << llvm::toString(image.takeError());
  EXPECT_EQ(image->size(), joined.size());

  ServerOptions capped;
  capped.tokens = {{"writer", false}};
  capped.maxImportBytes = int64_t(joined.size()) + 10;
  Fixture b(capped);
  ASSERT_TRUE(b.server);
  std::string empty = listing(b);
  auto importRaw = [&](const std::string &bytes, size_t chunk, int64_t total,
                       const std::string &digest, int64_t totalAgainAt = -1) {
    auto ictx = b.context("writer");
    v1::ImportResponse resp;
    auto writer = b.stub->Import(ictx.get(), &resp);
    size_t at = 0;
    for (int64_t i = 0; at < bytes.size(); ++i) {
      v1::ImportChunk ic;
      if (i == 0 || i == totalAgainAt) {
        ic.set_total_bytes(total);
        ic.set_sha256(digest);
      }
      ic.set_data(bytes.substr(at, chunk));
      at += chunk;
      if (!writer->Write(ic))
        break;
    }
    writer->WritesDone();
    return writer->Finish();
  };
  auto refused = [&](grpc::Status s, const std::string &field) {
    EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_EQ(s.error_message().rfind(field + ": ", 0), 0u) << s.error_message();
    EXPECT_EQ(listing(b), empty);
  };
  std::string digest = sha256Hex(joined);
  refused(importRaw(joined.substr(0, joined.size() - 100), 1000, int64_t(joined.size()), digest),
          "data");
  refused(importRaw(joined, 1000, int64_t(joined.size()) - 1, digest), "data");
  refused(importRaw(joined, 1000, 0, digest), "total_bytes");
  refused(importRaw(joined + std::string(20, 'x'), 1000, int64_t(joined.size()) + 20,
                    sha256Hex(joined + std::string(20, 'x'))),
          "total_bytes"); // over this server's cap
  refused(importRaw(joined, 1000, int64_t(joined.size()), digest, 3), "total_bytes");
  refused(importRaw(joined, 1000, int64_t(joined.size()), "abc"), "sha256");
  std::string changed = joined;
  changed[joined.size() / 2] ^= 1;
  refused(importRaw(changed, 1000, int64_t(joined.size()), digest), "sha256");
  {
    auto ictx = b.context("writer");
    v1::ImportResponse resp;
    auto writer = b.stub->Import(ictx.get(), &resp);
    writer->WritesDone();
    refused(writer->Finish(), "total_bytes");
  }
  EXPECT_EQ(b.stats().imports(), 0u);

  // The client sends it in chunks of 1000 bytes: all of it arrives.
  ClientOptions o;
  o.address = "127.0.0.1:" + std::to_string(b.server->port());
  o.token = "writer";
  o.chunkBytes = 1000;
  o.deadline = std::chrono::seconds(120);
  Client toB(o);
  auto report = toB.importStore(*image);
  ASSERT_TRUE(bool(report)) << llvm::toString(report.takeError());
  EXPECT_GT(report->rows, 0);
  EXPECT_EQ(listing(b), listing(a));
  EXPECT_EQ(b.stats().imports(), 1u);
  bool logged = false;
  {
    std::lock_guard<std::mutex> lock(b.logMu);
    for (const std::string &line : b.log)
      logged |= line.find(" rows written from " + std::to_string(image->size()) + " bytes in " +
                          std::to_string((image->size() + 999) / 1000) + " chunk(s)") !=
                std::string::npos;
  }
  EXPECT_TRUE(logged);
}

// The framing both sides share (the client reads Export's chunks as the
// server reads Import's): each chunk against what the first declared.
TEST(Wire, ImageChunksRoundTripAndEachIsChecked) {
  std::string image(10000, 'x');
  for (size_t i = 0; i < image.size(); ++i)
    image[i] = char('a' + i % 23);
  std::string digest = sha256Hex(image);
  for (size_t chunk : {size_t(1000), size_t(3333), size_t(20000), size_t(0)}) {
    std::vector<v1::ImportChunk> sent;
    ASSERT_TRUE(wire::writeImageChunks<v1::ImportChunk>(image, digest, chunk,
                                                        [&](const v1::ImportChunk &c) {
                                                          sent.push_back(c);
                                                          return true;
                                                        }));
    wire::ImageAssembler got(int64_t(image.size()));
    for (const v1::ImportChunk &c : sent)
      ASSERT_FALSE(got.add(c.total_bytes(), c.sha256(), c.data()).has_value()) << chunk;
    EXPECT_FALSE(got.finish().has_value());
    EXPECT_EQ(got.image(), image);
    EXPECT_EQ(size_t(got.chunks()), chunk == 0 ? image.size() : (image.size() + chunk - 1) / chunk);
  }
  // A closed stream stops the writing at the chunk it refused.
  int writes = 0;
  EXPECT_FALSE(wire::writeImageChunks<v1::ExportChunk>(
      image, digest, 1000, [&](const v1::ExportChunk &) { return ++writes < 3; }));
  EXPECT_EQ(writes, 3);

  auto problem = [&](std::vector<std::tuple<int64_t, std::string, std::string>> chunks,
                     int64_t max = 100) -> std::string {
    wire::ImageAssembler got(max);
    for (auto &[total, sha, data] : chunks)
      if (auto bad = got.add(total, sha, data))
        return bad->field + ": " + bad->what;
    if (auto bad = got.finish())
      return bad->field + ": " + bad->what;
    return "";
  };
  std::string d10 = sha256Hex("0123456789");
  EXPECT_EQ(problem({{10, d10, "01234"}, {0, "", "56789"}}), "");
  EXPECT_EQ(problem({}), "total_bytes: no chunk: the bytes of a store file are required");
  EXPECT_EQ(problem({{0, d10, ""}}), "total_bytes: 0 is not in [1, 100]");
  EXPECT_EQ(problem({{101, d10, ""}}), "total_bytes: 101 is not in [1, 100]");
  EXPECT_EQ(problem({{10, "ABC", ""}}), "sha256: not 64 lower-case hex digits");
  EXPECT_EQ(problem({{10, d10, "01234"}, {10, d10, "56789"}}),
            "total_bytes: given again in chunk 1 (the first chunk only)");
  EXPECT_EQ(problem({{10, d10, "01234"}, {0, "", ""}}),
            "data: empty in chunk 1 (only the first chunk may be empty)");
  EXPECT_EQ(problem({{10, d10, "01234"}, {0, "", "567890"}}),
            "data: more than the 10 bytes total_bytes declared");
  EXPECT_EQ(problem({{10, d10, "01234"}}),
            "data: 5 bytes arrived, not the 10 total_bytes declared");
  EXPECT_EQ(problem({{10, d10, "01234"}, {0, "", "56788"}}),
            "sha256: the bytes that arrived do not have the declared digest");
}

// Each import buffers its image: one more than the server's cap is refused
// at once, and the one in progress still completes.
TEST(Server, ImportsBeyondTheCapAreRefused) {
  Fixture a;
  ASSERT_TRUE(a.server);
  publishWinner(a, *TileConfig::parse(otherConfig(specOf(kSpec))));
  auto image = clientOf(a).exportStore();
  ASSERT_TRUE(bool(image)) << llvm::toString(image.takeError());
  ASSERT_GT(image->size(), 2000u);

  ServerOptions capped;
  capped.tokens = {{"writer", false}};
  capped.maxConcurrentImports = 1;
  Fixture b(capped);
  ASSERT_TRUE(b.server);
  std::string empty = listing(b);
  // The first import: its first chunk sent, the rest held back.
  auto first = b.context("writer");
  v1::ImportResponse firstResp;
  auto writer = b.stub->Import(first.get(), &firstResp);
  v1::ImportChunk head;
  head.set_total_bytes(int64_t(image->size()));
  head.set_sha256(sha256Hex(*image));
  head.set_data(image->substr(0, 1000));
  ASSERT_TRUE(writer->Write(head));
  // Once its handler holds the slot, a second, whole import is refused.
  for (int i = 0; i < 500 && b.server->importsInFlight() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(b.server->importsInFlight(), 1);
  auto ctx = b.context("writer");
  v1::ImportResponse resp;
  auto w = b.stub->Import(ctx.get(), &resp);
  v1::ImportChunk all = head;
  all.set_data(*image);
  w->Write(all);
  w->WritesDone();
  grpc::Status second = w->Finish();
  EXPECT_EQ(second.error_code(), StatusCode::RESOURCE_EXHAUSTED) << second.error_message();
  EXPECT_NE(second.error_message().find("1 imports are in progress (this server takes 1 at once)"),
            std::string::npos)
      << second.error_message();
  // The first completes.
  v1::ImportChunk rest;
  rest.set_data(image->substr(1000));
  ASSERT_TRUE(writer->Write(rest));
  writer->WritesDone();
  grpc::Status done = writer->Finish();
  EXPECT_TRUE(done.ok()) << done.error_message();
  EXPECT_EQ(listing(b), listing(a));
  // And the slot is free again.
  Client c = clientOf(b, "writer");
  auto again = c.importStore(*image);
  EXPECT_TRUE(bool(again)) << llvm::toString(again.takeError());
}

// What `tilejit explain --server` and `cache ls --server` read: the
// tuning of one key (winner, timings) and the store's entries and leases.
TEST(Server, ExplainAndListThroughTheClient) {
  Fixture f;
  ASSERT_TRUE(f.server);
  KernelSpec spec = specOf(kSpec);
  TileConfig def = getTemplate(spec).defaultConfig(spec);
  TileConfig winner = *TileConfig::parse(otherConfig(spec));
  Client c = clientOf(f);
  auto before = c.explain(spec);
  ASSERT_TRUE(bool(before)) << llvm::toString(before.takeError());
  EXPECT_EQ(before->tuneKey, tuneKey(spec));
  EXPECT_EQ(before->toolchain, toolchainId(spec));
  EXPECT_FALSE(before->tuned);
  EXPECT_FALSE(before->winner.has_value());
  EXPECT_EQ(before->config, def);
  EXPECT_EQ(before->defaultConfig, def);
  EXPECT_FALSE(before->stored);
  EXPECT_TRUE(before->timings.empty());

  publishWinner(f, winner, "", "fastest median", {{winner, 0.5}, {def, 0.7}});
  if (::testing::Test::HasFatalFailure())
    return;

  auto after = c.explain(spec);
  ASSERT_TRUE(bool(after)) << llvm::toString(after.takeError());
  EXPECT_TRUE(after->tuned);
  EXPECT_EQ(after->config, winner);
  EXPECT_EQ(after->defaultConfig, def);
  EXPECT_TRUE(after->stored);
  ASSERT_TRUE(after->winner.has_value());
  EXPECT_DOUBLE_EQ(after->winner->medianMs, 0.5);
  EXPECT_EQ(after->winner->reason, "fastest median");
  EXPECT_EQ(after->winner->kernelKey, kernelKey(spec, winner));
  ASSERT_EQ(after->timings.size(), 2u);
  for (const Timing &t : after->timings) {
    EXPECT_EQ(t.gpu, "Test GPU");
    EXPECT_DOUBLE_EQ(t.medianMs, t.config == winner.canonical() ? 0.5 : 0.7);
  }
  v1::ExplainResponse refused;
  grpc::Status bad =
      f.stub->Explain(f.context().get(), request("rmsnorm_fwd rows=8 cols=0"), &refused);
  EXPECT_EQ(bad.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(bad.error_message().rfind("spec: ", 0), 0u) << bad.error_message();

  v1::AcquireTuningLeaseResponse other;
  ASSERT_TRUE(
      f.acquire(leaseRequest("rmsnorm_fwd rows=8 cols=1024", "tuner-x", 60000), other).ok());
  auto listed = c.list();
  ASSERT_TRUE(bool(listed)) << llvm::toString(listed.takeError());
  EXPECT_FALSE(listed->truncated);
  ASSERT_EQ(listed->entries.size(), 2u);
  EXPECT_EQ(listed->entries[0].kind, "kernel");
  EXPECT_EQ(listed->entries[0].key, kernelKey(spec, winner));
  EXPECT_EQ(listed->entries[1].kind, "winner");
  EXPECT_EQ(listed->entries[1].config, winner.canonical());
  ASSERT_EQ(listed->leases.size(), 1u);
  EXPECT_EQ(listed->leases[0].holder, "tuner-x");
  EXPECT_GT(listed->leases[0].expiresIn.count(), 0);
  auto one = c.list(1);
  ASSERT_TRUE(bool(one));
  EXPECT_EQ(one->entries.size(), 1u);
  EXPECT_TRUE(one->truncated);
}

// One bad row refuses the whole import, naming the row and the field, and
// the server's store is left as it was.
TEST(Server, ABadEntryRefusesTheWholeImport) {
  Fixture a;
  ASSERT_TRUE(a.server);
  KernelSpec spec = specOf(kSpec);
  TileConfig winner = *TileConfig::parse(otherConfig(spec));
  auto image = exportWithWinner(a, winner);
  ASSERT_TRUE(bool(image)) << llvm::toString(image.takeError());

  Fixture b;
  ASSERT_TRUE(b.server);
  v1::GetKernelResponse own;
  ASSERT_TRUE(b.getKernel(request("rmsnorm_fwd rows=8 cols=1024"), own).ok());
  std::string before = listing(b);
  Client toB = clientOf(b);
  auto expectRefused = [&](const std::string &bytes, const std::string &needle) {
    std::string msg = errorText(toB.importStore(bytes).takeError());
    EXPECT_NE(msg.find(std::to_string(int(StatusCode::INVALID_ARGUMENT)) + " "), std::string::npos)
        << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    EXPECT_NE(msg.find("nothing imported"), std::string::npos) << msg;
    EXPECT_EQ(listing(b), before);
  };

  // One byte of the winner's cubin changed: its hash no longer matches.
  auto compiled = compileKernel(spec, winner);
  ASSERT_TRUE(bool(compiled));
  // A piece of it found once in the copy (the cubin repeats itself, and
  // may span pages).
  size_t at = std::string::npos;
  for (size_t from = 0; from + 64 <= compiled->cubin.size() && at == std::string::npos;
       from += 64) {
    std::string piece(compiled->cubin.begin() + from, compiled->cubin.begin() + from + 64);
    size_t first = image->find(piece);
    if (first != std::string::npos && first == image->rfind(piece))
      at = first;
  }
  ASSERT_NE(at, std::string::npos);
  std::string corrupt = *image;
  corrupt[at + 7] ^= 0x5a;
  expectRefused(corrupt, "kernel " + compiled->key + " fails its SHA-256 check");

  // Entries that a store holds well but this server would never write:
  // each names its table, row and field.
  auto badStore = [&](const std::string &name, auto fill) {
    auto s = Store::open(a.dir.file(name));
    EXPECT_TRUE(bool(s));
    fill(**s);
    auto bytes = (*s)->exportImage();
    EXPECT_TRUE(bool(bytes));
    return *bytes;
  };
  std::string badSpec = badStore("spec.db", [&](Store &s) {
    StoredKernel k = wire::storedFrom(*compiled, "", toolchainId(spec));
    k.spec = "rmsnorm_fwd rows=4096 cols=0";
    EXPECT_EQ(errorText(s.putKernel(k)), "");
  });
  expectRefused(badSpec, "kernels row 1: kernel " + compiled->key + ": spec: ");
  std::string badConfig = badStore("config.db", [&](Store &s) {
    Winner w;
    w.tuneKey = tuneKey(spec);
    w.config = "rows=1 threads=7 vec=8";
    w.medianMs = 1;
    EXPECT_EQ(errorText(s.setWinner(w)), "");
  });
  expectRefused(badConfig, "winners row 1: config: ");
  expectRefused("not a store", "store is 11 bytes, too short for a SQLite database");
  EXPECT_EQ(b.stats().imports(), 0u);
  EXPECT_EQ(b.stats().invalid_requests(), 4u);

  // A good kernel of another build identity is no bad entry: it is left
  // out, and said so.
  std::string foreign = badStore("foreign.db", [&](Store &s) {
    StoredKernel k = wire::storedFrom(*compiled, "", toolchainId(spec));
    k.key = sha256Hex(std::string("another build"));
    EXPECT_EQ(errorText(s.putKernel(k)), "");
  });
  auto report = toB.importStore(foreign);
  ASSERT_TRUE(bool(report)) << llvm::toString(report.takeError());
  EXPECT_EQ(report->rows, 0);
  EXPECT_EQ(report->kernelsLeft, 1);
  EXPECT_NE(report->firstLeft.find("built under another build identity"), std::string::npos)
      << report->firstLeft;
  EXPECT_EQ(listing(b), before);
}

// /status beside /metrics: the store, its winners and the leases held now,
// every piece of text from a client escaped.
TEST(Server, StatusPageListsWinnersAndLeasesEscaped) {
  EXPECT_EQ(htmlEscaped("<a href=\"x\" title='y'>&</a>"),
            "&lt;a href=&quot;x&quot; title=&#39;y&#39;&gt;&amp;&lt;/a&gt;");
  ServerOptions o;
  o.metricsAddress = "127.0.0.1:0";
  Fixture f(o);
  ASSERT_TRUE(f.server);
  KernelSpec spec = specOf(kSpec);
  TileConfig winner = *TileConfig::parse(otherConfig(spec));
  publishWinner(f, winner, "", "fastest <b>by far</b>");
  const std::string holder = "<script>alert('tuner')</script>";
  const std::string leased = "rmsnorm_fwd rows=8 cols=1024";
  v1::AcquireTuningLeaseResponse lease;
  ASSERT_TRUE(f.acquire(leaseRequest(leased, holder, 60000), lease).ok());
  ASSERT_TRUE(lease.granted());

  httplib::Client http("127.0.0.1", f.server->metricsPort());
  auto res = http.Get("/status");
  ASSERT_TRUE(res) << "no answer from /status";
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/html; charset=utf-8");
  const std::string &body = res->body;
  std::string tuneSpec = tuneKey(spec).substr(0, tuneKey(spec).find(" | "));
  std::string leasedSpec = tuneKey(specOf(leased)).substr(0, tuneKey(specOf(leased)).find(" | "));
  const std::vector<std::string> pieces = {
      std::string("version ") + tilejitVersion() + ", up ",
      f.dir.file("t.db") + ": 1 kernel(s), 1 winner(s)",
      "<tr><td>" + tuneSpec + "</td><td>" + winner.canonical() +
          "</td><td>0.5000</td><td>fastest &lt;b&gt;by far&lt;/b&gt;</td><td>" +
          kernelKey(spec, winner).substr(0, 16) + "</td>",
      "<tr><td>" + leasedSpec + "</td><td>" + htmlEscaped(holder) + "</td><td>"};
  for (const std::string &piece : pieces)
    EXPECT_NE(body.find(piece), std::string::npos) << piece << "\nnot in:\n" << body;
  EXPECT_EQ(htmlEscaped(holder), "&lt;script&gt;alert(&#39;tuner&#39;)&lt;/script&gt;");
  EXPECT_EQ(body.find("<script"), std::string::npos) << body;
  EXPECT_EQ(body.find("<b>"), std::string::npos) << body;
  // The time left of a lease of 60 s.
  size_t at = body.find(htmlEscaped(holder) + "</td><td>");
  ASSERT_NE(at, std::string::npos);
  double left = std::atof(body.c_str() + at + htmlEscaped(holder).size() + 9);
  EXPECT_GT(left, 30);
  EXPECT_LE(left, 60);

  // Once the lease ends it is gone from the page.
  v1::PublishResultRequest pub;
  pub.set_spec(leased);
  pub.set_winner_config(getTemplate(specOf(leased)).defaultConfig(specOf(leased)).canonical());
  pub.set_lease_id(lease.lease_id());
  v1::PublishResultResponse done;
  ASSERT_TRUE(f.publish(pub, done).ok());
  res = http.Get("/status");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->body.find(htmlEscaped(holder)), std::string::npos);
  EXPECT_NE(res->body.find("1 kernel(s), 2 winner(s)"), std::string::npos) << res->body;
}
