//===- Kernel.h - what every template builds a kernel with ---------*- C++ -*-===//
#pragma once

#include "compiler/templates/Template.h"
#include "core/KernelSpec.h"
#include "dialects/Tile/TileDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/FunctionExtras.h"

namespace tilejit {

/// The MLIR type of `t` (bf16, f16, f32).
mlir::Type elemType(mlir::MLIRContext &ctx, DType t);

/// The config as the kernel's `config` attribute (for printing and keys).
mlir::DictionaryAttr configAttr(mlir::MLIRContext &ctx, const TileConfig &cfg);

/// A tile.kernel named `name` with arguments `args` and its launch shape, and
/// an entry block whose arguments are the kernel's; the builder is left at
/// the end of that block. `cluster` > 1 groups blocks into clusters;
/// `minBlocks` > 0 asks that many blocks fit on a multiprocessor.
tile::KernelOp makeKernel(mlir::OpBuilder &b, mlir::Location loc, llvm::StringRef name,
                          llvm::ArrayRef<mlir::Type> args, int64_t threads, mlir::AffineMap grid,
                          llvm::ArrayRef<int64_t> gridOperands, const TileConfig &cfg,
                          int64_t cluster = 1, int64_t minBlocks = 0);

/// Index arithmetic, scalars and loops as the templates write them, each
/// created at the builder's insertion point. The divisions, remainders and
/// loops take integers of any width as well as indices (their constants
/// of the operand's type).
struct KernelMath {
  mlir::OpBuilder &b;
  mlir::Location loc;

  mlir::Value cst(int64_t v);
  /// `v` as a constant of `like`'s type (index or an integer).
  mlir::Value cstLike(mlir::Value like, int64_t v);
  mlir::Value add(mlir::Value x, mlir::Value y);
  mlir::Value sub(mlir::Value x, mlir::Value y);
  mlir::Value mul(mlir::Value x, mlir::Value y);
  mlir::Value divu(mlir::Value x, int64_t c);
  mlir::Value remu(mlir::Value x, int64_t c);
  mlir::Value minu(mlir::Value x, mlir::Value y);
  mlir::Value ceilDiv(mlir::Value x, int64_t c);
  mlir::Value f32c(double v);
  mlir::Value toI32(mlir::Value v);
  /// An unsigned integer (a count in 32 bits) as an index.
  mlir::Value toIndex(mlir::Value v);
  /// A tile of type `t` whose every element is `v`.
  mlir::Value splat(mlir::Type t, mlir::Value v);
  /// Packed sequences: the first row of sequence `seq` and its row count,
  /// from `offsets` (b + 1 int32 offsets, cu_seqlens, as the words of an
  /// f32 memref), the count held to [0, `most`] (the call's longest
  /// sequence): offsets that break the call's contract (decreasing, or
  /// further apart than it says) give wrong results, but no loop longer
  /// than a valid call's.
  std::pair<mlir::Value, mlir::Value> sequenceRows(mlir::Value offsets, mlir::Value seq,
                                                   mlir::Value most);
  /// for (i = from; i < to; ++i) carrying `init`, `body(i, carried)`
  /// returning the next values; the builder is left after the loop. (A loop
  /// that carries nothing comes with its yield.)
  template <typename Body>
  llvm::SmallVector<mlir::Value> loop(mlir::Value from, mlir::Value to, mlir::ValueRange init,
                                      Body body) {
    auto l = mlir::scf::ForOp::create(b, loc, from, to, cstLike(from, 1), init);
    b.setInsertionPointToStart(l.getBody());
    llvm::SmallVector<mlir::Value> next = body(l.getInductionVar(), l.getRegionIterArgs());
    if (!init.empty())
      mlir::scf::YieldOp::create(b, loc, next);
    b.setInsertionPointAfter(l);
    return llvm::SmallVector<mlir::Value>(l.getResults());
  }
  /// `then()`'s values where `cond` holds, else `otherwise` (of the same
  /// types); the builder is left after the branch.
  template <typename Then>
  llvm::SmallVector<mlir::Value> ifElse(mlir::Value cond, mlir::ValueRange otherwise, Then then) {
    auto op = mlir::scf::IfOp::create(b, loc, otherwise.getTypes(), cond, /*withElseRegion=*/true);
    b.setInsertionPointToStart(op.thenBlock());
    mlir::scf::YieldOp::create(b, loc, llvm::SmallVector<mlir::Value>(then()));
    b.setInsertionPointToStart(op.elseBlock());
    mlir::scf::YieldOp::create(b, loc, otherwise);
    b.setInsertionPointAfter(op);
    return llvm::SmallVector<mlir::Value>(op.getResults());
  }
};

/// Tiles a persistent program takes at run time from a counter (a word of
/// global memory, zeroed before the launch, that every program adds 1 to):
/// its producer takes each tile and hands it to the program's consumers
/// through one of two slots of shared memory, `words` words each (the
/// tile, then what the producer adds to it: its place). A slot is full
/// once written (`full`, one arrival) and free again once every consumer is
/// done with its tile (`free`, `consumers` arrivals). Created at the
/// kernel's top level, before its warp-specialized regions.
struct TakenTiles {
  mlir::Value full, free, slots;
  int64_t words = 1;

  static TakenTiles create(KernelMath &km, int64_t consumers, int64_t words);
  /// Word `w` of slot `slot`.
  mlir::Value word(KernelMath &km, mlir::Value slot, int64_t w) const;
  /// The loop over the program's tiles in one region: while the j-th tile
  /// taken is below `tiles`, `body(at, args)` with the builder in the
  /// loop's body, where `at` is the tile (of `tiles`' type, an index or a
  /// 32-bit count) and args are j and what the loop carries (`init`: j's
  /// start, 0 of any integer type or an index, then the carried values).
  /// The producer waits for slot j mod 2 to be free (the tile it held two
  /// takes ago done), takes the tile from `counter` and writes it to the
  /// slot's word 0; past the last tile it marks the slot full without
  /// more, which ends the consumers' loops too. A consumer waits for the
  /// slot to be full and reads word 0. `body` ends the block with the
  /// next values (scf.yield of j's next and the carried ones); the
  /// producer hands the tile out with `handOut`, a consumer frees the slot
  /// with `release`. Returns the loop's results: j, then the carried ones.
  llvm::SmallVector<mlir::Value>
  loop(KernelMath &km, bool producer, mlir::Value counter, mlir::Value tiles, mlir::ValueRange init,
       llvm::function_ref<void(mlir::Value at, mlir::ValueRange args)> body) const;
  /// The producer: writes `place` to words 1.. of `slot` and marks it full.
  void handOut(KernelMath &km, mlir::Value slot, mlir::ValueRange place = {}) const;
  /// A consumer: words 1.. of `slot` (the producer's place), in one read.
  llvm::SmallVector<mlir::Value> read(KernelMath &km, mlir::Value slot) const;
  /// A consumer done with the tile of `slot`.
  void release(KernelMath &km, mlir::Value slot) const;
};

/// What every template's build() does around its kernels: checks `spec`
/// and `cfg` (validate, then `tmpl`'s checkConfig), loads the tile and math
/// dialects, and calls `body` with a builder at the end of a new module.
llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>>
buildModule(mlir::MLIRContext &ctx, const KernelTemplate &tmpl, const KernelSpec &spec,
            const TileConfig &cfg,
            llvm::function_ref<void(mlir::OpBuilder &, mlir::Location)> body);

} // namespace tilejit
