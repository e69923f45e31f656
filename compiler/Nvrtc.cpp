//===- Nvrtc.cpp ------------------------------------------------------------===//
#include "compiler/Nvrtc.h"

#include <memory>
#include <nvrtc.h>
#include <vector>

#include "compiler/EmbeddedSources.h"

namespace tilejit {

namespace {
struct ProgramDeleter {
  void operator()(nvrtcProgram *p) const {
    if (p && *p)
      nvrtcDestroyProgram(p);
    delete p;
  }
};

llvm::Error nvrtcError(std::string_view name, const char *what, nvrtcResult r,
                       const std::string &log = "") {
  std::string msg = "NVRTC " + std::string(what) + " failed for '" + std::string(name) +
                    "': " + nvrtcGetErrorString(r);
  if (!log.empty())
    msg += "\n" + log;
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}
} // namespace

std::string nvrtcVersionString() {
  int major = 0, minor = 0;
  if (::nvrtcVersion(&major, &minor) != NVRTC_SUCCESS)
    return "unknown";
  return std::to_string(major) + "." + std::to_string(minor);
}

llvm::Expected<NvrtcOutput> compileWithNvrtc(std::string_view source, std::string_view name,
                                             std::string_view arch) {
  size_t count = 0;
  const embedded::File *files = embedded::deviceFiles(count);
  std::vector<const char *> headers, headerNames;
  for (size_t i = 0; i < count; ++i) {
    headers.push_back(files[i].text);
    headerNames.push_back(files[i].name);
  }
  std::string src(source), progName(name);
  progName += ".cu";
  std::unique_ptr<nvrtcProgram, ProgramDeleter> prog(new nvrtcProgram(nullptr));
  nvrtcResult r = nvrtcCreateProgram(prog.get(), src.c_str(), progName.c_str(), int(count),
                                     headers.data(), headerNames.data());
  if (r != NVRTC_SUCCESS)
    return nvrtcError(name, "program creation", r);

  std::string archOpt = "--gpu-architecture=" + std::string(arch);
  // -minimal leaves out texture, device-runtime and launch declarations that
  // generated code never names: parsing NVRTC's built-in header falls from
  // about 25 to 6 ms, and a compile takes 10 to 20 % less (bench/NOTES.md).
  // --no-cache: where a CUDA driver is present, NVRTC 13 keeps what it
  // compiles in the driver's compute cache (~/.nv/ComputeCache) and answers a
  // repeated compile from there, without ptxas's report in the log, so the
  // registers and spills of every entry would be unknown (seen on the H200
  // host); tilejit keeps its own binaries, in process and in its store.
  const char *opts[] = {archOpt.c_str(),   "--std=c++17", "--ptxas-options=-v", "--fmad=true",
                        "-default-device", "-minimal",    "--no-cache"};
  r = nvrtcCompileProgram(*prog, int(std::size(opts)), opts);
  NvrtcOutput out;
  size_t logSize = 0;
  nvrtcGetProgramLogSize(*prog, &logSize);
  if (logSize > 1) {
    out.log.resize(logSize);
    nvrtcGetProgramLog(*prog, out.log.data());
    while (!out.log.empty() && (out.log.back() == '\0' || out.log.back() == '\n'))
      out.log.pop_back();
  }
  if (r != NVRTC_SUCCESS)
    return nvrtcError(name, "compilation", r, out.log);

  size_t ptxSize = 0;
  if ((r = nvrtcGetPTXSize(*prog, &ptxSize)) != NVRTC_SUCCESS)
    return nvrtcError(name, "PTX retrieval", r);
  out.ptx.resize(ptxSize);
  if ((r = nvrtcGetPTX(*prog, out.ptx.data())) != NVRTC_SUCCESS)
    return nvrtcError(name, "PTX retrieval", r);
  if (!out.ptx.empty() && out.ptx.back() == '\0')
    out.ptx.pop_back();

  size_t cubinSize = 0;
  if ((r = nvrtcGetCUBINSize(*prog, &cubinSize)) != NVRTC_SUCCESS)
    return nvrtcError(name, "cubin retrieval", r);
  out.cubin.resize(cubinSize);
  if ((r = nvrtcGetCUBIN(*prog, out.cubin.data())) != NVRTC_SUCCESS)
    return nvrtcError(name, "cubin retrieval", r);
  return out;
}

} // namespace tilejit
