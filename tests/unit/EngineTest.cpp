//===- EngineTest.cpp - the engine's settings and its start without a GPU ---===//
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>

#include "runtime/CudaDriver.h"
#include "service/Engine.h"
#include "tests/support/ScopedEnv.h"
#include "tests/support/TempDir.h"

using namespace tilejit;

namespace {

/// The engine's variables for one scope: those given, the rest unset.
class Environment {
public:
  explicit Environment(std::map<std::string, const char *> values)
      : env_(withTheRestUnset(std::move(values))) {}

private:
  static std::map<std::string, const char *>
  withTheRestUnset(std::map<std::string, const char *> values) {
    for (const char *name :
         {"TILEJIT_TUNE", "TILEJIT_DETERMINISTIC", "TILEJIT_ALLOW_NONDETERMINISTIC",
          "TILEJIT_TUNE_ISOLATION", "TILEJIT_CACHE_DIR", "TILEJIT_SERVER", "TILEJIT_TOKEN",
          "TILEJIT_TOKEN_FILE", "TILEJIT_SERVER_DEADLINE_MS", "TILEJIT_STORE_JOURNAL",
          "XDG_CACHE_HOME"})
      values.emplace(name, nullptr);
    return values;
  }
  tilejit::testing::ScopedEnv env_;
};

EngineOptions options(std::map<std::string, const char *> values) {
  Environment env(std::move(values));
  auto o = EngineOptions::fromEnvironment();
  if (!o) {
    ADD_FAILURE() << llvm::toString(o.takeError());
    return {};
  }
  return *o;
}

std::string refusal(std::map<std::string, const char *> values) {
  Environment env(std::move(values));
  auto o = EngineOptions::fromEnvironment();
  if (o) {
    ADD_FAILURE() << "accepted";
    return "";
  }
  return llvm::toString(o.takeError());
}

TEST(EngineOptions, NothingSetIsTheDefaults) {
  EngineOptions o = options({{"XDG_CACHE_HOME", "/xdg"}});
  EXPECT_EQ(o.policy, TunePolicy::Off);
  EXPECT_FALSE(o.deterministic);
  EXPECT_FALSE(o.allowNondeterministic) << "bitwise repeatable results unless asked otherwise";
  EXPECT_EQ(o.tune.isolation, TuneOptions::Isolation::Process);
  // The store's one rule (the CLI's too): the user's cache folder, which an
  // engine may do without if it cannot be opened.
  EXPECT_EQ(o.dbPath, "/xdg/tilejit/tilejit.db");
  EXPECT_TRUE(o.storeOptional);
  EXPECT_FALSE(o.server) << "no server: kernels are made in process";
  // Empty values count as unset.
  EngineOptions empty = options({{"TILEJIT_TUNE", ""},
                                 {"TILEJIT_DETERMINISTIC", ""},
                                 {"TILEJIT_TUNE_ISOLATION", ""},
                                 {"TILEJIT_CACHE_DIR", ""},
                                 {"XDG_CACHE_HOME", "/xdg"}});
  EXPECT_EQ(empty.policy, TunePolicy::Off);
  EXPECT_FALSE(empty.deterministic);
  EXPECT_EQ(empty.tune.isolation, TuneOptions::Isolation::Process);
  EXPECT_EQ(empty.dbPath, "/xdg/tilejit/tilejit.db");
}

TEST(EngineOptions, EverySettingIsRead) {
  EXPECT_EQ(options({{"TILEJIT_TUNE", "off"}}).policy, TunePolicy::Off);
  EXPECT_EQ(options({{"TILEJIT_TUNE", "on-miss"}}).policy, TunePolicy::OnMiss);
  EXPECT_EQ(options({{"TILEJIT_TUNE", "background"}}).policy, TunePolicy::Background);
  EXPECT_TRUE(options({{"TILEJIT_DETERMINISTIC", "1"}}).deterministic);
  EXPECT_FALSE(options({{"TILEJIT_DETERMINISTIC", "0"}}).deterministic);
  EXPECT_TRUE(options({{"TILEJIT_ALLOW_NONDETERMINISTIC", "1"}}).allowNondeterministic);
  EXPECT_FALSE(options({{"TILEJIT_ALLOW_NONDETERMINISTIC", "0"}}).allowNondeterministic);
  EXPECT_EQ(options({{"TILEJIT_TUNE_ISOLATION", "in-process"}}).tune.isolation,
            TuneOptions::Isolation::InProcess);
  EXPECT_EQ(options({{"TILEJIT_TUNE_ISOLATION", "process"}}).tune.isolation,
            TuneOptions::Isolation::Process);
  EXPECT_EQ(options({{"TILEJIT_CACHE_DIR", "/some/dir"}}).dbPath, "/some/dir/tilejit.db");
  EXPECT_FALSE(options({{"TILEJIT_CACHE_DIR", "/some/dir"}}).storeOptional)
      << "a folder asked for must be usable";
  {
    // No cache folder and no HOME: no store (not a file in the working
    // directory).
    tilejit::testing::ScopedEnv noHome({{"HOME", nullptr}});
    EXPECT_EQ(options({}).dbPath, "");
  }
  // All at once, each independent of the others.
  EngineOptions all = options({{"TILEJIT_TUNE", "background"},
                               {"TILEJIT_DETERMINISTIC", "1"},
                               {"TILEJIT_TUNE_ISOLATION", "in-process"},
                               {"TILEJIT_CACHE_DIR", "/c"}});
  EXPECT_EQ(all.policy, TunePolicy::Background);
  EXPECT_TRUE(all.deterministic);
  EXPECT_EQ(all.tune.isolation, TuneOptions::Isolation::InProcess);
  EXPECT_EQ(all.dbPath, "/c/tilejit.db");
}

TEST(EngineOptions, TheServerSettingsAreTheClients) {
  EngineOptions o = options({{"TILEJIT_SERVER", "cache.internal:7070"},
                             {"TILEJIT_TOKEN", "t0k"},
                             {"TILEJIT_SERVER_DEADLINE_MS", "250"},
                             {"TILEJIT_TUNE", "on-miss"}});
  ASSERT_TRUE(o.server);
  EXPECT_EQ(o.server->address, "cache.internal:7070");
  EXPECT_EQ(o.server->token, "t0k");
  EXPECT_EQ(o.server->deadline, std::chrono::milliseconds(250));
  EXPECT_EQ(o.policy, TunePolicy::OnMiss);
  EXPECT_EQ(refusal({{"TILEJIT_SERVER", "cache.internal"}}),
            "TILEJIT_SERVER='cache.internal' is not host:port");
  EXPECT_NE(refusal({{"TILEJIT_SERVER", "h:1"}, {"TILEJIT_SERVER_DEADLINE_MS", "0"}})
                .find("TILEJIT_SERVER_DEADLINE_MS='0'"),
            std::string::npos);
}

TEST(EngineOptions, ABadValueIsAnErrorNamingTheVariable) {
  EXPECT_EQ(refusal({{"TILEJIT_TUNE", "always"}}),
            "TILEJIT_TUNE='always' is not one of off, on-miss, background");
  EXPECT_EQ(refusal({{"TILEJIT_DETERMINISTIC", "yes"}}),
            "TILEJIT_DETERMINISTIC='yes' is not 0 or 1");
  EXPECT_EQ(refusal({{"TILEJIT_ALLOW_NONDETERMINISTIC", "true"}}),
            "TILEJIT_ALLOW_NONDETERMINISTIC='true' is not 0 or 1");
  EXPECT_EQ(refusal({{"TILEJIT_TUNE_ISOLATION", "thread"}}),
            "TILEJIT_TUNE_ISOLATION='thread' is not process or in-process");
  // Case matters: the values are words, not flags.
  EXPECT_NE(refusal({{"TILEJIT_TUNE", "On-Miss"}}), "");
  // Every setting is checked, not only the engine's own.
  EXPECT_EQ(refusal({{"TILEJIT_STORE_JOURNAL", "foo"}}),
            "TILEJIT_STORE_JOURNAL='foo' is not one of wal, delete, auto");
}

TEST(Engine, CreateWithoutAGpuIsACleanErrorAndMakesNoStore) {
  if (auto drv = CudaDriver::get())
    GTEST_SKIP() << "a CUDA driver is present; the GPU tests create engines";
  else
    llvm::consumeError(drv.takeError());
  tilejit::testing::TempDir dir;
  EngineOptions o;
  o.dbPath = dir.file("sub/engine.db");
  auto e = Engine::create(o);
  ASSERT_FALSE(bool(e));
  std::string msg = llvm::toString(e.takeError());
  EXPECT_NE(msg.find("no CUDA driver"), std::string::npos) << msg;
  EXPECT_FALSE(std::filesystem::exists(dir.file("sub"))) << "nothing written without a GPU";
}

} // namespace
