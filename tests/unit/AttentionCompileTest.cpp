//===- AttentionCompileTest.cpp - attention kernels build without a GPU ----===//
//
// Every head dim, type, mask and layout, and each config of the GPU tests,
// compiled to a cubin for sm_90a, forward and backward: ptxas reports no
// spills and no serialized wgmma, the PTX holds the tensor-core and
// copy-engine instructions (wgmma with A from registers among them). Config,
// call and target errors name what was wrong.
//
//===----------------------------------------------------------------------===//
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <tuple>

#include "compiler/Compiler.h"
#include "compiler/templates/Template.h"
#include "dialects/Tile/TileDialect.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"
#include "ops/attention/AttentionLaunch.h"
#include "ops/attention/AttentionOrder.h"
#include "tests/support/Seed.h"
#include "tests/support/SpillRule.h"

using namespace tilejit;
using attention::Layout;

namespace {

attention::Params params(int64_t d, bool causal, Layout layout = Layout::BSHD,
                         DType dt = DType::BF16, bool backward = false) {
  attention::Params p;
  p.backward = backward;
  p.dt = dt;
  p.d = d;
  p.hq = 8;
  p.hkv = 2;
  p.causal = causal;
  p.layout = layout;
  p.b = 2;
  p.sq = p.sk = 4096;
  p.target = *Target::parse("sm_90a");
  return p;
}

attention::Params backward(int64_t d, bool causal, Layout layout = Layout::BSHD,
                           DType dt = DType::BF16) {
  return params(d, causal, layout, dt, /*backward=*/true);
}

/// A backward spec that allows dQ added atomically (deterministic = 0): the
/// fused configs'.
attention::Params nondeterministic(int64_t d, bool causal, Layout layout = Layout::BSHD,
                                   DType dt = DType::BF16) {
  attention::Params p = backward(d, causal, layout, dt);
  p.deterministic = false;
  return p;
}

void expectClean(const KernelSpec &spec, const TileConfig &config) {
  SCOPED_TRACE(spec.canonical() + " [" + config.canonical() + "]");
  auto k = compileKernel(spec, config);
  ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
  bool bwd = attention::isBackward(spec);
  bool fused = config.has("fused") && config.get("fused") != 0;
  // The backward: dQ, dK and dV, the sum of dK and dV's parts; fused: the
  // workspace, dK and dV with dQ's sums, the parts' sum, dQ.
  ASSERT_EQ(k->entries.size(), bwd ? (fused ? 4u : 3u) : 1u);
  for (const EntryInfo &e : k->entries)
    EXPECT_LE(e.spillBytes, tilejit::testing::allowedSpillBytes(spec, e)) << e.name << "\n"
                                                                          << k->log;
  EXPECT_EQ(k->log.find("serialized"), std::string::npos) << k->log;
  // The forward: nor a wait ptxas put among the products (C7517).
  if (!bwd) {
    EXPECT_EQ(k->log.find("C7517"), std::string::npos) << k->log;
  }
  EXPECT_EQ(k->log.find("setmaxnreg' ignored"), std::string::npos) << k->log;
  // Q K^T from shared memory, P V with P in registers.
  EXPECT_NE(k->ptx.find("wgmma.mma_async.sync.aligned.m64n"), std::string::npos);
  EXPECT_NE(k->ptx.find("}, {%r"), std::string::npos) << "no wgmma with A from registers";
  EXPECT_NE(k->ptx.find("cp.async.bulk.tensor.4d"), std::string::npos);
  EXPECT_NE(k->ptx.find("ex2.approx"), std::string::npos);
  if (bwd) {
    // The dK/dV kernel takes each step's LSE and D through a rank-3 f32
    // tensor map of the workspace ([rows, b * hq, 2]), boxes of 8 rows of
    // 32, which the launch encodes from these sizes.
    const ParamInfo &stat = k->entries[1].params[4];
    EXPECT_EQ(stat.kind, ParamInfo::TensorMap);
    EXPECT_EQ(stat.elem, DType::F32);
    EXPECT_EQ(stat.staticSizes, (std::vector<int64_t>{8, 32, 1}));
    EXPECT_NE(k->ptx.find("cp.async.bulk.tensor.3d"), std::string::npos);
  }
  if (fused) {
    // dS^T into shared memory for dQ's product; dQ's parts added into the
    // sums by TMA from shared memory (dqfrag: in the registers' order, one
    // bulk copy a part, no tensor map, read back so by the last kernel).
    bool frag = config.has("dqfrag") && config.get("dqfrag") != 0;
    EXPECT_NE(k->ptx.find("stmatrix.sync.aligned"), std::string::npos);
    EXPECT_EQ(
        k->ptx.find("cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.tile.bulk_group") !=
            std::string::npos,
        !frag);
    EXPECT_EQ(k->ptx.find("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32") !=
                  std::string::npos,
              frag);
    EXPECT_EQ(k->ptx.find("ld.global.v4.f32") != std::string::npos, frag);
    EXPECT_EQ(k->ptx.find("red.global.add"), std::string::npos);
    // The workspace's kernel: O, dO, LSE, the workspace, dQ's sums, sq and
    // the words after the sums (flags, counter), which it zeroes; THD,
    // Q's offsets.
    bool thd = attention::Params(spec).layout == Layout::THD;
    EXPECT_EQ(k->entries[0].params.size(), 7u + thd);
    EXPECT_EQ(k->entries[0].params[6].kind, ParamInfo::View);
    // For a deterministic spec the flags its additions are ordered by come
    // last ([b * hq, query tiles, 1] words), waited for and set at GPU scope
    // (ordered with the TMA reductions: fence.proxy.async.global) by the
    // helper thread (thread 32), once its additions are whole (not only
    // read). persist: the most programs the call allows come last (an
    // index); with take, then the counter (a view of words) its programs
    // take their tiles from with an atomic addition. THD: Q's and K's
    // offsets after dQ's sums.
    bool ordered = attention::Params(spec).deterministic;
    bool persist = config.has("persist") && config.get("persist") != 0;
    bool take = config.has("take") && config.get("take") != 0;
    const std::vector<ParamInfo> &dkvParams = k->entries[1].params;
    EXPECT_EQ(dkvParams.size(), 14u + 2 * thd + ordered + persist + take);
    if (thd) {
      EXPECT_EQ(dkvParams[14].staticSizes, (std::vector<int64_t>{-1}));
      EXPECT_EQ(dkvParams[15].staticSizes, (std::vector<int64_t>{-1}));
    }
    if (persist) {
      EXPECT_EQ(dkvParams[dkvParams.size() - 1 - take].kind, ParamInfo::Index);
    }
    if (take) {
      EXPECT_EQ(dkvParams.back().kind, ParamInfo::View);
      EXPECT_EQ(dkvParams.back().staticSizes, (std::vector<int64_t>{-1}));
    }
    EXPECT_EQ(k->ptx.find("atom.global.add.u32") != std::string::npos, take);
    EXPECT_EQ(k->ptx.find("ld.acquire.gpu") != std::string::npos, ordered);
    EXPECT_EQ(k->ptx.find("fence.acq_rel.gpu") != std::string::npos, ordered);
    EXPECT_EQ(k->ptx.find("fence.proxy.async.global") != std::string::npos, ordered);
    // One wait for whole additions: unordered the program's last, ordered
    // the helper's before each flag.
    size_t whole = 0;
    for (size_t at = k->ptx.find("cp.async.bulk.wait_group \t0;"); at != std::string::npos;
         at = k->ptx.find("cp.async.bulk.wait_group \t0;", at + 1))
      ++whole;
    EXPECT_EQ(whole, 1u);
    if (ordered) {
      const ParamInfo &flags = k->entries[1].params[14 + 2 * thd];
      EXPECT_EQ(flags.kind, ParamInfo::View);
      EXPECT_EQ(flags.staticSizes, (std::vector<int64_t>{-1, -1, attention::kFlagsPerTile}));
    }
    // dQ's sums: an f32 tensor map whose box is one 32-column panel
    // (dqfrag: a view of them, as the other kernels take them).
    EXPECT_EQ(k->entries[1].params[13].kind, frag ? ParamInfo::View : ParamInfo::TensorMap);
    EXPECT_EQ(k->entries[1].params[13].elem, DType::F32);
    if (frag)
      EXPECT_EQ(k->entries[1].params[13].staticSizes, k->entries[0].params[4].staticSizes);
    else
      EXPECT_EQ(k->entries[1].params[13].staticSizes[1], 32);
    EXPECT_EQ(k->entries[3].params.size(), 4u + thd);
    return;
  }
  const EntryInfo &e = k->entries.front();
  // THD: the offsets of Q's and K's sequences after the others; a forward
  // taking its tiles from a counter (take): then the counter, a view.
  bool thd = attention::Params(spec).layout == Layout::THD;
  // (An empty config: the default.)
  TileConfig used = config.canonical().empty() && !bwd
                        ? getTemplate(attention::forwardOp()).defaultConfig(spec)
                        : config;
  bool take = !bwd && used.has("take") && used.get("take");
  ASSERT_EQ(e.params.size(), bwd ? (thd ? 15u : 13u) : (thd ? 11u : 9u) + (take ? 1u : 0u));
  if (take) {
    EXPECT_EQ(e.params.back().kind, ParamInfo::View);
  }
  EXPECT_EQ(e.params[0].kind, ParamInfo::TensorMap);
  EXPECT_EQ(e.params[0].staticSizes.size(), 4u);
  if (bwd) {
    ASSERT_EQ(k->entries[1].params.size(), thd ? 15u : 13u);
    EXPECT_EQ(k->entries[1].params[2].kind, ParamInfo::TensorMap);
    ASSERT_EQ(k->entries[2].params.size(), thd ? 6u : 5u);
    EXPECT_EQ(k->entries[2].params[0].elem, DType::F32);
  }
}

TEST(AttentionCompile, EveryHeadDimMaskLayoutAndTypeBuildsWithoutSpills) {
  for (int64_t d : {64, 128, 256})
    for (bool causal : {false, true})
      expectClean(params(d, causal), {});
  expectClean(params(128, true, Layout::BHSD), {});
  expectClean(params(128, false, Layout::BSHD, DType::F16), {});
}

TEST(AttentionCompile, EveryConfigOfTheGpuTestsBuilds) {
  for (const char *cfg :
       {"bm=64 bn=64 consumers=1 stages=3", "bm=128 bn=176 consumers=2 stages=1",
        "bm=128 bn=192 consumers=2 stages=2", "bm=64 bn=64 consumers=1 overlap=1 stages=2",
        "bm=128 bn=96 consumers=2 overlap=1 stages=3",
        "bm=128 bn=128 consumers=2 overlap=0 stages=2"})
    expectClean(params(64, true), *TileConfig::parse(cfg));
  expectClean(params(128, true), *TileConfig::parse("bm=128 bn=176 consumers=2 stages=1"));
  expectClean(params(128, true, Layout::BSHD, DType::F16),
              *TileConfig::parse("bm=128 bn=64 consumers=2 overlap=1 stages=1"));
  // The consumers taking turns (ping-pong), as the GPU tests run them.
  for (const char *cfg : {"bm=128 bn=128 consumers=2 overlap=1 pingpong=1 raster=1 stages=2",
                          "bm=128 bn=96 consumers=2 overlap=1 pingpong=1 stages=3"})
    for (int64_t d : {64, 128})
      for (bool causal : {false, true})
        expectClean(params(d, causal), *TileConfig::parse(cfg));
  // Persistent grids, as the GPU tests run them, each with its tiles
  // shared out in advance and taken from a counter (take).
  for (std::string take : {"", " take=1"}) {
    for (const char *cfg :
         {"bm=128 bn=128 consumers=2 overlap=1 persistent=1 pingpong=1 raster=1 stages=2",
          "bm=128 bn=128 consumers=2 overlap=1 persistent=1 raster=0 stages=2",
          "bm=128 bn=128 consumers=2 persistent=1 stages=2",
          "bm=64 bn=64 consumers=1 overlap=1 persistent=1 stages=2"})
      for (bool causal : {false, true})
        expectClean(params(128, causal), *TileConfig::parse(cfg + take));
    expectClean(params(64, true),
                *TileConfig::parse("bm=128 bn=128 consumers=2 overlap=1 persistent=1 pingpong=1 "
                                   "stages=2" +
                                   take));
    expectClean(params(256, true),
                *TileConfig::parse("bm=128 bn=64 consumers=2 persistent=1 stages=2" + take));
  }
  // The largest the register rule allows.
  expectClean(params(256, false), *TileConfig::parse("bm=128 bn=128 consumers=2 stages=1"));
  expectClean(params(64, true), *TileConfig::parse("bm=128 bn=192 consumers=2 stages=2"));
}

TEST(AttentionCompile, SnakeShareExcessMatchesAWalkOfEveryTile) {
  // snakeShareExcess walks one period of the loads (lcm(per, 2 programs)
  // tiles) and multiplies; a walk of every tile, written here, must give
  // the same, on runs of tiles whose periods do and do not divide the
  // tiles, fewer tiles than programs, and one period exactly.
  auto walk = [](const std::vector<double> &steps, int64_t units, int64_t programs) {
    int64_t per = int64_t(steps.size()), tiles = per * units;
    programs = std::min(programs, tiles);
    std::vector<double> load(programs, 0.0);
    double total = 0, longest = 0;
    for (int64_t t = 0; t < tiles; ++t) {
      int64_t round = t / programs, q = t % programs;
      load[round % 2 ? programs - 1 - q : q] += steps[t % per];
      total += steps[t % per];
      longest = std::max(longest, steps[t % per]);
    }
    return *std::max_element(load.begin(), load.end()) /
           std::max(total / double(programs), longest);
  };
  std::mt19937_64 rng(tilejit::testing::testSeed());
  for (int64_t per : {1, 7, 32, 127, 128, 264})
    for (int64_t units : {1, 3, 16, 40, 129})
      for (int64_t programs : {1, 5, 132, 264, 1000}) {
        std::vector<double> steps(per);
        for (double &w : steps)
          w = double(rng() % 200 + 1);
        EXPECT_DOUBLE_EQ(attention::snakeShareExcess(steps, units, programs),
                         walk(steps, units, programs))
            << per << " " << units << " " << programs;
      }
}

TEST(AttentionLaunch, TakeCountersStayBelowTwoToThe31) {
  // A persistent grid that takes its tiles from a 32-bit counter: the tiles
  // and each program's take past the last below 2^31 (the forward's launch
  // refuses more, ceil(sq / 64) * b * hq tiles and min(cap, tiles)
  // programs; the backward's counts its tiles alone, cap 0).
  const int64_t limit = int64_t(1) << 31;
  EXPECT_TRUE(attention::takeCounterFits({64, 4, 32}, 132));
  EXPECT_TRUE(attention::takeCounterFits({limit - 133}, 132));
  EXPECT_FALSE(attention::takeCounterFits({limit - 132}, 132));
  EXPECT_TRUE(attention::takeCounterFits({limit - 1}, 0));
  EXPECT_FALSE(attention::takeCounterFits({limit}, 0));
  // (2^22 sequences of at most 4096 rows, 8 heads: 2^31 tiles.)
  EXPECT_FALSE(attention::takeCounterFits({64, int64_t(1) << 22, 8}, 132));
  EXPECT_TRUE(attention::takeCounterFits({64, (int64_t(1) << 22) - 1, 8}, 132));
  // (Fewer tiles than programs: each counts one take past the last.)
  EXPECT_TRUE(attention::takeCounterFits({(limit - 1) / 2}, limit));
  EXPECT_FALSE(attention::takeCounterFits({limit / 2}, limit));
  // (A product past 64 bits, or a negative size, never fits.)
  EXPECT_FALSE(attention::takeCounterFits({int64_t(1) << 40, int64_t(1) << 40}, 0));
  EXPECT_FALSE(attention::takeCounterFits({-1, 64}, 0));
  EXPECT_TRUE(attention::takeCounterFits({0, 64}, 132));
}

TEST(AttentionCompile, RowTilesOfGroupsOfHeadsBuildWithoutSpills) {
  // raster_heads: the configs of the GPU test build clean, both layouts;
  // with raster 0 it is refused by name.
  for (const char *cfg :
       {"bm=128 bn=128 consumers=2 overlap=1 persistent=1 pingpong=1 raster=1 raster_heads=3 "
        "stages=2",
        "bm=128 bn=128 consumers=2 overlap=1 persistent=1 pingpong=1 raster=1 raster_heads=3 "
        "stages=2 take=1",
        "bm=128 bn=128 consumers=2 overlap=1 pingpong=1 raster=1 raster_heads=3 stages=2"})
    for (Layout layout : {Layout::BSHD, Layout::THD})
      for (bool causal : {true, false})
        expectClean(params(128, causal, layout), *TileConfig::parse(cfg));
  expectClean(params(64, true),
              *TileConfig::parse("bm=128 bn=128 consumers=2 overlap=1 persistent=1 pingpong=1 "
                                 "raster=1 raster_heads=8 stages=2 take=1"));
  llvm::Error err = getTemplate(attention::forwardOp())
                        .checkConfig(params(128, true).spec(),
                                     *TileConfig::parse("bm=128 bn=128 consumers=2 overlap=1 "
                                                        "persistent=1 raster=0 raster_heads=8 "
                                                        "stages=2"));
  ASSERT_TRUE(bool(err));
  EXPECT_NE(llvm::toString(std::move(err)).find("raster_heads needs raster = 1"),
            std::string::npos);
}

TEST(AttentionCompile, ForwardDefaultTakesTilesWhereASharedOutGridIsUneven) {
  // Programs by head (raster 1, many KV heads) under a causal mask take
  // their tiles from the counter in groups of 8 heads where the share fixed
  // in advance leaves the slowest program more than 10 % above the best
  // share there can be (16 heads: about 1.5; 8: 1.8), not at 32 heads
  // (1.03), nor without the mask, nor by row tile (raster 0, one KV head).
  const KernelTemplate &fwd = getTemplate(attention::forwardOp());
  attention::Params p = params(128, true);
  p.hq = p.hkv = 32;
  p.b = 1;
  p.sq = p.sk = 16384;
  EXPECT_NEAR(attention::byHeadShareExcess(p, 128, 128, 132), 1.031, 0.005);
  for (auto [hq, sq] : {std::pair{16, 4096}, std::pair{16, 16384}, std::pair{8, 8192}}) {
    attention::Params q = p;
    q.hq = q.hkv = hq;
    q.sq = q.sk = sq;
    EXPECT_GT(attention::byHeadShareExcess(q, 128, 128, 132), 1.4) << hq << " " << sq;
    EXPECT_EQ(fwd.defaultConfig(q).canonical(),
              "bm=128 bn=128 consumers=2 overlap=1 persistent=1 pingpong=1 raster=1 "
              "raster_heads=8 stages=2 take=1")
        << hq << " " << sq;
  }
  expectClean(p, *TileConfig::parse("bm=128 bn=128 consumers=2 overlap=1 persistent=1 "
                                    "pingpong=1 raster=1 raster_heads=8 stages=2 take=1"));
  for (auto [hq, hkv, sq, causal] :
       {std::tuple{32, 32, 16384, true}, std::tuple{32, 32, 8192, true},
        std::tuple{16, 16, 16384, false}, std::tuple{16, 1, 16384, true}}) {
    attention::Params q = p;
    q.hq = hq;
    q.hkv = hkv;
    q.sq = q.sk = sq;
    q.causal = causal;
    TileConfig c = fwd.defaultConfig(q);
    EXPECT_FALSE(c.has("take")) << hq << " " << hkv << " " << sq << " " << causal << ": "
                                << c.canonical();
  }
  // The tuning space: where the default shares out in advance (32 heads),
  // the default taken in groups of 8 second; where it takes (16 heads),
  // shares fixed in advance by head in the space, and no other taken one.
  {
    attention::Params q = p;
    q.sq = q.sk = 4096;
    std::vector<TileConfig> space = fwd.configSpace(q.spec());
    ASSERT_GE(space.size(), 2u);
    TileConfig grouped = space[0];
    grouped.set("take", 1);
    grouped.set("raster_heads", 8);
    EXPECT_EQ(space[1].canonical(), grouped.canonical());
    q.hq = q.hkv = 16;
    space = fwd.configSpace(q.spec());
    int fixedByHead = 0;
    for (size_t i = 1; i < space.size(); ++i) {
      EXPECT_FALSE(space[i].has("take")) << space[i].canonical();
      fixedByHead += space[i].has("persistent") && space[i].get("raster");
    }
    EXPECT_GT(fixedByHead, 0);
  }
  // (No share does better than one tile a program: B1 H8 S2048 causal, 128
  // tiles of 1 to 16 key tiles on 132 programs, is not taken.)
  attention::Params round = p;
  round.hq = round.hkv = 8;
  round.sq = round.sk = 2048;
  EXPECT_DOUBLE_EQ(attention::byHeadShareExcess(round, 128, 128, 132), 1.0);
  EXPECT_FALSE(fwd.defaultConfig(round).has("take")) << fwd.defaultConfig(round).canonical();
  // (One round of equal tiles is an even share; more than 2^20 tiles are
  // not counted.)
  attention::Params even = p;
  even.causal = false;
  even.hq = even.hkv = 8;
  even.sq = even.sk = 2048; // 128 tiles, 132 programs
  EXPECT_DOUBLE_EQ(attention::byHeadShareExcess(even, 128, 128, 132), 1.0);
  even.b = 1 << 20;
  EXPECT_DOUBLE_EQ(attention::byHeadShareExcess(even, 128, 128, 132), 1.0);
}

TEST(AttentionCompile, PackedSequencesBuildWithoutSpillsAndNameWhatTheyNeed) {
  for (int64_t d : {64, 128, 256})
    for (bool causal : {false, true})
      expectClean(params(d, causal, Layout::THD), {});
  expectClean(params(64, true, Layout::THD, DType::F16), {});
  // The configs of the GPU tests: persistent grids walking tiles past their
  // sequences, and a program a tile.
  for (const char *cfg :
       {"bm=128 bn=128 consumers=2 overlap=1 persistent=1 pingpong=1 raster=1 stages=2",
        "bm=128 bn=128 consumers=2 overlap=1 persistent=1 raster=0 stages=2",
        "bm=64 bn=64 consumers=1 overlap=1 persistent=1 stages=2",
        "bm=128 bn=64 consumers=2 stages=2",
        "bm=128 bn=128 consumers=2 overlap=1 persistent=1 pingpong=1 raster=1 stages=2 take=1",
        "bm=128 bn=128 consumers=2 overlap=1 persistent=1 raster=0 stages=2 take=1"})
    for (bool causal : {false, true})
      expectClean(params(128, causal, Layout::THD), *TileConfig::parse(cfg));
  // The default takes its tiles from a counter (the producer passing over
  // those past their sequence's rows: the spec's sq is the longest), a
  // last parameter the launch zeroes; BSHD's shares them out in advance.
  const KernelTemplate &fwd = getTemplate(attention::forwardOp());
  for (int64_t d : {64, 128, 256}) {
    TileConfig packedDefault = fwd.defaultConfig(params(d, true, Layout::THD));
    EXPECT_EQ(packedDefault.has("take") && packedDefault.get("take"), true) << d;
    TileConfig padded = fwd.defaultConfig(params(d, true));
    EXPECT_FALSE(padded.has("take")) << d;
    padded.set("take", 1);
    EXPECT_EQ(packedDefault.canonical(), padded.canonical());
  }
  // The tuning space's persistent configs on packed sequences all take
  // their tiles (a fixed share lost 14-19 % on ragged packs); BSHD's keep
  // the fixed share.
  int packedPersistent = 0, paddedFixed = 0;
  for (const TileConfig &c : fwd.configSpace(params(128, true, Layout::THD).spec()))
    if (c.has("persistent") && c.get("persistent")) {
      ++packedPersistent;
      EXPECT_TRUE(c.has("take") && c.get("take")) << c.canonical();
    }
  for (const TileConfig &c : fwd.configSpace(params(128, true).spec()))
    paddedFixed += c.has("persistent") && c.get("persistent") && !c.has("take");
  EXPECT_GT(packedPersistent, 0);
  EXPECT_GT(paddedFixed, 0);
  {
    auto taking = compileKernel(params(128, true, Layout::THD),
                                fwd.defaultConfig(params(128, true, Layout::THD)));
    ASSERT_TRUE(bool(taking)) << llvm::toString(taking.takeError());
    ASSERT_EQ(taking->entries[0].params.size(), 12u);
    EXPECT_EQ(taking->entries[0].params[11].kind, ParamInfo::View);
    EXPECT_NE(taking->ptx.find("atom.global"), std::string::npos);
  }
  // take without a persistent grid, or below sm_90a, is refused by name.
  attention::Params ampere = params(128, true);
  ampere.target = *Target::parse("sm_80");
  for (auto [p, cfg] :
       {std::pair{params(128, true), "bm=128 bn=128 consumers=2 overlap=1 stages=2 take=1"},
        std::pair{ampere, "bm=128 bn=64 consumers=2 stages=2 take=1"}}) {
    llvm::Error err = fwd.checkConfig(p.spec(), *TileConfig::parse(cfg));
    ASSERT_TRUE(bool(err)) << cfg;
    EXPECT_NE(llvm::toString(std::move(err)).find("take"), std::string::npos) << cfg;
  }
  // The kernel reads cu_seqlens and stores O through a view of its
  // sequence's rows.
  auto k = compileKernel(params(128, true, Layout::THD), {});
  ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
  EXPECT_NE(k->entries[0].name.find("_thd"), std::string::npos) << k->entries[0].name;
  EXPECT_EQ(k->entries[0].params[9].elem, DType::F32);
  EXPECT_EQ(k->entries[0].params[10].elem, DType::F32);

  // The backward: its three kernels take the offsets last (fused, below).
  for (int64_t d : {64, 128, 256})
    for (bool causal : {false, true})
      expectClean(backward(d, causal, Layout::THD), {});
  expectClean(backward(64, true, Layout::THD, DType::F16), {});
  expectClean(backward(128, true, Layout::THD),
              *TileConfig::parse("bn=128 consumers=1 kv_bm=32 overlap=1 stages=2"));
  auto bwd = compileKernel(backward(128, true, Layout::THD), {});
  ASSERT_TRUE(bool(bwd)) << llvm::toString(bwd.takeError());
  ASSERT_EQ(bwd->entries.size(), 3u);
  EXPECT_EQ(bwd->entries[0].params.size(), 15u);
  EXPECT_EQ(bwd->entries[1].params.size(), 15u);
  EXPECT_EQ(bwd->entries[2].params.size(), 6u);
  // A call names the totals it lacks.
  attention::Call call;
  call.layout = Layout::THD;
  call.b = 2;
  call.sq = call.sk = 100;
  call.totalQ = 150;
  auto s = attention::specOf(call, *Target::parse("sm_90a"));
  ASSERT_FALSE(bool(s));
  EXPECT_NE(llvm::toString(s.takeError())
                .find("need totalQ and totalK, the rows of Q and of K in "
                      "all, of at least 1, got totalQ=150 totalK=0"),
            std::string::npos);
  call.totalK = 150;
  s = attention::specOf(call, *Target::parse("sm_90a"));
  ASSERT_TRUE(bool(s)) << llvm::toString(s.takeError());
  EXPECT_NE(s->canonical().find("layout=2"), std::string::npos) << s->canonical();
  // Sequences whose tiles of 64 rows (of every head) reach 2^31: refused
  // by the spec, named in words (2^15 sequences of up to 65536 rows, 64
  // heads: 2^31; 56 heads pass).
  {
    attention::Call many = call;
    many.b = 1 << 15;
    many.sq = many.sk = 65536;
    many.hq = 64;
    many.hkv = 8;
    many.totalQ = many.totalK = 1 << 20;
    auto refused = attention::specOf(many, *Target::parse("sm_90a"));
    ASSERT_FALSE(bool(refused));
    EXPECT_NE(llvm::toString(refused.takeError())
                  .find("b=32768 sequences of up to 65536 rows (the longest) with hq=64 heads make "
                        "2^31 tiles of 64 rows or more"),
              std::string::npos);
    many.hq = 56;
    auto taken = attention::backwardSpecOf(many, *Target::parse("sm_90a"));
    EXPECT_TRUE(bool(taken)) << llvm::toString(taken.takeError());
  }
  // And more rows in all than b sequences of the longest hold (the grid
  // covers sq rows a sequence): b * sq itself passes.
  for (auto [tq, tk, want] :
       {std::tuple{201, 150,
                   "packed Q has 201 rows in all, more than b=2 sequences of at most 100 rows"},
        std::tuple{200, 250,
                   "packed K has 250 rows in all, more than b=2 sequences of at most 100 rows"},
        std::tuple{200, 200, ""}}) {
    call.totalQ = tq;
    call.totalK = tk;
    for (bool bwd : {false, true}) {
      s = bwd ? attention::backwardSpecOf(call, *Target::parse("sm_90a"))
              : attention::specOf(call, *Target::parse("sm_90a"));
      if (!*want) {
        EXPECT_TRUE(bool(s)) << llvm::toString(s.takeError());
        continue;
      }
      ASSERT_FALSE(bool(s)) << tq << " " << tk;
      std::string msg = llvm::toString(s.takeError());
      EXPECT_NE(msg.find(want), std::string::npos) << msg;
    }
  }
}

/// For every tile t < `tiles`, the values `emit` builds from the constant
/// t (an order's arithmetic, as a kernel emits it), folded by MLIR's
/// canonicalizer to constants: `width` of them a tile.
std::vector<std::vector<int64_t>>
foldEveryTile(int64_t tiles, size_t width,
              llvm::function_ref<llvm::SmallVector<mlir::Value>(KernelMath &, mlir::Value)> emit) {
  mlir::MLIRContext ctx;
  ctx.loadDialect<mlir::arith::ArithDialect, mlir::func::FuncDialect>();
  mlir::OpBuilder b(&ctx);
  mlir::Location loc = b.getUnknownLoc();
  auto module = mlir::ModuleOp::create(loc);
  b.setInsertionPointToEnd(module.getBody());
  llvm::SmallVector<mlir::Type> results(size_t(tiles) * width, b.getIndexType());
  auto fn = mlir::func::FuncOp::create(b, loc, "places", b.getFunctionType({}, results));
  b.setInsertionPointToStart(fn.addEntryBlock());
  KernelMath km{b, loc};
  llvm::SmallVector<mlir::Value> out;
  for (int64_t t = 0; t < tiles; ++t) {
    llvm::SmallVector<mlir::Value> values = emit(km, km.cst(t));
    EXPECT_EQ(values.size(), width);
    values.resize(width, km.cst(-1));
    out.append(values);
  }
  mlir::func::ReturnOp::create(b, loc, out);
  mlir::PassManager pm(&ctx);
  pm.addPass(mlir::createCanonicalizerPass());
  std::vector<std::vector<int64_t>> folded;
  if (mlir::failed(pm.run(module))) {
    ADD_FAILURE() << "canonicalize failed";
    module->erase();
    return folded;
  }
  auto ret = llvm::cast<mlir::func::ReturnOp>(fn.getBody().front().getTerminator());
  for (int64_t t = 0; t < tiles; ++t) {
    std::vector<int64_t> &row = folded.emplace_back();
    for (size_t j = 0; j < width; ++j) {
      llvm::APInt v;
      unsigned i = unsigned(size_t(t) * width + j);
      if (!mlir::matchPattern(ret.getOperand(i), mlir::m_ConstantInt(&v))) {
        ADD_FAILURE() << "result " << i << " did not fold to a constant";
        row.push_back(-1);
      } else {
        row.push_back(v.getSExtValue());
      }
    }
  }
  module->erase();
  return folded;
}

/// attn_fwd's place of every tile of `mTiles` row tiles of `heads` heads
/// in the grid's order (placeTile).
struct Placed {
  int64_t seq, head, kvHead, q0;
};
std::vector<Placed> placeEveryTile(const attention::Params &p, const attention::ForwardOrder &o,
                                   int64_t mTiles) {
  int64_t heads = p.b * p.hq;
  std::vector<Placed> placed;
  for (const std::vector<int64_t> &v :
       foldEveryTile(mTiles * heads, 4, [&](KernelMath &km, mlir::Value t) {
         attention::TilePlace at = attention::placeTile(km, p, o, t, km.cst(mTiles), km.cst(heads));
         return llvm::SmallVector<mlir::Value>{at.seq, at.head, at.kvHead, at.q0};
       }))
    placed.push_back({v[0], v[1], v[2], v[3]});
  return placed;
}

TEST(AttentionCompile, TheForwardsTilesComeLastRowsFirstInTheirRasterOrder) {
  // The order of attn_fwd's grid (and of the tiles taken from its counter),
  // from the arithmetic the kernel emits: 2 sequences of 6 query heads (2
  // KV heads), 5 row tiles of 64 rows. Every tile once; each head's row
  // tiles from the last; raster 0 a row tile of every head before the
  // next; raster 1 every row tile of one head before the next; in groups
  // of 4 and of 5 heads (the last group of 2) each group's tiles before the
  // next group's, a row tile of each of the group's heads at a time.
  attention::Params p = params(128, true);
  p.b = 2;
  p.hq = 6;
  p.hkv = 2;
  const int64_t mTiles = 5, bm = 64, heads = p.b * p.hq;
  for (auto [byHead, group] :
       {std::pair{false, int64_t(0)}, std::pair{true, int64_t(0)}, std::pair{true, int64_t(1)},
        std::pair{true, int64_t(4)}, std::pair{true, int64_t(5)}}) {
    SCOPED_TRACE("raster " + std::to_string(byHead) + " raster_heads " + std::to_string(group));
    std::vector<Placed> placed = placeEveryTile(p, {bm, byHead, group}, mTiles);
    ASSERT_EQ(int64_t(placed.size()), mTiles * heads);
    std::set<std::pair<int64_t, int64_t>> seen; // (bh, row tile)
    std::map<int64_t, int64_t> lastRow;         // bh -> the row tile placed last
    // A group's first head, per tile: raster 1 in groups (one head without).
    int64_t size = !byHead ? heads : group > 1 ? group : 1;
    for (size_t t = 0; t < placed.size(); ++t) {
      const Placed &w = placed[t];
      SCOPED_TRACE("tile " + std::to_string(t));
      ASSERT_TRUE(w.seq >= 0 && w.seq < p.b && w.head >= 0 && w.head < p.hq)
          << w.seq << " " << w.head;
      EXPECT_EQ(w.kvHead, w.head / (p.hq / p.hkv));
      ASSERT_EQ(w.q0 % bm, 0);
      int64_t bh = w.seq * p.hq + w.head, row = w.q0 / bm;
      ASSERT_TRUE(row >= 0 && row < mTiles) << row;
      EXPECT_TRUE(seen.insert({bh, row}).second) << "placed twice";
      // Each head's row tiles from the last one, one less each time.
      auto last = lastRow.find(bh);
      EXPECT_EQ(row, last == lastRow.end() ? mTiles - 1 : last->second - 1);
      lastRow[bh] = row;
      // The group the tile belongs to, and where its tiles start.
      int64_t g = bh / size, first = g * size, n = std::min(size, heads - first);
      int64_t groupStart = first * mTiles;
      ASSERT_GE(int64_t(t), groupStart);
      ASSERT_LT(int64_t(t), groupStart + n * mTiles) << "outside its group's run";
      // Within the group: a row tile of each of its heads in turn.
      int64_t in = int64_t(t) - groupStart;
      EXPECT_EQ(in / n, mTiles - 1 - row);
      EXPECT_EQ(in % n, bh - first);
    }
    EXPECT_EQ(int64_t(seen.size()), mTiles * heads);
  }
}

TEST(AttentionCompile, TheBackwardsKeyTilesComeInTheirOrder) {
  // The order of attn_bwd's dK/dV tiles (a grid's programs, or a persistent
  // grid's tiles shared out or taken from its counter), from the arithmetic
  // the kernel emits (placeDkvTile): 5 key tiles of each of 2 sequences' 3
  // KV heads, their query heads in 1 or 2 parts (6 or 12 units). Every
  // tile once. In the grid's order every key tile of one unit before the
  // next, the first first (ordered: the last first), part j of every KV
  // head before part j + 1. With lpt the first key tile of every unit, in
  // the units' order, before the second; with lpt_heads so within groups
  // of 4 or 5 units (the last group smaller), each group's tiles before
  // the next group's.
  const int64_t nTiles = 5, kvs = 2 * 3;
  struct Case {
    attention::DkvOrder order;
    int64_t split;
  };
  std::vector<Case> cases;
  for (int64_t split : {1, 2}) {
    cases.push_back({{false, 0, false}, split});
    cases.push_back({{false, 0, true}, split});
    cases.push_back({{true, 0, false}, split});
    cases.push_back({{true, 4, false}, split});
    cases.push_back({{true, 5, false}, split});
  }
  for (const Case &c : cases) {
    const attention::DkvOrder &o = c.order;
    SCOPED_TRACE("split " + std::to_string(c.split) + " lpt " + std::to_string(o.lpt) +
                 " lpt_heads " + std::to_string(o.lptHeads) + " ordered " +
                 std::to_string(o.ordered));
    const int64_t units = kvs * c.split, tiles = nTiles * units;
    std::vector<std::vector<int64_t>> placed =
        foldEveryTile(tiles, 3, [&](KernelMath &km, mlir::Value t) {
          attention::DkvPlace at =
              attention::placeDkvTile(km, o, t, km.cst(tiles), km.cst(nTiles), km.cst(c.split));
          return llvm::SmallVector<mlir::Value>{at.part, at.nTile, at.bkv};
        });
    ASSERT_EQ(int64_t(placed.size()), tiles);
    std::set<std::pair<int64_t, int64_t>> seen; // (unit, key tile)
    // Groups of units: one unit a group in the grid's order, every unit
    // with lpt alone.
    int64_t size = !o.lpt ? 1 : o.lptHeads ? o.lptHeads : units;
    for (int64_t t = 0; t < tiles; ++t) {
      int64_t part = placed[t][0], nTile = placed[t][1], bkv = placed[t][2];
      SCOPED_TRACE("tile " + std::to_string(t));
      ASSERT_TRUE(part >= 0 && part < c.split && bkv >= 0 && bkv < kvs && nTile >= 0 &&
                  nTile < nTiles)
          << part << " " << bkv << " " << nTile;
      int64_t unit = part * kvs + bkv;
      EXPECT_TRUE(seen.insert({unit, nTile}).second) << "placed twice";
      int64_t first = unit / size * size, n = std::min(size, units - first);
      int64_t groupStart = first * nTiles;
      ASSERT_GE(t, groupStart);
      ASSERT_LT(t, groupStart + n * nTiles) << "outside its group's run";
      int64_t in = t - groupStart;
      // Within the group: each key tile of its units in turn (one unit: its
      // key tiles in turn), the first first, ordered the last first.
      EXPECT_EQ(nTile, o.ordered ? nTiles - 1 - in / n : in / n);
      EXPECT_EQ(unit - first, in % n);
    }
    EXPECT_EQ(int64_t(seen.size()), tiles);
  }
}

TEST(AttentionCompile, Sm80ForwardBuildsWithoutSpillsAndRefusesHopperKeys) {
  // cp.async, ldmatrix and mma.sync: no TMA, wgmma or warp specialization.
  for (const char *arch : {"sm_80", "sm_86"})
    for (int64_t d : {64, 128, 256})
      for (Layout layout : {Layout::BSHD, Layout::BHSD, Layout::THD})
        for (bool causal : {false, true}) {
          attention::Params p = params(d, causal, layout);
          p.target = *Target::parse(arch);
          SCOPED_TRACE(p.spec().canonical());
          auto k = compileKernel(p, {});
          ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
          ASSERT_EQ(k->entries.size(), 1u);
          EXPECT_EQ(k->entries[0].spillBytes, 0) << k->log;
          EXPECT_NE(k->ptx.find("mma.sync.aligned.m16n8k16"), std::string::npos);
          EXPECT_NE(k->ptx.find("cp.async"), std::string::npos);
          EXPECT_NE(k->ptx.find("ldmatrix"), std::string::npos);
          EXPECT_EQ(k->ptx.find("wgmma"), std::string::npos);
          EXPECT_EQ(k->ptx.find("cp.async.bulk.tensor"), std::string::npos);
          EXPECT_EQ(k->entries[0].params.size(), layout == Layout::THD ? 10u : 8u);
        }
  attention::Params p = params(128, true);
  p.target = *Target::parse("sm_80");
  const KernelTemplate &t = getTemplate(attention::forwardOp());
  for (const TileConfig &c : t.configSpace(p)) {
    SCOPED_TRACE(c.canonical());
    auto k = compileKernel(p, c);
    ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
    EXPECT_EQ(k->entries[0].spillBytes, 0) << k->log;
  }
  auto err = t.checkConfig(p, *TileConfig::parse("bm=128 bn=128 consumers=2 overlap=1 stages=2"));
  ASSERT_TRUE(bool(err));
  EXPECT_NE(
      llvm::toString(std::move(err)).find("overlap, pingpong, persistent and take need sm_90a"),
      std::string::npos);
  err = t.checkConfig(p, *TileConfig::parse("bm=128 bn=64 consumers=2 stages=1"));
  ASSERT_TRUE(bool(err));
  EXPECT_NE(llvm::toString(std::move(err)).find("the cp.async pipeline needs 2 or more"),
            std::string::npos);
}

/// The sm_80 backward of `p` with `config` (default: {}) built: its three
/// kernels on cp.async, ldmatrix and mma.sync (no TMA, wgmma or warp
/// specialization), Q, K, V and dO as rows and the workspace as a memref
/// where the Hopper kernels take tensor maps, and no spills.
void expectCleanSm80Backward(const attention::Params &p, const TileConfig &config) {
  SCOPED_TRACE(p.spec().canonical() + " [" + config.canonical() + "]");
  auto k = compileKernel(p, config);
  ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
  ASSERT_EQ(k->entries.size(), 3u);
  for (const EntryInfo &e : k->entries)
    EXPECT_EQ(e.spillBytes, 0) << e.name << "\n" << k->log;
  EXPECT_NE(k->ptx.find("mma.sync.aligned.m16n8k16"), std::string::npos);
  EXPECT_NE(k->ptx.find("cp.async.cg.shared.global"), std::string::npos);
  EXPECT_NE(k->ptx.find("ldmatrix"), std::string::npos);
  EXPECT_NE(k->ptx.find("ex2.approx"), std::string::npos);
  EXPECT_EQ(k->ptx.find("wgmma"), std::string::npos);
  EXPECT_EQ(k->ptx.find("cp.async.bulk"), std::string::npos);
  EXPECT_EQ(k->ptx.find("setmaxnreg"), std::string::npos);
  bool thd = p.layout == Layout::THD;
  for (int i : {0, 1}) {
    const EntryInfo &e = k->entries[size_t(i)];
    ASSERT_EQ(e.params.size(), thd ? 15u : 13u) << e.name;
    for (int j : {0, 1, 2, 3}) {
      EXPECT_EQ(e.params[size_t(j)].kind, ParamInfo::View) << e.name << " argument " << j;
      EXPECT_EQ(e.params[size_t(j)].elem, p.dt) << e.name << " argument " << j;
    }
  }
  // The dK/dV kernel reads the workspace's LSE and D from global memory.
  EXPECT_EQ(k->entries[1].params[4].kind, ParamInfo::View);
  EXPECT_EQ(k->entries[1].params[4].elem, DType::F32);
}

TEST(AttentionCompile, Sm80BackwardBuildsWithoutSpillsAndRefusesWhatItCannotRun) {
  // Every layout, mask and head dim, A100's and the sm_86 parts' shared
  // memory and sm_90 (Hopper without wgmma, where the GPU tests run; its
  // ptxas spilled where sm_80's did not), MHA and GQA, bf16 and f16, with
  // the default config (head dim 256: the consumers split the columns of
  // dQ, dK and dV, dsplit).
  for (const char *arch : {"sm_80", "sm_86", "sm_90"})
    for (int64_t d : {64, 128, 256})
      for (Layout layout : {Layout::BSHD, Layout::BHSD, Layout::THD})
        for (bool causal : {false, true}) {
          attention::Params p = backward(d, causal, layout);
          p.target = *Target::parse(arch);
          expectCleanSm80Backward(p, {});
        }
  attention::Params mha = backward(128, true);
  mha.target = *Target::parse("sm_80");
  mha.hkv = mha.hq;
  expectCleanSm80Backward(mha, {});
  mha.dt = DType::F16;
  expectCleanSm80Backward(mha, {});

  // Head dim 256: the largest step the register rule allows, and three
  // stages, f16.
  attention::Params wide = mha;
  wide.d = 256;
  expectCleanSm80Backward(wide, *TileConfig::parse("bn=48 consumers=2 dsplit=1 kv_bm=16 stages=2"));
  wide.causal = false;
  expectCleanSm80Backward(wide, *TileConfig::parse("bn=16 consumers=2 dsplit=1 kv_bm=16 stages=3"));

  const KernelTemplate &t = getTemplate(attention::backwardOp());
  for (const char *why :
       {"overlap=1", "fused=1", "sfirst=1", "kvsfirst=1", "qsplit=1", "persist=1", "lpt=1"}) {
    auto err = t.checkConfig(mha, *TileConfig::parse(std::string("bn=32 consumers=1 kv_bm=16 "
                                                                 "stages=2 ") +
                                                     why));
    ASSERT_TRUE(bool(err)) << why;
    EXPECT_NE(llvm::toString(std::move(err))
                  .find("overlap, fused, sfirst, kvsfirst, qsplit, persist and lpt need sm_90a"),
              std::string::npos)
        << why;
  }
  attention::Params d64 = mha;
  d64.d = 64;
  attention::Params sm86 = mha;
  sm86.target = *Target::parse("sm_86");
  for (const auto &[p, cfg, why] :
       std::initializer_list<std::tuple<attention::Params, const char *, const char *>>{
           // 32 queries a step at head dim 128 spilled 4 to 72 bytes.
           {mha, "bn=32 consumers=1 kv_bm=32 stages=2",
            "(at most 160 below sm_90a): use a smaller kv_bm"},
           {mha, "bn=64 consumers=1 kv_bm=16 stages=2",
            "(at most 128 below sm_90a): use a smaller bn"},
           {d64, "bn=32 consumers=1 kv_bm=64 stages=2", "spills in the dK/dV kernel below sm_90a"},
           {mha, "bn=32 consumers=1 kv_bm=16 stages=1", "the cp.async pipeline needs 2 or more"},
           // dsplit is head dim 256's, with two consumers; 256 needs it.
           {mha, "bn=32 consumers=2 dsplit=1 kv_bm=16 stages=2", "dsplit is for head dim 256"},
           {wide, "bn=32 consumers=2 kv_bm=16 stages=2",
            "attn_bwd at head dim 256 needs dsplit = 1 and two consumers"},
           {wide, "bn=32 consumers=1 dsplit=1 kv_bm=16 stages=2",
            "attn_bwd at head dim 256 needs dsplit = 1 and two consumers"},
           {wide, "bn=64 consumers=2 dsplit=1 kv_bm=16 stages=2",
            "(at most 128 below sm_90a): use a smaller bn"},
           {wide, "bn=16 consumers=2 dsplit=1 kv_bm=32 stages=2",
            "(at most 160 below sm_90a): use a smaller kv_bm"},
           {mha, "bn=32 consumers=1 kv_bm=24 stages=2", "kv_bm = 24 must be a multiple of 16"},
           {sm86, "bn=32 consumers=2 kv_bm=16 stages=3", "bytes of shared memory; sm_86 allows"}}) {
    auto err = t.checkConfig(p, *TileConfig::parse(cfg));
    ASSERT_TRUE(bool(err)) << cfg;
    EXPECT_NE(llvm::toString(std::move(err)).find(why), std::string::npos) << cfg;
  }
  // The Hopper kernels keep their multiple of 32.
  auto err = t.checkConfig(backward(128, true), *TileConfig::parse("bn=64 consumers=2 kv_bm=16 "
                                                                   "stages=2"));
  ASSERT_TRUE(bool(err));
  EXPECT_NE(llvm::toString(std::move(err)).find("kv_bm = 16 must be a multiple of 32"),
            std::string::npos);
}

TEST(AttentionCompile, Sm80BackwardStepsWaitForTheirTileThenCopyAhead) {
  // Each step of both kernels' loops (the dQ kernel's two, the dK/dV
  // kernel's two inside its loop over query heads), before its first
  // product: the wait until at most stages - 2 younger copy groups are
  // pending, the block barrier, then the copies of the tiles stages - 1
  // steps ahead and their commit; and both kernels wait for every copy
  // before they end. (The GPU test checks the values; this keeps the
  // pipeline's shape where no GPU runs.)
  namespace tt = tilejit::tile;
  for (int64_t stages : {2, 3})
    for (int64_t d : {64, 128})
      for (bool causal : {false, true}) {
        attention::Params p = backward(d, causal, Layout::THD);
        p.target = *Target::parse("sm_80");
        auto cfg = TileConfig::parse("bn=32 consumers=1 kv_bm=16 stages=" + std::to_string(stages));
        ASSERT_TRUE(bool(cfg));
        mlir::MLIRContext ctx;
        auto m = getTemplate(attention::backwardOp()).build(ctx, p.spec(), *cfg);
        ASSERT_TRUE(bool(m)) << llvm::toString(m.takeError());
        SCOPED_TRACE(p.spec().canonical() + " [" + cfg->canonical() + "]");
        int steps = 0;
        (*m)->walk([&](mlir::scf::ForOp loop) {
          std::vector<std::string> before;
          bool dot = false;
          for (mlir::Operation &op : *loop.getBody()) {
            if (mlir::isa<tt::DotOp>(op)) {
              dot = true;
              break;
            }
            if (op.getDialect() && op.getDialect()->getNamespace() == "tile")
              before.push_back(op.getName().getStringRef().str());
            if (auto wait = mlir::dyn_cast<tt::AsyncWaitOp>(op)) {
              EXPECT_EQ(wait.getPending(), uint64_t(stages - 2));
            }
          }
          if (!dot)
            return;
          ++steps;
          EXPECT_EQ(before, (std::vector<std::string>{"tile.async_wait", "tile.block_barrier",
                                                      "tile.async_copy", "tile.async_copy",
                                                      "tile.async_commit"}));
        });
        EXPECT_EQ(steps, 4);
        int drained = 0;
        (*m)->walk([&](tt::KernelOp k) {
          for (mlir::Operation &op : k.getBody().front())
            if (auto wait = mlir::dyn_cast<tt::AsyncWaitOp>(op); wait && wait.getPending() == 0)
              ++drained;
        });
        EXPECT_EQ(drained, 2); // the dQ and dK/dV kernels (not the parts' sum)
      }
}

TEST(AttentionCompile, Sm80BackwardAtHeadDim256SplitsTheColumnsByWarpgroup) {
  // Below sm_90a at head dim 256 the two warpgroups hold different halves
  // of dQ's, dK's and dV's columns: every dQ/dV/dK product's B columns (and
  // the dQ kernel's store) are placed by the warpgroup's index, each
  // panel at its own offset; at 128 (no split) none is. (The GPU test
  // checks the values.)
  namespace tt = tilejit::tile;
  std::function<bool(mlir::Value)> byWarpgroup = [&](mlir::Value v) {
    mlir::Operation *op = v.getDefiningOp();
    if (!op)
      return false;
    if (mlir::isa<tt::WarpgroupIdOp>(op))
      return true;
    for (mlir::Value in : op->getOperands())
      if (byWarpgroup(in))
        return true;
    return false;
  };
  for (int64_t d : {256, 128}) {
    attention::Params p = backward(d, true);
    p.target = *Target::parse("sm_80");
    const KernelTemplate &t = getTemplate(attention::backwardOp());
    mlir::MLIRContext ctx;
    auto m = t.build(ctx, p.spec(), t.defaultConfig(p));
    ASSERT_TRUE(bool(m)) << llvm::toString(m.takeError());
    SCOPED_TRACE(p.spec().canonical());
    std::map<std::string, std::vector<mlir::Value>> offsets; // by kernel
    (*m)->walk([&](tt::DotRegOp dot) {
      auto k = dot->getParentOfType<tt::KernelOp>();
      offsets[k.getSymName().str()].push_back(dot.getBOffset());
    });
    ASSERT_EQ(offsets.size(), 2u); // the dQ and dK/dV kernels
    for (auto &[kernel, offs] : offsets) {
      bool dq = kernel.rfind("attn_bwd_dq_", 0) == 0;
      // dQ: one product; dK/dV: dV's and dK's by panels of 64 columns of
      // the warpgroup's columns (two each at 256 split, 128 whole); each in
      // both loops (the masked steps' and the rest).
      EXPECT_EQ(offs.size(), dq ? 2u : 8u) << kernel;
      for (mlir::Value off : offs)
        EXPECT_EQ(byWarpgroup(off), d == 256) << kernel;
    }
    bool storedByWarpgroup = false;
    (*m)->walk([&](tt::StoreOp st) {
      auto k = st->getParentOfType<tt::KernelOp>();
      if (k.getSymName().starts_with("attn_bwd_dq_") &&
          mlir::cast<mlir::ShapedType>(st.getValue().getType()).getRank() == 2)
        storedByWarpgroup |= byWarpgroup(st.getIndices().back());
    });
    EXPECT_EQ(storedByWarpgroup, d == 256) << "dQ's columns stored by the warpgroup's index";
  }
}

TEST(AttentionCompile, Sm80BackwardTuningSpaceBuildsWithoutSpills) {
  for (int64_t d : {64, 128, 256})
    for (bool causal : {false, true}) {
      attention::Params p = backward(d, causal);
      p.target = *Target::parse("sm_80");
      std::vector<TileConfig> space = getTemplate(attention::backwardOp()).configSpace(p.spec());
      // Head dim 128: 32 or 48 keys, 16 queries a step, 2 or 3 stages, 1 or
      // 2 consumers; 64: more; 256: 16 to 48 keys, two consumers splitting
      // the columns, as shared memory allows.
      EXPECT_GE(space.size(), d == 256 ? 5u : d == 128 ? 8u : 12u);
      for (const TileConfig &c : space)
        expectCleanSm80Backward(p, c);
    }
  // Packed sequences (their offsets' loads beside the steps), causal, on
  // sm_86's smaller shared memory (a space of its own).
  for (int64_t d : {64, 128, 256}) {
    attention::Params p = backward(d, true, Layout::THD);
    p.target = *Target::parse("sm_86");
    for (const TileConfig &c : getTemplate(attention::backwardOp()).configSpace(p.spec()))
      expectCleanSm80Backward(p, c);
  }
}

TEST(AttentionCompile, BackwardBuildsWithoutSpillsForEveryHeadDimMaskLayoutAndType) {
  for (int64_t d : {64, 128})
    for (bool causal : {false, true})
      expectClean(backward(d, causal), {});
  expectClean(backward(128, true, Layout::BHSD), {});
  expectClean(backward(64, false, Layout::BHSD, DType::F16), {});
  // The configs of the GPU tests, and the largest the register rule allows.
  for (const char *cfg :
       {"bn=32 consumers=1 kv_bm=32 stages=3", "bn=64 consumers=2 kv_bm=32 stages=1",
        "bn=128 consumers=2 kv_bm=64 stages=2"})
    expectClean(backward(64, true), *TileConfig::parse(cfg));
  expectClean(backward(128, false), *TileConfig::parse("bn=64 consumers=1 kv_bm=32 stages=3"));
  expectClean(backward(128, true), *TileConfig::parse("bn=128 consumers=2 kv_bm=64 stages=2"));
  expectClean(backward(128, true), *TileConfig::parse("bn=128 consumers=1 kv_bm=32 stages=2"));
  // Both products of a step started together, both gradient products too.
  for (const char *cfg : {"bn=128 consumers=2 kv_bm=64 overlap=1 stages=2",
                          "bn=128 consumers=1 kv_bm=32 overlap=1 stages=2"})
    for (Layout l : {Layout::BSHD, Layout::BHSD})
      expectClean(backward(128, true, l), *TileConfig::parse(cfg));
  expectClean(backward(64, false),
              *TileConfig::parse("bn=128 consumers=2 kv_bm=64 overlap=1 stages=2"));
  // The dQ kernel's dP product started once S's is done (sfirst, the default
  // at head dims 128 and 256), at 64 and with one consumer.
  expectClean(backward(64, true),
              *TileConfig::parse("bn=128 consumers=2 kv_bm=64 overlap=1 sfirst=1 stages=2"));
  expectClean(backward(128, true, Layout::BHSD),
              *TileConfig::parse("bn=128 consumers=1 kv_bm=32 overlap=1 sfirst=1 stages=2"));
  // The dK/dV kernel's dP^T after S^T, dV's product behind it (kvsfirst).
  for (int64_t d : {64, 128})
    for (bool causal : {false, true})
      expectClean(backward(d, causal), *TileConfig::parse("bn=128 consumers=2 kv_bm=64 "
                                                          "kvsfirst=1 overlap=1 stages=2"));
  expectClean(backward(128, true, Layout::THD),
              *TileConfig::parse("bn=128 consumers=1 kv_bm=32 kvsfirst=1 overlap=1 stages=2"));
  expectClean(backward(256, true), *TileConfig::parse("bn=32 consumers=2 dsplit=1 kv_bm=32 "
                                                      "kvsfirst=1 overlap=1 stages=2"));
  // Three stages where the dK/dV kernel spilled are refused by name.
  const KernelTemplate &bt = getTemplate(attention::backwardOp());
  for (auto [d, causal, cfg] :
       {std::tuple{128, true, "bn=64 consumers=1 kv_bm=32 stages=3"},
        std::tuple{128, false, "bn=64 consumers=2 kv_bm=64 overlap=1 stages=3"},
        std::tuple{64, true, "bn=128 consumers=2 kv_bm=64 overlap=1 stages=3"}}) {
    auto err = bt.checkConfig(backward(d, causal), *TileConfig::parse(cfg));
    ASSERT_TRUE(bool(err)) << cfg;
    EXPECT_NE(llvm::toString(std::move(err)).find("spills in the dK/dV kernel: use 2 stages"),
              std::string::npos)
        << cfg;
  }
  // Head dim 256: the consumers split dK's and dV's columns (dsplit); the
  // default, both layouts and masks, f16, and the largest the rules allow.
  for (bool causal : {false, true})
    for (Layout l : {Layout::BSHD, Layout::BHSD})
      expectClean(backward(256, causal, l), {});
  expectClean(backward(256, true, Layout::BSHD, DType::F16), {});
  expectClean(backward(256, false),
              *TileConfig::parse("bn=16 consumers=2 dsplit=1 kv_bm=32 overlap=1 stages=3"));
}

TEST(AttentionCompile, BackwardTuningSpaceBuildsWithoutSpills) {
  // Every config the tuner may measure at head dims 64, 128 and 256, causal
  // or not, builds clean: the register and stage rules refuse what spilled
  // (ptxas's reports over this space found three-stage dK/dV kernels the
  // register rule had let through, bench/NOTES.md b8).
  for (int64_t d : {64, 128, 256})
    for (bool causal : {false, true}) {
      attention::Params p = backward(d, causal);
      for (const TileConfig &c : getTemplate(attention::backwardOp()).configSpace(p.spec()))
        expectClean(p, c);
    }
}

TEST(AttentionCompile, BackwardQuerySplitTakesTwiceTheQueriesForTheSameScoreProducts) {
  // qsplit (head dim 256, with dsplit): the dK/dV kernel's consumers each
  // compute S^T and dP^T for half of a step's 64 queries (64 x 32 over the
  // whole head dim, 16 wgmma of n32 each), where dsplit alone has both
  // compute both for all of a step's 32: the same n32 products a step for
  // twice the queries. dV's and dK's products read P^T and dS^T from shared
  // memory (A by descriptor: no n128 product takes A from registers), which
  // each consumer stores half of with stmatrix. Clean for both masks, the
  // three layouts and f16; refused without dsplit, with other steps or
  // stages, and below sm_90a.
  const char *split = "bn=32 consumers=2 dsplit=1 kv_bm=64 overlap=1 qsplit=1 stages=2";
  // (Which half of the queries each consumer takes, the PTX does not show:
  // the GPU test BackwardHeadDim256SplitsTheQueries checks every element.)
  // The dK/dV kernel's PTX, and the occurrences of `what` in it.
  auto dkvOf = [](const std::string &ptx) {
    size_t from = ptx.find(".entry attn_bwd_dkdv_bf16"), to = ptx.find(".entry", from + 1);
    EXPECT_NE(from, std::string::npos) << "no dK/dV kernel";
    if (from == std::string::npos)
      return std::string();
    return ptx.substr(from, to == std::string::npos ? to : to - from);
  };
  auto inDkv = [&](const std::string &ptx, const std::string &what) {
    std::string dkv = dkvOf(ptx);
    size_t n = 0;
    for (size_t at = dkv.find(what); at != std::string::npos; at = dkv.find(what, at + 1))
      ++n;
    return n;
  };
  auto plain = compileKernel(
      backward(256, true),
      *TileConfig::parse("bn=32 consumers=2 dsplit=1 kv_bm=32 overlap=1 sfirst=1 stages=2"));
  ASSERT_TRUE(bool(plain)) << llvm::toString(plain.takeError());
  auto k = compileKernel(backward(256, true), *TileConfig::parse(split));
  ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
  // Two loops (the diagonal's steps and the others).
  const char *n32 = "wgmma.mma_async.sync.aligned.m64n32k16";
  const char *n128 = "wgmma.mma_async.sync.aligned.m64n128k16";
  EXPECT_EQ(inDkv(plain->ptx, n32), 2u * 2u * 16u);
  EXPECT_EQ(inDkv(k->ptx, n32), 2u * 2u * 16u);
  EXPECT_EQ(inDkv(plain->ptx, n128), 2u * 2u * 2u);
  EXPECT_EQ(inDkv(k->ptx, n128), 2u * 2u * 4u);
  // dV's and dK's products (n128): A from registers without qsplit, from
  // shared memory with it.
  auto aFromRegisters = [&](const std::string &ptx) {
    std::string dkv = dkvOf(ptx);
    size_t n = 0;
    for (size_t at = dkv.find(n128); at != std::string::npos; at = dkv.find(n128, at + 1)) {
      // The operands after the accumulator's: "}, {%r" (A's registers) or
      // "}, %rd" (A's descriptor).
      size_t accEnd = dkv.find("}", at);
      n += dkv.compare(accEnd, 6, "}, {%r") == 0;
    }
    return n;
  };
  EXPECT_EQ(aFromRegisters(plain->ptx), 2u * 2u * 2u);
  EXPECT_EQ(aFromRegisters(k->ptx), 0u);
  EXPECT_EQ(inDkv(plain->ptx, "stmatrix.sync.aligned"), 0u);
  EXPECT_EQ(inDkv(k->ptx, "stmatrix.sync.aligned"), 2u * 2u * 2u);
  for (bool causal : {false, true})
    for (Layout l : {Layout::BSHD, Layout::BHSD, Layout::THD})
      expectClean(backward(256, causal, l), *TileConfig::parse(split));
  expectClean(backward(256, true, Layout::BSHD, DType::F16), *TileConfig::parse(split));
  // The default at head dim 256 on sm_90a (bench/NOTES.md b17), in both
  // modes; the tuning space holds it beside dsplit alone.
  const KernelTemplate &t = getTemplate(attention::backwardOp());
  for (bool causal : {false, true})
    for (bool deterministic : {true, false}) {
      attention::Params p = backward(256, causal);
      p.deterministic = deterministic;
      TileConfig def = t.defaultConfig(p.spec());
      EXPECT_TRUE(def.has("qsplit") && def.get("qsplit")) << def.canonical();
      int with = 0, without = 0;
      for (const TileConfig &c : t.configSpace(p.spec()))
        ++(c.has("qsplit") && c.get("qsplit") ? with : without);
      EXPECT_GE(with, 2);
      EXPECT_GE(without, 1);
    }
  const std::string why = "qsplit needs dsplit, kv_bm = 64 (each consumer's half of a step's "
                          "queries, and the step's P^T and dS^T whole 128-byte panels), two "
                          "stages (three do not fit shared memory), overlap = 1 and no kvsfirst; ";
  for (auto [d, cfg, got] :
       {std::tuple{128, "bn=128 consumers=2 kv_bm=64 overlap=1 qsplit=1 stages=2",
                   "got dsplit = 0, kv_bm = 64, stages = 2, overlap = 1, kvsfirst = 0"},
        std::tuple{256, "bn=32 consumers=2 dsplit=1 kv_bm=32 overlap=1 qsplit=1 stages=2",
                   "got dsplit = 1, kv_bm = 32, stages = 2, overlap = 1, kvsfirst = 0"},
        std::tuple{256, "bn=32 consumers=2 dsplit=1 kv_bm=64 overlap=1 qsplit=1 stages=3",
                   "got dsplit = 1, kv_bm = 64, stages = 3, overlap = 1, kvsfirst = 0"},
        std::tuple{256, "bn=32 consumers=2 dsplit=1 kv_bm=64 overlap=0 qsplit=1 stages=2",
                   "got dsplit = 1, kv_bm = 64, stages = 2, overlap = 0, kvsfirst = 0"},
        std::tuple{256,
                   "bn=32 consumers=2 dsplit=1 kv_bm=64 kvsfirst=1 overlap=1 qsplit=1 stages=2",
                   "got dsplit = 1, kv_bm = 64, stages = 2, overlap = 1, kvsfirst = 1"}}) {
    auto err = t.checkConfig(backward(d, true), *TileConfig::parse(cfg));
    ASSERT_TRUE(bool(err)) << cfg;
    EXPECT_NE(llvm::toString(std::move(err)).find(why + got), std::string::npos) << cfg;
  }
  attention::Params sm80 = backward(256, true);
  sm80.target = *Target::parse("sm_80");
  auto err = t.checkConfig(sm80, *TileConfig::parse("bn=32 consumers=2 dsplit=1 kv_bm=16 "
                                                    "qsplit=1 stages=2"));
  ASSERT_TRUE(bool(err));
  EXPECT_NE(llvm::toString(std::move(err)).find("qsplit, persist and lpt need sm_90a"),
            std::string::npos);
}

TEST(AttentionCompile, PtxasInjectsNoWaitBetweenTheOverlappedScoreProducts) {
  // With overlap, a step's two score products run together. Zeros written
  // into the second's accumulator beside the first in flight made ptxas
  // wait for the first (C7517: "warpgroup.wait is injected"), undoing the
  // overlap; the products overwrite instead. Only the dK/dV kernel's steps
  // on the causal diagonal keep one wait (there the mask's registers beside
  // an overwriting product spilled).
  for (bool causal : {false, true}) {
    attention::Params p = backward(128, causal);
    auto k = compileKernel(p.spec(), getTemplate(attention::backwardOp()).defaultConfig(p.spec()));
    ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
    SCOPED_TRACE(p.spec().canonical() + " [" + k->config.canonical() + "]");
    EXPECT_EQ(k->config.get("overlap"), 1);
    EXPECT_EQ(k->config.get("consumers"), 2);
    auto waitsIn = [&](const std::string &name) {
      for (size_t at = k->log.find("C7517"); at != std::string::npos;
           at = k->log.find("C7517", at + 1)) {
        size_t end = k->log.find('\n', at);
        std::string line = k->log.substr(at, end == std::string::npos ? end : end - at);
        if (line.find("'" + name + "'") != std::string::npos)
          return true;
      }
      return false;
    };
    for (const EntryInfo &e : k->entries) {
      bool allowed = causal && e.name.rfind("attn_bwd_dkdv_", 0) == 0 &&
                     e.name.rfind("attn_bwd_dkdv_sum_", 0) != 0;
      EXPECT_TRUE(allowed || !waitsIn(e.name)) << e.name << "\n" << k->log;
    }
  }
}

TEST(AttentionCompile, FusedPartsInRegisterOrderBuildClean) {
  // dqfrag: the parts of dQ in the registers' order, added by bulk copies:
  // head dims 64 (one consumer) and 128 (two), both masks and layouts, in
  // any order and in a fixed one (GQA with the heads split), f16, without
  // overlap; no spill byte. The other fused configs' kernels take the
  // tensor map (expectClean checks both).
  for (int64_t d : {64, 128})
    for (bool causal : {false, true})
      for (Layout l : {Layout::BSHD, Layout::BHSD})
        for (bool deterministic : {false, true}) {
          attention::Params p =
              deterministic ? backward(d, causal, l) : nondeterministic(d, causal, l);
          expectClean(p, *TileConfig::parse(
                             d == 64 ? "bn=128 consumers=1 dqfrag=1 fused=1 kv_bm=64 overlap=1 "
                                       "stages=2"
                                     : "bn=128 consumers=2 dqfrag=1 fused=1 kv_bm=64 overlap=1 "
                                       "stages=2"));
        }
  expectClean(nondeterministic(128, true, Layout::BSHD, DType::F16),
              *TileConfig::parse("bn=64 consumers=2 dqfrag=1 fused=1 kv_bm=64 stages=2"));
  expectClean(backward(128, false, Layout::BHSD, DType::F16),
              *TileConfig::parse("bn=64 consumers=2 dqfrag=1 fused=1 kv_bm=64 stages=2"));
  // Head counts whose hq * d is no power of two (BSHD places the parts
  // across the heads' columns).
  for (auto [hq, hkv] : {std::pair{int64_t(3), int64_t(3)}, std::pair{int64_t(12), int64_t(4)}})
    for (bool deterministic : {false, true}) {
      attention::Params p = deterministic ? backward(128, true) : nondeterministic(128, true);
      p.hq = hq;
      p.hkv = hkv;
      expectClean(
          p, *TileConfig::parse("bn=128 consumers=2 dqfrag=1 fused=1 kv_bm=64 overlap=1 stages=2"));
    }
}

TEST(AttentionCompile, FusedBackwardBuildsAndNamesWhatItNeeds) {
  // dQ in the dK/dV kernel: head dim 64 with one consumer, 128 with two
  // (each 64 of dQ's columns; no spills: SpillRule.h allows none),
  // both masks and layouts, f16, without overlap; for a deterministic
  // spec, adding in order (GQA; at head dim 128 under a causal mask, as many
  // KV heads as query heads in one layout).
  auto inOrder = [](attention::Params p) {
    if (p.d == 128 && p.causal && p.layout == Layout::BHSD)
      p.hkv = p.hq;
    return p;
  };
  for (int64_t d : {64, 128})
    for (bool causal : {false, true})
      for (Layout l : {Layout::BSHD, Layout::BHSD})
        for (bool deterministic : {false, true}) {
          expectClean(
              deterministic ? inOrder(backward(d, causal, l)) : nondeterministic(d, causal, l),
              *TileConfig::parse(d == 64
                                     ? "bn=128 consumers=1 fused=1 kv_bm=64 overlap=1 stages=2"
                                     : "bn=128 consumers=2 fused=1 kv_bm=64 overlap=1 stages=2"));
        }
  for (bool deterministic : {false, true})
    for (Layout l : {Layout::BSHD, Layout::BHSD}) {
      // (Adding in order: without a mask in one layout, with GQA at 128.)
      bool causal = !deterministic || l == Layout::BSHD;
      auto spec = [&](int64_t d) {
        return deterministic ? inOrder(backward(d, causal, l, DType::F16))
                             : nondeterministic(d, true, l, DType::F16);
      };
      expectClean(spec(64), *TileConfig::parse("bn=64 consumers=1 fused=1 kv_bm=64 stages=3"));
      expectClean(spec(128), *TileConfig::parse("bn=64 consumers=2 fused=1 kv_bm=64 stages=2"));
    }
  // A step's queries are one warpgroup's rows, and each consumer's columns
  // of dQ whole panels. Refused by name.
  const KernelTemplate &t = getTemplate(attention::backwardOp());
  auto fast = [](int64_t d) { return nondeterministic(d, true); };
  for (auto [p, cfg, what] :
       {std::tuple{fast(64), "bn=128 consumers=2 fused=1 kv_bm=64 stages=2",
                   "fused needs whole panels of dQ's columns for each consumer: d / consumers = "
                   "64 / 2 is not a multiple of 64"},
        std::tuple{fast(128), "bn=128 consumers=2 fused=1 kv_bm=32 stages=2",
                   "fused needs kv_bm = 64 (a step's queries are one warpgroup's rows of dQ's "
                   "product), got 32"},
        std::tuple{fast(128), "bn=128 consumers=1 fused=1 kv_bm=64 stages=2",
                   "fused at head dim 128 needs two consumers: with one, a consumer thread would "
                   "hold 240 registers of dK, dV, S^T, dP^T and P^T (at most 232)"},
        std::tuple{fast(128), "bn=128 consumers=2 fused=1 kv_bm=64 overlap=1 sfirst=1 stages=2",
                   "sfirst needs overlap = 1 and the dQ kernel (no fused dQ); got overlap = 1, "
                   "fused = 1"},
        std::tuple{fast(128), "bn=128 consumers=2 kv_bm=64 kvsfirst=1 overlap=0 stages=2",
                   "kvsfirst needs overlap = 1 and no fused dQ; got overlap = 0, fused = 0"},
        std::tuple{fast(128), "bn=128 consumers=2 dqfrag=1 kv_bm=64 overlap=1 stages=2",
                   "dqfrag needs fused = 1"}}) {
    auto err = t.checkConfig(p, *TileConfig::parse(cfg));
    ASSERT_TRUE(bool(err)) << cfg;
    EXPECT_NE(llvm::toString(std::move(err)).find(what), std::string::npos) << cfg;
  }
  for (bool causal : {true, false}) {
    EXPECT_FALSE(bool(t.checkConfig(
        backward(64, causal), *TileConfig::parse("bn=128 consumers=1 fused=1 kv_bm=64 stages=2"))))
        << "head dim 64 adds in order with GQA, causal = " << causal;
    EXPECT_FALSE(bool(t.checkConfig(
        backward(128, causal), *TileConfig::parse("bn=128 consumers=2 fused=1 kv_bm=64 stages=2"))))
        << "head dim 128 adds in order with GQA, causal = " << causal;
  }
  // Nondeterministic: in the tuning space (head dims 64 and 128, two
  // stages, overlap on and off, the parts of dQ in the registers' order
  // or through the tensor map; at 128 the default is one of them:
  // NondeterministicDefaultIsFusedAtHeadDim128), built without a spill
  // byte (packed sequences: PackedSequencesFusedBackwardBuildsWithoutSpills).
  // Deterministic: at head dim 128 where
  // the rules let it add in order (DeterministicDefaultAddsInOrderWithManyPrograms
  // says where it is the default), GQA too (these specs: 8 query heads, 2
  // KV heads); not at head dim 64.
  for (int64_t d : {64, 128})
    for (bool deterministic : {true, false})
      for (bool causal : {true, false}) {
        attention::Params p = deterministic ? backward(d, causal) : nondeterministic(d, causal);
        TileConfig def = t.defaultConfig(p);
        EXPECT_EQ(def.has("fused") && def.get("fused"), !deterministic && d == 128);
        if (d == 64) {
          EXPECT_EQ(def, t.defaultConfig(backward(d, causal))) << "the same default either way";
        }
        int fusedInSpace = 0, persistInSpace = 0;
        for (const TileConfig &c : t.configSpace(p)) {
          bool fused = c.has("fused") && c.get("fused");
          bool persist = c.has("persist") && c.get("persist");
          fusedInSpace += fused && !persist;
          persistInSpace += persist;
          if (!fused)
            continue;
          auto k = compileKernel(p, c); // no spill at all
          ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
          for (const EntryInfo &e : k->entries)
            EXPECT_EQ(e.spillBytes, 0) << c.canonical() << " " << e.name << "\n" << k->log;
        }
        // (Deterministic at 128: the ones in order, overlap on and off,
        // dqfrag on and off.) Nondeterministic: those with overlap with
        // one program a multiprocessor too (at head dim 128 under a causal
        // mask only with dqfrag), and under a causal mask also longest
        // first.
        EXPECT_EQ(fusedInSpace, !deterministic || d == 128 ? 4 : 0) << d << causal;
        int persistent = deterministic ? 0 : d == 128 && causal ? 1 : 2;
        // (Each shared out in advance and taken at run time; under the
        // mask also taken longest first in groups of four KV heads.)
        EXPECT_EQ(persistInSpace,
                  2 * (causal ? 2 * persistent : persistent) + (causal ? persistent : 0))
            << d << causal;
      }
}

TEST(AttentionCompile, PackedSequencesFusedBackwardBuildsWithoutSpills) {
  // Fused on packed sequences: each tile's part of dQ goes to its
  // sequence's rows of the sums (after kFusedQueryRows more a sequence
  // before it), keys past the sequence masked where a tile reaches past
  // them (the next sequence's, not TMA's zeros). Every fused config of the
  // tuning spaces (any order: persistent, longest first, taken; in order
  // at head dim 128) builds with no spill byte, as the BSHD ones.
  const KernelTemplate &t = getTemplate(attention::backwardOp());
  for (int64_t d : {64, 128})
    for (bool deterministic : {false, true})
      for (bool causal : {true, false}) {
        attention::Params p = deterministic ? backward(d, causal, Layout::THD)
                                            : nondeterministic(d, causal, Layout::THD);
        int fusedInSpace = 0, persistentInSpace = 0;
        for (const TileConfig &c : t.configSpace(p)) {
          if (!c.has("fused") || !c.get("fused"))
            continue;
          ++fusedInSpace;
          expectClean(p, c); // (no spill byte in a fused config's kernels)
          // (Persistent: the tiles taken from the counter, so that the
          // producer passes over those past their sequence's keys.)
          if (c.has("persist") && c.get("persist")) {
            ++persistentInSpace;
            EXPECT_TRUE(c.has("take") && c.get("take")) << c.canonical();
          }
        }
        EXPECT_EQ(fusedInSpace > 0, !deterministic || d == 128) << d << causal;
        EXPECT_EQ(persistentInSpace > 0, !deterministic) << d << causal;
      }
  // (BSHD's space keeps the static share beside the counter.)
  int staticShares = 0;
  for (const TileConfig &c : t.configSpace(nondeterministic(128, true)))
    staticShares += c.has("persist") && c.get("persist") && !(c.has("take") && c.get("take"));
  EXPECT_GT(staticShares, 0);
  // The dK/dV grid: the sequences from K's offsets (their count less one,
  // times hkv), each tile's programs; persistent, capped at the target's
  // multiprocessors and the call's cap (the argument after the offsets).
  attention::Params p = nondeterministic(128, true, Layout::THD); // b 2, hkv 2, sk 4096
  TileConfig persistent = t.defaultConfig(p);
  ASSERT_TRUE(persistent.has("persist") && persistent.get("persist"));
  for (const TileConfig &c : {persistent, *TileConfig::parse("bn=128 consumers=2 dqfrag=1 fused=1 "
                                                             "kv_bm=64 overlap=1 stages=2")}) {
    SCOPED_TRACE(c.canonical());
    auto k = compileKernel(p, c);
    ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
    EXPECT_NE(k->entries[1].name.find("_thd"), std::string::npos) << k->entries[1].name;
    const GridRule &g = k->entries[1].grid[0];
    bool persist = c.has("persist");
    ASSERT_EQ(g.symbols.size(), persist ? 4u : 3u);
    EXPECT_EQ(g.symbols[0], std::make_pair(10, -1)); // sk
    EXPECT_EQ(g.symbols[1], std::make_pair(15, 0));  // K's offsets
    EXPECT_EQ(g.symbols[2], std::make_pair(12, -1)); // the split
    if (persist) {
      EXPECT_EQ(g.symbols[3], std::make_pair(16, -1)); // the cap
      for (int64_t cap : {1, 100, 1000}) {
        int64_t values[] = {4096, 3, 1, cap};
        EXPECT_EQ(g.evaluate(values, 4), std::min<int64_t>(cap, 128)) << cap;
      }
    } else {
      int64_t values[] = {4096, 3, 2};
      EXPECT_EQ(g.evaluate(values, 3), 256); // 32 key tiles x 2 sequences x 2 KV heads x 2 parts
    }
  }
  // Through the tensor map at head dim 128 under a causal mask or with
  // take (spilled), refused by name (persist under a causal mask is refused
  // so at any layout); so is lpt shared out in advance (the consumers
  // placing their own tiles spilled).
  const char *map = "bn=128 consumers=2 fused=1 kv_bm=64 overlap=1 stages=2";
  const char *taken = "bn=128 consumers=2 fused=1 kv_bm=64 overlap=1 persist=1 stages=2 take=1";
  llvm::Error shared = t.checkConfig(nondeterministic(128, true, Layout::THD),
                                     *TileConfig::parse("bn=128 consumers=2 dqfrag=1 fused=1 "
                                                        "kv_bm=64 lpt=1 overlap=1 persist=1 "
                                                        "stages=2"));
  ASSERT_TRUE(bool(shared));
  EXPECT_NE(llvm::toString(std::move(shared)).find("lpt on packed sequences (THD) needs take = 1"),
            std::string::npos);
  for (auto [cfg, causal, refused] : {std::tuple{map, true, true}, std::tuple{map, false, false},
                                      std::tuple{taken, false, true}}) {
    llvm::Error err =
        t.checkConfig(nondeterministic(128, causal, Layout::THD), *TileConfig::parse(cfg));
    ASSERT_EQ(bool(err), refused) << cfg << causal;
    if (err) {
      EXPECT_NE(llvm::toString(std::move(err))
                    .find("fused on packed sequences (THD) at head dim 128 under a causal mask "
                          "or with take needs dqfrag = 1"),
                std::string::npos);
    }
  }
}

TEST(AttentionCompile, PersistentFusedBackwardBuildsAndNamesWhatItNeeds) {
  // persist: the fused dK/dV kernel with one program a multiprocessor of
  // the target, each taking its share of the tiles (lpt: under a causal
  // mask longest first across the heads): no spill byte at head
  // dims 64 and 128, both masks and layouts, GQA, f16, dQ's parts in the
  // registers' order and (but at 128 under the mask) through the tensor
  // map; its grid the tiles capped at the target's multiprocessors and at
  // the call's cap (its last argument), the
  // other kernels' as without it.
  for (int64_t d : {64, 128})
    for (bool causal : {false, true})
      for (Layout l : {Layout::BSHD, Layout::BHSD})
        for (bool frag : {false, true}) {
          if (d == 128 && causal && !frag)
            continue;
          std::string cfg = std::string(d == 64 ? "bn=128 consumers=1" : "bn=128 consumers=2") +
                            (frag ? " dqfrag=1" : "") +
                            " fused=1 kv_bm=64 overlap=1 persist=1 stages=2";
          expectClean(nondeterministic(d, causal, l), *TileConfig::parse(cfg));
        }
  attention::Params gqa = nondeterministic(128, true, Layout::BSHD, DType::F16);
  gqa.hq = 8;
  gqa.hkv = 2;
  const char *cfg = "bn=128 consumers=2 dqfrag=1 fused=1 kv_bm=64 overlap=1 persist=1 stages=2";
  expectClean(gqa, *TileConfig::parse(cfg));
  // lpt: under a causal mask the tiles longest first across the heads.
  // take: the tiles taken from a counter at run time (each head's in turn,
  // or with lpt longest first), GQA too.
  for (int64_t d : {64, 128})
    for (Layout l : {Layout::BSHD, Layout::BHSD})
      for (const char *order : {"lpt=1", "lpt=1 take=1", "take=1", "lpt=1 lpt_heads=4 take=1"})
        for (bool causal : {true, false}) {
          if (!causal && std::string(order).find("lpt") != std::string::npos)
            continue;
          expectClean(nondeterministic(d, causal, l),
                      *TileConfig::parse(
                          std::string(d == 64 ? "bn=128 consumers=1" : "bn=128 consumers=2") +
                          " dqfrag=1 fused=1 kv_bm=64 overlap=1 persist=1 stages=2 " + order));
        }
  expectClean(gqa, *TileConfig::parse(std::string(cfg) + " take=1"));
  // The grid: symbols sk, dK's first size (the batch under BSHD), the
  // split and the call's cap (its last argument, an index); capped at 132
  // (the target's usual count) and at 16, and at the call's.
  // (take: the same grid; the cap is still argument 14, the counter after it.)
  for (int sms : {0, 16})
    for (bool take : {false, true}) {
      attention::Params p = nondeterministic(128, false);
      p.target.setSMs(sms);
      auto k =
          compileKernel(p.spec(), *TileConfig::parse(std::string(cfg) + (take ? " take=1" : "")));
      ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
      const EntryInfo &dkv = k->entries[1];
      ASSERT_EQ(dkv.params.size(), take ? 16u : 15u);
      EXPECT_EQ(dkv.params[14].kind, ParamInfo::Index);
      const GridRule &g = dkv.grid[0];
      ASSERT_EQ(g.symbols.size(), 4u);
      EXPECT_EQ(g.symbols[3], std::make_pair(14, -1));
      int64_t cap = sms ? sms : p.target.smCount();
      for (int64_t sk : {128, 4096, 100000})
        for (int64_t call : {int64_t(INT32_MAX), int64_t(100), int64_t(3)}) {
          int64_t tiles = (sk + 127) / 128 * 2 * p.hkv; // b = 2, split 1
          int64_t values[] = {sk, 2, 1, call};
          EXPECT_EQ(g.evaluate(values, 4), std::min({tiles, cap, call})) << sk << " " << sms;
        }
    }
  // Refused by name: without fused, for a deterministic spec (its
  // additions in order are not built for it), and at head dim 128 under a
  // causal mask through the tensor map (spilled 100 bytes).
  const KernelTemplate &t = getTemplate(attention::backwardOp());
  for (auto [p, c, what] :
       {std::tuple{nondeterministic(128, true), "bn=128 consumers=2 kv_bm=64 persist=1 stages=2",
                   "persist needs fused = 1 and a spec with deterministic = 0"},
        std::tuple{backward(128, false),
                   "bn=128 consumers=2 fused=1 kv_bm=64 overlap=1 persist=1 stages=2",
                   "got fused = 1, deterministic = 1"},
        std::tuple{nondeterministic(128, true),
                   "bn=128 consumers=2 fused=1 kv_bm=64 overlap=1 persist=1 stages=2",
                   "persist at head dim 128 under a causal mask needs dqfrag = 1"},
        std::tuple{nondeterministic(128, false),
                   "bn=128 consumers=2 dqfrag=1 fused=1 kv_bm=64 lpt=1 overlap=1 persist=1 "
                   "stages=2",
                   "lpt needs persist = 1 and a causal mask"},
        std::tuple{nondeterministic(128, true),
                   "bn=128 consumers=2 dqfrag=1 fused=1 kv_bm=64 lpt=1 overlap=1 stages=2",
                   "got persist = 0, causal = 1"},
        std::tuple{nondeterministic(128, false),
                   "bn=128 consumers=2 dqfrag=1 fused=1 kv_bm=64 overlap=1 stages=2 take=1",
                   "take needs persist = 1"},
        std::tuple{nondeterministic(128, true),
                   "bn=128 consumers=2 dqfrag=1 fused=1 kv_bm=64 lpt=1 lpt_heads=4 overlap=1 "
                   "persist=1 stages=2",
                   "lpt_heads needs lpt = 1 and take = 1; got lpt = 1, take = 0"}}) {
    auto err = t.checkConfig(p, *TileConfig::parse(c));
    ASSERT_TRUE(bool(err)) << c;
    EXPECT_NE(llvm::toString(std::move(err)).find(what), std::string::npos) << c;
  }
  // (In the tuning space: FusedBackwardBuildsAndNamesWhatItNeeds counts them.)
}

TEST(AttentionCompile, PersistentGridIsTheTilesCappedAtLaunch) {
  // Symbols: sq, the batch (LSE's first size), the cap (the last argument).
  attention::Params p = params(128, true); // b 2, hq 8, sq 4096: 32 tiles of 128 rows
  for (const char *cfg : {"bm=128 bn=128 consumers=2 overlap=1 persistent=1 pingpong=1 stages=2",
                          "bm=128 bn=128 consumers=2 overlap=1 pingpong=1 stages=2"}) {
    SCOPED_TRACE(cfg);
    auto k = compileKernel(p.spec(), *TileConfig::parse(cfg));
    ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
    const GridRule &g = k->entries.front().grid[0];
    ASSERT_EQ(g.symbols.size(), 3u);
    EXPECT_EQ(g.symbols[0], std::make_pair(6, -1));
    EXPECT_EQ(g.symbols[1], std::make_pair(4, 0));
    EXPECT_EQ(g.symbols[2], std::make_pair(8, -1));
    bool persistent = std::string(cfg).find("persistent") != std::string::npos;
    for (int64_t cap : {1, 132, 1000}) {
      int64_t values[] = {4096, 2, cap};
      EXPECT_EQ(g.evaluate(values, 3), persistent ? std::min<int64_t>(cap, 512) : 512) << cap;
    }
  }
}

TEST(AttentionCompile, PersistentRefusesWhatSpilled) {
  const KernelTemplate &t = getTemplate(attention::forwardOp());
  auto err = t.checkConfig(params(64, true), *TileConfig::parse("bm=128 bn=128 consumers=2 "
                                                                "overlap=1 persistent=1 stages=3"));
  ASSERT_TRUE(bool(err));
  EXPECT_NE(llvm::toString(std::move(err))
                .find("persistent with overlap but no ping-pong takes at "
                      "most 2 stages (3 spilled)"),
            std::string::npos);
  // Every config of the tuning space is one the rules accept.
  for (int64_t d : {64, 128, 256})
    for (const TileConfig &c : t.configSpace(params(d, true)))
      if (llvm::Error e = t.checkConfig(params(d, true), c))
        ADD_FAILURE() << c.canonical() << ": " << llvm::toString(std::move(e));
}

/// `config` (config text) is refused for `spec` with a message containing
/// `why`.
void expectRefused(const KernelSpec &spec, const char *config, const char *why) {
  SCOPED_TRACE(config);
  llvm::Error err = getTemplate(spec).checkConfig(spec, *TileConfig::parse(config));
  ASSERT_TRUE(bool(err));
  std::string text = llvm::toString(std::move(err));
  EXPECT_NE(text.find(why), std::string::npos) << text;
}

TEST(AttentionCompile, BackwardErrorsNameWhatWasWrong) {
  const KernelTemplate &t = getTemplate(attention::backwardOp());
  expectRefused(backward(256, true), t.defaultConfig(backward(128, true)).canonical().c_str(),
                "attn_bwd at head dim 256 needs dsplit = 1");
  expectRefused(backward(256, true), "bn=32 consumers=1 dsplit=1 kv_bm=32 stages=2",
                "dsplit needs two consumers");
  // Halves of a head dim of 128 are not whole 64-column panels.
  expectRefused(backward(128, true), "bn=32 consumers=2 dsplit=1 kv_bm=32 overlap=1 stages=2",
                "and head dim 256");
  expectRefused(backward(256, true), "bn=64 consumers=2 dsplit=1 kv_bm=32 overlap=1 stages=2",
                "(at most 192 at head dim 256): use a smaller bn");
  for (const char *cfg : {"bn=32 consumers=2 dsplit=1 kv_bm=64 overlap=1 stages=2",
                          "bn=32 consumers=2 dsplit=1 kv_bm=32 overlap=0 stages=2",
                          "bn=32 consumers=2 dsplit=1 kv_bm=32 overlap=1 stages=1"})
    expectRefused(backward(256, true), cfg,
                  "dsplit needs kv_bm = 32, overlap = 1 and 2 or more stages");
  expectRefused(backward(128, true), "bn=64 consumers=2 kv_bm=128 stages=2", "use a smaller kv_bm");
  expectRefused(backward(128, true), "bn=128 consumers=1 kv_bm=64 stages=2",
                "(at most 232 with 1 consumers)");
  expectRefused(backward(64, true), "bn=64 consumers=2 kv_bm=48 stages=2",
                "kv_bm = 48 must be a multiple of 32");
  expectRefused(backward(64, true), "bn=64 consumers=2 kv_bm=96 stages=2", "kv_bm must divide 128");

  // Head dim 256 below sm_90a: the spec takes it (the kernels split the
  // columns), the template's rule names what a config lacks.
  attention::Call wide;
  wide.b = wide.sq = wide.sk = 1;
  wide.d = 256;
  EXPECT_TRUE(bool(attention::backwardSpecOf(wide, *Target::parse("sm_86"))));
  attention::Params old = backward(256, false);
  old.target = *Target::parse("sm_80");
  auto rule = getTemplate(attention::backwardOp())
                  .checkConfig(old, *TileConfig::parse("bn=32 consumers=1 kv_bm=16 stages=2"));
  ASSERT_TRUE(bool(rule));
  EXPECT_NE(llvm::toString(std::move(rule))
                .find("attn_bwd at head dim 256 needs dsplit = 1 and two consumers (each holds "
                      "half of dK's and dV's columns); the target is sm_80"),
            std::string::npos);

  if (llvm::Error e = backward(256, true).spec().validate())
    ADD_FAILURE() << "head dim 256 has a backward: " << llvm::toString(std::move(e));

  attention::Call call;
  call.b = 0;
  call.sq = call.sk = 5;
  auto s = attention::backwardSpecOf(call, *Target::parse("sm_90a"));
  ASSERT_FALSE(bool(s));
  EXPECT_NE(llvm::toString(s.takeError()).find("attn_bwd: sizes must be positive"),
            std::string::npos);
  call.b = 3;
  call.hq = 4;
  call.hkv = 4;
  call.sq = 130;
  // LSE * log2(e) and D, f32, rows padded to 128 (no group, no split).
  EXPECT_EQ(attention::backwardWorkspaceBytes(call), 2 * 3 * 4 * 256 * 4);
  // Four query heads on one KV head, 3 * 1 tiles of keys: split 4 ways;
  // each part's dK and dV, f32, key rows padded to 128.
  call.hkv = 1;
  call.d = 64;
  EXPECT_EQ(attention::backwardHeadSplit(call.b, call.hq, call.hkv, call.sk), 4);
  EXPECT_EQ(attention::backwardWorkspaceBytes(call),
            2 * 3 * 4 * 256 * 4 + 2 * 4 * 3 * 1 * 128 * 64 * 4);
}

TEST(AttentionCompile, TheBackwardSpecSaysWhetherItsResultsMustRepeat) {
  // attn_bwd's `deterministic`: 1 by default, part of the kernel's identity
  // (so the two are tuned and stored apart), carried by calls and specs.
  KernelSpec det = backward(128, true).spec(), fast = nondeterministic(128, true).spec();
  EXPECT_NE(det.canonical(false).find(" deterministic=1 "), std::string::npos) << det.canonical();
  EXPECT_NE(fast.canonical(false).find(" deterministic=0 "), std::string::npos);
  EXPECT_FALSE(det.sameKernel(fast));
  EXPECT_NE(det.hash(false), fast.hash(false));
  auto parsed = KernelSpec::parse("attn_bwd dt=bf16 d=128 hq=8 hkv=2 causal=1 arch=sm_90a");
  ASSERT_TRUE(bool(parsed)) << llvm::toString(parsed.takeError());
  EXPECT_TRUE(attention::Params(*parsed).deterministic) << "left out: the default";
  auto parsedFast = KernelSpec::parse(fast.canonical());
  ASSERT_TRUE(bool(parsedFast)) << llvm::toString(parsedFast.takeError());
  EXPECT_EQ(*parsedFast, fast);
  EXPECT_FALSE(attention::Params(*parsedFast).deterministic);
  // The forward has no such parameter.
  auto fwd = KernelSpec::parse("attn_fwd dt=bf16 d=128 hq=8 hkv=2 deterministic=0 arch=sm_90a");
  ASSERT_FALSE(bool(fwd));
  EXPECT_NE(llvm::toString(fwd.takeError()).find("deterministic"), std::string::npos);
  EXPECT_EQ(params(128, true).spec().canonical().find("deterministic"), std::string::npos);
  // From a call and back.
  attention::Call call = attention::callOf(nondeterministic(64, false));
  EXPECT_FALSE(call.deterministic);
  auto spec = attention::backwardSpecOf(call, *Target::parse("sm_90a"));
  ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
  EXPECT_FALSE(attention::Params(*spec).deterministic);
  call.deterministic = true;
  spec = attention::backwardSpecOf(call, *Target::parse("sm_90a"));
  ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
  EXPECT_TRUE(attention::Params(*spec).deterministic);
  // A fused kernel's workspace: the same LSE and D (and parts), then dQ's
  // f32 sums, rows padded, and 16 bytes for a persistent kernel's tile
  // counter (the C interface sizes only the first part; the launch takes
  // the rest from tilejit's pool then).
  call.deterministic = false;
  call.b = 2;
  call.sq = call.sk = 130;
  call.hq = call.hkv = 4;
  EXPECT_EQ(attention::backwardWorkspaceBytes(call, true),
            attention::backwardWorkspaceBytes(call) + 2 * 4 * 256 * 64 * 4 + 16);
  // For a deterministic call, the flags between them: a word for each
  // query tile of 64 rows of every head.
  int64_t sums = attention::backwardWorkspaceBytes(call, true);
  call.deterministic = true;
  EXPECT_EQ(attention::backwardWorkspaceBytes(call, true), sums + 2 * 4 * 3 * 4);
  EXPECT_EQ(attention::backwardWorkspaceBytes(call), sums - 2 * 4 * 256 * 64 * 4 - 16);
  // Packed sequences: dQ's sums take every row of Q and 64 more a sequence
  // (each sequence's query tiles in rows of its own), whatever the longest;
  // the flags as BSHD's (query tiles of the longest, every head of each
  // sequence). A count whose bytes would not fit in 64 bits: -1.
  call.layout = attention::Layout::THD;
  call.totalQ = 200;
  call.totalK = 210;
  call.deterministic = false;
  EXPECT_EQ(attention::backwardWorkspaceBytes(call, true),
            attention::backwardWorkspaceBytes(call) + (200 + 2 * 64) * 4 * 64 * 4 + 16);
  call.deterministic = true;
  EXPECT_EQ(attention::backwardWorkspaceBytes(call, true), attention::backwardWorkspaceBytes(call) +
                                                               (200 + 2 * 64) * 4 * 64 * 4 +
                                                               2 * 4 * 3 * 4 + 16);
  call.totalQ = INT64_MAX - 64;
  EXPECT_EQ(attention::backwardWorkspaceBytes(call, true), -1);
}

TEST(AttentionCompile, BackwardHeadSplitFillsTheGpuWithTheFewestParts) {
  // Enough KV heads' tiles: no split.
  EXPECT_EQ(attention::backwardHeadSplit(1, 32, 32, 8192), 1);
  EXPECT_EQ(attention::backwardHeadSplit(2, 32, 8, 4096), 1);
  // Llama-3.1-70B at TP8: 64 tiles of one KV head, 8 query heads: 8 parts.
  EXPECT_EQ(attention::backwardHeadSplit(1, 8, 1, 8192), 8);
  // 256 tiles: 2 parts; 1 tile: the whole group.
  EXPECT_EQ(attention::backwardHeadSplit(4, 8, 1, 8192), 2);
  EXPECT_EQ(attention::backwardHeadSplit(1, 6, 1, 100), 6);
  // Only divisors of the group: 12 heads, 100 tiles -> 6 (4 is too few).
  EXPECT_EQ(attention::backwardHeadSplit(1, 12, 1, 100 * 128), 6);
  // Without a group nothing splits.
  EXPECT_EQ(attention::backwardHeadSplit(1, 4, 4, 128), 1);
}

TEST(AttentionCompile, BackwardDefaultKeepsMultiprocessorsBusy) {
  const KernelTemplate &t = getTemplate(attention::backwardOp());
  attention::Params p = backward(128, true);
  EXPECT_EQ(t.defaultConfig(p).get("consumers"), 2); // 32 tiles of 128 keys * 2 * 2 heads
  p.hq = 8;
  p.hkv = 1;
  p.b = 1;
  p.sq = p.sk = 8192; // Llama-3.1-70B at TP8: 64 tiles of 128 keys, 8 parts of the heads
  EXPECT_EQ(t.defaultConfig(p).get("consumers"), 2);
  p.hq = p.hkv = 4;
  p.sq = p.sk = 2048; // 64 tiles, nothing to split
  EXPECT_EQ(t.defaultConfig(p).get("consumers"), 1);
}

/// Whether the backward's default config for `p` is a fused one (checked
/// against the rules too).
bool fusedDefault(const attention::Params &p) {
  const KernelTemplate &t = getTemplate(attention::backwardOp());
  TileConfig c = t.defaultConfig(p);
  EXPECT_FALSE(bool(t.checkConfig(p, c))) << c.canonical();
  return c.has("fused") && c.get("fused") == 1;
}

TEST(AttentionCompile, NondeterministicDefaultIsFusedAtHeadDim128) {
  // Where dQ may be added atomically, head dim 128's default is the fused
  // kernel (faster at every bench case but S4096 causal, 1 % slower there:
  // bench/NOTES.md b15); where the spec says deterministic, at head dims 64
  // and 256, with the packed layout (no fused kernel) and with too few
  // programs for two consumers, it is not.
  // With one program a multiprocessor (persist); under a causal mask
  // with at most four rounds of tiles (4 x 132), the tiles longest first
  // (lpt): these specs' 4 heads a KV head, 128 programs split 4 ways.
  const KernelTemplate &t = getTemplate(attention::backwardOp());
  attention::Params p = nondeterministic(128, true);
  EXPECT_TRUE(fusedDefault(p));
  EXPECT_EQ(t.defaultConfig(p).canonical(),
            "bn=128 consumers=2 dqfrag=1 fused=1 kv_bm=64 lpt=1 overlap=1 persist=1 stages=2");
  EXPECT_EQ(t.defaultConfig(nondeterministic(128, false)).canonical(),
            "bn=128 consumers=2 dqfrag=1 fused=1 kv_bm=64 overlap=1 persist=1 stages=2");
  attention::Params mha = nondeterministic(128, true);
  mha.hkv = mha.hq; // 512 tiles, nothing to split
  EXPECT_EQ(t.defaultConfig(mha).canonical(),
            "bn=128 consumers=2 dqfrag=1 fused=1 kv_bm=64 lpt=1 overlap=1 persist=1 stages=2");
  mha.hq = mha.hkv = 16; // 1024 tiles: each head's in turn
  EXPECT_EQ(t.defaultConfig(mha).canonical(),
            "bn=128 consumers=2 dqfrag=1 fused=1 kv_bm=64 overlap=1 persist=1 stages=2");
  mha.target.setSMs(256); // as many tiles, but four rounds of 256 multiprocessors
  EXPECT_EQ(t.defaultConfig(mha).canonical(),
            "bn=128 consumers=2 dqfrag=1 fused=1 kv_bm=64 lpt=1 overlap=1 persist=1 stages=2");
  EXPECT_TRUE(fusedDefault(nondeterministic(128, false)));
  EXPECT_TRUE(fusedDefault(nondeterministic(128, true, Layout::BHSD)));
  // Under a causal mask with 8192 queries or more, the tiles taken from a
  // counter at run time (take): not at 4096, nor without a mask; and
  // longest first by groups of four units (lpt_heads) where a group's Q
  // and dO take 16 MiB or less: at head dim 128, 8192 queries of four
  // units of one query head each.
  mha.target.setSMs(132);
  mha.hq = mha.hkv = 32;
  mha.b = 1;
  mha.sq = mha.sk = 8192;
  EXPECT_EQ(t.defaultConfig(mha).canonical(),
            "bn=128 consumers=2 dqfrag=1 fused=1 kv_bm=64 lpt=1 lpt_heads=4 overlap=1 persist=1 "
            "stages=2 take=1");
  mha.sq = mha.sk = 16384; // 32 MiB a group
  EXPECT_EQ(t.defaultConfig(mha).canonical(),
            "bn=128 consumers=2 dqfrag=1 fused=1 kv_bm=64 overlap=1 persist=1 stages=2 take=1");
  attention::Params gqa = mha; // four query heads a KV head, no split: 64 MiB a group
  gqa.b = 4;
  gqa.hkv = 8;
  gqa.sq = gqa.sk = 8192;
  EXPECT_EQ(t.defaultConfig(gqa).canonical(),
            "bn=128 consumers=2 dqfrag=1 fused=1 kv_bm=64 overlap=1 persist=1 stages=2 take=1");
  mha.sq = mha.sk = 4096;
  EXPECT_EQ(t.defaultConfig(mha).canonical(),
            "bn=128 consumers=2 dqfrag=1 fused=1 kv_bm=64 overlap=1 persist=1 stages=2");
  mha.causal = false;
  mha.sq = mha.sk = 16384;
  EXPECT_EQ(t.defaultConfig(mha).canonical(),
            "bn=128 consumers=2 dqfrag=1 fused=1 kv_bm=64 overlap=1 persist=1 stages=2");
  p.hq = 8;
  p.hkv = 1;
  p.sq = p.sk = 8192; // two sequences: split 4 ways, two query heads a unit (32 MiB a group)
  EXPECT_TRUE(fusedDefault(p));
  EXPECT_EQ(
      t.defaultConfig(p).canonical(),
      "bn=128 consumers=2 dqfrag=1 fused=1 kv_bm=64 lpt=1 overlap=1 persist=1 stages=2 take=1");
  p.b = 1; // Llama-3.1-70B at TP8: split 8 ways, a query head a unit
  EXPECT_EQ(t.defaultConfig(p).canonical(),
            "bn=128 consumers=2 dqfrag=1 fused=1 kv_bm=64 lpt=1 lpt_heads=4 overlap=1 persist=1 "
            "stages=2 take=1");
  EXPECT_FALSE(fusedDefault(backward(128, true)));
  EXPECT_FALSE(fusedDefault(nondeterministic(64, true)));
  EXPECT_FALSE(fusedDefault(nondeterministic(256, true)));
  // Packed sequences: as BSHD (the spec's sizes: b sequences of at most
  // sq), but the tiles taken from the counter whatever the mask or length
  // (the producer passes over those past their sequence's keys), and
  // longest first (lpt, each sequence's tiles from its own last one) only
  // where BSHD's are without groups: at most four rounds of tiles.
  for (int64_t b : {2, 1}) {
    attention::Params bshd = nondeterministic(128, true), thd = bshd;
    bshd.b = thd.b = b;
    thd.layout = Layout::THD;
    TileConfig packedDefault = t.defaultConfig(bshd);
    EXPECT_TRUE(packedDefault.has("lpt")) << "b " << b;
    EXPECT_FALSE(packedDefault.has("lpt_heads")) << "b " << b;
    packedDefault.set("take", 1);
    EXPECT_EQ(t.defaultConfig(thd).canonical(), packedDefault.canonical()) << "b " << b;
  }
  // From 4096 to 8192 queries, where each unit's tiles in turn shared out
  // in advance would be uneven (dkvShareExcess over 1.10), taken longest
  // first: across every unit where their Q and dO take 64 MiB or less (B1
  // H20 S4096, 40 MiB), else in groups of four (B1 H40 S4096, 80 MiB); not
  // at 32 heads (1.03).
  for (auto [heads, excess, want] :
       {std::tuple{20, 1.40, "lpt=1 overlap=1 persist=1 stages=2 take=1"},
        std::tuple{40, 1.17, "lpt=1 lpt_heads=4 overlap=1 persist=1 stages=2 take=1"},
        std::tuple{32, 1.03, "overlap=1 persist=1 stages=2"}}) {
    attention::Params q = nondeterministic(128, true);
    q.b = 1;
    q.hq = q.hkv = heads;
    q.sq = q.sk = 4096;
    EXPECT_NEAR(attention::dkvShareExcess(q, 128, 64, 132), excess, 0.005) << heads;
    EXPECT_EQ(t.defaultConfig(q).canonical(),
              std::string("bn=128 consumers=2 dqfrag=1 fused=1 kv_bm=64 ") + want)
        << heads;
    // (Packed sequences keep theirs: taken, without lpt at these more than
    // four rounds of tiles.)
    q.layout = Layout::THD;
    EXPECT_EQ(t.defaultConfig(q).canonical(),
              "bn=128 consumers=2 dqfrag=1 fused=1 kv_bm=64 overlap=1 persist=1 stages=2 take=1")
        << heads;
  }
  // Not below 4096 queries: B1 H56 S2048 (1.15, 56 MiB) keeps its share
  // fixed in advance.
  {
    attention::Params q = nondeterministic(128, true);
    q.b = 1;
    q.hq = q.hkv = 56;
    q.sq = q.sk = 2048;
    EXPECT_NEAR(attention::dkvShareExcess(q, 128, 64, 132), 1.15, 0.005);
    EXPECT_EQ(t.defaultConfig(q).canonical(),
              "bn=128 consumers=2 dqfrag=1 fused=1 kv_bm=64 overlap=1 persist=1 stages=2");
  }
  // With GQA, every unit's Q and dO over 64 MiB: in groups of four where a
  // group's take 128 MiB or less (B2 and B3 H32 KV8 S4096, four query heads
  // a unit, 32 MiB a group; B1 H64 KV8 S4096, its eight query heads a KV
  // head split two ways; B2 H40 KV8 S4096, 40 MiB; B2 and B3 H64 KV8
  // S4096, 64 MiB; B2 H32 KV8 S6144, 48 MiB; B2 H96 KV8, 96 MiB; B2 H128
  // KV8, 128 MiB); above that the share stays fixed though uneven (B2 H192
  // KV8 S4096, 192 MiB a group).
  for (auto [b, hq, sq, want] :
       {std::tuple{2, 32, 4096, "lpt=1 lpt_heads=4 overlap=1 persist=1 stages=2 take=1"},
        std::tuple{3, 32, 4096, "lpt=1 lpt_heads=4 overlap=1 persist=1 stages=2 take=1"},
        std::tuple{1, 64, 4096, "lpt=1 lpt_heads=4 overlap=1 persist=1 stages=2 take=1"},
        std::tuple{2, 40, 4096, "lpt=1 lpt_heads=4 overlap=1 persist=1 stages=2 take=1"},
        std::tuple{2, 64, 4096, "lpt=1 lpt_heads=4 overlap=1 persist=1 stages=2 take=1"},
        std::tuple{3, 64, 4096, "lpt=1 lpt_heads=4 overlap=1 persist=1 stages=2 take=1"},
        std::tuple{2, 32, 6144, "lpt=1 lpt_heads=4 overlap=1 persist=1 stages=2 take=1"},
        std::tuple{2, 96, 4096, "lpt=1 lpt_heads=4 overlap=1 persist=1 stages=2 take=1"},
        std::tuple{2, 128, 4096, "lpt=1 lpt_heads=4 overlap=1 persist=1 stages=2 take=1"},
        std::tuple{2, 192, 4096, "overlap=1 persist=1 stages=2"}}) {
    attention::Params q = nondeterministic(128, true);
    q.b = b;
    q.hq = hq;
    q.hkv = 8;
    q.sq = q.sk = sq;
    EXPECT_GT(attention::dkvShareExcess(q, 128, 64, 132), 1.10)
        << "B" << b << " H" << hq << " S" << sq;
    EXPECT_EQ(t.defaultConfig(q).canonical(),
              std::string("bn=128 consumers=2 dqfrag=1 fused=1 kv_bm=64 ") + want)
        << "B" << b << " H" << hq << " S" << sq;
  }
  // lpt across every unit only where their Q and dO take 64 MiB or less:
  // B4 H8 KV1 S4096 (split 4 ways, 64 MiB), not B2 H32 KV8 S4096 (128 MiB;
  // BSHD's in groups of four, above), both layouts.
  for (Layout layout : {Layout::BSHD, Layout::THD}) {
    attention::Params q = nondeterministic(128, true, layout);
    q.b = 4;
    q.hq = 8;
    q.hkv = 1;
    q.sq = q.sk = 4096;
    EXPECT_TRUE(t.defaultConfig(q).has("lpt")) << int(layout);
    q.b = 2;
    q.hq = 32;
    q.hkv = 8;
    TileConfig c = t.defaultConfig(q);
    EXPECT_TRUE(!c.has("lpt") || c.has("lpt_heads")) << int(layout) << ": " << c.canonical();
  }
  for (int64_t sq : {8192, 16384}) { // take from 8192 causal; BSHD's groups of 4 where they fit
    attention::Params thd = nondeterministic(128, true, Layout::THD);
    thd.b = 1;
    thd.hq = thd.hkv = 32;
    thd.sq = thd.sk = sq;
    EXPECT_EQ(t.defaultConfig(thd).canonical(),
              "bn=128 consumers=2 dqfrag=1 fused=1 kv_bm=64 overlap=1 persist=1 stages=2 take=1")
        << "sq " << sq;
  }
  attention::Params packedFree = nondeterministic(128, false, Layout::THD);
  EXPECT_EQ(t.defaultConfig(packedFree).canonical(),
            "bn=128 consumers=2 dqfrag=1 fused=1 kv_bm=64 overlap=1 persist=1 stages=2 take=1");
  EXPECT_TRUE(fusedDefault(nondeterministic(128, true, Layout::THD)));
  p = nondeterministic(128, true);
  p.hq = p.hkv = 4;
  p.b = 1;
  p.sq = p.sk = 2048; // 64 programs: one consumer, no fused config with one at 128
  EXPECT_FALSE(fusedDefault(p));
}

TEST(AttentionCompile, DeterministicDefaultAddsInOrderWithManyPrograms) {
  // Where the spec says deterministic, head dim 128's default is the fused
  // kernel adding in order with 2048 programs or more: faster than the two
  // kernels at 8192 and 16384 keys causal, at 4 x 2048 and 8192 keys
  // without a mask (GQA too), slower with fewer programs and with GQA under
  // a causal mask (bench/NOTES.md b20, b21, b22); without a mask from 1024
  // programs where each walks the query tiles from its own place (b23).
  // Packed sequences alike (b29).
  const KernelTemplate &t = getTemplate(attention::backwardOp());
  attention::Params p = backward(128, true);
  p.b = 1;
  p.hq = p.hkv = 32;
  p.sq = p.sk = 8192; // 64 key tiles x 32 heads
  EXPECT_TRUE(fusedDefault(p));
  EXPECT_EQ(t.defaultConfig(p).canonical(),
            "bn=128 consumers=2 dqfrag=1 fused=1 kv_bm=64 overlap=1 stages=2")
      << "under a causal mask, the parts in the registers' order";
  p.layout = Layout::BHSD;
  EXPECT_TRUE(fusedDefault(p));
  p.layout = Layout::THD;
  EXPECT_TRUE(fusedDefault(p)) << "packed sequences";
  p.layout = Layout::BSHD;
  p.sq = p.sk = 4096; // 1024 programs
  EXPECT_FALSE(fusedDefault(p));
  p.b = 4; // 4096 programs
  EXPECT_TRUE(fusedDefault(p));
  p.b = 1;
  p.sq = p.sk = 8192;
  p.causal = false;
  EXPECT_TRUE(fusedDefault(p)) << "without a mask";
  EXPECT_EQ(t.defaultConfig(p).canonical(),
            "bn=128 consumers=2 fused=1 kv_bm=64 overlap=1 stages=2")
      << "without one, through the tensor map";
  p.b = 4;
  p.sq = p.sk = 2048; // 16 key tiles x 4 sequences x 32 heads
  EXPECT_TRUE(fusedDefault(p)) << "without a mask";
  p.b = 2;
  EXPECT_TRUE(fusedDefault(p)) << "1024 programs without a mask, the walk rotated";
  p.sq = p.sk = 2000; // 16 key tiles, 32 query tiles: rotated
  EXPECT_TRUE(fusedDefault(p)) << "1024 programs, ragged, the walk rotated";
  p.sq = p.sk = 1950; // 16 key tiles, 31 query tiles: from tile 0
  EXPECT_FALSE(fusedDefault(p)) << "1024 programs, the walk from tile 0";
  p.sq = p.sk = 2048;
  p.b = 1;
  EXPECT_FALSE(fusedDefault(p)) << "512 programs without a mask";
  p.hq = p.hkv = 2;
  p.sq = p.sk = 65536; // 512 key tiles x 2 heads: more than half the multiprocessors a head
  EXPECT_FALSE(fusedDefault(p)) << "1024 programs, too many a head to rotate";
  p.hq = p.hkv = 32;
  p.b = 4;
  p.sq = p.sk = 8192;
  p.hkv = 8; // 64 key tiles x 4 sequences x 8 KV heads: 2048 programs
  EXPECT_TRUE(fusedDefault(p)) << "GQA without a mask";
  EXPECT_EQ(t.defaultConfig(p).canonical(),
            "bn=128 consumers=2 fused=1 kv_bm=64 overlap=1 stages=2");
  p.b = 2; // 1024 programs
  EXPECT_FALSE(fusedDefault(p)) << "GQA without a mask, 1024 programs";
  p.b = 4;
  p.causal = true;
  EXPECT_FALSE(fusedDefault(p)) << "GQA under a causal mask";
  p.hq = 8;
  p.hkv = 1;
  p.b = 32; // MQA: 64 key tiles x 32 sequences, 2048 programs
  EXPECT_FALSE(fusedDefault(p)) << "MQA under a causal mask";
  p.causal = false;
  EXPECT_TRUE(fusedDefault(p)) << "MQA without a mask";
  p.causal = true;
  p.b = 1;
  p.hq = p.hkv = 32;
  p.d = 64;
  EXPECT_FALSE(fusedDefault(p)) << "head dim 64";
}

TEST(AttentionCompile, DefaultConfigsAreValidAndTheSpaceIsNotEmpty) {
  // (And one whose default adds dQ in order: 64 key tiles x 32 heads.)
  attention::Params ordered = backward(128, true);
  ordered.b = 1;
  ordered.hq = ordered.hkv = 32;
  ordered.sq = ordered.sk = 8192;
  for (attention::Params p : {params(64, true), params(128, true), params(256, true),
                              backward(64, true), backward(128, false), backward(256, true),
                              nondeterministic(64, true), nondeterministic(128, true), ordered}) {
    const KernelTemplate &t = getTemplate(p.spec());
    TileConfig c = t.defaultConfig(p);
    EXPECT_FALSE(bool(t.checkConfig(p, c))) << p.spec().canonical() << " " << c.canonical();
    auto space = t.configSpace(p);
    ASSERT_FALSE(space.empty());
    EXPECT_EQ(space.front(), c) << "a capped tuning must measure the default first";
    EXPECT_EQ(std::count(space.begin(), space.end(), c), 1);
  }
}

TEST(AttentionCompile, BadSpecsConfigsCallsAndTargetsAreNamed) {
  const KernelTemplate &t = getTemplate(attention::forwardOp());
  attention::Params p = params(256, true);
  auto err = t.checkConfig(p, *TileConfig::parse("bm=128 bn=176 consumers=2 stages=2"));
  ASSERT_TRUE(bool(err));
  EXPECT_NE(llvm::toString(std::move(err)).find("registers of O, S and P"), std::string::npos);
  err = t.checkConfig(params(128, true),
                      *TileConfig::parse("bm=128 bn=144 consumers=2 overlap=1 stages=2"));
  ASSERT_TRUE(bool(err));
  EXPECT_NE(llvm::toString(std::move(err)).find("and the last P (at most 192 of its 240)"),
            std::string::npos);
  err = t.checkConfig(params(256, true),
                      *TileConfig::parse("bm=128 bn=64 consumers=2 overlap=1 stages=2"));
  ASSERT_TRUE(bool(err));
  EXPECT_NE(llvm::toString(std::move(err)).find("overlap needs d <= 128"), std::string::npos);
  err = t.checkConfig(params(128, true), *TileConfig::parse("bm=128 bn=64 consumers=1 stages=2"));
  ASSERT_TRUE(bool(err));
  EXPECT_NE(llvm::toString(std::move(err)).find("must be 64 rows for each of 1 consumers"),
            std::string::npos);
  err = t.checkConfig(params(128, true),
                      *TileConfig::parse("bm=128 bn=128 consumers=2 pingpong=1 stages=2"));
  ASSERT_TRUE(bool(err));
  EXPECT_NE(
      llvm::toString(std::move(err))
          .find("pingpong needs overlap = 1 and 2 consumers (got overlap = 0, consumers = 2)"),
      std::string::npos);
  err = t.checkConfig(params(128, true), *TileConfig::parse("bm=128 bn=100 consumers=2 stages=2"));
  ASSERT_TRUE(bool(err));
  EXPECT_NE(llvm::toString(std::move(err)).find("bn = 100 must be a multiple of 16"),
            std::string::npos);
  err = t.checkConfig(params(256, true), *TileConfig::parse("bm=128 bn=64 consumers=2 stages=4"));
  ASSERT_TRUE(bool(err));
  EXPECT_NE(llvm::toString(std::move(err)).find("bytes of shared memory"), std::string::npos);

  attention::Params odd = params(96, false);
  EXPECT_NE(
      llvm::toString(odd.spec().validate()).find("head dim d must be 64, 128 or 256, got d=96"),
      std::string::npos);

  attention::Call call;
  call.b = 1;
  call.sq = 0;
  call.sk = 5;
  auto s = attention::specOf(call, *Target::parse("sm_90a"));
  ASSERT_FALSE(bool(s));
  EXPECT_NE(llvm::toString(s.takeError()).find("sizes must be positive"), std::string::npos);
  call.sq = 5;
  call.hq = 3;
  call.hkv = 2;
  s = attention::specOf(call, *Target::parse("sm_90a"));
  ASSERT_FALSE(bool(s));
  EXPECT_NE(llvm::toString(s.takeError()).find("kv heads must divide query heads, got hq=3 hkv=2"),
            std::string::npos);
  call.hq = 2;
  call.scale = -1.0f;
  s = attention::specOf(call, *Target::parse("sm_90a"));
  ASSERT_FALSE(bool(s));
  EXPECT_NE(llvm::toString(s.takeError()).find("scale must be positive"), std::string::npos);
}

} // namespace

#include "ops/attention/AttentionReference.h"
#include "ops/attention/AttentionSequences.h"

namespace {

/// A call of b sequences of s queries and keys.
attention::Call checkedCall(attention::Layout layout, int64_t hq, int64_t hkv, int64_t d, int64_t b,
                            int64_t s) {
  attention::Call c;
  c.layout = layout;
  c.hq = hq;
  c.hkv = hkv;
  c.d = d;
  c.b = b;
  c.sq = c.sk = s;
  return c;
}

TEST(AttentionHarnessCheck, PackedSequencesAreCheckedAsThreeOfRaggedLengths) {
  // The small problem the tuner checks each candidate on against float64:
  // packed sequences as three, of about two thirds of the rows (a tile
  // runs past it into the next sequence), one row, and the longest.
  attention::Call c = checkedCall(attention::Layout::THD, 4, 2, 128, 8, 1000);
  attention::Sequences seqs = attention::checkedSequences(c);
  EXPECT_EQ(c.b, 3);
  EXPECT_EQ(c.sq, 333);
  EXPECT_EQ(c.sk, 333);
  EXPECT_EQ(seqs.qn, (std::vector<int64_t>{222, 1, 333}));
  EXPECT_EQ(seqs.q0, (std::vector<int64_t>{0, 222, 223}));
  EXPECT_EQ(seqs.kn, seqs.qn);
  EXPECT_EQ(seqs.rowsQ(), 556);
  // Row 5 of the last sequence, query head 3 (KV head 1): [tokens, h, d].
  EXPECT_EQ(seqs.qAt(c, 2, 3, 5), size_t(((223 + 5) * 4 + 3) * 128));
  EXPECT_EQ(seqs.kAt(c, 2, attention::kvHeadOf(c, 3), 5), size_t(((223 + 5) * 2 + 1) * 128));
  EXPECT_EQ(attention::Sequences::lseAt(c, 2, 3, 5), size_t((2 * 4 + 3) * 333 + 5));
  EXPECT_EQ(attention::Sequences::locate(seqs.q0, 222), std::make_pair(int64_t(1), int64_t(0)));
  EXPECT_EQ(attention::Sequences::locate(seqs.q0, 230), std::make_pair(int64_t(2), int64_t(7)));
  // A causal row sees its own key and those before it, within its sequence.
  EXPECT_EQ(seqs.visible(true, 1, 0), 1);
  EXPECT_EQ(seqs.visible(true, 0, 300), 222);

  // Cross lengths keep their own caps; the sequences follow each.
  attention::Call x = c;
  x.sq = 100;
  x.sk = 500;
  seqs = attention::checkedSequences(x);
  EXPECT_EQ(seqs.qn, (std::vector<int64_t>{67, 1, 100}));
  EXPECT_EQ(seqs.kn, (std::vector<int64_t>{222, 1, 333}));
  EXPECT_EQ(seqs.k0, (std::vector<int64_t>{0, 222, 223}));
}

TEST(AttentionHarnessCheck, PaddedLayoutsAreCheckedAsTwoSequences) {
  // BSHD and BHSD: two sequences, so the batch's stride is checked too.
  for (attention::Layout layout : {attention::Layout::BSHD, attention::Layout::BHSD}) {
    attention::Call c = checkedCall(layout, 8, 2, 64, 16, 5000);
    attention::Sequences seqs = attention::checkedSequences(c);
    EXPECT_EQ(c.b, 2);
    EXPECT_EQ(seqs.qn, (std::vector<int64_t>{333, 333}));
    EXPECT_EQ(seqs.q0, (std::vector<int64_t>{0, 333}));
    EXPECT_EQ(attention::kvHeadOf(c, 3), 0);
    EXPECT_EQ(attention::kvHeadOf(c, 4), 1);
    size_t q = layout == attention::Layout::BSHD ? size_t(((333 + 5) * 8 + 6) * 64)
                                                 : size_t(((1 * 8 + 6) * 333 + 5) * 64);
    EXPECT_EQ(seqs.qAt(c, 1, 6, 5), q);
    size_t k = layout == attention::Layout::BSHD ? size_t(((333 + 5) * 2 + 1) * 64)
                                                 : size_t(((1 * 2 + 1) * 333 + 5) * 64);
    EXPECT_EQ(seqs.kAt(c, 1, 1, 5), k);
  }
}

TEST(AttentionHarnessCheck, PackedSequencesAreTimedAtRaggedLengths) {
  // The problem a THD candidate is timed on: the spec's count of sequences,
  // the longest as its sq and sk, the others shorter in a cycle of four,
  // most ending inside a tile; padded layouts keep b equal sequences.
  attention::Call c = checkedCall(attention::Layout::THD, 8, 1, 128, 6, 4096);
  c.sk = 2048;
  attention::Sequences seqs = attention::tuningSequences(c);
  EXPECT_EQ(seqs.qn, (std::vector<int64_t>{4096, 1068, 2493, 356, 4096, 1068}));
  EXPECT_EQ(seqs.kn, (std::vector<int64_t>{2048, 534, 1246, 178, 2048, 534}));
  EXPECT_EQ(seqs.longestQ(), 4096);
  EXPECT_EQ(seqs.shortestQ(), 356);
  EXPECT_EQ(seqs.rowsQ(), 4096 * 2 + 1068 * 2 + 2493 + 356);
  EXPECT_EQ(seqs.rowsQ(2), 4096 + 1068);
  EXPECT_EQ(seqs.rowsK(6), seqs.rowsK());
  // A sequence of the longest cycle's shortest part is still a row.
  c.sq = c.sk = 5;
  seqs = attention::tuningSequences(c);
  EXPECT_EQ(seqs.qn, (std::vector<int64_t>{5, 1, 3, 1, 5, 1}));
  for (attention::Layout layout : {attention::Layout::BSHD, attention::Layout::BHSD}) {
    attention::Call p = checkedCall(layout, 8, 1, 128, 3, 4096);
    seqs = attention::tuningSequences(p);
    EXPECT_EQ(seqs.qn, (std::vector<int64_t>{4096, 4096, 4096}));
    EXPECT_EQ(seqs.rowsQ(2), 8192);
  }
}

TEST(AttentionHarnessCheck, TheReferenceCoversWholeCyclesOfThePackedLengths) {
  // The device reference covers the first sequences that fit its bounds;
  // the timed problem's others repeat their inputs a block at a time, so
  // on packed sequences the covered count is a whole number of the
  // lengths' cycles (one at least), and every sequence where all fit.
  attention::Call c = checkedCall(attention::Layout::THD, 4, 4, 64, 10, 1000);
  attention::Sequences seqs = attention::tuningSequences(c); // 1000, 260, 608, 86, ...
  size_t row = 8;                                            // bytes a query row; keys none
  auto covered = [&](size_t maxBytes, int64_t maxWork, int64_t maxSequences = 65535) {
    return attention::referenceSequences(c, seqs, row, 0, maxBytes, maxWork, maxSequences);
  };
  EXPECT_EQ(covered(size_t(1) << 30, int64_t(1) << 40), 10);
  // Bytes: the first 6 sequences' rows fit, 7 do not: one cycle.
  int64_t six = seqs.rowsQ(6);
  EXPECT_EQ(six, 1000 + 260 + 608 + 86 + 1000 + 260);
  EXPECT_EQ(covered(size_t(six) * row, int64_t(1) << 40), 4);
  EXPECT_EQ(covered(size_t(seqs.rowsQ(8)) * row, int64_t(1) << 40), 8);
  // Work (query row, key, head): not even the first sequence fits; one
  // cycle all the same.
  EXPECT_EQ(covered(size_t(1) << 30, 1000), 4);
  EXPECT_EQ(covered(size_t(1) << 30, int64_t(1) << 40, 5), 4);
  // Fewer sequences than a cycle: all of them.
  c.b = 3;
  seqs = attention::tuningSequences(c);
  EXPECT_EQ(covered(1, 1), 3);
  // Equal sequences: as many as fit, at least one.
  attention::Call p = checkedCall(attention::Layout::BSHD, 4, 4, 64, 10, 1000);
  seqs = attention::tuningSequences(p);
  EXPECT_EQ(attention::referenceSequences(p, seqs, row, 0, 3000 * row, int64_t(1) << 40, 65535), 3);
  EXPECT_EQ(attention::referenceSequences(p, seqs, row, 0, 1, 1, 65535), 1);
  EXPECT_EQ(attention::referenceSequences(p, seqs, row, 0, size_t(1) << 30,
                                          int64_t(4) * 1000 * 1000 * 7, 65535),
            7);
}

TEST(AttentionReference, CompilesForTheTargetsTuned) {
  // The tuner's plain reference (CUDA C++ through NVRTC): its forward,
  // backward and comparison kernels for each head dim build for every
  // target tilejit builds for, without a GPU.
  for (const char *arch : {"sm_90a", "sm_90", "sm_89", "sm_86", "sm_80"}) {
    SCOPED_TRACE(arch);
    std::optional<Target> t = Target::parse(arch);
    ASSERT_TRUE(t.has_value());
    llvm::Error err = attention::Reference::compile(*t);
    EXPECT_FALSE(bool(err)) << llvm::toString(std::move(err));
  }
}

} // namespace
