//===- Ptxas.cpp ------------------------------------------------------------===//
#include "compiler/Ptxas.h"

#include "core/Settings.h"

#include <cstdlib>
#include <mutex>
#include <nvJitLink.h>

#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Program.h"

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

namespace {
/// "13.0", from nvJitLinkVersion().
std::string nvJitLinkRelease() {
  unsigned major = 0, minor = 0;
  if (nvJitLinkVersion(&major, &minor) != NVJITLINK_SUCCESS)
    return "unknown";
  return std::to_string(major) + "." + std::to_string(minor);
}
const std::string &ptxasProgram();
} // namespace

std::string ptxasVersionString() {
  // Whether a ptxas program is at hand decides what kernels that set register
  // limits become, so it is part of every key that carries this string.
  return nvJitLinkRelease() + (ptxasProgram().empty() ? " (nvJitLink only)" : "");
}

namespace {
/// The ptxas program of nvJitLink's release, or "" where there is none:
/// $TILEJIT_PTXAS, else $CUDA_HOME/bin, /usr/local/cuda/bin, then PATH.
const std::string &ptxasProgram() {
  static std::once_flag once;
  static std::string found;
  std::call_once(once, [] {
    std::vector<std::string> candidates;
    if (std::string p = settings::value("TILEJIT_PTXAS"); !p.empty())
      candidates.push_back(p);
    std::vector<llvm::StringRef> dirs;
    std::string home =
        std::getenv("CUDA_HOME") ? std::string(std::getenv("CUDA_HOME")) + "/bin" : std::string();
    if (!home.empty())
      dirs.push_back(home);
    dirs.push_back("/usr/local/cuda/bin");
    if (auto p = llvm::sys::findProgramByName("ptxas", dirs))
      candidates.push_back(*p);
    if (auto p = llvm::sys::findProgramByName("ptxas"))
      candidates.push_back(*p);
    std::string want = "release " + nvJitLinkRelease() + ",";
    for (const std::string &c : candidates) {
      llvm::SmallString<128> out;
      if (llvm::sys::fs::createTemporaryFile("tilejit-ptxas-version", "txt", out))
        return;
      std::optional<llvm::StringRef> redirects[] = {std::nullopt, llvm::StringRef(out),
                                                    llvm::StringRef(out)};
      llvm::StringRef args[] = {c, "--version"};
      int rc = llvm::sys::ExecuteAndWait(c, args, std::nullopt, redirects, 10);
      auto text = llvm::MemoryBuffer::getFile(out);
      llvm::sys::fs::remove(out);
      if (rc == 0 && text && (*text)->getBuffer().contains(want)) {
        found = c;
        return;
      }
    }
  });
  return found;
}

/// ptxas as a program: a whole-program compile, which honours setmaxnreg.
/// nvJitLink compiles PTX as one unit of a link and drops setmaxnreg ("ignored
/// to maintain compatibility across compilation units"), leaving a
/// warp-specialized kernel's consumers at the block's register limit.
llvm::Expected<NvrtcOutput> assembleWithProgram(const std::string &program, std::string_view ptx,
                                                std::string_view name, std::string_view arch) {
  auto fail = [&](const llvm::Twine &why) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "ptxas (" + program + ") failed for '" + std::string(name) +
                                       "': " + why);
  };
  llvm::SmallString<128> in, out, log;
  if (auto ec = llvm::sys::fs::createTemporaryFile("tilejit", "ptx", in))
    return fail("no temporary file: " + ec.message());
  llvm::scope_exit cleanup([&] {
    llvm::sys::fs::remove(in);
    if (!out.empty())
      llvm::sys::fs::remove(out);
    if (!log.empty())
      llvm::sys::fs::remove(log);
  });
  if (llvm::sys::fs::createTemporaryFile("tilejit", "cubin", out) ||
      llvm::sys::fs::createTemporaryFile("tilejit", "log", log))
    return fail("no temporary file");
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(in, ec);
    if (ec)
      return fail("cannot write the PTX: " + ec.message());
    os << ptx;
    if (os.has_error())
      return fail("cannot write the PTX");
  }
  std::string archOpt = "-arch=" + std::string(arch);
  llvm::StringRef args[] = {program, archOpt, "-O3", "-v", in, "-o", out};
  std::optional<llvm::StringRef> redirects[] = {std::nullopt, llvm::StringRef(log),
                                                llvm::StringRef(log)};
  std::string err;
  int rc = llvm::sys::ExecuteAndWait(program, args, std::nullopt, redirects, 600, 0, &err);
  auto text = llvm::MemoryBuffer::getFile(log);
  std::string logText = text ? trimmed((*text)->getBuffer().str()) : std::string();
  if (rc != 0)
    return fail("exit " + llvm::Twine(rc) + (err.empty() ? "" : " (" + err + ")") + "\n" + logText);
  auto cubin = llvm::MemoryBuffer::getFile(out, /*IsText=*/false, /*RequiresNullTerminator=*/false);
  if (!cubin)
    return fail("no cubin: " + cubin.getError().message());
  NvrtcOutput result;
  result.log = std::move(logText);
  result.cubin.assign((*cubin)->getBufferStart(), (*cubin)->getBufferEnd());
  return result;
}
} // namespace

llvm::Expected<NvrtcOutput> assembleWithPtxas(std::string_view ptx, std::string_view name,
                                              std::string_view arch) {
  if (ptx.find("setmaxnreg") != std::string_view::npos && !ptxasProgram().empty())
    return assembleWithProgram(ptxasProgram(), ptx, name, arch);
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
