//===- TunerTest.cpp - the tuner's choice on recorded timings -------------===//
#include <algorithm>
#include <cmath>
#include <gtest/gtest.h>

#include "autotune/Tuner.h"
#include "ops/rmsnorm/RmsNormDecl.h"

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
  EXPECT_NE(why.find("fastest median 0.9000 ms"), std::string::npos) << why;
  EXPECT_NE(why.find("(0.9050 ms)"), std::string::npos) << why;
}

// The three tied candidates and one outside the noise, in every order of the
// config space: whichever position the fastest holds, the tied candidate
// that comes first wins, and the slow one never does.
TEST(ChooseWinner, TheEarliestTiedConfigWinsWhereverTheFastestIs) {
  const std::vector<CandidateResult> c = {cand("a=1", "ok", 0.905), cand("a=2", "ok", 0.90),
                                          cand("a=3", "stored", 0.901), cand("a=4", "ok", 0.95)};
  std::vector<int> order = {0, 1, 2, 3};
  int orders = 0;
  do {
    std::vector<CandidateResult> space;
    for (int i : order)
      space.push_back(c[i]);
    int expected = order[0] == 3 ? 1 : 0; // the first position not held by a=4
    EXPECT_EQ(chooseWinner(space, 0.015), expected)
        << "order " << order[0] << order[1] << order[2] << order[3];
    ++orders;
  } while (std::next_permutation(order.begin(), order.end()));
  EXPECT_EQ(orders, 24);
}

TEST(ChooseWinner, ATieExactlyAtTheWindowsEdgeIsATie) {
  // 1.0 * (1 + 0.25) is exactly 1.25 in binary: the edge itself ties, the
  // next double above it does not.
  std::vector<CandidateResult> c = {cand("a=1", "ok", 1.25), cand("a=2", "ok", 1.0)};
  EXPECT_EQ(chooseWinner(c, 0.25), 0);
  c[0].medianMs = std::nextafter(1.25, 2.0);
  EXPECT_EQ(chooseWinner(c, 0.25), 1);
}

TEST(ChooseWinner, ZeroNoiseTiesOnlyEqualTimings) {
  std::vector<CandidateResult> c = {cand("a=1", "ok", 1.0000001), cand("a=2", "ok", 1.0),
                                    cand("a=3", "ok", 1.0)};
  std::string why;
  EXPECT_EQ(chooseWinner(c, 0.0, &why), 1);
  EXPECT_NE(why.find("2 candidate(s) within 0.0 %"), std::string::npos) << why;
}

TEST(ChooseWinner, OnlyMeasuredOrStoredCandidatesCount) {
  EXPECT_EQ(chooseWinner({}, 0.03), -1);
  std::vector<CandidateResult> c;
  for (const char *status :
       {"compile", "spills", "launch", "verify", "fault", "timeout", "known-bad", "budget", ""})
    c.push_back(cand("a=1", status, 0.5));
  EXPECT_EQ(chooseWinner(c, 0.03), -1);
  c.push_back(cand("a=2", "stored", 2.0));
  EXPECT_EQ(chooseWinner(c, 0.03), int(c.size()) - 1);
}

TEST(ChooseWinner, FailedCandidatesNeverWin) {
  std::vector<CandidateResult> c = {cand("a=1", "verify", 0.1), cand("a=2", "compile", 0.0),
                                    cand("a=3", "ok", 2.0)};
  EXPECT_EQ(chooseWinner(c, 0.015), 2);
  std::vector<CandidateResult> none = {cand("a=1", "verify", 0.1)};
  EXPECT_EQ(chooseWinner(none, 0.015), -1);
}

TEST(TuneKey, IncludesRowsAndToolchain) {
  rmsnorm::Params s;
  s.cols = 4096;
  s.rows = 8192;
  std::string k = tuneKey(s);
  EXPECT_NE(k.find("rows=8192"), std::string::npos);
  EXPECT_EQ(k.rfind(tuneKeyPrefix(s), 0), 0u) << "the spec part comes first";
  EXPECT_NE(k.find("| nvptx-"), std::string::npos) << "the back end is part of it";
  EXPECT_NE(tuneKey(s, Backend::Cuda), k);
  std::string id = toolchainId(s);
  EXPECT_NE(id.find("nvrtc="), std::string::npos);
  EXPECT_EQ(id.find("backend=nvptx template="), 0u) << id;
  EXPECT_NE(id.find("compiler="), std::string::npos);
  EXPECT_NE(id.find("llvm="), std::string::npos);
  rmsnorm::Params t = s;
  t.rows = 16384;
  EXPECT_NE(tuneKey(t), k);
}

TEST(TuneKey, RowCountsShareAPowerOfTwoBucket) {
  auto tuningRows = [](int64_t rows) {
    rmsnorm::Params p;
    p.cols = 64;
    p.rows = rows;
    return rmsnorm::Params(KernelSpec(p).tuningSpec()).rows;
  };
  const int64_t cap = rmsnorm::forwardOp().params[rmsnorm::Rows].tuneBucketCap;
  EXPECT_EQ(cap, 65536);
  EXPECT_EQ(tuningRows(1), 1);
  EXPECT_EQ(tuningRows(2), 2);
  EXPECT_EQ(tuningRows(3), 4);
  EXPECT_EQ(tuningRows(4099), 8192);
  EXPECT_EQ(tuningRows(8192), 8192);
  EXPECT_EQ(tuningRows(8193), 16384);
  EXPECT_EQ(tuningRows(cap), cap);
  EXPECT_EQ(tuningRows(cap + 1), cap);
  EXPECT_EQ(tuningRows(int64_t(1) << 40), cap);
  rmsnorm::Params a;
  a.cols = 4096;
  a.rows = 5000;
  rmsnorm::Params b = a;
  b.rows = 8192;
  rmsnorm::Params c = a;
  c.rows = 8193;
  EXPECT_EQ(tuneKey(a), tuneKey(b));
  EXPECT_NE(tuneKey(a), tuneKey(c));
  EXPECT_NE(tuneKey(a).find("rows=8192"), std::string::npos);
  EXPECT_EQ(rmsnorm::Params(KernelSpec(a).tuningSpec()).rows, 8192);
  EXPECT_EQ(rmsnorm::Params(KernelSpec(a).tuningSpec()).cols, 4096);
}

} // namespace
