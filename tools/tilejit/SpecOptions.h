//===- SpecOptions.h - kernel spec flags shared by CLI commands ----*- C++ -*-===//
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "core/KernelSpec.h"

namespace tilejit::cli {

/// The flags that describe a kernel: op, --set NAME=VALUE for any parameter
/// the op declares, RMSNorm's --shape/--rows/--cols, --dtype, --wdtype,
/// --zero-centered-gamma, --align, GEMM's --m/--n/--k/--layout/--out-dtype/
/// --with-c, and --arch, --sms.
struct SpecOptions {
  std::string op, dtype, wdtype, arch, shape, layout, outDtype;
  std::vector<std::string> sets;
  int64_t rows = 0, cols = 0, m = 0, n = 0, k = 0;
  bool withC = false;
  int align = 0, sms = 0;
  bool zeroCentered = false;

  /// Registers the flags on `cmd`.
  void add(CLI::App *cmd);
  /// Builds and validates the spec; the error names the bad flag.
  /// `defaultArch` is used when --arch is absent ("" = sm_90a), `defaultSms`
  /// (the GPU here, 0 = the arch's usual part) when --sms is.
  llvm::Expected<KernelSpec> build(const std::string &defaultArch = "sm_90a",
                                   int defaultSms = 0) const;
};

} // namespace tilejit::cli
