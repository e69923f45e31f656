//===- EngineServerTest.cpp - an engine's kernels through the server -------===//
//
// What an Engine with a server does on a miss, without a GPU: the server's
// best kernel (fetchBest), a kernel for a chosen config (fetchOrCompile) and
// a tuning under the server's lease (tuneShared), against a real server on
// 127.0.0.1: one in this process, or a `tilejit serve` process that is
// killed in the middle of a request. Tunings run on the fake worker
// (tests/unit/FakeWorker.cpp), which reports the medians a plan gives.
//
//===----------------------------------------------------------------------===//
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <atomic>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <mutex>
#include <netinet/in.h>
#include <sstream>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include <grpcpp/grpcpp.h>

#include "autotune/Tuner.h"
#include "autotune/Worker.h"
#include "compiler/templates/Template.h"
#include "core/Sha256.h"
#include "ops/rmsnorm/RmsNormDecl.h"
#include "runtime/CudaDriver.h"
#include "service/Client.h"
#include "service/Server.h"
#include "service/SharedTuning.h"
#include "tests/support/FakeWorker.h"
#include "tests/support/TempDir.h"
#include "tilejit.grpc.pb.h"

using namespace tilejit;
using tilejit::testing::TempDir;

namespace {

double msSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

/// The counters of the server at `port`.
v1::StatsResponse statsOf(int port) {
  auto stub = v1::TileJit::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::StatsResponse resp;
  grpc::Status s = stub->Stats(&ctx, v1::StatsRequest(), &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return resp;
}

/// A server in this process on a free loopback port, its store in `dir`.
struct InProcessServer {
  explicit InProcessServer(ServerOptions options = {}) {
    options.dbPath = dir.file("server.db");
    options.log = [](const std::string &) {};
    auto s = Server::start(std::move(options), "127.0.0.1:0");
    if (!s) {
      ADD_FAILURE() << llvm::toString(s.takeError());
      return;
    }
    server = std::move(*s);
  }
  ClientOptions client(std::chrono::milliseconds deadline = std::chrono::seconds(60)) const {
    ClientOptions o;
    o.address = "127.0.0.1:" + std::to_string(server->port());
    o.deadline = deadline;
    return o;
  }
  TempDir dir;
  std::unique_ptr<Server> server;
};

/// A loopback port nobody listens on: a server's, after it stopped (0 if
/// none could be started).
int deadPort() {
  InProcessServer srv;
  return srv.server ? srv.server->port() : 0;
}

std::unique_ptr<Store> openStore(const std::string &path) {
  auto s = Store::open(path);
  if (!s) {
    ADD_FAILURE() << llvm::toString(s.takeError());
    return nullptr;
  }
  return std::move(*s);
}

KernelSpec specOf(const std::string &text) {
  auto s = KernelSpec::parse(text);
  EXPECT_TRUE(bool(s)) << (s ? "" : llvm::toString(s.takeError()));
  return s ? *s : KernelSpec();
}

} // namespace

TEST(EngineThroughServer, KernelsCompiledOnTheServerOnceReachEveryClient) {
  InProcessServer srv;
  ASSERT_TRUE(srv.server);
  TempDir here;
  auto localA = openStore(here.file("a.db"));
  auto localB = openStore(here.file("b.db"));
  ASSERT_TRUE(localA && localB);
  Client a(srv.client()), b(srv.client());
  KernelSpec spec = specOf("rmsnorm_fwd rows=2048 cols=1536");
  TileConfig def = getTemplate(spec).defaultConfig(spec);

  // The first client's miss: the server compiles, the client only records.
  auto first = fetchBest(spec, Backend::Nvptx, localA.get(), a);
  ASSERT_TRUE(bool(first)) << llvm::toString(first.takeError());
  EXPECT_FALSE(first->tuned);
  EXPECT_EQ(first->source, "compiled");
  EXPECT_EQ(first->binary.config, def);
  EXPECT_EQ(first->binary.key, kernelKey(spec, def));
  EXPECT_EQ(first->binary.spec, spec);
  EXPECT_EQ(statsOf(srv.server->port()).compiles(), 1u);
  auto recorded = localA->getKernel(first->binary.key);
  ASSERT_TRUE(recorded && *recorded) << "the fetched kernel is kept in the local store";
  EXPECT_EQ((**recorded).cubin, first->binary.cubin);
  auto noWinner = localA->winner(tuneKey(spec));
  ASSERT_TRUE(bool(noWinner));
  EXPECT_FALSE(*noWinner) << "a default is not recorded as a winner";

  // The engine's next step for that config finds it in the local store,
  // without asking the server.
  KernelSource source = KernelSource::Compiled;
  auto again = fetchOrCompile(spec, def, Backend::Nvptx, localA.get(), &a, &source);
  ASSERT_TRUE(bool(again)) << llvm::toString(again.takeError());
  EXPECT_EQ(source, KernelSource::Store);
  EXPECT_EQ(statsOf(srv.server->port()).get_kernels(), 1u);

  // A second client with a store of its own gets the same bytes from the
  // server's store: nothing is compiled again anywhere.
  auto second = fetchBest(spec, Backend::Nvptx, localB.get(), b);
  ASSERT_TRUE(bool(second)) << llvm::toString(second.takeError());
  EXPECT_EQ(second->source, "store");
  EXPECT_EQ(second->binary.cubin, first->binary.cubin);
  EXPECT_EQ(second->binary.key, first->binary.key);
  v1::StatsResponse st = statsOf(srv.server->port());
  EXPECT_EQ(st.compiles(), 1u);
  EXPECT_EQ(st.store_hits(), 1u);
  auto inB = localB->getKernel(first->binary.key);
  ASSERT_TRUE(inB && *inB);
  EXPECT_EQ((**inB).cubin, first->binary.cubin);
}

TEST(EngineThroughServer, NoServerIsAnErrorWithinTheDeadline) {
  int port = deadPort();
  ASSERT_GT(port, 0);
  ClientOptions o;
  o.address = "127.0.0.1:" + std::to_string(port);
  o.deadline = std::chrono::milliseconds(300);
  Client client(o);
  TempDir here;
  auto local = openStore(here.file("local.db"));
  ASSERT_TRUE(local);
  KernelSpec spec = specOf("rmsnorm_fwd rows=64 cols=1000");
  auto t0 = std::chrono::steady_clock::now();
  auto best = fetchBest(spec, Backend::Nvptx, local.get(), client);
  double ms = msSince(t0);
  ASSERT_FALSE(bool(best));
  EXPECT_NE(llvm::toString(best.takeError()).find(o.address), std::string::npos);
  EXPECT_LT(ms, 300 + 100) << "the engine would have waited past the deadline";
  auto list = local->list();
  ASSERT_TRUE(bool(list));
  EXPECT_TRUE(list->empty()) << "nothing recorded from a server that did not answer";
}

TEST(EngineThroughServer, AServerFoundUnreachableIsNotWaitedOnAgainForAWhile) {
  int port = deadPort();
  ASSERT_GT(port, 0);
  ClientOptions o;
  o.address = "127.0.0.1:" + std::to_string(port);
  o.deadline = std::chrono::milliseconds(300);
  o.downFor = std::chrono::milliseconds(1500);
  Client client(o);
  KernelSpec spec = specOf("rmsnorm_fwd rows=64 cols=1000");
  auto first = client.lookup(spec);
  ASSERT_FALSE(bool(first));
  llvm::consumeError(first.takeError());
  // Asked again at once: answered without waiting on the server.
  auto t0 = std::chrono::steady_clock::now();
  auto second = client.lookup(spec);
  double ms = msSince(t0);
  ASSERT_FALSE(bool(second));
  std::string msg = llvm::toString(second.takeError());
  EXPECT_EQ(msg.rfind("server " + o.address + ": 14 not asked: unreachable ", 0), 0u) << msg;
  EXPECT_LT(ms, 50);
  // A server back on the port is asked once the time is up.
  ServerOptions so;
  so.dbPath = ":memory:";
  so.log = [](const std::string &) {};
  auto back = Server::start(std::move(so), o.address);
  ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError());
  std::this_thread::sleep_for(std::chrono::milliseconds(1600));
  auto third = client.lookup(spec);
  EXPECT_TRUE(bool(third)) << llvm::toString(third.takeError());
}

TEST(EngineThroughServer, AServerThatNeverAnswersIsLeftAtTheDeadline) {
  // A port that takes connections but never speaks (a hung server): the
  // call passes its deadline on a channel that never connected.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(fd, 16), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &len), 0);
  ClientOptions o;
  o.address = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  o.deadline = std::chrono::milliseconds(300);
  Client client(o);
  TempDir here;
  auto local = openStore(here.file("local.db"));
  ASSERT_TRUE(local);
  KernelSpec spec = specOf("rmsnorm_fwd rows=64 cols=1000");
  auto t0 = std::chrono::steady_clock::now();
  auto best = fetchBest(spec, Backend::Nvptx, local.get(), client);
  double first = msSince(t0);
  ASSERT_FALSE(bool(best));
  std::string msg = llvm::toString(best.takeError());
  EXPECT_NE(msg.find(": 4 "), std::string::npos) << msg; // DEADLINE_EXCEEDED
  EXPECT_LT(first, 300 + 100);
  // The next kernel's request does not wait again.
  t0 = std::chrono::steady_clock::now();
  KernelSource source = KernelSource::Server;
  std::string why;
  auto k = fetchOrCompile(spec, getTemplate(spec).defaultConfig(spec), Backend::Nvptx, local.get(),
                          &client, &source, &why);
  ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
  EXPECT_EQ(source, KernelSource::Compiled);
  EXPECT_NE(why.find("not asked: unreachable"), std::string::npos) << why;
  ::close(fd);
}

namespace {

/// `tilejit serve` in a child process, on a free port over `db`.
class ServeProcess {
public:
  ServeProcess(const std::string &db, const std::string &logPath) {
    pid_ = ::fork();
    if (pid_ == 0) {
      int fd = ::open(logPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 2);
      ::execl(TILEJIT_CLI, TILEJIT_CLI, "serve", "--listen", "127.0.0.1:0", "--db", db.c_str(),
              static_cast<char *>(nullptr));
      ::_exit(127);
    }
    // Its port, from the line it writes once it listens.
    for (int i = 0; i < 600 && port_ == 0; ++i) {
      std::ifstream in(logPath);
      std::stringstream ss;
      ss << in.rdbuf();
      std::string log = ss.str();
      auto at = log.find("listening on 127.0.0.1:");
      if (at != std::string::npos)
        port_ = std::atoi(log.c_str() + at + std::strlen("listening on 127.0.0.1:"));
      else
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  ~ServeProcess() { kill(SIGKILL); }
  void kill(int sig) {
    if (pid_ <= 0)
      return;
    ::kill(pid_, sig);
    ::waitpid(pid_, nullptr, 0);
    pid_ = 0;
  }
  int port() const { return port_; }

private:
  pid_t pid_ = -1;
  int port_ = 0;
};

} // namespace

TEST(EngineThroughServer, ServerKilledMidRequestFallsBackAndLeavesBothStoresWhole) {
  TempDir dir;
  ServeProcess serve(dir.file("server.db"), dir.file("serve.log"));
  ASSERT_GT(serve.port(), 0) << "tilejit serve did not say where it listens";
  auto local = openStore(dir.file("local.db"));
  ASSERT_TRUE(local);
  ClientOptions o;
  o.address = "127.0.0.1:" + std::to_string(serve.port());
  o.deadline = std::chrono::seconds(5);
  Client client(o);
  // A GEMM compiles long enough on the server to be killed in the middle.
  KernelSpec gemm = specOf("gemm m=4096 n=4096 k=4096");
  TileConfig config = getTemplate(gemm).defaultConfig(gemm);

  std::atomic<bool> serverCallDone{false};
  double serverCallMs = 0;
  std::string serverCallError;
  std::thread direct([&] {
    auto t0 = std::chrono::steady_clock::now();
    auto k = client.getKernel(gemm, config);
    serverCallMs = msSince(t0);
    serverCallError = k ? "" : llvm::toString(k.takeError());
    serverCallDone = true;
  });
  KernelSource source = KernelSource::Store;
  std::string why, fetchError;
  KernelBinary fetched;
  std::thread engine([&] {
    auto k = fetchOrCompile(gemm, config, Backend::Nvptx, local.get(), &client, &source, &why);
    if (k)
      fetched = std::move(*k);
    else
      fetchError = llvm::toString(k.takeError());
  });
  while (statsOf(serve.port()).compiles_in_flight() == 0 && !serverCallDone)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_FALSE(serverCallDone) << "the server's compile ended before it could be killed";
  serve.kill(SIGKILL);
  direct.join();
  engine.join();

  // The call in flight failed within its deadline (and the engine's then
  // compiled here).
  EXPECT_NE(serverCallError.find(o.address), std::string::npos)
      << "the request survived the server's death: '" << serverCallError << "'";
  EXPECT_LT(serverCallMs, 5000 + 100);
  ASSERT_EQ(fetchError, "");
  EXPECT_EQ(source, KernelSource::Compiled);
  EXPECT_NE(why.find(o.address), std::string::npos) << why;
  EXPECT_EQ(fetched.key, kernelKey(gemm, config));

  // The local store holds the kernel whole; the server's store holds it
  // whole or not at all, and opens cleanly after the kill.
  for (const std::string &db : {dir.file("local.db"), dir.file("server.db")}) {
    SCOPED_TRACE(db);
    auto store = openStore(db);
    ASSERT_TRUE(store);
    auto problems = store->verify();
    ASSERT_TRUE(bool(problems)) << llvm::toString(problems.takeError());
    EXPECT_TRUE(problems->empty()) << (*problems)[0];
    auto k = store->getKernel(kernelKey(gemm, config));
    ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
    if (db == dir.file("local.db")) {
      ASSERT_TRUE(*k);
      EXPECT_EQ((**k).cubin, fetched.cubin);
    } else if (*k) {
      EXPECT_EQ((**k).sha256, sha256Hex(std::string_view((**k).cubin.data(), (**k).cubin.size())));
    }
  }
}

namespace {

/// Tunings on the fake worker: the first configs of an RMSNorm space, each
/// reporting the median its plan gives, compiled by a hook that counts.
class SharedTuningTest : public tilejit::testing::FakeTuningTest {
protected:
  /// The first `n` configs of the space, space[1] the fastest.
  TuneOptions options(int n) {
    TuneOptions o;
    o.maxConfigs = n;
    o.deviceInfo = &device;
    o.worker = worker.get();
    o.compileThreads = 1;
    o.compile = [this](const KernelSpec &s, const TileConfig &c) -> llvm::Expected<CompiledKernel> {
      ++compiles;
      if (compileDelay.count())
        std::this_thread::sleep_for(compileDelay);
      CompiledKernel k;
      k.spec = s;
      k.config.set("vec", 1).set("us", c == space[1] ? 500 : 1000);
      // The key a real compile of this config has, so that the server takes
      // the winner's binary as that config's kernel.
      k.key = kernelKey(s, c);
      std::string bytes = "fake cubin of " + c.canonical();
      k.cubin.assign(bytes.begin(), bytes.end());
      return k;
    };
    return o;
  }

  std::atomic<int> compiles{0};
  std::chrono::milliseconds compileDelay{0};
};

} // namespace

TEST_F(SharedTuningTest, TheLeaseHolderTunesAndItsWinnerReachesTheNextClient) {
  ServerOptions so;
  so.tokens = {{"rw-token", false}};
  InProcessServer srv(so);
  ASSERT_TRUE(srv.server);
  TempDir here;
  auto localA = openStore(here.file("a.db"));
  auto localB = openStore(here.file("b.db"));
  ASSERT_TRUE(localA && localB);
  ClientOptions oa = srv.client();
  oa.token = "rw-token";
  // A lease shorter than the tuning: only renewals keep it.
  oa.leaseTtl = std::chrono::milliseconds(300);
  compileDelay = std::chrono::milliseconds(150);
  Client a(oa);

  auto t = tuneShared(spec, localA.get(), a, options(4), "tuner-a");
  ASSERT_TRUE(bool(t)) << llvm::toString(t.takeError());
  EXPECT_TRUE(t->tuned.has_value());
  EXPECT_TRUE(t->isWinner);
  EXPECT_EQ(t->config, space[1]);
  EXPECT_TRUE(t->published) << t->serverProblem;
  EXPECT_EQ(t->serverProblem, "");
  EXPECT_GE(compiles.load(), 4);
  v1::StatsResponse st = statsOf(srv.server->port());
  EXPECT_EQ(st.publishes(), 1u);
  EXPECT_GE(st.leases_granted(), 3u) << "the lease was not renewed while tuning";
  EXPECT_EQ(st.leases_expired(), 0u);

  // The next client asks for its best kernel: the published winner, its
  // binary from the server's store, with no compile or tuning anywhere.
  int compilesBefore = compiles;
  Client b(srv.client());
  auto best = fetchBest(spec, Backend::Nvptx, localB.get(), b);
  ASSERT_TRUE(bool(best)) << llvm::toString(best.takeError());
  EXPECT_TRUE(best->tuned);
  EXPECT_EQ(best->source, "store");
  EXPECT_EQ(best->binary.config, space[1]);
  std::string bytes = "fake cubin of " + space[1].canonical();
  EXPECT_EQ(std::string(best->binary.cubin.begin(), best->binary.cubin.end()), bytes);
  EXPECT_EQ(statsOf(srv.server->port()).compiles(), 0u);
  EXPECT_EQ(compiles.load(), compilesBefore);
  // Kept in its store as its winner too, for when the server is away.
  auto w = localB->winner(tuneKey(spec));
  ASSERT_TRUE(w && *w);
  EXPECT_EQ((**w).config, space[1].canonical());
  EXPECT_EQ((**w).kernelKey, best->binary.key);
  // Another tuner asking now is told the key is tuned, and tunes nothing.
  auto again = tuneShared(spec, localB.get(), b, options(4), "tuner-b");
  ASSERT_TRUE(bool(again)) << llvm::toString(again.takeError());
  EXPECT_FALSE(again->tuned.has_value());
  EXPECT_TRUE(again->isWinner);
  EXPECT_EQ(again->config, space[1]);
  EXPECT_EQ(compiles.load(), compilesBefore);
}

TEST_F(SharedTuningTest, WhileAnotherHoldsTheLeaseNothingIsTuned) {
  InProcessServer srv;
  ASSERT_TRUE(srv.server);
  Client holder(srv.client()), other(srv.client());
  auto lease = holder.acquireLease(spec, Backend::Nvptx, "tuner-x", std::chrono::minutes(1));
  ASSERT_TRUE(bool(lease)) << llvm::toString(lease.takeError());
  ASSERT_TRUE(lease->granted);
  EXPECT_EQ(lease->tuneKey, tuneKey(spec));

  auto t = tuneShared(spec, nullptr, other, options(4), "tuner-y");
  ASSERT_TRUE(bool(t)) << llvm::toString(t.takeError());
  EXPECT_FALSE(t->tuned.has_value());
  EXPECT_FALSE(t->isWinner);
  EXPECT_EQ(t->otherHolder, "tuner-x");
  EXPECT_EQ(t->config, getTemplate(spec).defaultConfig(spec));
  EXPECT_EQ(compiles.load(), 0) << "a candidate was compiled while another held the lease";

  // The holder publishes; the next asker uses its winner.
  Publication p;
  p.leaseId = lease->id;
  p.spec = spec;
  p.winner = space[2];
  p.winnerMs = 0.5;
  p.reason = "fastest median";
  Timing timing;
  timing.config = space[2].canonical();
  timing.medianMs = 0.5;
  timing.reps = 30;
  timing.gpu = "Fake GPU";
  p.timings.push_back(timing);
  auto published = holder.publish(p);
  ASSERT_TRUE(bool(published)) << llvm::toString(published.takeError());
  EXPECT_EQ(*published, "") << "no kernel was sent, none is stored";
  auto after = tuneShared(spec, nullptr, other, options(4), "tuner-y");
  ASSERT_TRUE(bool(after)) << llvm::toString(after.takeError());
  EXPECT_TRUE(after->isWinner);
  EXPECT_FALSE(after->tuned.has_value());
  EXPECT_EQ(after->config, space[2]);
  EXPECT_EQ(compiles.load(), 0);
}

TEST_F(SharedTuningTest, ATuningThatFailsHandsItsLeaseBack) {
  ServerOptions so;
  so.tokens = {{"rw-token", false}};
  InProcessServer srv(so);
  ASSERT_TRUE(srv.server);
  ClientOptions o = srv.client();
  o.token = "rw-token";
  Client client(o);
  TuneOptions broken = options(3);
  broken.compile = [this](const KernelSpec &,
                          const TileConfig &) -> llvm::Expected<CompiledKernel> {
    ++compiles;
    return llvm::createStringError(llvm::inconvertibleErrorCode(), "no compiler today");
  };
  auto t = tuneShared(spec, nullptr, client, broken, "tuner-a");
  ASSERT_FALSE(bool(t));
  EXPECT_NE(llvm::toString(t.takeError()).find("compiled, ran and verified"), std::string::npos);
  EXPECT_EQ(compiles.load(), 3);
  // The key is free at once (the lease would have lasted a minute).
  auto next = client.acquireLease(spec, Backend::Nvptx, "tuner-b", std::chrono::minutes(1));
  ASSERT_TRUE(bool(next)) << llvm::toString(next.takeError());
  EXPECT_TRUE(next->granted);
  EXPECT_EQ(statsOf(srv.server->port()).leases_released(), 1u);

  // A lease granted when a winner is already published is handed back
  // unused too.
  Publication p;
  p.leaseId = next->id;
  p.spec = spec;
  p.winner = space[2];
  p.winnerMs = 0.5;
  ASSERT_TRUE(bool(client.publish(p)));
  auto done = tuneShared(spec, nullptr, client, options(3), "tuner-c");
  ASSERT_TRUE(bool(done)) << llvm::toString(done.takeError());
  EXPECT_FALSE(done->tuned.has_value());
  EXPECT_EQ(done->config, space[2]);
  EXPECT_EQ(done->serverProblem, "");
  EXPECT_EQ(statsOf(srv.server->port()).leases_released(), 2u);
  EXPECT_EQ(statsOf(srv.server->port()).active_leases(), 0);
}

TEST_F(SharedTuningTest, AResultTheServerRefusesStaysHere) {
  ServerOptions so;
  so.tokens = {{"rw-token", false}};
  InProcessServer srv(so);
  ASSERT_TRUE(srv.server);
  TempDir here;
  auto local = openStore(here.file("a.db"));
  ASSERT_TRUE(local);
  Client noToken(srv.client());
  auto t = tuneShared(spec, local.get(), noToken, options(3), "tuner-a");
  ASSERT_TRUE(bool(t)) << llvm::toString(t.takeError());
  EXPECT_TRUE(t->tuned.has_value());
  EXPECT_TRUE(t->isWinner);
  EXPECT_FALSE(t->published);
  EXPECT_NE(t->serverProblem.find("bearer token"), std::string::npos) << t->serverProblem;
  auto w = local->winner(tuneKey(spec));
  ASSERT_TRUE(w && *w);
  EXPECT_EQ((**w).config, space[1].canonical());
  EXPECT_EQ(statsOf(srv.server->port()).publishes(), 0u);
}

TEST_F(SharedTuningTest, WithoutTheServerTheProcessTunesAlone) {
  int port = deadPort();
  ASSERT_GT(port, 0);
  ClientOptions o;
  o.address = "127.0.0.1:" + std::to_string(port);
  o.deadline = std::chrono::milliseconds(200);
  Client client(o);
  auto t = tuneShared(spec, nullptr, client, options(3), "tuner-a");
  ASSERT_TRUE(bool(t)) << llvm::toString(t.takeError());
  EXPECT_TRUE(t->tuned.has_value());
  EXPECT_EQ(t->config, space[1]);
  EXPECT_FALSE(t->published);
  EXPECT_NE(t->serverProblem.find(o.address), std::string::npos) << t->serverProblem;
}
