//===- Utility.h - helpers the tile-to-LLVM patterns share --------*- C++ -*-===//
#pragma once

#include <optional>
#include <string>

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/IR/AffineExpr.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"

namespace tilejit::llvmx {

/// Builds LLVM-dialect scalars at one location.
struct Emitter {
  mlir::OpBuilder &b;
  mlir::Location loc;

  mlir::Type i1() const { return b.getI1Type(); }
  mlir::Type i16() const { return b.getI16Type(); }
  mlir::Type i32() const { return b.getI32Type(); }
  mlir::Type i64() const { return b.getI64Type(); }
  mlir::Value i32(int64_t v);
  mlir::Value i64(int64_t v);
  mlir::Value f32(float v);
  mlir::Value boolean(bool v);
  mlir::Value add(mlir::Value a, mlir::Value c);
  mlir::Value mul(mlir::Value a, mlir::Value c);
  mlir::Value udiv(mlir::Value a, int64_t c);
  mlir::Value urem(mlir::Value a, int64_t c);
  mlir::Value lessThan(mlir::Value a, mlir::Value c); // signed
  mlir::Value isZero(mlir::Value a);
  mlir::Value both(mlir::Value a, mlir::Value c);
  mlir::Value negate(mlir::Value p);
  mlir::Value zext64(mlir::Value v);
  /// This thread's index in the block, as i64.
  mlir::Value threadId();
  /// The results of `map` (one dimension) applied to `dim`, as i64; dims
  /// are non-negative, so floordiv and mod are unsigned.
  llvm::SmallVector<mlir::Value> apply(mlir::AffineMap map, mlir::Value dim);
  mlir::Value apply(mlir::AffineExpr expr, mlir::Value dim);
  /// Element `i` of a vector, and a vector from elements.
  mlir::Value extract(mlir::Value vec, int64_t i);
  mlir::Value pack(mlir::Type vecType, llvm::ArrayRef<mlir::Value> elems);
  /// bf16 or f16 values (a scalar or a vector) as f32, exactly. bf16 is the
  /// high half of an f32: a shift, where LLVM's fpext becomes a conversion
  /// instruction per element (cvt.f32.bf16; the backward pass ran 8-14 %
  /// slower with them on the H200).
  mlir::Value widenToF32(mlir::Value v);
  /// Two 16-bit elements as one 32-bit word, `lo` in the low half (as
  /// memory holds them).
  mlir::Value word(mlir::Value lo, mlir::Value hi);
  /// A vector of `vecType` with every element `v`.
  mlir::Value splat(mlir::Type vecType, mlir::Value v);
  /// Address `bytes` past `ptr` (any address space).
  mlir::Value offset(mlir::Value ptr, mlir::Value bytes);
  /// `ptr` as a 64-bit integer, for an inline-assembly address operand
  /// ("l") of any state space.
  mlir::Value addr64(mlir::Value ptr);
  /// The address of the kernel's shared-memory global `name`, plus `bytes`.
  mlir::Value shared(llvm::StringRef name, int64_t bytes = 0);
  /// Waits for the phase of the mbarrier at `bar` (shared) whose parity is
  /// the low bit of `parity` (i32), retrying without a suspend-time hint
  /// (nvvm.mbarrier.try_wait.parity always passes one, which ptxas turns
  /// into a sleep in the retry loop).
  void waitParity(mlir::Value bar, mlir::Value parity);
  /// The calling warpgroup's 128 threads meet: named barrier 1 + the
  /// warpgroup's index (0 is the whole block's).
  void warpgroupBarrier();
  /// One PTX instruction (or one instruction in a retry loop) as inline
  /// assembly. `results` empty: no result; one: that type; more: a struct.
  mlir::Operation *asmOp(llvm::ArrayRef<mlir::Type> results, mlir::ValueRange operands,
                         llvm::StringRef text, llvm::StringRef constraints, bool sideEffects);
};

/// A global memref's fields, as TileTypeConverter lowers it (a struct of
/// the pointer, each size, then, with row strides, each stride but the
/// last's): sizes and strides in elements, constants where the type has them.
struct GlobalView {
  mlir::MemRefType type;
  mlir::Value memref;
  llvm::SmallVector<mlir::Value> sizes;
  /// Every dimension's stride (the last is 1); null where dense rows make it
  /// a product of sizes (offsetOf multiplies those out as it goes).
  llvm::SmallVector<mlir::Value> strides;
  /// Stride `d` when the type fixes it (dense rows of static sizes, or a
  /// static stride).
  std::optional<int64_t> staticStride(int64_t d) const;
  bool strided() const;
  /// The first element's address (read from the struct where it is built).
  mlir::Value ptr(Emitter &e) const;
  /// Element offset of the row at one index per dimension but the last.
  mlir::Value rowOffset(Emitter &e, mlir::ValueRange leading) const;
  /// Element offset of one index per dimension.
  mlir::Value offsetOf(Emitter &e, mlir::ValueRange indices) const;
};
GlobalView unpackGlobal(Emitter &e, mlir::Value memref, mlir::MemRefType type);
/// The address of the 32-bit word at `indices` of a global memref of them.
mlir::Value wordAddress(Emitter &e, mlir::Value memref, mlir::MemRefType type,
                        mlir::ValueRange indices);

/// A predicate known at compile time (true or false) or held in an i1.
struct Pred {
  std::optional<bool> known;
  mlir::Value reg;
  static Pred of(bool v) { return {v, {}}; }
  static Pred of(mlir::Value v) { return {std::nullopt, v}; }
  bool always() const { return known && *known; }
  bool never() const { return known && !*known; }
};
Pred both(Emitter &e, const Pred &a, const Pred &c);
Pred lessThan(Emitter &e, mlir::Value a, mlir::Value c);
/// `!p && q`.
Pred andNot(Emitter &e, const Pred &p, const Pred &q);

/// Constant value of an i64 (or index-converted) LLVM value, if it is one.
std::optional<int64_t> constantOf(mlir::Value v);

} // namespace tilejit::llvmx
