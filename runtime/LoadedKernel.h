//===- LoadedKernel.h - a compiled kernel loaded on a GPU ----------*- C++ -*-===//
#pragma once

#include <cuda.h>
#include <memory>
#include <vector>

#include "compiler/Compiler.h"
#include "llvm/Support/Error.h"

namespace tilejit {

/// One launch argument. A view is a device address and its sizes.
struct KernelArg {
  enum Kind : uint8_t { View, F32, Index } kind = View;
  uint8_t rank = 0;
  uint64_t ptr = 0;
  int64_t sizes[4] = {0, 0, 0, 0};
  float f = 0;
  int64_t i = 0;

  static KernelArg view(uint64_t ptr, std::initializer_list<int64_t> sizes) {
    KernelArg a;
    a.kind = View;
    a.ptr = ptr;
    for (int64_t s : sizes)
      a.sizes[a.rank++] = s;
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
};

/// The module of a CompiledKernel, loaded into the current context.
class LoadedKernel {
public:
  /// Loads the cubin into the current context and resolves every entry.
  static llvm::Expected<std::unique_ptr<LoadedKernel>> load(const CompiledKernel &compiled);
  /// Compiles (spec, config) with `options` and loads it; `compiled`, when
  /// given, receives the binary (for the store).
  static llvm::Expected<std::unique_ptr<LoadedKernel>>
  compileAndLoad(const KernelSpec &spec, const TileConfig &config,
                 CompiledKernel *compiled = nullptr, const CompileOptions &options = {});
  ~LoadedKernel();
  LoadedKernel(const LoadedKernel &) = delete;
  LoadedKernel &operator=(const LoadedKernel &) = delete;

  /// Launches entry `entry` on `stream`. The arguments are checked against
  /// the entry's parameters (kind, rank, static sizes) first: a mismatch is an
  /// error and nothing is launched. No allocation, no compile.
  llvm::Error launch(size_t entry, const KernelArg *args, size_t count, CUstream stream) const;

  size_t numEntries() const { return entries_.size(); }
  const EntryInfo &entry(size_t i) const { return entries_[i]; }
  int64_t workspaceBytes() const { return workspaceBytes_; }
  const std::string &key() const { return key_; }
  CUcontext context() const { return context_; }

private:
  LoadedKernel() = default;
  CUcontext context_ = nullptr;
  CUmodule module_ = nullptr;
  std::vector<CUfunction> functions_;
  std::vector<EntryInfo> entries_;
  int64_t workspaceBytes_ = 0;
  std::string key_;
};

} // namespace tilejit
