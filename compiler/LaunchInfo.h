//===- LaunchInfo.h - how to launch a compiled kernel ------------*- C++ -*-===//
//
// Plain data the compiler hands the runtime: each entry's parameters, block
// size, shared memory and grid rule. Evaluating it needs no MLIR.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/KernelSpec.h"
#include "llvm/Support/Error.h"

namespace tilejit {

/// One kernel parameter. A View is passed by value as {pointer, sizes[rank]}
/// (8 + 8 * rank bytes); F32 as a float; Index as a 64-bit unsigned integer.
struct ParamInfo {
  enum Kind { View, F32, Index } kind = View;
  DType elem = DType::F32;          // for View
  std::vector<int64_t> staticSizes; // for View: -1 where the size is dynamic
  std::string name;
};

/// The grid's x size: the minimum of several affine expressions over launch
/// values, each stored in postfix form.
struct GridRule {
  enum OpCode : int64_t { Const, Sym, Add, Mul, FloorDiv, CeilDiv, Mod };
  struct Term {
    OpCode op;
    int64_t value; // Const: the constant; Sym: symbol index
  };
  std::vector<std::vector<Term>> results;   // min over these
  std::vector<std::pair<int, int>> symbols; // (param, size index or -1)

  /// Evaluates with `symbolValues[i]` bound to symbol i. Returns -1 on an
  /// ill-formed rule or a division by zero.
  int64_t evaluate(const int64_t *symbolValues, size_t count) const;
  std::string str() const;
};

struct EntryInfo {
  std::string name;
  int blockThreads = 0;
  int clusterBlocks = 1; // blocks per program instance; the grid rule counts programs
  int staticSmemBytes = 0;
  int registers = -1; // from ptxas, -1 if unknown
  int spillBytes = 0;
  std::vector<ParamInfo> params;
  GridRule grid;
};

/// JSON text of a kernel's entries, for the store; and back. Parsing checks
/// every field and names the first bad one.
std::string entriesToJson(const std::vector<EntryInfo> &entries);
llvm::Expected<std::vector<EntryInfo>> entriesFromJson(const std::string &text);

} // namespace tilejit
