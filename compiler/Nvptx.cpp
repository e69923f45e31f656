//===- Nvptx.cpp - LLVM IR to PTX in process ---------------------------------===//
#include "compiler/Nvptx.h"

#include <chrono>
#include <map>
#include <mutex>

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/NVVM/NVVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/Verifier.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Triple.h"

extern "C" void LLVMInitializeNVPTXTargetInfo();
extern "C" void LLVMInitializeNVPTXTarget();
extern "C" void LLVMInitializeNVPTXTargetMC();
extern "C" void LLVMInitializeNVPTXAsmPrinter();

namespace tilejit {

namespace {
/// The LLVM IR passes run before code generation (part of every key, as the
/// compiler's sources are).
constexpr const char *kIrPipeline = "function(sroa,early-cse,instsimplify,simplifycfg)";

llvm::Error error(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

void initializeNvptx() {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
  });
}
} // namespace

void registerLlvmIrTranslations(mlir::DialectRegistry &registry) {
  mlir::registerBuiltinDialectTranslation(registry);
  mlir::registerLLVMDialectTranslation(registry);
  mlir::registerNVVMDialectTranslation(registry);
}

std::string llvmVersionString() { return "LLVM " LLVM_VERSION_STRING; }

llvm::Expected<std::string> translateToPtx(mlir::ModuleOp module, const std::string &arch,
                                           std::string *llvmIR, NvptxTimes *times) {
  auto t0 = std::chrono::steady_clock::now();
  auto lap = [&](double NvptxTimes::*field) {
    auto now = std::chrono::steady_clock::now();
    if (times)
      times->*field = std::chrono::duration<double, std::milli>(now - t0).count();
    t0 = now;
  };
  initializeNvptx();
  // compileKernel's context has them already (adding them again is a lookup
  // per dialect); one made elsewhere (a test, a tool) gets them here.
  {
    mlir::DialectRegistry registry;
    registerLlvmIrTranslations(registry);
    module->getContext()->appendDialectRegistry(registry);
  }

  llvm::LLVMContext llctx;
  std::unique_ptr<llvm::Module> llmod = mlir::translateModuleToLLVMIR(module, llctx, "tilejit");
  if (!llmod)
    return error("translation of the LLVM dialect to LLVM IR failed");

  llvm::Triple triple("nvptx64-nvidia-cuda");
  std::string why;
  const llvm::Target *target = llvm::TargetRegistry::lookupTarget(triple, why);
  if (!target)
    return error("no NVPTX target in this LLVM: " + why);
  // One target machine per thread and arch, made at first use: a compile
  // reuses it (it is not shared between threads).
  thread_local std::map<std::string, std::unique_ptr<llvm::TargetMachine>> machines;
  std::unique_ptr<llvm::TargetMachine> &tm = machines[arch];
  if (!tm) {
    llvm::TargetOptions opts;
    // As CUDA's default (--fmad=true): a multiply and an add may fuse.
    opts.AllowFPOpFusion = llvm::FPOpFusion::Fast;
    // The default level, not the aggressive one: it differs for NVPTX in
    // running EarlyCSE where the other runs GVN, which gave byte-identical
    // PTX for every template's kernels and cost 2-3 ms more on the RMSNorm
    // backward (bench/NOTES.md, "Compile and lookup").
    tm.reset(target->createTargetMachine(triple, arch, kPtxFeatures, opts, std::nullopt,
                                         std::nullopt, llvm::CodeGenOptLevel::Default));
    if (!tm)
      return error("LLVM's NVPTX back end does not take target '" + arch + "'");
  }
  llmod->setTargetTriple(triple);
  llmod->setDataLayout(tm->createDataLayout());
  std::string broken;
  llvm::raw_string_ostream brokenOs(broken);
  if (llvm::verifyModule(*llmod, &brokenOs))
    return error("the LLVM IR of the kernel does not verify: " + broken);
  lap(&NvptxTimes::translateMs);

  {
    llvm::LoopAnalysisManager lam;
    llvm::FunctionAnalysisManager fam;
    llvm::CGSCCAnalysisManager cgam;
    llvm::ModuleAnalysisManager mam;
    llvm::PassBuilder pb(tm.get());
    pb.registerModuleAnalyses(mam);
    pb.registerCGSCCAnalyses(cgam);
    pb.registerFunctionAnalyses(fam);
    pb.registerLoopAnalyses(lam);
    pb.crossRegisterProxies(lam, fam, cgam, mam);
    // A light pipeline: ptxas optimizes the PTX at -O3 in any case, and
    // LLVM's O3 pipeline (InstCombine over the fragments' element moves above
    // all) doubled the compile for PTX no better to the eye (not timed on a
    // GPU). SROA takes the one alloca (the cluster reductions' counter) into
    // registers.
    llvm::ModulePassManager mpm;
    if (auto err = pb.parsePassPipeline(mpm, kIrPipeline))
      return error("LLVM pipeline '" + std::string(kIrPipeline) +
                   "': " + llvm::toString(std::move(err)));
    mpm.run(*llmod, mam);
  }
  lap(&NvptxTimes::optimizeMs);
  if (llvmIR) {
    llvm::raw_string_ostream os(*llvmIR);
    llmod->print(os, nullptr);
  }

  std::string ptx;
  {
    llvm::raw_string_ostream os(ptx);
    llvm::buffer_ostream bos(os);
    llvm::legacy::PassManager pm;
    if (tm->addPassesToEmitFile(pm, bos, nullptr, llvm::CodeGenFileType::AssemblyFile))
      return error("the NVPTX back end cannot emit PTX for " + arch);
    pm.run(*llmod);
  }
  lap(&NvptxTimes::codegenMs);
  return ptx;
}

} // namespace tilejit
