//===- TileDialect.h - the tile dialect -------------------------*- C++ -*-===//
#pragma once

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialects/Tile/TileAttrInterfaces.h.inc"
#include "dialects/Tile/TileDialect.h.inc"
#include "dialects/Tile/TileEnums.h.inc"
#include "mlir/IR/AffineMap.h"

#define GET_ATTRDEF_CLASSES
#include "dialects/Tile/TileAttrs.h.inc"
#define GET_TYPEDEF_CLASSES
#include "dialects/Tile/TileTypes.h.inc"

namespace tilejit::tile {
/// A ranked tensor whose encoding is a tile layout that fits its shape.
bool isTileType(mlir::Type type);
/// A row-major memref of bf16, f16 or f32 (dynamic sizes allowed): dense,
/// or with row strides (`strided<[?, 1]>`: offset 0, the last dimension
/// dense, each other a stride apart, dynamic or static).
bool isGlobalMemRef(mlir::Type type);
/// A global memref whose rows lie a stride apart (a strided layout) rather
/// than one row length.
bool hasRowStrides(mlir::MemRefType type);
/// Some tile.store writes `memref` (kernel arguments do not alias, so every
/// other operand may be read through the read-only cache path).
bool isStoredTo(mlir::Value memref);
/// The blocked layout that places the elements of `tile`: its own encoding,
/// or the parent of its slice encoding.
BlockedLayoutAttr getBlockedParent(mlir::RankedTensorType tile);
/// A tile held by one warpgroup (#tile.wgmma): its layout spans 128 threads
/// whatever the block's size.
bool isWarpgroupTile(mlir::RankedTensorType tile);
/// Number of elements of `tile` one thread holds.
int64_t getElemsPerThread(mlir::RankedTensorType tile);
/// Number of columns of the tile's row (the last dimension of the blocked
/// parent view): the tile's last size, or for a `dim = 1` slice, 1.
} // namespace tilejit::tile

#define GET_OP_CLASSES
#include "dialects/Tile/TileOps.h.inc"
