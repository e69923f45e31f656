//===- TunerGpuTest.cpp - tuning and the engine on the GPU ------------------===//
#include <gtest/gtest.h>

#include <cstdlib>
#include <unistd.h>

#include "autotune/Harness.h"
#include "autotune/Tuner.h"
#include "runtime/CudaDriver.h"
#include "service/Engine.h"

using namespace tilejit;

namespace {

std::string tempDir() {
  char tmpl[] = "/tmp/tilejit-test-XXXXXX";
  const char *d = mkdtemp(tmpl);
  return d ? d : "/tmp";
}

class GpuTuner : public ::testing::Test {
protected:
  void SetUp() override {
    auto dev = queryDevice(0);
    if (!dev)
      GTEST_SKIP() << "no GPU here: " << llvm::toString(dev.takeError());
    arch = dev->arch();
  }
  KernelSpec spec(OpKind op, int64_t rows, int64_t cols) {
    KernelSpec s;
    s.op = op;
    s.rows = rows;
    s.cols = cols;
    s.arch = arch;
    s.align = alignmentOf({}, cols * 2);
    return s;
  }
  std::string arch;
};

TEST_F(GpuTuner, TunesVerifiesAndRecordsEveryTiming) {
  std::string dir = tempDir();
  auto store = Store::open(dir + "/t.db");
  ASSERT_TRUE(bool(store)) << llvm::toString(store.takeError());
  for (auto s : {spec(OpKind::RmsNormFwd, 8192, 4096), spec(OpKind::RmsNormBwd, 4099, 1000)}) {
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
    // The winner is never slower than every other candidate measured alone.
    for (auto &c : r->candidates)
      if (c.status == "ok") {
        EXPECT_LE(r->winnerMs, c.medianMs * (1 + opt.noise) + 1e-9) << c.config.canonical();
      }

    // Tuning again with the same store measures nothing and picks the same.
    auto again = tune(s, store->get(), opt);
    ASSERT_TRUE(bool(again)) << llvm::toString(again.takeError());
    EXPECT_EQ(again->measured, 0);
    EXPECT_EQ(again->winner, r->winner);

    // A fresh measurement: the first winner must again be within the noise
    // band of the fastest.
    auto fresh = tune(s, nullptr, opt);
    ASSERT_TRUE(bool(fresh)) << llvm::toString(fresh.takeError());
    double best = 1e30, firstWinner = -1;
    for (auto &c : fresh->candidates) {
      if (c.status != "ok") continue;
      best = std::min(best, c.medianMs);
      if (c.config == r->winner) firstWinner = c.medianMs;
    }
    ASSERT_GT(firstWinner, 0);
    EXPECT_LE(firstWinner, best * (1 + 3 * opt.noise))
        << "first winner " << r->winner.canonical() << " fresh winner " << fresh->winner.canonical();
    std::printf("  fresh tuning picked [%s] (%s)\n", fresh->winner.canonical().c_str(),
                fresh->winner == r->winner ? "same" : "different, within noise");
  }
}

TEST_F(GpuTuner, EngineLoadsFromMemoryStoreOrCompiler) {
  std::string dir = tempDir();
  KernelSpec s = spec(OpKind::RmsNormFwd, 1000, 4097);
  auto harness = makeHarness(s.op);
  ASSERT_FALSE(bool(harness->prepare(s, 7)));
  for (int round = 0; round < 2; ++round) {
    EngineOptions o;
    o.dbPath = dir + "/engine.db";
    auto engine = Engine::create(o);
    ASSERT_TRUE(bool(engine)) << llvm::toString(engine.takeError());
    auto k = (*engine)->get(s);
    ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
    EXPECT_EQ((*engine)->lastSource(), round == 0 ? "compiled" : "store");
    ASSERT_FALSE(bool(harness->bind(*k)));
    ASSERT_FALSE(bool(harness->poison(nullptr)));
    ASSERT_FALSE(bool(harness->run(*k, nullptr)));
    auto drv = CudaDriver::get();
    ASSERT_EQ(drv->cuCtxSynchronize(), CUDA_SUCCESS);
    auto verified = harness->verify();
    EXPECT_FALSE(bool(verified)) << llvm::toString(std::move(verified));
    auto again = (*engine)->get(s);
    ASSERT_TRUE(bool(again));
    EXPECT_EQ(&*again, &*k) << "a second get is a memory hit";
  }
}

TEST_F(GpuTuner, BackgroundTuningSwitchesToTheWinner) {
  std::string dir = tempDir();
  EngineOptions o;
  o.dbPath = dir + "/bg.db";
  o.policy = TunePolicy::Background;
  o.tune.maxConfigs = 12;
  auto engine = Engine::create(o);
  ASSERT_TRUE(bool(engine)) << llvm::toString(engine.takeError());
  KernelSpec s = spec(OpKind::RmsNormFwd, 4096, 2048);
  auto first = (*engine)->get(s);
  ASSERT_TRUE(bool(first)) << llvm::toString(first.takeError());
  EXPECT_EQ((*engine)->lastSource(), "compiled") << "the default serves at once";
  auto waited = (*engine)->waitForBackground();
  ASSERT_FALSE(bool(waited)) << llvm::toString(std::move(waited));
  EXPECT_EQ((*engine)->lastSource(), "background-tuned");
  auto after = (*engine)->get(s);
  ASSERT_TRUE(bool(after));
  auto w = (*engine)->store()->winner(tuneKey(s));
  ASSERT_TRUE(w && *w);
  EXPECT_EQ(after->key(), kernelKey(s, *TileConfig::parse((*w)->config)))
      << "after tuning, get() returns the winner's kernel";
  // The kernel handed out first stays valid for whoever still holds it.
  EXPECT_GT(first->numEntries(), 0u);
}

TEST_F(GpuTuner, NothingIsCompiledDuringGraphCapture) {
  EngineOptions o;
  auto engine = Engine::create(o);
  ASSERT_TRUE(bool(engine)) << llvm::toString(engine.takeError());
  auto drv = CudaDriver::get();
  ASSERT_TRUE(bool(drv));
  CUstream stream;
  ASSERT_EQ(drv->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  KernelSpec warm = spec(OpKind::RmsNormFwd, 64, 512);
  ASSERT_TRUE(bool((*engine)->get(warm, stream)));
  ASSERT_EQ(drv->cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), CUDA_SUCCESS);
  auto hit = (*engine)->get(warm, stream);
  EXPECT_TRUE(bool(hit)) << "a loaded kernel is served during capture";
  if (!hit) llvm::consumeError(hit.takeError());
  auto miss = (*engine)->get(spec(OpKind::RmsNormFwd, 64, 640), stream);
  ASSERT_FALSE(bool(miss));
  EXPECT_NE(llvm::toString(miss.takeError()).find("capturing"), std::string::npos);
  CUgraph graph = nullptr;
  EXPECT_EQ(drv->cuStreamEndCapture(stream, &graph), CUDA_SUCCESS);
  if (graph) drv->cuGraphDestroy(graph);
  drv->cuStreamDestroy_v2(stream);
}

} // namespace
