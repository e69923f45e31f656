//===- Kernel.cpp -----------------------------------------------------------===//
#include "compiler/templates/Kernel.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
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

Value KernelMath::cst(int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); }
Value KernelMath::add(Value x, Value y) { return arith::AddIOp::create(b, loc, x, y); }
Value KernelMath::sub(Value x, Value y) { return arith::SubIOp::create(b, loc, x, y); }
Value KernelMath::mul(Value x, Value y) { return arith::MulIOp::create(b, loc, x, y); }
Value KernelMath::cstLike(Value like, int64_t v) {
  if (like.getType().isIndex())
    return cst(v);
  return arith::ConstantIntOp::create(b, loc, like.getType(), v);
}
Value KernelMath::divu(Value x, int64_t c) {
  return arith::DivUIOp::create(b, loc, x, cstLike(x, c));
}
Value KernelMath::remu(Value x, int64_t c) {
  return arith::RemUIOp::create(b, loc, x, cstLike(x, c));
}
Value KernelMath::minu(Value x, Value y) { return arith::MinUIOp::create(b, loc, x, y); }
Value KernelMath::ceilDiv(Value x, int64_t c) { return divu(add(x, cstLike(x, c - 1)), c); }
Value KernelMath::f32c(double v) {
  return arith::ConstantFloatOp::create(b, loc, b.getF32Type(), APFloat(float(v)));
}
Value KernelMath::toI32(Value v) { return arith::IndexCastOp::create(b, loc, b.getI32Type(), v); }
Value KernelMath::toIndex(Value v) {
  return arith::IndexCastUIOp::create(b, loc, b.getIndexType(), v);
}
Value KernelMath::splat(Type t, Value v) { return tile::SplatOp::create(b, loc, t, v); }
std::pair<Value, Value> KernelMath::sequenceRows(Value offsets, Value seq) {
  Value start = tile::LoadWordOp::create(b, loc, offsets, ValueRange{seq});
  Value end = tile::LoadWordOp::create(b, loc, offsets, ValueRange{add(seq, cst(1))});
  return {start, sub(end, start)};
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
