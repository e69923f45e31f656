//===- Worker.cpp ---------------------------------------------------------===//
#include "autotune/Worker.h"

#include "core/Settings.h"

#include <cerrno>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <fcntl.h>
#include <optional>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include <nlohmann/json.hpp>

#include "autotune/WorkerProtocol.h"
#include "compiler/Nvrtc.h"
#include "compiler/Ptxas.h"
#include "core/LaunchInfo.h"

extern char **environ;

namespace tilejit {

using nlohmann::json;
using worker::Received;
using worker::receiveMessage;
using worker::sendMessage;

namespace {

llvm::Error err(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

std::string dirOf(const std::string &path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

json measurementJson(const Measurement &m) {
  return {{"status", m.status},       {"detail", m.detail},   {"median", m.medianMs},
          {"p20", m.p20Ms},           {"p80", m.p80Ms},       {"reps", m.reps},
          {"registers", m.registers}, {"spill", m.spillBytes}};
}

Measurement measurementFrom(const json &j) {
  Measurement m;
  m.status = j.value("status", std::string("fault"));
  m.detail = j.value("detail", std::string());
  m.medianMs = j.value("median", 0.0);
  m.p20Ms = j.value("p20", 0.0);
  m.p80Ms = j.value("p80", 0.0);
  m.reps = j.value("reps", 0);
  m.registers = j.value("registers", -1);
  m.spillBytes = j.value("spill", 0);
  return m;
}

std::string describeExit(int status) {
  if (WIFEXITED(status))
    return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const char *name = ::strsignal(WTERMSIG(status));
    return "killed by signal " + std::to_string(WTERMSIG(status)) +
           (name ? std::string(" (") + name + ")" : std::string());
  }
  return "ended (status " + std::to_string(status) + ")";
}

} // namespace

// ------------------------------------------------------------ finding it

llvm::Expected<std::string> findWorker(const std::string &explicitPath) {
  auto runnable = [](const std::string &p) { return !p.empty() && ::access(p.c_str(), X_OK) == 0; };
  std::string given = explicitPath;
  const char *from = "the tuning options";
  if (given.empty()) {
    if (std::string env = settings::value("TILEJIT_WORKER"); !env.empty()) {
      given = env;
      from = "TILEJIT_WORKER";
    }
  }
  if (!given.empty()) {
    if (runnable(given))
      return given;
    return err("the measuring worker named by " + llvm::Twine(from) + ", '" + given +
               "', is not an executable file");
  }
  std::vector<std::string> places;
  char self[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0)
    places.push_back(dirOf(std::string(self, size_t(n))) + "/tilejit-worker");
  Dl_info info;
  if (::dladdr(reinterpret_cast<void *>(&findWorker), &info) && info.dli_fname) {
    std::string lib = dirOf(info.dli_fname);
    places.push_back(lib + "/tilejit-worker");
    places.push_back(lib + "/../libexec/tilejit-worker");
  }
#ifdef TILEJIT_WORKER_INSTALL_PATH
  places.push_back(TILEJIT_WORKER_INSTALL_PATH);
#endif
#ifdef TILEJIT_WORKER_BUILD_PATH
  places.push_back(TILEJIT_WORKER_BUILD_PATH);
#endif
  std::string tried;
  for (const std::string &p : places) {
    if (runnable(p))
      return p;
    tried += (tried.empty() ? "" : ", ") + p;
  }
  return err("cannot find the measuring worker 'tilejit-worker' (looked at " + tried +
             "); set TILEJIT_WORKER to its path, or tune in process");
}

// ------------------------------------------------------------ processes

namespace {

/// Starts `path args...` with one end of a socket pair as its descriptor 3
/// (named in `args`) and its stdout sent to stderr; `fd` gets the other end.
llvm::Error spawnChild(const std::string &path, const std::vector<std::string> &args, pid_t &pid,
                       int &fd) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    return err("cannot create a socket pair for " + path + ": " + std::strerror(errno));
  // The child's end becomes its descriptor 3 (dup2 drops close-on-exec); an
  // end that already is 3 would keep the flag, so it moves first.
  int child = sv[1];
  if (child == 3) {
    child = ::fcntl(sv[1], F_DUPFD_CLOEXEC, 10);
    ::close(sv[1]);
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, child, 3);
  // Whatever the child (or a library in it) prints goes to stderr, never into
  // the tuning process's output.
  posix_spawn_file_actions_adddup2(&fa, 2, 1);
  std::vector<char *> argv = {const_cast<char *>(path.c_str())};
  for (const std::string &a : args)
    argv.push_back(const_cast<char *>(a.c_str()));
  argv.push_back(nullptr);
  int rc = ::posix_spawn(&pid, path.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(child);
  if (rc != 0) {
    ::close(sv[0]);
    pid = -1;
    return err("cannot start " + path + ": " + std::strerror(rc));
  }
  fd = sv[0];
  return llvm::Error::success();
}

/// Closes `fd`, kills the child if asked (else waits up to 5 s for it to end
/// by itself, then kills it), reaps it, and says how it ended.
std::string reapChild(pid_t &pid, int &fd, bool kill) {
  if (fd >= 0) {
    ::close(fd);
    fd = -1;
  }
  if (pid < 0)
    return "was not running";
  if (kill)
    ::kill(pid, SIGKILL);
  int status = 0;
  pid_t got;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while ((got = ::waitpid(pid, &status, kill ? 0 : WNOHANG)) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      kill = true;
      continue;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  pid = -1;
  if (got < 0)
    return "ended (its status is not ours to read: " + std::string(std::strerror(errno)) + ")";
  return describeExit(status);
}

} // namespace

// ------------------------------------------------------------ compiler side

llvm::Expected<std::unique_ptr<CompilerProcess>> CompilerProcess::start(const std::string &path) {
  std::unique_ptr<CompilerProcess> c(new CompilerProcess(path));
  if (auto e = spawnChild(path, {"--compile-fd", "3"}, c->pid_, c->fd_))
    return e;
  return c;
}

CompilerProcess::~CompilerProcess() { reapChild(pid_, fd_, false); }

void CompilerProcess::useFor(CompileOptions &options) {
  options.nvrtc = [this](std::string_view source, std::string_view name, std::string_view arch) {
    return compile(source, name, arch, Backend::Cuda);
  };
  options.ptxas = [this](std::string_view source, std::string_view name, std::string_view arch) {
    return compile(source, name, arch, Backend::Nvptx);
  };
}

llvm::Expected<NvrtcOutput> CompilerProcess::compile(std::string_view source, std::string_view name,
                                                     std::string_view arch, Backend backend) {
  if (pid_ < 0) // lost to an earlier compile: a fresh one
    if (auto e = spawnChild(path_, {"--compile-fd", "3"}, pid_, fd_))
      return e;
  json req = {{"op", "compile"},
              {"source", source},
              {"name", name},
              {"arch", arch},
              {"backend", backendName(backend)}};
  json reply;
  Received r =
      sendMessage(fd_, req) ? receiveMessage(fd_, timeoutSeconds_, reply) : Received::Closed;
  if (r != Received::Message) {
    std::string how = reapChild(pid_, fd_, /*kill=*/true);
    return llvm::make_error<CompileInterrupted>(
        "the compiler process " +
        (r == Received::Timeout ? "took longer than " + std::to_string(int(timeoutSeconds_)) + " s"
                                : how) +
        " compiling '" + std::string(name) + "'");
  }
  if (!reply.value("ok", false))
    return err(reply.value("error", std::string("the compiler process sent an unreadable reply")));
  NvrtcOutput out;
  out.ptx = reply.value("ptx", std::string());
  out.log = reply.value("log", std::string());
  auto cubin = reply.find("cubin");
  if (cubin == reply.end() || !cubin->is_binary())
    return err("the compiler process sent no cubin for '" + std::string(name) + "'");
  out.cubin.assign(cubin->get_binary().begin(), cubin->get_binary().end());
  return out;
}

int runCompiler(int fd) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() == 1)
    return 1;
  for (;;) {
    json msg;
    Received r = receiveMessage(fd, -1, msg);
    if (r == Received::Closed)
      return 0;
    if (r != Received::Message)
      return 2;
    json reply;
    std::string source = msg.value("source", std::string());
    std::string name = msg.value("name", std::string("kernel"));
    std::string arch = msg.value("arch", std::string());
    auto backend = parseBackend(msg.value("backend", std::string("cuda")));
    if (!backend) {
      reply = {{"ok", false}, {"error", "unknown back end in a compile request"}};
      if (!sendMessage(fd, reply))
        return 2;
      continue;
    }
    // PTX (from either PTX back end) goes to ptxas, C++ to NVRTC.
    auto out = *backend != Backend::Cuda ? assembleWithPtxas(source, name, arch)
                                         : compileWithNvrtc(source, name, arch);
    if (out) {
      reply = {
          {"ok", true},
          {"ptx", out->ptx},
          {"log", out->log},
          {"cubin", json::binary_t(std::vector<uint8_t>(out->cubin.begin(), out->cubin.end()))}};
    } else {
      reply = {{"ok", false}, {"error", llvm::toString(out.takeError())}};
    }
    if (!sendMessage(fd, reply))
      return 2;
  }
}

// ------------------------------------------------------------ parent side

llvm::Expected<std::unique_ptr<WorkerProcess>> WorkerProcess::start(const Options &options) {
  std::unique_ptr<WorkerProcess> w(new WorkerProcess(options));
  if (auto e = w->spawn())
    return e;
  return w;
}

llvm::Error WorkerProcess::spawn() {
  std::string device = std::to_string(opt_.device);
  if (auto e = spawnChild(opt_.path, {"--serve-fd", "3", "--device", device}, pid_, fd_))
    return e;
  ready_ = false;
  return llvm::Error::success();
}

llvm::Error WorkerProcess::sendPrepare() {
  for (int attempt = 0;; ++attempt) {
    if (pid_ < 0)
      if (auto e = spawn())
        return e;
    ready_ = false;
    if (sendMessage(fd_, prepare_))
      return llvm::Error::success();
    // It died while idle: not any candidate's doing. One more try.
    std::string how = reap(true);
    if (attempt == 1)
      return err("the measuring worker " + opt_.path + " " + how + " before it was given work");
  }
}

llvm::Error WorkerProcess::prepare(const KernelSpec &spec, uint64_t seed, int reps) {
  spec_ = spec;
  lost_ = 0;
  prepare_ = {{"op", "prepare"},
              {"spec", spec.canonical(/*withRuntimeSizes=*/true)},
              {"seed", seed},
              {"reps", reps}};
  return sendPrepare();
}

llvm::Error WorkerProcess::awaitReady() {
  json reply;
  Received r = receiveMessage(fd_, opt_.startSeconds, reply);
  if (r == Received::Message && reply.value("ok", false)) {
    ready_ = true;
    return llvm::Error::success();
  }
  std::string why;
  if (r == Received::Message)
    why = reply.value("error", std::string("an unreadable reply"));
  else if (r == Received::Timeout)
    why = "no reply within " + std::to_string(int(opt_.startSeconds)) + " s";
  std::string how = reap(r != Received::Closed);
  return err("the measuring worker could not prepare " + spec_.canonical() + ": " +
             (why.empty() ? how : why));
}

std::string WorkerProcess::reap(bool kill) {
  ready_ = false;
  return reapChild(pid_, fd_, kill);
}

WorkerProcess::~WorkerProcess() { reap(false); }

llvm::Expected<Measurement> WorkerProcess::measure(const CompiledKernel &k, double cutoffMs,
                                                   TimingMode timing, bool check) {
  if (prepare_.is_null())
    return err("the measuring worker was not told what to prepare");
  if (pid_ < 0) {
    // The last one was lost to a candidate: a fresh one prepares the same.
    if (lost_ > opt_.maxRestarts)
      return err("the measuring worker was lost " + llvm::Twine(lost_) +
                 " times in this tuning; giving up");
    if (auto e = sendPrepare())
      return e;
  }
  if (!ready_)
    if (auto e = awaitReady())
      return e;

  json req = {{"op", "measure"},
              {"key", k.key},
              {"config", k.config.canonical()},
              {"cubin", json::binary_t(std::vector<uint8_t>(k.cubin.begin(), k.cubin.end()))},
              {"entries", entriesToJson(k.entries)},
              {"workspace", k.workspaceBytes},
              {"cutoff_ms", cutoffMs},
              {"timing", timing == TimingMode::Sustained ? "sustained" : "cold"},
              {"check", check}};
  if (!sendMessage(fd_, req)) {
    // It died between candidates: not this candidate's doing. One retry on a
    // fresh worker.
    reap(true);
    if (auto e = sendPrepare())
      return e;
    if (auto e = awaitReady())
      return e;
    if (!sendMessage(fd_, req))
      return err("the measuring worker " + llvm::Twine(reap(true)) + " before it took a candidate");
  }
  json reply;
  Received r = receiveMessage(fd_, opt_.candidateSeconds, reply);
  Measurement m;
  switch (r) {
  case Received::Message:
    m = measurementFrom(reply);
    if (m.status == "fault") {
      reap(false); // it exits after reporting a broken context
      ++lost_;
    }
    return m;
  case Received::Timeout: {
    std::string how = reap(true);
    ++lost_;
    m.status = "timeout";
    char limit[32];
    std::snprintf(limit, sizeof limit, "%g", opt_.candidateSeconds);
    m.detail = "did not finish within " + std::string(limit) +
               " s; the measuring worker was stopped (" + how + ")";
    return m;
  }
  case Received::Closed:
  case Received::Broken:
    m.status = "fault";
    m.detail = "the measuring worker " + reap(true) + " while running this candidate";
    ++lost_;
    return m;
  }
  return m;
}

// ------------------------------------------------------------ worker side

int runWorker(int fd, int device) {
  // A worker outlives no tuning process.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() == 1)
    return 1;
  // The context is made before any request, while the tuning process is
  // still compiling; an error is the reply to the first request.
  std::string broken;
  std::optional<ScopedDevice> scope;
  if (auto drv = CudaDriver::get(); !drv) {
    broken = llvm::toString(drv.takeError());
  } else if (auto entered = ScopedDevice::enter(device); !entered) {
    broken = llvm::toString(entered.takeError());
  } else {
    scope.emplace(std::move(*entered));
  }
  std::unique_ptr<CandidateRunner> runner;
  std::optional<KernelSpec> spec;
  json msg;
  for (;;) {
    Received r = receiveMessage(fd, -1, msg);
    if (r == Received::Closed)
      return 0;
    if (r != Received::Message)
      return 2;
    std::string op = msg.value("op", std::string());
    if (op == "prepare") {
      runner.reset();
      llvm::Error e = [&]() -> llvm::Error {
        if (!broken.empty())
          return err(broken);
        auto parsed = KernelSpec::parse(msg.value("spec", std::string()));
        if (!parsed)
          return parsed.takeError();
        spec = *parsed;
        auto created =
            CandidateRunner::create(*spec, msg.value("seed", uint64_t(1)), msg.value("reps", 30));
        if (!created)
          return created.takeError();
        runner = std::move(*created);
        return llvm::Error::success();
      }();
      json reply = {{"ok", !e}};
      if (e)
        reply["error"] = llvm::toString(std::move(e));
      if (!sendMessage(fd, reply))
        return 2;
      continue;
    }
    Measurement m;
    auto k = [&]() -> llvm::Expected<CompiledKernel> {
      if (op != "measure")
        return err("unknown request '" + op + "'");
      if (!runner)
        return err("a candidate came before a successful prepare");
      CompiledKernel k;
      k.spec = *spec;
      k.key = msg.value("key", std::string());
      auto config = TileConfig::parse(msg.value("config", std::string()));
      if (!config)
        return config.takeError();
      k.config = std::move(*config);
      auto entries = entriesFromJson(msg.value("entries", std::string()));
      if (!entries)
        return entries.takeError();
      k.entries = std::move(*entries);
      auto cubin = msg.find("cubin");
      if (cubin == msg.end() || !cubin->is_binary())
        return err("the request carries no cubin");
      k.cubin.assign(cubin->get_binary().begin(), cubin->get_binary().end());
      k.workspaceBytes = msg.value("workspace", int64_t(0));
      return k;
    }();
    if (k) {
      std::string timing = msg.value("timing", std::string("cold"));
      m = runner->measure(*k, msg.value("cutoff_ms", 0.0),
                          timing == "sustained" ? TimingMode::Sustained : TimingMode::Cold,
                          msg.value("check", true));
    } else {
      m.status = "launch";
      m.detail = "malformed request: " + llvm::toString(k.takeError());
    }
    if (!sendMessage(fd, measurementJson(m)))
      return 2;
    if (m.status == "fault")
      return 3; // the context is gone; the parent starts a fresh worker
  }
}

} // namespace tilejit
