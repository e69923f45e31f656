//===- tilejit-opt.cpp - run any tilejit pass on tile IR ---------------------===//
#include "compiler/Compiler.h"
#include "compiler/passes/Passes.h"
#include "mlir/Conversion/Passes.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"

namespace {

/// MLIR's parser, verifier and printer recurse once per level of nesting;
/// far beyond this many levels they run out of stack and crash. No tile IR
/// comes near it.
constexpr int kMaxNesting = 512;

/// Fails with a diagnostic at the first bracket, brace, parenthesis or '<'
/// that opens a level deeper than kMaxNesting (outside strings and
/// comments): such input is refused before the parser sees it.
mlir::LogicalResult checkNesting(const llvm::MemoryBuffer &buffer) {
  llvm::StringRef text = buffer.getBuffer();
  int depth = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    char next = i + 1 < text.size() ? text[i + 1] : '\0';
    if (c == '"') { // a string: skip to its closing quote
      for (++i; i < text.size() && text[i] != '"'; ++i)
        if (text[i] == '\\')
          ++i;
      continue;
    }
    if (c == '/' && next == '/') {
      while (i < text.size() && text[i] != '\n')
        ++i;
      continue;
    }
    bool opens = c == '{' || c == '(' || c == '[' || (c == '<' && next != '=');
    bool closes = c == '}' || c == ')' || c == ']' ||
                  (c == '>' && next != '=' && (i == 0 || text[i - 1] != '-'));
    if (closes && depth > 0)
      --depth;
    if (opens && ++depth > kMaxNesting) {
      llvm::SourceMgr sm;
      sm.AddNewSourceBuffer(llvm::MemoryBuffer::getMemBuffer(buffer.getMemBufferRef(), false),
                            llvm::SMLoc());
      sm.PrintMessage(llvm::errs(), llvm::SMLoc::getFromPointer(text.data() + i),
                      llvm::SourceMgr::DK_Error,
                      "nesting deeper than " + llvm::Twine(kMaxNesting) +
                          " levels of brackets, braces, parentheses and '<'; tilejit-opt "
                          "does not parse it");
      return mlir::failure();
    }
  }
  return mlir::success();
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  mlir::DialectRegistry registry;
  tilejit::registerTileJitDialects(registry);
  tilejit::registerTileJitPasses();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  // MLIR's own passes in the pipeline, each runnable alone as well.
  mlir::registerSCFToControlFlowPass();
  mlir::registerConvertNVVMToLLVMPass();
  mlir::registerReconcileUnrealizedCastsPass();
  tilejit::registerTileJitPipelines();

  auto [inputFile, outputFile] =
      mlir::registerAndParseCLIOptions(argc, argv, "tilejit optimizer driver\n", registry);
  mlir::MlirOptMainConfig config = mlir::MlirOptMainConfig::createFromCLOptions();
  // These read no input.
  if (config.shouldShowDialects() || config.shouldListPasses())
    return mlir::asMainReturnCode(mlir::MlirOptMain(argc, argv, inputFile, outputFile, registry));

  std::string error;
  std::unique_ptr<llvm::MemoryBuffer> input = mlir::openInputFile(inputFile, &error);
  if (!input) {
    llvm::errs() << error << "\n";
    return 1;
  }
  if (mlir::failed(checkNesting(*input)))
    return 1;
  std::unique_ptr<llvm::ToolOutputFile> output = mlir::openOutputFile(outputFile, &error);
  if (!output) {
    llvm::errs() << error << "\n";
    return 1;
  }
  if (mlir::failed(mlir::MlirOptMain(output->os(), std::move(input), registry, config)))
    return 1;
  output->keep();
  return 0;
}
