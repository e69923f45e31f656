//===- StoreTorture.cpp - a process that hammers one store ------------------===//
//
// The helper of the store's multi-process tests (tests/store/StoreTest.cpp):
//
//   tilejit_store_torture write DB WRITER COUNT
//       stores COUNT kernels (and a timing each, and some winners and failures)
//       with keys of its own; exits 1 on the first error.
//   tilejit_store_torture read DB STOPFILE
//       reads kernels back until STOPFILE exists, checking each byte; exits 1
//       on any error, bad hash or wrong content.
//   tilejit_store_torture open DB
//       opens (perhaps creating) the store, stores one kernel and exits; exits 1
//       on an error or a file set aside.
//   tilejit_store_torture spin DB BYTES
//       overwrites 16 kernel slots of BYTES each, forever, until killed; writes
//       one byte to stdout after its first commit.
//
// A kernel's content is a function of its spec text (payload() below, the same
// in the test), so a reader can tell a complete entry from a mixed one.
//
//===----------------------------------------------------------------------===//
#include "runtime/Store.h"
#include "tests/store/StorePayload.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <sys/stat.h>

using namespace tilejit;

namespace {
using tilejit::testing::payload;

/// The payload size a spec asks for: its " n=" field.
size_t payloadSize(const std::string &spec) {
  size_t at = spec.rfind(" n=");
  return at == std::string::npos ? 0 : std::strtoull(spec.c_str() + at + 3, nullptr, 10);
}

StoredKernel kernel(const std::string &spec) {
  StoredKernel k;
  k.key = sha256Hex(spec);
  k.spec = spec;
  k.config = "rows=1 threads=256 vec=8";
  k.arch = "sm_90a";
  k.toolchain = "tilejit=test";
  k.cubin = payload(spec, payloadSize(spec));
  k.ptx = "// ptx of " + spec;
  k.launch = "{\"spec\":\"" + spec + "\"}";
  k.workspaceBytes = int64_t(payloadSize(spec));
  return k;
}

[[noreturn]] void die(const std::string &what) {
  std::fprintf(stderr, "tilejit_store_torture[%d]: %s\n", int(getpid()), what.c_str());
  std::exit(1);
}

/// Ten processes contend for one file here, on machines that may be busy
/// with other work: the promise tested is that nothing is lost or mixed, not
/// how long a lock may take, so they wait longer than the default.
constexpr int kBusyTimeoutMs = 120000;

std::unique_ptr<Store> openOrDie(const std::string &path) {
  std::string notice;
  auto store = Store::open(path, &notice, kBusyTimeoutMs);
  if (!store)
    die(toString(store.takeError()));
  // A notice that the store keeps another journal mode than this process's
  // setting is expected; one that a file was set aside is not.
  if (notice.find("moved it aside") != std::string::npos)
    die("unexpected notice: " + notice);
  return std::move(*store);
}

void check(llvm::Error e) {
  if (e)
    die(toString(std::move(e)));
}

int writer(const std::string &path, int id, int count) {
  auto store = openOrDie(path);
  std::string tuneKey = "tune w=" + std::to_string(id);
  for (int i = 0; i < count; ++i) {
    // Sizes from 1 KB to 9 KB: some rows fit a page, most spill to overflow pages.
    size_t n = 1000 + size_t(i * 337 + id * 71) % 8000;
    std::string spec =
        "torture w=" + std::to_string(id) + " i=" + std::to_string(i) + " n=" + std::to_string(n);
    StoredKernel k = kernel(spec);
    std::string key = k.key;
    check(store->putKernel(std::move(k)));
    Timing t;
    t.tuneKey = tuneKey;
    t.config = "i=" + std::to_string(i);
    t.medianMs = 0.01 * (i + 1);
    t.p20Ms = t.medianMs * 0.9;
    t.p80Ms = t.medianMs * 1.1;
    t.reps = 100;
    t.gpu = "torture";
    check(store->addTiming(t));
    if (i % 10 == 0) {
      check(store->setWinner({tuneKey, t.config, key, t.medianMs, "fastest", 0}));
      check(store->addFailure({tuneKey, "bad i=" + std::to_string(i), "verify", "wrong", 0}));
    }
  }
  return 0;
}

bool exists(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

int reader(const std::string &path, const std::string &stopFile) {
  auto store = openOrDie(path);
  long reads = 0;
  // At least one full pass, so a reader that starts late still reads something.
  for (int pass = 0; pass == 0 || !exists(stopFile); ++pass) {
    auto all = store->list();
    if (!all)
      die(toString(all.takeError()));
    for (const Store::Summary &s : *all) {
      if (s.kind != "kernel")
        continue;
      std::string problem;
      auto k = store->getKernel(s.key, &problem);
      if (!k)
        die(toString(k.takeError()));
      if (!problem.empty())
        die("problem: " + problem);
      if (!*k)
        die("kernel " + s.key + " listed but not found");
      StoredKernel expect = kernel((*k)->spec);
      if ((*k)->key != expect.key || (*k)->cubin != expect.cubin || (*k)->ptx != expect.ptx ||
          (*k)->launch != expect.launch)
        die("kernel " + s.key + " has content that is not its own");
      ++reads;
    }
  }
  std::fprintf(stderr, "tilejit_store_torture[%d]: %ld kernel reads\n", int(getpid()), reads);
  return 0;
}

int spin(const std::string &path, size_t bytes) {
  auto store = openOrDie(path);
  for (long i = 0;; ++i) {
    std::string spec = "spin slot=" + std::to_string(i % 16) + " pid=" + std::to_string(getpid()) +
                       " iter=" + std::to_string(i) + " n=" + std::to_string(bytes);
    // The key depends on the slot only, so rows are overwritten in place.
    StoredKernel k = kernel(spec);
    k.key = sha256Hex("spin slot=" + std::to_string(i % 16));
    check(store->putKernel(std::move(k)));
    Timing t;
    t.tuneKey = "spin";
    t.config = "iter=" + std::to_string(i);
    check(store->addTiming(t));
    if (i == 0 && ::write(1, "r", 1) != 1)
      die("cannot say it is ready");
  }
}

} // namespace

int main(int argc, char **argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "write" && argc == 5)
    return writer(argv[2], std::atoi(argv[3]), std::atoi(argv[4]));
  if (mode == "read" && argc == 4)
    return reader(argv[2], argv[3]);
  if (mode == "open" && argc == 3) {
    auto store = openOrDie(argv[2]);
    check(store->putKernel(kernel("open pid=" + std::to_string(getpid()) + " n=100")));
    return 0;
  }
  if (mode == "spin" && argc == 4)
    return spin(argv[2], std::strtoull(argv[3], nullptr, 10));
  std::fprintf(stderr,
               "usage: %s write DB WRITER COUNT | read DB STOPFILE | open DB | spin DB BYTES\n",
               argv[0]);
  return 2;
}
