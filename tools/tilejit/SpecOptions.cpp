//===- SpecOptions.cpp ------------------------------------------------------===//
#include "tools/tilejit/SpecOptions.h"

#include <algorithm>
#include <tuple>

namespace tilejit::cli {

namespace {
llvm::Error err(const std::string &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}
} // namespace

llvm::Expected<int64_t> parseInteger(const std::string &flag, const std::string &text) {
  size_t i = !text.empty() && text[0] == '-' ? 1 : 0;
  if (i == text.size())
    return err(flag + " '" + text + "' is not an integer");
  uint64_t v = 0;
  uint64_t limit = i ? uint64_t(INT64_MAX) + 1 : uint64_t(INT64_MAX);
  for (; i < text.size(); ++i) {
    char c = text[i];
    if (c < '0' || c > '9')
      return err(flag + " '" + text + "' is not " +
                 (text[0] == '-' ? "an integer" : "a whole number of decimal digits"));
    unsigned d = unsigned(c - '0');
    if (v > (limit - d) / 10)
      return err(flag + " '" + text + "' is too large (at most " + std::to_string(INT64_MAX) + ")");
    v = v * 10 + d;
  }
  if (text[0] == '-')
    return v == uint64_t(INT64_MAX) + 1 ? INT64_MIN : -int64_t(v);
  return int64_t(v);
}

llvm::Expected<int64_t> parseSize(const std::string &flag, const std::string &text) {
  if (text.empty() || text[0] == '-')
    return err(flag + " '" + text + "' is not a whole number of decimal digits");
  return parseInteger(flag, text);
}

void SpecOptions::add(CLI::App *cmd) {
  cmd->add_option("op", op, "The op (" + knownOpNames() + ")")->required();
  cmd->add_option("--set", sets,
                  "NAME=VALUE: any parameter the op declares (tilejit ops lists them); "
                  "repeatable; a parameter that a flag below gives is not --set as well");
  cmd->add_option("--shape", shape, "ROWSxCOLS, e.g. 16384x4096 (rmsnorm)");
  cmd->add_option("--rows", rows, "Rows (rmsnorm; kernels take rows at launch)")->type_name("INT");
  cmd->add_option("--cols,--hidden", cols, "Hidden size (rmsnorm; compiled in)")->type_name("INT");
  cmd->add_option("--dtype", dtype, "Activation dtype: bf16, f16, f32");
  cmd->add_option("--wdtype", wdtype, "Weight dtype (default: --dtype)");
  cmd->add_flag("--zero-centered-gamma", zeroCentered, "y = x * rstd * (1 + w)");
  cmd->add_option(
         "--align", align,
         "Bytes every operand is aligned to (default: the most the row length allows, up to 16)")
      ->type_name("INT");
  cmd->add_option("--m", m, "Rows of D (gemm; given at launch)")->type_name("INT");
  cmd->add_option("--n", n, "Columns of D (gemm; compiled in)")->type_name("INT");
  cmd->add_option("--k", k, "The reduction (gemm; compiled in)")->type_name("INT");
  cmd->add_option("--layout", layout,
                  "gemm: nt (forward of a linear layer: B stored N x K), nn (its input "
                  "gradient), tn (its weight gradient: A stored K x M) or tt");
  cmd->add_option("--out-dtype", outDtype, "gemm: C and D's dtype (bf16, f16, f32)");
  cmd->add_flag("--with-c", withC, "gemm: D = alpha A B + beta C");
  cmd->add_flag("--with-bias", withBias, "gemm: adds a bias of N elements to every row of D");
  cmd->add_option("--arch", arch, Target::knownArchs());
  cmd->add_option("--sms", sms,
                  "Multiprocessors of the target GPU, which size persistent grids (default: the "
                  "GPU here when tuning, else the arch's usual part: 132 for sm_90)")
      ->type_name("INT");
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
  int64_t smCount = 0;
  if (!sms.empty()) {
    auto n = parseSize("--sms", sms);
    if (!n)
      return n.takeError();
    if (*n < 1 || *n > 1024)
      return err("bad --sms " + sms + " (multiprocessors, 1 to 1024)");
    smCount = *n;
  }
  if (int n = smCount ? int(smCount) : defaultSms)
    target->setSMs(n);
  KernelSpec spec(*decl, *target);
  // A flag names a parameter; an op that does not declare it rejects it.
  auto param = [&](const char *flag, const char *name, int64_t v) -> llvm::Error {
    if (auto e = spec.set(name, v))
      return err(std::string(flag) + ": " + llvm::toString(std::move(e)));
    return llvm::Error::success();
  };
  bool rmsShape = decl->index("cols") >= 0;
  // Parameters given by a flag; a --set of one of them conflicts.
  std::vector<std::string> byFlag;
  if (decl->index("ab") >= 0) {
    // GEMM: --dtype is A's and B's, --out-dtype C's and D's.
    for (auto [flag, name, text] :
         {std::tuple{"--dtype", "ab", dtype}, std::tuple{"--out-dtype", "out", outDtype}}) {
      if (text.empty())
        continue;
      auto dt = parseDType(text);
      if (!dt)
        return err(std::string(flag) + ": unknown dtype '" + text + "' (known: bf16, f16, f32)");
      if (auto e = param(flag, name, int64_t(*dt)))
        return e;
      byFlag.push_back(name);
    }
    if (!layout.empty()) {
      if (layout.size() != 2 || (layout[0] != 'n' && layout[0] != 't') ||
          (layout[1] != 'n' && layout[1] != 't'))
        return err("--layout: '" + layout + "' is not nt, nn, tn or tt");
      if (auto e = param("--layout", "ta", layout[0] == 't'))
        return e;
      if (auto e = param("--layout", "tb", layout[1] == 't'))
        return e;
      byFlag.insert(byFlag.end(), {"ta", "tb"});
    }
    for (auto [flag, name, text] :
         {std::tuple{"--m", "m", m}, std::tuple{"--n", "n", n}, std::tuple{"--k", "k", k}}) {
      if (text.empty())
        continue;
      auto v = parseSize(flag, text);
      if (!v)
        return v.takeError();
      if (auto e = param(flag, name, *v))
        return e;
      byFlag.push_back(name);
    }
    for (auto [flag, name, on] :
         {std::tuple{"--with-c", "c", withC}, std::tuple{"--with-bias", "bias", withBias}}) {
      if (!on)
        continue;
      if (auto e = param(flag, name, 1))
        return e;
      byFlag.push_back(name);
    }
  } else if (!m.empty() || !n.empty() || !k.empty() || !layout.empty() || !outDtype.empty() ||
             withC || withBias) {
    return err("--m, --n, --k, --layout, --out-dtype, --with-c and --with-bias are gemm's; " + op +
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
  // One source for each size: --shape, or --rows and --cols.
  if (!shape.empty() && (!rows.empty() || !cols.empty()))
    return err("--shape " + shape + " and --" + (rows.empty() ? "cols" : "rows") +
               " both give sizes: give --shape ROWSxCOLS or --rows and --cols");
  int64_t r = 1, c = 0;
  if (!shape.empty()) {
    auto x = shape.find('x');
    auto rr = x == std::string::npos ? llvm::Expected<int64_t>(err(""))
                                     : parseSize("--shape", shape.substr(0, x));
    auto cc = x == std::string::npos ? llvm::Expected<int64_t>(err(""))
                                     : parseSize("--shape", shape.substr(x + 1));
    if (!rr || !cc) {
      llvm::consumeError(rr.takeError());
      llvm::consumeError(cc.takeError());
      return err("bad --shape '" + shape +
                 "' (expected ROWSxCOLS in decimal digits, e.g. "
                 "16384x4096)");
    }
    r = *rr;
    c = *cc;
  }
  if (!rows.empty()) {
    auto n = parseSize("--rows", rows);
    if (!n)
      return n.takeError();
    r = *n;
  }
  if (!cols.empty()) {
    auto n = parseSize("--cols", cols);
    if (!n)
      return n.takeError();
    c = *n;
  }
  if (rmsShape) {
    if (shape.empty() && cols.empty() && sets.empty())
      return err("missing the hidden size: give --cols N or --shape ROWSxCOLS");
    if (auto e = param(shape.empty() ? "--rows" : "--shape", "rows", r))
      return e;
    if (!shape.empty() || !rows.empty())
      byFlag.push_back("rows");
    if (shape.empty() && cols.empty())
      c = spec[decl->index("cols")];
    else
      byFlag.push_back("cols");
    if (auto e = param(shape.empty() ? "--cols" : "--shape", "cols", c))
      return e;
  } else if (!shape.empty() || !rows.empty() || !cols.empty()) {
    return err("--shape, --rows and --cols are RMSNorm's; " + op + " takes --set NAME=VALUE");
  }
  if (!dtype.empty() && decl->index("ab") < 0)
    byFlag.push_back("dtype");
  if (!wdtype.empty())
    byFlag.push_back("wdtype");
  if (zeroCentered) {
    if (auto e = param("--zero-centered-gamma", "zcg", 1))
      return e;
    byFlag.push_back("zcg");
  }
  int64_t alignBytes = 0;
  if (!align.empty()) {
    auto n = parseSize("--align", align);
    if (!n)
      return n.takeError();
    if (*n == 0)
      return err("--align 0: give the bytes every operand is aligned to (1 to 16)");
    alignBytes = *n;
    byFlag.push_back("align");
  }
  if (decl->index("align") >= 0) {
    int64_t a = alignBytes;
    if (!a && decl->index("dtype") >= 0)
      a = alignmentOf({}, c * dtypeBytes(DType(spec[decl->index("dtype")])));
    if (a)
      if (auto e = param("--align", "align", a))
        return e;
  } else if (alignBytes) {
    return err("--align: " + op + " has no parameter 'align'");
  }
  std::vector<std::string> bySet;
  for (const std::string &kv : sets) {
    auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      return err("--set '" + kv + "' is not NAME=VALUE");
    std::string name = kv.substr(0, eq), value = kv.substr(eq + 1);
    int i = decl->index(name);
    if (i < 0)
      return err("--set: " + op + " has no parameter '" + name + "'");
    if (std::find(byFlag.begin(), byFlag.end(), name) != byFlag.end())
      return err("--set " + kv + ": " + name + " is given by another flag as well");
    if (std::find(bySet.begin(), bySet.end(), name) != bySet.end())
      return err("--set " + kv + ": " + name + " is given twice");
    bySet.push_back(name);
    int64_t v = 0;
    if (decl->params[size_t(i)].kind == ParamDecl::Type) {
      auto t = parseDType(value);
      if (!t)
        return err("--set " + name + ": unknown dtype '" + value + "' (known: bf16, f16, f32)");
      v = int64_t(*t);
    } else {
      auto n = parseInteger("--set " + name, value);
      if (!n)
        return n.takeError();
      v = *n;
    }
    spec.set(i, v);
  }
  if (auto e = spec.validate())
    return e;
  return spec;
}

} // namespace tilejit::cli
