//===- GemmTemplate.cpp - GEMM on Hopper: TMA, wgmma, warp specialization ---===//
//
// D = alpha * op(A) @ op(B) (+ beta * C) (+ bias), f32 accumulation, on sm_90a:
//
// - a persistent grid of programs (at most `programs`, given at launch, so a
//   caller can leave multiprocessors to other kernels) walks the output
//   tiles of bm x bn in a grouped order (`group` tile rows at a time, so
//   neighbouring programs share A and B tiles in L2);
// - warpgroup 0 is the producer: one thread loads each K step's A and B
//   tiles with TMA into a ring of `stages` stages, waiting for a stage to be
//   empty before it refills it;
// - `consumers` warpgroups each own bm / consumers rows of the tile: they
//   wait for a stage to be full, multiply it on the tensor cores
//   (tile.dot), release it, and after the last K step scale the
//   accumulator, add beta * C and the bias, and store D, masked at the
//   edges; or (tmastore, 16-bit D) write it a 64-column panel at a time
//   into shared memory and copy it out with TMA stores that run on while
//   the consumer starts its next tile.
//
// Every shape works: TMA reads zeros outside A and B (so K need not be a
// multiple of bk); D's stores are masked, or clipped by the TMA store. The
// tensor maps need 16-byte aligned rows (the launch checks; GemmLaunch.cpp).
//
// Tunables: bm (64 per consumer warpgroup, times 1 or 2), bn, bk (64),
// stages, consumers, group, raster (groups of tile rows or of columns),
// persistent (0: one program per tile), tmastore; pingpong (the two consumers take
// turns, each multiplying whole tiles, so that one's epilogue runs while the other's
// products do; an mbarrier pair orders their main loops) and inflight (a
// consumer keeps one K step's products running while it waits for the
// next stage, releasing each stage one step later); splitk (K split over
// that many programs per tile, the last adding the others' sums in a fixed
// order through a workspace).
//
//===----------------------------------------------------------------------===//
#include <algorithm>

#include "compiler/EmbeddedSources.h"
#include "compiler/templates/Kernel.h"
#include "compiler/templates/Template.h"
#include "dialects/Tile/TileDialect.h"
#include "ops/gemm/GemmDecl.h"
#include "ops/gemm/GemmEpilogue.h"
#include "ops/gemm/GemmSm80.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;
namespace tt = tilejit::tile;

namespace tilejit {
namespace {

llvm::Error configError(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

/// Buffers of D's panels per consumer with tmastore: one is written while
/// the TMA store of the other reads it.
constexpr int64_t kStoreBuffers = 2;

struct Shape {
  int64_t bm, bn, bk, stages, consumers, group, splitK;
  bool pingpong, inflight, tmaStore, byColumns, persistent;
  int64_t cluster;
  explicit Shape(const TileConfig &c)
      : bm(c.get("bm")), bn(c.get("bn")), bk(c.get("bk")), stages(c.get("stages")),
        consumers(c.get("consumers")), group(c.get("group")),
        splitK(c.has("splitk") ? c.get("splitk") : 1),
        pingpong(c.has("pingpong") && c.get("pingpong") != 0),
        inflight(c.has("inflight") && c.get("inflight") != 0),
        tmaStore(c.has("tmastore") && c.get("tmastore") != 0),
        byColumns(c.has("raster") && c.get("raster") != 0),
        persistent(!c.has("persistent") || c.get("persistent") != 0),
        cluster(c.has("cluster") ? c.get("cluster") : 1) {}
  /// Rows of a tile one consumer multiplies: its share of the tile, or the
  /// whole tile when the consumers take turns (ping-pong).
  int64_t rowsPerConsumer() const { return pingpong ? bm : bm / consumers; }
  /// Columns of D one TMA store moves: a 128-byte panel of 16-bit elements.
  static constexpr int64_t kStoreCols = 64;
  /// Shared memory of the rings and barriers, with the alignment slack.
  int64_t smemBytes(int elemBytes, int outBytes) const {
    int64_t store =
        tmaStore ? kStoreBuffers * consumers * rowsPerConsumer() * kStoreCols * outBytes : 0;
    return stages * (bm + bn) * bk * elemBytes + store + 16 * stages + 1024;
  }
};

class GemmTemplate : public KernelTemplate {
public:
  const OpDecl &op() const override { return gemm::op(); }

  // Every target without wgmma builds the sm_80 kernel (GemmSm80Template.cpp):
  // its keys join these (each optional where the other kernel lacks it), and
  // each kernel checks its own.
  llvm::ArrayRef<ConfigKeyDecl> configKeys() const override {
    static const std::vector<ConfigKeyDecl> keys = gemm::sm80::mergedKeys(hopperKeys());
    return keys;
  }

  static llvm::ArrayRef<ConfigKeyDecl> hopperKeys() {
    static const ConfigKeyDecl keys[] = {
        {"bm", 64, 256, false, "rows of D per program tile (64 or 128 per consumer)"},
        {"bn", 16, 256, false, "columns of D per program tile"},
        {"bk", 64, 64, false, "K per pipeline stage"},
        {"stages", 2, 8, false, "stages of the TMA ring"},
        {"consumers", 1, 2, false, "consumer warpgroups"},
        {"group", 1, 64, false,
         "tile rows (columns with raster = 1) walked together (grouped raster order)"},
        {"raster", 0, 1, true,
         "1: groups of `group` tile columns, each walked row by row (0: groups of tile rows, "
         "each walked column by column)"},
        {"cluster", 1, 2, true,
         "2: programs are pairs of blocks on neighbouring multiprocessors (a cluster) that "
         "take two tiles of D one above the other and share B's tile: each block loads half "
         "of it and the copy engine delivers it to both (multicast)"},
        {"persistent", 0, 1, true,
         "0: one program per tile (the grid is not capped: no multiprocessors are left to "
         "other work); 1 (the default): at most one program per multiprocessor, each "
         "walking tiles"},
        {"pingpong", 0, 1, true,
         "the consumers take turns, each a whole tile: one's epilogue runs while the other "
         "multiplies"},
        {"inflight", 0, 1, true,
         "a consumer starts a K step's product before the previous one completes, and "
         "releases that one's stage then"},
        {"tmastore", 0, 1, true,
         "D (16-bit) leaves through shared memory, a 64-column panel at a time, with TMA "
         "stores that run on under the next tile"},
        {"splitk", 1, 16, true,
         "K split over this many programs per tile, their partial sums added in a fixed "
         "order (deterministic) through a workspace: for shapes with few tiles"},
    };
    return keys;
  }

  TileConfig make(int64_t bm, int64_t bn, int64_t stages, int64_t consumers, int64_t group,
                  bool pingpong = false, bool inflight = false, bool tmaStore = false,
                  int64_t splitK = 1, bool byColumns = false, bool persistent = true) const {
    TileConfig c;
    c.set("bm", bm)
        .set("bn", bn)
        .set("bk", 64)
        .set("stages", stages)
        .set("consumers", consumers)
        .set("group", group);
    // Optional keys only when on: a config without them is the same kernel
    // (and the same key) as one that says 0.
    if (pingpong)
      c.set("pingpong", 1);
    if (inflight)
      c.set("inflight", 1);
    if (tmaStore)
      c.set("tmastore", 1);
    if (splitK > 1)
      c.set("splitk", splitK);
    if (byColumns)
      c.set("raster", 1);
    if (!persistent)
      c.set("persistent", 0);
    return c;
  }

  std::vector<TileConfig> configSpace(const KernelSpec &ks) const override {
    if (gemm::sm80::applies(ks))
      return gemm::sm80::configSpace(ks);
    // Tile shapes likeliest first (two consumers of 64 rows, as wide as the
    // accumulator allows), then ring depth and raster group. Ping-pong and
    // products in flight come last: on the H200 neither beat the default
    // (bench/NOTES.md, GEMM g2: ping-pong's 128 x 128 and 64 x 256 tiles
    // read 40 % more from L2 per flop than 128 x 256).
    // D through TMA stores first (16-bit D only; other outputs skip those
    // configs): 1.08 x cuBLAS against 1.00 without on the H200.
    // {bm, bn, consumers, pingpong, tmastore}
    static const int64_t tiles[][5] = {
        {128, 256, 2, 0, 1}, {128, 192, 2, 0, 1}, {128, 128, 2, 0, 1}, {128, 256, 2, 0, 0},
        {256, 128, 2, 0, 0}, {128, 128, 2, 0, 0}, {128, 192, 2, 0, 0}, {128, 64, 2, 0, 0},
        {64, 256, 1, 0, 1},  {64, 128, 1, 0, 0},  {128, 128, 2, 1, 0}, {64, 256, 2, 1, 0}};
    std::vector<TileConfig> out;
    // Each candidate the rules accept, in order.
    auto add = [&](TileConfig c) {
      if (llvm::Error err = checkConfig(ks, c))
        llvm::consumeError(std::move(err));
      else
        out.push_back(std::move(c));
    };
    // Few tiles over a long K: the default tile with K split 2 to 8 ways
    // first.
    gemm::Params p(ks);
    int64_t kSteps = (p.k + 63) / 64, sms = p.target.smCount();
    // (128 x 128 after 128 x 256: where C or a bias leaves no registers
    // for the wide tile's sums.)
    if (2 * ((p.m + 127) / 128) * ((p.n + 255) / 256) <= sms)
      for (int64_t bn : {256, 128})
        for (int64_t split : {2, 3, 4, 6, 8})
          for (bool tma : {true, false})
            if (split * 8 <= kSteps)
              add(make(128, bn, 4, 2, 8, false, false, tma, split));
    // Groups of tile columns for the first tile shapes, right after the
    // first ring depth (run 3 of bench/NOTES.md g6 moved single shapes by
    // up to 13 % either way); clusters of two last (0.98 x the default on
    // the H200 over 32 shapes, 0.83 to 1.06: g8).
    // Not one program per tile: its grid cannot leave multiprocessors free,
    // so a tuned winner could not honour a caller's margin.
    const int64_t(*first[])[5] = {&tiles[0], &tiles[1], &tiles[3]};
    for (bool inflight : {false, true})
      for (int64_t group : {8, 16, 4})
        for (int64_t stages : {4, 3, 5, 6, 2}) {
          for (const auto &t : tiles)
            add(make(t[0], t[1], stages, t[2], group, t[3] != 0, inflight, t[4] != 0));
          if (inflight || group != 8 || stages != 4)
            continue;
          for (auto *t : first)
            for (int64_t g : {8, 16})
              add(make((*t)[0], (*t)[1], 4, (*t)[2], g, false, false, (*t)[4] != 0, 1,
                       /*byColumns=*/true));
        }
    for (auto *t : first) {
      TileConfig pair = make((*t)[0], (*t)[1], 4, (*t)[2], 8, false, false, (*t)[4] != 0);
      pair.set("cluster", 2);
      add(pair);
    }
    return out;
  }

  TileConfig defaultConfig(const KernelSpec &ks) const override {
    if (gemm::sm80::applies(ks))
      return gemm::sm80::defaultConfig(ks);
    gemm::Params p(ks);
    // 128 x 256 tiles over two consumers keep the tensor cores busiest; a
    // narrow D takes narrower tiles so that the grid still fills the chip.
    // D through TMA stores wherever it may (16-bit D, rows 16 bytes apart):
    // 1.08 x cuBLAS against 1.00 without, over the benchmark's 32 shapes
    // (bench/NOTES.md, GEMM g4). C at 128 x 256 takes too many registers:
    // 128 x 128 then.
    int64_t bn = p.n <= 64 ? 64 : p.n <= 128 ? 128 : 256;
    // Few tiles (under half the multiprocessors at M, the spec's hint): if
    // tiles half as wide fill three quarters of the chip, those; else, over
    // a long K, K split so that the parts fill it, each part at least 8 K
    // steps, at most 8 parts (bench/NOTES.md, GEMM g5: each the faster on
    // the shapes of bench/gemm_shapes_fewtiles.json where it applies).
    int64_t mTiles = (p.m + 127) / 128, kSteps = (p.k + 63) / 64;
    int64_t sms = p.target.smCount();
    auto tilesAt = [&](int64_t width) { return mTiles * ((p.n + width - 1) / width); };
    // The parts that fill the chip with tiles of `width`.
    auto partsAt = [&](int64_t width) {
      return std::max<int64_t>(1, std::min({sms / tilesAt(width), kSteps / 8, int64_t(8)}));
    };
    bool splitting = false;
    if (2 * tilesAt(bn) <= sms) {
      if (bn == 256 && 4 * tilesAt(128) >= 3 * sms)
        bn = 128;
      else
        splitting = partsAt(bn) > 1;
    }
    int64_t stages = bn == 256 ? 4 : 5;
    // The first of these the rules take: K split (if chosen) before not,
    // the chosen width before 128, TMA stores before not.
    for (bool split : {splitting, false})
      for (auto [w, st] : {std::pair{bn, stages}, std::pair{int64_t(128), int64_t(4)}})
        for (bool tma : {true, false}) {
          int64_t parts = split ? partsAt(w) : 1;
          TileConfig c = make(128, w, st, 2, 8, false, false, tma, parts);
          if (llvm::Error err = checkConfig(ks, c))
            llvm::consumeError(std::move(err));
          else
            return c;
        }
    return make(128, 128, 4, 2, 8);
  }

  llvm::Error checkConfig(const KernelSpec &ks, const TileConfig &cfg) const override {
    if (gemm::sm80::applies(ks))
      return gemm::sm80::checkConfig(ks, cfg);
    gemm::Params p(ks);
    if (auto err = cfg.checkKeys(hopperKeys()))
      return err;
    Shape s(cfg);
    if (s.cluster == 2) {
      if (s.pingpong || s.splitK > 1)
        return configError("cluster = 2 takes neither pingpong nor splitk");
      // B's tile falls in two halves of whole boxes: rows of the N x K
      // tile, or 64-column panels of the K x N one.
      if (p.transB ? s.bn % 16 != 0 : s.bn % 128 != 0)
        return configError(
            "with cluster = 2 bn = " + llvm::Twine(s.bn) + " must split into two " +
            (p.transB ? "halves of whole 8-row groups" : "sets of 64-column panels"));
    }
    if (!s.persistent && s.pingpong)
      return configError("pingpong needs a persistent grid (with one tile per program the "
                         "second consumer would have none)");
    if (!s.persistent && s.splitK > 1)
      return configError("splitk needs a persistent grid (its last part waits for the others, "
                         "which must all be resident): persistent = 0 cannot split K");
    if (s.pingpong && s.consumers != 2)
      return configError("pingpong needs 2 consumers, got consumers = " + llvm::Twine(s.consumers));
    if (s.pingpong && s.bm != 64 && s.bm != 128)
      return configError("with pingpong each consumer multiplies a whole tile: bm = " +
                         llvm::Twine(s.bm) + " must be 64 or 128");
    if (!s.pingpong && (s.bm % (64 * s.consumers) != 0 || s.rowsPerConsumer() > 128))
      return configError("bm = " + llvm::Twine(s.bm) + " must give each of " +
                         llvm::Twine(s.consumers) + " consumers 64 or 128 rows");
    if (s.bn % 16 != 0 || (!p.transB && s.bn % 64 != 0))
      return configError("bn = " + llvm::Twine(s.bn) +
                         " must be a multiple of 16 (of 64 when B is "
                         "stored K x N)");
    if (p.transA && s.bm % 64 != 0)
      return configError("bm must be a multiple of 64");
    if (s.splitK > 1) {
      int64_t kSteps = (p.k + s.bk - 1) / s.bk;
      // The last part adds the others' sums as they load, beside its own,
      // C's tile and the bias's columns: past 128 of those ptxas spilled
      // (128 x 256 with a bias: 24-36 bytes; 128 x 128 with f32 C and a
      // bias: 8-16).
      int64_t acc = s.rowsPerConsumer() * s.bn / 128;
      int64_t held = acc + (p.hasC ? acc * dtypeBytes(p.out) / 4 : 0) + (p.hasBias ? s.bn / 4 : 0);
      if (held > 128)
        return configError("with splitk each consumer thread would hold " + llvm::Twine(held) +
                           " registers of accumulator, C and bias beside the sums it adds (at "
                           "most 128)");
      if (s.pingpong)
        return configError("splitk needs the consumers to share each tile (no pingpong)");
      if (s.splitK > kSteps)
        return configError("splitk = " + llvm::Twine(s.splitK) + " exceeds the " +
                           llvm::Twine(kSteps) + " K steps of bk = " + llvm::Twine(s.bk) +
                           " (K = " + llvm::Twine(p.k) + ")");
    }
    if (s.tmaStore) {
      if (dtypeBytes(p.out) != 2)
        return configError("tmastore writes 16-bit D through shared memory; D is " +
                           llvm::Twine(dtypeName(p.out)));
      if (s.bn % Shape::kStoreCols != 0)
        return configError("with tmastore bn = " + llvm::Twine(s.bn) +
                           " must be whole 64-column panels");
      if (!p.dAligned)
        return configError("tmastore needs D on a 16-byte boundary (the spec says d16 = 0)");
      // Rows a whole number of 16 bytes long, even with a leading dimension
      // that keeps them 16 bytes apart: on the H200 a TMA store into a row
      // of 100 bf16 (200 bytes) 208 bytes apart also wrote the 8 bytes past
      // its end, up to the next 16-byte boundary.
      if ((p.n * dtypeBytes(p.out)) % 16 != 0)
        return configError(
            "with tmastore D's rows must be whole multiples of 16 bytes; N = " + llvm::Twine(p.n) +
            " is not a multiple of " + llvm::Twine(16 / dtypeBytes(p.out)));
    }
    // Registers: the accumulator (bm / consumers x bn / 128 threads f32)
    // under the consumers' limit with room for addresses and the epilogue.
    int64_t accRegs = s.rowsPerConsumer() * s.bn / 128;
    if (accRegs > 128)
      return configError("each consumer thread would hold " + llvm::Twine(accRegs) +
                         " accumulator registers (at most 128)");
    // The epilogue holds C's tile beside the accumulator (f32 C: as many
    // registers again; 16-bit C: half as many).
    int64_t cRegs = p.hasC ? accRegs * dtypeBytes(p.out) / 4 : 0;
    if (accRegs + cRegs > 160)
      return configError("each consumer thread would hold " + llvm::Twine(accRegs + cRegs) +
                         " registers of accumulator and C (at most 160)");
    int64_t smem = s.smemBytes(dtypeBytes(p.ab), dtypeBytes(p.out));
    if (smem > p.target.maxSharedBytesPerBlock())
      return configError("bm, bn, stages and tmastore need " + llvm::Twine(smem) +
                         " bytes of shared memory; " + llvm::Twine(p.target.archName()) +
                         " allows " + llvm::Twine(p.target.maxSharedBytesPerBlock()));
    return llvm::Error::success();
  }

  // Arithmetic-bound: ranked again under sustained load (bench/NOTES.md,
  // GEMM g9).
  bool tunedUnderLoad() const override { return true; }

  std::string_view sourceHash() const override {
    static const std::string hash =
        std::string(embedded::templateSourceHash("GemmTemplate.cpp")) +
        std::string(embedded::templateSourceHash("GemmSm80Template.cpp"));
    return hash;
  }

  llvm::Expected<OwningOpRef<ModuleOp>> build(MLIRContext &ctx, const KernelSpec &ks,
                                              const TileConfig &cfg) const override {
    return buildModule(ctx, *this, ks, cfg, [&](OpBuilder &b, Location loc) {
      if (gemm::sm80::applies(ks))
        return gemm::sm80::buildKernel(b, loc, ks, cfg);
      buildKernel(b, loc, gemm::Params(ks), Shape(cfg), cfg);
    });
  }

private:
  static std::string kernelName(const gemm::Params &p) {
    return "gemm_" + std::string(dtypeName(p.ab)) + "_" + std::string(dtypeName(p.out)) + "_" +
           p.layoutName() + (p.hasC ? "_c" : "") + (p.hasBias ? "_bias" : "") +
           (p.ld ? "_ld" : "") + "_n" + std::to_string(p.n) + "_k" + std::to_string(p.k);
  }

  void buildKernel(OpBuilder &b, Location loc, const gemm::Params &p, const Shape &s,
                   const TileConfig &cfg) const {
    MLIRContext &ctx = *b.getContext();
    Type ab = elemType(ctx, p.ab), out = elemType(ctx, p.out), f32 = b.getF32Type();
    Type idx = b.getIndexType();
    // Ring stages as TMA writes them: A's rows of K (or K rows of A's
    // columns, transposed), B's columns of K (or K rows of B's columns).
    auto ringA = p.transA ? tt::RingType::get(&ctx, s.stages, s.bk, s.bm, ab)
                          : tt::RingType::get(&ctx, s.stages, s.bm, s.bk, ab);
    auto ringB = p.transB ? tt::RingType::get(&ctx, s.stages, s.bn, s.bk, ab)
                          : tt::RingType::get(&ctx, s.stages, s.bk, s.bn, ab);
    auto mapA = tt::TensorMapType::get(&ctx, ringA.getRows(), 64, ab, 2);
    // With clusters of two, each block copies half of B's boxes (half the
    // rows of an N x K tile; a K x N tile's panels are whole boxes already).
    int64_t bBoxRows = s.cluster == 2 && p.transB ? ringB.getRows() / 2 : ringB.getRows();
    auto mapB = tt::TensorMapType::get(&ctx, bBoxRows, 64, ab, 2);
    auto dType = gemm::outType(ctx, p);
    // With tmastore each consumer writes D's tile in panels of its rows x 64
    // columns into its own buffers, which TMA copies out.
    int64_t rows = s.rowsPerConsumer();
    auto ringD = tt::RingType::get(&ctx, kStoreBuffers * s.consumers, rows, Shape::kStoreCols, out);
    auto mapD = tt::TensorMapType::get(&ctx, rows, Shape::kStoreCols, out, 2);
    // With splitk, a workspace of splitk - 1 bm x bn f32 tiles of partial
    // sums per output tile, and a flag word per tile, part but the last, and
    // consumer.
    auto wsType = MemRefType::get({ShapedType::kDynamic, s.bm, s.bn}, f32);
    auto flagsType = MemRefType::get({ShapedType::kDynamic, s.splitK - 1, s.consumers}, f32);
    // Arguments: A's and B's tensor maps, D, [D's tensor map,] [C,] [bias,]
    // alpha, [beta,] [workspace, flags,] the programs cap.
    SmallVector<Type> args = {mapA, mapB, dType};
    if (s.tmaStore)
      args.push_back(mapD);
    gemm::Epilogue::appendParams(p, dType, args);
    bool split = s.splitK > 1;
    if (split) {
      args.push_back(wsType);
      args.push_back(flagsType);
    }
    args.push_back(idx);
    int64_t nTiles = (p.n + s.bn - 1) / s.bn, kSteps = (p.k + s.bk - 1) / s.bk;
    int64_t progsArg = int64_t(args.size()) - 1;
    // Programs: min(ceil(M / bm) * tiles along N * splits, the cap).
    AffineExpr m = getAffineSymbolExpr(0, &ctx), cap = getAffineSymbolExpr(1, &ctx);
    // Not persistent: one program per unit, the cap ignored.
    // With clusters a unit is two tiles one above the other.
    AffineExpr unitCount = m.ceilDiv(s.bm * s.cluster) * (nTiles * s.splitK);
    AffineMap grid = s.persistent ? AffineMap::get(0, 2, {unitCount, cap}, &ctx)
                                  : AffineMap::get(0, 2, {unitCount}, &ctx);
    // One block per multiprocessor: the register limit at entry that
    // setmaxnreg redistributes.
    auto kernel = makeKernel(b, loc, kernelName(p), args, 128 * (s.consumers + 1), grid,
                             {2, 0, progsArg, -1}, cfg, /*cluster=*/s.cluster,
                             /*minBlocks=*/1);
    Block *entry = &kernel.getBody().front();
    Value a = entry->getArgument(0), bm = entry->getArgument(1), d = entry->getArgument(2);
    Value dMap = s.tmaStore ? entry->getArgument(3) : Value();
    gemm::Epilogue epilogue = gemm::Epilogue::fromArgs(p, entry, s.tmaStore ? 4 : 3);
    Value partials = split ? entry->getArgument(unsigned(progsArg) - 2) : Value();
    Value flags = split ? entry->getArgument(unsigned(progsArg) - 1) : Value();

    auto cst = [&](int64_t v) -> Value { return arith::ConstantIndexOp::create(b, loc, v); };
    Value ra = tt::AllocRingOp::create(b, loc, ringA, nullptr);
    Value rb = tt::AllocRingOp::create(b, loc, ringB, nullptr);
    Value rd = s.tmaStore ? tt::AllocRingOp::create(b, loc, ringD, nullptr).getResult() : Value();
    auto barsType = tt::BarriersType::get(&ctx, s.stages);
    Value full = tt::AllocBarriersOp::create(b, loc, barsType, 2, nullptr);
    // A stage is released by every consumer that reads it: all of them, or
    // with ping-pong the one whose tile it belongs to.
    // With clusters, by every consumer of both blocks (B's halves land in
    // both).
    Value empty = tt::AllocBarriersOp::create(b, loc, barsType,
                                              (s.pingpong ? 1 : s.consumers) * s.cluster, nullptr);
    // With ping-pong, consumer c may start a tile's K steps once the other
    // has issued its previous tile's (barrier c, arrived on by the other):
    // the products run in turn, and a consumer never waits on a stage's
    // `full` barrier more than one phase ahead of it (a parity wait cannot
    // tell phases two apart).
    Value order =
        s.pingpong ? tt::AllocBarriersOp::create(b, loc, tt::BarriersType::get(&ctx, 2), 1, nullptr)
                         .getResult()
                   : Value();
    Value mSize = memref::DimOp::create(b, loc, d, 0);
    Value mTiles = arith::DivUIOp::create(
        b, loc, arith::AddIOp::create(b, loc, mSize, cst(s.bm - 1)), cst(s.bm));
    // Work units: each tile's K split in splitk parts, a tile's parts
    // consecutive (so they run at the same time on neighbouring programs).
    // With clusters: pairs of tile rows (a cluster's program), the block
    // of rank r taking row 2 i + r of pair i.
    Value unitRows =
        s.cluster == 1
            ? mTiles
            : arith::DivUIOp::create(
                  b, loc, arith::AddIOp::create(b, loc, mTiles, cst(s.cluster - 1)), cst(s.cluster))
                  .getResult();
    Value units = arith::MulIOp::create(b, loc, unitRows, cst(nTiles * s.splitK));
    Value pid = tt::ProgramIdOp::create(b, loc, tt::Dim::x);
    Value nprog = tt::NumProgramsOp::create(b, loc, tt::Dim::x);
    Value rank = s.cluster == 1 ? Value() : tt::ClusterRankOp::create(b, loc).getResult();

    // The tile's (row, column) block in the grouped order: `group` tile
    // rows are walked column by column before the next group starts (with
    // raster = 1, `group` tile columns row by row).
    auto tileAt = [&](Value t) -> std::pair<Value, Value> {
      Value across = s.byColumns ? unitRows : cst(nTiles),
            along = s.byColumns ? cst(nTiles) : unitRows;
      Value perGroup = s.byColumns ? arith::MulIOp::create(b, loc, across, cst(s.group)).getResult()
                                   : cst(s.group * nTiles);
      Value g = arith::DivUIOp::create(b, loc, t, perGroup);
      Value first = arith::MulIOp::create(b, loc, g, cst(s.group));
      Value left = arith::SubIOp::create(b, loc, along, first);
      Value size = arith::MinUIOp::create(b, loc, left, cst(s.group));
      Value in = arith::RemUIOp::create(b, loc, t, perGroup);
      Value inGroup =
          arith::AddIOp::create(b, loc, first, arith::RemUIOp::create(b, loc, in, size));
      Value acrossAt = arith::DivUIOp::create(b, loc, in, size);
      Value tm = s.byColumns ? acrossAt : inGroup, tn = s.byColumns ? inGroup : acrossAt;
      if (rank)
        tm = arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, tm, cst(s.cluster)), rank);
      return {tm, tn};
    };
    // Unit u: its tile, its part of K and the K steps [begin, end) of it.
    struct Unit {
      Value tile, part, begin, end;
    };
    auto unitAt = [&](Value u) {
      Unit w;
      w.tile = split ? arith::DivUIOp::create(b, loc, u, cst(s.splitK)).getResult() : u;
      w.part = split ? arith::RemUIOp::create(b, loc, u, cst(s.splitK)).getResult() : cst(0);
      auto bound = [&](Value part) -> Value {
        return split ? arith::DivUIOp::create(
                           b, loc, arith::MulIOp::create(b, loc, part, cst(kSteps)), cst(s.splitK))
                           .getResult()
                     : part;
      };
      w.begin = split ? bound(w.part) : cst(0);
      w.end = split ? bound(arith::AddIOp::create(b, loc, w.part, cst(1))) : cst(kSteps);
      return w;
    };
    auto stageOf = [&](Value it) {
      return std::make_pair(arith::RemUIOp::create(b, loc, it, cst(s.stages)).getResult(),
                            arith::DivUIOp::create(b, loc, it, cst(s.stages)).getResult());
    };

    // A consumer done with a stage frees it (in both blocks of a cluster).
    auto releaseStage = [&](Value stage) {
      auto arrive = tt::BarrierArriveOp::create(b, loc, empty, stage);
      if (s.cluster > 1)
        arrive.setCluster(true);
    };
    auto ws = tt::WarpSpecializeOp::create(b, loc, s.consumers, 40, s.consumers == 1 ? 240 : 232);
    {
      // The producer: the stages of every tile this program computes, in
      // order; a K step's stage is refilled once its consumers released it.
      OpBuilder::InsertionGuard guard(b);
      b.createBlock(&ws.getProducer());
      auto tileLoop = scf::ForOp::create(b, loc, pid, units, nprog, ValueRange{cst(0)});
      b.setInsertionPointToStart(tileLoop.getBody());
      Unit w = unitAt(tileLoop.getInductionVar());
      auto [tm, tn] = tileAt(w.tile);
      Value row0 = arith::MulIOp::create(b, loc, tm, cst(s.bm));
      Value col0 = arith::MulIOp::create(b, loc, tn, cst(s.bn));
      auto kLoop = scf::ForOp::create(b, loc, w.begin, w.end, cst(1), tileLoop.getRegionIterArgs());
      b.setInsertionPointToStart(kLoop.getBody());
      Value it = kLoop.getRegionIterArgs()[0];
      auto [stage, round] = stageOf(it);
      // A fresh barrier's phase of parity 1 counts as complete: the first
      // pass through the ring does not wait.
      tt::BarrierWaitOp::create(b, loc, empty, stage, arith::AddIOp::create(b, loc, round, cst(1)));
      Value k0 = arith::MulIOp::create(b, loc, kLoop.getInductionVar(), cst(s.bk));
      if (p.transA)
        tt::TmaLoadOp::create(b, loc, a, k0, row0, ra, stage, full, stage);
      else
        tt::TmaLoadOp::create(b, loc, a, row0, k0, ra, stage, full, stage);
      auto loadB = p.transB ? tt::TmaLoadOp::create(b, loc, bm, col0, k0, rb, stage, full, stage)
                            : tt::TmaLoadOp::create(b, loc, bm, k0, col0, rb, stage, full, stage);
      if (s.cluster > 1)
        loadB.setMulticast(s.cluster);
      scf::YieldOp::create(b, loc, ValueRange{arith::AddIOp::create(b, loc, it, cst(1))});
      b.setInsertionPointAfter(kLoop);
      scf::YieldOp::create(b, loc, kLoop.getResults());
      b.setInsertionPointAfter(tileLoop);
      tt::YieldOp::create(b, loc);
    }
    {
      // A consumer: its rows of every tile (with ping-pong: every other tile
      // of the program, whole), then the epilogue.
      OpBuilder::InsertionGuard guard(b);
      Block *body = b.createBlock(&ws.getConsumer());
      Value consumer = body->addArgument(idx, loc);
      auto accType = RankedTensorType::get({rows, s.bn}, f32, tt::WgmmaLayoutAttr::get(&ctx));
      Value myRows = s.pingpong ? cst(0) : arith::MulIOp::create(b, loc, consumer, cst(rows));
      // The program's tiles are pid, pid + nprog, ...; the producer fills the
      // ring with their K steps in that order, so a tile's first step is
      // number (its index among the program's tiles) * kSteps.
      Value first = pid, step = nprog, it0 = cst(0);
      if (s.pingpong) {
        first = arith::AddIOp::create(b, loc, pid, arith::MulIOp::create(b, loc, consumer, nprog));
        step = arith::MulIOp::create(b, loc, nprog, cst(2));
        it0 = arith::MulIOp::create(b, loc, consumer, cst(kSteps));
      }
      auto tileLoop = scf::ForOp::create(b, loc, first, units, step, ValueRange{it0});
      b.setInsertionPointToStart(tileLoop.getBody());
      Unit w = unitAt(tileLoop.getInductionVar());
      auto [tm, tn] = tileAt(w.tile);
      if (s.pingpong) {
        // The n-th tile of consumer c waits for phase n - 1 + c of its
        // barrier (a fresh barrier's phase of parity 1 counts as complete:
        // consumer 0's first tile starts at once).
        Value n = arith::DivUIOp::create(
            b, loc, arith::SubIOp::create(b, loc, tileLoop.getInductionVar(), first), step);
        tt::BarrierWaitOp::create(
            b, loc, order, consumer,
            arith::AddIOp::create(b, loc, n, arith::AddIOp::create(b, loc, consumer, cst(1))));
      }
      Value zero = tt::SplatOp::create(
          b, loc, accType, arith::ConstantFloatOp::create(b, loc, b.getF32Type(), APFloat(0.0f)));
      auto kLoop = scf::ForOp::create(b, loc, w.begin, w.end, cst(1),
                                      ValueRange{zero, tileLoop.getRegionIterArgs()[0]});
      b.setInsertionPointToStart(kLoop.getBody());
      Value acc = kLoop.getRegionIterArgs()[0], it = kLoop.getRegionIterArgs()[1];
      auto [stage, round] = stageOf(it);
      tt::BarrierWaitOp::create(b, loc, full, stage, round);
      Value next;
      if (s.inflight) {
        // Start this step's product, wait for the previous step's, and
        // release the stage that one read.
        Value started = tt::DotOp::create(b, loc, accType, ra, stage, myRows, rb, stage, cst(0),
                                          acc, p.transA, !p.transB, /*async=*/true);
        next = tt::DotWaitOp::create(b, loc, ValueRange{started}, 1).getResult(0);
        Value notFirst = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ugt,
                                               kLoop.getInductionVar(), w.begin);
        auto ifOp = scf::IfOp::create(b, loc, notFirst, /*withElseRegion=*/false);
        OpBuilder::InsertionGuard g(b);
        b.setInsertionPointToStart(ifOp.thenBlock());
        Value prev = arith::SubIOp::create(b, loc, it, cst(1));
        releaseStage(stageOf(prev).first);
      } else {
        next = tt::DotOp::create(b, loc, accType, ra, stage, myRows, rb, stage, cst(0), acc,
                                 p.transA, !p.transB);
        releaseStage(stage);
      }
      scf::YieldOp::create(b, loc, ValueRange{next, arith::AddIOp::create(b, loc, it, cst(1))});
      b.setInsertionPointAfter(kLoop);
      Value accDone = kLoop.getResult(0), itEnd = kLoop.getResult(1);
      if (s.pingpong) // the other consumer's turn
        tt::BarrierArriveOp::create(b, loc, order, arith::SubIOp::create(b, loc, cst(1), consumer));
      if (s.inflight) {
        accDone = tt::DotWaitOp::create(b, loc, ValueRange{accDone}, 0).getResult(0);
        releaseStage(stageOf(arith::SubIOp::create(b, loc, itEnd, cst(1))).first);
      }

      Value row0 =
          arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, tm, cst(s.bm)), myRows);
      Value col0 = arith::MulIOp::create(b, loc, tn, cst(s.bn));
      // The D epilogue runs once per tile: with splitk, in its last part.
      Operation *lastPart = nullptr;
      if (split) {
        // Parts 0 .. splitk - 2 store their sums into their own workspace
        // tiles and flag them; the last part waits for each in turn and
        // adds them to its own: total = own + sum 0 + sum 1 + ..., the same
        // additions in the same order whichever program runs a part and
        // whenever it finishes. Only the last part waits, and only for
        // parts of lower index; the others store at once. The wait needs
        // every program resident at once (the launch caps the grid at the
        // multiprocessors, one program each).
        Value others = cst(s.splitK - 1);
        Value firstSlot = arith::MulIOp::create(b, loc, w.tile, others);
        Value last = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, w.part, others);
        auto lastIf = scf::IfOp::create(b, loc, TypeRange{}, last, /*withElse=*/true);
        lastPart = lastIf;
        {
          OpBuilder::InsertionGuard g(b);
          b.setInsertionPointToStart(lastIf.elseBlock());
          Value slot = arith::AddIOp::create(b, loc, firstSlot, w.part);
          tt::StoreOp::create(b, loc, accDone, partials, ValueRange{slot, myRows, cst(0)});
          tt::FlagSetOp::create(b, loc, flags, ValueRange{w.tile, w.part, consumer}, cst(1));
          b.setInsertionPointToStart(lastIf.thenBlock());
          auto sum = scf::ForOp::create(b, loc, cst(0), others, cst(1), ValueRange{accDone});
          b.setInsertionPointToStart(sum.getBody());
          Value part = sum.getInductionVar();
          tt::FlagWaitOp::create(b, loc, flags, ValueRange{w.tile, part, consumer}, cst(1));
          Value theirs = tt::LoadOp::create(
              b, loc, accType, partials,
              ValueRange{arith::AddIOp::create(b, loc, firstSlot, part), myRows, cst(0)}, nullptr);
          scf::YieldOp::create(
              b, loc,
              ValueRange{arith::AddFOp::create(b, loc, sum.getRegionIterArgs()[0], theirs)});
          b.setInsertionPointAfter(sum);
          accDone = sum.getResult(0);
        }
        b.setInsertionPoint(lastIf.thenBlock()->getTerminator());
      }
      if (s.tmaStore) {
        // Panel by panel: wait until the TMA store that last read this
        // buffer is done with it (the tile's first panel waits for all, so
        // that the buffers' turns need not carry across tiles), write it,
        // copy it out.
        Value result = epilogue.compute(b, loc, accDone, row0, col0);
        Value narrow = arith::TruncFOp::create(
            b, loc, RankedTensorType::get({rows, s.bn}, out, accType.getEncoding()), result);
        auto panelType =
            RankedTensorType::get({rows, Shape::kStoreCols}, out, accType.getEncoding());
        Value firstBuffer = arith::MulIOp::create(b, loc, consumer, cst(kStoreBuffers));
        for (int64_t j = 0; j < s.bn / Shape::kStoreCols; ++j) {
          tt::TmaStoreWaitOp::create(b, loc, j == 0 ? 0 : kStoreBuffers - 1, /*read=*/true);
          Value panel = tt::SliceOp::create(b, loc, panelType, narrow,
                                            b.getDenseI64ArrayAttr({0, j * Shape::kStoreCols}));
          Value buffer = arith::AddIOp::create(b, loc, firstBuffer, cst(j % kStoreBuffers));
          tt::StoreRingOp::create(b, loc, panel, rd, buffer, cst(0));
          tt::TmaStoreOp::create(b, loc, rd, buffer, dMap, row0,
                                 arith::AddIOp::create(b, loc, col0, cst(j * Shape::kStoreCols)));
        }
      } else {
        epilogue.store(b, loc, accDone, d, row0, col0);
      }
      if (lastPart)
        b.setInsertionPointAfter(lastPart);
      // With ping-pong the other consumer's tile's steps come next: skip them.
      Value itNext = s.pingpong ? arith::AddIOp::create(b, loc, itEnd, cst(kSteps)) : itEnd;
      scf::YieldOp::create(b, loc, ValueRange{itNext});
      b.setInsertionPointAfter(tileLoop);
      // D's last tiles are written before the kernel ends.
      if (s.tmaStore)
        tt::TmaStoreWaitOp::create(b, loc, 0, /*read=*/false);
      tt::YieldOp::create(b, loc);
    }
    b.setInsertionPointToEnd(entry);
    tt::ReturnOp::create(b, loc);
    b.setInsertionPointAfter(kernel);
  }
};

} // namespace

namespace gemm {

MemRefType rowsType(MLIRContext &ctx, int64_t rows, int64_t cols, Type elem, bool ld) {
  if (!ld)
    return MemRefType::get({rows, cols}, elem);
  return MemRefType::get({rows, cols}, elem,
                         StridedLayoutAttr::get(&ctx, 0, {ShapedType::kDynamic, 1}));
}

MemRefType outType(MLIRContext &ctx, const Params &p) {
  return rowsType(ctx, ShapedType::kDynamic, p.n, elemType(ctx, p.out), p.ld);
}

void Epilogue::appendParams(const Params &p, Type dType, SmallVectorImpl<Type> &args) {
  Type f32 = Float32Type::get(dType.getContext());
  if (p.hasC)
    args.push_back(dType);
  if (p.hasBias)
    args.push_back(MemRefType::get({p.n}, elemType(*dType.getContext(), p.ab)));
  args.push_back(f32);
  if (p.hasC)
    args.push_back(f32);
}

Epilogue Epilogue::fromArgs(const Params &p, Block *entry, unsigned first) {
  Epilogue e;
  unsigned i = first;
  if (p.hasC)
    e.c = entry->getArgument(i++);
  if (p.hasBias)
    e.bias = entry->getArgument(i++);
  e.alpha = entry->getArgument(i++);
  if (p.hasC)
    e.beta = entry->getArgument(i++);
  return e;
}

Value Epilogue::compute(OpBuilder &b, Location loc, Value acc, Value row0, Value col0) const {
  auto accType = cast<RankedTensorType>(acc.getType());
  auto splat = [&](Value v) { return tt::SplatOp::create(b, loc, accType, v); };
  Value result = arith::MulFOp::create(b, loc, acc, splat(alpha));
  if (c) {
    Value cTile = tt::LoadOp::create(b, loc, accType, c, ValueRange{row0, col0}, nullptr);
    result =
        arith::AddFOp::create(b, loc, result, arith::MulFOp::create(b, loc, cTile, splat(beta)));
  }
  if (bias) {
    // The tile's columns of the bias, widened as they load (zeros past N),
    // then the same value down every row.
    auto colType =
        RankedTensorType::get({accType.getShape()[1]}, accType.getElementType(),
                              tt::SliceLayoutAttr::get(b.getContext(), 0, accType.getEncoding()));
    Value cols = tt::LoadOp::create(b, loc, colType, bias, ValueRange{col0}, nullptr);
    result = arith::AddFOp::create(b, loc, result, tt::BroadcastOp::create(b, loc, accType, cols));
  }
  return result;
}

void Epilogue::store(OpBuilder &b, Location loc, Value acc, Value d, Value row0, Value col0) const {
  tt::StoreOp::create(b, loc, compute(b, loc, acc, row0, col0), d, ValueRange{row0, col0});
}

} // namespace gemm

const KernelTemplate &gemmTemplate() {
  static const GemmTemplate t;
  return t;
}

} // namespace tilejit
