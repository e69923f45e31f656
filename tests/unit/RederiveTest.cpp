//===- RederiveTest.cpp - trusting a binary only when it re-derives ---------===//
#include <gtest/gtest.h>

#include "compiler/Compiler.h"
#include "compiler/Rederive.h"
#include "core/Sha256.h"

using namespace tilejit;

namespace {

std::string errorOf(llvm::Error e) { return e ? llvm::toString(std::move(e)) : std::string(); }

TEST(Rederive, ABinaryIsTrustedOnlyWhenCompilingItsSpecGivesItsBytes) {
  auto spec = KernelSpec::parse("rmsnorm_fwd cols=256");
  ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
  auto compiled = compileKernel(*spec, {});
  ASSERT_TRUE(bool(compiled)) << llvm::toString(compiled.takeError());
  // As the engine and the tuner store it.
  std::string specText = spec->canonical(false), config = compiled->config.canonical();
  std::string arch(spec->target.archName());
  EXPECT_EQ(errorOf(checkRederives(specText, config, arch, compiled->key, compiled->cubin)), "");

  std::vector<char> changed = compiled->cubin;
  changed[changed.size() / 2] ^= 1;
  EXPECT_NE(errorOf(checkRederives(specText, config, arch, compiled->key, changed))
                .find("compiling its spec and config here gives other bytes"),
            std::string::npos);
  EXPECT_NE(errorOf(checkRederives(specText, config, arch, sha256Hex("elsewhere"), compiled->cubin))
                .find("another tilejit or toolchain built it"),
            std::string::npos);
  EXPECT_NE(
      errorOf(checkRederives("rmsnorm_fwd cols=x", config, arch, compiled->key, compiled->cubin))
          .find("its spec does not parse here"),
      std::string::npos);
  EXPECT_NE(errorOf(checkRederives(specText, config, "sm_80", compiled->key, compiled->cubin))
                .find("is not its spec's"),
            std::string::npos);
}

} // namespace
