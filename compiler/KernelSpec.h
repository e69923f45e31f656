//===- KernelSpec.h - what a kernel must compute ----------------*- C++ -*-===//
//
// A KernelSpec names the operation, the data types, the problem shape and the
// target; a TileConfig names the tunable choices. Both have one canonical text
// form, which keys every cache.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "llvm/Support/Error.h"

namespace tilejit {

enum class DType { BF16, F16, F32 };
std::string_view dtypeName(DType t);
std::optional<DType> parseDType(std::string_view name);
int dtypeBytes(DType t);

enum class OpKind { RmsNormFwd, RmsNormBwd };
std::string_view opName(OpKind op);
std::optional<OpKind> parseOpKind(std::string_view name);

/// Targets tilejit compiles for.
bool isKnownArch(std::string_view arch);
/// Whether `arch` can launch thread-block clusters (sm_90 and later).
bool hasClusters(std::string_view arch);
/// The most blocks a cluster may have on every sm_90 part (more needs a
/// non-portable opt-in); any size from 1 up to it is valid.
constexpr int kMaxClusterBlocks = 8;
/// The multiprocessors of the usual part of an arch (H100/H200 SXM: 132,
/// A100: 108), which sizes persistent grids when a spec names no other.
int assumedSMCount(std::string_view arch);

struct KernelSpec {
  OpKind op = OpKind::RmsNormFwd;
  DType dtype = DType::BF16;  // activations: x, y, dy, dx
  DType wdtype = DType::BF16; // the weight and its gradient
  int64_t rows = 1;           // launch-time size; a tuning hint, not compiled in
  int64_t cols = 1;           // compiled in
  bool zeroCenteredGamma = false;
  int align = 16; // bytes every operand and row is aligned to
  std::string arch = "sm_90a";
  /// Multiprocessors of the target GPU when it is not the arch's usual part
  /// (assumedSMCount); 0 otherwise. Persistent grids are sized by it, so an
  /// H100 PCIe (114) gets other kernels than an H200 (132).
  int sms = 0;

  /// The multiprocessors the kernel is sized for.
  int targetSMs() const { return sms > 0 ? sms : assumedSMCount(arch); }
  /// Targets a GPU of `n` multiprocessors (0 when that is the arch's usual
  /// count, so specs for the usual part keep one canonical form).
  void setTargetSMs(int n) { sms = n == assumedSMCount(arch) ? 0 : n; }

  /// Canonical text. With `withRuntimeSizes = false` sizes that are launch-time
  /// values (rows) are left out: that form identifies the compiled kernel.
  std::string canonical(bool withRuntimeSizes = true) const;
  /// Parses the canonical form; errors name the offending field.
  static llvm::Expected<KernelSpec> parse(std::string_view text);
  /// Checks the spec describes a kernel tilejit can build.
  llvm::Error validate() const;
  /// Checks the spec's kernels are for a GPU of `arch` with `sms`
  /// multiprocessors (persistent grids sized for another count would run in
  /// two waves or leave multiprocessors idle).
  llvm::Error checkTarget(std::string_view arch, int sms) const;

  /// Field by field; no allocation (the engine's hot path uses these).
  /// sameKernel: equal but for launch-time sizes (rows), so the same binary.
  bool sameKernel(const KernelSpec &o) const {
    return op == o.op && dtype == o.dtype && wdtype == o.wdtype && cols == o.cols &&
           zeroCenteredGamma == o.zeroCenteredGamma && align == o.align && arch == o.arch &&
           sms == o.sms;
  }
  bool operator==(const KernelSpec &o) const { return rows == o.rows && sameKernel(o); }
  /// FNV-1a over the fields; without launch-time sizes it matches sameKernel.
  uint64_t hash(bool withRuntimeSizes = true) const;
};

/// Tunable parameters, by name. Canonical text: sorted `name=value` pairs.
struct TileConfig {
  std::map<std::string, int64_t> values;

  int64_t get(const std::string &name) const;
  bool has(const std::string &name) const { return values.count(name) != 0; }
  TileConfig &set(const std::string &name, int64_t v) {
    values[name] = v;
    return *this;
  }
  std::string canonical() const;
  static llvm::Expected<TileConfig> parse(std::string_view text);
  bool operator==(const TileConfig &o) const { return values == o.values; }
};

/// Largest power of two up to 16 that divides every operand address and row
/// length in bytes.
int alignmentOf(std::initializer_list<uint64_t> addresses, int64_t rowBytes);

} // namespace tilejit
