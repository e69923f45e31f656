//===- TunerGpuTest.cpp - tuning and the engine on the GPU ------------------===//
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <sqlite3.h>

#include <grpcpp/grpcpp.h>

#include "autotune/Tuner.h"
#include "compiler/Nvrtc.h"
#include "compiler/templates/Template.h"
#include "ops/rmsnorm/RmsNormDecl.h"
#include "ops/rmsnorm/RmsNormLaunch.h"
#include "runtime/CudaDriver.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Store.h"
#include "service/Engine.h"
#include "service/KernelCache.h"
#include "service/Server.h"
#include "tests/support/Compare.h"
#include "tests/support/RmsNormReference.h"
#include "tests/support/Seed.h"
#include "tests/support/TempDir.h"
#include "tilejit.grpc.pb.h"

using namespace tilejit;
using tilejit::testing::allClose;
using tilejit::testing::HostTensor;
using tilejit::testing::TempDir;
using tilejit::testing::tolerance;

namespace {

/// Runs the forward `kernel` (compiled for `s`) on fresh random inputs drawn
/// from `seed` and compares y and rstd with the float64 reference of
/// tests/support, not with the tuner's own check.
void expectForwardMatchesFloat64(const LoadedKernel &kernel, const KernelSpec &spec,
                                 uint64_t seed) {
  const rmsnorm::Params s(spec);
  SCOPED_TRACE(tilejit::testing::replayHint(seed));
  std::mt19937_64 rng(seed);
  size_t n = size_t(s.rows * s.cols);
  HostTensor x(s.dtype, n), w(s.wdtype, s.cols), y(s.dtype, n), rstd(DType::F32, s.rows);
  x.randomNormal(rng, 0.0f, 1.0f);
  w.randomNormal(rng, s.zeroCenteredGamma ? 0.0f : 1.0f, 0.1f);
  auto bx = DeviceBuffer::allocate(x.bytes.size()), bw = DeviceBuffer::allocate(w.bytes.size()),
       by = DeviceBuffer::allocate(y.bytes.size()), br = DeviceBuffer::allocate(rstd.bytes.size());
  for (auto *b : {&bx, &bw, &by, &br})
    ASSERT_TRUE(bool(*b)) << llvm::toString(b->takeError());
  ASSERT_FALSE(bool(bx->upload(x.bytes.data(), x.bytes.size())));
  ASSERT_FALSE(bool(bw->upload(w.bytes.data(), w.bytes.size())));
  ASSERT_FALSE(bool(by->fill(0xFF))); // NaN wherever the kernel does not write
  ASSERT_FALSE(bool(br->fill(0xFF)));
  RmsNormForward a;
  a.dtype = s.dtype;
  a.wdtype = s.wdtype;
  a.x = bx->ptr();
  a.w = bw->ptr();
  a.y = by->ptr();
  a.rstd = br->ptr();
  a.rows = s.rows;
  a.cols = s.cols;
  a.zeroCenteredGamma = s.zeroCenteredGamma;
  auto launched = launchRmsNormForward(kernel, a, nullptr);
  ASSERT_FALSE(bool(launched)) << llvm::toString(std::move(launched));
  ASSERT_EQ(CudaDriver::get()->cuCtxSynchronize(), CUDA_SUCCESS);
  ASSERT_FALSE(bool(by->download(y.bytes.data(), y.bytes.size())));
  ASSERT_FALSE(bool(br->download(rstd.bytes.data(), rstd.bytes.size())));
  auto ref =
      tilejit::testing::rmsNormReference(s.rows, s.cols, s.zeroCenteredGamma, x, w, nullptr, a.eps);
  EXPECT_TRUE(allClose(y, ref.y, tolerance(s.dtype), size_t(s.cols))) << "y";
  EXPECT_TRUE(allClose(rstd, ref.rstd, tolerance(DType::F32), 0)) << "rstd";
}

/// The winner the choice rule gives on timings as the store recorded them:
/// the earliest config of `space` whose median is within `noise` of the
/// fastest. Empty when none was timed.
std::string winnerOfRecordedTimings(const std::vector<TileConfig> &space,
                                    const std::vector<Timing> &timings, double noise) {
  std::map<std::string, double> median;
  for (const Timing &t : timings)
    median[t.config] = t.medianMs;
  double fastest = INFINITY;
  for (auto &[config, ms] : median)
    fastest = std::min(fastest, ms);
  for (const TileConfig &c : space) {
    auto it = median.find(c.canonical());
    if (it != median.end() && it->second <= fastest * (1 + noise))
      return c.canonical();
  }
  return "";
}

class GpuTuner : public ::testing::Test {
protected:
  void SetUp() override {
    auto dev = queryDevice(0);
    if (!dev)
      GTEST_SKIP() << "no GPU here: " << llvm::toString(dev.takeError());
    auto t = dev->target();
    if (!t)
      GTEST_FAIL() << llvm::toString(t.takeError());
    target = *t;
  }
  KernelSpec spec(bool backward, int64_t rows, int64_t cols) {
    rmsnorm::Params s;
    s.backward = backward;
    s.rows = rows;
    s.cols = cols;
    s.target = target;
    s.align = alignmentOf({}, cols * 2);
    return s;
  }
  Target target;
};

TEST_F(GpuTuner, TunesVerifiesAndRecordsEveryTiming) {
  TempDir dir;
  auto store = Store::open(dir.file("t.db"));
  ASSERT_TRUE(bool(store)) << llvm::toString(store.takeError());
  for (auto s : {spec(false, 8192, 4096), spec(true, 4099, 1000)}) {
    SCOPED_TRACE(s.canonical());
    TuneOptions opt; // the whole space: every config is checked on the GPU
    auto r = tune(s, store->get(), opt);
    ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
    std::printf("%s: winner [%s] %.4f ms of %d measured in %.2f s; %s\n", s.canonical().c_str(),
                r->winner.canonical().c_str(), r->winnerMs, r->measured, r->wallSeconds,
                r->reason.c_str());
    EXPECT_GE(r->measured, 24);
    for (auto &c : r->candidates)
      EXPECT_TRUE(c.status == "ok") << c.config.canonical() << ": " << c.status << " " << c.detail;
    auto timings = (*store)->timings(r->tuneKey);
    ASSERT_TRUE(bool(timings));
    EXPECT_EQ(int(timings->size()), r->measured);
    auto w = (*store)->winner(r->tuneKey);
    ASSERT_TRUE(w && *w);
    EXPECT_EQ((*w)->config, r->winner.canonical());
    // The timings stored are those the tuner measured, and the winner is the
    // one the choice rule gives on them.
    for (auto &c : r->candidates) {
      int found = 0;
      for (const Timing &t : *timings)
        if (t.config == c.config.canonical()) {
          ++found;
          EXPECT_EQ(t.medianMs, c.medianMs) << t.config;
          EXPECT_EQ(t.reps, c.reps) << t.config;
        }
      EXPECT_EQ(found, c.status == "ok" ? 1 : 0) << c.config.canonical() << ": " << c.status;
    }
    std::vector<TileConfig> space = getTemplate(s).configSpace(s.tuningSpec());
    EXPECT_EQ(winnerOfRecordedTimings(space, *timings, opt.noise), r->winner.canonical());
    EXPECT_EQ((*w)->medianMs, r->winnerMs);
    // The winner computes what float64 does.
    auto k = compileAndLoad(s.tuningSpec(), r->winner);
    ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
    if (!rmsnorm::Params(s).backward)
      expectForwardMatchesFloat64(**k, s, tilejit::testing::testSeed());

    // Tuning again with the same store measures nothing and picks the same.
    auto again = tune(s, store->get(), opt);
    ASSERT_TRUE(bool(again)) << llvm::toString(again.takeError());
    EXPECT_EQ(again->measured, 0);
    EXPECT_EQ(again->reused, r->measured);
    EXPECT_EQ(again->winner, r->winner);
  }
}

TEST_F(GpuTuner, EngineLoadsFromMemoryStoreOrCompiler) {
  TempDir dir;
  KernelSpec s = spec(false, 1000, 4097);
  for (int round = 0; round < 2; ++round) {
    EngineOptions o;
    o.dbPath = dir.file("engine.db");
    auto engine = Engine::create(o);
    ASSERT_TRUE(bool(engine)) << llvm::toString(engine.takeError());
    auto k = (*engine)->get(s);
    ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
    EXPECT_EQ((*engine)->lastSource(), round == 0 ? "compiled" : "store");
    expectForwardMatchesFloat64(*k, s, tilejit::testing::testSeed());
    auto again = (*engine)->get(s);
    ASSERT_TRUE(bool(again));
    EXPECT_EQ(&*again, &*k) << "a second get is a memory hit";
  }
}

// What the store cannot serve is compiled again: a winner whose config the
// template no longer accepts (the default serves), a kernel whose launch
// record cannot be read, a kernel whose cubin fails its hash. Each time the
// kernel is recorded again and computes what float64 does.
TEST_F(GpuTuner, TheEngineRecompilesWhatTheStoreCannotServe) {
  TempDir dir;
  KernelSpec s = spec(false, 64, 1000);
  std::string key = kernelKey(s, getTemplate(s).defaultConfig(s));
  EngineOptions o;
  o.dbPath = dir.file("e.db");
  {
    auto store = Store::open(o.dbPath);
    ASSERT_TRUE(bool(store)) << llvm::toString(store.takeError());
    auto e = (*store)->setWinner(
        {tuneKey(s), "programs=0 rows=1 stream=0 threads=100 vec=8", "", 0.5, "stale", 0});
    ASSERT_FALSE(bool(e)) << llvm::toString(std::move(e));
  }
  auto round = [&](const char *wantSource) {
    auto engine = Engine::create(o);
    ASSERT_TRUE(bool(engine)) << llvm::toString(engine.takeError());
    auto k = (*engine)->get(s);
    ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
    EXPECT_EQ((*engine)->lastSource(), wantSource);
    EXPECT_EQ(k->key(), key) << "the default config, not the stale winner";
    expectForwardMatchesFloat64(*k, s, tilejit::testing::testSeed());
    auto stored = (*engine)->store()->getKernel(key);
    ASSERT_TRUE(bool(stored));
    EXPECT_TRUE(stored->has_value()) << "recorded";
  };
  round("compiled");
  round("store");
  {
    // An unreadable launch record.
    auto store = Store::open(o.dbPath);
    ASSERT_TRUE(bool(store));
    auto k = (*store)->getKernel(key);
    ASSERT_TRUE(k && *k);
    StoredKernel bad = **k;
    bad.launch = "not a launch record";
    ASSERT_FALSE(bool((*store)->putKernel(bad)));
  }
  round("compiled");
  round("store");
  {
    // A cubin that fails its hash.
    sqlite3 *db = nullptr;
    ASSERT_EQ(sqlite3_open(o.dbPath.c_str(), &db), SQLITE_OK);
    std::string sql = "UPDATE kernels SET cubin = X'00' WHERE key = '" + key + "'";
    EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
    EXPECT_EQ(sqlite3_changes(db), 1);
    sqlite3_close(db);
  }
  round("compiled");
  round("store");
}

// A store the engine cannot write to (a lock held past its busy timeout)
// costs the record, not the kernel.
TEST_F(GpuTuner, AFailedStoreWriteIsNotFatal) {
  TempDir dir;
  EngineOptions o;
  o.dbPath = dir.file("locked.db");
  auto engine = Engine::create(o);
  ASSERT_TRUE(bool(engine)) << llvm::toString(engine.takeError());
  (*engine)->store()->setBusyTimeout(50);
  sqlite3 *holder = nullptr;
  ASSERT_EQ(sqlite3_open(o.dbPath.c_str(), &holder), SQLITE_OK);
  // The write lock: readers go on (in either journal mode), writers wait.
  ASSERT_EQ(sqlite3_exec(holder, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
  KernelSpec s = spec(false, 64, 1024);
  auto k = (*engine)->get(s);
  sqlite3_exec(holder, "COMMIT", nullptr, nullptr, nullptr);
  sqlite3_close(holder);
  ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
  EXPECT_EQ((*engine)->lastSource(), "compiled");
  expectForwardMatchesFloat64(*k, s, tilejit::testing::testSeed());
  auto stored = (*engine)->store()->getKernel(k->key());
  ASSERT_TRUE(bool(stored));
  EXPECT_FALSE(stored->has_value()) << "the write failed, and nothing pretends it did not";
}

TEST_F(GpuTuner, DeterministicModeNeverTunes) {
  TempDir dir;
  EngineOptions o;
  o.dbPath = dir.file("det.db");
  o.policy = TunePolicy::OnMiss;
  o.deterministic = true;
  auto engine = Engine::create(o);
  ASSERT_TRUE(bool(engine)) << llvm::toString(engine.takeError());
  KernelSpec s = spec(true, 512, 2048);
  auto k = (*engine)->get(s);
  ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
  EXPECT_EQ((*engine)->lastSource(), "compiled");
  EXPECT_EQ(k->key(), kernelKey(s, getTemplate(s).defaultConfig(s)));
  auto timings = (*engine)->store()->timings(tuneKey(s));
  ASSERT_TRUE(bool(timings));
  EXPECT_TRUE(timings->empty()) << "nothing was timed";
}

TEST_F(GpuTuner, ABackgroundTuningErrorReachesWaitForBackground) {
  EngineOptions o;
  o.policy = TunePolicy::Background;
  o.tune.maxConfigs = 2;
  o.tune.compile = [](const KernelSpec &, const TileConfig &) -> llvm::Expected<CompiledKernel> {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), "no compiler today (test)");
  };
  auto engine = Engine::create(o);
  ASSERT_TRUE(bool(engine)) << llvm::toString(engine.takeError());
  KernelSpec s = spec(false, 256, 2048);
  auto k = (*engine)->get(s);
  ASSERT_TRUE(bool(k)) << "the default serves whatever the tuning meets: "
                       << llvm::toString(k.takeError());
  auto waited = (*engine)->waitForBackground();
  ASSERT_TRUE(bool(waited)) << "the tuning's error is reported";
  std::string msg = llvm::toString(std::move(waited));
  EXPECT_NE(msg.find("background tuning of " + s.canonical()), std::string::npos) << msg;
  EXPECT_NE(msg.find("no config"), std::string::npos) << msg;
  EXPECT_FALSE(bool((*engine)->waitForBackground())) << "reported once";
  EXPECT_EQ((*engine)->lastSource(), "compiled");
}

TEST_F(GpuTuner, BackgroundTuningSwitchesToTheWinner) {
  TempDir dir;
  EngineOptions o;
  o.dbPath = dir.file("bg.db");
  o.policy = TunePolicy::Background;
  o.tune.maxConfigs = 12;
  KernelSpec s = spec(false, 4096, 2048);
  KernelSpec sameBucket = spec(false, 3000, 2048);
  // The default is the first config measured and wins every near tie, so a
  // good default may well win and leave nothing to switch. The tuner here
  // times a far slower (but correct) kernel in the default's place: scalar
  // 2-byte accesses. Another config must win, and the engine, which serves
  // the real default first, must switch to it.
  TileConfig def = getTemplate(s).defaultConfig(s);
  o.tune.compile = [def](const KernelSpec &k, const TileConfig &c) {
    return compileKernel(k, c == def ? *TileConfig::parse("programs=0 rows=1 stream=0 "
                                                          "threads=1024 vec=1")
                                     : c);
  };
  auto engine = Engine::create(o);
  ASSERT_TRUE(bool(engine)) << llvm::toString(engine.takeError());
  auto first = (*engine)->get(s);
  ASSERT_TRUE(bool(first)) << llvm::toString(first.takeError());
  EXPECT_EQ((*engine)->lastSource(), "compiled") << "the default serves at once";
  auto firstOfBucket = (*engine)->get(sameBucket);
  ASSERT_TRUE(bool(firstOfBucket));
  auto waited = (*engine)->waitForBackground();
  ASSERT_FALSE(bool(waited)) << llvm::toString(std::move(waited));
  EXPECT_EQ((*engine)->lastSource(), "background-tuned");
  auto w = (*engine)->store()->winner(tuneKey(s));
  ASSERT_TRUE(w && *w);
  EXPECT_NE((*w)->config, def.canonical());
  std::string winnerKey = kernelKey(s, *TileConfig::parse((*w)->config));
  // One tuning served the bucket: 12 timings, and both row counts switched.
  auto timings = (*engine)->store()->timings(tuneKey(s));
  ASSERT_TRUE(bool(timings));
  EXPECT_EQ(timings->size(), 12u);
  for (const KernelSpec &x : {s, sameBucket}) {
    auto after = (*engine)->get(x);
    ASSERT_TRUE(bool(after));
    EXPECT_EQ(after->key(), winnerKey) << x.canonical() << " runs the winner after tuning";
  }
  // The kernel handed out first stays valid for whoever still holds it.
  EXPECT_GT(first->numEntries(), 0u);
}

// Engines with a tuning-cache server (in this process, on 127.0.0.1): the
// first gets a kernel the server compiles, the next (its own store) gets the
// same bytes from the server's store, and with the server gone an engine
// compiles here.
TEST_F(GpuTuner, EnginesGetTheirKernelsThroughTheServer) {
  TempDir dir;
  ServerOptions so;
  so.dbPath = dir.file("server.db");
  so.log = [](const std::string &) {};
  auto server = Server::start(std::move(so), "127.0.0.1:0");
  ASSERT_TRUE(bool(server)) << llvm::toString(server.takeError());
  ClientOptions co;
  co.address = "127.0.0.1:" + std::to_string((*server)->port());
  co.deadline = std::chrono::seconds(60);
  auto stats = [&] {
    auto stub =
        v1::TileJit::NewStub(grpc::CreateChannel(co.address, grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    v1::StatsResponse st;
    EXPECT_TRUE(stub->Stats(&ctx, v1::StatsRequest(), &st).ok());
    return st;
  };
  KernelSpec s = spec(false, 1000, 4100);
  std::string key = kernelKey(s, getTemplate(s).defaultConfig(s));
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round);
    EngineOptions o;
    o.dbPath = dir.file("engine" + std::to_string(round) + ".db");
    o.server = co;
    auto engine = Engine::create(o);
    ASSERT_TRUE(bool(engine)) << llvm::toString(engine.takeError());
    auto k = (*engine)->get(s);
    ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
    EXPECT_EQ((*engine)->lastSource(), "server");
    EXPECT_EQ(k->key(), key);
    expectForwardMatchesFloat64(*k, s, tilejit::testing::testSeed());
    auto explained = (*engine)->explain(s);
    ASSERT_TRUE(bool(explained)) << llvm::toString(explained.takeError());
    EXPECT_NE(explained->find("(from the server " + co.address + ")"), std::string::npos)
        << *explained;
    auto stored = (*engine)->store()->getKernel(key);
    ASSERT_TRUE(stored && *stored) << "kept in the engine's store";
    v1::StatsResponse st = stats();
    EXPECT_EQ(st.compiles(), 1u) << "compiled on the server once";
    EXPECT_EQ(st.store_hits(), uint64_t(round));
  }
  (*server)->drain(std::chrono::milliseconds(0), std::chrono::milliseconds(0));
  EngineOptions o;
  o.dbPath = dir.file("alone.db");
  o.server = co;
  o.server->deadline = std::chrono::milliseconds(300);
  auto engine = Engine::create(o);
  ASSERT_TRUE(bool(engine)) << llvm::toString(engine.takeError());
  auto k = (*engine)->get(s);
  ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
  EXPECT_EQ((*engine)->lastSource(), "compiled");
  expectForwardMatchesFloat64(*k, s, tilejit::testing::testSeed());
  auto explained = (*engine)->explain(spec(false, 1000, 4104));
  ASSERT_TRUE(bool(explained)) << llvm::toString(explained.takeError());
  EXPECT_NE(explained->find("server   last problem: server " + co.address), std::string::npos)
      << *explained;
}

// An on-miss tuning under the server's lease is published, and the next
// engine (its own store) runs the winner without tuning.
TEST_F(GpuTuner, AWinnerTunedThroughTheServerReachesTheNextEngine) {
  TempDir dir;
  ServerOptions so;
  so.dbPath = dir.file("server.db");
  so.log = [](const std::string &) {};
  auto server = Server::start(std::move(so), "127.0.0.1:0");
  ASSERT_TRUE(bool(server)) << llvm::toString(server.takeError());
  ClientOptions co;
  co.address = "127.0.0.1:" + std::to_string((*server)->port());
  co.deadline = std::chrono::seconds(60);
  KernelSpec s = spec(true, 2048, 1024);
  std::string winnerKey;
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round);
    EngineOptions o;
    o.dbPath = dir.file("engine" + std::to_string(round) + ".db");
    o.server = co;
    o.policy = TunePolicy::OnMiss;
    o.tune.maxConfigs = 4;
    auto engine = Engine::create(o);
    ASSERT_TRUE(bool(engine)) << llvm::toString(engine.takeError());
    auto k = (*engine)->get(s);
    ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
    auto timings = (*engine)->store()->timings(tuneKey(s));
    ASSERT_TRUE(bool(timings));
    if (round == 0) {
      EXPECT_EQ((*engine)->lastSource(), "tuned");
      EXPECT_FALSE(timings->empty()) << "tuned here";
      winnerKey = k->key();
    } else {
      EXPECT_EQ((*engine)->lastSource(), "server") << "the published winner, not a tuning";
      EXPECT_TRUE(timings->empty()) << "nothing was timed";
      EXPECT_EQ(k->key(), winnerKey);
      auto w = (*engine)->store()->winner(tuneKey(s));
      ASSERT_TRUE(w && *w) << "the server's winner is kept here too";
    }
  }
}

TEST_F(GpuTuner, OnMissTunesOncePerRowBucket) {
  EngineOptions o; // no store: the engine's memory keeps the winner
  o.policy = TunePolicy::OnMiss;
  o.tune.maxConfigs = 6;
  auto engine = Engine::create(o);
  ASSERT_TRUE(bool(engine)) << llvm::toString(engine.takeError());
  auto a = (*engine)->get(spec(true, 1500, 1024));
  ASSERT_TRUE(bool(a)) << llvm::toString(a.takeError());
  EXPECT_EQ((*engine)->lastSource(), "tuned");
  auto b = (*engine)->get(spec(true, 2048, 1024));
  ASSERT_TRUE(bool(b)) << llvm::toString(b.takeError());
  EXPECT_EQ((*engine)->lastSource(), "memory") << "same bucket: the winner's module, no tuning";
  EXPECT_EQ(a->key(), b->key());
  auto c = (*engine)->get(spec(true, 2049, 1024));
  ASSERT_TRUE(bool(c)) << llvm::toString(c.takeError());
  EXPECT_EQ((*engine)->lastSource(), "tuned") << "the next bucket is tuned";
}

// In both capture modes: PyTorch captures in global mode, where a driver
// call of another kind on any thread would break the graph.
TEST_F(GpuTuner, NothingIsCompiledDuringGraphCapture) {
  for (CUstreamCaptureMode mode :
       {CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, CU_STREAM_CAPTURE_MODE_GLOBAL}) {
    SCOPED_TRACE(mode == CU_STREAM_CAPTURE_MODE_GLOBAL ? "global" : "thread-local");
    EngineOptions o;
    auto engine = Engine::create(o);
    ASSERT_TRUE(bool(engine)) << llvm::toString(engine.takeError());
    auto drv = CudaDriver::get();
    ASSERT_TRUE(bool(drv));
    CUstream stream;
    ASSERT_EQ(drv->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    KernelSpec warm = spec(false, 64, 512);
    ASSERT_TRUE(bool((*engine)->get(warm, stream)));
    ASSERT_EQ(drv->cuStreamBeginCapture_v2(stream, mode), CUDA_SUCCESS);
    auto hit = (*engine)->get(warm, stream);
    EXPECT_TRUE(bool(hit)) << "a loaded kernel is served during capture";
    if (!hit)
      llvm::consumeError(hit.takeError());
    auto miss = (*engine)->get(spec(false, 64, 640), stream);
    ASSERT_FALSE(bool(miss));
    EXPECT_NE(llvm::toString(miss.takeError()).find("capturing"), std::string::npos);
    CUgraph graph = nullptr;
    EXPECT_EQ(drv->cuStreamEndCapture(stream, &graph), CUDA_SUCCESS)
        << "the refusal must not have broken the capture";
    if (graph)
      drv->cuGraphDestroy(graph);
    drv->cuStreamDestroy_v2(stream);
  }
}

// Two candidates are replaced by binaries that fault (an illegal address) and
// hang (an endless loop). Each costs a worker process; the tuning goes on,
// records both as failed, picks a verified winner, and this process's own
// context is untouched. Two more fail to compile: one for good (remembered
// as bad), one interrupted (its compiler process lost: not remembered).
TEST_F(GpuTuner, FaultingOrHangingCandidatesCostOnlyTheWorker) {
  TempDir dir;
  auto store = Store::open(dir.file("faults.db"));
  ASSERT_TRUE(bool(store)) << llvm::toString(store.takeError());
  KernelSpec s = spec(false, 4096, 4096);
  std::vector<TileConfig> space = getTemplate(s).configSpace(s);
  ASSERT_GE(space.size(), 6u);
  const TileConfig faulting = space[1], hanging = space[3], interrupted = space[4],
                   broken = space[5];
  TuneOptions opt;
  opt.maxConfigs = 6;
  opt.candidateSeconds = 3;
  opt.compile = [&](const KernelSpec &sp, const TileConfig &c) -> llvm::Expected<CompiledKernel> {
    if (c == interrupted)
      return llvm::make_error<CompileInterrupted>("the compiler process was killed");
    if (c == broken)
      return llvm::createStringError(llvm::inconvertibleErrorCode(), "NVRTC compilation failed");
    auto k = compileKernel(sp, c);
    if (!k || !(c == faulting || c == hanging))
      return k;
    // The hang spins on a global nothing ever writes: volatile accesses are
    // side effects, so the loop stays.
    std::string body = c == faulting ? "*(volatile int *)8 = 1;" : "while (tj_never == 0) {}";
    std::string src =
        "__device__ volatile int tj_never = 0;\n"
        "template <int N, int A> struct alignas(A) tj_bytes { unsigned char b[N]; };\n";
    // Each with the real entry's parameters (as many, of the same sizes), so
    // that the binary matches its launch information.
    for (const EntryInfo &e : k->entries) {
      std::string params;
      for (size_t i = 0; i < e.params.size(); ++i)
        params += std::string(i ? ", " : "") + "tj_bytes<" + std::to_string(e.params[i].bytes()) +
                  ", " + std::to_string(e.params[i].alignment()) + "> p" + std::to_string(i);
      src += "extern \"C\" __global__ void " + e.name + "(" + params + ") { " + body + " }\n";
    }
    auto broken = compileWithNvrtc(src, "broken", std::string(sp.target.archName()));
    if (!broken)
      return broken.takeError();
    k->cubin = broken->cubin;
    return k;
  };
  auto r = tune(s, store->get(), opt);
  ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
  ASSERT_EQ(r->candidates.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    const CandidateResult &c = r->candidates[i];
    std::printf("  [%s] %s %s\n", c.config.canonical().c_str(), c.status.c_str(),
                c.detail.substr(0, 160).c_str());
    const char *want = i == 1 ? "fault" : i == 3 ? "timeout" : i >= 4 ? "compile" : "ok";
    EXPECT_EQ(c.status, want) << c.config.canonical() << ": " << c.detail;
  }
  EXPECT_EQ(r->workersLost, 2);
  EXPECT_TRUE(r->winner == space[0] || r->winner == space[2]) << r->winner.canonical();
  for (const TileConfig &bad : {faulting, hanging, broken, interrupted}) {
    auto known = (*store)->isKnownBad(r->tuneKey, bad.canonical());
    ASSERT_TRUE(bool(known));
    EXPECT_EQ(*known, !(bad == interrupted)) << bad.canonical() << " in the negative cache";
  }
  // This process never ran them: its context still works.
  auto k = compileAndLoad(s, r->winner);
  ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
  expectForwardMatchesFloat64(**k, s, tilejit::testing::testSeed());
}

// The same configs measured in this process and in a worker: the same
// outcome for each, from the same binaries (registers and spills), and each
// tuning's winner is the rule's choice on its own timings.
TEST_F(GpuTuner, InProcessTuningMeasuresTheSame) {
  KernelSpec s = spec(true, 2048, 4096);
  std::vector<TileConfig> space = getTemplate(s).configSpace(s.tuningSpec());
  std::map<TuneOptions::Isolation, TuneResult> results;
  for (auto isolation : {TuneOptions::Isolation::InProcess, TuneOptions::Isolation::Process}) {
    TempDir dir;
    auto store = Store::open(dir.file("t.db"));
    ASSERT_TRUE(bool(store)) << llvm::toString(store.takeError());
    TuneOptions opt;
    opt.isolation = isolation;
    opt.maxConfigs = 8;
    auto r = tune(s, store->get(), opt);
    ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
    EXPECT_EQ(r->measured, 8);
    EXPECT_EQ(r->workersLost, 0);
    auto timings = (*store)->timings(r->tuneKey);
    ASSERT_TRUE(bool(timings));
    EXPECT_EQ(winnerOfRecordedTimings(space, *timings, opt.noise), r->winner.canonical());
    results[isolation] = std::move(*r);
  }
  const TuneResult &here = results[TuneOptions::Isolation::InProcess];
  const TuneResult &there = results[TuneOptions::Isolation::Process];
  ASSERT_EQ(here.candidates.size(), there.candidates.size());
  for (size_t i = 0; i < here.candidates.size(); ++i) {
    const CandidateResult &a = here.candidates[i], &b = there.candidates[i];
    EXPECT_EQ(a.config, b.config);
    EXPECT_EQ(a.status, b.status) << a.config.canonical();
    EXPECT_EQ(a.registers, b.registers) << a.config.canonical();
    EXPECT_GT(a.registers, 0) << a.config.canonical();
    EXPECT_EQ(a.spillBytes, b.spillBytes) << a.config.canonical();
  }
}

} // namespace
