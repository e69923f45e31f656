//===- GemmCompileTest.cpp - GEMM kernels build without a GPU --------------===//
//
// Every layout, input and output type, with and without C, and each config
// of the GPU tests, compiled to a cubin for sm_90a: ptxas reports no spills
// and no serialized wgmma, the consumers' register limit is honoured, the
// SASS-level instructions are the tensor cores' (PTX checked here; SASS on
// the GPU machine). Config and target errors name what was wrong.
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
                    int64_t k = 4096) {
  gemm::Params p;
  p.transA = layout[0] == 't';
  p.transB = layout[1] == 't';
  p.ab = ab;
  p.out = out;
  p.hasC = hasC;
  p.m = 8192;
  p.n = n;
  p.k = k;
  p.target = *Target::parse("sm_90a");
  return p;
}

void expectClean(const KernelSpec &spec, const TileConfig &config) {
  SCOPED_TRACE(spec.canonical() + " [" + config.canonical() + "]");
  auto k = compileKernel(spec, config);
  ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
  ASSERT_EQ(k->entries.size(), 1u);
  const EntryInfo &e = k->entries.front();
  EXPECT_EQ(e.spillBytes, 0) << k->log;
  EXPECT_GT(e.registers, 0) << k->log;
  EXPECT_EQ(k->log.find("serialized"), std::string::npos) << k->log;
  EXPECT_EQ(k->log.find("setmaxnreg' ignored"), std::string::npos) << k->log;
  EXPECT_NE(k->ptx.find("wgmma.mma_async.sync.aligned.m64n"), std::string::npos);
  EXPECT_NE(k->ptx.find("cp.async.bulk.tensor.2d"), std::string::npos);
  EXPECT_NE(k->ptx.find("setmaxnreg.inc.sync.aligned.u32"), std::string::npos);
  EXPECT_GT(e.dynamicSmemBytes, 0);
  ASSERT_EQ(e.params.size(), spec[gemm::HasC] ? 7u : 5u);
  EXPECT_EQ(e.params[0].kind, ParamInfo::TensorMap);
  EXPECT_EQ(e.params[0].staticSizes.size(), 2u);
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
  gemm::Params old = p;
  old.target = *Target::parse("sm_80");
  auto k = compileKernel(old, {});
  ASSERT_FALSE(bool(k));
  EXPECT_NE(llvm::toString(k.takeError()).find("gemm runs on sm_90a"), std::string::npos);
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

} // namespace
