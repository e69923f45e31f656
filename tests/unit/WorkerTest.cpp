// The tuner's measuring worker: finding it, and surviving workers that crash,
// hang, or report a broken GPU context (with a fake worker; no GPU needed).
#include <cstdlib>
#include <gtest/gtest.h>
#include <signal.h>

#include "autotune/Worker.h"
#include "compiler/Compiler.h"
#include "runtime/CudaDriver.h"

using namespace tilejit;

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
  KernelSpec spec;
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
  KernelSpec other;
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
  KernelSpec spec;
  spec.cols = 1000;
  spec.align = 16;
  CompileOptions viaProcess;
  (*c)->useFor(viaProcess);
  for (Backend b : {Backend::Ptx, Backend::Cuda}) {
    SCOPED_TRACE(backendName(b));
    CompileOptions inProcess;
    inProcess.backend = viaProcess.backend = b;
    auto here = compileKernel(spec, {}, inProcess);
    ASSERT_TRUE(bool(here)) << llvm::toString(here.takeError());
    auto there = compileKernel(spec, {}, viaProcess);
    ASSERT_TRUE(bool(there)) << llvm::toString(there.takeError());
    EXPECT_EQ(there->backend, b);
    EXPECT_EQ(there->ptx, here->ptx);
    EXPECT_EQ(there->cubin, here->cubin);
    EXPECT_GT(there->entries.front().registers, 0);
    EXPECT_EQ(there->entries.front().registers, here->entries.front().registers);
  }
  auto badPtx =
      (*c)->compile(".version 9.0\n.target sm_90a\nnonsense", "broken_ptx", "sm_90a", Backend::Ptx);
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
