//===- LoadedKernel.cpp -----------------------------------------------------===//
#include "runtime/LoadedKernel.h"

#include <cstring>

#include "runtime/CudaDriver.h"
#include "llvm/ADT/SmallVector.h"

namespace tilejit {

namespace {
llvm::Error error(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

llvm::Error argError(const EntryInfo &e, size_t i, const llvm::Twine &msg) {
  std::string name = i < e.params.size() && !e.params[i].name.empty()
                         ? " (" + e.params[i].name + ")"
                         : std::string();
  return error("kernel " + e.name + ", argument " + llvm::Twine(i) + name + ": " + msg);
}

KernelArg::Kind argKindOf(ParamInfo::Kind k) {
  switch (k) {
  case ParamInfo::View:
    return KernelArg::View;
  case ParamInfo::F32:
    return KernelArg::F32;
  case ParamInfo::Index:
    return KernelArg::Index;
  case ParamInfo::I32:
    return KernelArg::I32;
  case ParamInfo::Ptr:
    return KernelArg::Ptr;
  case ParamInfo::TensorMap:
    return KernelArg::TensorMap;
  }
  return KernelArg::View;
}

/// The row strides view `a` passes for parameter `p` (with row strides):
/// its own, or those of dense rows.
void rowStrides(const ParamInfo &p, const KernelArg &a, int64_t (&out)[3]) {
  size_t n = p.staticStrides.size();
  int64_t dense = 1;
  for (size_t d = n; d-- > 0;) {
    dense *= a.sizes[d + 1];
    out[d] = a.nstrides ? a.strides[d] : dense;
  }
}

llvm::Error checkStrides(const EntryInfo &e, size_t i, const KernelArg &a) {
  const ParamInfo &p = e.params[i];
  size_t n = p.staticStrides.size();
  if (n == 0)
    return a.nstrides ? argError(e, i, "the kernel reads dense rows; the view has row strides")
                      : llvm::Error::success();
  if (a.nstrides != 0 && a.nstrides != n)
    return argError(e, i,
                    "expected " + llvm::Twine(n) + " row strides, got " + llvm::Twine(a.nstrides));
  int64_t strides[3];
  rowStrides(p, a, strides);
  int64_t elemBytes = dtypeBytes(p.elem), inner = 1;
  for (size_t d = n; d-- > 0;) {
    int64_t span = inner * a.sizes[d + 1];
    if (strides[d] < span || strides[d] % (16 / elemBytes) != 0)
      return argError(e, i,
                      "stride " + llvm::Twine(d) + " is " + llvm::Twine(strides[d]) +
                          " elements; it must be at least " + llvm::Twine(span) +
                          " (the rows it spans) and a multiple of " + llvm::Twine(16 / elemBytes) +
                          " (16 bytes)");
    if (p.staticStrides[d] >= 0 && strides[d] != p.staticStrides[d])
      return argError(e, i,
                      "stride " + llvm::Twine(d) + " is " + llvm::Twine(strides[d]) +
                          " but the kernel was compiled for " + llvm::Twine(p.staticStrides[d]));
    inner = strides[d];
  }
  return llvm::Error::success();
}

llvm::Error checkArgs(const EntryInfo &e, const KernelArg *args, size_t count) {
  if (count != e.params.size())
    return error("kernel " + e.name + " takes " + llvm::Twine(e.params.size()) +
                 " arguments, got " + llvm::Twine(count));
  for (size_t i = 0; i < count; ++i) {
    const ParamInfo &p = e.params[i];
    const KernelArg &a = args[i];
    if (a.kind != argKindOf(p.kind))
      return argError(e, i, llvm::Twine("expected ") + ParamInfo::kindName(p.kind));
    switch (p.kind) {
    case ParamInfo::View:
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
      if (auto err = checkStrides(e, i, a))
        return err;
      break;
    case ParamInfo::Index:
      if (a.i < 0)
        return argError(e, i, "expected a non-negative index");
      break;
    case ParamInfo::I32:
      if (a.i < INT32_MIN || a.i > INT32_MAX)
        return argError(e, i, "does not fit in 32 bits");
      break;
    case ParamInfo::TensorMap:
      if (!a.map)
        return argError(e, i, "no tensor map");
      break;
    case ParamInfo::F32:
    case ParamInfo::Ptr:
      break;
    }
  }
  return llvm::Error::success();
}

/// Each grid dimension in blocks: the rule's programs times the cluster.
llvm::Error gridOf(const EntryInfo &e, const KernelArg *args, int64_t (&grid)[3]) {
  static const char *const kDim[] = {"x", "y", "z"};
  const int64_t limit[] = {0x7fffffff, 65535, 65535};
  for (int d = 0; d < 3; ++d) {
    const GridRule &g = e.grid[size_t(d)];
    int64_t sym[8];
    size_t n = g.symbols.size();
    int64_t programs = -1;
    if (n <= 8) {
      for (size_t s = 0; s < n; ++s) {
        auto [arg, dim] = g.symbols[s];
        sym[s] = dim < 0 ? args[arg].i : args[arg].sizes[dim];
      }
      programs = g.evaluate(sym, n);
    }
    int c = e.cluster[size_t(d)];
    if (programs < 0 || programs > limit[d] / c)
      return error("kernel " + e.name + ": grid rule " + kDim[d] + " " + g.str() + " gives " +
                   llvm::Twine(programs) + " programs of " + llvm::Twine(c) + " blocks");
    grid[d] = programs * c;
  }
  return llvm::Error::success();
}

/// The parameters the compiler derived must be the binary's: as many, in
/// order, each of the size the driver reads from the cubin. (Offsets are
/// ptxas's choice: an over-aligned parameter such as a tensor map is aligned
/// in the constant bank, not from the start of the parameters; the driver
/// copies each argument to its offset.)
llvm::Error checkParams(const CudaDriver &drv, const EntryInfo &e, CUfunction f) {
  size_t last = 0;
  for (size_t i = 0; i < e.params.size(); ++i) {
    size_t offset = 0, size = 0;
    CUresult r = drv.cuFuncGetParamInfo(f, i, &offset, &size);
    if (r != CUDA_SUCCESS)
      return drv.error(r, "cuFuncGetParamInfo(" + e.name + ", " + llvm::Twine(i) +
                              "): the binary has fewer parameters than its launch information");
    if (size != e.params[i].bytes() || (i > 0 && offset <= last))
      return argError(e, i,
                      "the binary has it as " + llvm::Twine(size) + " bytes at offset " +
                          llvm::Twine(offset) + "; its launch information says " +
                          llvm::Twine(e.params[i].bytes()) +
                          " bytes (the binary and its record disagree)");
    last = offset;
  }
  size_t extraOffset = 0, extraSize = 0;
  if (drv.cuFuncGetParamInfo(f, e.params.size(), &extraOffset, &extraSize) == CUDA_SUCCESS)
    return error("kernel " + e.name + " has more parameters than the " +
                 llvm::Twine(e.params.size()) + " of its launch information");
  return llvm::Error::success();
}
} // namespace

llvm::Expected<std::unique_ptr<LoadedKernel>> LoadedKernel::load(const KernelBinary &c) {
  if (c.cubin.empty())
    return error("kernel " + c.key.substr(0, 16) + " has no cubin to load");
  if (c.entries.empty())
    return error("kernel " + c.key.substr(0, 16) + " has no entry points");
  for (const EntryInfo &e : c.entries)
    if (auto err = e.validate())
      return err;
  auto drv = CudaDriver::get();
  if (!drv)
    return drv.takeError();
  std::unique_ptr<LoadedKernel> k(new LoadedKernel());
  TJ_CU_CHECK(*drv, cuCtxGetCurrent(&k->context_));
  if (!k->context_)
    return error("no current CUDA context to load kernel into");
  auto module = LoadedModule::load(c.cubin.data());
  if (!module)
    return module.takeError();
  k->module_ = std::move(*module);
  for (const EntryInfo &e : c.entries) {
    auto fn = k->module_.function(e.name.c_str());
    if (!fn)
      return fn.takeError();
    CUfunction f = *fn;
    if (auto err = checkParams(*drv, e, f))
      return err;
    if (e.staticSmemBytes + e.dynamicSmemBytes > Target::kStaticSharedBytes)
      TJ_CU_CHECK(*drv, cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                           e.dynamicSmemBytes));
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
  k->spec_ = c.spec;
  return k;
}

llvm::Expected<std::array<int64_t, 3>> LoadedKernel::gridFor(size_t entry, const KernelArg *args,
                                                             size_t count) const {
  if (entry >= entries_.size())
    return error("no entry " + llvm::Twine(entry));
  const EntryInfo &e = entries_[entry];
  if (auto err = checkArgs(e, args, count))
    return err;
  int64_t grid[3];
  if (auto err = gridOf(e, args, grid))
    return err;
  return std::array<int64_t, 3>{grid[0], grid[1], grid[2]};
}

llvm::Error LoadedKernel::launch(size_t entry, const KernelArg *args, size_t count,
                                 CUstream stream) const {
  auto grid = gridFor(entry, args, count); // checks the entry and the arguments
  if (!grid)
    return grid.takeError();
  const EntryInfo &e = entries_[entry];
  if ((*grid)[0] == 0 || (*grid)[1] == 0 || (*grid)[2] == 0)
    return llvm::Error::success(); // nothing to do (zero rows)

  // Each argument by value, in the layout of ParamInfo::bytes(): the driver
  // copies each from its pointer.
  struct alignas(8) Slot {
    unsigned char bytes[8 * 8]; // a view's pointer, 4 sizes, 3 strides
  };
  llvm::SmallVector<Slot, 16> storage(count);
  llvm::SmallVector<void *, 16> params(count);
  for (size_t i = 0; i < count; ++i) {
    const KernelArg &a = args[i];
    unsigned char *p = storage[i].bytes;
    switch (a.kind) {
    case KernelArg::View:
      std::memcpy(p, &a.ptr, 8);
      std::memcpy(p + 8, a.sizes, 8 * a.rank);
      if (size_t n = e.params[i].staticStrides.size()) {
        int64_t strides[3];
        rowStrides(e.params[i], a, strides);
        std::memcpy(p + 8 + 8 * a.rank, strides, 8 * n);
      }
      break;
    case KernelArg::F32:
      std::memcpy(p, &a.f, 4);
      break;
    case KernelArg::Index: {
      uint64_t v = uint64_t(a.i);
      std::memcpy(p, &v, 8);
      break;
    }
    case KernelArg::I32: {
      int32_t v = int32_t(a.i);
      std::memcpy(p, &v, 4);
      break;
    }
    case KernelArg::Ptr:
      std::memcpy(p, &a.ptr, 8);
      break;
    case KernelArg::TensorMap:
      params[i] = const_cast<void *>(a.map);
      continue;
    }
    params[i] = p;
  }
  auto drv = CudaDriver::get();
  if (!drv)
    return drv.takeError();
  CUlaunchConfig cfg = launchConfig(entry, *grid, stream);
  TJ_CU_CHECK(*drv, cuLaunchKernelEx(&cfg, functions_[entry], params.data(), nullptr));
  return llvm::Error::success();
}

CUlaunchConfig LoadedKernel::launchConfig(size_t entry, const std::array<int64_t, 3> &grid,
                                          CUstream stream) const {
  const EntryInfo &e = entries_[entry];
  CUlaunchConfig cfg = {};
  cfg.gridDimX = unsigned(grid[0]);
  cfg.gridDimY = unsigned(grid[1]);
  cfg.gridDimZ = unsigned(grid[2]);
  cfg.blockDimX = unsigned(e.blockThreads);
  cfg.blockDimY = cfg.blockDimZ = 1;
  cfg.sharedMemBytes = unsigned(e.dynamicSmemBytes);
  cfg.hStream = stream;
  return cfg;
}

} // namespace tilejit
