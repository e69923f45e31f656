//===- Compiler.cpp - the compile pipeline --------------------------------===//
#include "compiler/Compiler.h"

#include <cctype>
#include <chrono>

#include "compiler/EmbeddedSources.h"
#include "compiler/Nvptx.h"
#include "compiler/Nvrtc.h"
#include "compiler/Ptxas.h"
#include "compiler/passes/Passes.h"
#include "compiler/templates/Template.h"
#include "core/Sha256.h"
#include "dialects/Tile/TileDialect.h"
#include "mlir/Conversion/NVVMToLLVM/NVVMToLLVM.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Target/Cpp/CppEmitter.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace tilejit {

const char *tilejitVersion() { return TILEJIT_VERSION; }

void registerTileJitDialects(DialectRegistry &registry) {
  registry.insert<tile::TileDialect, arith::ArithDialect, math::MathDialect, scf::SCFDialect,
                  memref::MemRefDialect, cf::ControlFlowDialect, emitc::EmitCDialect,
                  LLVM::LLVMDialect, NVVM::NVVMDialect>();
}

std::vector<std::string> pipelinePasses(Backend backend) {
  std::vector<std::string> passes = {"tile-check-target", "canonicalize", "tile-allocate-shared"};
  switch (backend) {
  case Backend::Nvptx:
    passes.insert(passes.end(), {"convert-scf-to-cf", "convert-tile-to-llvm",
                                 "convert-nvvm-to-llvm", "reconcile-unrealized-casts"});
    break;
  case Backend::Cuda:
    passes.push_back("tile-lower-to-emitc");
    break;
  }
  return passes;
}

bool addPipelinePass(OpPassManager &pm, const std::string &name, const std::string &arch) {
  if (name == "tile-check-target") {
    TileCheckTargetOptions o;
    o.arch = arch;
    pm.addPass(createTileCheckTarget(o));
  } else if (name == "canonicalize") {
    pm.addPass(createCanonicalizerPass());
  } else if (name == "tile-allocate-shared") {
    pm.addPass(createTileAllocateShared());
  } else if (name == "convert-scf-to-cf") {
    pm.addPass(createSCFToControlFlowPass());
  } else if (name == "convert-tile-to-llvm") {
    ConvertTileToLLVMOptions o;
    o.arch = arch;
    pm.addPass(createConvertTileToLLVM(o));
  } else if (name == "convert-nvvm-to-llvm") {
    pm.addPass(createConvertNVVMToLLVMPass());
  } else if (name == "reconcile-unrealized-casts") {
    pm.addPass(createReconcileUnrealizedCastsPass());
  } else if (name == "tile-lower-to-emitc") {
    pm.addPass(createTileLowerToEmitC());
  } else {
    return false;
  }
  return true;
}

namespace {
struct PipelineOptions : PassPipelineOptions<PipelineOptions> {
  Option<std::string> arch{*this, "arch", llvm::cl::desc("Target architecture"),
                           llvm::cl::init("sm_90a")};
};
} // namespace

void registerTileJitPipelines() {
  PassPipelineRegistration<PipelineOptions>(
      "tilejit-lower-to-llvm",
      "The NVPTX back end's pipeline from tile IR to the LLVM dialect with NVVM, as the "
      "compiler runs it",
      [](OpPassManager &pm, const PipelineOptions &o) {
        for (const std::string &name : pipelinePasses(Backend::Nvptx))
          addPipelinePass(pm, name, o.arch);
      });
}

const char *backendName(Backend b) {
  switch (b) {
  case Backend::Nvptx:
    return "nvptx";
  case Backend::Cuda:
    return "cuda";
  }
  return "?";
}

const char *backendNames() { return "nvptx, cuda"; }

std::optional<Backend> parseBackend(std::string_view name) {
  for (Backend b : {Backend::Nvptx, Backend::Cuda})
    if (name == backendName(b))
      return b;
  return std::nullopt;
}

BuildIdentity buildIdentity(const KernelSpec &spec, Backend backend) {
  BuildIdentity id;
  id.backend = backendName(backend);
  const KernelTemplate *tmpl = findTemplate(spec.op());
  // Every toolchain's version: either back end's binary depends on all of
  // them only through what it runs, but one recipe keeps the keys simple.
  // The libraries a process loaded do not change under it, so their
  // versions are asked once (a key is made on every server Lookup).
  static const std::string versions =
      std::string("\ntilejit=") + tilejitVersion() + "\nllvm=" + llvmVersionString() +
      "\nnvrtc=" + nvrtcVersionString() + "\nptxas=" + ptxasVersionString() +
      "\ndevice=" + std::string(embedded::deviceLibraryHash());
  id.toolchain = "template=" + std::string(tmpl ? tmpl->sourceHash() : "none") +
                 "\ncompiler=" + std::string(embedded::compilerSourceHash()) + versions;
  return id;
}

std::string kernelKey(const KernelSpec &spec, const TileConfig &config, Backend backend) {
  return kernelKey(spec, config, buildIdentity(spec, backend));
}

char CompileInterrupted::ID = 0;

namespace {

llvm::Error error(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

double msSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

/// Collects MLIR diagnostics so a failing pass reports them in the error.
struct DiagnosticCollector {
  explicit DiagnosticCollector(MLIRContext &ctx)
      : handler(&ctx, [this](Diagnostic &d) {
          llvm::raw_string_ostream os(text);
          if (!text.empty())
            os << "\n";
          os << d;
          return success();
        }) {}
  std::string text;
  ScopedDiagnosticHandler handler;
};

/// Compiles one thread makes in one MLIR context before it makes a fresh one.
constexpr int kCompilesPerContext = 64;

/// The MLIR context for a compile on this thread, with the pipeline's
/// dialects loaded. Loading them (the LLVM and NVVM dialects above all) took
/// 1.7 ms a compile on the 2-core machine, as long as all the passes of an
/// RMSNorm kernel, so a thread keeps its context for kCompilesPerContext
/// compiles. The types and attributes a compile makes stay in a context until
/// it is destroyed, which bounds what the reuse keeps alive. The module built
/// in it must be gone before the next call on the thread (compiles do not
/// nest).
/// Marks a compile under way on this thread: one started inside another (a
/// template or hook that compiles) is refused, as it could replace the
/// context the outer compile's module lives in.
struct CompileScope {
  static thread_local int depth;
  bool nested;
  CompileScope() : nested(depth++ > 0) {}
  ~CompileScope() { --depth; }
};
thread_local int CompileScope::depth = 0;

MLIRContext &compileContext() {
  struct Slot {
    std::unique_ptr<MLIRContext> ctx;
    int uses = 0;
  };
  thread_local Slot slot;
  if (!slot.ctx || slot.uses >= kCompilesPerContext) {
    slot.ctx.reset();
    DialectRegistry registry;
    registerTileJitDialects(registry);
    registerLlvmIrTranslations(registry);
    slot.ctx = std::make_unique<MLIRContext>(registry, MLIRContext::Threading::DISABLED);
    slot.ctx->loadAllAvailableDialects();
    slot.uses = 0;
  }
  ++slot.uses;
  return *slot.ctx;
}

ParamInfo paramOf(Type t) {
  ParamInfo p;
  auto dtypeOf = [](Type e) {
    return e.isBF16() ? DType::BF16 : e.isF16() ? DType::F16 : DType::F32;
  };
  if (auto m = dyn_cast<MemRefType>(t)) {
    p.kind = ParamInfo::View;
    p.elem = dtypeOf(m.getElementType());
    for (int64_t s : m.getShape())
      p.staticSizes.push_back(ShapedType::isDynamic(s) ? -1 : s);
    if (auto strided = dyn_cast<StridedLayoutAttr>(m.getLayout()))
      for (int64_t s : strided.getStrides().drop_back())
        p.staticStrides.push_back(ShapedType::isDynamic(s) ? -1 : s);
  } else if (t.isF32()) {
    p.kind = ParamInfo::F32;
  } else if (auto map = dyn_cast<tile::TensorMapType>(t)) {
    // The box one copy moves: what the launch encodes into the map.
    p.kind = ParamInfo::TensorMap;
    p.elem = dtypeOf(map.getElementType());
    // The outer dimensions of a tensor of rank 3 to 5 move one element deep.
    p.staticSizes = {map.getRows(), map.getCols()};
    p.staticSizes.resize(size_t(map.getRank()), 1);
  } else {
    p.kind = ParamInfo::Index;
  }
  return p;
}

/// Flattens an affine expression of symbols into postfix terms.
LogicalResult toPostfix(AffineExpr e, std::vector<GridRule::Term> &out) {
  if (auto c = dyn_cast<AffineConstantExpr>(e)) {
    out.push_back({GridRule::Const, c.getValue()});
    return success();
  }
  if (auto s = dyn_cast<AffineSymbolExpr>(e)) {
    out.push_back({GridRule::Sym, int64_t(s.getPosition())});
    return success();
  }
  auto bin = dyn_cast<AffineBinaryOpExpr>(e);
  if (!bin)
    return failure();
  if (failed(toPostfix(bin.getLHS(), out)) || failed(toPostfix(bin.getRHS(), out)))
    return failure();
  switch (e.getKind()) {
  case AffineExprKind::Add:
    out.push_back({GridRule::Add, 0});
    break;
  case AffineExprKind::Mul:
    out.push_back({GridRule::Mul, 0});
    break;
  case AffineExprKind::FloorDiv:
    out.push_back({GridRule::FloorDiv, 0});
    break;
  case AffineExprKind::CeilDiv:
    out.push_back({GridRule::CeilDiv, 0});
    break;
  case AffineExprKind::Mod:
    out.push_back({GridRule::Mod, 0});
    break;
  default:
    return failure();
  }
  return success();
}

llvm::Expected<EntryInfo> entryOf(tile::KernelOp kernel) {
  EntryInfo info;
  info.name = kernel.getSymName().str();
  info.blockThreads = int(kernel.getBlockThreads());
  info.cluster = {int(kernel.getClusterBlocks()), 1, 1};
  if (auto s = kernel.getScratchBytes())
    info.staticSmemBytes = int(*s);
  if (auto d = kernel.getDynamicSmemBytes())
    info.dynamicSmemBytes = int(*d);
  for (auto [i, t] : llvm::enumerate(kernel.getArgumentTypes())) {
    ParamInfo p = paramOf(t);
    p.name = "arg" + std::to_string(i);
    info.params.push_back(std::move(p));
  }
  for (AffineExpr e : kernel.getGrid().getResults()) {
    std::vector<GridRule::Term> prog;
    if (failed(toPostfix(e, prog)))
      return error("kernel '" + info.name + "' has a grid expression tilejit cannot evaluate");
    info.grid[0].results.push_back(std::move(prog));
  }
  ArrayRef<int64_t> ops = kernel.getGridOperands();
  for (size_t i = 0; i + 1 < ops.size(); i += 2)
    info.grid[0].symbols.push_back({int(ops[i]), int(ops[i + 1])});
  return info;
}

/// The integer just before `suffix` in `line` ("Used 40 registers" with
/// suffix " registers" gives 40), or -1.
int numberBefore(const std::string &line, const char *suffix) {
  size_t at = line.find(suffix);
  if (at == std::string::npos || at == 0)
    return -1;
  size_t start = at;
  while (start > 0 && std::isdigit(static_cast<unsigned char>(line[start - 1])))
    --start;
  if (start == at)
    return -1;
  return std::stoi(line.substr(start, at - start));
}

/// Reads registers and spills per entry from ptxas's report in the log:
/// "Compiling entry function 'NAME' for 'sm_90a'", then "Used N registers"
/// and "N bytes spill stores".
void readResources(const std::string &log, std::vector<EntryInfo> &entries) {
  EntryInfo *current = nullptr;
  size_t pos = 0;
  while (pos < log.size()) {
    size_t end = log.find('\n', pos);
    if (end == std::string::npos)
      end = log.size();
    std::string line = log.substr(pos, end - pos);
    pos = end + 1;
    static const std::string kEntry = "Compiling entry function '";
    if (size_t at = line.find(kEntry); at != std::string::npos) {
      size_t begin = at + kEntry.size(), close = line.find('\'', begin);
      std::string name =
          line.substr(begin, close == std::string::npos ? std::string::npos : close - begin);
      current = nullptr;
      for (auto &e : entries)
        if (e.name == name)
          current = &e;
    } else if (current) {
      if (int regs = numberBefore(line, " registers");
          line.find("Used ") != std::string::npos && regs >= 0)
        current->registers = regs;
      if (int spill = numberBefore(line, " bytes spill stores"); spill >= 0)
        current->spillBytes = spill;
      if (int smem = numberBefore(line, " bytes smem"); smem >= 0)
        current->staticSmemBytes = smem;
    }
  }
}

} // namespace

llvm::Error checkBackend(const KernelSpec &spec, Backend backend) {
  const KernelTemplate *tmpl = findTemplate(spec.op());
  if (!tmpl)
    return error("no template builds op '" + std::string(spec.opName()) + "'");
  if (backend == Backend::Cuda && !tmpl->hasCudaBackend())
    return error("the cuda back end does not build " + std::string(spec.opName()) +
                 " (it has rmsnorm_fwd and rmsnorm_bwd); use the nvptx back end");
  return llvm::Error::success();
}

llvm::Expected<CompiledKernel> compileKernel(const KernelSpec &spec, TileConfig config,
                                             const CompileOptions &options) {
  auto t0 = std::chrono::steady_clock::now();
  if (auto err = spec.validate())
    return err;
  // --emit cuda is the C++ back end's source, whichever back end was asked for.
  Backend backend = options.stopAt == Stage::Cuda ? Backend::Cuda : options.backend;
  if (auto err = checkBackend(spec, backend))
    return err;
  const KernelTemplate &tmpl = *findTemplate(spec.op());
  // The config as given, whole: a key left out means its absence (no
  // segments, no cluster), never the default's value. The CLI lays a partial
  // config over the default itself.
  if (config.values.empty())
    config = tmpl.defaultConfig(spec);
  if (auto err = tmpl.checkConfig(spec, config))
    return error("config '" + config.canonical() + "' for '" + spec.canonical() +
                 "': " + llvm::toString(std::move(err)));

  const std::string arch(spec.target.archName());
  CompiledKernel out;
  out.spec = spec;
  out.config = config;
  out.key = kernelKey(spec, config, options.backend);
  out.workspaceBytes = tmpl.workspace(spec, config).bytes;

  auto lap = t0;
  auto stage = [&](std::string name) {
    auto now = std::chrono::steady_clock::now();
    out.stages.push_back(
        {std::move(name), std::chrono::duration<double, std::milli>(now - lap).count()});
    lap = now;
  };

  CompileScope scope;
  if (scope.nested)
    return error("a compile started inside another on the same thread");
  MLIRContext &ctx = compileContext();
  DiagnosticCollector diags(ctx);
  stage("setup");

  auto module = tmpl.build(ctx, spec, config);
  if (!module)
    return module.takeError();
  if (failed(verify(**module)))
    return error("template for " + std::string(spec.opName()) + " built invalid IR: " + diags.text);
  stage("build");

  auto print = [&](std::string &to) {
    llvm::raw_string_ostream os(to);
    (*module)->print(os);
  };
  if (options.stopAt == Stage::Mlir && options.afterPass.empty()) {
    print(out.mlir);
    return out;
  }
  auto passes = pipelinePasses(backend);
  if (!options.afterPass.empty() &&
      std::find(passes.begin(), passes.end(), options.afterPass) == passes.end()) {
    std::string known;
    for (const std::string &p : passes)
      known += (known.empty() ? "" : ", ") + p;
    return error("unknown pass '" + options.afterPass + "' (the " + backendName(backend) +
                 " pipeline: " + known + ")");
  }

  std::vector<EntryInfo> entries;
  // Launch information comes from the tile kernels once their shared memory
  // is placed, before they are lowered.
  auto readEntries = [&]() -> llvm::Error {
    for (auto kernel : (*module)->getOps<tile::KernelOp>()) {
      auto info = entryOf(kernel);
      if (!info)
        return info.takeError();
      entries.push_back(std::move(*info));
    }
    return llvm::Error::success();
  };
  auto runPass = [&](const std::string &name) -> llvm::Error {
    PassManager pm(&ctx);
    // The passes after the tile dialect's own are MLIR's and the conversion,
    // whose output the translation to LLVM IR checks; verifying the module
    // after each of them again costs a millisecond a pass.
    pm.enableVerifier(name == "tile-check-target" || name == "canonicalize" ||
                      name == "tile-allocate-shared" || name == "reconcile-unrealized-casts");
    addPipelinePass(pm, name, arch);
    if (failed(pm.run(**module)))
      return error("pass " + name + " failed on " + spec.canonical() + ": " + diags.text);
    return llvm::Error::success();
  };
  for (const std::string &name : passes) {
    if (auto err = runPass(name))
      return err;
    stage(name);
    if (name == "tile-allocate-shared")
      if (auto err = readEntries())
        return err;
    if (options.stopAt == Stage::Mlir && options.afterPass == name) {
      print(out.mlir);
      return out;
    }
  }
  out.entries = std::move(entries);

  out.backend = backendName(backend);
  if (backend == Backend::Nvptx) {
    NvptxTimes times;
    auto ptx =
        translateToPtx(**module, arch, options.stopAt == Stage::Llvm ? &out.llvm : nullptr, &times);
    if (!ptx)
      return error("PTX generation failed for " + spec.canonical() + ": " +
                   llvm::toString(ptx.takeError()) + (diags.text.empty() ? "" : "\n" + diags.text));
    out.ptx = std::move(*ptx);
    // Code generation's share is what the other two leave of the whole call,
    // freeing the LLVM module included.
    auto now = std::chrono::steady_clock::now();
    double whole = std::chrono::duration<double, std::milli>(now - lap).count();
    out.stages.push_back({"translate", times.translateMs});
    out.stages.push_back({"llvm-opt", times.optimizeMs});
    out.stages.push_back({"codegen", whole - times.translateMs - times.optimizeMs});
    lap = now;
  } else if (backend == Backend::Cuda) {
    llvm::raw_string_ostream cuda(out.cuda);
    if (failed(emitc::translateToCpp(**module, cuda)))
      return error("C++ emission failed for " + spec.canonical() + ": " + diags.text);
    stage("emit-cpp");
  }
  out.mlirMs = msSince(t0);
  if (options.stopAt == Stage::Cuda || options.stopAt == Stage::Llvm ||
      (options.stopAt == Stage::Ptx && backend != Backend::Cuda))
    return out;
  bool ptxPath = backend != Backend::Cuda;

  auto t1 = std::chrono::steady_clock::now();
  std::string name = out.entries.empty() ? "kernel" : out.entries.front().name;
  llvm::Expected<NvrtcOutput> binary =
      ptxPath ? (options.ptxas ? options.ptxas(out.ptx, name, arch)
                               : assembleWithPtxas(out.ptx, name, arch))
              : (options.nvrtc ? options.nvrtc(out.cuda, name, arch)
                               : compileWithNvrtc(out.cuda, name, arch));
  if (!binary) {
    std::string what = "kernel " + spec.canonical() + " [" + config.canonical() + "] key " +
                       out.key.substr(0, 16) + ": ";
    llvm::Error e = binary.takeError();
    if (e.isA<CompileInterrupted>())
      return llvm::make_error<CompileInterrupted>(what + llvm::toString(std::move(e)));
    return error(what + llvm::toString(std::move(e)));
  }
  out.binaryMs = msSince(t1);
  out.stages.push_back({ptxPath ? "ptxas" : "nvrtc", out.binaryMs});
  if (!ptxPath) // NVRTC's PTX; the NVPTX back end's is already here
    out.ptx = std::move(binary->ptx);
  out.cubin = std::move(binary->cubin);
  out.log = std::move(binary->log);
  readResources(out.log, out.entries);
  return out;
}

namespace {
/// The parameter an LLVM-dialect kernel argument is, or an error naming it.
llvm::Expected<ParamInfo> paramOfLlvmArg(LLVM::LLVMFuncOp f, unsigned i) {
  Type t = f.getArgumentTypes()[i];
  ParamInfo p;
  p.name = "arg" + std::to_string(i);
  auto bad = [&](const llvm::Twine &why) {
    return error("kernel '" + f.getSymName() + "', argument " + llvm::Twine(i) + ": " + why);
  };
  if (auto ptr = dyn_cast<LLVM::LLVMPointerType>(t)) {
    if (auto byval = f.getArgAttrOfType<TypeAttr>(i, "llvm.byval")) {
      auto array = dyn_cast<LLVM::LLVMArrayType>(byval.getValue());
      if (!array || array.getNumElements() != 128 || !array.getElementType().isInteger(8) ||
          !f.getArgAttr(i, "nvvm.grid_constant"))
        return bad("a by-value argument must be a 128-byte tensor map (llvm.byval = "
                   "!llvm.array<128 x i8>, nvvm.grid_constant)");
      p.kind = ParamInfo::TensorMap;
      return p;
    }
    if (ptr.getAddressSpace() != 0 && ptr.getAddressSpace() != 1)
      return bad("a pointer argument must be global (address space 1) or generic");
    p.kind = ParamInfo::Ptr;
    return p;
  }
  if (t.isInteger(32)) {
    p.kind = ParamInfo::I32;
    return p;
  }
  if (t.isInteger(64)) {
    p.kind = ParamInfo::Index;
    return p;
  }
  if (t.isF32()) {
    p.kind = ParamInfo::F32;
    return p;
  }
  if (auto st = dyn_cast<LLVM::LLVMStructType>(t)) {
    ArrayRef<Type> body = st.getBody();
    bool view = body.size() >= 2 && body.size() <= 5 && isa<LLVM::LLVMPointerType>(body[0]) &&
                llvm::all_of(body.drop_front(), [](Type e) { return e.isInteger(64); });
    if (view) {
      p.kind = ParamInfo::View;
      p.staticSizes.assign(body.size() - 1, -1);
      return p;
    }
  }
  std::string printed;
  llvm::raw_string_ostream os(printed);
  t.print(os);
  return bad("type " + printed + " is not a kernel parameter tilejit launches");
}

/// A 1-D block size from `nvvm.maxntid` / `nvvm.reqntid`.
llvm::Expected<int> blockThreadsOf(LLVM::LLVMFuncOp f) {
  for (const char *name : {"nvvm.reqntid", "nvvm.maxntid"})
    if (auto a = f->getAttrOfType<DenseI32ArrayAttr>(name)) {
      ArrayRef<int32_t> v = a.asArrayRef();
      if (v.empty() || v[0] < 1 || v[0] > 1024 ||
          llvm::any_of(v.drop_front(), [](int32_t d) { return d != 1; }))
        return error("kernel '" + f.getSymName() + "': " + name +
                     " must be [threads, 1, 1] with 1 to 1024 threads");
      return int(v[0]);
    }
  return error("kernel '" + f.getSymName() + "' has no nvvm.maxntid or nvvm.reqntid: tilejit " +
               "launches it with that many threads");
}
} // namespace

llvm::Expected<KernelBinary> compileLlvmDialectModule(std::string_view mlirText,
                                                      const Target &target,
                                                      const std::vector<LaunchShape> &launch) {
  CompileScope scope;
  if (scope.nested)
    return error("a compile started inside another on the same thread");
  MLIRContext &ctx = compileContext();
  DiagnosticCollector diags(ctx);
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(mlirText, &ctx);
  if (!module)
    return error("the LLVM-dialect module does not parse: " + diags.text);
  KernelBinary out;
  out.backend = backendName(Backend::Nvptx);
  const std::string arch(target.archName());
  for (auto f : module->getOps<LLVM::LLVMFuncOp>()) {
    if (!f->hasAttr("nvvm.kernel"))
      continue;
    EntryInfo e;
    e.name = f.getSymName().str();
    auto threads = blockThreadsOf(f);
    if (!threads)
      return threads.takeError();
    e.blockThreads = *threads;
    if (auto c = f->getAttrOfType<DenseI32ArrayAttr>("nvvm.cluster_dim"))
      for (size_t d = 0; d < 3 && d < c.asArrayRef().size(); ++d)
        e.cluster[d] = int(c.asArrayRef()[d]);
    for (unsigned i = 0; i < f.getNumArguments(); ++i) {
      auto p = paramOfLlvmArg(f, i);
      if (!p)
        return p.takeError();
      e.params.push_back(std::move(*p));
    }
    auto shape = std::find_if(launch.begin(), launch.end(),
                              [&](const LaunchShape &l) { return l.name == e.name; });
    if (shape == launch.end())
      return error("no launch shape (grid, dynamic shared memory) given for kernel '" + e.name +
                   "'");
    e.grid = shape->grid;
    e.dynamicSmemBytes = shape->dynamicSmemBytes;
    if (e.clusterBlocks() > 1 && !target.hasClusters())
      return error("kernel '" + e.name + "' runs in clusters, which " + arch + " does not have");
    if (e.dynamicSmemBytes > target.maxSharedBytesPerBlock())
      return error("kernel '" + e.name + "' asks for " + llvm::Twine(e.dynamicSmemBytes) +
                   " bytes of dynamic shared memory; " + arch + " allows " +
                   llvm::Twine(target.maxSharedBytesPerBlock()));
    if (auto err = e.validate())
      return err;
    out.entries.push_back(std::move(e));
  }
  if (out.entries.empty())
    return error("the module has no kernel (llvm.func with nvvm.kernel)");
  for (const LaunchShape &l : launch)
    if (std::none_of(out.entries.begin(), out.entries.end(),
                     [&](const EntryInfo &e) { return e.name == l.name; }))
      return error("a launch shape names '" + l.name + "', which is no kernel of the module");

  PassManager pm(&ctx);
  pm.addPass(createConvertNVVMToLLVMPass());
  pm.addPass(createReconcileUnrealizedCastsPass());
  if (failed(pm.run(*module)))
    return error("lowering NVVM ops failed: " + diags.text);
  auto ptx = translateToPtx(*module, arch);
  if (!ptx)
    return error("PTX generation failed: " + llvm::toString(ptx.takeError()) +
                 (diags.text.empty() ? "" : "\n" + diags.text));
  auto binary = assembleWithPtxas(*ptx, out.entries.front().name, arch);
  if (!binary)
    return binary.takeError();
  out.cubin = std::move(binary->cubin);
  out.log = std::move(binary->log);
  readResources(out.log, out.entries);
  out.key = sha256Hex("llvm-dialect\n" + std::string(mlirText) + "\narch=" + arch + "\n" +
                      buildIdentity(KernelSpec(), Backend::Nvptx).toolchain);
  return out;
}

} // namespace tilejit
