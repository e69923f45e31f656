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
std::pair<Value, Value> KernelMath::sequenceRows(Value offsets, Value seq, Value most) {
  Value start = tile::LoadWordOp::create(b, loc, offsets, ValueRange{seq});
  Value end = tile::LoadWordOp::create(b, loc, offsets, ValueRange{add(seq, cst(1))});
  Value rows = arith::MinSIOp::create(b, loc, sub(end, start), most);
  return {start, arith::MaxSIOp::create(b, loc, rows, cstLike(rows, 0))};
}

TakenTiles TakenTiles::create(KernelMath &km, int64_t consumers, int64_t words) {
  MLIRContext *ctx = km.b.getContext();
  auto two = tile::BarriersType::get(ctx, 2);
  TakenTiles t;
  t.full = tile::AllocBarriersOp::create(km.b, km.loc, two, 1, nullptr);
  t.free = tile::AllocBarriersOp::create(km.b, km.loc, two, consumers, nullptr);
  t.slots = tile::AllocWordsOp::create(km.b, km.loc, tile::WordsType::get(ctx, 2 * words), nullptr);
  t.words = words;
  return t;
}

Value TakenTiles::word(KernelMath &km, Value slot, int64_t w) const {
  return words == 1 ? slot : km.add(km.mul(slot, km.cst(words)), km.cst(w));
}

SmallVector<Value> TakenTiles::loop(KernelMath &km, bool producer, Value counter, Value tiles,
                                    ValueRange init,
                                    function_ref<void(Value, ValueRange)> body) const {
  OpBuilder &b = km.b;
  Location loc = km.loc;
  SmallVector<Type> passed(init.getTypes());
  passed.insert(passed.begin(), tiles.getType());
  auto w = scf::WhileOp::create(
      b, loc, passed, init,
      [&](OpBuilder &, Location, ValueRange args) {
        Value j = args[0].getType().isIndex() ? args[0] : km.toIndex(args[0]);
        Value slot = km.remu(j, 2), round = km.divu(j, 2), at;
        if (producer) {
          tile::BarrierWaitOp::create(b, loc, free, slot, km.add(round, km.cst(1)));
          at = tile::FetchAddOp::create(b, loc, counter, ValueRange{km.cst(0)}, km.cst(1));
          tile::SetWordOp::create(b, loc, slots, word(km, slot, 0), at);
        } else {
          tile::BarrierWaitOp::create(b, loc, full, slot, round);
          at = tile::GetWordOp::create(b, loc, slots, ValueRange{word(km, slot, 0)}).getResult(0);
        }
        if (!tiles.getType().isIndex())
          at = km.toI32(at);
        Value more = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, at, tiles);
        // (Past the last tile the producer tells the consumers so.)
        if (producer) {
          auto last = scf::IfOp::create(
              b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::uge, at, tiles));
          OpBuilder::InsertionGuard g(b);
          b.setInsertionPointToStart(&last.getThenRegion().front());
          tile::BarrierArriveOp::create(b, loc, full, slot);
        }
        SmallVector<Value> out = {at};
        out.append(args.begin(), args.end());
        scf::ConditionOp::create(b, loc, more, out);
      },
      [&](OpBuilder &, Location, ValueRange args) { body(args[0], args.drop_front()); });
  return SmallVector<Value>(w.getResults().drop_front());
}

void TakenTiles::handOut(KernelMath &km, Value slot, ValueRange place) const {
  for (auto [i, v] : llvm::enumerate(place))
    tile::SetWordOp::create(km.b, km.loc, slots, word(km, slot, int64_t(i) + 1), v);
  tile::BarrierArriveOp::create(km.b, km.loc, full, slot);
}

SmallVector<Value> TakenTiles::read(KernelMath &km, Value slot) const {
  SmallVector<Value> indices;
  for (int64_t i = 1; i < words; ++i)
    indices.push_back(word(km, slot, i));
  return SmallVector<Value>(tile::GetWordOp::create(km.b, km.loc, slots, indices).getResults());
}

void TakenTiles::release(KernelMath &km, Value slot) const {
  tile::BarrierArriveOp::create(km.b, km.loc, free, slot);
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
