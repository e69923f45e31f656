//===- LoadedKernel.h - a compiled kernel loaded on a GPU ----------*- C++ -*-===//
//
// Loads a KernelBinary (core/KernelBinary.h: a plain record, no compiler
// type) into the current context and launches its entries: 3-D grids from
// each entry's grid rules, cluster shapes compiled into the binary, dynamic
// shared memory (opted in above 48 KB when loaded), and any number of
// by-value parameters, 128-byte tensor maps included.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cuda.h>
#include <memory>
#include <vector>

#include "core/KernelBinary.h"
#include "runtime/CudaDriver.h"
#include "llvm/Support/Error.h"

namespace tilejit {

/// One launch argument. A view is a device address and its sizes.
struct KernelArg {
  enum Kind : uint8_t { View, F32, Index, I32, Ptr, TensorMap } kind = View;
  uint8_t rank = 0;
  /// View: strides given (rank - 1 of them, in elements; the last
  /// dimension's is 1); 0: dense rows.
  uint8_t nstrides = 0;
  uint64_t ptr = 0;
  int64_t sizes[4] = {0, 0, 0, 0};
  int64_t strides[3] = {0, 0, 0};
  float f = 0;
  int64_t i = 0;
  const void *map = nullptr; // TensorMap: 128 bytes the caller keeps alive until the launch returns

  static KernelArg view(uint64_t ptr, std::initializer_list<int64_t> sizes) {
    KernelArg a;
    a.kind = View;
    a.ptr = ptr;
    for (int64_t s : sizes)
      if (a.rank < 4)
        a.sizes[a.rank++] = s;
    return a;
  }
  /// A view whose rows lie `strides` elements apart (one per dimension but
  /// the last), for a parameter with row strides.
  static KernelArg strided(uint64_t ptr, std::initializer_list<int64_t> sizes,
                           std::initializer_list<int64_t> strides) {
    KernelArg a = view(ptr, sizes);
    for (int64_t s : strides)
      if (a.nstrides < 3)
        a.strides[a.nstrides++] = s;
    return a;
  }
  static KernelArg f32(float v) {
    KernelArg a;
    a.kind = F32;
    a.f = v;
    return a;
  }
  static KernelArg index(int64_t v) {
    KernelArg a;
    a.kind = Index;
    a.i = v;
    return a;
  }
  static KernelArg i32(int32_t v) {
    KernelArg a;
    a.kind = I32;
    a.i = v;
    return a;
  }
  static KernelArg pointer(uint64_t p) {
    KernelArg a;
    a.kind = Ptr;
    a.ptr = p;
    return a;
  }
  static KernelArg tensorMap(const CUtensorMap &m) {
    KernelArg a;
    a.kind = TensorMap;
    a.map = &m;
    return a;
  }
};

/// The module of a KernelBinary, loaded into the current context.
class LoadedKernel {
public:
  /// Loads the cubin into the current context, resolves every entry and
  /// checks each entry's parameters (count and sizes) against those the
  /// driver reads from the binary (a mismatch is an error naming the
  /// parameter).
  static llvm::Expected<std::unique_ptr<LoadedKernel>> load(const KernelBinary &binary);
  ~LoadedKernel() = default;
  LoadedKernel(const LoadedKernel &) = delete;
  LoadedKernel &operator=(const LoadedKernel &) = delete;

  /// Launches entry `entry` on `stream`. The arguments are checked against
  /// the entry's parameters (kind, rank, static sizes and strides) first: a
  /// mismatch is an error and nothing is launched. A parameter with row
  /// strides takes a view with or without strides (dense rows then); either
  /// way each stride must keep rows apart (at least the next dimension's
  /// size times its stride) and be a multiple of 16 bytes. A parameter
  /// without takes none. No compile; no allocation for up to 16
  /// arguments.
  llvm::Error launch(size_t entry, const KernelArg *args, size_t count, CUstream stream) const;
  /// The grid (x, y, z in blocks) a launch with `args` would have.
  llvm::Expected<std::array<int64_t, 3>> gridFor(size_t entry, const KernelArg *args,
                                                 size_t count) const;

  size_t numEntries() const { return entries_.size(); }
  const EntryInfo &entry(size_t i) const { return entries_[i]; }
  int64_t workspaceBytes() const { return workspaceBytes_; }
  const std::string &key() const { return key_; }
  /// The spec the binary was built for (its launchers check a call
  /// against it).
  const KernelSpec &spec() const { return spec_; }
  CUcontext context() const { return context_; }
  /// The driver's handle of entry `i` and the launch configuration of a
  /// launch with `grid` (what launch() passes cuLaunchKernelEx; benchmarks
  /// of the launch path).
  CUfunction function(size_t i) const { return functions_[i]; }
  CUlaunchConfig launchConfig(size_t entry, const std::array<int64_t, 3> &grid,
                              CUstream stream) const;

private:
  LoadedKernel() = default;
  CUcontext context_ = nullptr;
  LoadedModule module_;
  std::vector<CUfunction> functions_;
  std::vector<EntryInfo> entries_;
  int64_t workspaceBytes_ = 0;
  KernelSpec spec_;
  std::string key_;
};

} // namespace tilejit
