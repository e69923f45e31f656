//===- AttentionTemplate.cpp - attention forward on Hopper ------------------===//
//
// O = softmax(scale * Q K^T + mask) V and LSE, f32 accumulation, on sm_90a,
// the FlashAttention-2 recurrence on warp-specialized warpgroups:
//
// - one program per (tile of bm query rows, query head, sequence); the tiles
//   with the most keys (the last rows of a causal mask) start first;
// - warpgroup 0 is the producer: one thread loads the program's Q tile once,
//   then each tile of bn keys of K and of V into rings of `stages` stages
//   with TMA (K and V on their own barriers, so that Q K^T starts before V
//   has landed), refilling a stage once every consumer released it;
// - `consumers` warpgroups own 64 query rows each: S = Q K^T on the tensor
//   cores from shared memory (tile.dot), the online softmax in registers
//   (running row max m and sum l, in the log2 domain with the scale folded
//   into one fma before exp2), the accumulator rescaled by exp2(m_old -
//   m_new), then O += P V with P in registers (tile.dot_reg): P is the
//   probabilities rounded to 16 bits, in the layout the accumulator of S
//   left them in;
// - masks only where needed: the key tiles that every row of the program
//   sees whole run unmasked; the rest (the ragged last tile, the diagonal of
//   a causal mask) compare each column with the key count and the row;
// - the epilogue divides by l, stores O (masked rows past the sequence) and
//   LSE = (m + log2 l) ln 2, the natural log-sum-exp of the scaled scores.
//
// Every shape works: TMA reads zeros past the end of a sequence (its own
// sequence: the tensor maps are 4-D, [dim, seq, heads, batch]), masked
// columns take -inf, stores are masked. Query head h reads kv head
// h / (hq / hkv) (GQA, MQA).
//
// Tunables: bm (64 per consumer warpgroup), bn, stages, consumers.
//
//===----------------------------------------------------------------------===//
#include "compiler/EmbeddedSources.h"
#include "compiler/templates/Kernel.h"
#include "compiler/templates/Template.h"
#include "dialects/Tile/TileDialect.h"
#include "ops/attention/AttentionDecl.h"

#include <cmath>

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;
namespace tt = tilejit::tile;

namespace tilejit {
namespace {

llvm::Error configError(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

struct Shape {
  int64_t bm, bn, stages, consumers;
  explicit Shape(const TileConfig &c)
      : bm(c.get("bm")), bn(c.get("bn")), stages(c.get("stages")),
        consumers(c.get("consumers")) {}
  /// Shared memory of the Q tile, the K and V rings and the barriers, with
  /// the alignment slack.
  int64_t smemBytes(int64_t d, int elemBytes) const {
    return (bm + 2 * stages * bn) * d * elemBytes + 8 * (3 * stages + 1) + 3 * 1024;
  }
};

class AttentionForwardTemplate : public KernelTemplate {
public:
  const OpDecl &op() const override { return attention::forwardOp(); }

  llvm::ArrayRef<ConfigKeyDecl> configKeys() const override {
    static const ConfigKeyDecl keys[] = {
        {"bm", 64, 128, false, "query rows per program (64 per consumer warpgroup)"},
        {"bn", 16, 256, false, "keys per step of the loop"},
        {"stages", 1, 4, false, "stages of the K and V rings"},
        {"consumers", 1, 2, false, "consumer warpgroups"},
    };
    return keys;
  }

  static TileConfig make(int64_t consumers, int64_t bn, int64_t stages) {
    TileConfig c;
    c.set("bm", 64 * consumers).set("bn", bn).set("stages", stages).set("consumers", consumers);
    return c;
  }

  std::vector<TileConfig> configSpace(const KernelSpec &ks) const override {
    std::vector<TileConfig> out;
    for (int64_t consumers : {2, 1})
      for (int64_t bn : {128, 64, 176, 192, 96, 256})
        for (int64_t stages : {2, 3, 1}) {
          TileConfig c = make(consumers, bn, stages);
          if (llvm::Error err = checkConfig(ks, c))
            llvm::consumeError(std::move(err));
          else
            out.push_back(std::move(c));
        }
    return out;
  }

  TileConfig defaultConfig(const KernelSpec &ks) const override {
    attention::Params p(ks);
    // Two consumers of 64 rows; as many keys per step as the registers
    // hold beside the accumulator of O.
    TileConfig c = make(2, p.d == 256 ? 64 : 128, 2);
    if (llvm::Error err = checkConfig(ks, c)) {
      llvm::consumeError(std::move(err));
      return make(2, 64, 2);
    }
    return c;
  }

  llvm::Error checkConfig(const KernelSpec &ks, const TileConfig &cfg) const override {
    attention::Params p(ks);
    if (auto err = cfg.checkKeys(configKeys()))
      return err;
    if (!p.target.hasWgmma())
      return configError("attn_fwd runs on sm_90a (wgmma, TMA, setmaxnreg); the target is " +
                         llvm::Twine(p.target.archName()));
    Shape s(cfg);
    if (s.bm != 64 * s.consumers)
      return configError("bm = " + llvm::Twine(s.bm) + " must be 64 rows for each of " +
                         llvm::Twine(s.consumers) + " consumers");
    if (s.bn % 16 != 0)
      return configError("bn = " + llvm::Twine(s.bn) + " must be a multiple of 16");
    // Registers of a consumer thread: O's accumulator (d / 2), S (bn / 2)
    // and P (bn / 4), with room for addresses, m and l under the consumers'
    // limit.
    int64_t regs = p.d / 2 + 3 * s.bn / 4;
    if (regs > 200)
      return configError("each consumer thread would hold " + llvm::Twine(regs) +
                         " registers of O, S and P (at most 200): use a smaller bn");
    int64_t smem = s.smemBytes(p.d, dtypeBytes(p.dt));
    if (smem > p.target.maxSharedBytesPerBlock())
      return configError("bm, bn and stages need " + llvm::Twine(smem) +
                         " bytes of shared memory; " + llvm::Twine(p.target.archName()) +
                         " allows " + llvm::Twine(p.target.maxSharedBytesPerBlock()));
    return llvm::Error::success();
  }

  std::string_view sourceHash() const override {
    return embedded::templateSourceHash("AttentionTemplate.cpp");
  }

  llvm::Expected<OwningOpRef<ModuleOp>> build(MLIRContext &ctx, const KernelSpec &ks,
                                              const TileConfig &cfg) const override {
    attention::Params p(ks);
    if (auto err = ks.validate())
      return err;
    if (auto err = checkConfig(ks, cfg))
      return err;
    ctx.getOrLoadDialect<tt::TileDialect>();
    ctx.getOrLoadDialect<math::MathDialect>();
    OpBuilder b(&ctx);
    Location loc = b.getUnknownLoc();
    OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
    b.setInsertionPointToEnd(module->getBody());
    buildKernel(b, loc, p, Shape(cfg), cfg);
    return module;
  }

private:
  static std::string kernelName(const attention::Params &p) {
    return "attn_fwd_" + std::string(dtypeName(p.dt)) + "_d" + std::to_string(p.d) + "_h" +
           std::to_string(p.hq) + "_" + std::to_string(p.hkv) + (p.causal ? "_causal" : "") +
           (p.layout == attention::Layout::BSHD ? "_bshd" : "_bhsd");
  }

  void buildKernel(OpBuilder &b, Location loc, const attention::Params &p, const Shape &s,
                   const TileConfig &cfg) const {
    MLIRContext &ctx = *b.getContext();
    Type dt = elemType(ctx, p.dt), f32 = b.getF32Type(), i32 = b.getI32Type();
    Type idx = b.getIndexType();
    bool bshd = p.layout == attention::Layout::BSHD;
    // Q's tile, and the K and V rings: rows of keys, the head dim along
    // the columns (K-major for Q K^T; V is read MN-major for P V).
    auto ringQ = tt::RingType::get(&ctx, 1, s.bm, p.d, dt);
    auto ringK = tt::RingType::get(&ctx, s.stages, s.bn, p.d, dt);
    auto ringV = tt::RingType::get(&ctx, s.stages, s.bn, p.d, dt);
    // [dim, seq, heads, batch] for both layouts (the launch sets strides).
    auto mapQ = tt::TensorMapType::get(&ctx, s.bm, 64, dt, 4);
    auto mapKV = tt::TensorMapType::get(&ctx, s.bn, 64, dt, 4);
    // O: [b, sq, hq * d] or [b * hq, sq, d]; LSE: [b, hq, sq].
    auto oType = bshd ? MemRefType::get({ShapedType::kDynamic, ShapedType::kDynamic, p.hq * p.d}, dt)
                      : MemRefType::get({ShapedType::kDynamic, ShapedType::kDynamic, p.d}, dt);
    auto lseType = MemRefType::get({ShapedType::kDynamic, p.hq, ShapedType::kDynamic}, f32);
    // Arguments: Q, K, V maps, O, LSE, scale * log2(e), sq, sk.
    SmallVector<Type> args = {mapQ, mapKV, mapKV, oType, lseType, f32, idx, idx};
    // Programs: ceil(sq / bm) * batch * hq.
    AffineExpr sq = getAffineSymbolExpr(0, &ctx), batch = getAffineSymbolExpr(1, &ctx);
    AffineMap grid = AffineMap::get(0, 2, {sq.ceilDiv(s.bm) * batch * p.hq}, &ctx);
    auto kernel = makeKernel(b, loc, kernelName(p), args, 128 * (s.consumers + 1), grid,
                             {6, -1, 4, 0}, cfg, /*cluster=*/1, /*minBlocks=*/1);
    Block *entry = &kernel.getBody().front();
    Value qMap = entry->getArgument(0), kMap = entry->getArgument(1), vMap = entry->getArgument(2);
    Value o = entry->getArgument(3), lse = entry->getArgument(4);
    Value scaleLog2 = entry->getArgument(5), sqV = entry->getArgument(6),
          skV = entry->getArgument(7);

    auto cst = [&](int64_t v) -> Value { return arith::ConstantIndexOp::create(b, loc, v); };
    auto add = [&](Value x, Value y) -> Value { return arith::AddIOp::create(b, loc, x, y); };
    auto mul = [&](Value x, Value y) -> Value { return arith::MulIOp::create(b, loc, x, y); };
    auto divu = [&](Value x, int64_t c) -> Value {
      return arith::DivUIOp::create(b, loc, x, cst(c));
    };
    auto remu = [&](Value x, int64_t c) -> Value {
      return arith::RemUIOp::create(b, loc, x, cst(c));
    };
    auto minu = [&](Value x, Value y) -> Value { return arith::MinUIOp::create(b, loc, x, y); };
    auto ceilDiv = [&](Value x, int64_t c) { return divu(add(x, cst(c - 1)), c); };

    Value rq = tt::AllocRingOp::create(b, loc, ringQ, nullptr);
    Value rk = tt::AllocRingOp::create(b, loc, ringK, nullptr);
    Value rv = tt::AllocRingOp::create(b, loc, ringV, nullptr);
    auto barsType = tt::BarriersType::get(&ctx, s.stages);
    Value qFull = tt::AllocBarriersOp::create(b, loc, tt::BarriersType::get(&ctx, 1), 1, nullptr);
    Value kFull = tt::AllocBarriersOp::create(b, loc, barsType, 1, nullptr);
    Value vFull = tt::AllocBarriersOp::create(b, loc, barsType, 1, nullptr);
    Value empty = tt::AllocBarriersOp::create(b, loc, barsType, s.consumers, nullptr);

    // This program's tile: the tiles of the last query rows first.
    Value batchV = memref::DimOp::create(b, loc, lse, 0);
    Value heads = mul(batchV, cst(p.hq));
    Value mTiles = ceilDiv(sqV, s.bm);
    Value pid = tt::ProgramIdOp::create(b, loc, tt::Dim::x);
    Value mTile = arith::SubIOp::create(
        b, loc, arith::SubIOp::create(b, loc, mTiles, cst(1)),
        arith::DivUIOp::create(b, loc, pid, heads));
    Value bh = arith::RemUIOp::create(b, loc, pid, heads);
    Value seq = divu(bh, p.hq), head = remu(bh, p.hq);
    Value kvHead = divu(head, p.hq / p.hkv);
    Value q0 = mul(mTile, cst(s.bm));
    // Key tiles: every tile up to the last key a row of the program sees;
    // the first `whole` of them are seen whole by every row.
    Value kvEnd = p.causal ? minu(skV, add(q0, cst(s.bm))) : skV;
    Value kvTiles = ceilDiv(kvEnd, s.bn);
    Value whole = divu(p.causal ? minu(skV, add(q0, cst(1))) : skV, s.bn);
    auto stageOf = [&](Value it) { return std::make_pair(remu(it, s.stages), divu(it, s.stages)); };

    auto ws = tt::WarpSpecializeOp::create(b, loc, s.consumers, 40, s.consumers == 1 ? 240 : 232);
    {
      // The producer: Q once, then K and V tile by tile.
      OpBuilder::InsertionGuard guard(b);
      b.createBlock(&ws.getProducer());
      tt::TmaLoadOp::create(b, loc, qMap, q0, cst(0), ValueRange{head, seq}, rq, cst(0), qFull,
                            cst(0));
      auto loop = scf::ForOp::create(b, loc, cst(0), kvTiles, cst(1));
      b.setInsertionPointToStart(loop.getBody());
      Value j = loop.getInductionVar();
      auto [stage, round] = stageOf(j);
      tt::BarrierWaitOp::create(b, loc, empty, stage, add(round, cst(1)));
      Value k0 = mul(j, cst(s.bn));
      tt::TmaLoadOp::create(b, loc, kMap, k0, cst(0), ValueRange{kvHead, seq}, rk, stage, kFull,
                            stage);
      tt::TmaLoadOp::create(b, loc, vMap, k0, cst(0), ValueRange{kvHead, seq}, rv, stage, vFull,
                            stage);
      b.setInsertionPointAfter(loop);
      tt::YieldOp::create(b, loc);
    }
    {
      // A consumer: its 64 rows of the tile.
      OpBuilder::InsertionGuard guard(b);
      Block *body = b.createBlock(&ws.getConsumer());
      Value consumer = body->addArgument(idx, loc);
      Value myRows = mul(consumer, cst(64));
      auto wg = tt::WgmmaLayoutAttr::get(&ctx);
      auto rowsLayout = tt::SliceLayoutAttr::get(&ctx, 1, wg);
      auto sType = RankedTensorType::get({64, s.bn}, f32, wg);
      auto pType = RankedTensorType::get({64, s.bn}, dt, wg);
      auto iType = RankedTensorType::get({64, s.bn}, i32, wg);
      auto accType = RankedTensorType::get({64, p.d}, f32, wg);
      auto rowType = RankedTensorType::get({64}, f32, rowsLayout);
      auto f32c = [&](double v) -> Value {
        return arith::ConstantFloatOp::create(b, loc, b.getF32Type(), APFloat(float(v)));
      };
      auto splat = [&](Type t, Value v) -> Value { return tt::SplatOp::create(b, loc, t, v); };
      auto toI32 = [&](Value v) -> Value { return arith::IndexCastOp::create(b, loc, i32, v); };
      Value negInf = f32c(-INFINITY);

      tt::BarrierWaitOp::create(b, loc, qFull, cst(0), cst(0));
      // One step: keys [j bn, j bn + bn).
      auto step = [&](Value j, ValueRange carried, bool masked) -> SmallVector<Value> {
        Value m = carried[0], l = carried[1], acc = carried[2], it = carried[3];
        auto [stage, round] = stageOf(it);
        tt::BarrierWaitOp::create(b, loc, kFull, stage, round);
        Value sc = tt::DotOp::create(b, loc, sType, rq, cst(0), myRows, rk, stage, cst(0),
                                     splat(sType, f32c(0.0)), false, false);
        if (masked) {
          Value cols = arith::AddIOp::create(b, loc, tt::IotaOp::create(b, loc, iType, 1),
                                             splat(iType, toI32(mul(j, cst(s.bn)))));
          Value ok = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, cols,
                                           splat(iType, toI32(skV)));
          if (p.causal) {
            Value rows = arith::AddIOp::create(b, loc, tt::IotaOp::create(b, loc, iType, 0),
                                               splat(iType, toI32(add(q0, myRows))));
            ok = arith::AndIOp::create(
                b, loc, ok, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sle, cols, rows));
          }
          sc = arith::SelectOp::create(b, loc, ok, sc, splat(sType, negInf));
        }
        // The running max of the scaled scores, in the log2 domain.
        Value rowMax = tt::ReduceOp::create(b, loc, rowType, tt::ReduceKind::max, sc, 1);
        Value mNew = arith::MaxNumFOp::create(
            b, loc, m, arith::MulFOp::create(b, loc, rowMax, splat(rowType, scaleLog2)));
        Value negM = tt::BroadcastOp::create(
            b, loc, sType, arith::NegFOp::create(b, loc, mNew).getResult());
        Value pr = math::Exp2Op::create(
            b, loc, math::FmaOp::create(b, loc, sc, splat(sType, scaleLog2), negM));
        Value alpha = math::Exp2Op::create(b, loc, arith::SubFOp::create(b, loc, m, mNew));
        Value lNew = arith::AddFOp::create(
            b, loc, arith::MulFOp::create(b, loc, l, alpha),
            tt::ReduceOp::create(b, loc, rowType, tt::ReduceKind::sum, pr, 1));
        Value scaled = arith::MulFOp::create(b, loc, acc,
                                             tt::BroadcastOp::create(b, loc, accType, alpha));
        Value p16 = arith::TruncFOp::create(b, loc, pType, pr);
        tt::BarrierWaitOp::create(b, loc, vFull, stage, round);
        Value accNew =
            tt::DotRegOp::create(b, loc, accType, p16, rv, stage, cst(0), scaled, true);
        tt::BarrierArriveOp::create(b, loc, empty, stage);
        return {mNew, lNew, accNew, add(it, cst(1))};
      };
      SmallVector<Value> init = {splat(rowType, negInf), splat(rowType, f32c(0.0)),
                                 splat(accType, f32c(0.0)), cst(0)};
      auto wholeLoop = scf::ForOp::create(b, loc, cst(0), whole, cst(1), init);
      b.setInsertionPointToStart(wholeLoop.getBody());
      scf::YieldOp::create(b, loc,
                           step(wholeLoop.getInductionVar(), wholeLoop.getRegionIterArgs(), false));
      b.setInsertionPointAfter(wholeLoop);
      auto edgeLoop = scf::ForOp::create(b, loc, whole, kvTiles, cst(1), wholeLoop.getResults());
      b.setInsertionPointToStart(edgeLoop.getBody());
      scf::YieldOp::create(b, loc,
                           step(edgeLoop.getInductionVar(), edgeLoop.getRegionIterArgs(), true));
      b.setInsertionPointAfter(edgeLoop);

      // Epilogue: O / l, and LSE = (m + log2 l) ln 2.
      Value m = edgeLoop.getResult(0), l = edgeLoop.getResult(1), acc = edgeLoop.getResult(2);
      Value inv = arith::DivFOp::create(b, loc, splat(rowType, f32c(1.0)), l);
      Value out = arith::MulFOp::create(b, loc, acc, tt::BroadcastOp::create(b, loc, accType, inv));
      Value row0 = add(q0, myRows);
      if (bshd)
        tt::StoreOp::create(b, loc, out, o, ValueRange{seq, row0, mul(head, cst(p.d))});
      else
        tt::StoreOp::create(b, loc, out, o, ValueRange{bh, row0, cst(0)});
      Value lseRow = arith::MulFOp::create(
          b, loc, arith::AddFOp::create(b, loc, m, math::Log2Op::create(b, loc, l)),
          splat(rowType, f32c(M_LN2)));
      tt::StoreOp::create(b, loc, lseRow, lse, ValueRange{seq, head, row0});
      tt::YieldOp::create(b, loc);
    }
    b.setInsertionPointToEnd(entry);
    tt::ReturnOp::create(b, loc);
    b.setInsertionPointAfter(kernel);
  }
};

} // namespace

const KernelTemplate &attentionForwardTemplate() {
  static const AttentionForwardTemplate t;
  return t;
}

} // namespace tilejit
