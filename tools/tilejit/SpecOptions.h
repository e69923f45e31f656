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
/// --with-c/--with-bias, and --arch, --sms.
struct SpecOptions {
  std::string op, dtype, wdtype, arch, shape, layout, outDtype;
  std::vector<std::string> sets;
  /// Sizes as given (empty: not given), read by parseSize.
  std::string rows, cols, m, n, k, align, sms;
  bool withC = false;
  bool withBias = false;
  bool zeroCentered = false;

  /// Registers the flags on `cmd`.
  void add(CLI::App *cmd);
  /// Builds and validates the spec; the error names the bad flag.
  /// `defaultArch` is used when --arch is absent ("" = sm_90a), `defaultSms`
  /// (the GPU here, 0 = the arch's usual part) when --sms is.
  llvm::Expected<KernelSpec> build(const std::string &defaultArch = "sm_90a",
                                   int defaultSms = 0) const;
};

/// The one reading of a size on the command line: decimal digits only (no
/// sign, space or suffix), at most INT64_MAX; the error names `flag`.
llvm::Expected<int64_t> parseSize(const std::string &flag, const std::string &text);
/// The same with an optional leading '-': a --set value.
llvm::Expected<int64_t> parseInteger(const std::string &flag, const std::string &text);

} // namespace tilejit::cli
