//===- KernelBinary.h - a compiled kernel as plain data -----------*- C++ -*-===//
//
// What a loader needs and a store or a server keeps: the binary, its entry
// points with their launch rules and parameter layout, and its identity. No
// compiler type: the runtime loads it, the store keeps it, the wire carries it.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>
#include <vector>

#include "core/KernelSpec.h"
#include "core/LaunchInfo.h"

namespace tilejit {

struct KernelBinary {
  KernelSpec spec;
  TileConfig config;
  std::string key;     // identity of the binary: see kernelKey() (core/Key.h)
  std::string backend; // the back end that made it ("nvptx", "cuda")
  std::vector<char> cubin;
  std::vector<EntryInfo> entries;
  int64_t workspaceBytes = 0;
  std::string log; // the assembler's log (ptxas's resource report)
};

} // namespace tilejit
