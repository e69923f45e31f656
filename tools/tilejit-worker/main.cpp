//===- tilejit-worker - measures tuning candidates for a tuning process ----===//
//
// Started by the tuner (autotune/Worker.h) with one end of a socket pair as a
// descriptor, to measure candidates on the GPU or to compile them with NVRTC;
// not meant to be run by hand.
//
//===----------------------------------------------------------------------===//
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>

#include "autotune/Worker.h"

int main(int argc, char **argv) {
  auto number = [](const char *text, long &out) {
    char *end = nullptr;
    out = std::strtol(text, &end, 10);
    return end != text && *end == '\0' && out >= 0 && out < (1l << 30);
  };
  long fd = -1, device = -1;
  if (argc == 5 && std::strcmp(argv[1], "--serve-fd") == 0 && number(argv[2], fd) &&
      ::fcntl(int(fd), F_GETFD) != -1 && std::strcmp(argv[3], "--device") == 0 &&
      number(argv[4], device))
    return tilejit::runWorker(int(fd), int(device));
  if (argc == 3 && std::strcmp(argv[1], "--compile-fd") == 0 && number(argv[2], fd) &&
      ::fcntl(int(fd), F_GETFD) != -1)
    return tilejit::runCompiler(int(fd));
  std::fprintf(stderr, "tilejit-worker: error: this program measures tuning candidates for "
                       "`tilejit tune` and the tilejit engine, which start it; it takes "
                       "--serve-fd FD --device N, or --compile-fd FD (FD an open socket)\n");
  return 2;
}
