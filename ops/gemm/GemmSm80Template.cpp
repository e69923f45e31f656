//===- GemmSm80Template.cpp - GEMM on Ampere: cp.async, ldmatrix, mma.sync --===//
//
// D = alpha * op(A) @ op(B) (+ beta * C) (+ bias), f32 accumulation, the way Ampere
// kernels are written (and the kernel of every target without wgmma):
//
// - one program computes one bm x bn tile of D (programs in a grouped order,
//   `group` tile rows at a time, so that neighbours share A and B in L2);
// - every thread copies its share of each K step's A and B tiles into a
//   ring of `stages` stages with cp.async (16 bytes a copy where A and B
//   allow, zeros past the M, N and K edges; element by element where they
//   do not), one commit group per step,
//   `stages - 1` steps ahead of the product;
// - each step waits for its group, then a block barrier (the stage has
//   landed for every thread, and the stage about to be refilled has been
//   read by every warp), starts the copies of step + stages - 1, and
//   multiplies: `warps / 4` warpgroups each own bn / (warps / 4) columns of
//   the tile, a warp 16 rows of each 64 (tile.dot: ldmatrix + mma.sync);
// - the epilogue scales the accumulator, adds beta * C and the bias and
//   stores D, masked at the edges: the sm_90a kernel's epilogue on the same
//   #tile.wgmma tiles.
//
// The ring is the sm_90a kernel's (128-byte swizzled rows in 64-column
// panels), written by cp.async instead of TMA, so tile.dot reads it alike.
//
//===----------------------------------------------------------------------===//
#include "ops/gemm/GemmSm80.h"

#include <algorithm>

#include "compiler/templates/Kernel.h"
#include "dialects/Tile/TileDialect.h"
#include "ops/gemm/GemmDecl.h"
#include "ops/gemm/GemmEpilogue.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;
namespace tt = tilejit::tile;

namespace tilejit::gemm::sm80 {
namespace {

llvm::Error configError(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

struct Shape {
  int64_t bm, bn, bk, stages, warps, vec, group;
  explicit Shape(const TileConfig &c)
      : bm(c.get("bm")), bn(c.get("bn")), bk(c.get("bk")), stages(c.get("stages")),
        warps(c.get("warps")), vec(c.get("vec")), group(c.get("group")) {}
  int64_t warpgroups() const { return warps / 4; }
  /// Columns of the tile each warpgroup computes.
  int64_t colsPerGroup() const { return bn / warpgroups(); }
  /// The ring stages, with the alignment slack.
  int64_t smemBytes(int elemBytes) const { return stages * (bm + bn) * bk * elemBytes + 1024; }
};

/// The widest copy, at most `cap` elements, that divides rows of `len`.
int64_t widestCopy(int64_t len, int64_t cap) {
  int64_t v = cap;
  while (v > 1 && len % v != 0)
    v /= 2;
  return v;
}

TileConfig make(int64_t bm, int64_t bn, int64_t stages, int64_t warps, int64_t vec) {
  TileConfig c;
  c.set("bm", bm)
      .set("bn", bn)
      .set("bk", 64)
      .set("stages", stages)
      .set("warps", warps)
      .set("vec", vec)
      .set("group", 8);
  return c;
}

std::string kernelName(const Params &p) {
  return "gemm_sm80_" + std::string(dtypeName(p.ab)) + "_" + std::string(dtypeName(p.out)) + "_" +
         p.layoutName() + (p.hasC ? "_c" : "") + (p.hasBias ? "_bias" : "") + (p.ld ? "_ld" : "") +
         "_n" + std::to_string(p.n) + "_k" + std::to_string(p.k);
}

} // namespace

bool applies(const KernelSpec &spec) { return !Params(spec).target.hasWgmma(); }

llvm::ArrayRef<ConfigKeyDecl> configKeys() {
  static const ConfigKeyDecl keys[] = {
      {"bm", 64, 256, false, "rows of D per program tile (a multiple of 64)"},
      {"bn", 16, 256, false, "columns of D per program tile"},
      {"bk", 64, 64, false, "K per pipeline stage"},
      {"stages", 2, 8, false, "stages of the cp.async ring"},
      {"warps", 4, 8, false, "warps of a block (4 or 8: one or two warpgroups, side by side in N)"},
      {"vec", 1, 8, false,
       "most elements per cp.async copy (8: 16 bytes), each operand as its rows allow"},
      {"group", 1, 64, false, "tile rows walked together (grouped raster order)"},
  };
  return keys;
}

std::vector<ConfigKeyDecl> mergedKeys(llvm::ArrayRef<ConfigKeyDecl> a) {
  llvm::ArrayRef<ConfigKeyDecl> b = configKeys();
  auto find = [](llvm::ArrayRef<ConfigKeyDecl> keys, std::string_view name) {
    return std::find_if(keys.begin(), keys.end(),
                        [&](const ConfigKeyDecl &k) { return k.name == name; });
  };
  std::vector<ConfigKeyDecl> out;
  for (ConfigKeyDecl k : a) {
    auto other = find(b, k.name);
    if (other == b.end()) {
      k.optional = true;
    } else {
      k.min = std::min(k.min, other->min);
      k.max = std::max(k.max, other->max);
    }
    out.push_back(k);
  }
  for (ConfigKeyDecl k : b)
    if (find(a, k.name) == a.end()) {
      k.optional = true;
      out.push_back(k);
    }
  return out;
}

std::vector<TileConfig> configSpace(const KernelSpec &ks) {
  Params p(ks);
  int64_t vec = 8;
  // The tiles likeliest to win first (128 x 128 on 4 or 8 warps, the wider
  // 128 x 256 and 256 x 128 on 8), then smaller ones for small shapes.
  static const int64_t tiles[][3] = {{128, 128, 4}, {128, 256, 8}, {256, 128, 8}, {128, 128, 8},
                                     {64, 128, 4},  {128, 64, 4},  {64, 64, 4},   {64, 256, 8}};
  std::vector<TileConfig> out;
  for (int64_t stages : {3, 4, 2, 5})
    for (const auto &t : tiles) {
      TileConfig c = make(t[0], t[1], stages, t[2], vec);
      if (llvm::Error err = checkConfig(ks, c))
        llvm::consumeError(std::move(err));
      else
        out.push_back(std::move(c));
    }
  return out;
}

TileConfig defaultConfig(const KernelSpec &ks) {
  Params p(ks);
  int64_t vec = 8;
  // 128 x 128 tiles on 8 warps (32 x 64 per warp), 3 stages (96 KB of
  // shared memory and the barrier slack: one block a multiprocessor on an
  // A100's 164 KB, with room for L1); a narrow D takes 64 columns.
  TileConfig c = p.n <= 64 ? make(128, 64, 4, 4, vec) : make(128, 128, 3, 8, vec);
  if (llvm::Error err = checkConfig(ks, c)) {
    llvm::consumeError(std::move(err));
    return make(64, 64, 2, 4, vec);
  }
  return c;
}

llvm::Error checkConfig(const KernelSpec &ks, const TileConfig &cfg) {
  Params p(ks);
  if (auto err = cfg.checkKeys(configKeys()))
    return err;
  Shape s(cfg);
  if (s.warps != 4 && s.warps != 8)
    return configError("warps = " + llvm::Twine(s.warps) + " must be 4 or 8");
  if (s.bm % 64 != 0)
    return configError("bm = " + llvm::Twine(s.bm) + " must be a multiple of 64");
  int64_t cols = s.colsPerGroup();
  if (s.bn % s.warpgroups() != 0 || cols % 16 != 0)
    return configError("bn = " + llvm::Twine(s.bn) + " must give each of " +
                       llvm::Twine(s.warpgroups()) + " warpgroups a multiple of 16 columns");
  if (!p.transB && cols % 64 != 0)
    return configError("bn = " + llvm::Twine(s.bn) + " must give each of " +
                       llvm::Twine(s.warpgroups()) +
                       " warpgroups a multiple of 64 columns when B is stored K x N");
  if (s.vec != 1 && s.vec != 2 && s.vec != 4 && s.vec != 8)
    return configError("vec = " + llvm::Twine(s.vec) + " must be 1, 2, 4 or 8");
  // Registers: the accumulator, bm x cols f32 over a warpgroup's 128
  // threads, plus one K step's fragments of A (4 per 16 rows a warp owns)
  // and B (2 per 8 columns), under 255 with room for addresses.
  int64_t accRegs = s.bm * cols / 128;
  if (accRegs > 128)
    return configError("each thread would hold " + llvm::Twine(accRegs) +
                       " accumulator registers (at most 128): bm * bn / warps / 32");
  int64_t fragRegs = s.bm / 64 * 4 + cols / 8 * 2;
  if (accRegs + fragRegs > 200)
    return configError("each thread would hold " + llvm::Twine(accRegs + fragRegs) +
                       " registers of accumulator and fragments (at most 200)");
  int64_t smem = s.smemBytes(dtypeBytes(p.ab));
  if (smem > p.target.maxSharedBytesPerBlock())
    return configError("bm, bn, bk and stages need " + llvm::Twine(smem) +
                       " bytes of shared memory; " + llvm::Twine(p.target.archName()) + " allows " +
                       llvm::Twine(p.target.maxSharedBytesPerBlock()));
  return llvm::Error::success();
}

void buildKernel(OpBuilder &b, Location loc, const KernelSpec &ks, const TileConfig &cfg) {
  Params p(ks);
  Shape s(cfg);
  MLIRContext &ctx = *b.getContext();
  Type ab = elemType(ctx, p.ab), f32 = b.getF32Type();
  KernelMath km{b, loc};
  auto cst = [&](int64_t v) { return km.cst(v); };
  int64_t dyn = ShapedType::kDynamic;
  // A and B as stored (row-major): A is M x K (K x M transposed), B N x K
  // (transposed) or K x N; the ring stages hold their tiles the same way.
  // With ld, A's and B's rows too lie a leading dimension apart.
  auto aType = p.transA ? rowsType(ctx, p.k, dyn, ab, p.ld) : rowsType(ctx, dyn, p.k, ab, p.ld);
  auto bType = p.transB ? rowsType(ctx, p.n, p.k, ab, p.ld) : rowsType(ctx, p.k, p.n, ab, p.ld);
  auto ringA = p.transA ? tt::RingType::get(&ctx, s.stages, s.bk, s.bm, ab)
                        : tt::RingType::get(&ctx, s.stages, s.bm, s.bk, ab);
  auto ringB = p.transB ? tt::RingType::get(&ctx, s.stages, s.bn, s.bk, ab)
                        : tt::RingType::get(&ctx, s.stages, s.bk, s.bn, ab);
  auto dType = outType(ctx, p);
  // Arguments: A, B, D, [C,] [bias,] alpha, [beta].
  SmallVector<Type> args = {aType, bType, dType};
  Epilogue::appendParams(p, dType, args);
  int64_t nTiles = (p.n + s.bn - 1) / s.bn, kSteps = (p.k + s.bk - 1) / s.bk;
  // One program per tile: ceil(M / bm) * tiles along N, M being D's rows.
  AffineExpr m = getAffineSymbolExpr(0, &ctx);
  AffineMap grid = AffineMap::get(0, 1, {m.ceilDiv(s.bm) * nTiles}, &ctx);
  auto kernel = makeKernel(b, loc, kernelName(p), args, 32 * s.warps, grid, {2, 0}, cfg);
  Block *entry = &kernel.getBody().front();
  Value a = entry->getArgument(0), bm = entry->getArgument(1), d = entry->getArgument(2);
  Epilogue epilogue = Epilogue::fromArgs(p, entry, 3);

  Value ra = tt::AllocRingOp::create(b, loc, ringA, nullptr);
  Value rb = tt::AllocRingOp::create(b, loc, ringB, nullptr);
  Value mSize = memref::DimOp::create(b, loc, d, 0);
  Value mTiles = km.ceilDiv(mSize, s.bm);
  // This program's tile in the grouped order: `group` tile rows are walked
  // column by column before the next group starts.
  Value t = tt::ProgramIdOp::create(b, loc, tt::Dim::x);
  Value firstM = km.mul(km.divu(t, s.group * nTiles), cst(s.group));
  Value size = km.minu(km.sub(mTiles, firstM), cst(s.group));
  Value in = km.remu(t, s.group * nTiles);
  Value tm = km.add(firstM, arith::RemUIOp::create(b, loc, in, size));
  Value tn = arith::DivUIOp::create(b, loc, in, size);
  Value row0 = km.mul(tm, cst(s.bm)), col0 = km.mul(tn, cst(s.bn));

  // Each operand's copies as wide as `vec` and its compiled-in rows allow
  // (A stored K x M has rows of M, known at launch: the kernel checks).
  int64_t vecA = p.transA ? s.vec : widestCopy(p.k, s.vec);
  int64_t vecB = widestCopy(p.transB ? p.k : p.n, s.vec);
  // K step `step`'s tiles of A and B into stage `stage`, one group.
  auto copyStep = [&](Value step, Value stage) {
    Value k0 = km.mul(step, cst(s.bk));
    if (p.transA)
      tt::AsyncCopyOp::create(b, loc, a, k0, row0, ra, stage, vecA);
    else
      tt::AsyncCopyOp::create(b, loc, a, row0, k0, ra, stage, vecA);
    if (p.transB)
      tt::AsyncCopyOp::create(b, loc, bm, col0, k0, rb, stage, vecB);
    else
      tt::AsyncCopyOp::create(b, loc, bm, k0, col0, rb, stage, vecB);
    tt::AsyncCommitOp::create(b, loc);
  };
  // The first stages - 1 steps (steps past K copy zeros and are never
  // multiplied; every thread commits the same groups either way).
  for (int64_t i = 0; i + 1 < s.stages; ++i)
    copyStep(cst(i), cst(i));

  int64_t cols = s.colsPerGroup();
  auto accType = RankedTensorType::get({s.bm, cols}, f32, tt::WgmmaLayoutAttr::get(&ctx));
  Value group = tt::WarpgroupIdOp::create(b, loc);
  Value myCols = km.mul(group, cst(cols));
  Value zero = km.splat(accType, km.f32c(0.0));
  Value acc = km.loop(cst(0), cst(kSteps), ValueRange{zero}, [&](Value step, ValueRange carried) {
    // Step `step`'s group has landed once at most stages - 2 younger ones
    // are pending; the barrier makes it visible to all and frees the stage
    // step - 1 used, which the copies of step + stages - 1 refill.
    tt::AsyncWaitOp::create(b, loc, s.stages - 2);
    tt::BlockBarrierOp::create(b, loc);
    Value next = km.add(step, cst(s.stages - 1));
    copyStep(next, km.remu(next, s.stages));
    Value stage = km.remu(step, s.stages);
    Value dot = tt::DotOp::create(b, loc, accType, ra, stage, cst(0), rb, stage, myCols, carried[0],
                                  p.transA, !p.transB);
    return SmallVector<Value>{dot};
  })[0];
  // No copy may still be writing shared memory when the block exits.
  tt::AsyncWaitOp::create(b, loc, 0);

  epilogue.store(b, loc, acc, d, row0, km.add(col0, myCols));
  tt::ReturnOp::create(b, loc);
  b.setInsertionPointAfter(kernel);
}

} // namespace tilejit::gemm::sm80
