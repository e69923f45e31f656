//===- Utility.cpp ----------------------------------------------------------===//
#include "compiler/conversion/Utility.h"

#include "mlir/IR/Matchers.h"

using namespace mlir;

namespace tilejit::llvmx {

Value Emitter::i32(int64_t v) {
  return LLVM::ConstantOp::create(b, loc, i32(), b.getI32IntegerAttr(int32_t(v)));
}
Value Emitter::i64(int64_t v) {
  return LLVM::ConstantOp::create(b, loc, i64(), b.getI64IntegerAttr(v));
}
Value Emitter::f32(float v) {
  return LLVM::ConstantOp::create(b, loc, b.getF32Type(), b.getF32FloatAttr(v));
}
Value Emitter::boolean(bool v) { return LLVM::ConstantOp::create(b, loc, i1(), b.getBoolAttr(v)); }
Value Emitter::add(Value a, Value c) {
  if (auto k = constantOf(c); k && *k == 0)
    return a;
  if (auto k = constantOf(a); k && *k == 0)
    return c;
  return LLVM::AddOp::create(b, loc, a, c);
}
Value Emitter::mul(Value a, Value c) {
  if (auto k = constantOf(c); k && *k == 1)
    return a;
  if (auto k = constantOf(a); k && *k == 1)
    return c;
  return LLVM::MulOp::create(b, loc, a, c);
}
Value Emitter::udiv(Value a, int64_t c) {
  return c == 1 ? a : LLVM::UDivOp::create(b, loc, a, i64(c)).getResult();
}
Value Emitter::urem(Value a, int64_t c) { return LLVM::URemOp::create(b, loc, a, i64(c)); }
Value Emitter::lessThan(Value a, Value c) {
  return LLVM::ICmpOp::create(b, loc, LLVM::ICmpPredicate::slt, a, c);
}
Value Emitter::isZero(Value a) {
  return LLVM::ICmpOp::create(b, loc, LLVM::ICmpPredicate::eq, a,
                              a.getType().isInteger(32) ? i32(0) : i64(0));
}
Value Emitter::both(Value a, Value c) { return LLVM::AndOp::create(b, loc, a, c); }
Value Emitter::negate(Value p) { return LLVM::XOrOp::create(b, loc, p, boolean(true)); }
Value Emitter::zext64(Value v) { return LLVM::ZExtOp::create(b, loc, i64(), v); }

Value Emitter::threadId() { return zext64(NVVM::ThreadIdXOp::create(b, loc, i32())); }

Value Emitter::apply(AffineExpr expr, Value dim) {
  if (auto c = dyn_cast<AffineConstantExpr>(expr))
    return i64(c.getValue());
  if (isa<AffineDimExpr>(expr))
    return dim;
  auto bin = cast<AffineBinaryOpExpr>(expr);
  Value l = apply(bin.getLHS(), dim);
  auto rhs = dyn_cast<AffineConstantExpr>(bin.getRHS());
  switch (expr.getKind()) {
  case AffineExprKind::Add:
    return add(l, apply(bin.getRHS(), dim));
  case AffineExprKind::Mul:
    return mul(l, apply(bin.getRHS(), dim));
  case AffineExprKind::FloorDiv:
    return udiv(l, rhs.getValue());
  case AffineExprKind::Mod:
    return urem(l, rhs.getValue());
  default: // ceildiv does not appear in layouts
    return LLVM::UDivOp::create(b, loc, add(l, i64(rhs.getValue() - 1)), i64(rhs.getValue()));
  }
}

SmallVector<Value> Emitter::apply(AffineMap map, Value dim) {
  SmallVector<Value> out;
  for (AffineExpr e : map.getResults())
    out.push_back(apply(e, dim));
  return out;
}

Value Emitter::extract(Value vec, int64_t i) {
  return LLVM::ExtractElementOp::create(b, loc, vec, i32(i));
}

Value Emitter::pack(Type vecType, ArrayRef<Value> elems) {
  Value v = LLVM::PoisonOp::create(b, loc, vecType);
  for (auto [i, e] : llvm::enumerate(elems))
    v = LLVM::InsertElementOp::create(b, loc, v, e, i32(i));
  return v;
}

Value Emitter::widenToF32(Value v) {
  auto vec = dyn_cast<VectorType>(v.getType());
  auto like = [&](Type elem) -> Type { return vec ? VectorType::get(vec.getShape(), elem) : elem; };
  Type elem = vec ? vec.getElementType() : v.getType();
  Type f32 = b.getF32Type();
  if (!elem.isBF16())
    return LLVM::FPExtOp::create(b, loc, like(f32), v);
  if (vec && vec.getNumElements() % 2 == 0) {
    // By 32-bit words, as memory holds them: element 2j is the low half of
    // word j (a shift up), element 2j + 1 the high half (the low half
    // cleared).
    int64_t n = vec.getNumElements();
    auto words = VectorType::get({n / 2}, i32());
    Value w = LLVM::BitcastOp::create(b, loc, words, v);
    Value lo = LLVM::ShlOp::create(b, loc, w, splat(words, i32(16)));
    Value hi = LLVM::AndOp::create(b, loc, w, splat(words, i32(int32_t(0xffff0000u))));
    SmallVector<int32_t> mask;
    for (int64_t j = 0; j < n / 2; ++j)
      mask.append({int32_t(j), int32_t(n / 2 + j)});
    Value both = LLVM::ShuffleVectorOp::create(b, loc, lo, hi, mask);
    return LLVM::BitcastOp::create(b, loc, like(f32), both);
  }
  Value bits = LLVM::BitcastOp::create(b, loc, like(i16()), v);
  Value wide = LLVM::ZExtOp::create(b, loc, like(i32()), bits);
  Value sixteen = vec ? splat(like(i32()), i32(16)) : i32(16);
  return LLVM::BitcastOp::create(b, loc, like(f32), LLVM::ShlOp::create(b, loc, wide, sixteen));
}

Value Emitter::word(Value lo, Value hi) {
  Value pair = pack(VectorType::get({2}, lo.getType()), {lo, hi});
  return LLVM::BitcastOp::create(b, loc, i32(), pair);
}

Value Emitter::splat(Type vecType, Value v) {
  int64_t n = cast<VectorType>(vecType).getNumElements();
  Value one =
      LLVM::InsertElementOp::create(b, loc, LLVM::PoisonOp::create(b, loc, vecType), v, i32(0));
  if (n == 1)
    return one;
  return LLVM::ShuffleVectorOp::create(b, loc, one, one, SmallVector<int32_t>(n, 0));
}

Value Emitter::offset(Value ptr, Value bytes) {
  if (auto k = constantOf(bytes); k && *k == 0)
    return ptr;
  return LLVM::GEPOp::create(b, loc, ptr.getType(), b.getI8Type(), ptr, ValueRange{bytes});
}

Value Emitter::addr64(Value ptr) { return LLVM::PtrToIntOp::create(b, loc, i64(), ptr); }

Value Emitter::shared(StringRef name, int64_t bytes) {
  auto ptrTy = LLVM::LLVMPointerType::get(b.getContext(), 3);
  Value base = LLVM::AddressOfOp::create(b, loc, ptrTy, name);
  return bytes ? offset(base, i64(bytes)) : base;
}

void Emitter::waitParity(Value bar, Value parity) {
  asmOp({}, ValueRange{addr64(bar), parity},
        "{\n\t.reg .pred ready;\n\twait:\n\tmbarrier.try_wait.parity.shared::cta.b64 ready, "
        "[$0], $1;\n\t@!ready bra wait;\n\t}",
        "l,r", /*sideEffects=*/true);
}

void Emitter::warpgroupBarrier() {
  Value id = LLVM::TruncOp::create(b, loc, i32(), add(udiv(threadId(), 128), i64(1)));
  asmOp({}, {id}, "bar.sync $0, 128;", "r", /*sideEffects=*/true);
}

Operation *Emitter::asmOp(ArrayRef<Type> results, ValueRange operands, StringRef text,
                          StringRef constraints, bool sideEffects) {
  Type res;
  if (results.size() == 1)
    res = results[0];
  else if (results.size() > 1)
    res = LLVM::LLVMStructType::getLiteral(b.getContext(), results);
  return LLVM::InlineAsmOp::create(
      b, loc, res, operands, b.getStringAttr(text), b.getStringAttr(constraints),
      sideEffects ? b.getUnitAttr() : UnitAttr(), UnitAttr(),
      LLVM::TailCallKindAttr::get(b.getContext(), LLVM::tailcallkind::TailCallKind::None),
      LLVM::AsmDialectAttr::get(b.getContext(), LLVM::AsmDialect::AD_ATT), ArrayAttr());
}

Pred both(Emitter &e, const Pred &a, const Pred &c) {
  if (a.never() || c.never())
    return Pred::of(false);
  if (a.always())
    return c;
  if (c.always())
    return a;
  return Pred::of(e.both(a.reg, c.reg));
}

Pred lessThan(Emitter &e, Value a, Value c) {
  auto ka = constantOf(a), kc = constantOf(c);
  if (ka && kc)
    return Pred::of(*ka < *kc);
  return Pred::of(e.lessThan(a, c));
}

Pred andNot(Emitter &e, const Pred &p, const Pred &q) {
  if (p.always() || q.never())
    return Pred::of(false);
  if (p.never())
    return q;
  return both(e, Pred::of(e.negate(p.reg)), q);
}

std::optional<int64_t> constantOf(Value v) {
  APInt c;
  if (v && matchPattern(v, m_ConstantInt(&c)))
    return c.getSExtValue();
  return std::nullopt;
}

GlobalView unpackGlobal(Emitter &e, Value memref, MemRefType type) {
  GlobalView v;
  v.type = type;
  int64_t rank = type.getRank();
  v.memref = memref;
  for (int64_t d = 0; d < rank; ++d)
    v.sizes.push_back(
        type.isDynamicDim(d)
            ? LLVM::ExtractValueOp::create(e.b, e.loc, memref, ArrayRef<int64_t>{1 + d}).getResult()
            : e.i64(type.getDimSize(d)));
  v.strides.assign(size_t(rank), Value());
  v.strides.back() = e.i64(1);
  if (auto strided = dyn_cast<StridedLayoutAttr>(type.getLayout()))
    for (int64_t d = 0; d + 1 < rank; ++d) {
      int64_t s = strided.getStrides()[d];
      v.strides[d] =
          ShapedType::isDynamic(s)
              ? LLVM::ExtractValueOp::create(e.b, e.loc, memref, ArrayRef<int64_t>{1 + rank + d})
                    .getResult()
              : e.i64(s);
    }
  return v;
}

Value wordAddress(Emitter &e, Value memref, MemRefType type, ValueRange indices) {
  GlobalView v = unpackGlobal(e, memref, type);
  Value off = v.offsetOf(e, indices);
  return e.offset(v.ptr(e), e.mul(off, e.i64(4)));
}

Value GlobalView::ptr(Emitter &e) const {
  return LLVM::ExtractValueOp::create(e.b, e.loc, memref, ArrayRef<int64_t>{0});
}

bool GlobalView::strided() const { return !type.getLayout().isIdentity(); }

std::optional<int64_t> GlobalView::staticStride(int64_t d) const {
  int64_t rank = type.getRank();
  if (auto strided = dyn_cast<StridedLayoutAttr>(type.getLayout())) {
    int64_t s = strided.getStrides()[d];
    return ShapedType::isDynamic(s) ? std::nullopt : std::optional<int64_t>(s);
  }
  int64_t s = 1;
  for (int64_t i = d + 1; i < rank; ++i) {
    if (type.isDynamicDim(i))
      return std::nullopt;
    s *= type.getDimSize(i);
  }
  return s;
}

Value GlobalView::rowOffset(Emitter &e, ValueRange leading) const {
  Value off = e.i64(0);
  int64_t rank = type.getRank();
  if (!strided()) {
    for (int64_t d = 0; d + 1 < rank; ++d)
      off = e.add(e.mul(off, sizes[d]), leading[d]);
    return e.mul(off, sizes[rank - 1]);
  }
  for (int64_t d = 0; d + 1 < rank; ++d)
    off = e.add(off, e.mul(leading[d], strides[d]));
  return off;
}

Value GlobalView::offsetOf(Emitter &e, ValueRange indices) const {
  return e.add(rowOffset(e, indices.drop_back()), indices.back());
}

} // namespace tilejit::llvmx
