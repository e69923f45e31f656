//===- ServerTuneTest.cpp - Tune on the server, streamed, over real gRPC ---===//
//
// A server on 127.0.0.1 tunes on the fake worker and device
// (tests/support/FakeWorker.h) through ServerOptions::tuneSetup, as it tunes
// on its GPU otherwise: the stream of candidates, the winner published in
// its store and handed out by Lookup, the tokens, one tuning per key, the
// checks of a request, a server without a GPU, and a caller that goes away.
//
//===----------------------------------------------------------------------===//
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <sqlite3.h>

#include "autotune/Tuner.h"
#include "autotune/Worker.h"
#include "compiler/templates/Template.h"
#include "ops/rmsnorm/RmsNormDecl.h"
#include "runtime/CudaDriver.h"
#include "service/Client.h"
#include "service/Server.h"
#include "tests/support/FakeWorker.h"
#include "tests/support/TempDir.h"
#include "tilejit.grpc.pb.h"

using namespace tilejit;
using grpc::StatusCode;
using tilejit::testing::TempDir;

namespace {

/// A server that tunes the first configs of an RMSNorm space on the fake
/// worker: space[1] the fastest (0.5 ms), space[2] failing its check, the
/// rest 1 ms. Compiles can be held at a gate.
class ServerTune : public tilejit::testing::FakeTuningTest {
protected:
  void SetUp() override {
    FakeTuningTest::SetUp();
    if (HasFatalFailure())
      return;

    ServerOptions o;
    o.dbPath = dir.file("server.db");
    o.tokens = {{"writer", false}, {"reader", true}};
    o.log = [this](const std::string &line) {
      std::lock_guard<std::mutex> lock(mu);
      log.push_back(line);
    };
    o.tuneSetup = [this](TuneOptions &t) -> llvm::Error {
      t.deviceInfo = &device;
      t.worker = worker.get();
      t.compileThreads = 1;
      t.compile = [this](const KernelSpec &s,
                         const TileConfig &c) -> llvm::Expected<CompiledKernel> {
        {
          std::unique_lock<std::mutex> lock(mu);
          ++compiles;
          compiling.notify_all();
          compiling.wait(lock, [this] { return gateOpen; });
        }
        CompiledKernel k;
        k.spec = s;
        k.config.set("vec", c == space[2] ? 6 : 1).set("us", c == space[1] ? 500 : 1000);
        // The key a real compile of this config has: the server hands the
        // winner's binary out as that config's kernel.
        k.key = kernelKey(s, c);
        std::string bytes = "fake cubin of " + c.canonical();
        k.cubin.assign(bytes.begin(), bytes.end());
        return k;
      };
      return llvm::Error::success();
    };
    auto s = Server::start(std::move(o), "127.0.0.1:0");
    ASSERT_TRUE(bool(s)) << llvm::toString(s.takeError());
    server = std::move(*s);
    address = "127.0.0.1:" + std::to_string(server->port());
    stub = v1::TileJit::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  }

  ClientOptions client(const std::string &token) const {
    ClientOptions o;
    o.address = address;
    o.token = token;
    o.deadline = std::chrono::seconds(60);
    return o;
  }
  RemoteTuneOptions tuneOptions(const std::string &holder, int configs = 4) const {
    RemoteTuneOptions o;
    o.holder = holder;
    o.maxConfigs = configs;
    o.deadline = std::chrono::seconds(120);
    return o;
  }
  std::unique_ptr<grpc::ClientContext> context(const std::string &token = "") {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    if (!token.empty())
      ctx->AddMetadata("authorization", "Bearer " + token);
    return ctx;
  }
  /// Tune through the stub: its messages and final status.
  grpc::Status rawTune(const v1::TuneRequest &req, const std::string &token,
                       std::vector<v1::TuneProgress> *messages = nullptr) {
    auto ctx = context(token);
    auto reader = stub->Tune(ctx.get(), req);
    v1::TuneProgress m;
    while (reader->Read(&m))
      if (messages)
        messages->push_back(m);
    return reader->Finish();
  }
  v1::StatsResponse stats() {
    v1::StatsResponse st;
    EXPECT_TRUE(stub->Stats(context().get(), v1::StatsRequest(), &st).ok());
    return st;
  }
  v1::ListResponse list() {
    v1::ListResponse l;
    EXPECT_TRUE(stub->List(context().get(), v1::ListRequest(), &l).ok());
    return l;
  }
  void openGate() {
    std::lock_guard<std::mutex> lock(mu);
    gateOpen = true;
    compiling.notify_all();
  }
  int compileCount() {
    std::lock_guard<std::mutex> lock(mu);
    return compiles;
  }

  TempDir dir;
  std::unique_ptr<Server> server;
  std::string address;
  std::unique_ptr<v1::TileJit::Stub> stub;
  std::mutex mu;
  std::condition_variable compiling;
  bool gateOpen = true;
  int compiles = 0;
  std::vector<std::string> log;
};

} // namespace

TEST_F(ServerTune, StreamsEachCandidateAndPublishesTheWinner) {
  Client writer(client("writer"));
  auto before = writer.lookup(spec);
  ASSERT_TRUE(bool(before)) << llvm::toString(before.takeError());
  EXPECT_FALSE(before->has_value());

  RemoteTuning started;
  std::vector<std::pair<CandidateResult, std::pair<int, int>>> seen;
  auto r = writer.tune(
      spec, tuneOptions("tuner-host:1"), [&](const RemoteTuning &s) { started = s; },
      [&](const CandidateResult &c, int done, int total) {
        seen.push_back({c, {done, total}});
      });
  ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
  EXPECT_EQ(started.tuneKey, tuneKey(spec));
  EXPECT_EQ(started.gpu, "Fake GPU");
  EXPECT_EQ(started.holder, "tuner-host:1");
  EXPECT_EQ(started.spec, spec.tuningSpec().canonical());

  // One message per candidate, as each was decided, with its outcome.
  ASSERT_EQ(seen.size(), 4u);
  for (size_t i = 0; i < seen.size(); ++i) {
    SCOPED_TRACE(i);
    const CandidateResult &c = seen[i].first;
    EXPECT_EQ(seen[i].second.first, int(i) + 1);
    EXPECT_EQ(seen[i].second.second, 4);
    if (c.config == space[2]) {
      EXPECT_EQ(c.status, "verify");
      EXPECT_FALSE(c.detail.empty());
    } else {
      EXPECT_EQ(c.status, "ok") << c.detail;
      EXPECT_DOUBLE_EQ(c.medianMs, c.config == space[1] ? 0.5 : 1.0);
      // The last one is measured after the best (0.5 ms) and is slower than
      // 1.5 x it: one sample.
      EXPECT_EQ(c.reps, c.config == space[3] ? 1 : 30);
    }
  }
  EXPECT_EQ(r->candidates.size(), 4u);

  // The last message: the winner and its timings.
  EXPECT_EQ(r->winner, space[1]);
  EXPECT_DOUBLE_EQ(r->winnerMs, 0.5);
  EXPECT_DOUBLE_EQ(r->winnerP20Ms, 0.45);
  EXPECT_DOUBLE_EQ(r->winnerP80Ms, 0.55);
  EXPECT_EQ(r->winnerReps, 30);
  EXPECT_EQ(r->measured, 3);
  EXPECT_EQ(r->failed, 1);
  EXPECT_EQ(r->kernelKey, kernelKey(spec.tuningSpec(), space[1]));
  EXPECT_FALSE(r->reason.empty());

  // Published: Lookup (the store only) hands out the winner's kernel, to a
  // reader as to anyone.
  Client reader(client("reader"));
  auto after = reader.lookup(spec);
  ASSERT_TRUE(bool(after)) << llvm::toString(after.takeError());
  ASSERT_TRUE(after->has_value());
  EXPECT_TRUE((*after)->tuned);
  EXPECT_EQ((*after)->binary.config, space[1]);
  EXPECT_EQ((*after)->binary.key, kernelKey(spec, space[1]));
  std::string bytes = "fake cubin of " + space[1].canonical();
  EXPECT_EQ(std::string((*after)->binary.cubin.begin(), (*after)->binary.cubin.end()), bytes);

  v1::StatsResponse st = stats();
  EXPECT_EQ(st.tunes(), 1u);
  EXPECT_EQ(st.tune_failures(), 0u);
  EXPECT_EQ(st.compiles(), 0u);
  EXPECT_EQ(list().leases_size(), 0) << "the tuning's lease outlived it";
  std::lock_guard<std::mutex> lock(mu);
  bool logged = false;
  for (const std::string &line : log)
    logged |= line.rfind("tuned " + tuneKey(spec) + ": " + space[1].canonical(), 0) == 0;
  EXPECT_TRUE(logged);
}

TEST_F(ServerTune, NeedsAReadWriteToken) {
  v1::TuneRequest req;
  req.set_spec(spec.canonical());
  req.set_max_configs(2);
  std::vector<v1::TuneProgress> messages;
  grpc::Status s = rawTune(req, "reader", &messages);
  EXPECT_EQ(s.error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(s.error_message(), "the bearer token is read-only: Tune writes and needs a read-write "
                               "token");
  s = rawTune(req, "", &messages);
  EXPECT_EQ(s.error_code(), StatusCode::UNAUTHENTICATED);
  s = rawTune(req, "not-a-token", &messages);
  EXPECT_EQ(s.error_code(), StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(messages.empty());
  EXPECT_EQ(compileCount(), 0);
  EXPECT_EQ(stats().tunes(), 0u);
}

TEST_F(ServerTune, BadRequestsNameTheField) {
  auto refusal = [&](v1::TuneRequest req) {
    std::vector<v1::TuneProgress> messages;
    grpc::Status s = rawTune(req, "writer", &messages);
    EXPECT_TRUE(messages.empty());
    EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT) << s.error_message();
    return s.error_message();
  };
  auto good = [&] {
    v1::TuneRequest r;
    r.set_spec(spec.canonical());
    r.set_max_configs(2);
    return r;
  };
  auto starts = [](const std::string &msg, const std::string &field) {
    return msg.rfind(field + ": ", 0) == 0 || msg.rfind(field + " ", 0) == 0;
  };
  v1::TuneRequest r = good();
  r.set_spec("rmsnorm_fwd rows=4096 cols=0");
  EXPECT_TRUE(starts(refusal(r), "spec")) << refusal(r);
  r = good();
  r.set_spec("softmax cols=8");
  EXPECT_TRUE(starts(refusal(r), "spec")) << refusal(r);
  r = good();
  r.set_backend(v1::Backend(7));
  EXPECT_TRUE(starts(refusal(r), "backend")) << refusal(r);
  r = good();
  r.set_max_configs(-1);
  EXPECT_TRUE(starts(refusal(r), "max_configs")) << refusal(r);
  r = good();
  r.set_reps(-3);
  EXPECT_TRUE(starts(refusal(r), "reps")) << refusal(r);
  r = good();
  r.set_budget_seconds(std::nan(""));
  EXPECT_TRUE(starts(refusal(r), "budget_seconds")) << refusal(r);
  r = good();
  r.set_holder(std::string("tuner\x01", 6));
  EXPECT_TRUE(starts(refusal(r), "holder")) << refusal(r);
  EXPECT_EQ(compileCount(), 0);
  EXPECT_EQ(list().leases_size(), 0) << "a refused Tune holds a lease";
  EXPECT_EQ(stats().invalid_requests(), 7u);
}

TEST_F(ServerTune, AStoreThatCannotRecordIsTheServersFault) {
  // Another process holds the store's write lock for the whole tuning, so
  // the server cannot record what it measured: that is the server's failure
  // (INTERNAL), not the request's (FAILED_PRECONDITION), and nothing of the
  // tuning is kept. Once the lock is gone, the same request tunes.
  sqlite3 *other = nullptr;
  ASSERT_EQ(sqlite3_open(dir.file("server.db").c_str(), &other), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr), SQLITE_OK)
      << sqlite3_errmsg(other);
  v1::TuneRequest req;
  req.set_spec(spec.canonical());
  req.set_max_configs(2);
  grpc::Status s = rawTune(req, "writer");
  ASSERT_EQ(sqlite3_exec(other, "ROLLBACK", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(other);
  EXPECT_EQ(s.error_code(), StatusCode::INTERNAL) << s.error_message();
  EXPECT_EQ(s.error_message().rfind("tuning " + tuneKey(spec) + ": ", 0), 0u) << s.error_message();
  EXPECT_EQ(stats().tune_failures(), 1u);
  EXPECT_EQ(list().leases_size(), 0) << "the failed tuning's lease outlived it";
  Client reader(client("reader"));
  auto none = reader.lookup(spec);
  ASSERT_TRUE(bool(none)) << llvm::toString(none.takeError());
  EXPECT_FALSE(none->has_value()) << "a winner of the failed tuning was handed out";
  std::vector<v1::TuneProgress> messages;
  s = rawTune(req, "writer", &messages);
  EXPECT_TRUE(s.ok()) << s.error_message();
  auto after = reader.lookup(spec);
  ASSERT_TRUE(bool(after)) << llvm::toString(after.takeError());
  EXPECT_TRUE(after->has_value());
}

TEST_F(ServerTune, ASecondCallerOfTheKeyIsToldWhoHoldsIt) {
  // The first tuning stops at its first compile until the second caller has
  // been answered.
  {
    std::lock_guard<std::mutex> lock(mu);
    gateOpen = false;
  }
  llvm::Expected<RemoteTuning> first =
      llvm::make_error<llvm::StringError>("not run", llvm::inconvertibleErrorCode());
  std::thread a([&] {
    Client c(client("writer"));
    first = c.tune(spec, tuneOptions("tuner-a"));
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(
        compiling.wait_for(lock, std::chrono::seconds(60), [this] { return compiles > 0; }));
  }
  Client b(client("writer"));
  auto second = b.tune(spec, tuneOptions("tuner-b"));
  ASSERT_FALSE(bool(second));
  std::string msg = llvm::toString(second.takeError());
  EXPECT_NE(msg.find(std::to_string(int(StatusCode::ABORTED)) + " a tuning of " + tuneKey(spec) +
                     " is under way: its lease is held by tuner-a"),
            std::string::npos)
      << msg;
  // A client tuner asking for the lease is told the same.
  auto lease = b.acquireLease(spec, Backend::Nvptx, "tuner-c", std::chrono::minutes(1));
  ASSERT_TRUE(bool(lease)) << llvm::toString(lease.takeError());
  EXPECT_FALSE(lease->granted);
  EXPECT_EQ(lease->holder, "tuner-a");
  // Another key is not held by it.
  KernelSpec other = spec;
  ASSERT_FALSE(bool(other.set("cols", 2048)));
  auto free = b.acquireLease(other, Backend::Nvptx, "tuner-c", std::chrono::minutes(1));
  ASSERT_TRUE(bool(free)) << llvm::toString(free.takeError());
  EXPECT_TRUE(free->granted);

  openGate();
  a.join();
  ASSERT_TRUE(bool(first)) << llvm::toString(first.takeError());
  EXPECT_EQ(first->winner, space[1]);
  // Done: the key is free at once, not when a lease would have lapsed.
  auto now = b.acquireLease(spec, Backend::Nvptx, "tuner-c", std::chrono::minutes(1));
  ASSERT_TRUE(bool(now)) << llvm::toString(now.takeError());
  EXPECT_TRUE(now->granted);
  EXPECT_TRUE(now->bestIsTuned);
  EXPECT_EQ(now->best, space[1]);
}

TEST_F(ServerTune, ACallerThatGoesAwayStopsTheTuningAndFreesTheKey) {
  {
    std::lock_guard<std::mutex> lock(mu);
    gateOpen = false;
  }
  v1::TuneRequest req;
  req.set_spec(spec.canonical());
  req.set_max_configs(4);
  req.set_holder("leaver");
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer writer");
  auto reader = stub->Tune(&ctx, req);
  v1::TuneProgress m;
  ASSERT_TRUE(reader->Read(&m));
  EXPECT_TRUE(m.has_started());
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(
        compiling.wait_for(lock, std::chrono::seconds(60), [this] { return compiles > 0; }));
  }
  ctx.TryCancel();
  while (reader->Read(&m)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), StatusCode::CANCELLED);
  // The cancellation reaches the server asynchronously: a call on the same
  // connection, sent after it, is answered after the server read it (on a
  // loaded machine the gate once opened first, and the four candidates
  // were measured before the server learned that the caller had gone).
  list();
  openGate();
  // The server notices before its next candidate, records no winner and
  // hands the key back.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (stats().tune_failures() == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(stats().tune_failures(), 1u);
  EXPECT_EQ(stats().tunes(), 0u);
  EXPECT_EQ(list().leases_size(), 0);
  Client c(client("writer"));
  auto lease = c.acquireLease(spec, Backend::Nvptx, "next", std::chrono::minutes(1));
  ASSERT_TRUE(bool(lease)) << llvm::toString(lease.takeError());
  EXPECT_TRUE(lease->granted);
  EXPECT_FALSE(lease->bestIsTuned);
}

// Without tuneSetup the server tunes on the CUDA driver's GPU 0; where
// there is none, Tune says so at once.
TEST(ServerTuneNoGpu, IsRefusedAtOnceNamingWhy) {
  if (auto d = queryDevice(0)) {
    GTEST_SKIP() << "this machine has a GPU (" << d->name << "): Tune would tune on it";
  } else {
    llvm::consumeError(d.takeError());
  }
  TempDir dir;
  ServerOptions o;
  o.dbPath = dir.file("t.db");
  o.log = [](const std::string &) {};
  auto s = Server::start(std::move(o), "127.0.0.1:0");
  ASSERT_TRUE(bool(s)) << llvm::toString(s.takeError());
  ClientOptions co;
  co.address = "127.0.0.1:" + std::to_string((*s)->port());
  Client c(co);
  auto t0 = std::chrono::steady_clock::now();
  RemoteTuneOptions ro;
  ro.holder = "someone";
  KernelSpec spec = tilejit::testing::tuningTestSpec(Target());
  auto r = c.tune(spec, ro);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(bool(r));
  std::string msg = llvm::toString(r.takeError());
  EXPECT_NE(msg.find(std::to_string(int(StatusCode::FAILED_PRECONDITION)) +
                     " this server has no GPU to tune on: "),
            std::string::npos)
      << msg;
  EXPECT_LT(seconds, 2.0);
  // Nothing is held.
  auto lease = c.acquireLease(spec, Backend::Nvptx, "next", std::chrono::minutes(1));
  ASSERT_TRUE(bool(lease)) << llvm::toString(lease.takeError());
  EXPECT_TRUE(lease->granted);
}

// On a machine with a GPU (ctest's gpu_server_tune, label gpu): the server
// tunes on its own GPU, each candidate in a tilejit-worker process, as
// `tilejit serve` does; skipped without one.
TEST(ServerTuneGpu, TunesOnItsOwnGpuAndPublishesTheWinner) {
  auto d = queryDevice(0);
  if (!d)
    GTEST_SKIP() << "no GPU: " << llvm::toString(d.takeError());
  auto target = d->target();
  if (!target)
    GTEST_SKIP() << d->name << ": " << llvm::toString(target.takeError());
  TempDir dir;
  ServerOptions o;
  o.dbPath = dir.file("t.db");
  o.tokens = {{"writer", false}};
  o.log = [](const std::string &) {};
  auto s = Server::start(std::move(o), "127.0.0.1:0");
  ASSERT_TRUE(bool(s)) << llvm::toString(s.takeError());
  ClientOptions co;
  co.address = "127.0.0.1:" + std::to_string((*s)->port());
  co.token = "writer";
  Client c(co);
  KernelSpec spec = tilejit::testing::tuningTestSpec(*target);
  RemoteTuneOptions ro;
  ro.holder = "gpu-test";
  ro.maxConfigs = 4;
  ro.deadline = std::chrono::minutes(5);
  int streamed = 0;
  std::string gpu;
  auto r = c.tune(
      spec, ro, [&](const RemoteTuning &t) { gpu = t.gpu; },
      [&](const CandidateResult &, int done, int total) {
        ++streamed;
        EXPECT_EQ(done, streamed);
        EXPECT_EQ(total, 4);
      });
  ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
  EXPECT_EQ(gpu, d->name);
  EXPECT_EQ(streamed, 4);
  EXPECT_GE(r->measured, 1);
  EXPECT_GT(r->winnerMs, 0);
  EXPECT_EQ(r->kernelKey, kernelKey(spec.tuningSpec(), r->winner));
  auto hit = c.lookup(spec);
  ASSERT_TRUE(bool(hit)) << llvm::toString(hit.takeError());
  ASSERT_TRUE(hit->has_value());
  EXPECT_TRUE((*hit)->tuned);
  EXPECT_EQ((*hit)->binary.config, r->winner);
  EXPECT_FALSE((*hit)->binary.cubin.empty());
}
