//===- CudaDriver.cpp -------------------------------------------------------===//
#include "runtime/CudaDriver.h"

#include "core/Settings.h"

#include <dlfcn.h>
#include <mutex>

namespace tilejit {

namespace {
llvm::Error plainError(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

struct Loaded {
  CudaDriver driver;
  std::string error; // empty when loaded
};

Loaded load() {
  Loaded l;
  std::string chosen = settings::value("TILEJIT_CUDA_DRIVER");
  const char *path = chosen.empty() ? "libcuda.so.1" : chosen.c_str();
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *why = dlerror();
    l.error = std::string("no CUDA driver: cannot load ") + path + " (" +
              (why ? why : "unknown reason") + ")";
    return l;
  }
#define TJ_CU_FN(name)                                                                             \
  l.driver.name = reinterpret_cast<decltype(&::name)>(dlsym(lib, #name));                          \
  if (!l.driver.name) {                                                                            \
    l.error = std::string("CUDA driver ") + path +                                                 \
              " lacks " #name " (a driver for CUDA 12.4 or later is needed)";                      \
    return l;                                                                                      \
  }
#include "runtime/CudaDriverFunctions.def"
#undef TJ_CU_FN
  CUresult r = l.driver.cuInit(0);
  if (r != CUDA_SUCCESS) {
    const char *name = nullptr;
    l.driver.cuGetErrorName(r, &name);
    l.error = std::string("no CUDA device: cuInit failed with ") + (name ? name : "?");
  }
  return l;
}
} // namespace

llvm::Expected<const CudaDriver &> CudaDriver::get() {
  static Loaded loaded = load();
  if (!loaded.error.empty())
    return plainError(loaded.error);
  return loaded.driver;
}

llvm::Error CudaDriver::error(CUresult r, const llvm::Twine &what) const {
  const char *name = nullptr, *text = nullptr;
  if (cuGetErrorName)
    cuGetErrorName(r, &name);
  if (cuGetErrorString)
    cuGetErrorString(r, &text);
  return plainError(what + " failed: " + (name ? name : "CUDA error") + " (" +
                    (text ? text : "no description") + ")");
}

llvm::Expected<LoadedModule> LoadedModule::load(const void *image) {
  auto drv = CudaDriver::get();
  if (!drv)
    return drv.takeError();
  LoadedModule m;
  TJ_CU_CHECK(*drv, cuModuleLoadData(&m.module_, image));
  return m;
}

LoadedModule &LoadedModule::operator=(LoadedModule &&o) noexcept {
  if (this != &o) {
    LoadedModule gone(std::move(*this));
    module_ = o.module_;
    o.module_ = nullptr;
  }
  return *this;
}

LoadedModule::~LoadedModule() {
  if (!module_)
    return;
  if (auto drv = CudaDriver::get())
    drv->cuModuleUnload(module_);
  else
    llvm::consumeError(drv.takeError());
}

llvm::Expected<CUfunction> LoadedModule::function(const char *name) const {
  auto drv = CudaDriver::get();
  if (!drv)
    return drv.takeError();
  CUfunction f = nullptr;
  CUresult r = drv->cuModuleGetFunction(&f, module_, name);
  if (r != CUDA_SUCCESS)
    return drv->error(r, llvm::Twine("cuModuleGetFunction(") + name + ")");
  return f;
}

llvm::Expected<CUcontext> useDevice(int ordinal) {
  auto drv = CudaDriver::get();
  if (!drv)
    return drv.takeError();
  int count = 0;
  TJ_CU_CHECK(*drv, cuDeviceGetCount(&count));
  if (ordinal < 0 || ordinal >= count)
    return plainError("no CUDA device " + llvm::Twine(ordinal) + " (" + llvm::Twine(count) +
                      " present)");
  CUcontext current = nullptr;
  TJ_CU_CHECK(*drv, cuCtxGetCurrent(&current));
  CUdevice dev;
  TJ_CU_CHECK(*drv, cuDeviceGet(&dev, ordinal));
  CUcontext primary = nullptr;
  // Retained once per device for the life of the process, as the runtime API does.
  static std::mutex mu;
  static CUcontext retained[64] = {};
  {
    std::lock_guard<std::mutex> lock(mu);
    if (ordinal < 64 && retained[ordinal])
      primary = retained[ordinal];
    else {
      TJ_CU_CHECK(*drv, cuDevicePrimaryCtxRetain(&primary, dev));
      if (ordinal < 64)
        retained[ordinal] = primary;
    }
  }
  if (current != primary)
    TJ_CU_CHECK(*drv, cuCtxSetCurrent(primary));
  return primary;
}

llvm::Expected<ScopedDevice> ScopedDevice::enter(int ordinal) {
  auto drv = CudaDriver::get();
  if (!drv)
    return drv.takeError();
  ScopedDevice scope;
  TJ_CU_CHECK(*drv, cuCtxGetCurrent(&scope.previous_));
  auto ctx = useDevice(ordinal);
  if (!ctx)
    return ctx.takeError();
  scope.context_ = *ctx;
  scope.active_ = true;
  return scope;
}

llvm::Expected<ScopedDevice> ScopedDevice::enter(CUcontext context) {
  auto drv = CudaDriver::get();
  if (!drv)
    return drv.takeError();
  ScopedDevice scope;
  scope.context_ = context;
  TJ_CU_CHECK(*drv, cuCtxGetCurrent(&scope.previous_));
  if (scope.previous_ != context) {
    TJ_CU_CHECK(*drv, cuCtxSetCurrent(context));
    scope.active_ = true;
  }
  return scope;
}

ScopedDevice::~ScopedDevice() {
  // A thread that had no context keeps the device's: it will launch there.
  if (!active_ || !previous_)
    return;
  if (auto drv = CudaDriver::get())
    drv->cuCtxSetCurrent(previous_);
  else
    llvm::consumeError(drv.takeError());
}

std::string DeviceInfo::arch() const {
  std::string a = "sm_" + std::to_string(ccMajor) + std::to_string(ccMinor);
  if (ccMajor == 9 && ccMinor == 0)
    a += "a";
  return a;
}

llvm::Expected<Target> DeviceInfo::target() const {
  auto t = Target::forDevice(ccMajor, ccMinor, smCount);
  if (!t)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "GPU " + name + " is " + arch() +
            ", which tilejit does not build for (known: " + Target::knownArchs() + ")");
  return *t;
}

llvm::Expected<DeviceInfo> queryDevice(int ordinal) {
  auto drv = CudaDriver::get();
  if (!drv)
    return drv.takeError();
  auto ctx = useDevice(ordinal);
  if (!ctx)
    return ctx.takeError();
  CUdevice dev;
  TJ_CU_CHECK(*drv, cuDeviceGet(&dev, ordinal));
  DeviceInfo info;
  info.ordinal = ordinal;
  char name[256] = {};
  TJ_CU_CHECK(*drv, cuDeviceGetName(name, sizeof(name), dev));
  info.name = name;
  TJ_CU_CHECK(*drv,
              cuDeviceGetAttribute(&info.smCount, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
  TJ_CU_CHECK(
      *drv, cuDeviceGetAttribute(&info.ccMajor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
  TJ_CU_CHECK(
      *drv, cuDeviceGetAttribute(&info.ccMinor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
  TJ_CU_CHECK(*drv, cuDeviceGetAttribute(&info.clockKHz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, dev));
  TJ_CU_CHECK(*drv,
              cuDeviceGetAttribute(&info.memClockKHz, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, dev));
  TJ_CU_CHECK(*drv, cuDriverGetVersion(&info.driverVersion));
  TJ_CU_CHECK(*drv, cuDeviceTotalMem_v2(&info.totalMemory, dev));
  return info;
}

} // namespace tilejit
