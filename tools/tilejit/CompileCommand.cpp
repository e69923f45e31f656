//===- CompileCommand.cpp - `tilejit compile`: emit MLIR, CUDA, PTX ----------===//
#include "compiler/templates/Template.h"
#include "tools/tilejit/Commands.h"

#include <cstdio>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compiler/Compiler.h"
#include "core/LaunchInfo.h"
#include "tools/tilejit/Output.h"
#include "tools/tilejit/SpecOptions.h"

namespace tilejit::cli {

namespace {
struct CompileArgs {
  SpecOptions spec;
  std::string emit = "ptx", after, config, out, backend = "nvptx";
  bool json = false;
};

/// --emit cubin-info as JSON: the entries as the store records them
/// (core/LaunchInfo.h's entriesToJson), with the compile's figures.
nlohmann::json infoJson(const CompiledKernel &k) {
  nlohmann::json stages = nlohmann::json::array();
  for (const StageTime &st : k.stages)
    stages.push_back({{"name", st.name}, {"ms", st.ms}});
  return {{"spec", k.spec.canonical()},
          {"config", k.config.canonical()},
          {"key", k.key},
          {"backend", k.backend},
          {"cubin_bytes", k.cubin.size()},
          {"ptx_bytes", k.ptx.size()},
          {"compile_ms", k.mlirMs + k.binaryMs},
          {"workspace_bytes", k.workspaceBytes},
          {"entries", nlohmann::json::parse(entriesToJson(k.entries))},
          {"stages", stages}};
}

/// Whether `path` names a terminal, as /dev/tty or /dev/stdout may.
bool isTerminal(const std::string &path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISCHR(st.st_mode))
    return false;
  int fd = ::open(path.c_str(), O_WRONLY | O_NOCTTY | O_CLOEXEC);
  if (fd < 0)
    return false;
  bool tty = isatty(fd);
  ::close(fd);
  return tty;
}

int run(const CompileArgs &a) {
  auto built = a.spec.build();
  if (!built)
    return usageError(llvm::toString(built.takeError()));
  KernelSpec spec = *built;

  // --config names the parameters to change: the rest are the template's
  // default for this spec; the template checks the whole against the keys it
  // declares.
  TileConfig config;
  if (!a.config.empty()) {
    auto c = TileConfig::parse(a.config);
    if (!c)
      return usageError(llvm::toString(c.takeError()));
    config = getTemplate(spec).defaultConfig(spec).mergedWith(*c);
  }
  CompileOptions opts;
  auto backend = parseBackend(a.backend);
  if (!backend)
    return usageError("unknown --backend '" + a.backend + "' (known: " + backendNames() + ")");
  opts.backend = *backend;
  if (a.emit == "mlir")
    opts.stopAt = Stage::Mlir, opts.afterPass = a.after;
  else if (a.emit == "cuda")
    opts.stopAt = Stage::Cuda;
  else if (a.emit == "llvm")
    opts.stopAt = Stage::Llvm;
  else if (a.emit == "ptx")
    opts.stopAt = Stage::Ptx;
  else if (a.emit == "cubin-info" || a.emit == "cubin")
    opts.stopAt = Stage::Binary;
  else
    return usageError("unknown --emit '" + a.emit +
                      "' (known: mlir, llvm, ptx, cubin, cubin-info, cuda)");
  if (a.emit == "llvm" && opts.backend != Backend::Nvptx)
    return usageError("--emit llvm is the nvptx back end's LLVM IR; --backend is " + a.backend);
  if (!a.after.empty() && a.emit != "mlir")
    return usageError("--after applies to --emit mlir only");
  if (a.json && a.emit != "cubin-info")
    return usageError("--json prints --emit cubin-info; --emit " + a.emit + " is text");
  if (a.emit == "cubin" && a.out.empty())
    return usageError("--emit cubin writes binary: give -o FILE");
  if (a.emit == "cubin" && (a.out == "-" ? isatty(fileno(stdout)) : isTerminal(a.out)))
    return usageError("--emit cubin -o " + a.out +
                      " would write binary to a terminal: give -o FILE or redirect the output");

  auto compiled = compileKernel(spec, config, opts);
  if (!compiled)
    return fail(llvm::toString(compiled.takeError()));

  std::string text;
  if (a.emit == "mlir")
    text = compiled->mlir;
  else if (a.emit == "cuda")
    text = compiled->cuda;
  else if (a.emit == "llvm")
    text = compiled->llvm;
  else if (a.emit == "ptx")
    text = compiled->ptx;
  else if (a.emit == "cubin")
    text.assign(compiled->cubin.begin(), compiled->cubin.end());
  else if (a.json)
    text = dumped(infoJson(*compiled));
  else {
    std::string s;
    s += "spec       " + compiled->spec.canonical() + "\n";
    s += "config     " + compiled->config.canonical() + "\n";
    s += "key        " + compiled->key + "\n";
    s += "cubin      " + std::to_string(compiled->cubin.size()) + " bytes, PTX " +
         std::to_string(compiled->ptx.size()) + " bytes\n";
    bool nvptx = compiled->backend == "nvptx";
    s += "backend    " + compiled->backend + "\n";
    char buf[160];
    std::snprintf(buf, sizeof buf, "compile    %.1f ms (MLIR + %s %.1f, %s %.1f)\n",
                  compiled->mlirMs + compiled->binaryMs, nvptx ? "LLVM" : "C++", compiled->mlirMs,
                  nvptx ? "ptxas" : "NVRTC", compiled->binaryMs);
    s += buf;
    if (compiled->workspaceBytes)
      s += "workspace  " + std::to_string(compiled->workspaceBytes) + " bytes\n";
    for (const EntryInfo &e : compiled->entries) {
      s +=
          "entry      " + e.name + ": " + std::to_string(e.blockThreads) + " threads, " +
          std::to_string(e.registers) + " registers, " + std::to_string(e.spillBytes) +
          " bytes spilled, " + std::to_string(e.staticSmemBytes) + " bytes shared" +
          (e.dynamicSmemBytes ? " + " + std::to_string(e.dynamicSmemBytes) + " dynamic" : "") +
          ", grid " + e.grid[0].str() + (e.grid[1].results.empty() ? "" : " x " + e.grid[1].str()) +
          (e.grid[2].results.empty() ? "" : " x " + e.grid[2].str()) +
          (e.clusterBlocks() > 1 ? " clusters of " + std::to_string(e.clusterBlocks()) : "") + "\n";
    }
    std::string stages;
    for (const StageTime &st : compiled->stages) {
      std::snprintf(buf, sizeof buf, "%s%s %.1f", stages.empty() ? "" : ", ", st.name.c_str(),
                    st.ms);
      stages += buf;
    }
    s += "stages     " + stages + " (ms)\n";
    text = s;
  }
  if (a.out.empty() || a.out == "-") {
    std::fwrite(text.data(), 1, text.size(), stdout);
    if (!text.empty() && text.back() != '\n')
      std::fputc('\n', stdout);
    return 0;
  }
  if (auto e = writeFileAtomically(a.out, text))
    return fail(llvm::toString(std::move(e)));
  return 0;
}
} // namespace

Action addCompile(CLI::App &app) {
  auto a = std::make_shared<CompileArgs>();
  auto *cmd = app.add_subcommand("compile", "Compile one kernel and print MLIR, LLVM IR, PTX, "
                                            "CUDA C++ or a summary of the binary");
  a->spec.add(cmd);
  cmd->add_option("--config", a->config,
                  "Tile config parameters to change from the default, e.g. \"threads=512\"");
  cmd->add_option("--emit", a->emit,
                  "mlir, llvm, ptx (default), cubin, cubin-info, or cuda (the C++ back end's "
                  "source)");
  cmd->add_option("--after", a->after, "With --emit mlir: the IR after this pass");
  cmd->add_option("--backend", a->backend,
                  "nvptx (default: tile IR to LLVM + NVVM, LLVM's NVPTX back end, ptxas) "
                  "or cuda (CUDA C++, then NVRTC); "
                  "--emit cuda is always the C++ back end's source");
  cmd->add_option("-o,--output", a->out, "Output file (default: stdout)");
  cmd->add_flag("--json", a->json, "With --emit cubin-info: the summary as JSON");
  return [a] { return run(*a); };
}

} // namespace tilejit::cli
