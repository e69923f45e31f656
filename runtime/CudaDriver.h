//===- CudaDriver.h - the CUDA driver, loaded at run time ----------*- C++ -*-===//
//
// libcuda.so.1 is opened with dlopen on first use, so tilejit builds and runs
// (compiling, caching, serving) on machines without a GPU; asking for the GPU
// there gives a clean "no CUDA driver" error.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cuda.h>
#include <string>

#include "core/Target.h"
#include "llvm/Support/Error.h"

namespace tilejit {

struct CudaDriver {
#define TJ_CU_FN(name) decltype(&::name) name = nullptr;
#include "runtime/CudaDriverFunctions.def"
#undef TJ_CU_FN

  /// The process-wide driver, loaded and initialized once; an error names
  /// what is missing ("no CUDA driver: ...", "no CUDA device: ...").
  static llvm::Expected<const CudaDriver &> get();
  /// `what` failed: message with the driver's name and text for `r`.
  llvm::Error error(CUresult r, const llvm::Twine &what) const;
};

/// Checks a driver call; on failure returns the error from the enclosing
/// function (which must return llvm::Error or llvm::Expected).
#define TJ_CU_CHECK(drv, call)                                                                     \
  do {                                                                                             \
    CUresult tj_r_ = (drv).call;                                                                   \
    if (tj_r_ != CUDA_SUCCESS)                                                                     \
      return (drv).error(tj_r_, #call);                                                            \
  } while (0)

/// The primary context of device `ordinal`, made current on this thread.
llvm::Expected<CUcontext> useDevice(int ordinal = 0);

/// Makes device `ordinal`'s primary context current for a scope and restores
/// the caller's context after (a thread that had none keeps the device's).
class ScopedDevice {
public:
  static llvm::Expected<ScopedDevice> enter(int ordinal);
  /// Makes `context` current for a scope where another is (a launch on a
  /// device other than the thread's current one: PyTorch leaves the current
  /// device as it is for tensors on another GPU); nothing where it is.
  static llvm::Expected<ScopedDevice> enter(CUcontext context);
  ScopedDevice(ScopedDevice &&o) noexcept
      : previous_(o.previous_), context_(o.context_), active_(o.active_) {
    o.active_ = false;
  }
  ScopedDevice(const ScopedDevice &) = delete;
  ~ScopedDevice();
  /// The device's primary context, current for the scope.
  CUcontext context() const { return context_; }

private:
  ScopedDevice() = default;
  CUcontext previous_ = nullptr;
  CUcontext context_ = nullptr;
  bool active_ = false;
};

/// A module (a cubin's kernels) loaded into the current context; unloaded
/// when destroyed.
class LoadedModule {
public:
  static llvm::Expected<LoadedModule> load(const void *image);
  LoadedModule() = default;
  LoadedModule(LoadedModule &&o) noexcept : module_(o.module_) { o.module_ = nullptr; }
  LoadedModule &operator=(LoadedModule &&o) noexcept;
  LoadedModule(const LoadedModule &) = delete;
  ~LoadedModule();
  /// Kernel `name`, or an error naming it.
  llvm::Expected<CUfunction> function(const char *name) const;

private:
  CUmodule module_ = nullptr;
};

struct DeviceInfo {
  std::string name;
  int ordinal = 0;
  int smCount = 0;
  int ccMajor = 0, ccMinor = 0;
  int clockKHz = 0, memClockKHz = 0;
  int driverVersion = 0;
  size_t totalMemory = 0;
  /// "sm_90a" for compute capability 9.0 (wgmma needs the "a" target), else "sm_XY".
  std::string arch() const;
  /// The target kernels for this GPU are built for (an error for a GPU of an
  /// arch tilejit does not build for).
  llvm::Expected<Target> target() const;
};
llvm::Expected<DeviceInfo> queryDevice(int ordinal = 0);

} // namespace tilejit
