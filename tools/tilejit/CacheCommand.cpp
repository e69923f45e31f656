//===- CacheCommand.cpp - `tilejit cache ls|show|export|import|verify|prune` -===//
#include "tools/tilejit/Commands.h"

#include "core/Settings.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "compiler/Rederive.h"
#include "runtime/Store.h"
#include "service/Client.h"
#include "tools/tilejit/Output.h"

#include <nlohmann/json.hpp>

namespace tilejit::cli {

namespace {

/// True when compiling the kernel's spec and config here gives its bytes.
bool rederives(const StoredKernel &k, std::string &why) {
  if (auto e = checkRederives(k.spec, k.config, k.arch, k.key, k.cubin)) {
    why = llvm::toString(std::move(e));
    return false;
  }
  return true;
}

struct CacheArgs {
  std::string db, key, file, olderThan, server;
  bool trustBinaries = false, noBinaries = false, recompile = false, json = false;
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

/// The verbs that only read: they change nothing on disk, and serve a
/// read-only store.
bool readsOnly(const std::string &verb) {
  return verb == "ls" || verb == "show" || verb == "verify" || verb == "export";
}

/// ls, show, export and import against a `tilejit serve` (--server): the
/// file of export and import is the same store file the local verbs write
/// and read.
int runRemote(const std::string &verb, const CacheArgs &a) {
  if (a.trustBinaries || a.noBinaries)
    return usageError("--trust-binaries and --no-binaries apply to a local import; a server "
                      "takes the binaries built under its own identity");
  if (!a.db.empty())
    return usageError("--db and --server do not combine: the verb acts on one store");
  auto options = ClientOptions::fromEnvironment(a.server);
  if (!options)
    return usageError(llvm::toString(options.takeError()));
  ClientOptions o = **options;
  // A whole store may take longer than one kernel.
  if (settings::value("TILEJIT_SERVER_DEADLINE_MS").empty())
    o.deadline = std::chrono::minutes(2);
  Client client(o);
  if (verb == "ls" || verb == "show") {
    auto listed = client.list();
    if (!listed)
      return fail(llvm::toString(listed.takeError()));
    const std::vector<Store::Summary> &rows = listed->entries;
    if (verb == "show") {
      const Store::Summary *found = nullptr;
      for (const Store::Summary &r : rows)
        if (r.kind == "kernel" && r.key.rfind(a.key, 0) == 0) {
          if (found)
            return fail("key prefix '" + shown(a.key) + "' is ambiguous");
          found = &r;
        }
      if (!found)
        return fail("no kernel with key '" + shown(a.key) + "' on server " + shown(a.server) +
                    (listed->truncated ? " (among the entries it lists)" : ""));
      if (a.json) {
        std::printf("%s\n", dumped({{"server", a.server},
                                    {"key", found->key},
                                    {"spec", found->spec},
                                    {"config", found->config},
                                    {"arch", found->arch},
                                    {"bytes", found->bytes},
                                    {"created_at", found->createdAt}})
                                .c_str());
        return 0;
      }
      std::printf("key        %s\nspec       %s\nconfig     %s\narch       %s\n"
                  "stored     %lld bytes (cubin and PTX)\ncreated    %s\nserver     %s\n",
                  shown(found->key).c_str(), shown(found->spec).c_str(),
                  shown(found->config).c_str(), shown(found->arch).c_str(), (long long)found->bytes,
                  when(found->createdAt).c_str(), shown(a.server).c_str());
      return 0;
    }
    if (a.json) {
      nlohmann::json j = {{"server", a.server},
                          {"truncated", listed->truncated},
                          {"entries", nlohmann::json::array()},
                          {"leases", nlohmann::json::array()}};
      for (const Store::Summary &r : rows)
        j["entries"].push_back({{"kind", r.kind},
                                {"key", r.key},
                                {"spec", r.spec},
                                {"config", r.config},
                                {"arch", r.arch},
                                {"bytes", r.bytes},
                                {"created_at", r.createdAt}});
      for (const RemoteListing::Lease &l : listed->leases)
        j["leases"].push_back({{"tune_key", l.tuneKey},
                               {"holder", l.holder},
                               {"expires_in_ms", l.expiresIn.count()}});
      std::printf("%s\n", dumped(j).c_str());
      return 0;
    }
    std::printf("server %s: %zu entries%s, %zu lease(s) held\n", shown(a.server).c_str(),
                rows.size(), listed->truncated ? " (its list cap; more not shown)" : "",
                listed->leases.size());
    for (const Store::Summary &r : rows)
      std::printf("%-6s %-16.16s %s  [%s] %s %lld bytes %s\n", r.kind.c_str(), shown(r.key).c_str(),
                  shown(r.spec).c_str(), shown(r.config).c_str(), shown(r.arch).c_str(),
                  (long long)r.bytes, when(r.createdAt).c_str());
    for (const RemoteListing::Lease &l : listed->leases)
      std::printf("lease  %s held by %s, %lld ms left\n", shown(l.tuneKey).c_str(),
                  shown(l.holder).c_str(), (long long)l.expiresIn.count());
    return 0;
  }
  if (verb == "export") {
    auto image = client.exportStore();
    if (!image)
      return fail(llvm::toString(image.takeError()));
    if (auto e = Store::writeImage(*image, a.file))
      return fail(llvm::toString(std::move(e)));
    if (a.json)
      std::printf("%s\n",
                  dumped({{"server", a.server}, {"bytes", image->size()}, {"exported_to", a.file}})
                      .c_str());
    else
      std::printf("exported %s (%zu bytes) to %s\n", shown(a.server).c_str(), image->size(),
                  shown(a.file).c_str());
    return 0;
  }
  std::error_code ec;
  if (!std::filesystem::is_regular_file(a.file, ec))
    return fail(a.file + ": not a store file (no such regular file)");
  std::ifstream in(a.file, std::ios::binary);
  std::string image((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof())
    return fail("cannot read " + a.file);
  auto report = client.importStore(image);
  if (!report)
    return fail(llvm::toString(report.takeError()));
  if (a.json) {
    std::printf("%s\n", dumped({{"server", a.server},
                                {"imported_from", a.file},
                                {"rows", report->rows},
                                {"kernels_left", report->kernelsLeft},
                                {"first_left", report->firstLeft}})
                            .c_str());
    return 0;
  }
  std::printf("imported %lld rows from %s into %s\n", (long long)report->rows,
              shown(a.file).c_str(), shown(a.server).c_str());
  if (report->kernelsLeft)
    std::printf("left %lld kernel(s) out, compiled there at first use instead (%s)\n",
                (long long)report->kernelsLeft, shown(report->firstLeft).c_str());
  return 0;
}

int run(const std::string &verb, const CacheArgs &a) {
  if (!a.server.empty())
    return runRemote(verb, a);
  if (verb == "prune" && parseAge(a.olderThan) < 0)
    return usageError("--older-than '" + a.olderThan + "' is not an age like 30d, 12h, 45m or 90s");
  if (a.trustBinaries && a.noBinaries)
    return usageError("--trust-binaries and --no-binaries do not combine");
  std::string path = settings::storePath(a.db);
  std::unique_ptr<Store> opened;
  if (readsOnly(verb)) {
    auto store = Store::openForReading(path);
    if (!store)
      return fail(llvm::toString(store.takeError()));
    opened = std::move(*store);
    if (!opened) {
      if (verb == "ls" && a.json) {
        nlohmann::json j = {
            {"store", path}, {"schema", nullptr}, {"entries", nlohmann::json::array()}};
        std::printf("%s\n", dumped(j).c_str());
        return 0;
      }
      if (verb == "ls") {
        std::printf("%s: no store yet, 0 entries\n", shown(path).c_str());
        return 0;
      }
      if (verb == "show")
        return fail("no kernel with key '" + shown(a.key) + "' in " + path + ": no store there");
      return fail("no store at " + path);
    }
  } else {
    std::string notice;
    auto store = Store::open(path, &notice);
    if (!store)
      return fail(llvm::toString(store.takeError()));
    if (!notice.empty())
      std::fprintf(stderr, "tilejit: %s\n", notice.c_str());
    opened = std::move(*store);
  }
  Store &s = *opened;
  if (verb == "ls") {
    auto rows = s.list();
    if (!rows)
      return fail(llvm::toString(rows.takeError()));
    if (a.json) {
      nlohmann::json j = {
          {"store", s.path()}, {"schema", s.schemaVersion()}, {"entries", nlohmann::json::array()}};
      for (auto &r : *rows)
        j["entries"].push_back({{"kind", r.kind},
                                {"key", r.key},
                                {"spec", r.spec},
                                {"config", r.config},
                                {"arch", r.arch},
                                {"bytes", r.bytes},
                                {"created_at", r.createdAt}});
      std::printf("%s\n", dumped(j).c_str());
      return 0;
    }
    std::printf("%s: schema %d, %zu entries\n", shown(s.path()).c_str(), s.schemaVersion(),
                rows->size());
    for (auto &r : *rows)
      std::printf("%-6s %-16.16s %s  [%s] %s %lld bytes %s\n", r.kind.c_str(), shown(r.key).c_str(),
                  shown(r.spec).c_str(), shown(r.config).c_str(), shown(r.arch).c_str(),
                  (long long)r.bytes, when(r.createdAt).c_str());
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
          return fail("key prefix '" + shown(a.key) + "' is ambiguous");
        full = r.key;
      }
    if (full.empty())
      return fail("no kernel with key '" + shown(a.key) + "' in " + s.path());
    std::string problem;
    auto k = s.getKernel(full, &problem);
    if (!k)
      return fail(llvm::toString(k.takeError()));
    if (!*k)
      return fail(problem.empty() ? "kernel vanished" : shown(problem));
    if (a.json) {
      const StoredKernel &sk = **k;
      std::printf("%s\n", dumped({{"store", s.path()},
                                  {"key", sk.key},
                                  {"spec", sk.spec},
                                  {"config", sk.config},
                                  {"arch", sk.arch},
                                  {"toolchain", sk.toolchain},
                                  {"cubin_bytes", sk.cubin.size()},
                                  {"sha256", sk.sha256},
                                  {"ptx_bytes", sk.ptx.size()},
                                  {"workspace_bytes", sk.workspaceBytes},
                                  {"created_at", sk.createdAt},
                                  {"launch", sk.launch}})
                              .c_str());
      return 0;
    }
    std::printf("key        %s\nspec       %s\nconfig     %s\narch       %s\ntoolchain  %s\n"
                "cubin      %zu bytes, sha256 %s\nptx        %zu bytes\nworkspace  %lld bytes\n"
                "created    %s\nlaunch     %s\n",
                shown((*k)->key).c_str(), shown((*k)->spec).c_str(), shown((*k)->config).c_str(),
                shown((*k)->arch).c_str(), shown((*k)->toolchain).c_str(), (*k)->cubin.size(),
                shown((*k)->sha256).c_str(), (*k)->ptx.size(), (long long)(*k)->workspaceBytes,
                when((*k)->createdAt).c_str(), shown((*k)->launch).c_str());
    return 0;
  }
  if (verb == "export") {
    if (auto e = s.exportTo(a.file))
      return fail(llvm::toString(std::move(e)));
    if (a.json)
      std::printf("%s\n", dumped({{"store", s.path()}, {"exported_to", a.file}}).c_str());
    else
      std::printf("exported %s to %s\n", shown(s.path()).c_str(), shown(a.file).c_str());
    return 0;
  }
  if (verb == "import") {
    ImportOptions options;
    if (a.trustBinaries)
      options = ImportOptions::trustAll();
    else if (!a.noBinaries)
      options.acceptKernel = rederives;
    ImportReport report;
    auto n = s.importFrom(a.file, options, &report);
    if (!n)
      return fail(llvm::toString(n.takeError()));
    if (a.json) {
      std::printf("%s\n", dumped({{"store", s.path()},
                                  {"imported_from", a.file},
                                  {"rows", *n},
                                  {"kernels_left", report.kernelsLeft},
                                  {"first_left", report.firstLeft}})
                              .c_str());
      return 0;
    }
    std::printf("imported %lld rows from %s into %s\n", (long long)*n, shown(a.file).c_str(),
                shown(s.path()).c_str());
    if (report.kernelsLeft)
      std::printf("left %lld kernel(s) out, compiled here at first use instead (%s); "
                  "--trust-binaries takes them as they are\n",
                  (long long)report.kernelsLeft, shown(report.firstLeft).c_str());
    return 0;
  }
  if (verb == "verify") {
    auto problems = s.verify();
    if (!problems)
      return fail(llvm::toString(problems.takeError()));
    if (a.recompile) {
      auto rows = s.list();
      if (!rows)
        return fail(llvm::toString(rows.takeError()));
      for (auto &r : *rows) {
        if (r.kind != "kernel")
          continue;
        std::string problem;
        auto k = s.getKernel(r.key, &problem);
        if (!k)
          return fail(llvm::toString(k.takeError()));
        std::string why;
        if (*k && !rederives(**k, why))
          problems->push_back("kernel " + r.key + ": " + why);
      }
    }
    std::string summary = std::to_string(problems->size()) + " problem(s) in " + s.path() +
                          " (tilejit cache prune, or delete the store: it is a cache)";
    if (a.json) {
      // The report is the output; a store with problems still exits 1.
      std::printf("%s\n",
                  dumped({{"store", s.path()}, {"ok", problems->empty()}, {"problems", *problems}})
                      .c_str());
      if (problems->empty())
        return 0;
      std::fprintf(stderr, "tilejit: error: %s\n", summary.c_str());
      return 1;
    }
    for (auto &p : *problems)
      std::printf("problem: %s\n", shown(p).c_str());
    if (!problems->empty())
      return fail(summary);
    std::printf("%s: ok\n", shown(s.path()).c_str());
    return 0;
  }
  // prune
  int64_t cutoff = int64_t(std::time(nullptr)) - parseAge(a.olderThan);
  auto n = s.pruneOlderThan(cutoff);
  if (!n)
    return fail(llvm::toString(n.takeError()));
  if (a.json)
    std::printf("%s\n",
                dumped({{"store", s.path()}, {"pruned", *n}, {"older_than", a.olderThan}}).c_str());
  else
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
    c->add_flag("--json", a->json, "Print the result (or the error) as JSON");
    c->callback([verb, name] { *verb = name; });
    return c;
  };
  auto *ls = sub("ls", "List kernels and winners");
  ls->add_option("--server", a->server,
                 "List the store (and the leases) of this `tilejit serve` (host:port)");
  auto *show = sub("show", "Show one kernel");
  show->add_option("key", a->key, "Kernel key or a unique prefix")->required();
  show->add_option("--server", a->server, "Show it from this `tilejit serve`'s store (host:port)");
  auto *exportCmd = sub("export", "Copy the cache (or a server's) to a new file");
  exportCmd->add_option("file", a->file, "Destination")->required();
  exportCmd->add_option("--server", a->server,
                        "Copy the store of this `tilejit serve` (host:port; TLS and token from "
                        "TILEJIT_CA and TILEJIT_TOKEN as for TILEJIT_SERVER)");
  auto *import = sub("import", "Merge another cache file in: its winners, timings and failures, "
                               "and the binaries that compiling their spec here reproduces");
  import->add_option("file", a->file, "Source")->required();
  import->add_option("--server", a->server,
                     "Merge into the store of this `tilejit serve` instead (host:port; needs a "
                     "read-write TILEJIT_TOKEN): all of the file or nothing");
  import->add_flag("--trust-binaries", a->trustBinaries,
                   "Take every binary as it is (hash checked): only for files from a source "
                   "you trust, as they hold GPU code");
  import->add_flag("--no-binaries", a->noBinaries,
                   "Take no binary, not even those that compiling here reproduces");
  sub("verify", "Check every kernel's hash, that it is a cubin for its arch, and the "
                "database's integrity")
      ->add_flag("--recompile", a->recompile,
                 "Also compile each kernel's spec and config here and compare the bytes");
  sub("prune", "Delete entries older than an age")
      ->add_option("--older-than", a->olderThan, "Age: 30d, 12h, 45m, 90s")
      ->required();
  return [a, verb] { return run(*verb, *a); };
}

} // namespace tilejit::cli
