//===- Kernel.cpp -----------------------------------------------------------===//
#include "compiler/templates/Kernel.h"

#include "mlir/Dialect/Math/IR/Math.h"

using namespace mlir;

namespace tilejit {

Type elemType(MLIRContext &ctx, DType t) {
  switch (t) {
  case DType::BF16:
    return BFloat16Type::get(&ctx);
  case DType::F16:
    return Float16Type::get(&ctx);
  case DType::F32:
    return Float32Type::get(&ctx);
  }
  return Float32Type::get(&ctx);
}

DictionaryAttr configAttr(MLIRContext &ctx, const TileConfig &cfg) {
  Builder b(&ctx);
  SmallVector<NamedAttribute> attrs;
  for (auto &[k, v] : cfg.values)
    attrs.push_back(b.getNamedAttr(k, b.getI64IntegerAttr(v)));
  return b.getDictionaryAttr(attrs);
}

tile::KernelOp makeKernel(OpBuilder &b, Location loc, StringRef name, ArrayRef<Type> args,
                          int64_t threads, AffineMap grid, ArrayRef<int64_t> gridOperands,
                          const TileConfig &cfg, int64_t cluster, int64_t minBlocks) {
  auto fnType = b.getFunctionType(args, {});
  auto kernel = tile::KernelOp::create(
      b, loc, name, fnType, threads, grid, gridOperands, configAttr(*b.getContext(), cfg),
      /*arg_attrs=*/nullptr, /*res_attrs=*/nullptr,
      cluster > 1 ? b.getI64IntegerAttr(cluster) : nullptr,
      minBlocks > 0 ? b.getI64IntegerAttr(minBlocks) : nullptr, /*scratch_bytes=*/nullptr,
      /*cluster_rows=*/nullptr, /*dynamic_smem_bytes=*/nullptr);
  Block *entry = b.createBlock(&kernel.getBody());
  for (Type t : args)
    entry->addArgument(t, loc);
  return kernel;
}

llvm::Expected<OwningOpRef<ModuleOp>>
buildModule(MLIRContext &ctx, const KernelTemplate &tmpl, const KernelSpec &spec,
            const TileConfig &cfg, llvm::function_ref<void(OpBuilder &, Location)> body) {
  if (auto err = spec.validate())
    return err;
  if (auto err = tmpl.checkConfig(spec, cfg))
    return err;
  ctx.getOrLoadDialect<tile::TileDialect>();
  ctx.getOrLoadDialect<math::MathDialect>();
  OpBuilder b(&ctx);
  Location loc = b.getUnknownLoc();
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  b.setInsertionPointToEnd(module->getBody());
  body(b, loc);
  return module;
}

} // namespace tilejit
