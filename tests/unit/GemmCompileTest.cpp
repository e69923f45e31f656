//===- GemmCompileTest.cpp - GEMM kernels build without a GPU --------------===//
//
// Every layout, input and output type, with and without C and a bias, and each config
// of the GPU tests, compiled to a cubin for sm_90a: ptxas reports no spills
// and no serialized wgmma, the consumers' register limit is honoured, the
// SASS-level instructions are the tensor cores' (PTX checked here; SASS on
// the GPU machine). Config and target errors name what was wrong.
//
// The sm_80 kernel (also every other target without wgmma) likewise: every
// layout, type and ragged size; its PTX has cp.async into the ring,
// ldmatrix (transposed for an MN-major operand) and mma.sync m16n8k16, and
// neither it nor ptxas puts anything in local memory.
//
//===----------------------------------------------------------------------===//
#include <gtest/gtest.h>

#include "compiler/Compiler.h"
#include "compiler/templates/Template.h"
#include "ops/gemm/GemmDecl.h"
#include "ops/gemm/GemmLaunch.h"
#include "tests/support/GemmConfigs.h"

using namespace tilejit;

namespace {

gemm::Params params(const char *layout, DType ab, DType out, bool hasC, int64_t n = 4096,
                    int64_t k = 4096, const char *arch = "sm_90a", bool hasBias = false) {
  gemm::Params p;
  p.transA = layout[0] == 't';
  p.transB = layout[1] == 't';
  p.ab = ab;
  p.out = out;
  p.hasC = hasC;
  p.hasBias = hasBias;
  p.m = 8192;
  p.n = n;
  p.k = k;
  p.target = *Target::parse(arch);
  return p;
}

/// Builds `spec` with `config` and checks ptxas's report and the PTX;
/// `kept`, if given, receives the kernel for further checks.
void expectClean(const KernelSpec &spec, const TileConfig &config, CompiledKernel *kept = nullptr) {
  SCOPED_TRACE(spec.canonical() + " [" + config.canonical() + "]");
  auto k = compileKernel(spec, config);
  ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
  ASSERT_EQ(k->entries.size(), 1u);
  const EntryInfo &e = k->entries.front();
  EXPECT_EQ(e.spillBytes, 0) << k->log;
  EXPECT_GT(e.registers, 0) << k->log;
  EXPECT_EQ(k->log.find("serialized"), std::string::npos) << k->log;
  // Nor a wait ptxas put among the products (C7517).
  EXPECT_EQ(k->log.find("C7517"), std::string::npos) << k->log;
  EXPECT_EQ(k->log.find("setmaxnreg' ignored"), std::string::npos) << k->log;
  EXPECT_NE(k->ptx.find("wgmma.mma_async.sync.aligned.m64n"), std::string::npos);
  EXPECT_NE(k->ptx.find("cp.async.bulk.tensor.2d"), std::string::npos);
  EXPECT_NE(k->ptx.find("setmaxnreg.inc.sync.aligned.u32"), std::string::npos);
  EXPECT_GT(e.dynamicSmemBytes, 0);
  bool tmaStore = k->config.has("tmastore") && k->config.get("tmastore") != 0;
  bool split = k->config.has("splitk") && k->config.get("splitk") > 1;
  ASSERT_EQ(e.params.size(), 5u + (spec[gemm::HasC] ? 2u : 0u) + (spec[gemm::HasBias] ? 1u : 0u) +
                                 (tmaStore ? 1u : 0u) + (split ? 2u : 0u));
  if (split) {
    // The partial sums' tiles and the flags, then the programs cap; the
    // parts hand on through an acquiring spin and a fenced store.
    size_t n = e.params.size();
    EXPECT_EQ(e.params[n - 3].staticSizes.size(), 3u);
    EXPECT_EQ(e.params[n - 2].staticSizes.size(), 3u);
    EXPECT_NE(k->ptx.find("ld.acquire.gpu.global.b32"), std::string::npos);
    EXPECT_NE(k->ptx.find("fence.acq_rel.gpu"), std::string::npos);
  }
  EXPECT_EQ(e.params[0].kind, ParamInfo::TensorMap);
  EXPECT_EQ(e.params[0].staticSizes.size(), 2u);
  if (tmaStore) {
    // D's tensor map after D; its box a consumer's rows by one 64-column
    // panel; the panels leave through stmatrix and bulk tensor stores.
    EXPECT_EQ(e.params[3].kind, ParamInfo::TensorMap);
    ASSERT_EQ(e.params[3].staticSizes.size(), 2u);
    EXPECT_EQ(e.params[3].staticSizes[1], 64);
    EXPECT_NE(k->ptx.find("stmatrix.sync.aligned"), std::string::npos);
    EXPECT_NE(k->ptx.find("cp.async.bulk.tensor.2d.global.shared::cta"), std::string::npos);
    EXPECT_NE(k->ptx.find("cp.async.bulk.wait_group.read"), std::string::npos);
    EXPECT_NE(k->ptx.find("cp.async.bulk.wait_group "), std::string::npos);
  } else {
    EXPECT_EQ(k->ptx.find("cp.async.bulk.tensor.2d.global.shared::cta"), std::string::npos);
  }
  if (kept)
    *kept = std::move(*k);
}

TEST(GemmCompile, EveryLayoutAndTypeBuildsWithoutSpills) {
  for (const char *layout : {"nt", "nn", "tn"})
    for (DType ab : {DType::BF16, DType::F16})
      for (DType out : {DType::BF16, DType::F32})
        for (bool hasC : {false, true})
          expectClean(params(layout, ab, out, hasC), {});
}

TEST(GemmCompile, EveryConfigOfTheGpuTestsBuilds) {
  for (const char *cfg : tilejit::testing::kGemmConfigs)
    for (const char *layout : {"nt", "nn", "tn"})
      expectClean(params(layout, DType::BF16, DType::BF16, false, 448, 200),
                  *TileConfig::parse(cfg));
}

TEST(GemmCompile, TheBiasBuildsWithEveryLayoutConfigAndC) {
  // The bias's columns sit beside the accumulator (and C's tile): the widest
  // tiles and f32 C are where registers run short.
  for (const char *layout : {"nt", "nn", "tn"})
    for (DType out : {DType::BF16, DType::F32})
      for (bool hasC : {false, true})
        expectClean(params(layout, DType::BF16, out, hasC, 4096, 4096, "sm_90a", true), {});
  const KernelTemplate &t = getTemplate(gemm::op());
  for (const char *cfg : tilejit::testing::kGemmConfigs) {
    gemm::Params p = params("nt", DType::F16, DType::BF16, false, 448, 200, "sm_90a", true);
    // K split beside a 128 x 256 accumulator has no registers for the bias:
    // refused by name.
    if (llvm::Error err = t.checkConfig(p, *TileConfig::parse(cfg))) {
      EXPECT_NE(llvm::toString(std::move(err)).find("with splitk each consumer thread would hold"),
                std::string::npos)
          << cfg;
      continue;
    }
    expectClean(p, *TileConfig::parse(cfg));
  }
}

TEST(GemmCompile, DefaultConfigsAreValidForOddShapes) {
  const KernelTemplate &t = getTemplate(gemm::op());
  for (int64_t n : {1, 8, 72, 255, 4097})
    for (const char *layout : {"nt", "nn", "tn"}) {
      gemm::Params p = params(layout, DType::BF16, DType::BF16, false, n, 63);
      TileConfig c = t.defaultConfig(p);
      EXPECT_FALSE(bool(t.checkConfig(p, c))) << p.spec().canonical() << " " << c.canonical();
    }
  EXPECT_FALSE(t.configSpace(params("nt", DType::BF16, DType::BF16, false)).empty());
}

TEST(GemmCompile, BadConfigsAndTargetsAreNamed) {
  const KernelTemplate &t = getTemplate(gemm::op());
  gemm::Params p = params("nn", DType::BF16, DType::BF16, false);
  auto err =
      t.checkConfig(p, *TileConfig::parse("bk=64 bm=128 bn=96 consumers=2 group=8 stages=4"));
  ASSERT_TRUE(bool(err));
  EXPECT_NE(llvm::toString(std::move(err))
                .find("bn = 96 must be a multiple of 16 (of 64 when B is "
                      "stored K x N)"),
            std::string::npos);
  err = t.checkConfig(p, *TileConfig::parse("bk=64 bm=128 bn=256 consumers=2 group=8 stages=8"));
  ASSERT_TRUE(bool(err));
  EXPECT_NE(llvm::toString(std::move(err)).find("bytes of shared memory"), std::string::npos);
  err = t.checkConfig(p, *TileConfig::parse("bk=64 bm=128 bn=256 consumers=1 group=8 stages=3"));
  ASSERT_TRUE(bool(err));
  EXPECT_NE(llvm::toString(std::move(err)).find("accumulator registers"), std::string::npos);
  err = t.checkConfig(
      p, *TileConfig::parse("bk=64 bm=128 bn=128 consumers=1 group=8 pingpong=1 stages=4"));
  ASSERT_TRUE(bool(err));
  EXPECT_NE(llvm::toString(std::move(err)).find("pingpong needs 2 consumers"), std::string::npos);
  err = t.checkConfig(
      p, *TileConfig::parse("bk=64 bm=256 bn=128 consumers=2 group=8 pingpong=1 stages=4"));
  ASSERT_TRUE(bool(err));
  EXPECT_NE(llvm::toString(std::move(err)).find("bm = 256 must be 64 or 128"), std::string::npos);
  // The TMA-store epilogue: 16-bit D only, whole panels, rows 16-byte apart,
  // and its buffers within shared memory.
  const char *store = "bk=64 bm=128 bn=256 consumers=2 group=8 stages=4 tmastore=1";
  err = t.checkConfig(params("nt", DType::BF16, DType::F32, false), *TileConfig::parse(store));
  ASSERT_TRUE(bool(err));
  EXPECT_NE(llvm::toString(std::move(err))
                .find("tmastore writes 16-bit D through shared memory; D is f32"),
            std::string::npos);
  err = t.checkConfig(
      params("nt", DType::BF16, DType::BF16, false),
      *TileConfig::parse("bk=64 bm=128 bn=80 consumers=2 group=8 stages=4 tmastore=1"));
  ASSERT_TRUE(bool(err));
  EXPECT_NE(
      llvm::toString(std::move(err)).find("with tmastore bn = 80 must be whole 64-column panels"),
      std::string::npos);
  err =
      t.checkConfig(params("nt", DType::BF16, DType::BF16, false, 4100), *TileConfig::parse(store));
  ASSERT_TRUE(bool(err));
  EXPECT_NE(llvm::toString(std::move(err)).find("N = 4100 is not a multiple of 8"),
            std::string::npos);
  err = t.checkConfig(
      p, *TileConfig::parse("bk=64 bm=128 bn=256 consumers=2 group=8 stages=5 tmastore=1"));
  ASSERT_TRUE(bool(err));
  EXPECT_NE(llvm::toString(std::move(err)).find("bm, bn, stages and tmastore need"),
            std::string::npos);
  EXPECT_FALSE(bool(t.checkConfig(p, *TileConfig::parse(store))));
  // K split: not with ping-pong, at most one part per K step.
  err = t.checkConfig(
      p,
      *TileConfig::parse("bk=64 bm=128 bn=128 consumers=2 group=8 pingpong=1 splitk=2 stages=4"));
  ASSERT_TRUE(bool(err));
  EXPECT_NE(llvm::toString(std::move(err)).find("splitk needs the consumers to share each tile"),
            std::string::npos);
  err = t.checkConfig(
      params("nt", DType::BF16, DType::BF16, false, 4096, 200),
      *TileConfig::parse("bk=64 bm=128 bn=128 consumers=2 group=8 splitk=5 stages=4"));
  ASSERT_TRUE(bool(err));
  EXPECT_NE(
      llvm::toString(std::move(err)).find("splitk = 5 exceeds the 4 K steps of bk = 64 (K = 200)"),
      std::string::npos);
}

TEST(GemmCompile, FewTilesOverALongKSplitK) {
  // The default: K split where the tiles fill under half the chip; the
  // tuning space starts with split configs there, and has none elsewhere.
  const KernelTemplate &t = getTemplate(gemm::op());
  gemm::Params few = params("tn", DType::BF16, DType::BF16, false, 1024, 8192);
  few.m = 1024; // 8 x 4 tiles of 128 x 256 on 132 multiprocessors
  TileConfig c = t.defaultConfig(few);
  ASSERT_TRUE(c.has("splitk")) << c.canonical();
  EXPECT_EQ(c.get("splitk"), 4); // 132 / 32 tiles, below 128 K steps / 8 and 8
  expectClean(few, c);
  EXPECT_TRUE(t.configSpace(few).front().has("splitk"));
  gemm::Params many = params("nt", DType::BF16, DType::BF16, false);
  EXPECT_FALSE(t.defaultConfig(many).has("splitk"));
  for (const TileConfig &cfg : t.configSpace(many))
    EXPECT_FALSE(cfg.has("splitk")) << cfg.canonical();
  gemm::Params shortK = params("nt", DType::BF16, DType::BF16, false, 1024, 256);
  shortK.m = 1024;
  EXPECT_FALSE(t.defaultConfig(shortK).has("splitk"));
  // Tiles half as wide that fill the chip instead: 2 x 32 tiles of 128 x 256
  // are 128 of 128 x 128.
  gemm::Params halfWide = params("nt", DType::BF16, DType::BF16, false, 8192, 3584);
  halfWide.m = 256;
  TileConfig hw = t.defaultConfig(halfWide);
  EXPECT_FALSE(hw.has("splitk")) << hw.canonical();
  EXPECT_EQ(hw.get("bn"), 128);
  // The split default with every layout, input and output type, C and a
  // bias: each builds without spills.
  for (const char *layout : {"nt", "nn", "tn"})
    for (DType ab : {DType::BF16, DType::F16})
      for (DType out : {DType::BF16, DType::F32})
        for (bool hasC : {false, true})
          for (bool hasBias : {false, true}) {
            gemm::Params q = params(layout, ab, out, hasC, 1024, 1024, "sm_90a", hasBias);
            q.m = 1024;
            TileConfig qc = t.defaultConfig(q);
            // f32 C and a bias leave no registers for the sums: no split.
            EXPECT_EQ(qc.has("splitk"), !(out == DType::F32 && hasC && hasBias)) << qc.canonical();
            expectClean(q, qc);
          }
}

TEST(GemmCompile, CallsAreCheckedBeforeAnyLaunch) {
  gemm::Call call;
  call.m = 0;
  call.n = 8;
  call.k = 8;
  auto s = gemm::specOf(call, *Target::parse("sm_90a"));
  ASSERT_FALSE(bool(s));
  EXPECT_NE(llvm::toString(s.takeError()).find("sizes must be positive, got m=0"),
            std::string::npos);
  call.m = 8;
  call.ab = DType::F32;
  s = gemm::specOf(call, *Target::parse("sm_90a"));
  ASSERT_FALSE(bool(s));
  EXPECT_NE(llvm::toString(s.takeError()).find("bf16 or f16"), std::string::npos);
}

// raster = 1 walks groups of tile columns; persistent = 0 gives one program
// per tile whatever the cap, and cannot split K (its last part would wait
// on parts that need not be resident).
TEST(GemmCompile, RasterOrderAndOneProgramPerTile) {
  KernelSpec spec = params("nt", DType::BF16, DType::BF16, false).spec();
  auto one = TileConfig::parse("bk=64 bm=128 bn=256 consumers=2 group=8 persistent=0 stages=4");
  ASSERT_TRUE(bool(one));
  auto k = compileKernel(spec, *one);
  ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
  const EntryInfo &e = k->entries.front();
  // 8192 rows of 128 by 4096 / 256 columns: 1024 programs, a cap of 7 or not.
  KernelArg args[5] = {KernelArg::tensorMap(CUtensorMap{}), KernelArg::tensorMap(CUtensorMap{}),
                       KernelArg::view(1, {8192, 4096}), KernelArg::f32(1), KernelArg::index(7)};
  std::vector<int64_t> sym;
  for (auto [arg, dim] : e.grid[0].symbols)
    sym.push_back(dim < 0 ? args[arg].i : args[arg].sizes[dim]);
  EXPECT_EQ(e.grid[0].evaluate(sym.data(), sym.size()), 1024);
  auto capped =
      compileKernel(spec, *TileConfig::parse("bk=64 bm=128 bn=256 consumers=2 group=8 stages=4"));
  ASSERT_TRUE(bool(capped));
  EXPECT_EQ(capped->entries.front().grid[0].evaluate(sym.data(), sym.size()), 7);
  auto split = TileConfig::parse("bk=64 bm=128 bn=256 consumers=2 group=8 persistent=0 splitk=2 "
                                 "stages=4");
  llvm::Error err = getTemplate(gemm::op()).checkConfig(spec, *split);
  ASSERT_TRUE(bool(err));
  EXPECT_NE(llvm::toString(std::move(err)).find("splitk needs a persistent grid"),
            std::string::npos);
  auto pp = TileConfig::parse("bk=64 bm=128 bn=128 consumers=2 group=8 pingpong=1 persistent=0 "
                              "stages=4");
  err = getTemplate(gemm::op()).checkConfig(spec, *pp);
  ASSERT_TRUE(bool(err));
  EXPECT_NE(llvm::toString(std::move(err)).find("pingpong needs a persistent grid"),
            std::string::npos);
  // Groups of columns are in the tuning space; one program per tile is
  // not (its grid cannot leave multiprocessors to a caller's margin).
  // Groups of columns come within the first 48 candidates (a tuning's
  // usual budget), clusters of two among the last.
  size_t firstByColumns = SIZE_MAX, firstPair = SIZE_MAX, i = 0;
  bool perTile = false;
  std::vector<TileConfig> space = getTemplate(gemm::op()).configSpace(spec);
  for (const TileConfig &c : space) {
    if (c.has("raster") && c.get("raster") == 1)
      firstByColumns = std::min(firstByColumns, i);
    if (c.has("cluster") && c.get("cluster") == 2)
      firstPair = std::min(firstPair, i);
    perTile |= c.has("persistent") && c.get("persistent") == 0;
    ++i;
  }
  EXPECT_LT(firstByColumns, 48u);
  EXPECT_GE(firstPair + 3, space.size());
  EXPECT_FALSE(perTile);
}

// cluster = 2: blocks in pairs that share B's tile, each copying half of it
// to both (multicast) and releasing stages in both; refused with ping-pong,
// a split K, or a B tile that does not halve into whole boxes.
TEST(GemmCompile, ClustersOfTwoShareB) {
  for (const char *layout : {"nt", "nn", "tn"}) {
    KernelSpec spec = params(layout, DType::BF16, DType::BF16, false).spec();
    auto cfg = TileConfig::parse("bk=64 bm=128 bn=256 cluster=2 consumers=2 group=8 stages=4 "
                                 "tmastore=1");
    ASSERT_TRUE(bool(cfg));
    CompiledKernel kept;
    expectClean(spec, *cfg, &kept);
    ASSERT_EQ(kept.entries.size(), 1u);
    auto *k = &kept;
    EXPECT_EQ(k->entries.front().clusterBlocks(), 2);
    EXPECT_NE(k->ptx.find(".multicast::cluster"), std::string::npos);
    EXPECT_NE(k->ptx.find("mapa.shared::cluster.u32"), std::string::npos);
    // The default semantics (release at CTA scope): `.release.cluster`
    // cost a GPU-wide memory barrier before each arrival.
    EXPECT_NE(k->ptx.find("mbarrier.arrive.shared::cluster.b64"), std::string::npos);
    EXPECT_EQ(k->ptx.find("mbarrier.arrive.release.cluster"), std::string::npos);
  }
  auto refusal = [](const char *layout, const char *config) {
    KernelSpec spec = params(layout, DType::BF16, DType::BF16, false).spec();
    llvm::Error err = getTemplate(gemm::op()).checkConfig(spec, *TileConfig::parse(config));
    return err ? llvm::toString(std::move(err)) : std::string();
  };
  EXPECT_NE(refusal("nt", "bk=64 bm=128 bn=128 cluster=2 consumers=2 group=8 pingpong=1 "
                          "stages=4")
                .find("cluster = 2 takes neither pingpong nor splitk"),
            std::string::npos);
  EXPECT_NE(refusal("nn", "bk=64 bm=128 bn=192 cluster=2 consumers=2 group=8 stages=4")
                .find("must split into two sets of 64-column panels"),
            std::string::npos);
  EXPECT_EQ(refusal("nt", "bk=64 bm=128 bn=192 cluster=2 consumers=2 group=8 stages=4"), "");
}

// C and D a leading dimension wide (spec ld = 1): their views take a row
// stride at launch, every layout and output type builds without spills;
// 16-bit D leaves through TMA stores where rows are whole multiples of 16
// bytes, a leading dimension or not (a TMA store into a shorter row wrote
// past its end on the H200).
TEST(GemmCompile, LeadingDimensionsOfCAndDBuildWithoutSpills) {
  for (const char *layout : {"nt", "nn", "tn"})
    for (DType out : {DType::BF16, DType::F32})
      for (bool hasC : {false, true}) {
        gemm::Params p = params(layout, DType::BF16, out, hasC);
        p.ld = true;
        CompiledKernel kept;
        expectClean(p.spec(), {}, &kept);
        ASSERT_EQ(kept.entries.size(), 1u);
        auto *k = &kept;
        const EntryInfo &e = k->entries.front();
        EXPECT_EQ(e.params[2].staticStrides, (std::vector<int64_t>{-1}));
        EXPECT_EQ(e.params[2].bytes(), 32u);
        // A and B come through tensor maps either way.
        EXPECT_TRUE(e.params[0].staticStrides.empty());
        if (hasC) {
          size_t c = k->config.has("tmastore") && k->config.get("tmastore") ? 4 : 3;
          EXPECT_EQ(e.params[c].staticStrides, (std::vector<int64_t>{-1}));
        }
      }
  gemm::Params narrow = params("nt", DType::BF16, DType::BF16, false, 100, 64);
  EXPECT_FALSE(getTemplate(gemm::op()).defaultConfig(narrow.spec()).has("tmastore"));
  narrow.ld = true;
  TileConfig c = getTemplate(gemm::op()).defaultConfig(narrow.spec());
  EXPECT_FALSE(c.has("tmastore")) << c.canonical();
  expectClean(narrow.spec(), c);
  narrow.n = 104;
  c = getTemplate(gemm::op()).defaultConfig(narrow.spec());
  EXPECT_TRUE(c.has("tmastore")) << c.canonical();
  expectClean(narrow.spec(), c);
  gemm::Params bias = params("nn", DType::BF16, DType::BF16, true, 4096, 4096, "sm_90a", true);
  bias.ld = true;
  expectClean(bias.spec(), {});
}

// A D that does not start on a 16-byte boundary (spec d16 = 0): the default
// stores from registers; TMA stores are refused naming why.
TEST(GemmCompile, DOffSixteenBytesTakesNoTmaStores) {
  gemm::Params p = params("nt", DType::BF16, DType::BF16, false);
  p.dAligned = false;
  TileConfig c = getTemplate(gemm::op()).defaultConfig(p.spec());
  EXPECT_FALSE(c.has("tmastore")) << c.canonical();
  expectClean(p.spec(), c);
  auto bad = TileConfig::parse("bk=64 bm=128 bn=256 consumers=2 group=8 stages=4 tmastore=1");
  ASSERT_TRUE(bool(bad));
  llvm::Error err = getTemplate(gemm::op()).checkConfig(p.spec(), *bad);
  ASSERT_TRUE(bool(err));
  EXPECT_NE(llvm::toString(std::move(err)).find("tmastore needs D on a 16-byte boundary"),
            std::string::npos);
}

// The leading dimensions of a call: checked by name before any compile;
// only those that differ from the row length make the kernel take strides.
TEST(GemmCompile, LeadingDimensionsOfACallAreChecked) {
  Target hopper = *Target::parse("sm_90a"), ampere = *Target::parse("sm_90");
  gemm::Call call;
  call.m = 64;
  call.n = 100;
  call.k = 64;
  call.d = 1 << 20;
  auto errorOf = [&](const Target &t) {
    auto s = gemm::specOf(call, t);
    return s ? std::string() : llvm::toString(s.takeError());
  };
  auto specLd = [&](const Target &t) {
    auto s = gemm::specOf(call, t);
    EXPECT_TRUE(bool(s)) << (s ? "" : llvm::toString(s.takeError()));
    return s ? (*s)[gemm::Ld] : -1;
  };
  call.ldd = 101;
  EXPECT_NE(errorOf(hopper).find("ldd = 101: rows of D that are not packed must lie a multiple "
                                 "of 16 bytes apart (a multiple of 8 elements)"),
            std::string::npos)
      << errorOf(hopper);
  call.ldd = 96;
  EXPECT_NE(errorOf(hopper).find("ldd = 96 is shorter than a row of D (100 elements"),
            std::string::npos)
      << errorOf(hopper);
  call.ldd = 0;
  call.lda = -8;
  EXPECT_NE(errorOf(hopper).find("lda = -8 is negative"), std::string::npos) << errorOf(hopper);
  call.lda = 0;
  EXPECT_EQ(specLd(hopper), 0);
  call.ldd = 100; // the row length: packed
  EXPECT_EQ(specLd(hopper), 0);
  call.ldd = 104;
  EXPECT_EQ(specLd(hopper), 1);
  call.ldd = 0;
  call.ldc = 104; // no C: ignored
  EXPECT_EQ(specLd(hopper), 0);
  call.hasC = true;
  call.ldd = 104;
  EXPECT_EQ(specLd(hopper), 1);
  call.hasC = false;
  call.ldc = call.ldd = 0;
  call.lda = 72; // A's stride is its tensor map's on sm_90a, a view's on sm_80
  EXPECT_EQ(specLd(hopper), 0);
  EXPECT_NE(errorOf(ampere).find("D's rows are packed"), std::string::npos) << errorOf(ampere);
  call.ldd = 104;
  EXPECT_EQ(specLd(ampere), 1);
  call.ldd = 0;
  // With a leading dimension, a packed C or D beside it is passed with
  // row strides too: 100 bf16 (200 bytes) is refused by name.
  call.lda = 0;
  call.hasC = true;
  call.ldc = 104;
  EXPECT_NE(errorOf(hopper).find("D's rows are packed (100 elements) beside another operand's "
                                 "leading dimension"),
            std::string::npos)
      << errorOf(hopper);
  // C in place of D takes one stride.
  call.c = call.d;
  call.ldd = 112;
  EXPECT_NE(errorOf(hopper).find("C is D but ldc = 104 and ldd = 112 differ"), std::string::npos)
      << errorOf(hopper);
  call.ldc = 112;
  EXPECT_EQ(specLd(hopper), 1);
  call.hasC = false;
  call.ldc = call.ldd = 0;
  call.d += 4;
  auto s = gemm::specOf(call, hopper);
  ASSERT_TRUE(bool(s));
  EXPECT_EQ((*s)[gemm::DAligned], 0);
}

//===----------------------------------------------------------------------===//
// sm_80: cp.async, ldmatrix, mma.sync
//===----------------------------------------------------------------------===//

size_t count(const std::string &text, const std::string &what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++n;
  return n;
}

void expectCleanSm80(const gemm::Params &p, const TileConfig &config,
                     CompiledKernel *kept = nullptr) {
  KernelSpec spec = p.spec();
  SCOPED_TRACE(spec.canonical() + " [" + config.canonical() + "]");
  auto k = compileKernel(spec, config);
  ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
  ASSERT_EQ(k->entries.size(), 1u);
  const EntryInfo &e = k->entries.front();
  EXPECT_EQ(e.spillBytes, 0) << k->log;
  EXPECT_GT(e.registers, 0) << k->log;
  EXPECT_LE(e.registers, 255) << k->log;
  // No stack frame either (ptxas: "0 bytes stack frame").
  if (k->log.find("stack frame") != std::string::npos) {
    EXPECT_NE(k->log.find(" 0 bytes stack frame"), std::string::npos) << k->log;
  }
  const std::string &ptx = k->ptx;
  EXPECT_EQ(ptx.find(".local"), std::string::npos) << "local memory in the PTX";
  EXPECT_EQ(ptx.find("wgmma"), std::string::npos);
  EXPECT_EQ(ptx.find("cp.async.bulk"), std::string::npos);
  std::string type = p.ab == DType::BF16 ? "bf16" : "f16";
  EXPECT_NE(ptx.find("mma.sync.aligned.m16n8k16.row.col.f32." + type + "." + type + ".f32"),
            std::string::npos);
  // A K-major operand is read as stored, an MN-major one transposed.
  size_t plain = count(ptx, "ldmatrix.sync.aligned.m8n8.x4.shared.b16");
  size_t trans = count(ptx, "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16");
  EXPECT_EQ(plain > 0, !p.transA || p.transB) << plain << " plain ldmatrix";
  EXPECT_EQ(trans > 0, p.transA || !p.transB) << trans << " transposed ldmatrix";
  // 16-byte copies where K (and N for B stored K x N) allow; element copies
  // always (the run-time fallback for misaligned operands).
  int64_t vec = config.has("vec") ? config.get("vec") : k->config.get("vec");
  bool wideA = p.transA || p.k % 8 == 0, wideB = (p.transB ? p.k : p.n) % 8 == 0;
  EXPECT_EQ(ptx.find("cp.async.cg.shared.global") != std::string::npos,
            vec == 8 && (wideA || wideB));
  EXPECT_NE(ptx.find("cp.async.commit_group"), std::string::npos);
  EXPECT_NE(ptx.find("cp.async.wait_group"), std::string::npos);
  EXPECT_NE(ptx.find("bar.sync"), std::string::npos);
  EXPECT_GT(e.dynamicSmemBytes, 0);
  ASSERT_EQ(e.params.size(), 4u + (p.hasC ? 2u : 0u) + (p.hasBias ? 1u : 0u));
  EXPECT_EQ(e.params[0].kind, ParamInfo::View);
  EXPECT_EQ(e.params[1].kind, ParamInfo::View);
  if (kept)
    *kept = std::move(*k);
}

TEST(GemmCompileSm80, EveryLayoutAndTypeBuildsWithoutSpills) {
  for (const char *layout : {"nt", "nn", "tn"})
    for (DType ab : {DType::BF16, DType::F16})
      for (DType out : {DType::BF16, DType::F16, DType::F32})
        for (bool hasC : {false, true})
          expectCleanSm80(params(layout, ab, out, hasC, 4096, 4096, "sm_80"), {});
}

TEST(GemmCompileSm80, TheBiasBuildsWithEveryLayoutAndC) {
  for (const char *layout : {"nt", "nn", "tn"})
    for (bool hasC : {false, true}) {
      expectCleanSm80(params(layout, DType::BF16, DType::BF16, hasC, 4096, 4096, "sm_80", true),
                      {});
      expectCleanSm80(params(layout, DType::F16, DType::F32, hasC, 255, 63, "sm_80", true), {});
    }
}

TEST(GemmCompileSm80, RaggedShapesBuild) {
  // The GPU tests' shapes: 1x1x1, 127x255x63, M = 1, K below a stage.
  const int64_t shapes[][2] = {{1, 1}, {255, 63}, {256, 64}, {136, 40}, {8, 8}, {264, 72}};
  for (const char *layout : {"nt", "nn", "tn"})
    for (const auto &nk : shapes) {
      gemm::Params p = params(layout, DType::BF16, DType::F32, true, nk[0], nk[1], "sm_80");
      expectCleanSm80(p, {});
    }
}

TEST(GemmCompileSm80, EveryConfigOfTheSpaceBuilds) {
  const KernelTemplate &t = getTemplate(gemm::op());
  for (const char *layout : {"nt", "nn", "tn"}) {
    gemm::Params p = params(layout, DType::BF16, DType::BF16, false, 4096, 4096, "sm_80");
    std::vector<TileConfig> space = t.configSpace(p);
    EXPECT_GE(space.size(), 8u) << layout;
    for (const TileConfig &c : space)
      expectCleanSm80(p, c);
  }
}

TEST(GemmCompileSm80, EveryTargetWithoutWgmmaTakesIt) {
  for (const char *arch : {"sm_86", "sm_89", "sm_90"})
    expectCleanSm80(params("nt", DType::BF16, DType::BF16, false, 512, 512, arch), {});
}

TEST(GemmCompileSm80, DefaultsFitOddShapes) {
  const KernelTemplate &t = getTemplate(gemm::op());
  for (int64_t n : {1, 8, 72, 255, 4097})
    for (int64_t k : {1, 63, 64, 4096})
      for (const char *layout : {"nt", "nn", "tn"}) {
        gemm::Params p = params(layout, DType::BF16, DType::BF16, false, n, k, "sm_80");
        TileConfig c = t.defaultConfig(p);
        EXPECT_FALSE(bool(t.checkConfig(p, c))) << p.spec().canonical() << " " << c.canonical();
        EXPECT_EQ(c.get("vec"), 8) << c.canonical();
      }
}

std::string sm80Error(const char *layout, const char *config, int64_t n = 4096, int64_t k = 4096) {
  const KernelTemplate &t = getTemplate(gemm::op());
  gemm::Params p = params(layout, DType::BF16, DType::BF16, false, n, k, "sm_80");
  auto parsed = TileConfig::parse(config);
  if (!parsed)
    return "unparsed: " + llvm::toString(parsed.takeError());
  llvm::Error err = t.checkConfig(p, *parsed);
  return err ? llvm::toString(std::move(err)) : "";
}

TEST(GemmCompileSm80, BadConfigsAreNamed) {
  EXPECT_NE(sm80Error("nt", "bk=64 bm=128 bn=128 group=8 stages=3 vec=8 warps=6")
                .find("warps = 6 must be 4 or 8"),
            std::string::npos);
  EXPECT_NE(sm80Error("nt", "bk=64 bm=96 bn=128 group=8 stages=3 vec=8 warps=4")
                .find("bm = 96 must be a multiple of 64"),
            std::string::npos);
  EXPECT_NE(sm80Error("nn", "bk=64 bm=128 bn=64 group=8 stages=3 vec=8 warps=8")
                .find("a multiple of 64 columns when B is stored K x N"),
            std::string::npos);
  EXPECT_NE(sm80Error("nt", "bk=64 bm=256 bn=256 group=8 stages=3 vec=8 warps=8")
                .find("accumulator registers"),
            std::string::npos);
  EXPECT_NE(sm80Error("nt", "bk=64 bm=128 bn=256 group=8 stages=8 vec=8 warps=8")
                .find("bytes of shared memory; sm_80 allows"),
            std::string::npos);
  EXPECT_NE(sm80Error("nt", "bk=64 bm=128 bn=128 group=8 stages=3 vec=3 warps=8")
                .find("vec = 3 must be 1, 2, 4 or 8"),
            std::string::npos);
  // A copy wider than an operand's rows allow narrows to what they allow.
  EXPECT_EQ(sm80Error("nt", "bk=64 bm=128 bn=128 group=8 stages=3 vec=8 warps=8", 4096, 63), "");
  // Keys of the sm_90a kernel only are not the sm_80 kernel's.
  EXPECT_NE(sm80Error("nt", "bk=64 bm=128 bn=128 consumers=2 group=8 stages=3")
                .find("unknown config key 'consumers'"),
            std::string::npos);
  EXPECT_NE(
      sm80Error("nt", "bk=64 bm=128 bn=128 group=8 stages=3 warps=8").find("config lacks 'vec'"),
      std::string::npos);
  EXPECT_EQ(sm80Error("nt", "bk=64 bm=128 bn=128 group=8 stages=3 vec=8 warps=8"), "");
}

TEST(GemmCompileSm80, LeadingDimensionsBuild) {
  for (const char *layout : {"nt", "nn", "tn"})
    for (bool hasC : {false, true}) {
      gemm::Params p = params(layout, DType::BF16, DType::F32, hasC, 255, 63, "sm_80");
      p.ld = true;
      CompiledKernel kept;
      expectCleanSm80(p, {}, &kept);
      ASSERT_EQ(kept.entries.size(), 1u);
      for (size_t i = 0; i < (hasC ? 4u : 3u); ++i)
        EXPECT_EQ(kept.entries.front().params[i].staticStrides, (std::vector<int64_t>{-1})) << i;
    }
}

TEST(GemmCompileSm80, ParametersAreViewsOfTheCompiledSizes) {
  gemm::Params p = params("nt", DType::BF16, DType::BF16, false, 256, 64, "sm_80");
  auto k = compileKernel(p.spec(), {});
  ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
  // The sm_80 kernel's parameters are views: A (M x K), B (N x K), D.
  EXPECT_EQ(k->entries.front().params[0].staticSizes, (std::vector<int64_t>{-1, 64}));
  EXPECT_EQ(k->entries.front().params[1].staticSizes, (std::vector<int64_t>{256, 64}));
}

} // namespace
