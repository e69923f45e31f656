// The tuner's measuring worker: finding it, and surviving workers that crash,
// hang, or report a broken GPU context (with a fake worker; no GPU needed).
#include <cstdlib>
#include <fstream>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "autotune/Worker.h"
#include "autotune/WorkerProtocol.h"
#include "compiler/Compiler.h"
#include "ops/rmsnorm/RmsNormDecl.h"
#include "runtime/CudaDriver.h"
#include "tests/support/TempDir.h"

using namespace tilejit;
using nlohmann::json;

namespace {

CompiledKernel fakeKernel(int behaviour) {
  CompiledKernel k;
  k.key = "fake" + std::to_string(behaviour);
  k.config.set("vec", behaviour);
  k.cubin = {'n', 'o', 't', ' ', 'a', ' ', 'c', 'u', 'b', 'i', 'n'};
  return k;
}

const char *fakeWorker() {
  const char *env = std::getenv("TILEJIT_FAKE_WORKER");
  return env && *env ? env : TILEJIT_FAKE_WORKER;
}

WorkerProcess::Options fakeOptions() {
  WorkerProcess::Options o;
  o.path = fakeWorker();
  o.candidateSeconds = 1;
  return o;
}

/// A worker started and told to prepare a spec.
std::unique_ptr<WorkerProcess> prepared(const WorkerProcess::Options &o) {
  auto w = WorkerProcess::start(o);
  if (!w) {
    ADD_FAILURE() << llvm::toString(w.takeError());
    return nullptr;
  }
  rmsnorm::Params spec;
  spec.cols = 4096;
  if (auto e = (*w)->prepare(spec, 1, 30)) {
    ADD_FAILURE() << llvm::toString(std::move(e));
    return nullptr;
  }
  return std::move(*w);
}

struct ScopedEnv {
  std::string name;
  ScopedEnv(const char *n, const char *v) : name(n) { ::setenv(n, v, 1); }
  ~ScopedEnv() { ::unsetenv(name.c_str()); }
};

/// Waits until process `pid` (a child of this one, not yet reaped) has
/// exited; false if it is still running after a minute.
bool waitUntilExited(pid_t pid) {
  for (int i = 0; i < 60000; ++i) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    std::getline(stat, line);
    size_t paren = line.rfind(')');
    if (paren == std::string::npos || line.substr(paren + 2, 1) == "Z")
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

extern "C" char **environ;

/// A worker binary started as the tuner starts it (`--serve-fd 3` or
/// `--compile-fd 3`), spoken to directly.
struct RawChild {
  pid_t pid = -1;
  int fd = -1;
  explicit RawChild(const std::string &path, std::vector<std::string> args) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
      return;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, sv[1], 3);
    std::vector<char *> argv = {const_cast<char *>(path.c_str())};
    for (std::string &a : args)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    if (::posix_spawn(&pid, path.c_str(), &fa, nullptr, argv.data(), environ) != 0)
      pid = -1;
    posix_spawn_file_actions_destroy(&fa);
    ::close(sv[1]);
    fd = sv[0];
  }
  json ask(const json &request) {
    json reply;
    EXPECT_TRUE(worker::sendMessage(fd, request));
    EXPECT_EQ(worker::receiveMessage(fd, 60, reply), worker::Received::Message);
    return reply;
  }
  /// Closes the connection and returns the exit status.
  int finish() {
    ::close(fd);
    int status = 0;
    if (::waitpid(pid, &status, 0) != pid)
      return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
};

} // namespace

TEST(Worker, FindsTheBuiltWorkerOrNamesWhereItLooked) {
  {
    ScopedEnv env("TILEJIT_WORKER", "/nonexistent/tilejit-worker");
    auto w = findWorker();
    ASSERT_FALSE(bool(w));
    std::string msg = llvm::toString(w.takeError());
    EXPECT_NE(msg.find("TILEJIT_WORKER"), std::string::npos) << msg;
    EXPECT_NE(msg.find("/nonexistent/tilejit-worker"), std::string::npos) << msg;
  }
  auto w = findWorker();
  ASSERT_TRUE(bool(w)) << llvm::toString(w.takeError());
  EXPECT_NE(w->find("tilejit-worker"), std::string::npos) << *w;
  auto given = findWorker(fakeWorker());
  ASSERT_TRUE(bool(given));
  EXPECT_EQ(*given, fakeWorker());
}

TEST(Worker, FailuresCostTheWorkerNotTheTuner) {
  auto w = prepared(fakeOptions());
  ASSERT_TRUE(w);
  WorkerProcess &worker = *w;
  auto expect = [&](int behaviour, const char *status, const char *detail) {
    auto m = worker.measure(fakeKernel(behaviour));
    ASSERT_TRUE(bool(m)) << llvm::toString(m.takeError());
    EXPECT_EQ(m->status, status) << "behaviour " << behaviour << ": " << m->detail;
    EXPECT_NE(m->detail.find(detail), std::string::npos) << m->detail;
  };
  // A candidate that ran: the fake worker's numbers, as it sent them.
  auto expectOk = [&] {
    auto m = worker.measure(fakeKernel(1));
    ASSERT_TRUE(bool(m)) << llvm::toString(m.takeError());
    EXPECT_EQ(m->status, "ok") << m->detail;
    EXPECT_EQ(m->detail, "");
    EXPECT_EQ(m->medianMs, 1.0);
    EXPECT_EQ(m->p20Ms, 0.9);
    EXPECT_EQ(m->p80Ms, 1.1);
    EXPECT_EQ(m->reps, 30);
    EXPECT_EQ(m->registers, 32);
    EXPECT_EQ(m->spillBytes, 0);
  };
  pid_t first = worker.pid();
  expectOk();
  expect(5, "launch", "INVALID_VALUE");
  expect(6, "verify", "differs");
  EXPECT_EQ(worker.pid(), first); // ordinary failures keep the worker
  EXPECT_EQ(worker.lost(), 0);
  expect(2, "fault", "signal 6"); // abort() while measuring
  expectOk();                     // on a fresh worker
  EXPECT_EQ(worker.lost(), 1);
  EXPECT_NE(worker.pid(), first);
  expect(3, "timeout", "did not finish within 1 s"); // hangs: killed at the limit
  EXPECT_EQ(worker.lost(), 2);
  expect(4, "fault", "ILLEGAL_ADDRESS"); // reports a broken context and exits
  expectOk();
  EXPECT_EQ(worker.lost(), 3);
  // A new tuning on the same worker starts counting again.
  rmsnorm::Params other;
  other.cols = 512;
  ASSERT_FALSE(bool(worker.prepare(other, 2, 30)));
  EXPECT_EQ(worker.lost(), 0);
  expectOk();
}

TEST(Worker, GivesUpWhenWorkersKeepDying) {
  auto o = fakeOptions();
  o.maxRestarts = 2;
  auto w = prepared(o);
  ASSERT_TRUE(w);
  for (int i = 0; i < 3; ++i) {
    auto m = w->measure(fakeKernel(2));
    ASSERT_TRUE(bool(m)) << llvm::toString(m.takeError());
    EXPECT_EQ(m->status, "fault");
  }
  auto m = w->measure(fakeKernel(1));
  ASSERT_FALSE(bool(m));
  EXPECT_NE(llvm::toString(m.takeError()).find("lost 3 times"), std::string::npos);
}

TEST(Worker, AWorkerThatCannotStartIsAnError) {
  for (const char *how : {"fail", "crash"}) {
    ScopedEnv env("TILEJIT_FAKE_WORKER_INIT", how);
    auto w = prepared(fakeOptions());
    ASSERT_TRUE(w);
    auto m = w->measure(fakeKernel(1));
    ASSERT_FALSE(bool(m)) << how;
    std::string msg = llvm::toString(m.takeError());
    EXPECT_NE(msg.find("could not prepare rmsnorm_fwd"), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::string(how) == "fail" ? "fake init failure" : "signal 6"),
              std::string::npos)
        << msg;
  }
  WorkerProcess::Options o = fakeOptions();
  o.path = "/nonexistent/tilejit-worker";
  auto w = WorkerProcess::start(o);
  ASSERT_FALSE(bool(w));
  EXPECT_NE(llvm::toString(w.takeError()).find("cannot start"), std::string::npos);
}

TEST(Worker, TheRealWorkerSaysWhyItCannotMeasure) {
  if (CudaDriver::get()) {
    GTEST_SKIP() << "a CUDA driver is present; the GPU tests run the real worker";
  }
  auto path = findWorker();
  ASSERT_TRUE(bool(path)) << llvm::toString(path.takeError());
  WorkerProcess::Options o = fakeOptions();
  o.path = *path;
  auto w = prepared(o);
  ASSERT_TRUE(w);
  auto m = w->measure(fakeKernel(1));
  ASSERT_FALSE(bool(m));
  std::string msg = llvm::toString(m.takeError());
  EXPECT_NE(msg.find("no CUDA driver"), std::string::npos) << msg;
}

TEST(CompilerProcess, CompilesLikeThisProcessAndSurvivesItsOwnDeath) {
  auto path = findWorker();
  ASSERT_TRUE(bool(path)) << llvm::toString(path.takeError());
  auto c = CompilerProcess::start(*path);
  ASSERT_TRUE(bool(c)) << llvm::toString(c.takeError());
  rmsnorm::Params spec;
  spec.cols = 1000;
  spec.align = 16;
  CompileOptions viaProcess;
  (*c)->useFor(viaProcess);
  for (Backend b : {Backend::Nvptx, Backend::Cuda}) {
    SCOPED_TRACE(backendName(b));
    CompileOptions inProcess;
    inProcess.backend = viaProcess.backend = b;
    auto here = compileKernel(spec, {}, inProcess);
    ASSERT_TRUE(bool(here)) << llvm::toString(here.takeError());
    auto there = compileKernel(spec, {}, viaProcess);
    ASSERT_TRUE(bool(there)) << llvm::toString(there.takeError());
    EXPECT_EQ(there->backend, backendName(b));
    EXPECT_EQ(there->ptx, here->ptx);
    EXPECT_EQ(there->cubin, here->cubin);
    EXPECT_GT(there->entries.front().registers, 0);
    EXPECT_EQ(there->entries.front().registers, here->entries.front().registers);
  }
  auto badPtx =
      (*c)->compile(".version 9.0\n.target sm_90a\nnonsense", "broken_ptx", "sm_90a", Backend::Nvptx);
  ASSERT_FALSE(bool(badPtx));
  std::string ptxMsg = llvm::toString(badPtx.takeError());
  EXPECT_NE(ptxMsg.find("ptxas (nvJitLink) assembly failed for 'broken_ptx'"), std::string::npos)
      << ptxMsg;
  EXPECT_NE(ptxMsg.find("syntax error"), std::string::npos) << "the log comes along: " << ptxMsg;

  auto bad = (*c)->compile("this is not CUDA", "broken", "sm_90a");
  ASSERT_FALSE(bool(bad));
  std::string msg = llvm::toString(bad.takeError());
  EXPECT_NE(msg.find("NVRTC compilation failed for 'broken'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("error"), std::string::npos) << "the log comes along: " << msg;

  // A compiler process that dies is replaced by the next compile.
  pid_t before = (*c)->pid();
  ASSERT_EQ(::kill(before, SIGKILL), 0);
  auto first = compileKernel(spec, {}, viaProcess);
  ASSERT_FALSE(bool(first));
  llvm::Error lost = first.takeError();
  EXPECT_TRUE(lost.isA<CompileInterrupted>()) << "a lost process is no fault of the kernel's";
  std::string died = llvm::toString(std::move(lost));
  EXPECT_NE(died.find("the compiler process killed by signal 9"), std::string::npos) << died;
  EXPECT_NE(died.find("rmsnorm_fwd"), std::string::npos) << "names the kernel: " << died;
  auto again = (*c)->compile("extern \"C\" __global__ void k() {}", "again", "sm_90a");
  ASSERT_TRUE(bool(again)) << llvm::toString(again.takeError());
  EXPECT_FALSE(again->cubin.empty());
  EXPECT_NE((*c)->pid(), before);
}

TEST(Worker, MeasuringBeforePreparingIsAnError) {
  auto w = WorkerProcess::start(fakeOptions());
  ASSERT_TRUE(bool(w)) << llvm::toString(w.takeError());
  auto m = (*w)->measure(fakeKernel(1));
  ASSERT_FALSE(bool(m));
  EXPECT_NE(llvm::toString(m.takeError()).find("not told what to prepare"), std::string::npos);
}

// A worker that dies between its prepare and the first candidate cannot have
// been killed by that candidate: a fresh worker takes it, and nothing is
// counted as lost.
TEST(Worker, ADeathBeforeTheFirstCandidateIsRetriedOnAFreshWorker) {
  tilejit::testing::TempDir dir;
  std::string init = "exit-once:" + dir.file("exited");
  ScopedEnv env("TILEJIT_FAKE_WORKER_INIT", init.c_str());
  auto w = prepared(fakeOptions());
  ASSERT_TRUE(w);
  pid_t first = w->pid();
  ASSERT_TRUE(waitUntilExited(first)) << "the fake worker did not exit after its prepare";
  auto m = w->measure(fakeKernel(1));
  ASSERT_TRUE(bool(m)) << llvm::toString(m.takeError());
  EXPECT_EQ(m->status, "ok") << m->detail;
  EXPECT_EQ(m->medianMs, 1.0);
  EXPECT_NE(w->pid(), first);
  EXPECT_EQ(w->lost(), 0);
}

TEST(Worker, TheRealWorkerRefusesRequestsItCannotServe) {
  auto path = findWorker();
  ASSERT_TRUE(bool(path)) << llvm::toString(path.takeError());
  RawChild child(*path, {"--serve-fd", "3", "--device", "0"});
  ASSERT_GT(child.pid, 0);
  json unknown = child.ask({{"op", "frobnicate"}});
  EXPECT_EQ(unknown.value("status", ""), "launch");
  EXPECT_EQ(unknown.value("detail", ""), "malformed request: unknown request 'frobnicate'");
  json early = child.ask({{"op", "measure"}, {"config", "vec=8"}});
  EXPECT_EQ(early.value("status", ""), "launch");
  EXPECT_EQ(early.value("detail", ""),
            "malformed request: a candidate came before a successful prepare");
  EXPECT_EQ(child.finish(), 0) << "a closed connection ends the worker cleanly";
}

TEST(CompilerProcess, BadRepliesAreErrorsAndALostProcessIsReplaced) {
  auto c = CompilerProcess::start(fakeWorker());
  ASSERT_TRUE(bool(c)) << llvm::toString(c.takeError());
  auto ok = (*c)->compile("fine", "k", "sm_90a");
  ASSERT_TRUE(bool(ok)) << llvm::toString(ok.takeError());
  EXPECT_EQ(std::string(ok->cubin.begin(), ok->cubin.end()), "fake");
  pid_t first = (*c)->pid();

  auto failed = (*c)->compile("FAKE_ERROR", "k", "sm_90a");
  ASSERT_FALSE(bool(failed));
  llvm::Error e = failed.takeError();
  EXPECT_FALSE(e.isA<CompileInterrupted>()) << "the kernel's own error";
  EXPECT_EQ(llvm::toString(std::move(e)), "fake compile error");

  auto noCubin = (*c)->compile("FAKE_NO_CUBIN", "nocubin", "sm_90a");
  ASSERT_FALSE(bool(noCubin));
  EXPECT_EQ(llvm::toString(noCubin.takeError()),
            "the compiler process sent no cubin for 'nocubin'");

  auto unreadable = (*c)->compile("FAKE_UNREADABLE", "k", "sm_90a");
  ASSERT_FALSE(bool(unreadable));
  EXPECT_EQ(llvm::toString(unreadable.takeError()),
            "the compiler process sent an unreadable reply");
  EXPECT_EQ((*c)->pid(), first) << "replies it could read keep the process";

  for (const char *how : {"FAKE_GARBAGE", "FAKE_EXIT"}) {
    SCOPED_TRACE(how);
    auto lost = (*c)->compile(how, "lostone", "sm_90a");
    ASSERT_FALSE(bool(lost));
    llvm::Error le = lost.takeError();
    EXPECT_TRUE(le.isA<CompileInterrupted>()) << "a lost process is no fault of the kernel's";
    std::string msg = llvm::toString(std::move(le));
    EXPECT_NE(msg.find("compiling 'lostone'"), std::string::npos) << msg;
    auto again = (*c)->compile("fine", "k", "sm_90a");
    ASSERT_TRUE(bool(again)) << llvm::toString(again.takeError());
    EXPECT_NE((*c)->pid(), first) << "a fresh process took over";
    first = (*c)->pid();
  }
}

// On a GPU, after a successful prepare: a candidate the worker cannot read is
// a launch failure saying what was wrong, and the worker serves on. (Named
// for the gpu_tuner test; skipped without a GPU.)
TEST(GpuTunerWorker, TheRealWorkerRefusesMalformedCandidates) {
  auto info = queryDevice(0);
  if (!info)
    GTEST_SKIP() << "no GPU here: " << llvm::toString(info.takeError());
  auto path = findWorker();
  ASSERT_TRUE(bool(path)) << llvm::toString(path.takeError());
  RawChild child(*path, {"--serve-fd", "3", "--device", "0"});
  ASSERT_GT(child.pid, 0);
  rmsnorm::Params spec;
  spec.rows = 64;
  spec.cols = 4096;
  auto target = info->target();
  ASSERT_TRUE(bool(target)) << llvm::toString(target.takeError());
  spec.target = *target;
  json ready = child.ask(
      {{"op", "prepare"}, {"spec", KernelSpec(spec).canonical(true)}, {"seed", 1}, {"reps", 3}});
  ASSERT_TRUE(ready.value("ok", false)) << ready.dump();
  json cubin = json::binary_t(std::vector<uint8_t>{'x'});
  struct Bad {
    json request;
    const char *says;
  };
  for (const Bad &bad : std::vector<Bad>{
           {{{"op", "measure"}, {"config", "vec=="}, {"entries", "[]"}, {"cubin", cubin}},
            "malformed request: "},
           {{{"op", "measure"}, {"config", "vec=8"}, {"entries", "not json"}, {"cubin", cubin}},
            "malformed request: "},
           {{{"op", "measure"}, {"config", "vec=8"}, {"entries", "[]"}},
            "malformed request: the request carries no cubin"}}) {
    SCOPED_TRACE(bad.request.dump());
    json reply = child.ask(bad.request);
    EXPECT_EQ(reply.value("status", ""), "launch");
    EXPECT_EQ(reply.value("detail", "").rfind(bad.says, 0), 0u) << reply.dump();
  }
  json unknown = child.ask({{"op", "frobnicate"}});
  EXPECT_EQ(unknown.value("status", ""), "launch") << "still serving";
  EXPECT_EQ(child.finish(), 0);
}
