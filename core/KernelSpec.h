//===- KernelSpec.h - what a kernel must compute ------------------*- C++ -*-===//
//
// A KernelSpec names an op and gives the typed parameters the op declares
// (OpDecl): data types, sizes, flags; which sizes come at launch and which are
// compiled in. GEMM, attention and RMSNorm are all specs of this one type, so
// the store, the keys, the engine and the wire carry any op alike. A
// TileConfig names the tunable choices, checked against the keys a template
// declares (ConfigKeyDecl). Both have one canonical text form, which keys
// every cache; parse() is its inverse and its errors name the field.
//
// Plain C++: no MLIR, so the runtime, the store and a server use it.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/Target.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

namespace tilejit {

enum class DType { BF16, F16, F32 };
std::string_view dtypeName(DType t);
std::optional<DType> parseDType(std::string_view name);
int dtypeBytes(DType t);

class KernelSpec;

/// One parameter an op declares.
struct ParamDecl {
  enum Kind : uint8_t { Int, Bool, Type };
  std::string_view name;
  Kind kind = Int;
  int64_t min = 0, max = INT64_MAX; // Int: the accepted range
  int64_t defaultValue = 0;         // Type: a DType's value
  /// A size given at launch: not compiled in, so not part of the kernel's
  /// identity (canonical(false), hash(false), sameKernel).
  bool launchTime = false;
  /// Launch-time sizes: tuning measures the next power of two up to this, so
  /// one winner serves a range of sizes (0: the exact size).
  int64_t tuneBucketCap = 0;
  std::string_view doc;
};

/// An op: its name, its parameters in canonical order, and the rules across
/// parameters that ranges cannot say.
struct OpDecl {
  std::string_view name;
  std::vector<ParamDecl> params;
  std::string_view doc;
  llvm::Error (*check)(const KernelSpec &spec) = nullptr;

  /// The position of parameter `name`, or -1.
  int index(std::string_view name) const;
};

/// Every op tilejit knows, in registration order (core/Ops.cpp).
llvm::ArrayRef<const OpDecl *> allOps();
const OpDecl *findOp(std::string_view name);
/// "rmsnorm_fwd, rmsnorm_bwd, ...", for messages.
std::string knownOpNames();

class KernelSpec {
public:
  static constexpr int kMaxParams = 24;

  KernelSpec() = default; // no op: validate() rejects it
  /// Every parameter at its declared default.
  explicit KernelSpec(const OpDecl &op, Target target = {});

  const OpDecl *op() const { return op_; }
  std::string_view opName() const { return op_ ? op_->name : std::string_view("?"); }
  bool is(const OpDecl &op) const { return op_ == &op; }

  int64_t operator[](int i) const { return values_[size_t(i)]; }
  KernelSpec &set(int i, int64_t v) {
    values_[size_t(i)] = v;
    return *this;
  }
  /// By name; an unknown name is an error naming it and the op's parameters.
  llvm::Expected<int64_t> get(std::string_view name) const;
  llvm::Error set(std::string_view name, int64_t v);

  Target target;

  /// Canonical text: `op name=value ... arch=A [sms=N]` in declaration
  /// order. With `withRuntimeSizes = false` launch-time sizes are left out:
  /// that form identifies the compiled kernel.
  std::string canonical(bool withRuntimeSizes = true) const;
  /// Parses the canonical form (parameters left out take their defaults);
  /// errors name the offending field.
  static llvm::Expected<KernelSpec> parse(std::string_view text);
  /// Checks every parameter against its declaration and the op's own rules.
  llvm::Error validate() const;
  /// Checks the spec's kernels are for `gpu` (a persistent grid sized for
  /// another multiprocessor count would run in two waves or leave some idle).
  llvm::Error checkTarget(const Target &gpu) const;
  /// The spec tuning measures: launch-time sizes put in their buckets.
  KernelSpec tuningSpec() const;

  /// Field by field; no allocation (the engine's hot path uses these).
  /// sameKernel: equal but for launch-time sizes, so the same binary.
  bool sameKernel(const KernelSpec &o) const;
  bool operator==(const KernelSpec &o) const;
  bool operator!=(const KernelSpec &o) const { return !(*this == o); }
  /// FNV-1a over the fields; without launch-time sizes it matches sameKernel.
  uint64_t hash(bool withRuntimeSizes = true) const;

private:
  const OpDecl *op_ = nullptr;
  std::array<int64_t, kMaxParams> values_{};
};

/// A tunable key a template declares, with its accepted range.
struct ConfigKeyDecl {
  std::string_view name;
  int64_t min = 0, max = INT64_MAX;
  bool optional = false; // a config may leave it out
  std::string_view doc;
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
  bool operator!=(const TileConfig &o) const { return !(*this == o); }

  /// `partial` laid over this config: its keys replace or add to these.
  TileConfig mergedWith(const TileConfig &partial) const;
  /// Every key declared in `keys`, every value in its range, every key that
  /// is not optional present; errors name the key (and, for an unknown one,
  /// the declared keys).
  llvm::Error checkKeys(llvm::ArrayRef<ConfigKeyDecl> keys) const;
};

/// Largest power of two up to 16 that divides every operand address and row
/// length in bytes.
int alignmentOf(std::initializer_list<uint64_t> addresses, int64_t rowBytes);

} // namespace tilejit
