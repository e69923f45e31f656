//===- tilejit-opt.cpp - run any tilejit pass on tile IR ---------------------===//
#include "compiler/Compiler.h"
#include "compiler/passes/Passes.h"
#include "mlir/Conversion/Passes.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
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
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "tilejit optimizer driver\n", registry));
}
