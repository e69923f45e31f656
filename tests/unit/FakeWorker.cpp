//===- FakeWorker.cpp - a measuring worker that misbehaves on request -------===//
//
// Speaks the worker protocol (autotune/Worker.h) without a GPU, so the tuner's
// handling of workers that crash, hang or report a broken context is tested
// everywhere. The candidate's `vec` value picks the behaviour:
//   1 ok, 2 abort(), 3 hang, 4 report "fault" and exit, 5 "launch" failure,
//   6 "verify" failure, 7 "launch" failure out of device memory, 8 "spills",
//   9 "verify" failure where the request asks for the check, else ok.
// Under sustained timing (the tuner's finals) a config's `sus` and `susfail`
// replace its `us` and `vec` where it has them.
// An ok candidate's median is its config's `us` value in microseconds (1 ms
// without one), p20 and p80 0.9 and 1.1 times that, over 30 samples; or, as
// the real worker's schedule does, one sample when the request's cutoff is
// set and the median is above it.
// TILEJIT_FAKE_WORKER_INIT=fail makes it refuse to prepare, =crash die first,
// =exit-once:FILE exit right after its first "ok" to a prepare unless FILE
// exists (which it then creates: the worker started after it behaves).
//
// With --compile-fd it is a compiler process; the request's source picks the
// reply: FAKE_ERROR a compile error, FAKE_NO_CUBIN no binary, FAKE_UNREADABLE
// a reply without "ok", FAKE_GARBAGE bytes that are no message, FAKE_EXIT no
// reply at all; anything else a 4-byte cubin "fake".
//
//===----------------------------------------------------------------------===//
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>

#include "autotune/WorkerProtocol.h"
#include "core/KernelSpec.h"

using nlohmann::json;
using namespace tilejit::worker;

namespace {

int fakeCompiler(int fd) {
  for (;;) {
    json msg;
    Received r = receiveMessage(fd, -1, msg);
    if (r != Received::Message)
      return r == Received::Closed ? 0 : 2;
    std::string source = msg.value("source", "");
    auto has = [&](const char *what) { return source.find(what) != std::string::npos; };
    json reply = {{"ok", true},
                  {"ptx", ""},
                  {"log", ""},
                  {"cubin", json::binary_t(std::vector<uint8_t>{'f', 'a', 'k', 'e'})}};
    if (has("FAKE_EXIT"))
      return 0;
    if (has("FAKE_GARBAGE")) {
      const char garbage[] = "\xff\xff\xff\x7fnot a message";
      return ::write(fd, garbage, sizeof garbage) < 0 ? 2 : 0;
    }
    if (has("FAKE_ERROR"))
      reply = {{"ok", false}, {"error", "fake compile error"}};
    else if (has("FAKE_NO_CUBIN"))
      reply.erase("cubin");
    else if (has("FAKE_UNREADABLE"))
      reply = {{"status", "whatever"}};
    if (!sendMessage(fd, reply))
      return 2;
  }
}

} // namespace

int main(int argc, char **argv) {
  if (argc == 3 && std::strcmp(argv[1], "--compile-fd") == 0)
    return fakeCompiler(std::atoi(argv[2]));
  if (argc != 5 || std::strcmp(argv[1], "--serve-fd") != 0)
    return 2;
  int fd = std::atoi(argv[2]);
  json msg;
  if (receiveMessage(fd, -1, msg) != Received::Message || msg.value("op", "") != "prepare")
    return 2;
  const char *init = std::getenv("TILEJIT_FAKE_WORKER_INIT");
  if (init && std::string(init) == "crash")
    std::abort();
  if (init && std::string(init) == "fail") {
    sendMessage(fd, json{{"ok", false}, {"error", "fake init failure"}});
    return 2;
  }
  sendMessage(fd, json{{"ok", true}});
  if (init && std::strncmp(init, "exit-once:", 10) == 0) {
    const char *marker = init + 10;
    if (::access(marker, F_OK) != 0) {
      if (FILE *f = std::fopen(marker, "w"))
        std::fclose(f);
      return 0;
    }
  }
  for (;;) {
    Received r = receiveMessage(fd, -1, msg);
    if (r != Received::Message)
      return r == Received::Closed ? 0 : 2;
    if (msg.value("op", "") == "prepare") {
      sendMessage(fd, json{{"ok", true}});
      continue;
    }
    auto config = tilejit::TileConfig::parse(msg.value("config", ""));
    int64_t behaviour = config ? config->get("vec") : 0;
    int64_t us = config && config->has("us") ? config->get("us") : 1000;
    bool sustained = msg.value("timing", "") == "sustained";
    if (config && config->has("sus") && sustained)
      us = config->get("sus");
    if (config && config->has("susfail") && sustained)
      behaviour = config->get("susfail");
    if (behaviour == 9)
      behaviour = msg.value("check", true) ? 6 : 1;
    if (!config)
      llvm::consumeError(config.takeError());
    double median = double(us) / 1000, cutoff = msg.value("cutoff_ms", 0.0);
    int reps = cutoff > 0 && median > cutoff ? 1 : 30;
    json reply = {{"status", "ok"},      {"detail", ""}, {"median", median}, {"p20", 0.9 * median},
                  {"p80", 1.1 * median}, {"reps", reps}, {"registers", 32},  {"spill", 0}};
    switch (behaviour) {
    case 1:
      break;
    case 2:
      std::abort();
    case 3:
      for (;;)
        ::pause();
    case 4:
      reply["status"] = "fault";
      reply["detail"] = "CUDA_ERROR_ILLEGAL_ADDRESS (fake)";
      sendMessage(fd, reply);
      return 3;
    case 5:
      reply["status"] = "launch";
      reply["detail"] = "CUDA_ERROR_INVALID_VALUE (fake)";
      break;
    case 7:
      reply["status"] = "launch";
      reply["detail"] = "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (fake)";
      break;
    case 8:
      reply["status"] = "spills";
      reply["detail"] = "uses 4096 bytes of local memory per thread (fake)";
      reply["spill"] = 4096;
      break;
    default:
      reply["status"] = "verify";
      reply["detail"] = "y differs (fake)";
      break;
    }
    if (!sendMessage(fd, reply))
      return 2;
  }
}
