//===- KernelSpecTest.cpp - specs, configs, keys, grid rules ---------------===//
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <random>
#include <set>

#include "compiler/Compiler.h"
#include "compiler/templates/Template.h"
#include "core/KernelSpec.h"
#include "core/LaunchInfo.h"
#include "ops/rmsnorm/RmsNormDecl.h"
#include "tests/support/Seed.h"

using namespace tilejit;

namespace {

std::string errorOf(llvm::Error e) { return llvm::toString(std::move(e)); }
template <class T> std::string errorOf(llvm::Expected<T> &e) {
  return e ? std::string() : llvm::toString(e.takeError());
}
template <class T> std::string errorOf(llvm::Expected<T> &&e) { return errorOf(e); }

TEST(KernelSpec, CanonicalFormRoundTrips) {
  rmsnorm::Params s;
  s.backward = true;
  s.dtype = DType::F16;
  s.wdtype = DType::F32;
  s.rows = 123;
  s.cols = 4096;
  s.zeroCenteredGamma = true;
  s.align = 8;
  s.target = *Target::parse("sm_80");
  auto parsed = KernelSpec::parse(KernelSpec(s).canonical());
  ASSERT_TRUE(bool(parsed)) << errorOf(parsed);
  EXPECT_EQ(parsed->canonical(), KernelSpec(s).canonical());
  EXPECT_EQ(KernelSpec(s).canonical(),
            "rmsnorm_bwd dtype=f16 wdtype=f32 rows=123 cols=4096 zcg=1 align=8 arch=sm_80");
  EXPECT_EQ(KernelSpec(s).canonical(false).find("rows="), std::string::npos);
}

// A spec may name the target GPU's multiprocessors when it is not the arch's
// usual part; persistent grids are sized by them, so they key the kernel.
TEST(KernelSpec, TargetMultiprocessors) {
  rmsnorm::Params s;
  s.backward = true;
  s.cols = 4096;
  EXPECT_EQ(s.target.smCount(), 132);
  s.target.setSMs(132);
  EXPECT_EQ(s.target.sms, 0) << "the usual count has one canonical form";
  EXPECT_EQ(KernelSpec(s).canonical().find("sms="), std::string::npos);
  rmsnorm::Params pcie = s;
  pcie.target.setSMs(114);
  EXPECT_EQ(pcie.target.smCount(), 114);
  EXPECT_NE(KernelSpec(pcie).canonical(false).find(" sms=114"), std::string::npos);
  auto parsed = KernelSpec::parse(KernelSpec(pcie).canonical());
  ASSERT_TRUE(bool(parsed)) << errorOf(parsed);
  EXPECT_EQ(*parsed, pcie);
  EXPECT_FALSE(KernelSpec(pcie).sameKernel(s));
  EXPECT_NE(KernelSpec(pcie).hash(false), KernelSpec(s).hash(false));
  EXPECT_NE(kernelKey(pcie, {}), kernelKey(s, {}));
  EXPECT_EQ(errorOf(KernelSpec(s).checkTarget(*Target::parse("sm_90a", 132))), "");
  EXPECT_EQ(errorOf(KernelSpec(pcie).checkTarget(*Target::parse("sm_90a", 114))), "");
  EXPECT_NE(errorOf(KernelSpec(s).checkTarget(*Target::parse("sm_90a", 114)))
                .find("with 132 multiprocessors, the GPU is "
                      "sm_90a with 114"),
            std::string::npos);
  EXPECT_NE(errorOf(KernelSpec(s).checkTarget(*Target::parse("sm_80", 108))).find("is for sm_90a"),
            std::string::npos);
  // The persistent backward takes one program per multiprocessor of the
  // target, and clusters of 2 half as many.
  const KernelTemplate &t = getTemplate(rmsnorm::backwardOp());
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
  EXPECT_NE(errorOf(KernelSpec::parse("attention dtype=bf16")).find("unknown op 'attention'"),
            std::string::npos);
  EXPECT_NE(
      errorOf(KernelSpec::parse("gemm dtype=bf16")).find("unknown spec field 'dtype' for gemm"),
      std::string::npos)
      << errorOf(KernelSpec::parse("gemm dtype=bf16"));
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
  EXPECT_NE(errorOf(KernelSpec::parse("rmsnorm_fwd cols=99999999999999999999"))
                .find("out of the range of a 64-bit integer"),
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

TEST(TileConfig, EveryInt64ValueReads) {
  auto p = TileConfig::parse("a=9223372036854775807 b=-9223372036854775808 c=9223372036854775799");
  ASSERT_TRUE(bool(p)) << errorOf(p);
  EXPECT_EQ(p->get("a"), INT64_MAX);
  EXPECT_EQ(p->get("b"), INT64_MIN);
  EXPECT_EQ(p->get("c"), INT64_MAX - 8);
  auto again = TileConfig::parse(p->canonical());
  ASSERT_TRUE(bool(again)) << errorOf(again);
  EXPECT_EQ(*again, *p);
  EXPECT_NE(errorOf(TileConfig::parse("a=9223372036854775808")).find("out of the range"),
            std::string::npos);
  EXPECT_NE(errorOf(TileConfig::parse("a=-9223372036854775809")).find("out of the range"),
            std::string::npos);
  EXPECT_NE(errorOf(TileConfig::parse("a=1 a=2")).find("given twice"), std::string::npos);
}

/// Random text made of the parsers' own words, numbers at the edges of
/// int64 and stray bytes: the parsers answer every input with a value or an
/// error, and what they accept reads back from its canonical form.
TEST(ParserFuzz, SpecAndConfigParsersAnswerEveryInput) {
  uint64_t seed = tilejit::testing::testSeed();
  SCOPED_TRACE(tilejit::testing::replayHint(seed));
  std::mt19937_64 rng(seed);
  const char *words[] = {"rmsnorm_fwd",
                         "rmsnorm_bwd",
                         "dtype=",
                         "wdtype=",
                         "cols=",
                         "rows=",
                         "zcg=",
                         "align=",
                         "arch=",
                         "sms=",
                         "bf16",
                         "f16",
                         "f32",
                         "sm_90a",
                         "sm_80",
                         "=",
                         " ",
                         "  ",
                         "-",
                         "0",
                         "1",
                         "8",
                         "4096",
                         "9223372036854775807",
                         "-9223372036854775808",
                         "9223372036854775808",
                         "99999999999999999999",
                         "threads=",
                         "vec=",
                         "x"};
  auto pick = [&](size_t n) { return size_t(rng() % n); };
  auto start = std::chrono::steady_clock::now();
  int accepted = 0;
  for (int i = 0; i < 20000 && std::chrono::steady_clock::now() - start < std::chrono::seconds(5);
       ++i) {
    std::string text;
    size_t n = pick(12);
    for (size_t w = 0; w < n; ++w) {
      if (pick(8) == 0)
        text += char(rng());
      else
        text += words[pick(std::size(words))];
      if (pick(3) == 0)
        text += ' ';
    }
    if (auto spec = KernelSpec::parse(text)) {
      ++accepted;
      auto again = KernelSpec::parse(spec->canonical());
      ASSERT_TRUE(bool(again)) << "'" << text << "' -> '" << spec->canonical()
                               << "': " << errorOf(again);
      EXPECT_EQ(*again, *spec) << text;
    } else {
      EXPECT_FALSE(errorOf(spec).empty()) << text;
    }
    if (auto config = TileConfig::parse(text)) {
      auto again = TileConfig::parse(config->canonical());
      ASSERT_TRUE(bool(again)) << "'" << text << "': " << errorOf(again);
      EXPECT_EQ(*again, *config) << text;
    } else {
      EXPECT_FALSE(errorOf(config).empty()) << text;
    }
  }
  RecordProperty("specs_accepted", accepted);
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
  rmsnorm::Params s;
  s.cols = 4096;
  TileConfig c = getTemplate(s).defaultConfig(s);
  std::string k = kernelKey(s, c);
  EXPECT_EQ(k.size(), 64u);
  rmsnorm::Params rows = s;
  rows.rows = 99;
  EXPECT_EQ(kernelKey(rows, c), k) << "rows is a launch-time size";
  rmsnorm::Params cols = s;
  cols.cols = 4104;
  EXPECT_NE(kernelKey(cols, c), k);
  rmsnorm::Params arch = s;
  arch.target = *Target::parse("sm_80");
  EXPECT_NE(kernelKey(arch, c), k);
  TileConfig c2 = c;
  c2.set("vec", 4);
  EXPECT_NE(kernelKey(s, c2), k);
  rmsnorm::Params zcg = s;
  zcg.zeroCenteredGamma = true;
  EXPECT_NE(kernelKey(zcg, c), k);
}

TEST(RmsNormTemplate, ConfigChecksNameTheProblem) {
  rmsnorm::Params s;
  s.cols = 4096;
  const KernelTemplate &t = getTemplate(rmsnorm::forwardOp());
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
                .find("unknown config key 'bogus' (declared: vec, threads"),
            std::string::npos);
  s.align = 4;
  EXPECT_NE(check("vec=8 threads=256 rows=1 stream=0 programs=0").find("aligned"),
            std::string::npos);
}

TEST(RmsNormTemplate, DefaultsAndSpacesAreValid) {
  for (bool backward : {false, true})
    for (int64_t cols :
         {1, 7, 64, 1000, 4096, 4097, 8192, 16384, 32768, 32769, 65537, 100000, 1 << 20}) {
      rmsnorm::Params s;
      s.backward = backward;
      s.cols = cols;
      s.align = alignmentOf({}, cols * 2);
      const KernelTemplate &t =
          getTemplate(backward ? rmsnorm::backwardOp() : rmsnorm::forwardOp());
      EXPECT_EQ(errorOf(t.checkConfig(s, t.defaultConfig(s))), "") << KernelSpec(s).canonical();
      auto space = t.configSpace(s);
      EXPECT_GE(space.size(), 1u);
      EXPECT_EQ(space.front(), t.defaultConfig(s)) << "the default comes first";
      for (auto &c : space)
        EXPECT_EQ(errorOf(t.checkConfig(s, c)), "")
            << KernelSpec(s).canonical() << " " << c.canonical();
      if (cols == 4096 || cols == 8192) {
        // Wide enough to tune, small enough to tune in seconds.
        EXPECT_GE(space.size(), 24u) << KernelSpec(s).canonical();
        EXPECT_LE(space.size(), 100u) << KernelSpec(s).canonical();
        std::printf("%s: %zu configs\n", KernelSpec(s).canonical().c_str(), space.size());
      }
    }
}

/// An RMSNorm template with a bf16 spec of 16-byte aligned rows; called with
/// a config's text, the template's verdict on it ("" when valid).
struct ConfigCheck {
  const KernelTemplate &t;
  rmsnorm::Params s;
  ConfigCheck(bool backward, int64_t cols)
      : t(getTemplate(backward ? rmsnorm::backwardOp() : rmsnorm::forwardOp())) {
    s.backward = backward;
    s.cols = cols;
    s.align = 16;
  }
  std::string operator()(const std::string &cfg) const {
    return errorOf(t.checkConfig(s, *TileConfig::parse(cfg)));
  }
};

// Rows too long to hold go in segments; every hidden size gets a kernel.
TEST(RmsNormTemplate, LongRowsGoInSegments) {
  for (bool backward : {false, true}) {
    ConfigCheck check(backward, 4096);
    const KernelTemplate &t = check.t;
    rmsnorm::Params &s = check.s;
    EXPECT_FALSE(t.defaultConfig(s).has("segs")) << "short rows are held whole";
    s.cols = 100000;
    TileConfig d = t.defaultConfig(s);
    EXPECT_GT(d.get("segs"), 1) << d.canonical();
    int segmented = 0;
    for (auto &c : t.configSpace(s))
      segmented += c.has("segs");
    EXPECT_GE(segmented, 6) << "the tuner must be able to choose the segment width";
    std::string base = !backward ? "vec=8 threads=512 rows=1 stream=0 programs=0"
                                 : "vec=8 threads=512 rows=1 stream=0 programs=132 prefetch=0";
    // 100000 columns are 25 runs of 512 x 8: 13 segments of 2 runs.
    EXPECT_EQ(check(base + " segs=13"), "");
    EXPECT_NE(check(base + " segs=14").find("use segs = 13"), std::string::npos);
    EXPECT_NE(check(base + " segs=0").find("segs must be in [1, "), std::string::npos);
    EXPECT_NE(check(base + " segs=26").find("segs must be in [1, 25]"), std::string::npos);
    EXPECT_NE(check(base + " segs=1").find("each thread would hold"), std::string::npos);
    if (!backward) {
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
  for (bool backward : {false, true}) {
    ConfigCheck check(backward, 32768);
    rmsnorm::Params &s = check.s;
    std::string base = !backward ? "vec=8 threads=512 rows=1 stream=0 programs=0"
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
    s.target = *Target::parse("sm_80");
    EXPECT_NE(check(base + " cluster=2").find("needs sm_90"), std::string::npos);
  }
}

// Backward rows above 12288 columns go to clusters where the blocks can hold
// nearly even slices (sm_90), and the space offers each cluster size with
// several grid sizes.
TEST(RmsNormTemplate, LongBackwardRowsGoToClusters) {
  ConfigCheck check(true, 16384);
  const KernelTemplate &t = check.t;
  rmsnorm::Params &s = check.s;
  s.target = *Target::parse("sm_90a");
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
  ConfigCheck fwd(false, 65536);
  fwd.s.target = *Target::parse("sm_90a");
  for (auto &c : fwd.t.configSpace(fwd.s))
    EXPECT_FALSE(c.has("cluster")) << c.canonical();
  s.target = *Target::parse("sm_80");
  for (auto &c : t.configSpace(s))
    EXPECT_FALSE(c.has("cluster")) << c.canonical();
}

// A bf16 activation with an f32 weight: the weight's vector accesses are
// twice as wide and must fit the alignment too (regression: an 8-byte-aligned
// f32 weight was read 16 bytes at a time).
TEST(RmsNormTemplate, WeightAccessesFitTheAlignment) {
  for (bool backward : {false, true})
    for (int align : {4, 8, 16}) {
      rmsnorm::Params s;
      s.backward = backward;
      s.cols = 4096;
      s.dtype = DType::BF16;
      s.wdtype = DType::F32;
      s.align = align;
      const KernelTemplate &t =
          getTemplate(backward ? rmsnorm::backwardOp() : rmsnorm::forwardOp());
      for (auto &c : t.configSpace(s))
        EXPECT_LE(c.get("vec") * 4, std::max(align, 4))
            << KernelSpec(s).canonical() << " " << c.canonical();
    }
}

} // namespace

TEST(KernelSpec, FieldHashAndEqualityWithAndWithoutRows) {
  rmsnorm::Params a;
  a.cols = 4096;
  a.rows = 100;
  rmsnorm::Params b = a;
  b.rows = 7;
  EXPECT_TRUE(KernelSpec(a).sameKernel(b));
  EXPECT_FALSE(KernelSpec(a) == KernelSpec(b));
  EXPECT_EQ(KernelSpec(a).hash(false), KernelSpec(b).hash(false));
  EXPECT_NE(KernelSpec(a).hash(), KernelSpec(b).hash());
  for (auto change :
       {+[](rmsnorm::Params &s) { s.cols = 4097; }, +[](rmsnorm::Params &s) { s.align = 8; },
        +[](rmsnorm::Params &s) { s.dtype = DType::F16; },
        +[](rmsnorm::Params &s) { s.wdtype = DType::F32; },
        +[](rmsnorm::Params &s) { s.zeroCenteredGamma = true; },
        +[](rmsnorm::Params &s) { s.target = *Target::parse("sm_80"); },
        +[](rmsnorm::Params &s) { s.backward = true; }}) {
    rmsnorm::Params c = a;
    change(c);
    EXPECT_FALSE(KernelSpec(a).sameKernel(c)) << KernelSpec(c).canonical();
    EXPECT_NE(KernelSpec(a).hash(false), KernelSpec(c).hash(false)) << KernelSpec(c).canonical();
  }
}

namespace {

// The spec is op-generic: its parameters are the op's declaration, so the
// text form, the parser's errors, the hash and the kernel identity follow
// from that declaration alone.
TEST(KernelSpec, ParametersComeFromTheOpDeclaration) {
  const OpDecl &fwd = rmsnorm::forwardOp();
  KernelSpec s(fwd);
  EXPECT_EQ(s.opName(), "rmsnorm_fwd");
  EXPECT_EQ(s.canonical(), "rmsnorm_fwd dtype=bf16 wdtype=bf16 rows=1 cols=1 zcg=0 align=16 "
                           "arch=sm_90a");
  ASSERT_FALSE(bool(s.set("cols", 4096)));
  EXPECT_EQ(*s.get("cols"), 4096);
  EXPECT_NE(errorOf(s.set("heads", 8))
                .find("rmsnorm_fwd has no parameter 'heads' (its "
                      "parameters: dtype, wdtype, rows, cols, zcg, align)"),
            std::string::npos);
  EXPECT_NE(errorOf(s.get("heads")).find("no parameter 'heads'"), std::string::npos);
  // Parameters left out take their declared defaults; each may appear once.
  auto p = KernelSpec::parse("rmsnorm_bwd cols=64");
  ASSERT_TRUE(bool(p)) << errorOf(p);
  EXPECT_EQ(p->canonical(),
            "rmsnorm_bwd dtype=bf16 wdtype=bf16 rows=1 cols=64 zcg=0 align=16 arch=sm_90a");
  EXPECT_NE(errorOf(KernelSpec::parse("rmsnorm_fwd cols=8 cols=16")).find("given twice"),
            std::string::npos);
  EXPECT_NE(errorOf(KernelSpec::parse("rmsnorm_fwd cols=8 arch=sm_80 arch=sm_90")).find("twice"),
            std::string::npos);
  EXPECT_NE(errorOf(KernelSpec::parse("rmsnorm_fwd cols=2000000")).find("above the largest"),
            std::string::npos);
  EXPECT_NE(errorOf(KernelSpec::parse("rmsnorm_fwd cols=8 zcg=2")).find("zcg must be 0 or 1"),
            std::string::npos);
  EXPECT_NE(errorOf(KernelSpec::parse("rmsnorm_fwd cols=8 heads=4"))
                .find("unknown spec field 'heads' for rmsnorm_fwd (its fields: dtype"),
            std::string::npos);
  EXPECT_NE(errorOf(KernelSpec().validate()).find("names no op"), std::string::npos);
  // Launch-time sizes (rows) are out of the kernel's identity, and in its
  // tuning bucket.
  KernelSpec a = *KernelSpec::parse("rmsnorm_fwd rows=5000 cols=64");
  KernelSpec b = *KernelSpec::parse("rmsnorm_fwd rows=7 cols=64");
  EXPECT_TRUE(a.sameKernel(b));
  EXPECT_EQ(a.canonical(false), b.canonical(false));
  EXPECT_EQ(a.tuningSpec().canonical(), "rmsnorm_fwd dtype=bf16 wdtype=bf16 rows=8192 cols=64 "
                                        "zcg=0 align=16 arch=sm_90a");
  EXPECT_FALSE(a.is(rmsnorm::backwardOp()));
  EXPECT_NE(KernelSpec(rmsnorm::backwardOp()).hash(false), KernelSpec(fwd).hash(false));
}

TEST(Target, OneValueForArchAndItsLimits) {
  auto h = Target::parse("sm_90a");
  ASSERT_TRUE(h.has_value());
  EXPECT_TRUE(h->hasClusters());
  EXPECT_TRUE(h->hasWgmma());
  EXPECT_TRUE(h->hasTma());
  EXPECT_EQ(h->maxSharedBytesPerBlock(), 227 * 1024);
  EXPECT_EQ(h->smCount(), 132);
  auto a = Target::parse("sm_80", 108);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->sms, 0) << "the usual count has one form";
  EXPECT_FALSE(a->hasClusters());
  EXPECT_FALSE(a->hasWgmma());
  EXPECT_EQ(a->maxClusterBlocks(), 1);
  EXPECT_EQ(a->maxSharedBytesPerBlock(), 163 * 1024);
  EXPECT_FALSE(Target::parse("sm_90").value().hasWgmma());
  EXPECT_FALSE(Target::parse("sm_100").has_value());
  EXPECT_EQ(Target::forDevice(9, 0, 114).value().archName(), "sm_90a");
  EXPECT_EQ(Target::forDevice(9, 0, 114).value().sms, 114);
  EXPECT_EQ(Target::forDevice(8, 6, 84).value().archName(), "sm_86");
  EXPECT_FALSE(Target::forDevice(7, 5, 40).has_value());
}

TEST(TileConfig, DeclaredKeysMergeAndCheck) {
  const ConfigKeyDecl keys[] = {{"vec", 1, 8, false, ""}, {"segs", 1, 64, true, ""}};
  TileConfig base = *TileConfig::parse("vec=8");
  TileConfig merged = base.mergedWith(*TileConfig::parse("segs=4"));
  EXPECT_EQ(merged.canonical(), "segs=4 vec=8");
  EXPECT_EQ(errorOf(merged.checkKeys(keys)), "");
  EXPECT_EQ(errorOf(base.checkKeys(keys)), "") << "segs is optional";
  EXPECT_NE(errorOf(TileConfig().checkKeys(keys)).find("config lacks 'vec'"), std::string::npos);
  EXPECT_NE(errorOf(TileConfig::parse("vec=9")->checkKeys(keys)).find("vec must be in [1, 8]"),
            std::string::npos);
  EXPECT_NE(errorOf(TileConfig::parse("vec=4 tile=3")->checkKeys(keys))
                .find("unknown config key 'tile' (declared: vec, segs)"),
            std::string::npos);
  EXPECT_NE(errorOf(TileConfig::parse("vec=4 vec=8")).find("given twice"), std::string::npos);
}

// One key recipe for binaries and tunings: a change of any build input
// misses both, and the spec part of a tuning key finds winners recorded under
// older inputs.
TEST(Key, OneRecipeForKernelsAndTunings) {
  KernelSpec s = *KernelSpec::parse("rmsnorm_fwd rows=100 cols=4096");
  TileConfig c = *TileConfig::parse("vec=8");
  BuildIdentity id{"nvptx", "llvm=22.1.8\nptxas=13.0"};
  BuildIdentity newer{"nvptx", "llvm=22.1.9\nptxas=13.0"};
  BuildIdentity other{"cuda", "llvm=22.1.8\nptxas=13.0"};
  EXPECT_EQ(kernelKey(s, c, id).size(), 64u);
  EXPECT_NE(kernelKey(s, c, id), kernelKey(s, c, newer));
  EXPECT_NE(kernelKey(s, c, id), kernelKey(s, c, other));
  EXPECT_NE(tuneKey(s, id), tuneKey(s, newer));
  EXPECT_NE(tuneKey(s, id), tuneKey(s, other));
  EXPECT_EQ(tuneKey(s, id).rfind(tuneKeyPrefix(s), 0), 0u);
  EXPECT_EQ(tuneKey(s, newer).rfind(tuneKeyPrefix(s), 0), 0u);
  EXPECT_NE(tuneKeyPrefix(s).find("rows=128 "), std::string::npos) << tuneKeyPrefix(s);
  // The compiler's own identity names every toolchain.
  BuildIdentity real = buildIdentity(s);
  EXPECT_EQ(real.backend, "nvptx");
  for (const char *what : {"template=", "compiler=", "tilejit=", "llvm=", "ptxas=", "nvrtc="})
    EXPECT_NE(real.toolchain.find(what), std::string::npos) << what;
  EXPECT_EQ(kernelKey(s, c), kernelKey(s, c, real));
}

// Launch information survives the store's JSON, and a record that does not
// hold is rejected with what was wrong, never loaded.
TEST(LaunchInfo, JsonRoundTripsAndRejectsBadRecords) {
  EntryInfo e;
  e.name = "k";
  e.blockThreads = 384;
  e.cluster = {2, 1, 1};
  e.dynamicSmemBytes = 200 * 1024;
  e.params = {ParamInfo{ParamInfo::TensorMap, DType::F32, {}, "a", {}},
              ParamInfo{ParamInfo::View, DType::BF16, {-1, 64}, "out", {}},
              ParamInfo{ParamInfo::I32, DType::F32, {}, "n", {}},
              ParamInfo{ParamInfo::View, DType::F32, {-1, 8, 255}, "c", {-1, 256}}};
  e.grid[0] =
      GridRule{{{{GridRule::Sym, 0}, {GridRule::Const, 64}, {GridRule::CeilDiv, 0}}}, {{1, 1}}};
  e.grid[1] = GridRule{{{{GridRule::Sym, 0}}}, {{2, -1}}};
  e.grid[2] = GridRule::constant(3);
  std::string json = entriesToJson({e});
  auto back = entriesFromJson(json);
  ASSERT_TRUE(bool(back)) << errorOf(back);
  ASSERT_EQ(back->size(), 1u);
  const EntryInfo &b = (*back)[0];
  EXPECT_EQ(b.cluster, e.cluster);
  EXPECT_EQ(b.dynamicSmemBytes, e.dynamicSmemBytes);
  ASSERT_EQ(b.params.size(), 4u);
  EXPECT_EQ(b.params[0].kind, ParamInfo::TensorMap);
  EXPECT_EQ(b.params[0].bytes(), 128u);
  EXPECT_EQ(b.params[0].alignment(), 64u);
  EXPECT_EQ(b.params[1].bytes(), 24u);
  EXPECT_EQ(b.params[2].bytes(), 4u);
  // A view with row strides: the pointer, three sizes and two strides.
  EXPECT_EQ(b.params[3].staticStrides, (std::vector<int64_t>{-1, 256}));
  EXPECT_EQ(b.params[3].bytes(), 48u);
  EXPECT_TRUE(b.params[1].staticStrides.empty());
  EXPECT_EQ(entriesToJson(*back), json);
  EXPECT_EQ(GridRule().evaluate(nullptr, 0), 1) << "a dimension without a rule is 1";
  auto bad = [](std::string text) { return errorOf(entriesFromJson(text)); };
  auto replace = [&](const std::string &from, const std::string &to) {
    std::string t = json;
    t.replace(t.find(from), from.size(), to);
    return bad(t);
  };
  EXPECT_NE(replace("\"threads\":384", "\"threads\":\"many\"").find("'threads' is not an integer"),
            std::string::npos);
  EXPECT_NE(replace("\"threads\":384", "\"threads\":4096").find("outside [1, 1024]"),
            std::string::npos);
  EXPECT_NE(replace("\"kind\":\"tensormap\"", "\"kind\":\"blob\"").find("unknown kind 'blob'"),
            std::string::npos);
  EXPECT_NE(replace("\"cluster\":[2,1,1]", "\"cluster\":[2,1]").find("'cluster' is not"),
            std::string::npos);
  EXPECT_NE(replace("[2,-1]", "[7,-1]").find("grid symbol naming no parameter"), std::string::npos);
  EXPECT_NE(replace("\"strides\":[-1,256]", "\"strides\":[-1]").find("bad row strides"),
            std::string::npos);
  EXPECT_NE(replace("\"strides\":[-1,256]", "\"strides\":[0,256]").find("bad row strides"),
            std::string::npos);
  EXPECT_NE(bad("{}").find("not a JSON array"), std::string::npos);
  EXPECT_NE(bad("[1]").find("not an object"), std::string::npos);
}

} // namespace
