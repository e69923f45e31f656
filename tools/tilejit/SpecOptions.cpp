//===- SpecOptions.cpp ------------------------------------------------------===//
#include "tools/tilejit/SpecOptions.h"

#include <tuple>

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
  cmd->add_option("op", op, "The op (" + knownOpNames() + ")")->required();
  cmd->add_option("--set", sets,
                  "NAME=VALUE: any parameter the op declares (tilejit ops lists them); "
                  "repeatable, applied after the flags below");
  cmd->add_option("--shape", shape, "ROWSxCOLS, e.g. 16384x4096 (rmsnorm)");
  cmd->add_option("--rows", rows, "Rows (rmsnorm; kernels take rows at launch)");
  cmd->add_option("--cols,--hidden", cols, "Hidden size (rmsnorm; compiled in)");
  cmd->add_option("--dtype", dtype, "Activation dtype: bf16, f16, f32");
  cmd->add_option("--wdtype", wdtype, "Weight dtype (default: --dtype)");
  cmd->add_flag("--zero-centered-gamma", zeroCentered, "y = x * rstd * (1 + w)");
  cmd->add_option(
      "--align", align,
      "Bytes every operand is aligned to (default: the most the row length allows, up to 16)");
  cmd->add_option("--m", m, "Rows of D (gemm; given at launch)");
  cmd->add_option("--n", n, "Columns of D (gemm; compiled in)");
  cmd->add_option("--k", k, "The reduction (gemm; compiled in)");
  cmd->add_option("--layout", layout,
                  "gemm: nt (forward of a linear layer: B stored N x K), nn (its input "
                  "gradient), tn (its weight gradient: A stored K x M) or tt");
  cmd->add_option("--out-dtype", outDtype, "gemm: C and D's dtype (bf16, f16, f32)");
  cmd->add_flag("--with-c", withC, "gemm: D = alpha A B + beta C");
  cmd->add_option("--arch", arch, Target::knownArchs());
  cmd->add_option("--sms", sms,
                  "Multiprocessors of the target GPU, which size persistent grids (default: the "
                  "GPU here when tuning, else the arch's usual part: 132 for sm_90)");
}

llvm::Expected<KernelSpec> SpecOptions::build(const std::string &defaultArch,
                                              int defaultSms) const {
  const OpDecl *decl = findOp(op);
  if (!decl)
    return err("unknown op '" + op + "' (known: " + knownOpNames() + ")");
  std::string archName = arch.empty() ? (defaultArch.empty() ? "sm_90a" : defaultArch) : arch;
  auto target = Target::parse(archName);
  if (!target)
    return err("unknown arch '" + archName + "' (known: " + Target::knownArchs() + ")");
  if (sms < 0 || sms > 1024)
    return err("bad --sms " + std::to_string(sms) + " (multiprocessors, 1 to 1024)");
  if (int n = sms ? sms : defaultSms)
    target->setSMs(n);
  KernelSpec spec(*decl, *target);
  // A flag names a parameter; an op that does not declare it rejects it.
  auto param = [&](const char *flag, const char *name, int64_t v) -> llvm::Error {
    if (auto e = spec.set(name, v))
      return err(std::string(flag) + ": " + llvm::toString(std::move(e)));
    return llvm::Error::success();
  };
  bool rmsShape = decl->index("cols") >= 0;
  if (decl->index("ab") >= 0) {
    // GEMM: --dtype is A's and B's, --out-dtype C's and D's.
    for (auto [flag, name, text] : {std::tuple{"--dtype", "ab", dtype},
                                    std::tuple{"--out-dtype", "out", outDtype}}) {
      if (text.empty())
        continue;
      auto dt = parseDType(text);
      if (!dt)
        return err(std::string(flag) + ": unknown dtype '" + text + "' (known: bf16, f16, f32)");
      if (auto e = param(flag, name, int64_t(*dt)))
        return e;
    }
    if (!layout.empty()) {
      if (layout.size() != 2 || (layout[0] != 'n' && layout[0] != 't') ||
          (layout[1] != 'n' && layout[1] != 't'))
        return err("--layout: '" + layout + "' is not nt, nn, tn or tt");
      if (auto e = param("--layout", "ta", layout[0] == 't'))
        return e;
      if (auto e = param("--layout", "tb", layout[1] == 't'))
        return e;
    }
    for (auto [flag, name, v] : {std::tuple{"--m", "m", m}, std::tuple{"--n", "n", n},
                                 std::tuple{"--k", "k", k}})
      if (v != 0)
        if (auto e = param(flag, name, v))
          return e;
    if (withC)
      if (auto e = param("--with-c", "c", 1))
        return e;
  } else if (m || n || k || !layout.empty() || !outDtype.empty() || withC) {
    return err("--m, --n, --k, --layout, --out-dtype and --with-c are gemm's; " + op +
               " takes --set NAME=VALUE");
  }
  if (rmsShape || (!dtype.empty() && decl->index("ab") < 0)) {
    auto dt = parseDType(dtype.empty() ? "bf16" : dtype);
    if (!dt)
      return err("unknown dtype '" + dtype + "' (known: bf16, f16, f32)");
    if (decl->index("dtype") >= 0 || !dtype.empty())
      if (auto e = param("--dtype", "dtype", int64_t(*dt)))
        return e;
    auto wdt = parseDType(wdtype.empty() ? (dtype.empty() ? "bf16" : dtype) : wdtype);
    if (!wdt)
      return err("unknown weight dtype '" + wdtype + "' (known: bf16, f16, f32)");
    if (decl->index("wdtype") >= 0 || !wdtype.empty())
      if (auto e = param("--wdtype", "wdtype", int64_t(*wdt)))
        return e;
  }
  int64_t r = rows, c = cols;
  if (!shape.empty() && !parseShape(shape, r, c))
    return err("bad --shape '" + shape + "' (expected ROWSxCOLS, e.g. 16384x4096)");
  if (rmsShape) {
    if (shape.empty() && cols == 0 && sets.empty())
      return err("missing the hidden size: give --cols N or --shape ROWSxCOLS");
    if (r == 0 && shape.empty())
      r = 1;
    if (auto e = param("--rows", "rows", r))
      return e;
    if (shape.empty() && cols == 0)
      c = spec[decl->index("cols")];
    if (auto e = param("--cols", "cols", c))
      return e;
  } else if (!shape.empty() || rows || cols) {
    return err("--shape, --rows and --cols are RMSNorm's; " + op + " takes --set NAME=VALUE");
  }
  if (zeroCentered)
    if (auto e = param("--zero-centered-gamma", "zcg", 1))
      return e;
  if (decl->index("align") >= 0) {
    int64_t a = align;
    if (!a && decl->index("dtype") >= 0)
      a = alignmentOf({}, c * dtypeBytes(DType(spec[decl->index("dtype")])));
    if (a)
      if (auto e = param("--align", "align", a))
        return e;
  } else if (align) {
    return err("--align: " + op + " has no parameter 'align'");
  }
  for (const std::string &kv : sets) {
    auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      return err("--set '" + kv + "' is not NAME=VALUE");
    std::string name = kv.substr(0, eq), value = kv.substr(eq + 1);
    int i = decl->index(name);
    if (i < 0)
      return err("--set: " + op + " has no parameter '" + name + "'");
    int64_t v = 0;
    if (decl->params[size_t(i)].kind == ParamDecl::Type) {
      auto t = parseDType(value);
      if (!t)
        return err("--set " + name + ": unknown dtype '" + value + "' (known: bf16, f16, f32)");
      v = int64_t(*t);
    } else {
      size_t used = 0;
      bool ok = !value.empty();
      try {
        v = std::stoll(value, &used);
      } catch (...) {
        ok = false;
      }
      if (!ok || used != value.size())
        return err("--set " + name + ": '" + value + "' is not an integer");
    }
    spec.set(i, v);
  }
  if (auto e = spec.validate())
    return e;
  return spec;
}

} // namespace tilejit::cli
