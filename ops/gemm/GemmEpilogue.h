//===- GemmEpilogue.h - the epilogue of both GEMM kernels ----------*- C++ -*-===//
#pragma once

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/SmallVector.h"

namespace tilejit::gemm {

struct Params;

/// A rows x cols memref of `elem` (either size may be dynamic): dense rows,
/// or with `ld` rows a leading dimension apart, given at launch.
mlir::MemRefType rowsType(mlir::MLIRContext &ctx, int64_t rows, int64_t cols, mlir::Type elem,
                          bool ld);
/// D's type (and C's): M (given at launch) x N of the output type, with
/// the spec's leading dimension or dense.
mlir::MemRefType outType(mlir::MLIRContext &ctx, const Params &p);

/// The epilogue both GEMM kernels share (defined in GemmTemplate.cpp, whose
/// source hash covers it): its parameters follow A, B and D, as [C,]
/// [bias,] alpha [, beta].
struct Epilogue {
  mlir::Value c, bias, alpha, beta;

  /// Appends the parameters' types (C as D is typed; bias: N of A's type).
  static void appendParams(const Params &p, mlir::Type dType,
                           llvm::SmallVectorImpl<mlir::Type> &args);
  /// The parameters, read from `entry`'s arguments from position `first`.
  static Epilogue fromArgs(const Params &p, mlir::Block *entry, unsigned first);

  /// alpha * acc (+ beta * C) (+ bias) in f32, for the tile of D at (row0,
  /// col0): C read there (masked), the bias from col0.
  mlir::Value compute(mlir::OpBuilder &b, mlir::Location loc, mlir::Value acc, mlir::Value row0,
                      mlir::Value col0) const;
  /// Stores alpha * acc (+ beta * C) (+ bias), rounded to D's type, at (row0,
  /// col0) of D, masked at the edges; C is read at the same place, the bias
  /// from col0.
  void store(mlir::OpBuilder &b, mlir::Location loc, mlir::Value acc, mlir::Value d,
             mlir::Value row0, mlir::Value col0) const;
};

} // namespace tilejit::gemm
