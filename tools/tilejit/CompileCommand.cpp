//===- CompileCommand.cpp - `tilejit compile`: emit MLIR, CUDA, PTX ----------===//
#include "tools/tilejit/Commands.h"

#include <cstdio>
#include <fstream>

#include "compiler/Compiler.h"
#include "compiler/templates/Template.h"

namespace tilejit::cli {

namespace {
struct CompileArgs {
  std::string op, dtype = "bf16", wdtype, arch = "sm_90a", emit = "cuda", after, config, out, shape;
  int64_t rows = 0, cols = 0;
  int align = 0; // 0: the largest the row length allows
  bool zeroCentered = false;
};

/// "16384x4096" -> rows, cols.
bool parseShape(const std::string &s, int64_t &rows, int64_t &cols) {
  auto x = s.find('x');
  if (x == std::string::npos) return false;
  try {
    size_t a = 0, b = 0;
    rows = std::stoll(s.substr(0, x), &a);
    cols = std::stoll(s.substr(x + 1), &b);
    return a == x && b == s.size() - x - 1;
  } catch (...) {
    return false;
  }
}

int run(const CompileArgs &a) {
  auto op = parseOpKind(a.op);
  if (!op)
    return fail("unknown op '" + a.op + "' (known: rmsnorm_fwd, rmsnorm_bwd)");
  KernelSpec spec;
  spec.op = *op;
  auto dt = parseDType(a.dtype);
  if (!dt)
    return fail("unknown dtype '" + a.dtype + "' (known: bf16, f16, f32)");
  spec.dtype = *dt;
  auto wdt = parseDType(a.wdtype.empty() ? a.dtype : a.wdtype);
  if (!wdt)
    return fail("unknown weight dtype '" + a.wdtype + "' (known: bf16, f16, f32)");
  spec.wdtype = *wdt;
  spec.rows = a.rows;
  spec.cols = a.cols;
  if (!a.shape.empty() && !parseShape(a.shape, spec.rows, spec.cols))
    return fail("bad --shape '" + a.shape + "' (expected ROWSxCOLS, e.g. 16384x4096)");
  if (a.shape.empty() && a.cols == 0)
    return fail("missing the hidden size: give --cols N or --shape ROWSxCOLS");
  if (spec.rows == 0)
    spec.rows = 1;
  spec.zeroCenteredGamma = a.zeroCentered;
  spec.align = a.align ? a.align : alignmentOf({}, spec.cols * dtypeBytes(spec.dtype));
  spec.arch = a.arch;
  if (auto err = spec.validate())
    return fail(llvm::toString(std::move(err)));

  TileConfig config;
  if (!a.config.empty()) {
    auto c = TileConfig::parse(a.config);
    if (!c)
      return fail(llvm::toString(c.takeError()));
    config = *c;
  }
  CompileOptions opts;
  if (a.emit == "mlir")
    opts.stopAt = Stage::Mlir, opts.afterPass = a.after;
  else if (a.emit == "cuda")
    opts.stopAt = Stage::Cuda;
  else if (a.emit == "ptx" || a.emit == "cubin-info" || a.emit == "cubin")
    opts.stopAt = Stage::Binary;
  else
    return fail("unknown --emit '" + a.emit + "' (known: mlir, cuda, ptx, cubin, cubin-info)");
  if (!a.after.empty() && a.emit != "mlir")
    return fail("--after applies to --emit mlir only");
  if (a.emit == "cubin" && a.out.empty())
    return fail("--emit cubin writes binary: give -o FILE");

  auto compiled = compileKernel(spec, config, opts);
  if (!compiled)
    return fail(llvm::toString(compiled.takeError()));

  std::string text;
  if (a.emit == "mlir") text = compiled->mlir;
  else if (a.emit == "cuda") text = compiled->cuda;
  else if (a.emit == "ptx") text = compiled->ptx;
  else if (a.emit == "cubin") text.assign(compiled->cubin.begin(), compiled->cubin.end());
  else {
    std::string s;
    s += "spec       " + compiled->spec.canonical() + "\n";
    s += "config     " + compiled->config.canonical() + "\n";
    s += "key        " + compiled->key + "\n";
    s += "cubin      " + std::to_string(compiled->cubin.size()) + " bytes, PTX " +
         std::to_string(compiled->ptx.size()) + " bytes\n";
    char buf[160];
    std::snprintf(buf, sizeof buf, "compile    %.1f ms (MLIR + C++ %.1f, NVRTC %.1f)\n",
                  compiled->mlirMs + compiled->nvrtcMs, compiled->mlirMs, compiled->nvrtcMs);
    s += buf;
    if (compiled->workspaceBytes)
      s += "workspace  " + std::to_string(compiled->workspaceBytes) + " bytes\n";
    for (const EntryInfo &e : compiled->entries) {
      s += "entry      " + e.name + ": " + std::to_string(e.blockThreads) + " threads, " +
           std::to_string(e.registers) + " registers, " + std::to_string(e.spillBytes) +
           " bytes spilled, " + std::to_string(e.staticSmemBytes) + " bytes shared, grid " +
           e.grid.str() + "\n";
    }
    text = s;
  }
  if (a.out.empty() || a.out == "-") {
    std::fwrite(text.data(), 1, text.size(), stdout);
    if (!text.empty() && text.back() != '\n') std::fputc('\n', stdout);
    return 0;
  }
  std::ofstream f(a.out, std::ios::binary);
  if (!f)
    return fail("cannot write '" + a.out + "'");
  f.write(text.data(), std::streamsize(text.size()));
  if (!f)
    return fail("writing '" + a.out + "' failed");
  return 0;
}
} // namespace

Action addCompile(CLI::App &app) {
  auto a = std::make_shared<CompileArgs>();
  auto *cmd = app.add_subcommand("compile", "Compile one kernel and print MLIR, CUDA C++, PTX "
                                            "or a summary of the binary");
  cmd->add_option("op", a->op, "rmsnorm_fwd or rmsnorm_bwd")->required();
  cmd->add_option("--shape", a->shape, "ROWSxCOLS, e.g. 16384x4096");
  cmd->add_option("--rows", a->rows, "Rows (a tuning hint; kernels take rows at launch)");
  cmd->add_option("--cols,--hidden", a->cols, "Hidden size (compiled in)");
  cmd->add_option("--dtype", a->dtype, "Activation dtype: bf16, f16, f32");
  cmd->add_option("--wdtype", a->wdtype, "Weight dtype (default: --dtype)");
  cmd->add_flag("--zero-centered-gamma", a->zeroCentered, "y = x * rstd * (1 + w)");
  cmd->add_option("--align", a->align, "Bytes every operand is aligned to (default: the most the row length allows, up to 16)");
  cmd->add_option("--arch", a->arch, "sm_80, sm_86, sm_89, sm_90, sm_90a (default)");
  cmd->add_option("--config", a->config, "Tile config, e.g. \"threads=256 rows=1 vec=8\"");
  cmd->add_option("--emit", a->emit, "mlir, cuda (default), ptx, cubin, cubin-info");
  cmd->add_option("--after", a->after, "With --emit mlir: the IR after this pass");
  cmd->add_option("-o,--output", a->out, "Output file (default: stdout)");
  return [a] { return run(*a); };
}

} // namespace tilejit::cli
