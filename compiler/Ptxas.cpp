//===- Ptxas.cpp ------------------------------------------------------------===//
#include "compiler/Ptxas.h"

#include <nvJitLink.h>

namespace tilejit {

namespace {
llvm::Error linkError(std::string_view name, const char *what, nvJitLinkResult r,
                      const std::string &log = "") {
  std::string msg = "ptxas (nvJitLink) " + std::string(what) + " failed for '" + std::string(name) +
                    "': error " + std::to_string(int(r));
  if (!log.empty())
    msg += "\n" + log;
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\0' || s.back() == '\n'))
    s.pop_back();
  return s;
}
} // namespace

std::string ptxasVersionString() {
  unsigned major = 0, minor = 0;
  if (nvJitLinkVersion(&major, &minor) != NVJITLINK_SUCCESS)
    return "unknown";
  return std::to_string(major) + "." + std::to_string(minor);
}

llvm::Expected<NvrtcOutput> assembleWithPtxas(std::string_view ptx, std::string_view name,
                                              std::string_view arch) {
  std::string archOpt = "-arch=" + std::string(arch);
  // -verbose: ptxas's report of registers and spills per entry. -no-cache:
  // where a CUDA driver is present, nvJitLink answers a repeated job from the
  // driver's compute cache, and that answer has no report (seen on the H200
  // host, as with NVRTC); tilejit keeps its own binaries.
  const char *opts[] = {archOpt.c_str(), "-O3", "-verbose", "-no-cache"};
  nvJitLinkHandle h = nullptr;
  nvJitLinkResult r = nvJitLinkCreate(&h, uint32_t(std::size(opts)), opts);
  if (r != NVJITLINK_SUCCESS)
    return linkError(name, "set-up", r);
  struct Destroy {
    nvJitLinkHandle &h;
    ~Destroy() { nvJitLinkDestroy(&h); }
  } destroy{h};
  auto logs = [&] {
    std::string info, error;
    size_t n = 0;
    if (nvJitLinkGetInfoLogSize(h, &n) == NVJITLINK_SUCCESS && n > 1) {
      info.resize(n);
      nvJitLinkGetInfoLog(h, info.data());
    }
    if (nvJitLinkGetErrorLogSize(h, &n) == NVJITLINK_SUCCESS && n > 1) {
      error.resize(n);
      nvJitLinkGetErrorLog(h, error.data());
    }
    return std::make_pair(trimmed(info), trimmed(error));
  };
  std::string label(name);
  r = nvJitLinkAddData(h, NVJITLINK_INPUT_PTX, ptx.data(), ptx.size(), label.c_str());
  if (r == NVJITLINK_SUCCESS)
    r = nvJitLinkComplete(h);
  auto [info, error] = logs();
  if (r != NVJITLINK_SUCCESS)
    return linkError(name, "assembly", r, error.empty() ? info : error + "\n" + info);
  NvrtcOutput out;
  out.log = std::move(info);
  size_t size = 0;
  if ((r = nvJitLinkGetLinkedCubinSize(h, &size)) != NVJITLINK_SUCCESS)
    return linkError(name, "cubin retrieval", r);
  out.cubin.resize(size);
  if ((r = nvJitLinkGetLinkedCubin(h, out.cubin.data())) != NVJITLINK_SUCCESS)
    return linkError(name, "cubin retrieval", r);
  return out;
}

} // namespace tilejit
