//===- SettingsTest.cpp - the table of TILEJIT_* variables ------------------===//
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <set>

#include "core/Settings.h"
#include "tests/support/ScopedEnv.h"
#include "tests/support/TempDir.h"

using namespace tilejit;

namespace {

using tilejit::testing::ScopedEnv;

std::string refusal(const char *name, const char *value) {
  ScopedEnv env(std::map<std::string, const char *>{{name, value}});
  llvm::Error e = settings::check(name);
  if (!e)
    return "accepted";
  std::string one = llvm::toString(std::move(e));
  // checkAll names the same variable first (the others are unset or good).
  llvm::Error all = settings::checkAll(/*everything=*/true);
  EXPECT_TRUE(bool(all));
  EXPECT_EQ(all ? llvm::toString(std::move(all)) : "", one);
  return one;
}

TEST(Settings, EveryVariableIsDeclaredOnceWithItsMeaning) {
  std::set<std::string_view> names;
  for (const settings::Variable &v : settings::variables()) {
    EXPECT_EQ(v.name.rfind("TILEJIT_", 0), 0u) << v.name;
    EXPECT_TRUE(names.insert(v.name).second) << v.name << " twice";
    EXPECT_FALSE(v.readBy.empty()) << v.name;
    EXPECT_FALSE(v.meaning.empty()) << v.name;
    EXPECT_EQ(settings::find(v.name), &v);
  }
  EXPECT_EQ(settings::find("TILEJIT_NOPE"), nullptr);
  llvm::Error e = settings::check("TILEJIT_NOPE");
  ASSERT_TRUE(bool(e));
  EXPECT_EQ(llvm::toString(std::move(e)), "'TILEJIT_NOPE' is not a tilejit setting");
}

TEST(Settings, BadValuesAreNamedWithWhatTheyTake) {
  EXPECT_EQ(refusal("TILEJIT_STORE_JOURNAL", "foo"),
            "TILEJIT_STORE_JOURNAL='foo' is not one of wal, delete, auto");
  EXPECT_EQ(refusal("TILEJIT_TUNE", "always"),
            "TILEJIT_TUNE='always' is not one of off, on-miss, background");
  EXPECT_EQ(refusal("TILEJIT_DETERMINISTIC", "yes"), "TILEJIT_DETERMINISTIC='yes' is not 0 or 1");
  EXPECT_EQ(refusal("TILEJIT_SERVER", "cache.internal"),
            "TILEJIT_SERVER='cache.internal' is not host:port");
  EXPECT_EQ(refusal("TILEJIT_SERVER_DEADLINE_MS", "-5"),
            "TILEJIT_SERVER_DEADLINE_MS='-5' is not a number of milliseconds in [1, 3600000]");
  EXPECT_EQ(refusal("TILEJIT_SM_MARGIN", "8x"),
            "TILEJIT_SM_MARGIN='8x' is not a number of multiprocessors in [0, 4095]");
  EXPECT_EQ(refusal("TILEJIT_WORKER", "/no/such/worker"),
            "TILEJIT_WORKER='/no/such/worker' is not an executable file");
  EXPECT_EQ(refusal("TILEJIT_LOG_LEVEL", "loud"),
            "TILEJIT_LOG_LEVEL='loud' is not one of debug, info, warning, error, critical");
  EXPECT_EQ(refusal("TILEJIT_TEST_SEED", "-3"),
            "TILEJIT_TEST_SEED='-3' is not a seed (a whole number below 2^64, decimal or 0x hex)");
  EXPECT_EQ(refusal("TILEJIT_TEST_SEED", "0xffffffffffffffff"), "accepted");
  EXPECT_EQ(refusal("TILEJIT_SERVER_DEADLINE_MS", "99999999999999999999"),
            "TILEJIT_SERVER_DEADLINE_MS='99999999999999999999' is not a number of milliseconds in "
            "[1, 3600000]");
  tilejit::testing::TempDir dir;
  std::ofstream(dir.file("file")) << "x";
  EXPECT_EQ(refusal("TILEJIT_CACHE_DIR", dir.file("file").c_str()),
            "TILEJIT_CACHE_DIR='" + dir.file("file") +
                "' is a file, not a folder (the store goes in it as tilejit.db)");
  EXPECT_EQ(refusal("TILEJIT_CA", dir.file("file").c_str()),
            "TILEJIT_CA='" + dir.file("file") + "' is not PEM (no -----BEGIN line)");
  // Good values, and empty (unset).
  for (auto [name, value] : {std::pair{"TILEJIT_STORE_JOURNAL", "delete"},
                             {"TILEJIT_TUNE", "on-miss"},
                             {"TILEJIT_SERVER", "h:7070"},
                             {"TILEJIT_SM_MARGIN", "0"},
                             {"TILEJIT_LOG_LEVEL", "DEBUG"},
                             {"TILEJIT_TUNE", ""},
                             {"TILEJIT_TOKEN", "anything at all"}})
    EXPECT_EQ(refusal(name, value), "accepted") << name << "=" << value;
  EXPECT_EQ(refusal("TILEJIT_CACHE_DIR", dir.file("not/made/yet").c_str()), "accepted");
}

TEST(Settings, ProcessesCheckWhatTheyRead) {
  // The Python package's and the tests' variables do not stop the engine or
  // the CLI (doctor still reports them); everything else does.
  ScopedEnv env(std::map<std::string, const char *>{{"TILEJIT_LOG_LEVEL", "loud"}});
  EXPECT_FALSE(bool(settings::checkAll()));
  llvm::Error e = settings::checkAll(/*everything=*/true);
  ASSERT_TRUE(bool(e));
  EXPECT_EQ(llvm::toString(std::move(e)),
            "TILEJIT_LOG_LEVEL='loud' is not one of debug, info, warning, error, critical");
  for (const char *name : {"TILEJIT_LIB", "TILEJIT_LOG_LEVEL", "TILEJIT_TEST_SEED", "TILEJIT_CLI"})
    EXPECT_FALSE(settings::find(name)->native) << name;
  EXPECT_TRUE(settings::find("TILEJIT_STORE_JOURNAL")->native);
  // A flag that stands in for a variable is checked by the same rule.
  llvm::Error flag = settings::checkValue("TILEJIT_SERVER", "nohost");
  ASSERT_TRUE(bool(flag));
  EXPECT_EQ(llvm::toString(std::move(flag)), "TILEJIT_SERVER='nohost' is not host:port");
}

TEST(Settings, TheStoreHasOnePlace) {
  std::string from;
  {
    ScopedEnv env({{"TILEJIT_CACHE_DIR", "/c"}, {"XDG_CACHE_HOME", "/x"}, {"HOME", "/h"}});
    EXPECT_EQ(settings::storePath("f.db", &from), "f.db");
    EXPECT_EQ(from, "--db");
    EXPECT_EQ(settings::storePath({}, &from), "/c/tilejit.db");
    EXPECT_EQ(from, "TILEJIT_CACHE_DIR");
  }
  {
    ScopedEnv env({{"TILEJIT_CACHE_DIR", ""}, {"XDG_CACHE_HOME", "/x"}, {"HOME", "/h"}});
    EXPECT_EQ(settings::storePath({}, &from), "/x/tilejit/tilejit.db");
    EXPECT_EQ(from, "XDG_CACHE_HOME");
  }
  {
    ScopedEnv env({{"TILEJIT_CACHE_DIR", nullptr}, {"XDG_CACHE_HOME", nullptr}, {"HOME", "/h"}});
    EXPECT_EQ(settings::storePath({}, &from), "/h/.cache/tilejit/tilejit.db");
    EXPECT_EQ(from, "HOME");
  }
  {
    ScopedEnv env({{"TILEJIT_CACHE_DIR", nullptr}, {"XDG_CACHE_HOME", nullptr}, {"HOME", nullptr}});
    EXPECT_EQ(settings::storePath({}, &from), "tilejit.db");
    EXPECT_EQ(from, "");
  }
}

} // namespace
