//===- SpecOptions.h - kernel spec flags shared by CLI commands ----*- C++ -*-===//
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "compiler/KernelSpec.h"

namespace tilejit::cli {

/// The flags that describe a kernel: op, --shape/--rows/--cols, --dtype,
/// --wdtype, --zero-centered-gamma, --align, --arch.
struct SpecOptions {
  std::string op, dtype = "bf16", wdtype, arch, shape;
  int64_t rows = 0, cols = 0;
  int align = 0;
  bool zeroCentered = false;

  /// Registers the flags on `cmd`. `defaultArch` is used when --arch is absent
  /// ("" = sm_90a).
  void add(CLI::App *cmd);
  /// Builds and validates the spec; the error names the bad flag.
  llvm::Expected<KernelSpec> build(const std::string &defaultArch = "sm_90a") const;
};

} // namespace tilejit::cli
