//===- LoadedKernel.cpp -----------------------------------------------------===//
#include "runtime/LoadedKernel.h"

#include <cstring>

#include "runtime/CudaDriver.h"

namespace tilejit {

namespace {
llvm::Error argError(const EntryInfo &e, size_t i, const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "kernel " + e.name + ", argument " + llvm::Twine(i) + ": " + msg);
}

llvm::Error checkArgs(const EntryInfo &e, const KernelArg *args, size_t count) {
  if (count != e.params.size())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "kernel " + e.name + " takes " + llvm::Twine(e.params.size()) +
                                       " arguments, got " + llvm::Twine(count));
  for (size_t i = 0; i < count; ++i) {
    const ParamInfo &p = e.params[i];
    const KernelArg &a = args[i];
    switch (p.kind) {
    case ParamInfo::View:
      if (a.kind != KernelArg::View)
        return argError(e, i, "expected a tensor view");
      if (a.rank != p.staticSizes.size())
        return argError(e, i,
                        "expected rank " + llvm::Twine(p.staticSizes.size()) + ", got " +
                            llvm::Twine(int(a.rank)));
      for (size_t d = 0; d < p.staticSizes.size(); ++d) {
        if (a.sizes[d] < 0)
          return argError(e, i, "size " + llvm::Twine(d) + " is negative");
        if (p.staticSizes[d] >= 0 && a.sizes[d] != p.staticSizes[d])
          return argError(e, i,
                          "size " + llvm::Twine(d) + " is " + llvm::Twine(a.sizes[d]) +
                              " but the kernel was compiled for " + llvm::Twine(p.staticSizes[d]));
      }
      if (a.ptr == 0)
        return argError(e, i, "null device pointer");
      break;
    case ParamInfo::F32:
      if (a.kind != KernelArg::F32)
        return argError(e, i, "expected an f32 scalar");
      break;
    case ParamInfo::Index:
      if (a.kind != KernelArg::Index || a.i < 0)
        return argError(e, i, "expected a non-negative index");
      break;
    }
  }
  return llvm::Error::success();
}

int64_t evalGrid(const EntryInfo &e, const KernelArg *args) {
  int64_t sym[8];
  size_t n = e.grid.symbols.size();
  if (n > 8)
    return -1;
  for (size_t s = 0; s < n; ++s) {
    auto [arg, dim] = e.grid.symbols[s];
    sym[s] = dim < 0 ? args[arg].i : args[arg].sizes[dim];
  }
  return e.grid.evaluate(sym, n);
}
} // namespace

llvm::Expected<std::unique_ptr<LoadedKernel>> LoadedKernel::load(const CompiledKernel &c) {
  auto drv = CudaDriver::get();
  if (!drv)
    return drv.takeError();
  if (c.cubin.empty())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "kernel " + c.key.substr(0, 16) + " has no cubin to load");
  std::unique_ptr<LoadedKernel> k(new LoadedKernel());
  TJ_CU_CHECK(*drv, cuCtxGetCurrent(&k->context_));
  if (!k->context_)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "no current CUDA context to load kernel into");
  TJ_CU_CHECK(*drv, cuModuleLoadData(&k->module_, c.cubin.data()));
  for (const EntryInfo &e : c.entries) {
    CUfunction f;
    TJ_CU_CHECK(*drv, cuModuleGetFunction(&f, k->module_, e.name.c_str()));
    k->functions_.push_back(f);
  }
  k->entries_ = c.entries;
  // Resources as the driver sees them (the compile log may lack ptxas's report).
  for (size_t i = 0; i < k->entries_.size(); ++i) {
    int regs = 0, local = 0;
    if (drv->cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, k->functions_[i]) ==
        CUDA_SUCCESS)
      k->entries_[i].registers = regs;
    if (drv->cuFuncGetAttribute(&local, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, k->functions_[i]) ==
            CUDA_SUCCESS &&
        k->entries_[i].spillBytes == 0)
      k->entries_[i].spillBytes = local;
  }
  k->workspaceBytes_ = c.workspaceBytes;
  k->key_ = c.key;
  return k;
}

LoadedKernel::~LoadedKernel() {
  if (!module_)
    return;
  if (auto drv = CudaDriver::get())
    drv->cuModuleUnload(module_);
  else
    llvm::consumeError(drv.takeError());
}

llvm::Error LoadedKernel::launch(size_t entry, const KernelArg *args, size_t count,
                                 CUstream stream) const {
  if (entry >= entries_.size())
    return llvm::createStringError(llvm::inconvertibleErrorCode(), "no entry %zu", entry);
  const EntryInfo &e = entries_[entry];
  if (auto err = checkArgs(e, args, count))
    return err;
  // The grid rule counts program instances; each is a cluster of blocks when
  // the kernel was compiled with cluster dimensions (which the launch then
  // takes from the binary).
  int64_t grid = evalGrid(e, args);
  if (grid < 0 || grid > 0x7fffffff / e.clusterBlocks)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "kernel " + e.name + ": grid rule " + e.grid.str() + " gives " +
                                       llvm::Twine(grid) + " programs of " +
                                       llvm::Twine(e.clusterBlocks) + " blocks");
  if (grid == 0)
    return llvm::Error::success(); // nothing to do (zero rows)

  // Parameters are packed by value: a view as {pointer, sizes[rank]}.
  constexpr size_t kMaxArgs = 16;
  if (count > kMaxArgs)
    return llvm::createStringError(llvm::inconvertibleErrorCode(), "too many arguments");
  alignas(8) unsigned char storage[kMaxArgs][8 * 5];
  void *params[kMaxArgs];
  for (size_t i = 0; i < count; ++i) {
    const KernelArg &a = args[i];
    unsigned char *p = storage[i];
    switch (a.kind) {
    case KernelArg::View:
      std::memcpy(p, &a.ptr, 8);
      std::memcpy(p + 8, a.sizes, 8 * a.rank);
      break;
    case KernelArg::F32:
      std::memcpy(p, &a.f, 4);
      break;
    case KernelArg::Index: {
      uint64_t v = uint64_t(a.i);
      std::memcpy(p, &v, 8);
      break;
    }
    }
    params[i] = p;
  }
  auto drv = CudaDriver::get();
  if (!drv)
    return drv.takeError();
  CUlaunchConfig cfg = {};
  cfg.gridDimX = unsigned(grid * e.clusterBlocks);
  cfg.gridDimY = cfg.gridDimZ = 1;
  cfg.blockDimX = unsigned(e.blockThreads);
  cfg.blockDimY = cfg.blockDimZ = 1;
  cfg.sharedMemBytes = 0; // kernels use static shared memory only
  cfg.hStream = stream;
  TJ_CU_CHECK(*drv, cuLaunchKernelEx(&cfg, functions_[entry], params, nullptr));
  return llvm::Error::success();
}

} // namespace tilejit
