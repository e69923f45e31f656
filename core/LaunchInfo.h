//===- LaunchInfo.h - how to launch a compiled kernel ------------*- C++ -*-===//
//
// Plain data the compiler derives once from a kernel's signature and hands the
// runtime: each entry's parameters (kind, by-value size and alignment), block
// and cluster shape, shared memory and the rule for each grid dimension.
// Evaluating it needs no MLIR.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/KernelSpec.h"
#include "llvm/Support/Error.h"

namespace tilejit {

/// One kernel parameter, passed by value:
///  - View: {pointer, sizes[rank]} (8 + 8 * rank bytes, 8-aligned);
///  - F32, I32: a 4-byte scalar; Index: a 64-bit unsigned integer;
///  - Ptr: a global address (8 bytes);
///  - TensorMap: a 128-byte CUtensorMap, 64-aligned (a `__grid_constant__`
///    parameter the TMA unit reads).
struct ParamInfo {
  enum Kind { View, F32, Index, I32, Ptr, TensorMap } kind = View;
  DType elem = DType::F32; // for View and TensorMap
  /// View: each size, -1 where dynamic; TensorMap: the box one copy moves
  /// (rows, columns), which the launch encodes into the map.
  std::vector<int64_t> staticSizes;
  std::string name;
  /// View with row strides: each stride but the last (which is 1), in
  /// elements, -1 where given at launch. Empty: dense rows.
  std::vector<int64_t> staticStrides;

  /// The bytes and alignment of the parameter in the kernel's parameter
  /// space: the one place they are written down.
  size_t bytes() const;
  size_t alignment() const;
  static const char *kindName(Kind k);
};

/// A grid dimension: the minimum of several affine expressions over launch
/// values, each stored in postfix form. No expressions: the dimension is 1.
struct GridRule {
  enum OpCode : int64_t { Const, Sym, Add, Mul, FloorDiv, CeilDiv, Mod };
  struct Term {
    OpCode op;
    int64_t value; // Const: the constant; Sym: symbol index
  };
  std::vector<std::vector<Term>> results;   // min over these
  std::vector<std::pair<int, int>> symbols; // (param, size index or -1)

  /// Evaluates with `symbolValues[i]` bound to symbol i. Returns -1 on an
  /// ill-formed rule or a division by zero; 1 for a rule with no results.
  int64_t evaluate(const int64_t *symbolValues, size_t count) const;
  std::string str() const;
  static GridRule constant(int64_t v) { return GridRule{{{{Const, v}}}, {}}; }
};

struct EntryInfo {
  std::string name;
  int blockThreads = 0;
  /// Blocks per program instance along x, y, z (compiled into the binary);
  /// the grid rules count programs.
  std::array<int, 3> cluster = {1, 1, 1};
  int staticSmemBytes = 0;
  /// Dynamic shared memory the launch gives each block; above 48 KB the
  /// runtime opts the kernel in when it loads it.
  int dynamicSmemBytes = 0;
  int registers = -1; // from ptxas, -1 if unknown
  int spillBytes = 0;
  std::vector<ParamInfo> params;
  std::array<GridRule, 3> grid; // x, y, z; y and z default to 1

  int clusterBlocks() const { return cluster[0] * cluster[1] * cluster[2]; }
  /// Checks the entry is launchable on any GPU tilejit targets (threads,
  /// cluster and shared memory bounds, grid symbols naming parameters).
  llvm::Error validate() const;
};

/// JSON text of a kernel's entries, for the store and the wire; and back.
/// Parsing checks every field and names the first bad one.
std::string entriesToJson(const std::vector<EntryInfo> &entries);
llvm::Expected<std::vector<EntryInfo>> entriesFromJson(const std::string &text);

} // namespace tilejit
