//===- Template.h - kernel templates ------------------------------*- C++ -*-===//
//
// A template turns a KernelSpec and a TileConfig into a tile-dialect module.
// It also owns the config space the tuner searches and a default config.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string_view>
#include <vector>

#include "core/KernelSpec.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"

namespace tilejit {

/// A launch-time buffer the caller provides besides the op's operands.
struct WorkspaceInfo {
  int64_t bytes = 0;
};

class KernelTemplate {
public:
  virtual ~KernelTemplate() = default;
  virtual const OpDecl &op() const = 0;
  /// The config keys the template reads, with their ranges.
  virtual llvm::ArrayRef<ConfigKeyDecl> configKeys() const = 0;
  /// The configs the tuner searches for `spec`, likeliest winners first.
  virtual std::vector<TileConfig> configSpace(const KernelSpec &spec) const = 0;
  /// A config chosen without measuring.
  virtual TileConfig defaultConfig(const KernelSpec &spec) const = 0;
  /// Rejects a config the template cannot build for `spec`, naming why.
  virtual llvm::Error checkConfig(const KernelSpec &spec, const TileConfig &cfg) const = 0;
  /// Builds the module; its kernels are launched in the order they appear.
  virtual llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>>
  build(mlir::MLIRContext &ctx, const KernelSpec &spec, const TileConfig &cfg) const = 0;
  /// Scratch memory the launch needs.
  virtual WorkspaceInfo workspace(const KernelSpec &spec, const TileConfig &cfg) const {
    return {};
  }
  /// Hash of the template's source, part of every kernel key.
  virtual std::string_view sourceHash() const = 0;
  /// Whether the reference back end (tile IR to CUDA C++, NVRTC) can build
  /// the template's kernels: only for the ops whose tile ops it lowers.
  virtual bool hasCudaBackend() const { return false; }
  /// Whether the tuner ranks its fastest candidates again under sustained
  /// load (autotune TimingMode::Sustained): for arithmetic-bound kernels, whose
  /// clocks under a training step's load differ by config.
  virtual bool tunedUnderLoad() const { return false; }
};

/// The template that builds `op`, or null.
const KernelTemplate *findTemplate(const OpDecl *op);
/// The template of `spec`'s op; callers check findTemplate (compileKernel
/// does) for a spec that may name an op without one.
const KernelTemplate &getTemplate(const KernelSpec &spec);
const KernelTemplate &getTemplate(const OpDecl &op);

} // namespace tilejit
