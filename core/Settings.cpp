//===- Settings.cpp -------------------------------------------------------===//
#include "core/Settings.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

#include "llvm/ADT/Twine.h"

namespace tilejit::settings {

namespace {

llvm::Error bad(const llvm::Twine &what) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), what);
}

llvm::Error oneOf(std::string_view v, std::initializer_list<std::string_view> words) {
  std::string list;
  for (std::string_view w : words) {
    if (v == w)
      return llvm::Error::success();
    list += (list.empty() ? "" : ", ") + std::string(w);
  }
  return bad(words.size() == 2 ? "is not " + std::string(*words.begin()) + " or " +
                                     std::string(*(words.begin() + 1))
                               : "is not one of " + list);
}

/// A whole decimal number in [lo, hi].
llvm::Error numberIn(std::string_view v, long long lo, long long hi, const char *what) {
  std::string s(v);
  char *end = nullptr;
  errno = 0;
  long long n = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end || s.find_first_not_of("0123456789") != std::string::npos ||
      errno == ERANGE || n < lo || n > hi)
    return bad("is not " + llvm::Twine(what) + " in [" + llvm::Twine(lo) + ", " + llvm::Twine(hi) +
               "]");
  return llvm::Error::success();
}

/// A regular file this process may use as `mode` (R_OK, X_OK) says.
llvm::Error fileFor(std::string_view v, int mode, const char *otherwise) {
  struct stat st;
  std::string path(v);
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || ::access(path.c_str(), mode) != 0)
    return bad(otherwise);
  return llvm::Error::success();
}

llvm::Error readableFile(std::string_view v) { return fileFor(v, R_OK, "cannot be read"); }
llvm::Error executableFile(std::string_view v) {
  return fileFor(v, X_OK, "is not an executable file");
}

llvm::Error pemFile(std::string_view v) {
  if (auto e = readableFile(v))
    return e;
  std::ifstream in{std::string(v)};
  std::stringstream ss;
  ss << in.rdbuf();
  if (ss.str().find("-----BEGIN ") == std::string::npos)
    return bad("is not PEM (no -----BEGIN line)");
  return llvm::Error::success();
}

llvm::Error hostPort(std::string_view v) {
  auto colon = v.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == v.size() ||
      v.find_first_not_of("0123456789", colon + 1) != std::string_view::npos)
    return bad("is not host:port");
  return llvm::Error::success();
}

llvm::Error directory(std::string_view v) {
  struct stat st;
  std::string path(v);
  if (::stat(path.c_str(), &st) == 0 && !S_ISDIR(st.st_mode))
    return bad("is a file, not a folder (the store goes in it as tilejit.db)");
  return llvm::Error::success(); // a missing folder is made when the store is
}

const Variable kVariables[] = {
    {"TILEJIT_CACHE_DIR", "engine, CLI, server",
     "the store is $TILEJIT_CACHE_DIR/tilejit.db (a folder, made if missing); unset: "
     "$XDG_CACHE_HOME/tilejit, else ~/.cache/tilejit (`--db FILE` first where a command takes it)",
     directory},
    {"TILEJIT_STORE_JOURNAL", "store",
     "wal (one host), delete (a rollback journal, for network file systems) or auto (the "
     "default: by the file system)",
     [](std::string_view v) {
       return oneOf(v, {"wal", "delete", "auto"});
     }},
    {"TILEJIT_TUNE", "engine",
     "off (the default), on-miss (tune before the first launch) or background (the default "
     "config now, the winner when tuned)",
     [](std::string_view v) {
       return oneOf(v, {"off", "on-miss", "background"});
     }},
    {"TILEJIT_DETERMINISTIC", "engine",
     "1: never tune at run time (stored winners or defaults only) and only bitwise repeatable "
     "kernels (0: the default)",
     [](std::string_view v) {
       return oneOf(v, {"0", "1"});
     }},
    {"TILEJIT_ALLOW_NONDETERMINISTIC", "engine",
     "1: kernels whose results are not bitwise repeatable may be chosen (the attention "
     "backward's dQ added atomically); TILEJIT_DETERMINISTIC=1 overrides it (0: the default)",
     [](std::string_view v) {
       return oneOf(v, {"0", "1"});
     }},
    {"TILEJIT_TUNE_ISOLATION", "engine",
     "process (the default: candidates run in tilejit-worker) or in-process",
     [](std::string_view v) {
       return oneOf(v, {"process", "in-process"});
     }},
    {"TILEJIT_WORKER", "tuner",
     "the tilejit-worker program (else beside the program, then the install and build paths)",
     executableFile},
    {"TILEJIT_PTXAS", "compiler",
     "the ptxas program (else $CUDA_HOME/bin, /usr/local/cuda/bin, PATH)", executableFile},
    {"TILEJIT_CUDA_DRIVER", "runtime", "the CUDA driver library to load (default libcuda.so.1)",
     nullptr},
    {"TILEJIT_SERVER", "engine, client", "host:port of a `tilejit serve`; unset: in process only",
     hostPort},
    {"TILEJIT_TOKEN", "client",
     "the bearer token sent with writes (AcquireTuningLease, ReleaseTuningLease, "
     "PublishResult, Tune, Import): a tuning under the server's lease needs a read-write one",
     nullptr},
    {"TILEJIT_TOKEN_FILE", "client", "a file holding that token, when TILEJIT_TOKEN is unset",
     readableFile},
    {"TILEJIT_CA", "client",
     "a PEM file: the CA that signed the server's certificate; set: TLS, unset: plaintext",
     pemFile},
    {"TILEJIT_CLIENT_CERT", "client",
     "a PEM file, with TILEJIT_CLIENT_KEY: the certificate a server started with "
     "--tls-client-ca requires (TLS only)",
     pemFile},
    {"TILEJIT_CLIENT_KEY", "client", "a PEM file: the key of TILEJIT_CLIENT_CERT", pemFile},
    {"TILEJIT_SERVER_DEADLINE_MS", "client",
     "the most one request to the server may take, retries included (default 5000), before "
     "the engine compiles here; a server found unreachable is not asked again for 30 s",
     [](std::string_view v) { return numberIn(v, 1, 3600000, "a number of milliseconds"); }},
    {"TILEJIT_SM_MARGIN", "C interface, Python",
     "multiprocessors left free for other work (communication kernels); at most the GPU's "
     "count less one",
     [](std::string_view v) { return numberIn(v, 0, 4095, "a number of multiprocessors"); }},
    {"TILEJIT_LIB", "Python", "the libtilejit.so to load (else the one beside the package)",
     readableFile, false},
    {"TILEJIT_LOG_LEVEL", "Python",
     "the level of the `tilejit` logger: debug, info, warning, error or critical (any case)",
     [](std::string_view v) {
       std::string lower(v);
       for (char &c : lower)
         c = char(std::tolower(static_cast<unsigned char>(c)));
       return oneOf(lower, {"debug", "info", "warning", "error", "critical"});
     },
     false},
    {"TILEJIT_TEST_SEED", "tests", "replays a test's random inputs (the seed a failure printed)",
     [](std::string_view v) -> llvm::Error {
       // As the tests read it: an unsigned 64-bit number, decimal or 0x hex.
       std::string s(v);
       char *end = nullptr;
       errno = 0;
       std::strtoull(s.c_str(), &end, 0);
       if (s.empty() || *end || errno == ERANGE || s[0] == '-' || s[0] == '+')
         return bad("is not a seed (a whole number below 2^64, decimal or 0x hex)");
       return llvm::Error::success();
     },
     false},
    {"TILEJIT_CLI", "Python tests",
     "the `tilejit` program the server tests start (else PATH, then the build tree's)",
     executableFile, false},
};

} // namespace

llvm::ArrayRef<Variable> variables() { return kVariables; }

const Variable *find(std::string_view name) {
  for (const Variable &v : kVariables)
    if (v.name == name)
      return &v;
  return nullptr;
}

std::string value(std::string_view name) {
  const char *v = std::getenv(std::string(name).c_str());
  return v ? std::string(v) : std::string();
}

llvm::Error checkValue(std::string_view name, std::string_view v) {
  const Variable *var = find(name);
  if (!var)
    return bad("'" + llvm::Twine(name) + "' is not a tilejit setting");
  if (v.empty() || !var->check)
    return llvm::Error::success();
  if (llvm::Error e = var->check(v))
    return bad(llvm::Twine(name) + "='" + v + "' " + llvm::toString(std::move(e)));
  return llvm::Error::success();
}

llvm::Error check(std::string_view name) { return checkValue(name, value(name)); }

llvm::Error checkAll(bool everything, llvm::ArrayRef<std::string_view> excused) {
  for (const Variable &v : kVariables)
    if ((v.native || everything) && llvm::find(excused, v.name) == excused.end())
      if (auto e = check(v.name))
        return e;
  return llvm::Error::success();
}

std::string storePath(std::string_view dbFlag, std::string *source) {
  auto from = [&](const char *what, std::string path) {
    if (source)
      *source = what;
    return path;
  };
  if (!dbFlag.empty())
    return from("--db", std::string(dbFlag));
  if (std::string dir = value("TILEJIT_CACHE_DIR"); !dir.empty())
    return from("TILEJIT_CACHE_DIR", dir + "/tilejit.db");
  if (std::string xdg = value("XDG_CACHE_HOME"); !xdg.empty())
    return from("XDG_CACHE_HOME", xdg + "/tilejit/tilejit.db");
  if (std::string home = value("HOME"); !home.empty())
    return from("HOME", home + "/.cache/tilejit/tilejit.db");
  return from("", "tilejit.db");
}

} // namespace tilejit::settings
