//===- KernelSpecTest.cpp - specs, configs, keys, grid rules ---------------===//
#include <gtest/gtest.h>

#include <array>
#include <set>

#include "compiler/Compiler.h"
#include "compiler/KernelSpec.h"
#include "compiler/LaunchInfo.h"
#include "compiler/templates/Template.h"

using namespace tilejit;

namespace {

std::string errorOf(llvm::Error e) { return llvm::toString(std::move(e)); }
template <class T> std::string errorOf(llvm::Expected<T> &e) {
  return e ? std::string() : llvm::toString(e.takeError());
}
template <class T> std::string errorOf(llvm::Expected<T> &&e) { return errorOf(e); }

TEST(KernelSpec, CanonicalFormRoundTrips) {
  KernelSpec s;
  s.op = OpKind::RmsNormBwd;
  s.dtype = DType::F16;
  s.wdtype = DType::F32;
  s.rows = 123;
  s.cols = 4096;
  s.zeroCenteredGamma = true;
  s.align = 8;
  s.arch = "sm_80";
  auto parsed = KernelSpec::parse(s.canonical());
  ASSERT_TRUE(bool(parsed)) << errorOf(parsed);
  EXPECT_EQ(parsed->canonical(), s.canonical());
  EXPECT_EQ(s.canonical(),
            "rmsnorm_bwd dtype=f16 wdtype=f32 rows=123 cols=4096 zcg=1 align=8 arch=sm_80");
  EXPECT_EQ(s.canonical(false).find("rows="), std::string::npos);
}

// A spec may name the target GPU's multiprocessors when it is not the arch's
// usual part; persistent grids are sized by them, so they key the kernel.
TEST(KernelSpec, TargetMultiprocessors) {
  KernelSpec s;
  s.op = OpKind::RmsNormBwd;
  s.cols = 4096;
  EXPECT_EQ(s.targetSMs(), 132);
  s.setTargetSMs(132);
  EXPECT_EQ(s.sms, 0) << "the usual count has one canonical form";
  EXPECT_EQ(s.canonical().find("sms="), std::string::npos);
  KernelSpec pcie = s;
  pcie.setTargetSMs(114);
  EXPECT_EQ(pcie.targetSMs(), 114);
  EXPECT_NE(pcie.canonical(false).find(" sms=114"), std::string::npos);
  auto parsed = KernelSpec::parse(pcie.canonical());
  ASSERT_TRUE(bool(parsed)) << errorOf(parsed);
  EXPECT_EQ(*parsed, pcie);
  EXPECT_FALSE(pcie.sameKernel(s));
  EXPECT_NE(pcie.hash(false), s.hash(false));
  EXPECT_NE(kernelKey(pcie, {}), kernelKey(s, {}));
  EXPECT_EQ(errorOf(s.checkTarget("sm_90a", 132)), "");
  EXPECT_EQ(errorOf(pcie.checkTarget("sm_90a", 114)), "");
  EXPECT_NE(errorOf(s.checkTarget("sm_90a", 114))
                .find("with 132 multiprocessors, the GPU is "
                      "sm_90a with 114"),
            std::string::npos);
  EXPECT_NE(errorOf(s.checkTarget("sm_80", 108)).find("is for sm_90a"), std::string::npos);
  // The persistent backward takes one program per multiprocessor of the
  // target, and clusters of 2 half as many.
  const KernelTemplate &t = getTemplate(OpKind::RmsNormBwd);
  EXPECT_EQ(t.defaultConfig(s).get("programs"), 132);
  EXPECT_EQ(t.defaultConfig(pcie).get("programs"), 114);
  pcie.cols = s.cols = 16384;
  EXPECT_EQ(t.defaultConfig(pcie).get("programs"), 57);
  EXPECT_EQ(t.defaultConfig(pcie).get("cluster"), 2);
  for (auto &c : t.configSpace(pcie)) {
    if (c.has("cluster"))
      EXPECT_LE(c.get("programs") * c.get("cluster"), 114) << c.canonical();
    else
      EXPECT_EQ(c.get("programs") % 114, 0) << "programs per multiprocessor: " << c.canonical();
  }

  EXPECT_NE(errorOf(KernelSpec::parse("rmsnorm_fwd cols=8 sms=132")).find("usual count"),
            std::string::npos);
  EXPECT_NE(errorOf(KernelSpec::parse("rmsnorm_fwd cols=8 sms=-4")).find("sms"), std::string::npos);
  EXPECT_NE(errorOf(KernelSpec::parse("rmsnorm_fwd cols=8 sms=5000")).find("[0, 1024]"),
            std::string::npos);
}

TEST(KernelSpec, BadInputNamesTheField) {
  EXPECT_NE(errorOf(KernelSpec::parse("gemm dtype=bf16")).find("unknown op 'gemm'"),
            std::string::npos);
  EXPECT_NE(errorOf(KernelSpec::parse("rmsnorm_fwd dtype=int8")).find("unknown dtype 'int8'"),
            std::string::npos);
  EXPECT_NE(errorOf(KernelSpec::parse("rmsnorm_fwd cols=abc")).find("not an integer"),
            std::string::npos);
  EXPECT_NE(errorOf(KernelSpec::parse("rmsnorm_fwd cols=0")).find("cols must be >= 1"),
            std::string::npos);
  EXPECT_NE(errorOf(KernelSpec::parse("rmsnorm_fwd cols=8 arch=sm_99")).find("unknown arch"),
            std::string::npos);
  EXPECT_NE(errorOf(KernelSpec::parse("rmsnorm_fwd cols=8 colour=red"))
                .find("unknown spec field 'colour'"),
            std::string::npos);
  EXPECT_NE(errorOf(KernelSpec::parse("rmsnorm_fwd cols=7 align=16"))
                .find("rows are at most 2-byte aligned"),
            std::string::npos);
  EXPECT_NE(
      errorOf(KernelSpec::parse("rmsnorm_fwd cols=99999999999999999999")).find("not an integer"),
      std::string::npos);
  EXPECT_NE(errorOf(KernelSpec::parse("")).find("empty"), std::string::npos);
}

TEST(TileConfig, CanonicalIsSortedAndParses) {
  TileConfig c;
  c.set("vec", 8).set("threads", 256).set("rows", 1);
  EXPECT_EQ(c.canonical(), "rows=1 threads=256 vec=8");
  auto p = TileConfig::parse("  vec=8 rows=1   threads=256 ");
  ASSERT_TRUE(bool(p));
  EXPECT_EQ(*p, c);
  EXPECT_FALSE(bool(TileConfig::parse("vec")));
  EXPECT_NE(errorOf(TileConfig::parse("=3")).find("not name=value"), std::string::npos);
}

TEST(Alignment, LargestPowerOfTwoDividingEverything) {
  EXPECT_EQ(alignmentOf({0x1000, 0x2000}, 8192), 16);
  EXPECT_EQ(alignmentOf({0x1002}, 8192), 2);
  EXPECT_EQ(alignmentOf({0x1000}, 8194), 2);
  EXPECT_EQ(alignmentOf({0x1008}, 2000), 8);
  EXPECT_EQ(alignmentOf({0x1001}, 2), 1);
}

TEST(GridRule, EvaluatesMinOfPostfixPrograms) {
  GridRule g;
  // min(s0 ceildiv 4, 264)
  g.results = {{{GridRule::Sym, 0}, {GridRule::Const, 4}, {GridRule::CeilDiv, 0}},
               {{GridRule::Const, 264}}};
  g.symbols = {{0, 0}};
  int64_t s = 17;
  EXPECT_EQ(g.evaluate(&s, 1), 5);
  s = 100000;
  EXPECT_EQ(g.evaluate(&s, 1), 264);
  s = 0;
  EXPECT_EQ(g.evaluate(&s, 1), 0);
  // Malformed programs and division by zero give -1, never garbage.
  GridRule bad;
  bad.results = {{{GridRule::Sym, 0}, {GridRule::Const, 0}, {GridRule::FloorDiv, 0}}};
  EXPECT_EQ(bad.evaluate(&s, 1), -1);
  bad.results = {{{GridRule::Add, 0}}};
  EXPECT_EQ(bad.evaluate(&s, 1), -1);
  bad.results = {{{GridRule::Sym, 3}}};
  EXPECT_EQ(bad.evaluate(&s, 1), -1);
}

TEST(Key, ChangesWithEveryIngredientButNotWithRows) {
  KernelSpec s;
  s.cols = 4096;
  TileConfig c = getTemplate(s.op).defaultConfig(s);
  std::string k = kernelKey(s, c);
  EXPECT_EQ(k.size(), 64u);
  KernelSpec rows = s;
  rows.rows = 99;
  EXPECT_EQ(kernelKey(rows, c), k) << "rows is a launch-time size";
  KernelSpec cols = s;
  cols.cols = 4104;
  EXPECT_NE(kernelKey(cols, c), k);
  KernelSpec arch = s;
  arch.arch = "sm_80";
  EXPECT_NE(kernelKey(arch, c), k);
  TileConfig c2 = c;
  c2.set("vec", 4);
  EXPECT_NE(kernelKey(s, c2), k);
  KernelSpec zcg = s;
  zcg.zeroCenteredGamma = true;
  EXPECT_NE(kernelKey(zcg, c), k);
}

TEST(RmsNormTemplate, ConfigChecksNameTheProblem) {
  KernelSpec s;
  s.cols = 4096;
  const KernelTemplate &t = getTemplate(OpKind::RmsNormFwd);
  auto check = [&](const char *cfg) { return errorOf(t.checkConfig(s, *TileConfig::parse(cfg))); };
  EXPECT_EQ(check("vec=8 threads=256 rows=1 stream=0 programs=0"), "");
  EXPECT_NE(check("vec=3 threads=256 rows=1 stream=0 programs=0").find("vec must be"),
            std::string::npos);
  EXPECT_NE(check("vec=8 threads=250 rows=1 stream=0 programs=0").find("multiple of 32"),
            std::string::npos);
  EXPECT_NE(check("vec=8 threads=256 rows=3 stream=0 programs=0").find("must divide"),
            std::string::npos);
  EXPECT_NE(check("vec=1 threads=32 rows=1 stream=0 programs=0").find("each thread would hold"),
            std::string::npos);
  EXPECT_NE(check("vec=8 threads=256").find("lacks 'rows'"), std::string::npos);
  EXPECT_NE(check("vec=8 threads=256 rows=1 stream=0 programs=0 bogus=2")
                .find("unknown config parameter 'bogus'"),
            std::string::npos);
  s.align = 4;
  EXPECT_NE(check("vec=8 threads=256 rows=1 stream=0 programs=0").find("aligned"),
            std::string::npos);
}

TEST(RmsNormTemplate, DefaultsAndSpacesAreValid) {
  for (OpKind op : {OpKind::RmsNormFwd, OpKind::RmsNormBwd})
    for (int64_t cols :
         {1, 7, 64, 1000, 4096, 4097, 8192, 16384, 32768, 32769, 65537, 100000, 1 << 20}) {
      KernelSpec s;
      s.op = op;
      s.cols = cols;
      s.align = alignmentOf({}, cols * 2);
      const KernelTemplate &t = getTemplate(op);
      EXPECT_EQ(errorOf(t.checkConfig(s, t.defaultConfig(s))), "") << s.canonical();
      auto space = t.configSpace(s);
      EXPECT_GE(space.size(), 1u);
      EXPECT_EQ(space.front(), t.defaultConfig(s)) << "the default comes first";
      for (auto &c : space)
        EXPECT_EQ(errorOf(t.checkConfig(s, c)), "") << s.canonical() << " " << c.canonical();
      if (cols == 4096 || cols == 8192) {
        // Wide enough to tune, small enough to tune in seconds.
        EXPECT_GE(space.size(), 24u) << s.canonical();
        EXPECT_LE(space.size(), 100u) << s.canonical();
        std::printf("%s: %zu configs\n", s.canonical().c_str(), space.size());
      }
    }
}

/// An RMSNorm template with a bf16 spec of 16-byte aligned rows; called with
/// a config's text, the template's verdict on it ("" when valid).
struct ConfigCheck {
  const KernelTemplate &t;
  KernelSpec s;
  ConfigCheck(OpKind op, int64_t cols) : t(getTemplate(op)) {
    s.op = op;
    s.cols = cols;
    s.align = 16;
  }
  std::string operator()(const std::string &cfg) const {
    return errorOf(t.checkConfig(s, *TileConfig::parse(cfg)));
  }
};

// Rows too long to hold go in segments; every hidden size gets a kernel.
TEST(RmsNormTemplate, LongRowsGoInSegments) {
  for (OpKind op : {OpKind::RmsNormFwd, OpKind::RmsNormBwd}) {
    ConfigCheck check(op, 4096);
    const KernelTemplate &t = check.t;
    KernelSpec &s = check.s;
    EXPECT_FALSE(t.defaultConfig(s).has("segs")) << "short rows are held whole";
    s.cols = 100000;
    TileConfig d = t.defaultConfig(s);
    EXPECT_GT(d.get("segs"), 1) << d.canonical();
    int segmented = 0;
    for (auto &c : t.configSpace(s))
      segmented += c.has("segs");
    EXPECT_GE(segmented, 6) << "the tuner must be able to choose the segment width";
    std::string base = op == OpKind::RmsNormFwd
                           ? "vec=8 threads=512 rows=1 stream=0 programs=0"
                           : "vec=8 threads=512 rows=1 stream=0 programs=132 prefetch=0";
    // 100000 columns are 25 runs of 512 x 8: 13 segments of 2 runs.
    EXPECT_EQ(check(base + " segs=13"), "");
    EXPECT_NE(check(base + " segs=14").find("use segs = 13"), std::string::npos);
    EXPECT_NE(check(base + " segs=0").find("segs must be in [1, 25]"), std::string::npos);
    EXPECT_NE(check(base + " segs=26").find("segs must be in [1, 25]"), std::string::npos);
    EXPECT_NE(check(base + " segs=1").find("each thread would hold"), std::string::npos);
    if (op == OpKind::RmsNormFwd) {
      EXPECT_NE(check("vec=8 threads=512 rows=1 stream=0 programs=132 segs=13").find("programs"),
                std::string::npos);
    } else {
      EXPECT_NE(check(base + " segs=13 wload=1").find("no wload"), std::string::npos);
      EXPECT_NE(check("vec=8 threads=512 rows=1 stream=0 programs=132 prefetch=1 segs=13")
                    .find("prefetch = 0"),
                std::string::npos);
      // Four rows of 128 lanes: 98 runs per lane, 49 segments of 2.
      EXPECT_EQ(check("vec=8 threads=512 rows=4 stream=0 programs=132 prefetch=0 segs=49"), "");
    }
  }
}

// Long rows may also be split over a cluster of blocks (sm_90 only).
TEST(RmsNormTemplate, ClusterSplitsAreChecked) {
  for (OpKind op : {OpKind::RmsNormFwd, OpKind::RmsNormBwd}) {
    ConfigCheck check(op, 32768);
    KernelSpec &s = check.s;
    std::string base = op == OpKind::RmsNormFwd
                           ? "vec=8 threads=512 rows=1 stream=0 programs=0"
                           : "vec=8 threads=512 rows=1 stream=0 programs=66 prefetch=1";
    EXPECT_EQ(check(base + " cluster=2"), "");
    EXPECT_EQ(check(base + " cluster=3"), "");
    EXPECT_NE(check(base + " cluster=9").find("cluster must be in [1, 8]"), std::string::npos);
    EXPECT_NE(check(base + " cluster=0").find("cluster must be in [1, 8]"), std::string::npos);
    EXPECT_NE(check(base + " cluster=2 segs=2").find("do not combine"), std::string::npos);
    // 32768 columns over 8 blocks of 4096-column slices: fine; 4104 columns
    // over 2 slices of 4096 leave the second block 8 columns, still fine;
    // 4096 columns over 2 slices of 4096 leave it none.
    EXPECT_EQ(check(base + " cluster=8"), "");
    s.cols = 4104;
    EXPECT_EQ(check(base + " cluster=2"), "");
    s.cols = 4096;
    EXPECT_NE(check(base + " cluster=2").find("without columns"), std::string::npos);
    s.cols = 32768;
    s.arch = "sm_80";
    EXPECT_NE(check(base + " cluster=2").find("needs sm_90"), std::string::npos);
  }
}

// Backward rows above 12288 columns go to clusters where the blocks can hold
// nearly even slices (sm_90), and the space offers each cluster size with
// several grid sizes.
TEST(RmsNormTemplate, LongBackwardRowsGoToClusters) {
  ConfigCheck check(OpKind::RmsNormBwd, 16384);
  const KernelTemplate &t = check.t;
  KernelSpec &s = check.s;
  s.arch = "sm_90a";
  for (auto [cols, cluster, programs] : std::vector<std::array<int64_t, 3>>{{16384, 2, 66},
                                                                            {15000, 2, 66},
                                                                            {18432, 5, 22},
                                                                            {24576, 3, 38},
                                                                            {32768, 4, 28},
                                                                            {40960, 5, 22},
                                                                            {57344, 7, 15},
                                                                            {65536, 8, 14}}) {
    s.cols = cols;
    TileConfig d = t.defaultConfig(s);
    EXPECT_EQ(d.has("cluster") ? d.get("cluster") : 1, cluster) << cols << ": " << d.canonical();
    EXPECT_EQ(d.get("programs"), programs) << cols << ": " << d.canonical();
    int64_t slice = (cols + cluster - 1) / cluster,
            perPass = d.get("threads") / d.get("rows") * d.get("vec");
    EXPECT_LE((slice + perPass - 1) / perPass, 2)
        << "two vectors a lane at most: " << d.canonical();
  }
  // Rows that 512 threads hold well, and rows beyond 8 slices of 8192, keep
  // a single block per row.
  for (int64_t cols : {9000, 12288, 65537, 100000}) {
    s.cols = cols;
    EXPECT_FALSE(t.defaultConfig(s).has("cluster")) << cols;
  }
  s.cols = 32768;
  int clusters = 0;
  std::set<int64_t> grids;
  for (auto &c : t.configSpace(s))
    if (c.has("cluster")) {
      ++clusters;
      grids.insert(c.get("cluster") * c.get("programs"));
    }
  EXPECT_GE(clusters, 6);
  EXPECT_GE(grids.size(), 3u) << "grids of several sizes: how many clusters fit is the GPU's";
  // The forward pass never splits rows over clusters by default or in its
  // space, nor does anything before sm_90.
  ConfigCheck fwd(OpKind::RmsNormFwd, 65536);
  fwd.s.arch = "sm_90a";
  for (auto &c : fwd.t.configSpace(fwd.s))
    EXPECT_FALSE(c.has("cluster")) << c.canonical();
  s.arch = "sm_80";
  for (auto &c : t.configSpace(s))
    EXPECT_FALSE(c.has("cluster")) << c.canonical();
}

// A bf16 activation with an f32 weight: the weight's vector accesses are
// twice as wide and must fit the alignment too (regression: an 8-byte-aligned
// f32 weight was read 16 bytes at a time).
TEST(RmsNormTemplate, WeightAccessesFitTheAlignment) {
  for (OpKind op : {OpKind::RmsNormFwd, OpKind::RmsNormBwd})
    for (int align : {4, 8, 16}) {
      KernelSpec s;
      s.op = op;
      s.cols = 4096;
      s.dtype = DType::BF16;
      s.wdtype = DType::F32;
      s.align = align;
      const KernelTemplate &t = getTemplate(op);
      for (auto &c : t.configSpace(s))
        EXPECT_LE(c.get("vec") * 4, std::max(align, 4)) << s.canonical() << " " << c.canonical();
    }
}

} // namespace

TEST(KernelSpec, FieldHashAndEqualityWithAndWithoutRows) {
  KernelSpec a;
  a.cols = 4096;
  a.rows = 100;
  KernelSpec b = a;
  b.rows = 7;
  EXPECT_TRUE(a.sameKernel(b));
  EXPECT_FALSE(a == b);
  EXPECT_EQ(a.hash(false), b.hash(false));
  EXPECT_NE(a.hash(), b.hash());
  for (auto change :
       {+[](KernelSpec &s) { s.cols = 4097; }, +[](KernelSpec &s) { s.align = 8; },
        +[](KernelSpec &s) { s.dtype = DType::F16; }, +[](KernelSpec &s) { s.wdtype = DType::F32; },
        +[](KernelSpec &s) { s.zeroCenteredGamma = true; },
        +[](KernelSpec &s) { s.arch = "sm_80"; },
        +[](KernelSpec &s) { s.op = OpKind::RmsNormBwd; }}) {
    KernelSpec c = a;
    change(c);
    EXPECT_FALSE(a.sameKernel(c)) << c.canonical();
    EXPECT_NE(a.hash(false), c.hash(false)) << c.canonical();
  }
}
