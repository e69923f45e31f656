//===- MeasureTest.cpp - a candidate's timing schedule, with fake timings ----===//
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "autotune/Harness.h"
#include "autotune/Measure.h"

using namespace tilejit;

namespace {

/// Feeds timeSamples the sample times `times` (ms per sample, in order) and
/// records how many launches each sample was asked for.
struct FakeClock {
  explicit FakeClock(std::vector<float> t) : times(std::move(t)) {}
  std::vector<float> times;
  std::vector<int> inners;
  llvm::Expected<float> operator()(int inner) {
    inners.push_back(inner);
    size_t i = inners.size() - 1;
    return i < times.size() ? times[i] : times.back();
  }
};

std::vector<double> samples(int reps, double cutoff, FakeClock &clock) {
  auto ms = timeSamples(reps, cutoff, std::ref(clock));
  if (!ms) {
    ADD_FAILURE() << llvm::toString(ms.takeError());
    return {};
  }
  return *ms;
}

TEST(Measure, SummarizesMedianAndPercentilesByRank) {
  // 30 samples 1..30 in scrambled order: ranks 15, 6 and 24 of the sorted.
  std::vector<double> ms;
  for (int i = 0; i < 30; ++i)
    ms.push_back(double((i * 7) % 30 + 1));
  Measurement m;
  summarizeSamples(ms, m);
  EXPECT_EQ(m.medianMs, 16);
  EXPECT_EQ(m.p20Ms, 7);
  EXPECT_EQ(m.p80Ms, 25);
  EXPECT_EQ(m.reps, 30);
  // An outlier in place of the slowest moves none of them.
  *std::max_element(ms.begin(), ms.end()) = 1e6;
  summarizeSamples(ms, m);
  EXPECT_EQ(m.medianMs, 16);
  EXPECT_EQ(m.p80Ms, 25);
  // One sample is all three; two take the upper one as the median.
  summarizeSamples({4.0}, m);
  EXPECT_EQ(m.medianMs, 4);
  EXPECT_EQ(m.p20Ms, 4);
  EXPECT_EQ(m.p80Ms, 4);
  EXPECT_EQ(m.reps, 1);
  summarizeSamples({3.0, 1.0}, m);
  EXPECT_EQ(m.medianMs, 3);
  EXPECT_EQ(m.p20Ms, 1);
  EXPECT_EQ(m.p80Ms, 3);
  // Five: p80 is the largest (rank 4), p20 the second smallest (rank 1).
  summarizeSamples({5, 4, 3, 2, 1}, m);
  EXPECT_EQ(m.medianMs, 3);
  EXPECT_EQ(m.p20Ms, 2);
  EXPECT_EQ(m.p80Ms, 5);
}

TEST(Measure, TheFirstSampleSizesTheLaunchCountAndTwoMoreWarmUp) {
  // A first sample of 0.01 ms: 20 launches per sample from then on.
  FakeClock clock{{0.01f, 99.0f, 99.0f, 0.2f, 0.4f, 0.3f}};
  std::vector<double> ms = samples(3, 0, clock);
  EXPECT_EQ(clock.inners, (std::vector<int>{1, 20, 20, 20, 20, 20}));
  // The calibration and the two warm-up samples are not kept; the rest are
  // per launch.
  ASSERT_EQ(ms.size(), 3u);
  EXPECT_FLOAT_EQ(ms[0], 0.2f / 20);
  EXPECT_FLOAT_EQ(ms[1], 0.4f / 20);
  EXPECT_FLOAT_EQ(ms[2], 0.3f / 20);
}

TEST(Measure, TheLaunchCountStaysBetweenOneAndAThousand) {
  FakeClock slow{{5.0f, 5.0f}};
  samples(2, 0, slow);
  EXPECT_EQ(slow.inners.back(), 1) << "a long kernel: one launch per sample";
  FakeClock fast{{0.0f, 1.0f}};
  samples(2, 0, fast);
  EXPECT_EQ(fast.inners.back(), 1000) << "a kernel too short to time: the most";
  FakeClock edge{{0.0002f, 1.0f}};
  samples(2, 0, edge);
  EXPECT_EQ(edge.inners.back(), 1000);
}

TEST(Measure, ASampleAboveTheCutoffIsTheOnlyOne) {
  // First kept sample 4 ms, cutoff 3 ms (a multiple of the best so far).
  FakeClock clock{{1.0f, 1.0f, 1.0f, 4.0f, 1.0f}};
  std::vector<double> ms = samples(30, 3.0, clock);
  ASSERT_EQ(ms.size(), 1u);
  EXPECT_EQ(ms[0], 4.0);
  EXPECT_EQ(clock.inners.size(), 4u) << "nothing is run after it";
  // At the cutoff, or with none, every sample is taken.
  FakeClock at{{1.0f, 1.0f, 1.0f, 3.0f, 9.0f}};
  EXPECT_EQ(samples(30, 3.0, at).size(), 30u);
  FakeClock none{{1.0f, 1.0f, 1.0f, 4.0f}};
  EXPECT_EQ(samples(30, 0, none).size(), 30u);
  // Only the first kept sample is judged: a later slow one is kept.
  FakeClock later{{1.0f, 1.0f, 1.0f, 1.0f, 50.0f, 1.0f}};
  std::vector<double> kept = samples(3, 3.0, later);
  ASSERT_EQ(kept.size(), 3u);
  EXPECT_EQ(kept[1], 50.0);
}

TEST(Measure, SlowKernelsTakeAboutSixtyMillisecondsOfSamples) {
  FakeClock fast{{0.01f, 0.2f}}; // 20 launches a sample
  EXPECT_EQ(samples(30, 0, fast).size(), 30u);
  EXPECT_EQ(fast.inners.back(), 20);
  FakeClock slow{{5.0f}}; // 5 ms a launch: 12 samples make 60 ms
  EXPECT_EQ(samples(30, 0, slow).size(), 12u);
  EXPECT_EQ(slow.inners.size(), 13u) << "2 ms or more: the calibration is the only warm-up";
  FakeClock slower{{40.0f}};
  EXPECT_EQ(samples(30, 0, slower).size(), 3u) << "never fewer than 3 of 5 ms or more";
  FakeClock three{{3.0f}};
  EXPECT_EQ(samples(30, 0, three).size(), 20u);
  FakeClock four{{15.0f}}; // 60 ms: 4 samples
  EXPECT_EQ(samples(30, 0, four).size(), 4u);
  FakeClock two{{25.0f}}; // 2.4 samples make 60 ms; at least 3
  EXPECT_EQ(samples(30, 0, two).size(), 3u);
  FakeClock shorter{{1.5f}};
  EXPECT_EQ(samples(30, 0, shorter).size(), 30u);
  EXPECT_EQ(shorter.inners.size(), 33u) << "under 2 ms: two more warm-up samples";
  FakeClock few{{40.0f}};
  EXPECT_EQ(samples(3, 0, few).size(), 3u) << "never more than asked";
}

TEST(Measure, SustainedSamplesLastAboutTheirLengthAfterAWarmUp) {
  // A first launch of 0.5 ms: samples of 20 launches (10 ms), one more
  // warm-up, then 3 kept, per launch.
  FakeClock clock{{0.5f, 99.0f, 8.0f, 10.0f, 12.0f}};
  auto ms = timeSustained(3, 10.0, std::ref(clock));
  ASSERT_TRUE(bool(ms)) << llvm::toString(ms.takeError());
  EXPECT_EQ(clock.inners, (std::vector<int>{1, 20, 20, 20, 20}));
  ASSERT_EQ(ms->size(), 3u);
  EXPECT_FLOAT_EQ((*ms)[0], 8.0f / 20);
  EXPECT_FLOAT_EQ((*ms)[2], 12.0f / 20);
  // A launch longer than a sample: one launch a sample.
  FakeClock slow{{30.0f}};
  auto one = timeSustained(2, 10.0, std::ref(slow));
  ASSERT_TRUE(bool(one));
  EXPECT_EQ(slow.inners, (std::vector<int>{1, 1, 1, 1}));
}

TEST(Measure, RandomInputsAreTheSameWhateverTheThreads) {
  // A large input is filled by several threads, a small one by one: the
  // values depend on the seed and the position only.
  auto small = randomValues(DType::BF16, 1000, 7);
  auto large = randomValues(DType::BF16, size_t(10) << 20, 7);
  auto larger = randomValues(DType::BF16, size_t(23) << 20, 7);
  ASSERT_EQ(large.size(), size_t(20) << 20);
  EXPECT_TRUE(std::equal(small.begin(), small.end(), large.begin()));
  EXPECT_TRUE(std::equal(large.begin(), large.end(), larger.begin()));
  EXPECT_NE(randomValues(DType::BF16, 1000, 8), small) << "another seed, other values";
}

TEST(Measure, AFailedSampleIsTheCandidatesError) {
  int calls = 0;
  auto ms = timeSamples(30, 0, [&](int) -> llvm::Expected<float> {
    if (++calls == 5)
      return llvm::createStringError(llvm::inconvertibleErrorCode(), "launch failed (fake)");
    return 1.0f;
  });
  ASSERT_FALSE(bool(ms));
  EXPECT_EQ(llvm::toString(ms.takeError()), "launch failed (fake)");
  EXPECT_EQ(calls, 5) << "nothing runs after the error";
}

} // namespace
