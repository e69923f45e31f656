//===- CacheCommand.cpp - `tilejit cache ls|show|export|import|verify|prune` -===//
#include "tools/tilejit/Commands.h"

#include <cstdio>
#include <ctime>

#include "runtime/Store.h"

namespace tilejit::cli {

namespace {

struct CacheArgs {
  std::string db, key, file, olderThan;
};

std::string when(int64_t t) {
  char buf[32];
  std::time_t tt = std::time_t(t);
  std::tm *tm = std::gmtime(&tt);
  if (!tm || !std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", tm))
    return "t=" + std::to_string(t);
  return buf;
}

/// "30d", "12h", "45m", "90s" -> seconds; -1 if malformed.
int64_t parseAge(const std::string &s) {
  if (s.size() < 2)
    return -1;
  int64_t n = 0;
  for (size_t i = 0; i + 1 < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9' || n > 1'000'000'000)
      return -1;
    n = n * 10 + (s[i] - '0');
  }
  switch (s.back()) {
  case 's':
    return n;
  case 'm':
    return n * 60;
  case 'h':
    return n * 3600;
  case 'd':
    return n * 86400;
  default:
    return -1;
  }
}

llvm::Expected<std::unique_ptr<Store>> open(const CacheArgs &a, std::string &notice) {
  auto store = Store::open(a.db.empty() ? defaultCachePath() : a.db, &notice);
  if (store && !notice.empty())
    std::fprintf(stderr, "tilejit: %s\n", notice.c_str());
  return store;
}

int run(const std::string &verb, const CacheArgs &a) {
  if (verb == "prune" && parseAge(a.olderThan) < 0)
    return fail("--older-than '" + a.olderThan + "' is not an age like 30d, 12h, 45m or 90s");
  std::string notice;
  auto store = open(a, notice);
  if (!store)
    return fail(llvm::toString(store.takeError()));
  Store &s = **store;
  // The file was corrupt and has been replaced by an empty store: verifying
  // or exporting that would report success on a cache that was lost.
  if (!notice.empty() && (verb == "verify" || verb == "export"))
    return fail("the cache was corrupt and has been moved aside; nothing to " + verb);
  if (verb == "ls") {
    auto rows = s.list();
    if (!rows)
      return fail(llvm::toString(rows.takeError()));
    std::printf("%s: schema %d, %zu entries\n", s.path().c_str(), s.schemaVersion(), rows->size());
    for (auto &r : *rows)
      std::printf("%-6s %-16.16s %s  [%s] %s %lld bytes %s\n", r.kind.c_str(), r.key.c_str(),
                  r.spec.c_str(), r.config.c_str(), r.arch.c_str(), (long long)r.bytes,
                  when(r.createdAt).c_str());
    return 0;
  }
  if (verb == "show") {
    auto rows = s.list();
    if (!rows)
      return fail(llvm::toString(rows.takeError()));
    std::string full;
    for (auto &r : *rows)
      if (r.kind == "kernel" && r.key.rfind(a.key, 0) == 0) {
        if (!full.empty())
          return fail("key prefix '" + a.key + "' is ambiguous");
        full = r.key;
      }
    if (full.empty())
      return fail("no kernel with key '" + a.key + "' in " + s.path());
    std::string problem;
    auto k = s.getKernel(full, &problem);
    if (!k)
      return fail(llvm::toString(k.takeError()));
    if (!*k)
      return fail(problem.empty() ? "kernel vanished" : problem);
    std::printf("key        %s\nspec       %s\nconfig     %s\narch       %s\ntoolchain  %s\n"
                "cubin      %zu bytes, sha256 %s\nptx        %zu bytes\nworkspace  %lld bytes\n"
                "created    %s\nlaunch     %s\n",
                (*k)->key.c_str(), (*k)->spec.c_str(), (*k)->config.c_str(), (*k)->arch.c_str(),
                (*k)->toolchain.c_str(), (*k)->cubin.size(), (*k)->sha256.c_str(), (*k)->ptx.size(),
                (long long)(*k)->workspaceBytes, when((*k)->createdAt).c_str(),
                (*k)->launch.c_str());
    return 0;
  }
  if (verb == "export") {
    if (auto e = s.exportTo(a.file))
      return fail(llvm::toString(std::move(e)));
    std::printf("exported %s to %s\n", s.path().c_str(), a.file.c_str());
    return 0;
  }
  if (verb == "import") {
    auto n = s.importFrom(a.file);
    if (!n)
      return fail(llvm::toString(n.takeError()));
    std::printf("imported %lld rows from %s into %s\n", (long long)*n, a.file.c_str(),
                s.path().c_str());
    return 0;
  }
  if (verb == "verify") {
    auto problems = s.verify();
    if (!problems)
      return fail(llvm::toString(problems.takeError()));
    for (auto &p : *problems)
      std::printf("problem: %s\n", p.c_str());
    if (!problems->empty())
      return fail(std::to_string(problems->size()) + " problem(s) in " + s.path());
    std::printf("%s: ok\n", s.path().c_str());
    return 0;
  }
  // prune
  int64_t cutoff = int64_t(std::time(nullptr)) - parseAge(a.olderThan);
  auto n = s.pruneOlderThan(cutoff);
  if (!n)
    return fail(llvm::toString(n.takeError()));
  std::printf("pruned %lld rows older than %s\n", (long long)*n, a.olderThan.c_str());
  return 0;
}

} // namespace

Action addCache(CLI::App &app) {
  auto a = std::make_shared<CacheArgs>();
  auto verb = std::make_shared<std::string>();
  auto *cmd = app.add_subcommand("cache", "Inspect and maintain the tuning cache");
  cmd->require_subcommand(1);
  cmd->add_option("--db", a->db, "Tuning cache file")->configurable();
  auto sub = [&](const char *name, const char *help) {
    auto *c = cmd->add_subcommand(name, help);
    c->add_option("--db", a->db, "Tuning cache file");
    c->callback([verb, name] { *verb = name; });
    return c;
  };
  sub("ls", "List kernels and winners");
  sub("show", "Show one kernel")
      ->add_option("key", a->key, "Kernel key or a unique prefix")
      ->required();
  sub("export", "Copy the cache to a new file")
      ->add_option("file", a->file, "Destination")
      ->required();
  sub("import", "Merge another cache file in")->add_option("file", a->file, "Source")->required();
  sub("verify", "Check every kernel's hash and the database's integrity");
  sub("prune", "Delete entries older than an age")
      ->add_option("--older-than", a->olderThan, "Age: 30d, 12h, 45m, 90s")
      ->required();
  return [a, verb] { return run(*verb, *a); };
}

} // namespace tilejit::cli
