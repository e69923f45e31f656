//===- TileToPtx.h - tile kernels straight to PTX ---------------*- C++ -*-===//
//
// The second back end: tile IR (after tile-check-target and canonicalize) is
// written as PTX, one instruction sequence per tile operation, with no C++,
// no device library and no NVVM in between. ptxas (through nvJitLink) then
// makes the cubin. It computes what the CUDA C++ back end computes, element
// for element: the same thread-to-element layout, the same masking of
// ragged edges, the same reduction order.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>

#include "llvm/Support/Error.h"

namespace mlir {
class ModuleOp;
}

namespace tilejit {

/// An operation the PTX back end does not lower (the C++ back end may).
class PtxUnsupported : public llvm::ErrorInfo<PtxUnsupported> {
public:
  static char ID;
  explicit PtxUnsupported(std::string msg) : msg_(std::move(msg)) {}
  void log(llvm::raw_ostream &os) const override { os << msg_; }
  std::error_code convertToErrorCode() const override { return llvm::inconvertibleErrorCode(); }

private:
  std::string msg_;
};

/// PTX for every tile.kernel of `module`, for `arch` (sm_80 ... sm_90a). The
/// kernels must have passed tile-check-target (which records their scratch).
/// Fails with PtxUnsupported naming the first operation it cannot lower.
llvm::Expected<std::string> translateTileToPtx(mlir::ModuleOp module, llvm::StringRef arch);

} // namespace tilejit
