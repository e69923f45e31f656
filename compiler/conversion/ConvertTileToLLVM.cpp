//===- ConvertTileToLLVM.cpp - the convert-tile-to-llvm pass -----------------===//
#include "compiler/conversion/TileToLLVM.h"
#include "compiler/passes/Passes.h"

#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Transforms/DialectConversion.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace tilejit::tile;

namespace tilejit {
#define GEN_PASS_DEF_CONVERTTILETOLLVM
#include "compiler/passes/Passes.h.inc"

TileTypeConverter::TileTypeConverter(MLIRContext *ctx) : LLVMTypeConverter(ctx) {
  // Later conversions are tried first: these take tiles and memrefs before
  // the LLVM type converter's own (tensors it does not lower; memref
  // descriptors tilejit's kernels do not use).
  addConversion([this](RankedTensorType t) -> std::optional<Type> {
    auto layout = dyn_cast_or_null<LayoutAttrInterface>(t.getEncoding());
    if (!layout)
      return std::nullopt;
    return VectorType::get({layout.getElemsPerThread(t.getShape())},
                           convertType(t.getElementType()));
  });
  addConversion([ctx](MemRefType m) -> std::optional<Type> {
    if (!isGlobalMemRef(m))
      return std::nullopt;
    // The pointer, each size, then with row strides each stride but the
    // last (llvmx::unpackGlobal reads them).
    SmallVector<Type> fields = {LLVM::LLVMPointerType::get(ctx, 1)};
    fields.append(m.getRank(), IntegerType::get(ctx, 64));
    if (hasRowStrides(m))
      fields.append(m.getRank() - 1, IntegerType::get(ctx, 64));
    return LLVM::LLVMStructType::getLiteral(ctx, fields);
  });
  // Rings, barriers and words: their base address in shared memory; a tensor map:
  // the address of the by-value parameter.
  addConversion(
      [ctx](RingType) -> std::optional<Type> { return LLVM::LLVMPointerType::get(ctx, 3); });
  addConversion(
      [ctx](BarriersType) -> std::optional<Type> { return LLVM::LLVMPointerType::get(ctx, 3); });
  addConversion(
      [ctx](WordsType) -> std::optional<Type> { return LLVM::LLVMPointerType::get(ctx, 3); });
  addConversion(
      [ctx](TensorMapType) -> std::optional<Type> { return LLVM::LLVMPointerType::get(ctx); });
}

namespace {

struct ConvertTileToLLVMPass : impl::ConvertTileToLLVMBase<ConvertTileToLLVMPass> {
  using ConvertTileToLLVMBase::ConvertTileToLLVMBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *ctx = &getContext();
    auto parsed = Target::parse(arch);
    if (!parsed) {
      module.emitError() << "unknown target arch '" << arch << "' (known: " << Target::knownArchs()
                         << ")";
      return signalPassFailure();
    }
    TargetInfo target(*parsed);
    LoweringState state;

    // Per kernel, before it is converted: its shared memory (one global in
    // address space 3: the scratch, then the cluster slots and barriers).
    OpBuilder b(ctx);
    for (KernelOp kernel : llvm::make_early_inc_range(module.getOps<KernelOp>())) {
      if (!kernel.getScratchBytes()) {
        kernel.emitError() << "kernel '" << kernel.getSymName()
                           << "' has no scratch_bytes: run tile-allocate-shared first";
        return signalPassFailure();
      }
      KernelLowering &k = state.kernels[kernel.getSymName()];
      k.clusterBlocks = kernel.getClusterBlocks();
      k.blockThreads = kernel.getBlockThreads();
      k.scratchBytes = *kernel.getScratchBytes();
      k.clusterRows = kernel.getClusterRows().value_or(0);
      if (k.clusterRows > 0 && (k.clusterBlocks < 2 || !target.hasClusters())) {
        kernel.emitError() << "kernel '" << kernel.getSymName() << "' reduces across a cluster but "
                           << (target.hasClusters() ? "does not run in clusters"
                                                    : "the target " + arch + " has none");
        return signalPassFailure();
      }
      k.sharedBytes = k.scratchBytes;
      if (k.clusterRows > 0) {
        k.clusterOffset = llvm::alignTo(k.scratchBytes, 8);
        k.barriersOffset =
            k.clusterOffset + llvm::alignTo(2 * k.clusterBlocks * k.clusterRows * 4, 8);
        k.sharedBytes = k.barriersOffset + 16;
      }
      if (k.sharedBytes > 0) {
        k.sharedName = (kernel.getSymName() + "_shared").str();
        b.setInsertionPoint(kernel);
        LLVM::GlobalOp::create(b, kernel.getLoc(),
                               LLVM::LLVMArrayType::get(b.getI8Type(), k.sharedBytes),
                               /*isConstant=*/false, LLVM::Linkage::Internal, k.sharedName,
                               Attribute(), /*alignment=*/16, /*addrSpace=*/3);
      }
      if (kernel.getDynamicSmemBytes()) {
        k.dynamicName = (kernel.getSymName() + "_dynamic").str();
        b.setInsertionPoint(kernel);
        LLVM::GlobalOp::create(b, kernel.getLoc(), LLVM::LLVMArrayType::get(b.getI8Type(), 0),
                               /*isConstant=*/false, LLVM::Linkage::External, k.dynamicName,
                               Attribute(), /*alignment=*/1024, /*addrSpace=*/3);
      }
    }

    // The math functions LLVM's NVPTX back end has instructions for (or this
    // lowering maps to NVVM): any other would reach NVPTX as a libcall it
    // cannot make, which aborts code generation.
    WalkResult unsupported = module.walk([&](Operation *op) {
      if (!isa<math::MathDialect>(op->getDialect()) ||
          isa<math::AbsFOp, math::SqrtOp, math::RsqrtOp, math::ExpOp, math::Exp2Op, math::Log2Op,
              math::FmaOp, math::FloorOp, math::CeilOp>(op))
        return WalkResult::advance();
      op->emitError() << "'" << op->getName() << "' has no lowering for NVPTX (supported math: "
                      << "absf, sqrt, rsqrt, exp, exp2, log2, fma, floor, ceil)";
      return WalkResult::interrupt();
    });
    if (unsupported.wasInterrupted())
      return signalPassFailure();

    TileTypeConverter converter(ctx);
    RewritePatternSet patterns(ctx);
    populateKernelOpToLLVMPatterns(converter, state, patterns);
    populateLoadStoreOpToLLVMPatterns(converter, patterns);
    populateElementwiseOpToLLVMPatterns(converter, patterns);
    populateReduceOpToLLVMPatterns(converter, state, patterns);
    populateAsyncOpToLLVMPatterns(converter, state, patterns);
    populateAsyncCopyOpToLLVMPatterns(converter, state, patterns);
    // tile.dot by the target's tensor-core instruction.
    if (target.target().hasWgmma())
      populateDotOpToLLVMPatterns(converter, patterns);
    else
      populateMmaSyncDotOpToLLVMPatterns(converter, patterns);
    arith::populateArithToLLVMConversionPatterns(converter, patterns);
    populateMathToLLVMConversionPatterns(converter, patterns);
    cf::populateControlFlowToLLVMConversionPatterns(converter, patterns);

    ConversionTarget conv(*ctx);
    conv.addLegalDialect<LLVM::LLVMDialect, NVVM::NVVMDialect>();
    conv.addIllegalDialect<TileDialect, arith::ArithDialect, math::MathDialect,
                           cf::ControlFlowDialect, scf::SCFDialect, memref::MemRefDialect>();
    conv.addLegalOp<ModuleOp>();
    if (failed(applyPartialConversion(module, conv, std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
} // namespace tilejit
