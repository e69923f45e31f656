//===- TensorMap.h - TMA descriptors for a launch ------------------*- C++ -*-===//
//
// A CUtensorMap describes a global tensor and the box one TMA copy moves; a
// kernel takes it by value as a 128-byte `__grid_constant__` parameter
// (KernelArg::tensorMap). Made by the driver's cuTensorMapEncodeTiled, after
// the rules it enforces are checked here with errors that name the field.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <cuda.h>

#include "core/KernelSpec.h"
#include "llvm/Support/Error.h"

namespace tilejit {

struct TensorMapDesc {
  enum Swizzle { None, B32, B64, B128 };
  DType dtype = DType::BF16;
  int rank = 2;         // 1 to 5; dimension 0 is the contiguous one
  uint64_t address = 0; // 16-byte aligned
  int64_t dims[5] = {1, 1, 1, 1, 1};
  /// Bytes between consecutive indices of dimension d + 1 (multiples of 16).
  int64_t strideBytes[4] = {0, 0, 0, 0};
  uint32_t box[5] = {1, 1, 1, 1, 1}; // elements per copy, each 1 to 256
  Swizzle swizzle = None;
  /// Out-of-bounds elements read as NaN instead of zero.
  bool oobNaN = false;
};

/// The map `desc` describes. The last 64 maps this thread made are kept by
/// their descriptions, so a description seen again (a training step calls
/// the same kernels on the same buffers step after step) costs a lookup,
/// not the driver's encoding. Errors are not kept.
llvm::Expected<CUtensorMap> encodeTensorMap(const TensorMapDesc &desc);
/// Maps this thread had the driver encode (for tests of the reuse).
uint64_t tensorMapEncodes();

} // namespace tilejit
