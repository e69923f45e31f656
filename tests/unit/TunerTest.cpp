//===- TunerTest.cpp - the tuner's choice on recorded timings -------------===//
#include <gtest/gtest.h>

#include "autotune/Tuner.h"

using namespace tilejit;

namespace {

CandidateResult cand(const char *cfg, const char *status, double ms) {
  CandidateResult c;
  c.config = *TileConfig::parse(cfg);
  c.status = status;
  c.medianMs = ms;
  return c;
}

TEST(ChooseWinner, FastestWinsOutsideTheNoise) {
  std::vector<CandidateResult> c = {cand("a=1", "ok", 1.00), cand("a=2", "ok", 0.90),
                                    cand("a=3", "ok", 0.95)};
  EXPECT_EQ(chooseWinner(c, 0.015), 1);
}

TEST(ChooseWinner, TiesWithinNoiseGoToTheEarliestConfig) {
  std::vector<CandidateResult> c = {cand("a=1", "ok", 0.905), cand("a=2", "ok", 0.90),
                                    cand("a=3", "stored", 0.901)};
  std::string why;
  EXPECT_EQ(chooseWinner(c, 0.015, &why), 0);
  EXPECT_NE(why.find("3 candidate(s)"), std::string::npos) << why;
  // The same timings in another order of arrival give the same answer.
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(chooseWinner(c, 0.015), 0);
}

TEST(ChooseWinner, FailedCandidatesNeverWin) {
  std::vector<CandidateResult> c = {cand("a=1", "verify", 0.1), cand("a=2", "compile", 0.0),
                                    cand("a=3", "ok", 2.0)};
  EXPECT_EQ(chooseWinner(c, 0.015), 2);
  std::vector<CandidateResult> none = {cand("a=1", "verify", 0.1)};
  EXPECT_EQ(chooseWinner(none, 0.015), -1);
}

TEST(TuneKey, IncludesRowsAndToolchain) {
  KernelSpec s;
  s.cols = 4096;
  s.rows = 8192;
  std::string k = tuneKey(s);
  EXPECT_NE(k.find("rows=8192"), std::string::npos);
  EXPECT_NE(k.find("nvrtc="), std::string::npos);
  EXPECT_NE(k.find("template="), std::string::npos);
  EXPECT_NE(k.find("compiler="), std::string::npos);
  KernelSpec t = s;
  t.rows = 16384;
  EXPECT_NE(tuneKey(t), k);
}

TEST(TuneKey, RowCountsShareAPowerOfTwoBucket) {
  EXPECT_EQ(tuningRows(1), 1);
  EXPECT_EQ(tuningRows(2), 2);
  EXPECT_EQ(tuningRows(3), 4);
  EXPECT_EQ(tuningRows(4099), 8192);
  EXPECT_EQ(tuningRows(8192), 8192);
  EXPECT_EQ(tuningRows(8193), 16384);
  EXPECT_EQ(tuningRows(kMaxTuningRows), kMaxTuningRows);
  EXPECT_EQ(tuningRows(kMaxTuningRows + 1), kMaxTuningRows);
  EXPECT_EQ(tuningRows(int64_t(1) << 40), kMaxTuningRows);
  KernelSpec a;
  a.cols = 4096;
  a.rows = 5000;
  KernelSpec b = a;
  b.rows = 8192;
  KernelSpec c = a;
  c.rows = 8193;
  EXPECT_EQ(tuneKey(a), tuneKey(b));
  EXPECT_NE(tuneKey(a), tuneKey(c));
  EXPECT_NE(tuneKey(a).find("rows=8192"), std::string::npos);
  EXPECT_EQ(tuningSpec(a).rows, 8192);
  EXPECT_EQ(tuningSpec(a).cols, 4096);
}

} // namespace
