//===- RmsNormDecl.h - the RMSNorm ops' declaration ---------------*- C++ -*-===//
//
// rmsnorm_fwd and rmsnorm_bwd, as KernelSpec parameters, and a typed view of a
// spec of either for the code that builds and launches them.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "core/KernelSpec.h"

namespace tilejit::rmsnorm {

/// The parameters' positions in a spec, in canonical order.
enum Param : int { DTypeParam, WDTypeParam, Rows, Cols, Zcg, Align };

const OpDecl &forwardOp();
const OpDecl &backwardOp();
/// rmsnorm_fwd or rmsnorm_bwd.
bool isRmsNorm(const KernelSpec &spec);

/// A spec of rmsnorm_fwd or rmsnorm_bwd, field by field, and its target;
/// converts to the KernelSpec it describes.
struct Params {
  Params() = default;
  /// The fields of an RMSNorm spec (a spec of another op gives the defaults).
  explicit Params(const KernelSpec &spec);

  bool backward = false;
  DType dtype = DType::BF16;  // activations: x, y, dy, dx
  DType wdtype = DType::BF16; // the weight and its gradient
  int64_t rows = 1;           // launch-time size; a tuning hint, not compiled in
  int64_t cols = 1;           // compiled in
  bool zeroCenteredGamma = false;
  int align = 16; // bytes every operand and row is aligned to
  Target target;

  static Params of(const KernelSpec &spec) { return Params(spec); }
  KernelSpec spec() const;
  operator KernelSpec() const { return spec(); }
  llvm::Error validate() const { return spec().validate(); }
};

} // namespace tilejit::rmsnorm
