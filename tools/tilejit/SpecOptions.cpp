//===- SpecOptions.cpp ------------------------------------------------------===//
#include "tools/tilejit/SpecOptions.h"

namespace tilejit::cli {

namespace {
llvm::Error err(const std::string &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

/// "16384x4096" -> rows, cols.
bool parseShape(const std::string &s, int64_t &rows, int64_t &cols) {
  auto x = s.find('x');
  if (x == std::string::npos)
    return false;
  try {
    size_t a = 0, b = 0;
    rows = std::stoll(s.substr(0, x), &a);
    cols = std::stoll(s.substr(x + 1), &b);
    return a == x && b == s.size() - x - 1;
  } catch (...) {
    return false;
  }
}
} // namespace

void SpecOptions::add(CLI::App *cmd) {
  cmd->add_option("op", op, "rmsnorm_fwd or rmsnorm_bwd")->required();
  cmd->add_option("--shape", shape, "ROWSxCOLS, e.g. 16384x4096");
  cmd->add_option("--rows", rows, "Rows (kernels take rows at launch; tuning is per row count)");
  cmd->add_option("--cols,--hidden", cols, "Hidden size (compiled in)");
  cmd->add_option("--dtype", dtype, "Activation dtype: bf16, f16, f32");
  cmd->add_option("--wdtype", wdtype, "Weight dtype (default: --dtype)");
  cmd->add_flag("--zero-centered-gamma", zeroCentered, "y = x * rstd * (1 + w)");
  cmd->add_option(
      "--align", align,
      "Bytes every operand is aligned to (default: the most the row length allows, up to 16)");
  cmd->add_option("--arch", arch, "sm_80, sm_86, sm_89, sm_90, sm_90a");
  cmd->add_option("--sms", sms,
                  "Multiprocessors of the target GPU, which size persistent grids (default: the "
                  "GPU here when tuning, else the arch's usual part: 132 for sm_90)");
}

llvm::Expected<KernelSpec> SpecOptions::build(const std::string &defaultArch,
                                              int defaultSms) const {
  auto kind = parseOpKind(op);
  if (!kind)
    return err("unknown op '" + op + "' (known: rmsnorm_fwd, rmsnorm_bwd)");
  KernelSpec spec;
  spec.op = *kind;
  auto dt = parseDType(dtype);
  if (!dt)
    return err("unknown dtype '" + dtype + "' (known: bf16, f16, f32)");
  spec.dtype = *dt;
  auto wdt = parseDType(wdtype.empty() ? dtype : wdtype);
  if (!wdt)
    return err("unknown weight dtype '" + wdtype + "' (known: bf16, f16, f32)");
  spec.wdtype = *wdt;
  spec.rows = rows;
  spec.cols = cols;
  if (!shape.empty() && !parseShape(shape, spec.rows, spec.cols))
    return err("bad --shape '" + shape + "' (expected ROWSxCOLS, e.g. 16384x4096)");
  if (shape.empty() && cols == 0)
    return err("missing the hidden size: give --cols N or --shape ROWSxCOLS");
  if (spec.rows == 0 && shape.empty())
    spec.rows = 1;
  spec.zeroCenteredGamma = zeroCentered;
  spec.align = align ? align : alignmentOf({}, spec.cols * dtypeBytes(spec.dtype));
  spec.arch = arch.empty() ? (defaultArch.empty() ? "sm_90a" : defaultArch) : arch;
  if (sms < 0 || sms > 1024)
    return err("bad --sms " + std::to_string(sms) + " (multiprocessors, 1 to 1024)");
  if (int n = sms ? sms : defaultSms)
    spec.setTargetSMs(n);
  if (auto e = spec.validate())
    return e;
  return spec;
}

} // namespace tilejit::cli
