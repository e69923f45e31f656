//===- TunerFakeWorkerTest.cpp - the tuner on fake timings, no GPU ---------===//
//
// tune() with a described device, a compile hook and the fake worker
// (tests/unit/FakeWorker.cpp), which reports for each candidate the median
// its config names: the choice, the store's records, the budget, the
// negative cache and the reuse of timings, all without a GPU.
//
//===----------------------------------------------------------------------===//
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "autotune/Tuner.h"
#include "autotune/Worker.h"
#include "compiler/templates/Template.h"
#include "core/Sha256.h"
#include "ops/gemm/GemmDecl.h"
#include "ops/rmsnorm/RmsNormDecl.h"
#include "runtime/CudaDriver.h"
#include "runtime/Store.h"
#include "tests/support/FakeWorker.h"
#include "tests/support/TempDir.h"

using namespace tilejit;
using tilejit::testing::TempDir;

namespace {

/// What the fake worker does with a candidate: FakeWorker.cpp's behaviour
/// number and the median it reports, in microseconds.
struct Plan {
  int behaviour = 1;
  int us = 1000;
  int sustainedUs = 0;        // the time under sustained load (0: us)
  int sustainedBehaviour = 0; // the behaviour under sustained load (0: behaviour)
};

class TunerFakeWorker : public ::testing::Test {
protected:
  void SetUp() override {
    auto w = tilejit::testing::startFakeWorker();
    ASSERT_TRUE(bool(w)) << llvm::toString(w.takeError());
    worker = std::move(*w);
    device = tilejit::testing::fakeDevice();
    spec.backward = false;
    spec.rows = 4096;
    spec.cols = 4096;
    spec.target = *device.target();
    spec.align = alignmentOf({}, spec.cols * 2);
    space = getTemplate(spec).configSpace(KernelSpec(spec).tuningSpec());
    ASSERT_GE(space.size(), 8u);
    auto s = Store::open(dir.file("t.db"));
    ASSERT_TRUE(bool(s)) << llvm::toString(s.takeError());
    store = std::move(*s);
  }

  /// Options that tune the first `n` configs of the space through the fake
  /// worker, compiling by plan: each compile is recorded, and its binary
  /// carries the plan in its config for the worker.
  TuneOptions options(int n) {
    TuneOptions o;
    o.maxConfigs = n;
    o.deviceInfo = &device;
    o.worker = worker.get();
    o.compileThreads = 1;
    o.compile = [this](const KernelSpec &s, const TileConfig &c) -> llvm::Expected<CompiledKernel> {
      Plan p;
      {
        std::lock_guard<std::mutex> lock(mu);
        compiled.push_back(c.canonical());
        if (auto it = plan.find(c.canonical()); it != plan.end())
          p = it->second;
      }
      if (delay)
        delay(c);
      CompiledKernel k;
      k.spec = s;
      k.config.set("vec", p.behaviour).set("us", p.us);
      if (p.sustainedUs)
        k.config.set("sus", p.sustainedUs);
      if (p.sustainedBehaviour)
        k.config.set("susfail", p.sustainedBehaviour);
      k.key = sha256Hex("fake " + c.canonical());
      k.cubin = {'f', 'a', 'k', 'e'};
      return k;
    };
    return o;
  }
  void setPlan(size_t i, int behaviour, int us) { plan[space[i].canonical()] = {behaviour, us}; }
  /// A square GEMM of `size` (a template tuned under load) as the spec
  /// tuned; `space` becomes its config space.
  KernelSpec useGemm(int64_t size) {
    gemm::Params g;
    g.m = g.n = g.k = size;
    g.target = *device.target();
    KernelSpec gs = g;
    space = getTemplate(gs).configSpace(gs.tuningSpec());
    return gs;
  }
  bool wasCompiled(size_t i) {
    std::lock_guard<std::mutex> lock(mu);
    return std::find(compiled.begin(), compiled.end(), space[i].canonical()) != compiled.end();
  }

  TempDir dir;
  std::unique_ptr<Store> store;
  std::unique_ptr<WorkerProcess> worker;
  DeviceInfo device;
  rmsnorm::Params spec;
  std::vector<TileConfig> space;
  std::map<std::string, Plan> plan;
  std::function<void(const TileConfig &)> delay;
  std::mutex mu;
  std::vector<std::string> compiled;
};

TEST_F(TunerFakeWorker, ChoosesOnTheMeasuredMediansAndRecordsEverything) {
  // Medians 1.5, 1.0, 1.02 (a tie with 1.0 within 3 %), 5.0 (more than 3x
  // the best so far: one sample), a verify failure, 1.2.
  setPlan(0, 1, 1500);
  setPlan(1, 1, 1000);
  setPlan(2, 1, 1020);
  setPlan(3, 1, 5000);
  setPlan(4, 6, 900);
  setPlan(5, 1, 1200);
  auto r = tune(spec, store.get(), options(6));
  ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
  ASSERT_EQ(r->candidates.size(), 6u);
  const char *status[] = {"ok", "ok", "ok", "ok", "verify", "ok"};
  const double median[] = {1.5, 1.0, 1.02, 5.0, 0, 1.2};
  const int reps[] = {30, 30, 30, 1, 0, 30};
  for (size_t i = 0; i < 6; ++i) {
    const CandidateResult &c = r->candidates[i];
    SCOPED_TRACE(c.config.canonical());
    EXPECT_EQ(c.config, space[i]) << "candidates in config-space order";
    EXPECT_EQ(c.status, status[i]) << c.detail;
    EXPECT_DOUBLE_EQ(c.medianMs, median[i]);
    EXPECT_EQ(c.reps, reps[i]) << "the first candidate has no cutoff; the fifth is cut at 3x";
  }
  EXPECT_EQ(r->winner, space[1]) << "1.02 ties with 1.0 but comes later; 0.9 failed";
  EXPECT_DOUBLE_EQ(r->winnerMs, 1.0);
  EXPECT_EQ(r->measured, 5);
  EXPECT_EQ(r->tuneKey, tuneKey(spec));
  // The store: five timings, the failure, the winner and its kernel.
  auto timings = store->timings(r->tuneKey);
  ASSERT_TRUE(bool(timings));
  EXPECT_EQ(timings->size(), 5u);
  for (const Timing &t : *timings) {
    EXPECT_EQ(t.gpu, "Fake GPU");
    EXPECT_EQ(t.smCount, 132);
  }
  auto bad = store->isKnownBad(r->tuneKey, space[4].canonical());
  ASSERT_TRUE(bool(bad));
  EXPECT_TRUE(*bad);
  auto w = store->winner(r->tuneKey);
  ASSERT_TRUE(w && *w);
  EXPECT_EQ((*w)->config, space[1].canonical());
  EXPECT_EQ((*w)->kernelKey, sha256Hex("fake " + space[1].canonical()));
  auto k = store->getKernel((*w)->kernelKey);
  ASSERT_TRUE(k && *k);
  EXPECT_EQ((*k)->config, space[1].canonical());
}

TEST_F(TunerFakeWorker, GemmFinalistsAreRankedAgainUnderSustainedLoad) {
  // A GEMM (tuned under load): the screening's fastest four and the default
  // are timed again in turns; the winner is the fastest under load, which
  // the screening ranked third.
  KernelSpec gs = useGemm(8192);
  ASSERT_GE(space.size(), 8u);
  ASSERT_EQ(space[0], getTemplate(gs).defaultConfig(gs.tuningSpec())) << "the default comes first";
  plan[space[0].canonical()] = {1, 1100, 1200}; // the default: fifth in the screening
  plan[space[1].canonical()] = {1, 1000, 1300};
  plan[space[2].canonical()] = {1, 1010, 1250};
  plan[space[3].canonical()] = {1, 1020, 1150};
  plan[space[4].canonical()] = {1, 1030, 1400};
  plan[space[5].canonical()] = {1, 1200, 1000}; // out of the finals: not its sustained time
  for (size_t i = 6; i < 8; ++i)
    plan[space[i].canonical()] = {1, 1300, 900};
  auto r = tune(gs, store.get(), options(8));
  ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
  EXPECT_EQ(r->finalists, 5);
  EXPECT_EQ(r->winner, space[3]) << r->reason;
  EXPECT_DOUBLE_EQ(r->winnerMs, 1.02) << "the screening's median, as the store's timings";
  const double sustained[] = {1.2, 1.3, 1.25, 1.15, 1.4, 0, 0, 0};
  for (size_t i = 0; i < 8; ++i) {
    SCOPED_TRACE(space[i].canonical());
    EXPECT_DOUBLE_EQ(r->candidates[i].sustainedMs, sustained[i]);
  }
  EXPECT_NE(r->reason.find("sustained load (5 finalists"), std::string::npos) << r->reason;
  EXPECT_NE(r->reason.find("fastest median 1.1500 ms"), std::string::npos) << r->reason;
  // The store keeps the screening's timings and the winner.
  auto w = store->winner(r->tuneKey);
  ASSERT_TRUE(w && *w);
  EXPECT_EQ((*w)->config, space[3].canonical());
  EXPECT_DOUBLE_EQ((*w)->medianMs, 1.02);
  // A re-tune finds every timing stored: nothing is measured, so no finals
  // (no measuring side), and the stored screening decides.
  auto again = tune(gs, store.get(), options(8));
  ASSERT_TRUE(bool(again)) << llvm::toString(again.takeError());
  EXPECT_EQ(again->reused, 8);
  EXPECT_EQ(again->finalists, 0);
  EXPECT_EQ(again->winner, space[1]) << again->reason;
  // RMSNorm (memory-bound) has no finals.
  auto rr = tune(spec, store.get(), options(4));
  ASSERT_TRUE(bool(rr)) << llvm::toString(rr.takeError());
  EXPECT_EQ(rr->finalists, 0);
  for (const CandidateResult &c : rr->candidates)
    EXPECT_EQ(c.sustainedMs, 0);
}

TEST_F(TunerFakeWorker, FinalistsThatFailUnderLoadAreRecordedAndPassedOver) {
  // Four GEMM candidates; under sustained load three fail (wrong results,
  // a launch error): recorded as failures, out of the choice; one finalist
  // left is no ranking, so the screening decides among the rest.
  KernelSpec gs = useGemm(4096);
  plan[space[0].canonical()] = {1, 1100, 1100};
  plan[space[1].canonical()] = {1, 1000, 900, 6};
  plan[space[2].canonical()] = {1, 1010, 900, 5};
  plan[space[3].canonical()] = {1, 1200, 1000, 6};
  auto r = tune(gs, store.get(), options(4));
  ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
  EXPECT_EQ(r->candidates[1].status, "verify");
  EXPECT_EQ(r->candidates[2].status, "launch");
  EXPECT_EQ(r->candidates[3].status, "verify");
  EXPECT_NE(r->candidates[1].detail.find("under sustained load"), std::string::npos);
  EXPECT_EQ(r->finalists, 0) << "two finalists are needed to rank";
  EXPECT_EQ(r->winner, space[0]) << r->reason;
  for (size_t i : {1, 2, 3}) {
    auto bad = store->isKnownBad(r->tuneKey, space[i].canonical());
    ASSERT_TRUE(bool(bad));
    EXPECT_TRUE(*bad) << space[i].canonical();
  }
}

TEST_F(TunerFakeWorker, FinalsCheckOnlyWhatThisTuningDidNotCheck) {
  // A first tuning of four configs, then one of six reusing their timings:
  // the stored finalists are checked in the first round of the finals
  // (behaviour 9 fails a check), those measured in this screening are only
  // timed.
  KernelSpec gs = useGemm(4096);
  for (size_t i = 0; i < 6; ++i)
    plan[space[i].canonical()] = {1, 1000 + 10 * int(i), 900, 0};
  auto first = tune(gs, store.get(), options(4));
  ASSERT_TRUE(bool(first)) << llvm::toString(first.takeError());
  plan[space[1].canonical()] = {1, 1010, 900, 9}; // stored: checked, fails
  plan[space[4].canonical()] = {1, 990, 800, 9};  // measured now: not checked again
  auto r = tune(gs, store.get(), options(6));
  ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
  EXPECT_EQ(r->reused, 4);
  EXPECT_EQ(r->candidates[1].status, "verify") << "a stored finalist is checked";
  EXPECT_EQ(r->candidates[4].status, "ok") << r->candidates[4].detail;
  EXPECT_EQ(r->winner, space[4]) << r->reason;
}

TEST_F(TunerFakeWorker, ARetuneSkipsKnownBadConfigsAndReusesTimings) {
  setPlan(0, 1, 1000);
  setPlan(1, 5, 1000); // a launch failure: remembered
  setPlan(2, 7, 1000); // out of device memory: the machine's state, not remembered
  setPlan(3, 8, 1000); // spills: remembered
  setPlan(4, 1, 2000);
  auto first = tune(spec, store.get(), options(5));
  ASSERT_TRUE(bool(first)) << llvm::toString(first.takeError());
  EXPECT_EQ(first->candidates[1].status, "launch");
  EXPECT_EQ(first->candidates[2].status, "launch");
  EXPECT_EQ(first->candidates[3].status, "spills");
  EXPECT_EQ(first->candidates[3].spillBytes, 4096);
  for (size_t i : {1, 2, 3}) {
    auto bad = store->isKnownBad(first->tuneKey, space[i].canonical());
    ASSERT_TRUE(bool(bad));
    EXPECT_EQ(*bad, i != 2) << space[i].canonical();
  }

  compiled.clear();
  setPlan(2, 1, 500); // the memory is there now
  auto again = tune(spec, store.get(), options(5));
  ASSERT_TRUE(bool(again)) << llvm::toString(again.takeError());
  const char *status[] = {"stored", "known-bad", "ok", "known-bad", "stored"};
  for (size_t i = 0; i < 5; ++i)
    EXPECT_EQ(again->candidates[i].status, status[i]) << space[i].canonical();
  EXPECT_TRUE(wasCompiled(2));
  for (size_t i : {0, 1, 3, 4})
    EXPECT_FALSE(wasCompiled(i)) << space[i].canonical() << " compiled again";
  EXPECT_EQ(again->measured, 1);
  EXPECT_EQ(again->reused, 2);
  EXPECT_DOUBLE_EQ(again->candidates[4].medianMs, 2.0);
  EXPECT_EQ(again->winner, space[2]);
}

TEST_F(TunerFakeWorker, TimingsFromAnotherGpuModelAreMeasuredAgain) {
  std::string tk = tuneKey(spec);
  auto timing = [&](size_t i, const char *gpu, int sms, double ms) {
    Timing t;
    t.tuneKey = tk;
    t.config = space[i].canonical();
    t.medianMs = t.p20Ms = t.p80Ms = ms;
    t.reps = 30;
    t.gpu = gpu;
    t.smCount = sms;
    return t;
  };
  ASSERT_FALSE(bool(store->addTiming(timing(0, "Other GPU", 132, 0.1))));
  ASSERT_FALSE(bool(store->addTiming(timing(1, "Fake GPU", 114, 0.1))));
  ASSERT_FALSE(bool(store->addTiming(timing(2, "Fake GPU", 132, 0.7))));
  auto r = tune(spec, store.get(), options(3));
  ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
  EXPECT_EQ(r->candidates[0].status, "ok");
  EXPECT_EQ(r->candidates[1].status, "ok");
  EXPECT_EQ(r->candidates[2].status, "stored");
  EXPECT_DOUBLE_EQ(r->candidates[0].medianMs, 1.0) << "measured here, not 0.1 from elsewhere";
  EXPECT_TRUE(wasCompiled(0));
  EXPECT_TRUE(wasCompiled(1));
  EXPECT_EQ(r->reused, 1);
  EXPECT_EQ(r->winner, space[2]) << "0.7 ms stored on this GPU model";
}

TEST_F(TunerFakeWorker, NothingIsMeasuredPastTheBudget) {
  // The second compile takes longer than the whole budget: it and every
  // config after it are over budget.
  delay = [this](const TileConfig &c) {
    if (c == space[1])
      std::this_thread::sleep_for(std::chrono::milliseconds(2200));
  };
  TuneOptions o = options(6);
  o.budgetSeconds = 2;
  auto r = tune(spec, store.get(), o);
  ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
  EXPECT_EQ(r->candidates[0].status, "ok");
  for (size_t i = 1; i < 6; ++i)
    EXPECT_EQ(r->candidates[i].status, "budget") << space[i].canonical();
  EXPECT_EQ(r->measured, 1);
  EXPECT_EQ(r->winner, space[0]);
  auto timings = store->timings(r->tuneKey);
  ASSERT_TRUE(bool(timings));
  EXPECT_EQ(timings->size(), 1u);
  for (size_t i = 1; i < 6; ++i) {
    auto bad = store->isKnownBad(r->tuneKey, space[i].canonical());
    ASSERT_TRUE(bool(bad));
    EXPECT_FALSE(*bad) << "over budget is not a failure of " << space[i].canonical();
  }
}

TEST_F(TunerFakeWorker, TheSameWinnerWhateverOrderCompilesFinishIn) {
  // Three tie within 3 % of the fastest (1.0): the earliest, space[2], wins
  // however the compiles are scheduled.
  const int us[] = {1400, 1300, 1025, 1000, 1010, 2000, 1029, 1100};
  for (size_t i = 0; i < 8; ++i)
    setPlan(i, 1, us[i]);
  std::mt19937 rng(20261201);
  for (int round = 0; round < 4; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    std::map<std::string, int> waitMs;
    for (size_t i = 0; i < 8; ++i)
      waitMs[space[i].canonical()] = int(rng() % 40);
    delay = [waitMs](const TileConfig &c) {
      std::this_thread::sleep_for(std::chrono::milliseconds(waitMs.at(c.canonical())));
    };
    TuneOptions o = options(8);
    o.compileThreads = 4;
    auto r = tune(spec, nullptr, o);
    ASSERT_TRUE(bool(r)) << llvm::toString(r.takeError());
    EXPECT_EQ(r->winner, space[2]);
    EXPECT_DOUBLE_EQ(r->winnerMs, 1.025);
    for (size_t i = 0; i < 8; ++i) {
      EXPECT_EQ(r->candidates[i].config, space[i]);
      EXPECT_DOUBLE_EQ(r->candidates[i].medianMs, us[i] / 1000.0);
    }
  }
}

/// Whether a tuning's error is the store's, and its message.
std::pair<bool, std::string> described(llvm::Error err) {
  std::pair<bool, std::string> out{false, ""};
  llvm::handleAllErrors(std::move(err), [&](const llvm::ErrorInfoBase &e) {
    out = {isStoreFailure(e), e.message()};
  });
  return out;
}

TEST_F(TunerFakeWorker, NoWorkingConfigIsAnError) {
  for (size_t i = 0; i < 3; ++i)
    setPlan(i, 6, 1000);
  auto r = tune(spec, store.get(), options(3));
  ASSERT_FALSE(bool(r));
  auto [storeFailure, msg] = described(r.takeError());
  EXPECT_FALSE(storeFailure) << "the candidates failed, not the store";
  EXPECT_NE(msg.find("no config of rmsnorm_fwd"), std::string::npos) << msg;
  EXPECT_NE(msg.find("3 tried"), std::string::npos) << msg;
}

// A store that cannot record the result (here one opened for reading only)
// is the store's failure, told apart from the tuning's own.
TEST_F(TunerFakeWorker, AStoreThatCannotRecordIsTheStoresFailure) {
  setPlan(0, 1, 300);
  setPlan(1, 1, 200);
  auto readOnly = Store::openForReading(dir.file("t.db"));
  ASSERT_TRUE(bool(readOnly)) << llvm::toString(readOnly.takeError());
  ASSERT_TRUE(*readOnly);
  auto r = tune(spec, readOnly->get(), options(2));
  ASSERT_FALSE(bool(r));
  auto [storeFailure, msg] = described(r.takeError());
  EXPECT_TRUE(storeFailure) << msg;
  EXPECT_EQ(msg.rfind("the store: ", 0), 0u) << msg;
}

TEST_F(TunerFakeWorker, ASpecTheDeviceCannotRunIsRefused) {
  DeviceInfo small = device;
  small.name = "Fake A100";
  small.ccMajor = 8;
  TuneOptions o = options(2);
  o.deviceInfo = &small;
  auto r = tune(spec, nullptr, o);
  ASSERT_FALSE(bool(r));
  std::string msg = llvm::toString(r.takeError());
  EXPECT_NE(msg.find("cannot tune on Fake A100"), std::string::npos) << msg;
}

} // namespace
