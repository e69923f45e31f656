//===- CompareTest.cpp - the GPU tests' comparison, proved on the CPU -------===//
//
// The GPU tests judge kernels with tests/support/Compare.h. Here it is given
// results as a correct kernel rounds them (which must pass) and the faults
// a broken kernel makes at a ragged edge (which must fail, naming the
// element): a tensor-wide relative error dilutes both below its bound.
//
//===----------------------------------------------------------------------===//
#include <gtest/gtest.h>

#include <algorithm>

#include "ops/rmsnorm/RmsNormDecl.h"
#include "tests/support/Compare.h"
#include "tests/support/RmsNormReference.h"
#include "tests/support/Seed.h"

using namespace tilejit;
using namespace tilejit::testing;

namespace {

/// RMSNorm forward inputs, the float64 reference, and y as a correct kernel
/// writes it: computed in f32 from the same inputs, rounded to the dtype.
struct Forward {
  int64_t rows, cols;
  HostTensor x, w, y;
  RmsNormReference ref;
  Forward(int64_t r, int64_t c, DType t, std::mt19937_64 &rng)
      : rows(r), cols(c), x(t, r * c), w(t, c), y(t, r * c) {
    x.randomNormal(rng, 0.0f, 1.0f);
    w.randomNormal(rng, 1.0f, 0.1f);
    ref = rmsNormReference(rows, cols, false, x, w, nullptr, 1e-5);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j)
        y.set(i * cols + j, x.get(i * cols + j) * float(ref.rstd[i]) * w.get(j));
  }
};

class Comparator : public ::testing::Test {
protected:
  void SetUp() override { rng.seed(seed); }
  void TearDown() override {
    if (HasFailure())
      std::printf("%s\n", replayHint(seed).c_str());
  }
  uint64_t seed = testSeed();
  std::mt19937_64 rng;
};

TEST_F(Comparator, ACorrectlyRoundedResultPasses) {
  for (DType t : {DType::BF16, DType::F16, DType::F32}) {
    SCOPED_TRACE(dtypeName(t));
    Forward f(17, 4097, t, rng);
    EXPECT_TRUE(allClose(f.y, f.ref.y, tolerance(t), 4097));
    Forward tall(65537, 7, t, rng);
    EXPECT_TRUE(allClose(tall.y, tall.ref.y, tolerance(t), 7));
  }
}

TEST_F(Comparator, TheMaskedLastColumnScaledBy1_5Fails) {
  Forward f(17, 4097, DType::BF16, rng);
  for (int64_t i = 0; i < f.rows; ++i)
    f.y.set(i * 4097 + 4096, f.y.get(i * 4097 + 4096) * 1.5f);
  Comparison c = compare(f.y, f.ref.y, tolerance(DType::BF16));
  EXPECT_FALSE(c.ok());
  EXPECT_EQ(c.worst % 4097, 4096u) << "the worst element is in the last column";
  EXPECT_GE(c.mismatches, 15u) << "nearly every element of the column is off";
  EXPECT_LE(c.mismatches, 17u) << "and nothing else";
  auto r = allClose(f.y, f.ref.y, tolerance(DType::BF16), 4097);
  ASSERT_FALSE(r);
  std::string msg = r.message();
  EXPECT_NE(msg.find(indexName(c.worst, 4097)), std::string::npos) << msg;
  EXPECT_NE(msg.find(", 4096] (flat "), std::string::npos) << msg;
  EXPECT_NE(msg.find("got "), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected "), std::string::npos) << msg;
}

TEST_F(Comparator, TheLastFiveRowsZeroedFail) {
  Forward f(65537, 7, DType::BF16, rng);
  for (int64_t i = 65532; i < 65537; ++i)
    for (int64_t j = 0; j < 7; ++j)
      f.y.set(i * 7 + j, 0.0f);
  Comparison c = compare(f.y, f.ref.y, tolerance(DType::BF16));
  EXPECT_FALSE(c.ok());
  EXPECT_GE(c.worst / 7, 65532u) << "the worst element is in a zeroed row";
  EXPECT_GE(c.mismatches, 30u);
  EXPECT_LE(c.mismatches, 35u);
  auto r = allClose(f.y, f.ref.y, tolerance(DType::BF16), 7);
  ASSERT_FALSE(r);
  EXPECT_NE(std::string(r.message()).find("[6553"), std::string::npos) << r.message();
}

TEST_F(Comparator, OneElementOffOrNonFiniteFails) {
  for (DType t : {DType::BF16, DType::F16, DType::F32}) {
    SCOPED_TRACE(dtypeName(t));
    Forward f(3, 1000, t, rng);
    // The largest element, moved by 6 % (bf16), 1 % (f16), 0.01 % (f32):
    // each several times its dtype's rtol.
    size_t at = 0;
    for (size_t i = 0; i < f.ref.y.size(); ++i)
      if (std::fabs(f.ref.y[i]) > std::fabs(f.ref.y[at]))
        at = i;
    float factor = t == DType::BF16 ? 1.0625f : t == DType::F16 ? 1.01f : 1.0001f;
    HostTensor bad = f.y;
    bad.set(at, f.y.get(at) * factor);
    Comparison c = compare(bad, f.ref.y, tolerance(t));
    EXPECT_EQ(c.mismatches, 1u);
    EXPECT_EQ(c.worst, at);
    for (float v : {NAN, INFINITY, -INFINITY}) {
      HostTensor nonFinite = f.y;
      nonFinite.set(1234, v);
      Comparison n = compare(nonFinite, f.ref.y, tolerance(t));
      EXPECT_EQ(n.mismatches, 1u) << v;
      EXPECT_EQ(n.worst, 1234u) << v;
    }
  }
}

/// A sum in f32 the way a kernel's threads and their tree make it: runs of
/// 64 in order, then pairs of partial sums.
float treeSum(const std::vector<float> &v) {
  std::vector<float> partial;
  for (size_t i = 0; i < v.size(); i += 64) {
    float s = 0;
    for (size_t j = i; j < std::min(v.size(), i + 64); ++j)
      s += v[j];
    partial.push_back(s);
  }
  while (partial.size() > 1) {
    std::vector<float> next;
    for (size_t i = 0; i < partial.size(); i += 2)
      next.push_back(partial[i] + (i + 1 < partial.size() ? partial[i + 1] : 0.0f));
    partial.swap(next);
  }
  return partial.empty() ? 0.0f : partial[0];
}

// The tolerances are not tighter than f32 arithmetic: RMSNorm forward and
// backward computed in f32 pass at the GPU tests' hardest shapes. The sum of
// squares is a kernel's tree (a running sum of 10^5 squares is off by 3e-5,
// more than f32's rtol); the backward's sums are running sums, less accurate
// than a kernel's.
TEST_F(Comparator, AnF32ComputationPasses) {
  struct Shape {
    int64_t rows, cols;
    DType t;
    bool zcg;
  };
  for (const Shape &sh : std::vector<Shape>{{1, 1, DType::BF16, false},
                                            {65537, 7, DType::BF16, true},
                                            {2, 100000, DType::BF16, false},
                                            {300, 20480, DType::F16, true},
                                            {33, 4096, DType::F32, false},
                                            {7, 4097, DType::F32, true}}) {
    SCOPED_TRACE(std::to_string(sh.rows) + "x" + std::to_string(sh.cols) + " " +
                 std::string(dtypeName(sh.t)));
    const size_t n = size_t(sh.cols);
    HostTensor x(sh.t, sh.rows * n), w(sh.t, n), dy(sh.t, sh.rows * n);
    x.randomNormal(rng, 0.0f, 1.0f);
    dy.randomNormal(rng, 0.0f, 1.0f);
    w.randomNormal(rng, sh.zcg ? 0.0f : 1.0f, 0.1f);
    RmsNormReference ref = rmsNormReference(sh.rows, sh.cols, sh.zcg, x, w, &dy, 1e-5);
    HostTensor y(sh.t, sh.rows * n), rstd(DType::F32, sh.rows), dx(sh.t, sh.rows * n), dw(sh.t, n);
    std::vector<float> g(n), dwSum(n, 0.0f);
    for (size_t j = 0; j < n; ++j)
      g[j] = w.get(j) + (sh.zcg ? 1.0f : 0.0f);
    for (int64_t i = 0; i < sh.rows; ++i) {
      std::vector<float> squares(n);
      for (size_t j = 0; j < n; ++j)
        squares[j] = x.get(i * n + j) * x.get(i * n + j);
      float ss = treeSum(squares);
      float rs = 1.0f / std::sqrt(ss / float(n) + 1e-5f);
      rstd.set(i, rs);
      for (size_t j = 0; j < n; ++j)
        y.set(i * n + j, x.get(i * n + j) * rs * g[j]);
      // The backward receives the reference's rstd rounded to f32.
      float rsf = float(ref.rstd[i]);
      float dot = 0;
      for (size_t j = 0; j < n; ++j)
        dot += dy.get(i * n + j) * g[j] * (x.get(i * n + j) * rsf);
      float mean = dot / float(n);
      for (size_t j = 0; j < n; ++j) {
        float xhat = x.get(i * n + j) * rsf;
        dx.set(i * n + j, rsf * (dy.get(i * n + j) * g[j] - xhat * mean));
        dwSum[j] += dy.get(i * n + j) * xhat;
      }
    }
    for (size_t j = 0; j < n; ++j)
      dw.set(j, dwSum[j]);
    EXPECT_TRUE(allClose(y, ref.y, tolerance(sh.t), n)) << "y";
    EXPECT_TRUE(allClose(rstd, ref.rstd, tolerance(DType::F32), 0)) << "rstd";
    EXPECT_TRUE(allClose(dx, ref.dx, tolerance(sh.t), n, ref.dxScale)) << "dx";
    EXPECT_TRUE(allClose(dw, ref.dw, tolerance(sh.t), 0, ref.dwScale)) << "dw";
  }
}

TEST(ComparatorBounds, AtolFollowsTheReferencesMagnitude) {
  // ref = {s, 0}: the zero element may be off by atol * rms(ref) = atol * s/sqrt(2).
  for (double s : {1e-3, 1.0, 1e4}) {
    SCOPED_TRACE(s);
    HostTensor a(DType::F32, 2);
    std::vector<double> ref = {s, 0};
    Tolerance tol{0, 1e-2, 0};
    double bound = 1e-2 * s / std::sqrt(2.0);
    a.set(0, float(s));
    a.set(1, float(bound * 0.99));
    EXPECT_TRUE(allClose(a, ref, tol, 0));
    a.set(1, float(bound * 1.01));
    EXPECT_FALSE(allClose(a, ref, tol, 0));
  }
  // An all-zero reference takes only zeros.
  HostTensor z(DType::F32, 4);
  for (size_t i = 0; i < 4; ++i)
    z.set(i, 0.0f);
  EXPECT_TRUE(allClose(z, {0, 0, 0, 0}, tolerance(DType::F32), 0));
  z.set(2, 1e-30f);
  auto r = allClose(z, {0, 0, 0, 0}, tolerance(DType::F32), 0);
  EXPECT_FALSE(r);
  EXPECT_NE(std::string(r.message()).find("worst [2]"), std::string::npos) << r.message();
}

TEST(ComparatorBounds, RtolIsPerElementAndScaleCoversCancellation) {
  HostTensor a(DType::F32, 3);
  std::vector<double> ref = {1000, 1, 1e-3};
  Tolerance tol{1e-2, 0, 1e-5};
  // Each element may be off by 1 % of itself, no more: a large neighbour
  // lends the small ones nothing.
  a.set(0, 1009.0f);
  a.set(1, 1.009f);
  a.set(2, 1.009e-3f);
  EXPECT_TRUE(allClose(a, ref, tol, 0));
  a.set(2, 1.02e-3f);
  Comparison c = compare(a, ref, tol);
  EXPECT_EQ(c.mismatches, 1u);
  EXPECT_EQ(c.worst, 2u);
  // Where the element is a difference of terms of magnitude 100, f32
  // rounding relative to them (1e-5 * 100) is allowed.
  std::vector<double> scale = {0, 0, 100};
  a.set(2, float(1e-3 + 0.9e-3));
  EXPECT_TRUE(allClose(a, ref, tol, 0, scale));
  a.set(2, float(1e-3 + 1.2e-3));
  EXPECT_FALSE(allClose(a, ref, tol, 0, scale));
}

TEST(ComparatorBounds, AnInfiniteReferenceIsMatchedExactlyAndWidensNothing) {
  // An LSE row without keys is -inf: it takes only -inf, and the finite
  // elements beside it keep their own bounds (rms over the finite ones).
  HostTensor a(DType::F32, 3);
  std::vector<double> ref = {-INFINITY, 1.0, 2.0};
  Tolerance tol{1e-3, 1e-3, 0};
  a.set(0, -INFINITY);
  a.set(1, 1.0f);
  a.set(2, 2.0f);
  EXPECT_TRUE(allClose(a, ref, tol, 0));
  a.set(2, 2.5f);
  EXPECT_FALSE(allClose(a, ref, tol, 0));
  a.set(2, 2.0f);
  a.set(0, -1e30f);
  EXPECT_FALSE(allClose(a, ref, tol, 0));
  a.set(0, INFINITY);
  EXPECT_FALSE(allClose(a, ref, tol, 0));
}

TEST(ComparatorBounds, AShortResultFails) {
  HostTensor a(DType::F32, 2);
  a.set(0, 1.0f);
  a.set(1, 2.0f);
  EXPECT_FALSE(allClose(a, {1, 2, 3}, tolerance(DType::F32), 0));
}

} // namespace
