//===- LoadStoreOpToLLVM.cpp - masked tile loads and stores -----------------===//
//
// A thread moves its elements of a tile as the layout places them
// (LayoutAttrInterface): element i at the thread's base coordinates plus the
// element's offset, in runs of `contiguity` consecutive columns. A run that
// lies wholly inside the operand moves as vector accesses of up to 16 bytes;
// at a ragged edge the run moves element by element, each masked. Every
// access is one PTX instruction under a predicate (inline assembly: LLVM has
// no predicated load or store, nor the cache qualifiers); a masked-off load
// leaves the padding in its registers (the outputs are tied to it).
// (tile.load_fragments is the exception: a #tile.wgmma tile in its
// registers' order from sums padded for it, 16-byte loads, no mask.)
//
// Cache paths: every load is `ld.global` (with `streaming`, not allocated in
// L1), stores `st.global` (streaming: evict-first, `st.global.cs`). Not the
// read-only path (`ld.global.nc`): ptxas moves such loads past the block's
// barriers, and a loop's prefetch of its next rows then waited for the
// reduction of the current ones (cuobjdump of the backward pass: the loads
// after both barriers of the row reduction; with `ld.global` before them).
//
// Every access keeps its place in program order (the assembly is marked as
// having side effects): the templates place loads where they want them, as
// a prefetch of the next tile issued before the current one is computed.
//
// The tile's first column is a multiple of the layout's contiguity (so a run
// lies wholly inside or outside a row whose length is a multiple of it), and
// every address a vector access names is aligned to the access: the
// templates guarantee both from the spec's alignment.
//
//===----------------------------------------------------------------------===//
#include "compiler/conversion/TileToLLVM.h"
#include "compiler/conversion/Utility.h"

#include <functional>

#include "mlir/Conversion/LLVMCommon/Pattern.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Transforms/DialectConversion.h"

using namespace mlir;
using namespace tilejit::tile;
using tilejit::llvmx::Emitter;
using tilejit::llvmx::Pred;

namespace tilejit {
namespace {

/// Where this thread's part of a tile access lies.
struct Place {
  Pred ok;                            // the leading indices and the row exist
  Value ptr;                          // address of the thread's first element
  Value col;                          // its column
  Value ncols;                        // the operand's row length
  std::optional<int64_t> ncolsStatic; // ... when static
  std::optional<int64_t> col0;        // the tile's first column, when constant
  int64_t maxBaseCol = 0;             // the largest first column of any thread
  int64_t contig = 1, bytes = 4;
  SmallVector<int64_t> runOffsets; // column of each run's first element, from `col`
  /// Rows of each run from the thread's first row (a layout that places a
  /// thread's elements on several rows, as #tile.wgmma does); all zero for
  /// one row per thread. Non-zero needs a static row length.
  SmallVector<int64_t> runRows;
  Value row, nrows; // the thread's first row and the operand's row count (rank-2 tiles)
  /// Elements from one row to the next, when static; else the address of
  /// each run's first row (a row stride given at launch).
  std::optional<int64_t> pitchStatic;
  SmallVector<Value> runPtrs;
  bool strided = false; // rows a stride apart, not one row length

  /// The address run `k`'s byte offsets start from.
  Value runPtr(int64_t k) const { return runPtrs.empty() ? ptr : runPtrs[size_t(k)]; }
  /// Bytes from runPtr(k) to element `j` of run `k`.
  int64_t byteOffset(int64_t k, int64_t j) const {
    int64_t rowElems = runRows[k] && runPtrs.empty() ? runRows[k] * *pitchStatic : 0;
    return (rowElems + runOffsets[k] + j) * bytes;
  }
  /// Whether run `k` lies in an existing row.
  Pred runOk(Emitter &e, int64_t k) const {
    if (!runRows[k])
      return ok;
    return llvmx::both(e, ok, llvmx::lessThan(e, e.add(row, e.i64(runRows[k])), nrows));
  }
};

FailureOr<Place> place(Emitter &e, Operation *op, Value memref, MemRefType type, ValueRange indices,
                       ValueRange origIndices, RankedTensorType tile, Pred extra) {
  auto layout = dyn_cast<LayoutAttrInterface>(tile.getEncoding());
  if (!layout)
    return failure();
  int64_t rank = type.getRank(), tileRank = tile.getRank();
  llvmx::GlobalView view = llvmx::unpackGlobal(e, memref, type);
  ArrayRef<Value> sizes = view.sizes;
  SmallVector<Value> base = e.apply(layout.getThreadBase(), e.threadId());

  Place pl;
  pl.ok = extra;
  SmallVector<Value> coords(indices.begin(), indices.end());
  for (int64_t d = 0; d < rank - tileRank; ++d)
    pl.ok = llvmx::both(e, pl.ok, llvmx::lessThan(e, indices[d], sizes[d]));
  for (int64_t d = rank - tileRank; d + 1 < rank; ++d) {
    coords[d] = e.add(indices[d], base[d - (rank - tileRank)]);
    pl.ok = llvmx::both(e, pl.ok, llvmx::lessThan(e, coords[d], sizes[d]));
    pl.row = coords[d];
    pl.nrows = sizes[d];
  }
  Value off = view.rowOffset(e, ArrayRef<Value>(coords).drop_back());
  pl.col = e.add(indices[rank - 1], base.back());
  pl.ncols = sizes[rank - 1];
  if (!type.isDynamicDim(rank - 1))
    pl.ncolsStatic = type.getDimSize(rank - 1);
  if (rank >= 2)
    pl.pitchStatic = view.staticStride(rank - 2);
  pl.strided = view.strided();
  APInt c;
  if (matchPattern(origIndices[rank - 1], m_ConstantInt(&c)))
    pl.col0 = c.getSExtValue();
  pl.bytes = type.getElementType().isF32() ? 4 : 2;
  pl.ptr = e.offset(view.ptr(e), e.mul(e.add(off, pl.col), e.i64(pl.bytes)));

  // The element offsets: runs of `contig` consecutive columns, nothing along
  // the other dimensions.
  pl.contig = layout.getContiguity();
  int64_t n = layout.getElemsPerThread(tile.getShape());
  if (pl.contig < 1 || n % pl.contig != 0)
    return failure();
  for (int64_t i = 0; i < n; ++i) {
    SmallVector<int64_t> o = layout.getElemOffset(tile.getShape(), i);
    int64_t rowOff = o.size() >= 2 ? o[o.size() - 2] : 0;
    if (llvm::any_of(ArrayRef<int64_t>(o).drop_back(o.size() >= 2 ? 2 : 1),
                     [](int64_t v) { return v != 0; }))
      return failure();
    // Runs on later rows need the row pitch: static, or a row stride.
    if (rowOff != 0 && (!pl.row || (!pl.pitchStatic && !pl.strided)))
      return failure();
    if (i % pl.contig == 0) {
      pl.runOffsets.push_back(o.back());
      pl.runRows.push_back(rowOff);
    } else if (o.back() != pl.runOffsets.back() + i % pl.contig || rowOff != pl.runRows.back()) {
      return failure();
    }
  }
  // Runs on later rows of a launch-time pitch start from their own row's
  // address (one per distinct row).
  if (!pl.pitchStatic && llvm::any_of(pl.runRows, [](int64_t r) { return r != 0; })) {
    if (rank < 2)
      return failure();
    llvm::SmallDenseMap<int64_t, Value> rowPtr;
    rowPtr[0] = pl.ptr;
    for (int64_t r : pl.runRows) {
      Value &p = rowPtr[r];
      if (!p)
        p = e.offset(pl.ptr, e.mul(e.mul(view.strides[rank - 2], e.i64(r)), e.i64(pl.bytes)));
      pl.runPtrs.push_back(p);
    }
  }
  AffineMap baseMap = layout.getThreadBase();
  for (int64_t t = 0; t < layout.getNumThreads(); ++t)
    pl.maxBaseCol = std::max(pl.maxBaseCol, baseMap.compose(ArrayRef<int64_t>{t}).back());
  return pl;
}

/// What an access does with each run of the thread's elements.
struct RunVisitor {
  /// The run's vector accesses, all under `p`.
  std::function<void(int64_t k, const Pred &p)> vector;
  /// The run element by element, element e of the run under `p(e)`.
  std::function<void(int64_t k, const std::function<Pred(int64_t)> &p)> elements;
};

/// A run known to be whole, or in a row whose length is a multiple of the
/// run (so wholly inside or outside it), moves as vector accesses under one
/// predicate; at a ragged edge of any other row the vector accesses run when
/// the run lies inside, and element accesses otherwise.
void forEachRun(Emitter &e, const Place &pl, const RunVisitor &v) {
  // Vector accesses need every run aligned to its size: a row whose length
  // is not a multiple of the run would shift the runs of the rows after it.
  // Row strides are multiples of 16 bytes (the kernel's contract with its
  // launch), so only dense rows can shift runs.
  bool vectors = pl.contig * pl.bytes >= 4 &&
                 (!pl.ncolsStatic || *pl.ncolsStatic % pl.contig == 0 || pl.strided ||
                  llvm::all_of(pl.runRows, [](int64_t r) { return r == 0; }));
  // (A run of one element is always wholly inside or outside.)
  bool even = pl.contig == 1 || (pl.ncolsStatic && *pl.ncolsStatic % pl.contig == 0);
  for (auto [k, runOff] : llvm::enumerate(pl.runOffsets)) {
    bool full = pl.col0 && pl.ncolsStatic && *pl.col0 >= 0 &&
                *pl.col0 + pl.maxBaseCol + runOff + pl.contig <= *pl.ncolsStatic;
    Value ck = full ? Value() : e.add(pl.col, e.i64(runOff));
    Pred ok = pl.runOk(e, k);
    auto element = [&, ck, full, ok](int64_t i) {
      return full ? ok : llvmx::both(e, ok, llvmx::lessThan(e, e.add(ck, e.i64(i)), pl.ncols));
    };
    if (vectors && (full || even)) {
      v.vector(k, full ? ok : llvmx::both(e, ok, llvmx::lessThan(e, ck, pl.ncols)));
      continue;
    }
    if (vectors) {
      Pred whole =
          llvmx::both(e, ok, llvmx::lessThan(e, e.add(ck, e.i64(pl.contig - 1)), pl.ncols));
      v.vector(k, whole);
      v.elements(k, [&, whole](int64_t i) { return llvmx::andNot(e, whole, element(i)); });
      continue;
    }
    v.elements(k, element);
  }
}

/// One access of up to 16 bytes of run k: its first element (within the
/// thread's elements), its element count and its byte offset from the
/// thread's first element.
struct VectorAccess {
  int64_t first, elems, byteOffset;
};
SmallVector<VectorAccess> vectorAccesses(const Place &pl, int64_t k) {
  int64_t runBytes = pl.contig * pl.bytes;
  int64_t words = runBytes >= 16 ? 4 : runBytes / 4, perAccess = words * 4 / pl.bytes;
  SmallVector<VectorAccess> out;
  for (int64_t g = 0; g < pl.contig / perAccess; ++g)
    out.push_back({k * pl.contig + g * perAccess, perAccess, pl.byteOffset(k, g * perAccess)});
  return out;
}

std::string operandList(int64_t first, int64_t count) {
  std::string s = count > 1 ? "{" : "";
  for (int64_t i = 0; i < count; ++i)
    s += (i ? ", $" : "$") + std::to_string(first + i);
  return s + (count > 1 ? "}" : "");
}

std::string vecSuffix(int64_t n) { return n == 1 ? "" : ".v" + std::to_string(n); }

/// `prefix` guarded by predicate operand `$index` unless always true.
std::string guarded(const Pred &p, int64_t index, const std::string &text) {
  return (p.always() ? "" : "@$" + std::to_string(index) + " ") + text;
}

/// tile.load_fragments: chunk j of four of the warpgroup's thread t at
/// element 4 * (128 j + t) from `indices`, one 16-byte load each (a warp's
/// 32 side by side), into the thread's elements in register order.
struct LoadFragmentsOpLowering : ConvertOpToLLVMPattern<LoadFragmentsOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;

  LogicalResult matchAndRewrite(LoadFragmentsOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rw) const override {
    Emitter e{rw, op.getLoc()};
    RankedTensorType tile = op.getType();
    Value first =
        llvmx::wordAddress(e, adaptor.getSource(), op.getSource().getType(), adaptor.getIndices());
    Value base = e.offset(first, e.mul(e.urem(e.threadId(), 128), e.i64(16)));
    int64_t n = getElemsPerThread(tile);
    SmallVector<Value> el;
    Type f32 = rw.getF32Type();
    for (int64_t j = 0; 4 * j < n; ++j) {
      Operation *ld =
          e.asmOp(SmallVector<Type>(4, f32), ValueRange{e.offset(base, e.i64(j * 128 * 16))},
                  "ld.global.v4.f32 {$0, $1, $2, $3}, [$4];", "=f,=f,=f,=f,l",
                  /*sideEffects=*/true);
      for (int64_t k = 0; k < 4; ++k)
        el.push_back(LLVM::ExtractValueOp::create(rw, e.loc, ld->getResult(0), ArrayRef<int64_t>{k})
                         .getResult());
    }
    rw.replaceOp(op, e.pack(VectorType::get({n}, f32), el));
    return success();
  }
};

struct LoadOpLowering : ConvertOpToLLVMPattern<LoadOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;

  LogicalResult matchAndRewrite(LoadOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rw) const override {
    Emitter e{rw, op.getLoc()};
    RankedTensorType tile = op.getType();
    auto mem = cast<MemRefType>(op.getSource().getType());
    Type memElem = mem.getElementType();
    bool words = !memElem.isF32();
    auto pl = place(e, op, adaptor.getSource(), mem, adaptor.getIndices(), op.getIndices(), tile,
                    Pred::of(true));
    if (failed(pl))
      return rw.notifyMatchFailure(op, "layout without runs along the last dimension");
    std::string ld = op.getStreaming() ? "ld.global.L1::no_allocate" : "ld.global";
    float pad = op.getPadding() ? float(op.getPadding()->convertToDouble()) : 0.0f;
    Type f32 = rw.getF32Type(), i16 = e.i16(), i32 = e.i32();
    // In the memory's type, rounded to nearest even (APFloat's conversion).
    Value padScalar = LLVM::ConstantOp::create(rw, e.loc, memElem, rw.getFloatAttr(memElem, pad));
    int64_t n = getElemsPerThread(tile);
    SmallVector<Value> el(n, padScalar);

    RunVisitor visit;
    visit.vector = [&](int64_t k, const Pred &p) {
      if (p.never())
        return;
      for (const VectorAccess &a : vectorAccesses(*pl, k)) {
        int64_t regs = words ? a.elems / 2 : a.elems;
        Type regTy = words ? i32 : f32;
        std::string letter = words ? "r" : "f";
        SmallVector<Value> operands = {pl->runPtr(k)};
        std::string constraints;
        for (int64_t r = 0; r < regs; ++r)
          constraints += "=" + letter + ",";
        constraints += "l";
        if (!p.always()) {
          operands.push_back(p.reg);
          constraints += ",b";
          for (int64_t r = 0; r < regs; ++r) { // masked off: the padding stays
            operands.push_back(words ? e.word(el[a.first + 2 * r], el[a.first + 2 * r + 1])
                                     : el[a.first + r]);
            constraints += "," + std::to_string(r);
          }
        }
        std::string text =
            guarded(p, regs + 1,
                    ld + vecSuffix(regs) + (words ? ".b32 " : ".f32 ") + operandList(0, regs) +
                        ", [$" + std::to_string(regs) + "+" + std::to_string(a.byteOffset) + "];");
        Operation *asmOp = e.asmOp(SmallVector<Type>(regs, regTy), operands, text, constraints,
                                   /*sideEffects=*/true);
        for (int64_t r = 0; r < regs; ++r) {
          Value reg = regs == 1 ? asmOp->getResult(0)
                                : LLVM::ExtractValueOp::create(rw, e.loc, asmOp->getResult(0),
                                                               ArrayRef<int64_t>{r})
                                      .getResult();
          if (!words) {
            el[a.first + r] = reg;
            continue;
          }
          Value pair = LLVM::BitcastOp::create(rw, e.loc, VectorType::get({2}, memElem), reg);
          el[a.first + 2 * r] = e.extract(pair, 0);
          el[a.first + 2 * r + 1] = e.extract(pair, 1);
        }
      }
    };
    visit.elements = [&](int64_t k, const std::function<Pred(int64_t)> &pe) {
      for (int64_t j = 0; j < pl->contig; ++j) {
        int64_t i = k * pl->contig + j;
        Pred p = pe(j);
        if (p.never())
          continue;
        Type regTy = words ? i16 : f32;
        SmallVector<Value> operands = {pl->runPtr(k)};
        std::string constraints = words ? "=h,l" : "=f,l";
        if (!p.always()) {
          operands.push_back(p.reg);
          operands.push_back(words ? LLVM::BitcastOp::create(rw, e.loc, i16, el[i]).getResult()
                                   : el[i]);
          constraints += ",b,0";
        }
        int64_t byteOffset = pl->byteOffset(k, j);
        std::string text = guarded(p, 2,
                                   ld + (words ? ".u16 $0, [$1+" : ".f32 $0, [$1+") +
                                       std::to_string(byteOffset) + "];");
        Value r = e.asmOp({regTy}, operands, text, constraints, /*sideEffects=*/true)->getResult(0);
        el[i] = words ? LLVM::BitcastOp::create(rw, e.loc, memElem, r).getResult() : r;
      }
    };
    forEachRun(e, *pl, visit);

    Value frag = e.pack(VectorType::get({n}, memElem), el);
    if (tile.getElementType() != memElem)
      frag = e.widenToF32(frag);
    rw.replaceOp(op, frag);
    return success();
  }
};

struct StoreOpLowering : ConvertOpToLLVMPattern<StoreOp> {
  using ConvertOpToLLVMPattern::ConvertOpToLLVMPattern;

  LogicalResult matchAndRewrite(StoreOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rw) const override {
    Emitter e{rw, op.getLoc()};
    RankedTensorType tile = op.getValue().getType();
    auto mem = cast<MemRefType>(op.getDest().getType());
    Type memElem = mem.getElementType();
    bool words = !memElem.isF32();
    auto layout = cast<LayoutAttrInterface>(tile.getEncoding());
    // Of the copies of a replicated element, only the owner writes it.
    Pred owner = Pred::of(true);
    for (Value r : e.apply(layout.getOwnerMap(), e.threadId()))
      owner = llvmx::both(e, owner, Pred::of(e.isZero(r)));
    auto pl =
        place(e, op, adaptor.getDest(), mem, adaptor.getIndices(), op.getIndices(), tile, owner);
    if (failed(pl))
      return rw.notifyMatchFailure(op, "layout without runs along the last dimension");
    int64_t n = getElemsPerThread(tile);
    Value frag = adaptor.getValue();
    if (tile.getElementType() != memElem)
      frag = LLVM::FPTruncOp::create(rw, e.loc, VectorType::get({n}, memElem), frag);
    SmallVector<Value> el;
    for (int64_t i = 0; i < n; ++i)
      el.push_back(e.extract(frag, i));
    // With `add` (f32 only) a reduction instead: red.global.add{.v2,.v4}.f32.
    std::string st = op.getAdd()         ? "red.global.add"
                     : op.getStreaming() ? "st.global.cs"
                                         : "st.global";
    Type i16 = e.i16();

    RunVisitor visit;
    visit.vector = [&](int64_t k, const Pred &p) {
      if (p.never())
        return;
      for (const VectorAccess &a : vectorAccesses(*pl, k)) {
        int64_t regs = words ? a.elems / 2 : a.elems;
        SmallVector<Value> operands = {pl->runPtr(k)};
        std::string constraints = "l";
        for (int64_t r = 0; r < regs; ++r) {
          operands.push_back(words ? e.word(el[a.first + 2 * r], el[a.first + 2 * r + 1])
                                   : el[a.first + r]);
          constraints += words ? ",r" : ",f";
        }
        if (!p.always()) {
          operands.push_back(p.reg);
          constraints += ",b";
        }
        std::string text =
            guarded(p, regs + 1,
                    st + vecSuffix(regs) + (words ? ".b32 [$0+" : ".f32 [$0+") +
                        std::to_string(a.byteOffset) + "], " + operandList(1, regs) + ";");
        e.asmOp({}, operands, text, constraints, /*sideEffects=*/true);
      }
    };
    visit.elements = [&](int64_t k, const std::function<Pred(int64_t)> &pe) {
      for (int64_t j = 0; j < pl->contig; ++j) {
        int64_t i = k * pl->contig + j;
        Pred p = pe(j);
        if (p.never())
          continue;
        SmallVector<Value> operands = {
            pl->runPtr(k),
            words ? LLVM::BitcastOp::create(rw, e.loc, i16, el[i]).getResult() : el[i]};
        std::string constraints = words ? "l,h" : "l,f";
        if (!p.always()) {
          operands.push_back(p.reg);
          constraints += ",b";
        }
        int64_t byteOffset = pl->byteOffset(k, j);
        std::string text = guarded(
            p, 2, st + (words ? ".u16 [$0+" : ".f32 [$0+") + std::to_string(byteOffset) + "], $1;");
        e.asmOp({}, operands, text, constraints, /*sideEffects=*/true);
      }
    };
    forEachRun(e, *pl, visit);
    rw.eraseOp(op);
    return success();
  }
};

} // namespace

void populateLoadStoreOpToLLVMPatterns(TileTypeConverter &converter, RewritePatternSet &patterns) {
  patterns.add<LoadOpLowering, LoadFragmentsOpLowering, StoreOpLowering>(converter);
}

} // namespace tilejit
