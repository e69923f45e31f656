//===- StoreTest.cpp - the SQLite tuning store's promises -------------------===//
//
// Each promise of runtime/Store.h as a test, on real files in a fresh
// temporary directory (":memory:" where no file is needed). The multi-process
// tests run tilejit_store_torture (TILEJIT_STORE_TORTURE) as child processes.
//
//===----------------------------------------------------------------------===//
#include "runtime/Store.h"
#include "tests/store/StorePayload.h"
#include "tests/support/Seed.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <thread>

using namespace tilejit;
namespace fs = std::filesystem;

namespace {
using tilejit::testing::payload;

StoredKernel makeKernel(const std::string &name, size_t bytes = 4096, int64_t createdAt = 0) {
  StoredKernel k;
  k.key = sha256Hex(name);
  k.spec = "rmsnorm_fwd dtype=bf16 cols=4096 " + name + " arch=sm_90a";
  k.config = "rows=1 threads=256 vec=8";
  k.arch = "sm_90a";
  k.toolchain = "tilejit=0.1.0 nvrtc=13.0 device=abc";
  k.cubin = payload(name, bytes);
  k.ptx = ".version 8.8\n.target sm_90a\n// " + name;
  k.launch = R"({"entries":[{"name":"k","threads":256}]})";
  k.workspaceBytes = 128;
  k.createdAt = createdAt;
  return k;
}

Timing makeTiming(const std::string &tuneKey, const std::string &config, double ms,
                  int64_t createdAt = 0) {
  Timing t;
  t.tuneKey = tuneKey;
  t.config = config;
  t.medianMs = ms;
  t.p20Ms = ms * 0.95;
  t.p80Ms = ms * 1.05;
  t.reps = 50;
  t.gpu = "NVIDIA H200";
  t.smCount = 132;
  t.driverVersion = 13000;
  t.smClockMHz = 1980;
  t.memClockMHz = 2619;
  t.createdAt = createdAt;
  return t;
}

template <typename T> T ok(llvm::Expected<T> v) {
  if (!v) {
    ADD_FAILURE() << toString(v.takeError());
    return T();
  }
  return std::move(*v);
}

#define ASSERT_OK(e)                                                                               \
  do {                                                                                             \
    llvm::Error err_ = (e);                                                                        \
    ASSERT_FALSE(bool(err_)) << toString(std::move(err_));                                         \
  } while (0)

std::unique_ptr<Store> openStore(const std::string &path, std::string *notice = nullptr) {
  auto s = Store::open(path, notice);
  if (!s) {
    ADD_FAILURE() << toString(s.takeError());
    return nullptr;
  }
  return std::move(*s);
}

std::string readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void writeFile(const std::string &path, const std::string &bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

std::string randomBytes(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char &c : s)
    c = char(rng());
  return s;
}

/// Runs SQL on a file with a plain connection (another process, in effect).
void rawSql(const std::string &path, const std::string &sql) {
  sqlite3 *db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char *msg = nullptr;
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &msg);
  std::string err = msg ? msg : "";
  sqlite3_free(msg);
  sqlite3_close(db);
  ASSERT_EQ(rc, SQLITE_OK) << sql << ": " << err;
}

int64_t rawInt(const std::string &path, const std::string &sql) {
  sqlite3 *db = nullptr;
  sqlite3_stmt *st = nullptr;
  int64_t v = -1;
  if (sqlite3_open(path.c_str(), &db) == SQLITE_OK &&
      sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW)
    v = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  sqlite3_close(db);
  return v;
}

/// Files in `dir` whose names start with `prefix`.
std::vector<std::string> filesStartingWith(const std::string &dir, const std::string &prefix) {
  std::vector<std::string> out;
  for (auto &e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind(prefix, 0) == 0)
      out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

/// Everything a store holds, as text, for "unchanged" comparisons.
std::string dump(Store &s, const std::vector<std::string> &tuneKeys) {
  std::ostringstream out;
  for (const auto &x : ok(s.list())) {
    out << x.kind << ' ' << x.key << ' ' << x.spec << ' ' << x.config << ' ' << x.arch << ' '
        << x.bytes << ' ' << x.createdAt << '\n';
    if (x.kind == "kernel") {
      auto k = ok(s.getKernel(x.key));
      out << (k ? k->sha256 + " " + k->launch + " " + k->ptx : "missing") << '\n';
    }
  }
  for (const auto &tk : tuneKeys) {
    for (const auto &t : ok(s.timings(tk)))
      out << "timing " << t.tuneKey << ' ' << t.config << ' ' << t.medianMs << ' ' << t.p20Ms << ' '
          << t.p80Ms << ' ' << t.reps << ' ' << t.gpu << ' ' << t.smCount << ' ' << t.driverVersion
          << ' ' << t.smClockMHz << ' ' << t.memClockMHz << ' ' << t.createdAt << '\n';
    for (const auto &f : ok(s.failures(tk)))
      out << "failure " << f.tuneKey << ' ' << f.config << ' ' << f.stage << ' ' << f.reason << ' '
          << f.createdAt << '\n';
    if (auto w = ok(s.winner(tk)))
      out << "winner " << w->tuneKey << ' ' << w->config << ' ' << w->kernelKey << ' '
          << w->medianMs << ' ' << w->reason << ' ' << w->chosenAt << '\n';
  }
  return out.str();
}

/// A store with one of each record (below).
void fill(Store &s, const std::string &tag, int64_t base);

class StoreTest : public ::testing::Test {
protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "tilejit-store-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string file(const std::string &name) const { return dir + "/" + name; }

  /// Opens a bad file and checks that it was moved aside, intact, with a
  /// notice naming both paths, and that a working store took its place.
  void expectMovedAside(const std::string &path, const std::string &original) {
    std::string notice;
    auto store = openStore(path, &notice);
    ASSERT_TRUE(store);
    auto aside = filesStartingWith(dir, fs::path(path).filename().string() + ".corrupt-");
    ASSERT_FALSE(aside.empty()) << "nothing moved aside";
    std::string main = aside.front();
    EXPECT_EQ(readFile(main), original) << "the moved file must be kept as it was";
    EXPECT_NE(notice.find(path), std::string::npos) << notice;
    EXPECT_NE(notice.find(main), std::string::npos) << notice;
    EXPECT_EQ(notice.find('\n'), std::string::npos) << "one line: " << notice;
    EXPECT_EQ(store->schemaVersion(), Store::knownSchemaVersion());
    ASSERT_OK(store->putKernel(makeKernel("fresh")));
    auto k = ok(store->getKernel(sha256Hex("fresh")));
    ASSERT_TRUE(k.has_value());
    EXPECT_EQ(k->cubin, payload("fresh", 4096));
    EXPECT_TRUE(ok(store->verify()).empty());
  }

  std::string dir;
};

//===----------------------------------------------------------------------===//
// Records
//===----------------------------------------------------------------------===//

TEST_F(StoreTest, KernelRoundTrip) {
  auto store = openStore(":memory:");
  ASSERT_TRUE(store);
  EXPECT_EQ(store->path(), ":memory:");
  EXPECT_EQ(store->schemaVersion(), 1);
  StoredKernel k = makeKernel("a", 10000);
  ASSERT_OK(store->putKernel(k));
  auto got = ok(store->getKernel(k.key));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->key, k.key);
  EXPECT_EQ(got->spec, k.spec);
  EXPECT_EQ(got->config, k.config);
  EXPECT_EQ(got->arch, k.arch);
  EXPECT_EQ(got->toolchain, k.toolchain);
  EXPECT_EQ(got->cubin, k.cubin);
  EXPECT_EQ(got->ptx, k.ptx);
  EXPECT_EQ(got->launch, k.launch);
  EXPECT_EQ(got->workspaceBytes, k.workspaceBytes);
  EXPECT_EQ(got->sha256, sha256Hex(std::string(k.cubin.begin(), k.cubin.end())));
  // Stamped with the time of the write in Unix seconds (not 0, not
  // milliseconds): after 2023-11-14 and before 2100.
  EXPECT_GT(got->createdAt, 1700000000);
  EXPECT_LT(got->createdAt, 4102444800);

  std::string problem = "stale";
  auto absent = ok(store->getKernel(sha256Hex("nope"), &problem));
  EXPECT_FALSE(absent.has_value());
  EXPECT_EQ(problem, "");
}

TEST_F(StoreTest, KernelEdgeCases) {
  auto store = openStore(":memory:");
  ASSERT_TRUE(store);
  // An empty cubin, bytes with NULs, and a caller's createdAt kept as given.
  StoredKernel k = makeKernel("empty", 0, 12345);
  k.ptx = std::string("a\0b", 3);
  ASSERT_OK(store->putKernel(k));
  auto got = ok(store->getKernel(k.key));
  ASSERT_TRUE(got.has_value());
  EXPECT_TRUE(got->cubin.empty());
  EXPECT_EQ(got->ptx, k.ptx);
  EXPECT_EQ(got->createdAt, 12345);
  auto all = ok(store->list());
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].bytes, 3) << "PTX bytes after a NUL count too";
  // Keys are identities: 64 lower-case hex digits.
  StoredKernel bad = makeKernel("x");
  bad.key = "not-a-key";
  llvm::Error e = store->putKernel(bad);
  ASSERT_TRUE(bool(e));
  EXPECT_NE(toString(std::move(e)).find("not-a-key"), std::string::npos);
}

TEST_F(StoreTest, KernelReplace) {
  auto store = openStore(":memory:");
  ASSERT_TRUE(store);
  StoredKernel k = makeKernel("a", 5000, 100);
  ASSERT_OK(store->putKernel(k));
  StoredKernel k2 = makeKernel("b", 7000, 200);
  k2.key = k.key;
  ASSERT_OK(store->putKernel(k2));
  auto got = ok(store->getKernel(k.key));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->cubin, k2.cubin);
  EXPECT_EQ(got->spec, k2.spec);
  EXPECT_EQ(got->createdAt, 200);
  auto all = ok(store->list());
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].kind, "kernel");
  EXPECT_EQ(all[0].bytes, int64_t(7000 + k2.ptx.size()));
}

TEST_F(StoreTest, TimingsAreAllKept) {
  auto store = openStore(":memory:");
  ASSERT_TRUE(store);
  EXPECT_FALSE(ok(store->hasTiming("tk", "c1")));
  ASSERT_OK(store->addTiming(makeTiming("tk", "c1", 1.5, 10)));
  ASSERT_OK(store->addTiming(makeTiming("tk", "c1", 1.25, 11))); // a repeat is kept too
  ASSERT_OK(store->addTiming(makeTiming("tk", "c2", 2.0)));
  ASSERT_OK(store->addTiming(makeTiming("other", "c3", 3.0)));
  auto ts = ok(store->timings("tk"));
  ASSERT_EQ(ts.size(), 3u);
  Timing want = makeTiming("tk", "c1", 1.5, 10);
  EXPECT_EQ(ts[0].tuneKey, "tk");
  EXPECT_EQ(ts[0].config, "c1");
  EXPECT_DOUBLE_EQ(ts[0].medianMs, want.medianMs);
  EXPECT_DOUBLE_EQ(ts[0].p20Ms, want.p20Ms);
  EXPECT_DOUBLE_EQ(ts[0].p80Ms, want.p80Ms);
  EXPECT_EQ(ts[0].reps, want.reps);
  EXPECT_EQ(ts[0].gpu, want.gpu);
  EXPECT_EQ(ts[0].smCount, want.smCount);
  EXPECT_EQ(ts[0].driverVersion, want.driverVersion);
  EXPECT_EQ(ts[0].smClockMHz, want.smClockMHz);
  EXPECT_EQ(ts[0].memClockMHz, want.memClockMHz);
  EXPECT_EQ(ts[0].createdAt, 10);
  EXPECT_DOUBLE_EQ(ts[1].medianMs, 1.25);
  EXPECT_EQ(ts[2].config, "c2");
  EXPECT_GT(ts[2].createdAt, 1000000000); // set to now
  EXPECT_TRUE(ok(store->hasTiming("tk", "c1")));
  EXPECT_TRUE(ok(store->hasTiming("tk", "c2")));
  EXPECT_FALSE(ok(store->hasTiming("tk", "c3")));
  EXPECT_FALSE(ok(store->hasTiming("nope", "c1")));
  EXPECT_TRUE(ok(store->timings("nope")).empty());
  Timing nan = makeTiming("tk", "c4", std::nan(""));
  llvm::Error e = store->addTiming(nan);
  EXPECT_TRUE(bool(e));
  llvm::consumeError(std::move(e));
}

TEST_F(StoreTest, WinnerReplaces) {
  auto store = openStore(":memory:");
  ASSERT_TRUE(store);
  EXPECT_FALSE(ok(store->winner("tk")).has_value());
  StoredKernel k = makeKernel("w");
  ASSERT_OK(store->putKernel(k));
  ASSERT_OK(store->setWinner({"tk", "c1", "", 2.0, "only one", 50}));
  auto w = ok(store->winner("tk"));
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->config, "c1");
  EXPECT_EQ(w->kernelKey, "");
  EXPECT_EQ(w->chosenAt, 50);
  ASSERT_OK(store->setWinner({"tk", "c2", k.key, 1.5, "fastest; c1 within noise", 0}));
  w = ok(store->winner("tk"));
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->tuneKey, "tk");
  EXPECT_EQ(w->config, "c2");
  EXPECT_EQ(w->kernelKey, k.key);
  EXPECT_DOUBLE_EQ(w->medianMs, 1.5);
  EXPECT_EQ(w->reason, "fastest; c1 within noise");
  EXPECT_GT(w->chosenAt, 1000000000);
  // A winner cannot name a kernel that is not stored.
  llvm::Error e = store->setWinner({"tk2", "c", sha256Hex("absent"), 1, "", 0});
  ASSERT_TRUE(bool(e));
  EXPECT_NE(toString(std::move(e)).find("not stored"), std::string::npos);
  EXPECT_FALSE(ok(store->winner("tk2")).has_value());
  auto all = ok(store->list());
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[1].kind, "winner");
  EXPECT_EQ(all[1].key, "tk");
  EXPECT_EQ(all[1].config, "c2");
  EXPECT_EQ(all[1].spec, k.spec);
  EXPECT_EQ(all[1].arch, "sm_90a");
}

TEST_F(StoreTest, FailuresAreANegativeCache) {
  auto store = openStore(":memory:");
  ASSERT_TRUE(store);
  EXPECT_FALSE(ok(store->isKnownBad("tk", "c1")));
  ASSERT_OK(store->addFailure({"tk", "c1", "compile", "too much shared memory", 5}));
  ASSERT_OK(store->addFailure({"tk", "c2", "launch", "invalid argument", 6}));
  ASSERT_OK(store->addFailure({"tk", "c1", "verify", "max error 0.5", 7})); // replaces
  ASSERT_OK(store->addFailure({"other", "c1", "verify", "x", 8}));
  auto fails = ok(store->failures("tk"));
  ASSERT_EQ(fails.size(), 2u);
  EXPECT_EQ(fails[0].config, "c1");
  EXPECT_EQ(fails[0].stage, "verify");
  EXPECT_EQ(fails[0].reason, "max error 0.5");
  EXPECT_EQ(fails[0].createdAt, 7);
  EXPECT_EQ(fails[1].config, "c2");
  EXPECT_EQ(fails[1].stage, "launch");
  EXPECT_TRUE(ok(store->isKnownBad("tk", "c1")));
  EXPECT_TRUE(ok(store->isKnownBad("tk", "c2")));
  EXPECT_FALSE(ok(store->isKnownBad("tk", "c3")));
  EXPECT_FALSE(ok(store->isKnownBad("nope", "c1")));
  llvm::Error e = store->addFailure({"tk", "c9", "runtime", "?", 0});
  ASSERT_TRUE(bool(e));
  EXPECT_NE(toString(std::move(e)).find("runtime"), std::string::npos);
  EXPECT_FALSE(ok(store->isKnownBad("tk", "c9")));
}

TEST_F(StoreTest, ThreadsShareOneStore) {
  auto store = openStore(file("threads.db"));
  ASSERT_TRUE(store);
  std::vector<std::thread> threads;
  std::atomic<int> errors{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        std::string name = "t" + std::to_string(t) + "i" + std::to_string(i);
        if (llvm::Error e = store->putKernel(makeKernel(name, 2000))) {
          llvm::consumeError(std::move(e));
          ++errors;
        }
        if (llvm::Error e = store->addTiming(makeTiming("tk" + std::to_string(t), name, 1.0))) {
          llvm::consumeError(std::move(e));
          ++errors;
        }
        auto k = store->getKernel(sha256Hex(name));
        if (!k || !*k || (*k)->cubin != payload(name, 2000)) {
          if (!k)
            llvm::consumeError(k.takeError());
          ++errors;
        }
      }
    });
  for (auto &t : threads)
    t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(ok(store->list()).size(), 200u);
  for (int t = 0; t < 4; ++t)
    EXPECT_EQ(ok(store->timings("tk" + std::to_string(t))).size(), 50u);
}

//===----------------------------------------------------------------------===//
// Hash checks
//===----------------------------------------------------------------------===//

TEST_F(StoreTest, CubinHashMismatchIsDeletedNeverReturned) {
  std::string path = file("hash.db");
  auto store = openStore(path);
  ASSERT_TRUE(store);
  StoredKernel bad = makeKernel("bad", 20000), good = makeKernel("good", 20000);
  ASSERT_OK(store->putKernel(bad));
  ASSERT_OK(store->putKernel(good));
  ASSERT_OK(store->setWinner({"tk", bad.config, bad.key, 1.0, "fastest", 0}));
  EXPECT_TRUE(ok(store->verify()).empty());

  // Another process flips one byte of the blob (same length) and leaves the hash.
  rawSql(path, "UPDATE kernels SET cubin = CAST(substr(cubin, 1, 99) || x'00' || "
               "substr(cubin, 101) AS BLOB) WHERE key = '" +
                   bad.key + "'");
  ASSERT_EQ(rawInt(path, "SELECT length(cubin) FROM kernels WHERE key = '" + bad.key + "'"), 20000);

  auto problems = ok(store->verify());
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find(bad.key), std::string::npos) << problems[0];
  EXPECT_EQ(rawInt(path, "SELECT count(*) FROM kernels"), 2) << "verify deletes nothing";

  std::string problem;
  auto got = ok(store->getKernel(bad.key, &problem));
  EXPECT_FALSE(got.has_value()) << "a corrupt binary must never be handed out";
  EXPECT_NE(problem.find(bad.key), std::string::npos) << problem;
  EXPECT_EQ(rawInt(path, "SELECT count(*) FROM kernels WHERE key = '" + bad.key + "'"), 0);

  // Gone now: absent, no problem; the winner remains, without its kernel.
  got = ok(store->getKernel(bad.key, &problem));
  EXPECT_FALSE(got.has_value());
  EXPECT_EQ(problem, "");
  auto w = ok(store->winner("tk"));
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->kernelKey, "");
  EXPECT_TRUE(ok(store->verify()).empty());
  auto g = ok(store->getKernel(good.key, &problem));
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->cubin, good.cubin);

  // A blob replaced wholesale (another length) is caught the same way.
  rawSql(path, "UPDATE kernels SET cubin = x'deadbeef' WHERE key = '" + good.key + "'");
  EXPECT_EQ(ok(store->verify()).size(), 1u);
  EXPECT_FALSE(ok(store->getKernel(good.key, &problem)).has_value());
  EXPECT_NE(problem.find(good.key), std::string::npos);
}

//===----------------------------------------------------------------------===//
// Bad files
//===----------------------------------------------------------------------===//

TEST_F(StoreTest, RandomBytesAreMovedAside) {
  std::string path = file("random.db");
  std::string bytes = randomBytes(8192, 1);
  writeFile(path, bytes);
  writeFile(path + "-wal", "junk wal");
  expectMovedAside(path, bytes);
  auto aside = filesStartingWith(dir, "random.db.corrupt-");
  ASSERT_FALSE(aside.empty());
  EXPECT_EQ(readFile(aside.front() + "-wal"), "junk wal") << "the -wal file goes along";
}

TEST_F(StoreTest, TextFilesAreMovedAside) {
  std::string path = file("text.db");
  std::string text;
  for (int i = 0; i < 20; ++i)
    text += "this is a text file, not a database\n";
  writeFile(path, text);
  expectMovedAside(path, text);
  std::string shortPath = file("short.db");
  writeFile(shortPath, "hello\n");
  expectMovedAside(shortPath, "hello\n");
}

TEST_F(StoreTest, TruncatedStoreIsMovedAside) {
  std::string path = file("truncated.db");
  {
    auto store = openStore(path);
    ASSERT_TRUE(store);
    for (int i = 0; i < 8; ++i)
      ASSERT_OK(store->putKernel(makeKernel("k" + std::to_string(i), 60000)));
  }
  ASSERT_FALSE(fs::exists(path + "-wal")) << "closing checkpoints the WAL";
  std::string bytes = readFile(path);
  ASSERT_GT(bytes.size(), 400000u);
  bytes.resize(bytes.size() / 2);
  writeFile(path, bytes);
  expectMovedAside(path, bytes);
}

TEST_F(StoreTest, SqliteHeaderWithGarbageIsMovedAside) {
  std::string path = file("garbage.db");
  {
    auto store = openStore(path);
    ASSERT_TRUE(store);
    ASSERT_OK(store->putKernel(makeKernel("k", 30000)));
  }
  std::string bytes = readFile(path);
  std::string garbled = bytes.substr(0, 100) + randomBytes(bytes.size() - 100, 2);
  writeFile(path, garbled);
  expectMovedAside(path, garbled);
}

TEST_F(StoreTest, ForeignDatabaseIsMovedAside) {
  std::string path = file("foreign.db");
  rawSql(path, "CREATE TABLE accounts (id INTEGER PRIMARY KEY, owner TEXT); "
               "INSERT INTO accounts (owner) VALUES ('alice');");
  std::string bytes = readFile(path);
  expectMovedAside(path, bytes);
  auto aside = filesStartingWith(dir, "foreign.db.corrupt-");
  ASSERT_FALSE(aside.empty());
  EXPECT_EQ(rawInt(aside.front(), "SELECT count(*) FROM accounts"), 1) << "kept intact";
}

TEST_F(StoreTest, OtherApplicationIdIsMovedAside) {
  // Another application that also versions its schema with user_version.
  std::string path = file("otherapp.db");
  rawSql(path, "PRAGMA application_id = 1234; PRAGMA user_version = 1; "
               "CREATE TABLE kernels (x);");
  std::string bytes = readFile(path);
  expectMovedAside(path, bytes);
}

TEST_F(StoreTest, NewerSchemaIsAnErrorAndLeavesTheFileAlone) {
  std::string path = file("newer.db");
  {
    auto store = openStore(path);
    ASSERT_TRUE(store);
    ASSERT_OK(store->putKernel(makeKernel("k")));
  }
  rawSql(path, "PRAGMA user_version = 99");
  ASSERT_FALSE(fs::exists(path + "-wal"));
  std::string bytes = readFile(path);
  auto before = filesStartingWith(dir, "");
  std::string notice;
  auto store = Store::open(path, &notice);
  ASSERT_FALSE(bool(store));
  std::string msg = toString(store.takeError());
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("99"), std::string::npos) << msg;
  EXPECT_NE(msg.find("newer"), std::string::npos) << msg;
  EXPECT_EQ(notice, "");
  EXPECT_EQ(readFile(path), bytes);
  EXPECT_EQ(filesStartingWith(dir, ""), before) << "no file created, moved or removed";
}

TEST_F(StoreTest, NotCorruptionIsNotMovedAside) {
  // A directory where the file should be: an error, and nothing is renamed.
  std::string path = file("adir.db");
  fs::create_directory(path);
  auto store = Store::open(path);
  ASSERT_FALSE(bool(store));
  EXPECT_NE(toString(store.takeError()).find(path), std::string::npos);
  EXPECT_TRUE(fs::is_directory(path));
  EXPECT_TRUE(filesStartingWith(dir, "adir.db.corrupt-").empty());
  if (geteuid() != 0) {
    std::string locked = file("locked.db");
    { ASSERT_TRUE(openStore(locked)); }
    fs::permissions(locked, fs::perms::none);
    auto s = Store::open(locked);
    EXPECT_FALSE(bool(s));
    if (!s)
      llvm::consumeError(s.takeError());
    EXPECT_TRUE(filesStartingWith(dir, "locked.db.corrupt-").empty());
    fs::permissions(locked, fs::perms::owner_read | fs::perms::owner_write);
  }
}

TEST_F(StoreTest, ALockIsNotCorruption) {
  // A store in rollback-journal mode, held under an exclusive lock by another
  // connection: open() must wait, then fail, and never move the file aside.
  std::string path = file("busy.db");
  {
    auto store = openStore(path);
    ASSERT_TRUE(store);
    ASSERT_OK(store->putKernel(makeKernel("k")));
  }
  rawSql(path, "PRAGMA journal_mode = DELETE");
  sqlite3 *holder = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &holder), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(holder, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr), SQLITE_OK);
  std::string notice;
  auto store = Store::open(path, &notice, /*busyTimeoutMs=*/300);
  ASSERT_FALSE(bool(store));
  std::string msg = toString(store.takeError());
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("locked"), std::string::npos) << msg;
  EXPECT_EQ(notice, "");
  EXPECT_TRUE(filesStartingWith(dir, "busy.db.corrupt-").empty());
  // open() waits out a lock that is let go within its busy timeout: the lock
  // is held when it starts and released by another thread a little later
  // (without the timeout it fails at once).
  std::thread release([holder] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    sqlite3_exec(holder, "COMMIT", nullptr, nullptr, nullptr);
  });
  // (Opened as made, in rollback mode: no notice about the journal either.)
  auto waited = Store::open(path, &notice, /*busyTimeoutMs=*/120000, JournalMode::Rollback);
  release.join();
  ASSERT_TRUE(bool(waited)) << toString(waited.takeError());
  EXPECT_EQ(notice, "");
  EXPECT_TRUE(ok((*waited)->getKernel(sha256Hex("k"))).has_value());
  waited->reset();
  sqlite3_close(holder);
  auto again = Store::open(path, &notice, Store::kDefaultBusyTimeoutMs, JournalMode::Rollback);
  ASSERT_TRUE(bool(again)) << toString(again.takeError());
  EXPECT_EQ(notice, "");
  EXPECT_TRUE(ok((*again)->getKernel(sha256Hex("k"))).has_value());
}

//===----------------------------------------------------------------------===//
// Schema
//===----------------------------------------------------------------------===//

TEST_F(StoreTest, MigratesAnEmptyVersionZeroDatabase) {
  EXPECT_EQ(Store::knownSchemaVersion(), 1);
  std::string path = file("v0.db");
  rawSql(path, "CREATE TABLE t (x); DROP TABLE t;");
  ASSERT_GT(fs::file_size(path), 0u);
  ASSERT_EQ(rawInt(path, "PRAGMA user_version"), 0);
  std::string notice;
  {
    auto store = openStore(path, &notice);
    ASSERT_TRUE(store);
    EXPECT_EQ(notice, "");
    EXPECT_EQ(store->schemaVersion(), 1);
    ASSERT_OK(store->putKernel(makeKernel("k")));
  }
  EXPECT_TRUE(filesStartingWith(dir, "v0.db.corrupt-").empty());
  EXPECT_EQ(rawInt(path, "PRAGMA user_version"), 1);
  EXPECT_EQ(rawInt(path, "PRAGMA application_id"), 0x544a4954);
  EXPECT_EQ(rawInt(path, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN "
                         "('kernels', 'timings', 'winners', 'failures')"),
            4);
  std::string header = readFile(path).substr(0, 20);
  EXPECT_EQ(header[18], 2) << "WAL mode is recorded in the file";
  // Reopening a current store changes nothing.
  auto again = openStore(path, &notice);
  ASSERT_TRUE(again);
  EXPECT_EQ(notice, "");
  EXPECT_TRUE(ok(again->getKernel(sha256Hex("k"))).has_value());

  // A zero-byte file is a new database too.
  std::string empty = file("empty.db");
  writeFile(empty, "");
  auto fresh = openStore(empty, &notice);
  ASSERT_TRUE(fresh);
  EXPECT_EQ(notice, "");
  EXPECT_EQ(fresh->schemaVersion(), 1);
}

TEST_F(StoreTest, ASchemaVersionWithoutTheTablesIsMovedAside) {
  // Ours by its application id and version, but without (all of) the tables:
  // nothing tilejit wrote, or a schema broken by hand. Not migrated over.
  for (const char *tables : {"", "CREATE TABLE kernels (x); CREATE TABLE timings (x);"}) {
    SCOPED_TRACE(tables);
    std::string path = file(*tables ? "partial.db" : "bare.db");
    rawSql(path, "PRAGMA application_id = 1414154580; PRAGMA user_version = 1; " +
                     std::string(tables) + "CREATE TABLE notes (x);");
    std::string bytes = readFile(path);
    std::string notice;
    auto store = openStore(path, &notice);
    ASSERT_TRUE(store);
    EXPECT_NE(notice.find("has schema version 1 but lacks the tilejit tables"), std::string::npos)
        << notice;
    EXPECT_NE(notice.find("winners; failures;"), std::string::npos) << notice;
    // Only the missing tables are named.
    EXPECT_EQ(notice.find("kernels") != std::string::npos, *tables == 0) << notice;
    EXPECT_EQ(notice.find("timings") != std::string::npos, *tables == 0) << notice;
    auto aside = filesStartingWith(dir, fs::path(path).filename().string() + ".corrupt-");
    ASSERT_EQ(aside.size(), 1u);
    EXPECT_EQ(readFile(aside.front()), bytes);
    EXPECT_EQ(store->schemaVersion(), Store::knownSchemaVersion());
    ASSERT_OK(store->putKernel(makeKernel("fresh")));
  }
}

// Another process migrates a new file while this one opens it: this one read
// version 0 before the other committed, waits for the write lock, finds the
// schema made and does not run the migration again (which would fail on the
// tables that exist).
TEST_F(StoreTest, AnotherProcessMigratingFirstIsNotMigratedAgain) {
  ::setenv("TILEJIT_STORE_JOURNAL", "wal", 1); // readers do not wait for the writer
  std::string schemaOf = file("schema.db");
  ASSERT_TRUE(openStore(schemaOf));
  std::vector<std::string> ddl;
  {
    sqlite3 *db = nullptr;
    ASSERT_EQ(sqlite3_open(schemaOf.c_str(), &db), SQLITE_OK);
    sqlite3_stmt *st = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL", -1, &st,
                                 nullptr),
              SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW)
      ddl.push_back(reinterpret_cast<const char *>(sqlite3_column_text(st, 0)));
    sqlite3_finalize(st);
    sqlite3_close(db);
  }
  ASSERT_GE(ddl.size(), 4u);

  std::string path = file("racing.db");
  rawSql(path, "PRAGMA journal_mode = WAL");
  ASSERT_EQ(rawInt(path, "PRAGMA user_version"), 0);
  sqlite3 *other = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &other), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
  for (const std::string &sql : ddl)
    ASSERT_EQ(sqlite3_exec(other, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK) << sql;
  ASSERT_EQ(sqlite3_exec(other,
                         "PRAGMA user_version = 1; PRAGMA application_id = 1414154580; "
                         "INSERT INTO timings (tune_key, config, median_ms, p20_ms, p80_ms, reps, "
                         "gpu, sm_count, driver_version, sm_clock_mhz, mem_clock_mhz, created_at) "
                         "VALUES ('tk', 'c', 1, 1, 1, 1, 'g', 1, 1, 1, 1, 1)",
                         nullptr, nullptr, nullptr),
            SQLITE_OK)
      << sqlite3_errmsg(other);
  // The other process commits a moment after this one has started to open.
  std::thread commit([other] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    sqlite3_exec(other, "COMMIT", nullptr, nullptr, nullptr);
  });
  std::string notice;
  auto store = Store::open(path, &notice, /*busyTimeoutMs=*/120000);
  commit.join();
  sqlite3_close(other);
  ::unsetenv("TILEJIT_STORE_JOURNAL");
  ASSERT_TRUE(bool(store)) << toString(store.takeError());
  EXPECT_EQ(notice, "");
  EXPECT_EQ((*store)->schemaVersion(), 1);
  EXPECT_EQ(ok((*store)->timings("tk")).size(), 1u) << "the other process's row is kept";
  ASSERT_OK((*store)->putKernel(makeKernel("k")));
  EXPECT_TRUE(ok((*store)->verify()).empty());
}

TEST_F(StoreTest, JournalModeFollowsTheFileSystemAndTheEnvironment) {
  FileSystemInfo here = fileSystemOf(dir);
  EXPECT_FALSE(here.name.empty());
  EXPECT_EQ(fileSystemOf(dir + "/not/yet/made.db").name, here.name) << "the nearest parent counts";
  std::string path = file("journal.db");
  {
    auto store = openStore(path);
    ASSERT_TRUE(store);
    EXPECT_EQ(store->journalMode(), here.network ? "delete" : "wal") << here.name;
  }
  if (!here.network) {
    // An existing store keeps its mode whatever this process is set for, and
    // says so.
    std::string notice;
    auto store = Store::open(path, &notice, 2000, JournalMode::Rollback);
    ASSERT_TRUE(bool(store)) << llvm::toString(store.takeError());
    EXPECT_EQ((*store)->journalMode(), "wal");
    EXPECT_NE(notice.find("kept in WAL mode"), std::string::npos) << notice;
  }
  {
    // A new store takes the mode asked for.
    std::string rollback = file("rollback.db");
    auto store = Store::open(rollback, nullptr, 2000, JournalMode::Rollback);
    ASSERT_TRUE(bool(store)) << llvm::toString(store.takeError());
    EXPECT_EQ((*store)->journalMode(), "delete");
    ASSERT_OK((*store)->putKernel(makeKernel("rollback")));
    EXPECT_FALSE(fs::exists(rollback + "-wal"));
    EXPECT_FALSE(fs::exists(rollback + "-shm"));
    EXPECT_EQ(readFile(rollback)[18], 1) << "rollback mode is recorded in the file";
    ::setenv("TILEJIT_STORE_JOURNAL", "wal", 1);
    std::string notice;
    auto again = Store::open(rollback, &notice);
    ::unsetenv("TILEJIT_STORE_JOURNAL");
    ASSERT_TRUE(bool(again)) << llvm::toString(again.takeError());
    EXPECT_EQ((*again)->journalMode(), "delete");
    EXPECT_NE(notice.find("kept in rollback-journal mode"), std::string::npos) << notice;
    EXPECT_TRUE(ok((*again)->getKernel(sha256Hex("rollback"))).has_value());
  }
  ::setenv("TILEJIT_STORE_JOURNAL", "sometimes", 1);
  auto bad = Store::open(path);
  ::unsetenv("TILEJIT_STORE_JOURNAL");
  ASSERT_FALSE(bool(bad));
  EXPECT_NE(llvm::toString(bad.takeError()).find("TILEJIT_STORE_JOURNAL='sometimes'"),
            std::string::npos);
}

TEST_F(StoreTest, ProcessesSetForDifferentJournalsShareOneFile) {
  // One process has the store open in WAL mode; another, set for a rollback
  // journal, used to wait out its busy timeout trying to switch the file and
  // fail with "database is locked". It follows the file's mode instead.
  if (fileSystemOf(dir).network)
    GTEST_SKIP() << "WAL is not kept on a network file system";
  std::string path = file("shared.db");
  auto wal = Store::open(path, nullptr, 300, JournalMode::Wal);
  ASSERT_TRUE(bool(wal)) << llvm::toString(wal.takeError());
  ASSERT_OK((*wal)->putKernel(makeKernel("from-wal")));
  auto start = std::chrono::steady_clock::now();
  std::string notice;
  auto rollback = Store::open(path, &notice, 300, JournalMode::Rollback);
  ASSERT_TRUE(bool(rollback)) << llvm::toString(rollback.takeError());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(250));
  EXPECT_EQ((*rollback)->journalMode(), "wal");
  EXPECT_NE(notice.find("kept in WAL mode"), std::string::npos) << notice;
  ASSERT_OK((*rollback)->putKernel(makeKernel("from-rollback")));
  EXPECT_TRUE(ok((*wal)->getKernel(sha256Hex("from-rollback"))).has_value());
  EXPECT_TRUE(ok((*rollback)->getKernel(sha256Hex("from-wal"))).has_value());
}

/// Runs `body` in a child process; returns its exit status, 128 + signal if
/// it was killed.
int inChild(const std::function<int()> &body) {
  pid_t pid = fork();
  if (pid == 0)
    _exit(body());
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/// From here on this process writes at most `maxBytes` to any file, as on a
/// full disk: writes past it fail with EFBIG, or with `killedByLimit` the
/// process is killed by SIGXFSZ, as by a kill in mid-write.
void limitFileSize(rlim_t maxBytes, bool killedByLimit) {
  signal(SIGXFSZ, killedByLimit ? SIG_DFL : SIG_IGN);
  struct rlimit lim = {maxBytes, maxBytes};
  setrlimit(RLIMIT_FSIZE, &lim);
}

TEST_F(StoreTest, ANewStoreThatCannotBeWrittenLeavesNoFile) {
  std::string path = file("sub/dir/new.db");
  int rc = inChild([&] {
    limitFileSize(0, false);
    auto store = Store::open(path);
    if (store)
      return 0;
    std::string msg = toString(store.takeError());
    return msg.find("cannot create it") != std::string::npos ? 3 : 4;
  });
  EXPECT_EQ(rc, 3) << "the open fails with a message naming the cause";
  EXPECT_FALSE(fs::exists(path)) << "no empty store is left to be mistaken for a cache";
  EXPECT_FALSE(fs::exists(file("sub"))) << "nor the directories made for it";
  EXPECT_EQ(filesStartingWith(dir, "").size(), 0u);
}

TEST_F(StoreTest, AKilledExportLeavesNoFile) {
  {
    auto store = openStore(file("a.db"));
    ASSERT_TRUE(store);
    fill(*store, "a", 1000);
  }
  // Each child opens the store itself: a connection does not cross a fork.
  auto exportIn = [&](const std::string &path, bool killedByLimit) {
    auto store = Store::open(file("a.db"));
    if (!store) {
      llvm::consumeError(store.takeError());
      return 2;
    }
    limitFileSize(8192, killedByLimit);
    llvm::Error e = (*store)->exportTo(path);
    bool failed = bool(e);
    llvm::consumeError(std::move(e));
    return failed ? 3 : 0;
  };
  std::string path = file("export.db");
  int rc = inChild([&] { return exportIn(path, true); });
  EXPECT_EQ(rc, 128 + SIGXFSZ);
  EXPECT_FALSE(fs::exists(path)) << "a partial copy would open as an empty store";
  for (const std::string &left : filesStartingWith(dir, "export.db")) // the killed copy's
    fs::remove(left);
  rc = inChild([&] { return exportIn(path, false); });
  EXPECT_EQ(rc, 3);
  EXPECT_FALSE(fs::exists(path));
  EXPECT_TRUE(filesStartingWith(dir, "export.db").empty()) << "a failed export cleans up";
}

TEST_F(StoreTest, PathsThatCannotBeAStoreFailAtOnce) {
  std::string fifo = file("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  auto expectError = [&](llvm::Error e, const std::string &needle) {
    ASSERT_TRUE(bool(e));
    std::string msg = toString(std::move(e));
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  };
  // Each would wait forever for a writer if the FIFO were opened.
  expectError(Store::open(fifo).takeError(), "is a FIFO");
  expectError(Store::openForReading(fifo).takeError(), "is a FIFO");
  auto store = openStore(":memory:");
  ASSERT_TRUE(store);
  expectError(store->importFrom(fifo).takeError(), "is a FIFO");
  expectError(Store::open(dir).takeError(), "is a directory");
  expectError(Store::open(file("x/")).takeError(), "names a directory");
  EXPECT_FALSE(fs::exists(file("x")));
  std::string longName = file(std::string(300, 'a') + "/x.db");
  expectError(Store::open(longName).takeError(), "File name too long");
  expectError(Store::openForReading(longName).takeError(), "File name too long");
}

TEST_F(StoreTest, ReadingChangesNothingOnDisk) {
  // No file: no store, and nothing made.
  auto none = Store::openForReading(file("missing/x.db"));
  ASSERT_TRUE(bool(none)) << llvm::toString(none.takeError());
  EXPECT_EQ(none->get(), nullptr);
  EXPECT_FALSE(fs::exists(file("missing")));

  // Another application's database: reported, not moved aside.
  std::string foreign = file("foreign.db");
  rawSql(foreign, "CREATE TABLE accounts (id INTEGER PRIMARY KEY)");
  std::string before = readFile(foreign);
  auto refused = Store::openForReading(foreign);
  ASSERT_FALSE(bool(refused));
  std::string msg = toString(refused.takeError());
  EXPECT_NE(msg.find("nothing was changed"), std::string::npos) << msg;
  EXPECT_EQ(readFile(foreign), before);
  EXPECT_TRUE(filesStartingWith(dir, "foreign.db.").empty());

  // An export (rollback journal) stays one file in its mode, and a kernel
  // with a bad hash is reported, not deleted.
  std::string exported = file("export.db");
  {
    auto s = openStore(file("a.db"));
    ASSERT_TRUE(s);
    fill(*s, "a", 1000);
    ASSERT_OK(s->exportTo(exported));
  }
  rawSql(exported, "UPDATE kernels SET cubin = zeroblob(10) WHERE key = '" + sha256Hex("a1") + "'");
  before = readFile(exported);
  {
    auto s = Store::openForReading(exported);
    ASSERT_TRUE(bool(s)) << llvm::toString(s.takeError());
    ASSERT_NE(s->get(), nullptr);
    EXPECT_EQ((*s)->journalMode(), "delete");
    EXPECT_EQ(ok((*s)->list()).size(), 3u + 2u);
    std::string problem;
    EXPECT_FALSE(ok((*s)->getKernel(sha256Hex("a1"), &problem)).has_value());
    EXPECT_NE(problem.find("SHA-256"), std::string::npos) << problem;
    EXPECT_TRUE(ok((*s)->getKernel(sha256Hex("a0"))).has_value());
    EXPECT_EQ(ok((*s)->verify()).size(), 1u);
    llvm::Error w = (*s)->putKernel(makeKernel("no"));
    EXPECT_TRUE(bool(w)) << "a store opened for reading takes no writes";
    llvm::consumeError(std::move(w));
  }
  EXPECT_EQ(readFile(exported), before);
  EXPECT_FALSE(fs::exists(exported + "-wal"));
  EXPECT_FALSE(fs::exists(exported + "-journal"));
  EXPECT_EQ(rawInt(exported, "SELECT count(*) FROM kernels"), 3);
}

TEST_F(StoreTest, VerifyChecksThatABinaryIsACubinForItsArch) {
  auto store = openStore(":memory:");
  ASSERT_TRUE(store);
  StoredKernel forged = makeKernel("forged");
  forged.cubin = {char(0xde), char(0xad), char(0xbe), char(0xef)};
  ASSERT_OK(store->putKernel(forged)); // its hash is right: it is the hash of what was stored
  StoredKernel otherArch = makeKernel("sm80");
  otherArch.arch = "sm_80";
  ASSERT_OK(store->putKernel(otherArch));
  ASSERT_OK(store->putKernel(makeKernel("good")));
  auto problems = ok(store->verify());
  ASSERT_EQ(problems.size(), 2u);
  std::string all = problems[0] + "\n" + problems[1];
  EXPECT_NE(all.find("kernel " + forged.key + ": its binary is not an ELF file"), std::string::npos)
      << all;
  EXPECT_NE(
      all.find("kernel " + otherArch.key + ": its binary is a cubin for sm_90, not for sm_80"),
      std::string::npos)
      << all;
}

TEST_F(StoreTest, CreatesTheParentDirectory) {
  std::string path = file("a/b/c/store.db");
  auto store = openStore(path);
  ASSERT_TRUE(store);
  EXPECT_EQ(store->path(), path);
  EXPECT_TRUE(fs::exists(path));
}

//===----------------------------------------------------------------------===//
// Maintenance
//===----------------------------------------------------------------------===//

TEST_F(StoreTest, PruneDeletesOnlyOlderRows) {
  auto store = openStore(file("prune.db"));
  ASSERT_TRUE(store);
  StoredKernel oldK = makeKernel("old", 1000, 1000), newK = makeKernel("new", 1000, 3000);
  ASSERT_OK(store->putKernel(oldK));
  ASSERT_OK(store->putKernel(newK));
  ASSERT_OK(store->addTiming(makeTiming("tk", "old", 1, 1000)));
  ASSERT_OK(store->addTiming(makeTiming("tk", "new", 1, 3000)));
  ASSERT_OK(store->addTiming(makeTiming("tk", "edge", 1, 2000))); // not older: kept
  ASSERT_OK(store->addFailure({"tk", "old", "compile", "x", 1000}));
  ASSERT_OK(store->addFailure({"tk", "new", "compile", "x", 3000}));
  ASSERT_OK(store->setWinner({"old-tk", "c", oldK.key, 1, "", 1000}));
  ASSERT_OK(store->setWinner({"new-tk", "c", oldK.key, 1, "", 3000}));
  EXPECT_EQ(ok(store->pruneOlderThan(2000)), 4);
  EXPECT_FALSE(ok(store->getKernel(oldK.key)).has_value());
  EXPECT_TRUE(ok(store->getKernel(newK.key)).has_value());
  auto ts = ok(store->timings("tk"));
  ASSERT_EQ(ts.size(), 2u);
  EXPECT_EQ(ts[0].config, "new");
  EXPECT_EQ(ts[1].config, "edge");
  EXPECT_FALSE(ok(store->isKnownBad("tk", "old")));
  EXPECT_TRUE(ok(store->isKnownBad("tk", "new")));
  EXPECT_FALSE(ok(store->winner("old-tk")).has_value());
  auto w = ok(store->winner("new-tk"));
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->kernelKey, "") << "its kernel was pruned";
  EXPECT_TRUE(ok(store->verify()).empty());
  EXPECT_EQ(ok(store->pruneOlderThan(2000)), 0);
}

/// A store with one of each record, its kernels made `base` seconds after 0.
void fill(Store &s, const std::string &tag, int64_t base) {
  for (int i = 0; i < 3; ++i)
    ASSERT_OK(s.putKernel(makeKernel(tag + std::to_string(i), 3000 + 5000 * i, base + i)));
  ASSERT_OK(s.addTiming(makeTiming("tk1", "c1", 1.0, base)));
  ASSERT_OK(s.addTiming(makeTiming("tk1", "c2", 2.0, base)));
  ASSERT_OK(s.addTiming(makeTiming("tk1", "c1", 1.1, base + 1)));
  ASSERT_OK(s.addTiming(makeTiming("tk2", "c1", 3.0, base)));
  ASSERT_OK(s.addFailure({"tk1", "c3", "compile", tag + " failed", base}));
  ASSERT_OK(s.addFailure({"tk2", "c3", "verify", tag + " wrong", base}));
  ASSERT_OK(s.setWinner({"tk1", "c1", sha256Hex(tag + "0"), 1.0, tag + " won", base}));
  ASSERT_OK(s.setWinner({"tk2", "c1", "", 3.0, tag + " won", base}));
}

TEST_F(StoreTest, ExportImportRoundTrip) {
  const ImportOptions trusted = ImportOptions::trustAll();
  std::string exported = file("out/export.db");
  const std::vector<std::string> keys = {"tk1", "tk2"};
  auto a = openStore(file("a.db"));
  ASSERT_TRUE(a);
  fill(*a, "a", 2000);
  ASSERT_OK(a->exportTo(exported));
  EXPECT_FALSE(fs::exists(exported + "-wal"));
  EXPECT_EQ(readFile(exported).substr(18, 2), std::string("\x01\x01", 2))
      << "an export is one file with a rollback journal";

  // Never overwrite.
  std::string bytes = readFile(exported);
  llvm::Error e = a->exportTo(exported);
  ASSERT_TRUE(bool(e));
  std::string msg = toString(std::move(e));
  EXPECT_NE(msg.find(exported), std::string::npos) << msg;
  EXPECT_NE(msg.find("exists"), std::string::npos) << msg;
  EXPECT_EQ(readFile(exported), bytes);

  auto b = openStore(file("b.db"));
  ASSERT_TRUE(b);
  EXPECT_EQ(ok(b->importFrom(exported, trusted)), 3 + 4 + 2 + 2);
  EXPECT_EQ(dump(*b, keys), dump(*a, keys));
  EXPECT_TRUE(ok(b->verify()).empty());
  // Again: nothing new, no duplicated timings.
  EXPECT_EQ(ok(b->importFrom(exported, trusted)), 0);
  EXPECT_EQ(dump(*b, keys), dump(*a, keys));
  EXPECT_EQ(readFile(exported), bytes) << "import opens its source read-only";

  // A live store (WAL mode, open in this process) imports as well.
  EXPECT_EQ(ok(b->importFrom(file("a.db"), trusted)), 0);
  auto e2 = openStore(":memory:");
  ASSERT_TRUE(e2);
  EXPECT_EQ(ok(e2->importFrom(file("a.db"), trusted)), 3 + 4 + 2 + 2);
  EXPECT_EQ(dump(*e2, keys), dump(*a, keys));

  // Winners and failures are replaced only by newer ones.
  auto c = openStore(":memory:");
  ASSERT_TRUE(c);
  ASSERT_OK(c->setWinner({"tk1", "mine", "", 0.5, "c won later", 9000}));
  ASSERT_OK(c->setWinner({"tk2", "mine", "", 0.5, "c won earlier", 10}));
  ASSERT_OK(c->addFailure({"tk1", "c3", "launch", "c newer", 9000}));
  ASSERT_OK(c->addFailure({"tk2", "c3", "launch", "c older", 10}));
  ASSERT_OK(c->addTiming(makeTiming("tk1", "c1", 1.0, 2000))); // identical to one of a's
  EXPECT_EQ(ok(c->importFrom(exported, trusted)), 3 + 3 + 1 + 1);
  EXPECT_EQ(ok(c->winner("tk1"))->config, "mine");
  EXPECT_EQ(ok(c->winner("tk2"))->reason, "a won");
  EXPECT_EQ(ok(c->failures("tk1"))[0].reason, "c newer");
  EXPECT_EQ(ok(c->failures("tk2"))[0].reason, "a wrong");
  EXPECT_EQ(ok(c->timings("tk1")).size(), 3u);

  // An in-memory store exports too.
  std::string fromMemory = file("memory-export.db");
  ASSERT_OK(c->exportTo(fromMemory));
  auto d = openStore(fromMemory);
  ASSERT_TRUE(d);
  EXPECT_EQ(dump(*d, keys), dump(*c, keys));
}

// The same copy made and read in memory (what the server sends and takes):
// the bytes of a one-file store, nothing written beside the store.
TEST_F(StoreTest, ExportImageImportImageRoundTrip) {
  const ImportOptions trusted = ImportOptions::trustAll();
  const std::vector<std::string> keys = {"tk1", "tk2"};
  auto a = openStore(file("a.db"));
  ASSERT_TRUE(a);
  fill(*a, "a", 2000);
  auto before = std::distance(fs::directory_iterator(dir), fs::directory_iterator());
  std::string image = ok(a->exportImage());
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), before)
      << "an image is made in memory";
  ASSERT_GE(image.size(), 100u);
  EXPECT_EQ(image.substr(0, 16), std::string("SQLite format 3\0", 16));
  EXPECT_EQ(image.substr(18, 2), std::string("\x01\x01", 2))
      << "a WAL store's image is a one-file store with a rollback journal";

  auto b = openStore(":memory:");
  ASSERT_TRUE(b);
  EXPECT_EQ(ok(b->importImage(image, "the image", trusted)), 3 + 4 + 2 + 2);
  EXPECT_EQ(dump(*b, keys), dump(*a, keys));
  EXPECT_TRUE(ok(b->verify()).empty());

  // The image as a file: what `tilejit cache import` reads.
  std::string path = file("out/image.db");
  ASSERT_OK(Store::writeImage(image, path));
  EXPECT_EQ(readFile(path), image);
  llvm::Error again = Store::writeImage(image, path);
  ASSERT_TRUE(bool(again));
  EXPECT_NE(toString(std::move(again)).find("exists"), std::string::npos);
  auto c = openStore(":memory:");
  ASSERT_TRUE(c);
  EXPECT_EQ(ok(c->importFrom(path, trusted)), 3 + 4 + 2 + 2);
  // Bytes that are no store are not written as one.
  llvm::Error junk = Store::writeImage(std::string(4096, 'x'), file("junk.db"));
  ASSERT_TRUE(bool(junk));
  llvm::consumeError(std::move(junk));
  EXPECT_FALSE(fs::exists(file("junk.db")));
}

// checkRow sees every row before anything is written; one error refuses
// the whole import, named by table and row, and marked as a rejection.
TEST_F(StoreTest, ImportImageRejectedByCheckRowWritesNothing) {
  const std::vector<std::string> keys = {"tk1", "tk2"};
  auto a = openStore(":memory:");
  ASSERT_TRUE(a);
  fill(*a, "a", 2000);
  std::string image = ok(a->exportImage());
  auto b = openStore(":memory:");
  ASSERT_TRUE(b);
  fill(*b, "b", 5000);
  std::string before = dump(*b, keys);

  ImportOptions options = ImportOptions::trustAll();
  std::vector<std::string> seen;
  options.checkRow = [&](const ImportedRow &row) -> llvm::Error {
    seen.push_back(row.table);
    if (row.table == "winners" && row.tuneKey == "tk2")
      return llvm::createStringError(llvm::inconvertibleErrorCode(), "config: not liked");
    return llvm::Error::success();
  };
  auto n = b->importImage(image, "the image", options);
  ASSERT_FALSE(bool(n));
  bool rejection = false;
  std::string msg;
  llvm::handleAllErrors(n.takeError(), [&](const llvm::ErrorInfoBase &e) {
    rejection = isImportRejection(e);
    msg = e.message();
  });
  EXPECT_TRUE(rejection) << msg;
  EXPECT_NE(msg.find("the image: winners row 2: config: not liked"), std::string::npos) << msg;
  EXPECT_EQ(dump(*b, keys), before);
  EXPECT_NE(std::find(seen.begin(), seen.end(), "timings"), seen.end());

  // Bytes that are not a store: refused as such, not as a failure here.
  auto junk = b->importImage(std::string(5000, '\x07'), "junk", options);
  ASSERT_FALSE(bool(junk));
  llvm::handleAllErrors(junk.takeError(), [&](const llvm::ErrorInfoBase &e) {
    EXPECT_TRUE(isImportRejection(e)) << e.message();
    EXPECT_NE(e.message().find("junk"), std::string::npos) << e.message();
  });
  EXPECT_EQ(dump(*b, keys), before);
}

// A file whose "timings" is a view (any query its author chose, run by the
// import's reads) is refused before a row is read.
TEST_F(StoreTest, ImportRefusesAViewInPlaceOfATable) {
  auto a = openStore(file("a.db"));
  ASSERT_TRUE(a);
  fill(*a, "a", 2000);
  std::string exported = file("view.db");
  ASSERT_OK(a->exportTo(exported));
  {
    sqlite3 *raw = nullptr;
    ASSERT_EQ(sqlite3_open(exported.c_str(), &raw), SQLITE_OK);
    const char *sql =
        "DROP TABLE timings; CREATE VIEW timings (id, tune_key, config, median_ms, p20_ms, "
        "p80_ms, reps, gpu, sm_count, driver_version, sm_clock_mhz, mem_clock_mhz, created_at) "
        "AS WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5) "
        "SELECT i, 'tk9', 'c' || i, 1.0, 1.0, 1.0, 1, 'gpu', 1, 1, 1, 1, 1 FROM n;";
    char *err = nullptr;
    int rc = sqlite3_exec(raw, sql, nullptr, nullptr, &err);
    EXPECT_EQ(rc, SQLITE_OK) << (err ? err : "");
    sqlite3_free(err);
    sqlite3_close(raw);
  }
  auto b = openStore(":memory:");
  ASSERT_TRUE(b);
  auto n = b->importFrom(exported, ImportOptions::trustAll());
  ASSERT_FALSE(bool(n));
  std::string msg = toString(n.takeError());
  EXPECT_NE(msg.find("timings is a view, not a table; nothing imported"), std::string::npos) << msg;
  EXPECT_TRUE(ok(b->timings("tk9")).empty());
}

TEST_F(StoreTest, ImportOfABadFileLeavesTheStoreUnchanged) {
  const std::vector<std::string> keys = {"tk1", "tk2"};
  auto b = openStore(file("b.db"));
  ASSERT_TRUE(b);
  fill(*b, "b", 5000);
  std::string before = dump(*b, keys);

  auto expectFails = [&](const std::string &path, const std::string &needle) {
    std::string srcBytes = fs::exists(path) ? readFile(path) : "";
    auto n = b->importFrom(path);
    ASSERT_FALSE(bool(n)) << path;
    std::string msg = toString(n.takeError());
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    EXPECT_EQ(dump(*b, keys), before);
    if (fs::exists(path)) {
      EXPECT_EQ(readFile(path), srcBytes) << "the source is not changed either";
    }
    EXPECT_TRUE(filesStartingWith(dir, fs::path(path).filename().string() + ".corrupt-").empty())
        << "import never moves a file aside";
  };

  expectFails(file("missing.db"), "no such file");
  std::string random = file("random.db");
  writeFile(random, randomBytes(8192, 3));
  expectFails(random, "not a SQLite database");
  std::string foreign = file("foreign.db");
  rawSql(foreign, "CREATE TABLE accounts (id INTEGER PRIMARY KEY)");
  expectFails(foreign, "another application");
  std::string blank = file("blank.db");
  rawSql(blank, "CREATE TABLE t (x); DROP TABLE t;");
  expectFails(blank, "not a tilejit store");

  // A real store whose last kernel is corrupt: the good ones before it must
  // not be imported either.
  std::string bad = file("badhash.db");
  {
    auto s = openStore(bad);
    ASSERT_TRUE(s);
    fill(*s, "s", 7000);
    ASSERT_OK(s->putKernel(makeKernel("s-bad", 4000, 7100)));
  }
  rawSql(bad, "UPDATE kernels SET cubin = zeroblob(4000) WHERE key = '" + sha256Hex("s-bad") +
                  "'; PRAGMA journal_mode = DELETE;");
  expectFails(bad, sha256Hex("s-bad"));

  std::string newer = file("newer.db");
  {
    auto s = openStore(newer);
    ASSERT_TRUE(s);
  }
  rawSql(newer, "PRAGMA user_version = 7");
  expectFails(newer, "newer");
}

TEST_F(StoreTest, ImportTakesOnlyTheKernelsItIsToldTo) {
  std::string src = file("src.db");
  {
    auto s = openStore(src);
    ASSERT_TRUE(s);
    fill(*s, "s", 1000);
  }
  // By default no binary: the winners keep their configs, not their kernels.
  auto b = openStore(":memory:");
  ASSERT_TRUE(b);
  ImportReport report;
  EXPECT_EQ(ok(b->importFrom(src, ImportOptions(), &report)), 4 + 2 + 2);
  EXPECT_EQ(report.kernelsLeft, 3);
  EXPECT_EQ(report.rows, 4 + 2 + 2);
  auto w = ok(b->winner("tk1"));
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->config, "c1");
  EXPECT_EQ(w->kernelKey, "") << "compiled here at first use";
  EXPECT_FALSE(ok(b->getKernel(sha256Hex("s0"))).has_value());
  EXPECT_TRUE(ok(b->verify()).empty());

  // A filter sees every kernel, whole, and its reason is reported.
  auto c = openStore(":memory:");
  ASSERT_TRUE(c);
  ImportOptions some;
  std::vector<std::string> seen;
  some.acceptKernel = [&](const StoredKernel &k, std::string &why) {
    seen.push_back(k.spec);
    EXPECT_EQ(k.cubin, payload(k.key == sha256Hex("s0")   ? "s0"
                               : k.key == sha256Hex("s1") ? "s1"
                                                          : "s2",
                               k.cubin.size()));
    if (k.key == sha256Hex("s0"))
      return true;
    why = "not s0";
    return false;
  };
  EXPECT_EQ(ok(c->importFrom(src, some, &report)), 1 + 4 + 2 + 2);
  EXPECT_EQ(seen.size(), 3u);
  EXPECT_EQ(report.kernelsLeft, 2);
  EXPECT_NE(report.firstLeft.find("not s0"), std::string::npos) << report.firstLeft;
  EXPECT_EQ(ok(c->winner("tk1"))->kernelKey, sha256Hex("s0"));
}

TEST_F(StoreTest, ImportChecksEveryColumn) {
  std::string good = file("good.db");
  {
    auto s = openStore(good);
    ASSERT_TRUE(s);
    fill(*s, "s", 1000);
  }
  rawSql(good, "PRAGMA journal_mode = DELETE");
  const std::vector<std::string> keys = {"tk1", "tk2"};
  auto b = openStore(file("b.db"));
  ASSERT_TRUE(b);
  fill(*b, "b", 5000);
  std::string before = dump(*b, keys);
  int n = 0;
  auto expectRefused = [&](const std::string &sql, const std::string &needle) {
    std::string bad = file("bad" + std::to_string(n++) + ".db");
    fs::copy_file(good, bad);
    rawSql(bad, sql);
    auto r = b->importFrom(bad, ImportOptions::trustAll());
    ASSERT_FALSE(bool(r)) << sql;
    std::string msg = toString(r.takeError());
    EXPECT_NE(msg.find(needle), std::string::npos) << sql << "\n" << msg;
    EXPECT_NE(msg.find("nothing imported"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_EQ(dump(*b, keys), before) << sql;
  };
  expectRefused("UPDATE timings SET median_ms = 'fast' WHERE rowid = 1",
                "timings row 1: median_ms is text, not a number");
  expectRefused("UPDATE timings SET reps = 1e30 WHERE rowid = 2",
                "timings row 2: reps is real, not an integer");
  expectRefused("UPDATE timings SET reps = 0", "reps = 0 is outside [1, ");
  expectRefused("UPDATE timings SET p80_ms = -1", "p80_ms = -1.000000 is outside");
  expectRefused("UPDATE timings SET p20_ms = 9e999", "p20_ms = inf is outside");
  expectRefused("UPDATE kernels SET created_at = 'yesterday'",
                "kernels row 1: created_at is text, not an integer");
  expectRefused("UPDATE kernels SET spec = x'00ff'", "spec is blob, not text");
  expectRefused("UPDATE kernels SET spec = printf('%.100000c', 'x')",
                "spec is 100000 characters long; at most 65536 are imported");
  expectRefused("UPDATE kernels SET cubin = 'text'", "cubin is text, not a blob");
  expectRefused(
      "UPDATE winners SET kernel_key = NULL; UPDATE kernels SET key = 'KEY' WHERE rowid = 2",
      "key is not 64 lower-case hex digits");
  expectRefused("UPDATE winners SET chosen_at = 1.5", "chosen_at is real, not an integer");
  expectRefused("UPDATE failures SET created_at = -5", "created_at = -5 is outside");
  // A binary beyond the limit is refused before it is read into memory.
  expectRefused("UPDATE kernels SET cubin = zeroblob(" + std::to_string(kMaxImportedCodeBytes + 1) +
                    ") WHERE rowid = 1",
                "cubin is " + std::to_string(kMaxImportedCodeBytes + 1) + " bytes; at most");
  EXPECT_EQ(ok(b->importFrom(good, ImportOptions::trustAll())), 3 + 4)
      << "the file they were made from imports (its winners and failures are older than b's)";
}

/// Stores whose rows were changed at random, in type and value: an import
/// takes each whole or refuses it whole, never crashes, and what it takes
/// passes verify.
TEST_F(StoreTest, ImportFuzz) {
  uint64_t seed = tilejit::testing::testSeed();
  SCOPED_TRACE(tilejit::testing::replayHint(seed));
  std::mt19937_64 rng(seed);
  std::string good = file("good.db");
  {
    auto s = openStore(good);
    ASSERT_TRUE(s);
    fill(*s, "s", 1000);
  }
  rawSql(good, "PRAGMA journal_mode = DELETE");
  const std::vector<std::pair<std::string, std::vector<std::string>>> tables = {
      {"kernels",
       {"key", "spec", "config", "arch", "toolchain", "launch", "workspace_bytes", "sha256",
        "created_at", "ptx", "cubin"}},
      {"timings",
       {"tune_key", "config", "median_ms", "p20_ms", "p80_ms", "reps", "gpu", "sm_count",
        "driver_version", "sm_clock_mhz", "mem_clock_mhz", "created_at"}},
      {"winners", {"tune_key", "config", "kernel_key", "median_ms", "reason", "chosen_at"}},
      {"failures", {"tune_key", "config", "stage", "reason", "created_at"}}};
  const std::string values[] = {"NULL",
                                "0",
                                "-1",
                                "1",
                                "1.5",
                                "1e30",
                                "-9e999",
                                "9e999",
                                "'fast'",
                                "''",
                                "x'00ff'",
                                "zeroblob(70)",
                                "9223372036854775807",
                                "-9223372036854775808",
                                "'compile'",
                                "printf('%.70000c', 'y')",
                                "'" + std::string(64, 'a') + "'",
                                "char(27) || '[2J'"};
  auto start = std::chrono::steady_clock::now();
  int taken = 0, refused = 0;
  for (int i = 0; i < 200 && std::chrono::steady_clock::now() - start < std::chrono::seconds(20);
       ++i) {
    std::string bad = file("fuzz" + std::to_string(i) + ".db");
    fs::copy_file(good, bad);
    std::string sql = "PRAGMA foreign_keys = OFF;";
    for (int changes = 1 + int(rng() % 3); changes > 0; --changes) {
      const auto &[table, columns] = tables[rng() % tables.size()];
      sql += " UPDATE OR IGNORE " + table + " SET " + columns[rng() % columns.size()] + " = " +
             values[rng() % std::size(values)] + " WHERE rowid = " + std::to_string(1 + rng() % 4) +
             ";";
    }
    sqlite3 *db = nullptr;
    ASSERT_EQ(sqlite3_open(bad.c_str(), &db), SQLITE_OK);
    sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr); // a NOT NULL may refuse one
    sqlite3_close(db);
    auto b = openStore(":memory:");
    ASSERT_TRUE(b);
    auto r = b->importFrom(bad, ImportOptions::trustAll());
    if (!r) {
      ++refused;
      std::string msg = toString(r.takeError());
      EXPECT_NE(msg.find("nothing imported"), std::string::npos) << sql << "\n" << msg;
      EXPECT_TRUE(ok(b->list()).empty()) << sql;
      continue;
    }
    ++taken;
    auto problems = ok(b->verify());
    for (auto &p : problems)
      EXPECT_NE(p.find("its binary"), std::string::npos) << sql << "\n" << p;
    fs::remove(bad);
  }
  EXPECT_GT(refused, 0);
  RecordProperty("taken", taken);

  // Bytes changed at random anywhere past the header: refused whole or taken
  // whole, never a crash.
  std::string bytes = readFile(good);
  for (int i = 0; i < 100 && std::chrono::steady_clock::now() - start < std::chrono::seconds(30);
       ++i) {
    std::string bad = file("bytes" + std::to_string(i) + ".db");
    std::string changed = bytes;
    for (int n = 1 + int(rng() % 8); n > 0; --n)
      changed[100 + rng() % (changed.size() - 100)] = char(rng());
    writeFile(bad, changed);
    auto b = openStore(":memory:");
    ASSERT_TRUE(b);
    auto r = b->importFrom(bad, ImportOptions::trustAll());
    if (!r) {
      llvm::consumeError(r.takeError());
      EXPECT_TRUE(ok(b->list()).empty());
    }
    fs::remove(bad);
  }
}

//===----------------------------------------------------------------------===//
// Many processes
//===----------------------------------------------------------------------===//

/// Starts a child; when `out` is non-null it gets the read end of a pipe on the
/// child's stdout.
pid_t spawn(const std::vector<std::string> &args, int *out = nullptr) {
  std::vector<char *> argv;
  for (const auto &a : args)
    argv.push_back(const_cast<char *>(a.c_str()));
  argv.push_back(nullptr);
  int fds[2] = {-1, -1};
  if (out && pipe(fds) != 0)
    return -1;
  pid_t pid = fork();
  if (pid == 0) {
    if (out) {
      dup2(fds[1], 1);
      close(fds[0]);
      close(fds[1]);
    }
    execv(argv[0], argv.data());
    _exit(127);
  }
  if (out) {
    close(fds[1]);
    *out = fds[0];
  }
  return pid;
}

int waitExit(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid)
    return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

const char *kTorture = TILEJIT_STORE_TORTURE;

/// The multi-process promises hold in both journal modes: WAL (one host) and
/// the rollback journal that network file systems get. The child processes
/// inherit TILEJIT_STORE_JOURNAL.
class StoreProcessTest : public StoreTest, public ::testing::WithParamInterface<const char *> {
protected:
  void SetUp() override {
    StoreTest::SetUp();
    ::setenv("TILEJIT_STORE_JOURNAL", GetParam(), 1);
  }
  void TearDown() override {
    ::unsetenv("TILEJIT_STORE_JOURNAL");
    StoreTest::TearDown();
  }
};
INSTANTIATE_TEST_SUITE_P(Journal, StoreProcessTest, ::testing::Values("wal", "delete"));

TEST_P(StoreProcessTest, EightWritersAndReadersLoseNothing) {
  constexpr int kWriters = 8, kCount = 200;
  // The file does not exist yet: the processes also race to create it.
  std::string path = file("shared/concurrent.db");
  std::string stop = file("stop");
  std::vector<pid_t> readers, writers;
  for (int r = 0; r < 2; ++r)
    readers.push_back(spawn({kTorture, "read", path, stop}));
  for (int w = 0; w < kWriters; ++w)
    writers.push_back(spawn({kTorture, "write", path, std::to_string(w), std::to_string(kCount)}));
  for (pid_t p : writers)
    EXPECT_EQ(waitExit(p), 0) << "a writer failed (its error is above)";
  writeFile(stop, "");
  for (pid_t p : readers)
    EXPECT_EQ(waitExit(p), 0) << "a reader failed (its error is above)";

  std::string notice;
  auto store = openStore(path, &notice);
  ASSERT_TRUE(store);
  EXPECT_EQ(notice, "");
  EXPECT_EQ(store->journalMode(), GetParam());
  EXPECT_TRUE(ok(store->verify()).empty());
  for (int w = 0; w < kWriters; ++w) {
    for (int i = 0; i < kCount; ++i) {
      size_t n = 1000 + size_t(i * 337 + w * 71) % 8000;
      std::string spec =
          "torture w=" + std::to_string(w) + " i=" + std::to_string(i) + " n=" + std::to_string(n);
      std::string problem;
      auto k = ok(store->getKernel(sha256Hex(spec), &problem));
      ASSERT_TRUE(k.has_value()) << spec;
      EXPECT_EQ(problem, "");
      EXPECT_EQ(k->spec, spec);
      EXPECT_EQ(k->cubin, payload(spec, n)) << spec;
    }
    std::string tuneKey = "tune w=" + std::to_string(w);
    EXPECT_EQ(ok(store->timings(tuneKey)).size(), size_t(kCount));
    EXPECT_EQ(ok(store->failures(tuneKey)).size(), size_t(kCount / 10));
    auto win = ok(store->winner(tuneKey));
    ASSERT_TRUE(win.has_value());
    EXPECT_EQ(win->config, "i=190");
  }
  EXPECT_EQ(ok(store->list()).size(), size_t(kWriters * kCount + kWriters));
}

TEST_P(StoreProcessTest, ProcessesCreatingOneStoreAtOnceAllSucceed) {
  // Regression: a process that read user_version before another's migration
  // committed and the table list after it took a healthy new store for a
  // foreign one and moved it aside under the others; and the switch to WAL
  // failed at once with "database is locked" while another process read.
  constexpr int kRounds = 12, kProcs = 8;
  for (int round = 0; round < kRounds; ++round) {
    std::string path = file("race" + std::to_string(round) + ".db");
    std::vector<pid_t> procs;
    for (int p = 0; p < kProcs; ++p)
      procs.push_back(spawn({kTorture, "open", path}));
    for (pid_t p : procs)
      EXPECT_EQ(waitExit(p), 0) << "round " << round << ": an opener failed (its error is above)";
    EXPECT_TRUE(filesStartingWith(dir, "race" + std::to_string(round) + ".db.corrupt-").empty());
    auto store = openStore(path);
    ASSERT_TRUE(store);
    EXPECT_EQ(ok(store->list()).size(), size_t(kProcs));
    EXPECT_TRUE(ok(store->verify()).empty());
  }
}

TEST_P(StoreProcessTest, SigkillAtRandomPointsLeavesAConsistentFile) {
  constexpr int kTrials = 40;
  constexpr size_t kBytes = 1 << 20;
  std::string path = file("killed.db");
  uint64_t seed = tilejit::testing::testSeed();
  std::mt19937_64 rng(seed);
  SCOPED_TRACE(tilejit::testing::replayHint(seed));
  size_t seen = 0;
  for (int trial = 0; trial < kTrials; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    // Even trials count the delay from the writer's first commit, so the kill
    // lands among large writes and checkpoints however slowly the child starts
    // (a sanitizer build starts slowly); odd trials count it from the start,
    // so it can also land in open(), the WAL switch or the migration.
    int ready = -1;
    pid_t child = spawn({kTorture, "spin", path, std::to_string(kBytes)}, &ready);
    ASSERT_GT(child, 0);
    if (trial % 2 == 0) {
      char byte = 0;
      ASSERT_EQ(read(ready, &byte, 1), 1) << "the writer died before its first commit";
    }
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 50000));
    ASSERT_EQ(kill(child, SIGKILL), 0);
    ASSERT_EQ(waitExit(child), 128 + SIGKILL) << "the writer ended before it was killed";
    close(ready); // only now: closed earlier, the child's write could die of SIGPIPE

    std::string notice;
    auto store = openStore(path, &notice);
    ASSERT_TRUE(store);
    ASSERT_EQ(notice, "") << "a killed writer must not leave a file that looks corrupt";
    ASSERT_TRUE(filesStartingWith(dir, "killed.db.corrupt-").empty());
    auto problems = ok(store->verify());
    ASSERT_TRUE(problems.empty()) << problems.front();
    for (const auto &s : ok(store->list())) {
      std::string problem;
      auto k = ok(store->getKernel(s.key, &problem));
      ASSERT_TRUE(k.has_value()) << s.key << ": " << problem;
      ASSERT_EQ(k->cubin.size(), kBytes);
      ASSERT_TRUE(k->cubin == payload(k->spec, kBytes)) << "mixed content in " << k->spec;
      ++seen;
    }
  }
  EXPECT_GT(seen, 0u) << "the writer never committed a kernel: the test tested nothing";
}

TEST_F(StoreTest, WritersSetForDifferentJournalsShareOneFile) {
  // Four processes set for WAL and four for a rollback journal on one store:
  // those set otherwise than the file used to wait out the others' locks to
  // switch it, then fail with "database is locked".
  if (fileSystemOf(dir).network)
    GTEST_SKIP() << "WAL is not kept on a network file system";
  constexpr int kWriters = 8, kCount = 50;
  std::string path = file("mixed.db");
  {
    auto store = Store::open(path, nullptr, Store::kDefaultBusyTimeoutMs, JournalMode::Wal);
    ASSERT_TRUE(bool(store)) << toString(store.takeError());
  }
  auto start = std::chrono::steady_clock::now();
  std::vector<pid_t> writers;
  for (int w = 0; w < kWriters; ++w) {
    ::setenv("TILEJIT_STORE_JOURNAL", w % 2 ? "delete" : "wal", 1);
    writers.push_back(spawn({kTorture, "write", path, std::to_string(w), std::to_string(kCount)}));
  }
  ::unsetenv("TILEJIT_STORE_JOURNAL");
  for (pid_t p : writers)
    EXPECT_EQ(waitExit(p), 0) << "a writer failed (its error is above)";
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(9))
      << "no writer waited out a busy timeout";
  auto store = openStore(path);
  ASSERT_TRUE(store);
  EXPECT_EQ(store->journalMode(), "wal");
  EXPECT_TRUE(ok(store->verify()).empty());
  EXPECT_EQ(ok(store->list()).size(), size_t(kWriters * kCount + kWriters));
}

} // namespace
