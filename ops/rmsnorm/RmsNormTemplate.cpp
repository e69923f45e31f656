//===- RmsNormTemplate.cpp - RMSNorm forward and backward templates -------===//
//
// Forward:  rstd = 1 / sqrt(mean(x^2) + eps);  y = x * rstd * g
// Backward: xhat = x * rstd;  dx = rstd * (dy*g - xhat * mean(dy*g*xhat));
//           dw = sum over rows of dy * xhat
// with g = w, or g = 1 + w (zero-centered gamma, the 1 added in f32). All
// arithmetic is f32. dw is reduced deterministically: each program of the
// persistent backward kernel sums its rows into one f32 partial row, and a
// second kernel sums the partials in a fixed order.
//
// Tunables: threads (block size), rows (tile rows = rows of threads), vec
// (elements per vector access), stream (streaming cache hints on the
// activations), programs (forward: 0 for one program per tile, else a
// persistent grid that prefetches; backward: persistent blocks, which is also
// the number of dw partial rows) and, backward, prefetch (load
// the next rows while computing the current ones) and wload (optional, 0 when
// absent: 1 reads the weight again for every tile, from L1/L2, instead of
// holding it in registers for the whole program; for long rows).
//
// segs (optional, 1 when absent) > 1 processes each row in that many column
// segments instead of holding it in registers, for rows too long to hold: the
// forward pass reads x twice (sum of squares, then y), the backward pass x, dy
// and the weight twice (the row's dot product, then dx), adding each
// segment's dw contribution to the program's partial row in global memory.
// Only the first row of threads writes the partial row, and each of its
// threads reads back only the columns it wrote itself, so no barrier is needed.
//
// cluster (optional, 1 when absent; sm_90) C > 1 splits each row over a
// cluster of C blocks on neighbouring multiprocessors: each holds one slice of
// ceil(cols / C) columns (rounded up to whole vector runs) in registers, and
// the row sums combine across the cluster through distributed shared memory.
// A program is then a cluster; `programs` counts clusters.
//
//===----------------------------------------------------------------------===//
#include "compiler/templates/Kernel.h"
#include "compiler/templates/Template.h"

#include "compiler/EmbeddedSources.h"
#include "dialects/Tile/TileDialect.h"
#include "mlir/IR/Builders.h"
#include "ops/rmsnorm/RmsNormDecl.h"
#include "llvm/Support/MathExtras.h"

#include <optional>

using namespace mlir;
namespace tt = tilejit::tile;

namespace tilejit {
namespace {

/// A spec of rmsnorm_fwd or rmsnorm_bwd, field by field, with its target.
using RmsSpec = rmsnorm::Params;

constexpr int64_t kMaxElemsPerThreadFwd = 64;
constexpr int64_t kMaxElemsPerThreadBwd = 32;
constexpr int64_t kScratchLimitBytes = 48 * 1024;

// The dw reduction kernel's shape: 256 threads as 16 rows of 16 lanes, up to
// 4 f32 (16 bytes) per access (fewer when the row length or dw's alignment
// does not allow 4), so one program sums a column strip of 16 * vec. (8 rows
// of 32 lanes: the same speed at 4096 and 8192 columns, 2 % slower at 1000,
// half the programs, and a third more PTX from the loop NVVM unrolls; 32 rows
// of 8 lanes: more PTX again, from the 31-step column reduction.)
constexpr int64_t kDwRowThreads = 16, kDwColThreads = 16;

int64_t dwVec(const RmsSpec &spec) {
  int64_t v = 4;
  while (v > 1 && (spec.cols % v != 0 || v * dtypeBytes(spec.wdtype) > spec.align))
    v /= 2;
  return v;
}

llvm::Error configError(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

/// Builds tiles, constants and arithmetic for one layout.
struct TileBuilder {
  OpBuilder &b;
  Location loc;
  tt::BlockedLayoutAttr layout;
  int64_t rows, cols;

  RankedTensorType tile(Type elem) const {
    return RankedTensorType::get({rows, cols}, elem, layout);
  }
  RankedTensorType colsTile(Type elem) const {
    return RankedTensorType::get({cols}, elem, tt::SliceLayoutAttr::get(b.getContext(), 0, layout));
  }
  RankedTensorType rowsTile() const {
    return RankedTensorType::get({rows}, b.getF32Type(),
                                 tt::SliceLayoutAttr::get(b.getContext(), 1, layout));
  }
  Value index(int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); }
  /// A load; `streaming` for data read once.
  Value load(RankedTensorType type, Value src, ValueRange at, bool streaming = false) {
    auto op = tt::LoadOp::create(b, loc, type, src, at, /*padding=*/nullptr);
    if (streaming)
      op.setStreaming(true);
    return op;
  }
  void store(Value v, Value dest, ValueRange at, bool streaming = false) {
    auto op = tt::StoreOp::create(b, loc, v, dest, at);
    if (streaming)
      op.setStreaming(true);
  }
  Value f32(double v) {
    return arith::ConstantFloatOp::create(b, loc, b.getF32Type(), APFloat(float(v)));
  }
  Value splat(Value scalar, RankedTensorType type) {
    return tt::SplatOp::create(b, loc, type, scalar);
  }
  Value widen(Value t) {
    auto type = cast<RankedTensorType>(t.getType());
    if (type.getElementType().isF32())
      return t;
    return arith::ExtFOp::create(b, loc, type.clone(b.getF32Type()), t);
  }
  Value narrow(Value t, Type elem) {
    auto type = cast<RankedTensorType>(t.getType());
    if (type.getElementType() == elem)
      return t;
    return arith::TruncFOp::create(b, loc, type.clone(elem), t);
  }
  Value add(Value x, Value y) { return arith::AddFOp::create(b, loc, x, y); }
  Value sub(Value x, Value y) { return arith::SubFOp::create(b, loc, x, y); }
  Value mul(Value x, Value y) { return arith::MulFOp::create(b, loc, x, y); }
  /// Sum along rows; `cluster`: across the blocks of the cluster too.
  Value rowSum(Value t, bool cluster = false) {
    auto op = tt::ReduceOp::create(b, loc, rowsTile(), tt::ReduceKind::sum, t, 1);
    if (cluster)
      op.setCluster(true);
    return op;
  }
  Value colSum(Value t) {
    return tt::ReduceOp::create(b, loc, colsTile(b.getF32Type()), tt::ReduceKind::sum, t, 0);
  }
  Value broadcast(Value t) { return tt::BroadcastOp::create(b, loc, tile(b.getF32Type()), t); }
  /// g = w or 1 + w, widened to f32, as a row of columns from column `col0`
  /// (0 when null).
  Value gamma(Value w, Type wElem, bool zeroCentered, Value col0 = {}) {
    Value wt = load(colsTile(wElem), w, ValueRange{col0 ? col0 : index(0)});
    Value g = widen(wt);
    if (zeroCentered)
      g = add(g, splat(f32(1.0), colsTile(b.getF32Type())));
    return g;
  }
};

struct Shape {
  int64_t vec, threads, rowThreads, colThreads;
  int64_t rowChunks; // vector runs per lane across the whole row
  int64_t segs;      // column segments per row (1: the row is held whole)
  int64_t chunks;    // vector runs per lane in one segment
  int64_t elems;     // elements of a row each thread holds at a time
  int64_t segCols;   // columns per segment: the tile's width
  int64_t cluster;   // blocks a row is split over (1: one block holds it)
};

int64_t ceilDiv(int64_t a, int64_t b) { return b > 0 ? (a + b - 1) / b : 0; }

Shape shapeOf(const RmsSpec &spec, const TileConfig &cfg) {
  Shape s;
  s.vec = cfg.get("vec");
  s.threads = cfg.get("threads");
  s.rowThreads = cfg.get("rows");
  s.colThreads = s.rowThreads > 0 ? s.threads / s.rowThreads : 0;
  int64_t perPass = s.colThreads * s.vec;
  s.cluster = cfg.has("cluster") ? cfg.get("cluster") : 1;
  // With a cluster, each block's part of a row: its slice of the columns.
  int64_t cols = s.cluster > 1 ? ceilDiv(spec.cols, s.cluster) : spec.cols;
  s.rowChunks = ceilDiv(cols, perPass);
  s.segs = cfg.has("segs") ? cfg.get("segs") : 1;
  s.chunks = ceilDiv(s.rowChunks, s.segs);
  s.elems = s.chunks * s.vec;
  s.segCols = s.segs == 1 && s.cluster == 1 ? spec.cols : s.chunks * perPass;
  return s;
}

class RmsNormTemplate : public KernelTemplate {
public:
  explicit RmsNormTemplate(bool backward) : backward_(backward) {}
  const OpDecl &op() const override {
    return backward_ ? rmsnorm::backwardOp() : rmsnorm::forwardOp();
  }
  bool backward() const { return backward_; }
  bool hasCudaBackend() const override { return true; }

  llvm::ArrayRef<ConfigKeyDecl> configKeys() const override {
    static const ConfigKeyDecl fwd[] = {
        {"vec", 1, 8, false, "elements per vector access"},
        {"threads", 32, 1024, false, "threads per block"},
        {"rows", 1, 1024, false, "rows per block"},
        {"stream", 0, 1, false, "streaming (L1-bypassing) loads and stores"},
        {"programs", 0, 65535, false, "persistent programs (0: one per tile of rows)"},
        {"segs", 1, 1 << 20, true, "column segments a row is processed in"},
        {"cluster", 1, 8, true, "blocks of a cluster that share a row (sm_90)"},
    };
    static const ConfigKeyDecl bwd[] = {
        {"vec", 1, 8, false, "elements per vector access"},
        {"threads", 32, 1024, false, "threads per block"},
        {"rows", 1, 1024, false, "rows per block"},
        {"stream", 0, 1, false, "streaming (L1-bypassing) loads and stores"},
        {"programs", 1, 1 << 20, false, "persistent programs, each writing one dw partial"},
        {"prefetch", 0, 1, false, "loads of the next row issued before this row's reduction"},
        {"wload", 0, 1, true, "the weight loaded once per program"},
        {"segs", 1, 1 << 20, true, "column segments a row is processed in"},
        {"cluster", 1, 8, true, "blocks of a cluster that share a row (sm_90)"},
    };
    if (backward_)
      return bwd;
    return fwd;
  }

  int64_t maxVec(const RmsSpec &spec) const {
    int bytes = dtypeBytes(spec.dtype);
    int64_t v = std::min<int64_t>(16 / bytes, std::max(spec.align / bytes, 1));
    // The weight is read with the same vector width: its accesses must be
    // aligned too (spec.align covers the weight's address as well).
    int wbytes = dtypeBytes(spec.wdtype);
    while (v > 1 && (v * wbytes > 16 || v * wbytes > spec.align))
      v /= 2;
    return v;
  }

  TileConfig makeConfig(const RmsSpec &spec, int64_t vec, int64_t colThreads,
                        int64_t minThreads) const {
    int64_t threads = std::max(colThreads, minThreads);
    TileConfig c;
    c.set("vec", vec).set("threads", threads).set("rows", threads / colThreads);
    if (backward())
      c.set("programs", spec.target.smCount()).set("prefetch", 1).set("stream", 0);
    else
      c.set("stream", 0).set("programs", 0);
    return c;
  }

  /// Rows in segments of `chunks` vector runs per lane, `rows` rows per tile.
  TileConfig segmentedConfig(const RmsSpec &spec, int64_t vec, int64_t threads, int64_t chunks,
                             int64_t rows = 1) const {
    TileConfig c;
    c.set("vec", vec).set("threads", threads).set("rows", rows);
    int64_t segs = ceilDiv(ceilDiv(spec.cols, threads / rows * vec), chunks);
    if (segs > 1)
      c.set("segs", segs);
    if (backward())
      c.set("programs", spec.target.smCount()).set("prefetch", 0).set("stream", 0);
    else
      c.set("stream", 1).set("programs", 0);
    return c;
  }

  /// Lanes per row so that each thread holds about `vectorsPerThread` vectors.
  static int64_t lanesFor(const RmsSpec &spec, int64_t vec, int64_t vectorsPerThread,
                          int64_t limit) {
    int64_t vectors = ceilDiv(spec.cols, vec);
    int64_t lanes = int64_t(llvm::PowerOf2Ceil(uint64_t(ceilDiv(vectors, vectorsPerThread))));
    // Never more elements per thread than the limit allows.
    while (lanes < 1024 && ceilDiv(vectors, lanes) * vec > limit)
      lanes *= 2;
    return std::clamp<int64_t>(lanes, 1, 1024);
  }

  // Defaults from the sweeps on an H200 (bench/NOTES.md): the forward pass
  // holds about four vectors per thread in blocks of at least 256 threads,
  // without streaming hints (they won no tuning of a held row: 16384x4096
  // 92 % of copy against 89 %, 16384x16384 4.13 against 3.98 TB/s); the
  // backward pass about two, in blocks of at least 512
  // threads, one persistent program per multiprocessor, prefetching. Rows
  // longer than kLongBwdRow do not fit that way: 1024 threads get 64
  // registers each, too few for x, dy, the weight, the dw sums and the next
  // row, and the spills cost 2.3x at 16384. They take no prefetch, read the
  // weight for each tile rather than holding it (7 % at 16384), and up to
  // 16384 columns 512 threads of 4-wide vectors (128 registers each).
  // Long rows go in segments (bench/NOTES.md, v5). Forward: above 32
  // elements per thread (holding 64 spills; 2048x65536: 2.61 TB/s held, 3.47
  // in 4 segments), 1024 threads of 2 runs per segment (16384 bf16 columns;
  // first or second of 18 configs at 65536, 100000 and 131072). Rows that
  // 1024 lanes would hold (above 16384 bf16 columns) go in segments of 512
  // threads of 2 runs (v6: 4096x24576 0.104 ms against 0.116 held, 4096x32768
  // 3.88 TB/s against 3.70).
  // Backward: rows that 512 threads cannot hold (above 16384 bf16 columns;
  // 4096x24576: 0.87 TB/s held by 1024 threads, 1.86 in segments), tiles of
  // 4 rows of 256 lanes, one run per lane per segment (2048 columns; first of
  // 38 configs at 20480 and 24576, of 14 at 131072).
  // On sm_90 a backward row above kHeldBwdRow goes first to the smallest
  // cluster whose blocks can hold its slices as the default holds a row of up
  // to kLongBwdRow (bench/NOTES.md, v7; H200, tuned: 16384x16384 0.48 ms in
  // clusters of 2 against 0.55 held by 512 threads, 4096x32768 0.27 in
  // clusters of 4 against 0.47 in segments, 2048x65536 0.28 in clusters of 8
  // against 0.48). Rows beyond 8 slices of kLongBwdRow take segments.
  static constexpr int64_t kMaxHeldFwd = 32;
  static constexpr int64_t kLongBwdRow = 8192;
  static constexpr int64_t kHeldBwdRow = 12288;
  TileConfig defaultConfig(const KernelSpec &ks) const override {
    const RmsSpec spec(ks);
    int64_t vec = maxVec(spec);
    int64_t limit = backward() ? kMaxElemsPerThreadBwd : kMaxElemsPerThreadFwd;
    if (backward() && spec.cols > kLongBwdRow) {
      if (auto c = clusterDefault(spec))
        return *c;
      int64_t v4 = std::min<int64_t>(vec, 4);
      int64_t lanes = std::min<int64_t>(512, ceilDiv(spec.cols, v4));
      if (ceilDiv(spec.cols, v4 * lanes) * v4 <= kMaxElemsPerThreadBwd)
        return makeConfig(spec, v4, lanes, 512).set("prefetch", 0).set("wload", 1);
      return segmentedConfig(spec, vec, 1024, 1, 4);
    }
    TileConfig c = makeConfig(spec, vec, lanesFor(spec, vec, backward() ? 2 : 4, limit),
                              backward() ? 512 : 256);
    // (Backward rows up to kLongBwdRow always fit: 1024 lanes of one vector.)
    if (!backward() && shapeOf(spec, c).elems > kMaxHeldFwd)
      return segmentedConfig(spec, vec, 1024, 2);
    if (!backward() && c.get("threads") / c.get("rows") > 512)
      return segmentedConfig(spec, vec, 512, 2);
    return c;
  }

  /// Backward configs for rows split over clusters of C blocks (sm_90), each
  /// block holding a slice of ceil(cols / C) columns the way the default
  /// holds a row of up to kLongBwdRow columns: 512 threads or more, at most
  /// two vectors per lane, prefetching (three spill: 24576 columns in
  /// clusters of 4 as 2 rows of 256 lanes x 3 vectors, 412 bytes). Lanes come
  /// in powers of two and a slice in whole vectors of every lane, so not
  /// every cluster size gives such a slice that leaves every block columns
  /// (24576 in clusters of 8: 4096-column slices, the last block none). A
  /// program is a cluster and the grid is persistent, so `programs` must not
  /// exceed the clusters that fit at once, or the last ones run in a second
  /// wave (16384x16384 on the H200: 66 clusters of 2, 0.48 ms; 28 of 4,
  /// 0.52 ms; 33 of 4, 0.81 ms). A cluster lives in one GPC, and where a
  /// GPC's multiprocessors do not divide by C some stay idle: clusters of 2
  /// fill the chip, larger ones need not.
  /// nullopt where the slice is still too long or the config is invalid.
  std::optional<TileConfig> clusterConfig(const RmsSpec &spec, int64_t c, int64_t programs) const {
    KernelSpec sliceSpec = spec;
    sliceSpec.set(rmsnorm::Cols, ceilDiv(spec.cols, c));
    const RmsSpec slice(sliceSpec);
    if (!backward() || !spec.target.hasClusters() || slice.cols > kLongBwdRow)
      return std::nullopt;
    int64_t vec = maxVec(spec);
    TileConfig cfg = makeConfig(slice, vec, lanesFor(slice, vec, 2, kMaxElemsPerThreadBwd), 512);
    cfg.set("cluster", c).set("programs", programs);
    if (auto err = checkConfig(spec, cfg)) {
      llvm::consumeError(std::move(err));
      return std::nullopt;
    }
    if (shapeOf(spec, cfg).elems > 2 * vec)
      return std::nullopt;
    return cfg;
  }

  /// Clusters of C that should fit at once on a chip of `sms` multiprocessors.
  /// Pairs fill it (a GPC holds whole pairs). For larger C it depends on how
  /// many multiprocessors each GPC of the chip kept: on the H200 measured, 30
  /// of 4 and 15 of 8 fit, 33 and 16 ran in two waves (0.81 against 0.50 ms at
  /// 16384x16384), so the default takes 7/8 (28 and 14, 3-5 % slower than the
  /// most that fit there) and the tuner tries the counts in between.
  static int64_t clusterPrograms(int64_t sms, int64_t c) {
    return c == 2 ? sms / 2 : sms / c * 7 / 8;
  }

  /// The default for a backward row above kHeldBwdRow on sm_90: the smallest
  /// cluster whose slices the blocks can hold and are nearly even. A block's
  /// slice is whole vectors of every lane, so the last block may get fewer
  /// columns, and a row takes as long as the widest slice (18432 columns in
  /// clusters of 3: slices of 8192, 8192 and 2048; of 5: 4 x 4096 and 2048).
  /// Up to kHeldBwdRow the row stays held by 512 threads, which the exchange
  /// between blocks would not beat (16384x12288 held: 87 % of copy; rows in
  /// clusters: 80 % at best, 16384x16384).
  std::optional<TileConfig> clusterDefault(const RmsSpec &spec) const {
    if (spec.cols <= kHeldBwdRow)
      return std::nullopt;
    for (int64_t c = 2; c <= spec.target.maxClusterBlocks(); ++c)
      if (auto cfg = clusterConfig(spec, c, clusterPrograms(spec.target.smCount(), c)))
        if (c * shapeOf(spec, *cfg).segCols * 8 <= spec.cols * 9)
          return cfg;
    return std::nullopt;
  }

  /// Backward cluster configs to search: each size, with as
  /// many clusters as the chip may fit and fewer (the tuner finds how many
  /// do). Forward rows are not split over clusters: segments were faster at
  /// every length measured (H200, one cluster per row: 4096x24576 0.175 ms
  /// against 0.105, 2048x65536 0.28 against 0.15).
  void appendClusterConfigs(const RmsSpec &spec, std::vector<TileConfig> &out) const {
    const int64_t sms = spec.target.smCount();
    for (int64_t c = 2; c <= spec.target.maxClusterBlocks(); ++c)
      for (int64_t programs : {clusterPrograms(sms, c), sms / c, sms / c * 15 / 16})
        if (auto cfg = clusterConfig(spec, c, programs))
          out.push_back(*cfg);
  }

  /// The space searched: around the default (a quarter to four times its
  /// lanes), the two widest vector widths, three block sizes, and for the
  /// backward pass one or two programs per multiprocessor, with and without
  /// prefetch, with and without streaming hints.
  std::vector<TileConfig> configSpace(const KernelSpec &ks) const override {
    const RmsSpec spec(ks);
    std::vector<TileConfig> candidates = {defaultConfig(spec)};
    int64_t limit = backward() ? kMaxElemsPerThreadBwd : kMaxElemsPerThreadFwd;
    for (int64_t vec = maxVec(spec); vec >= std::max<int64_t>(1, maxVec(spec) / 2); vec /= 2) {
      int64_t center = lanesFor(spec, vec, backward() ? 2 : 4, limit);
      for (int64_t lanes : {center, center / 2, center * 2, center / 4, center * 4}) {
        if (lanes < 1 || lanes > 1024)
          continue;
        for (int64_t minThreads : {256, 512, 128}) {
          TileConfig c = makeConfig(spec, vec, lanes, minThreads);
          if (!backward()) {
            for (int64_t perSM : {0, 4})
              for (int64_t stream : {1, 0})
                candidates.push_back(
                    c.set("stream", stream).set("programs", perSM * spec.target.smCount()));
            continue;
          }
          // Long rows: also with the weight read per tile (fewer registers).
          std::vector<int64_t> wloads = {0};
          if (spec.cols > kLongBwdRow)
            wloads.push_back(1);
          for (auto [perSM, prefetch] : {std::pair{1, 1}, std::pair{2, 1}, std::pair{1, 0}})
            for (int64_t stream : {0, 1})
              for (int64_t wload : wloads) {
                c.set("programs", perSM * spec.target.smCount())
                    .set("prefetch", prefetch)
                    .set("stream", stream);
                if (wload)
                  c.set("wload", 1);
                else
                  c.values.erase("wload");
                candidates.push_back(c);
              }
        }
      }
    }
    // Long rows: also in segments.
    // Forward: 512, 256 or 1024 threads of 2, 1 or 4 runs per segment, one
    // row per block. Backward: 512 or 1024 threads of 2 or 1 runs, one row per
    // block or four (fewer updates of the dw partial row per row).
    if (spec.cols > (backward() ? kLongBwdRow : 16384))
      for (int64_t threads : {512, 256, 1024})
        for (int64_t chunks : {2, 1, 4})
          for (int64_t rows : {1, 4}) {
            if (backward() ? threads == 256 || chunks == 4 : rows > 1)
              continue;
            TileConfig c = segmentedConfig(spec, maxVec(spec), threads, chunks, rows);
            for (int64_t stream : {1, 0})
              candidates.push_back(c.set("stream", stream));
          }
    appendClusterConfigs(spec, candidates);
    // Valid configs only, each once, keeping the first (likeliest) occurrence.
    std::vector<TileConfig> out;
    for (auto &c : candidates) {
      if (auto err = checkConfig(spec, c)) {
        llvm::consumeError(std::move(err));
        continue;
      }
      if (std::find(out.begin(), out.end(), c) == out.end())
        out.push_back(c);
    }
    return out;
  }

  llvm::Error checkConfig(const KernelSpec &ks, const TileConfig &cfg) const override {
    const RmsSpec spec(ks);
    if (auto err = cfg.checkKeys(configKeys()))
      return err;
    Shape s = shapeOf(spec, cfg);
    int bytes = dtypeBytes(spec.dtype);
    if (cfg.get("stream") != 0 && cfg.get("stream") != 1)
      return configError("stream must be 0 or 1, got " + llvm::Twine(cfg.get("stream")));
    if (s.vec < 1 || s.vec > 8 || !llvm::isPowerOf2_64(s.vec))
      return configError("vec must be 1, 2, 4 or 8, got " + llvm::Twine(s.vec));
    if (s.vec > maxVec(spec))
      return configError("vec = " + llvm::Twine(s.vec) + " needs " + llvm::Twine(s.vec * bytes) +
                         "-byte aligned rows; the spec guarantees " + llvm::Twine(spec.align));
    if (s.threads < 32 || s.threads > 1024 || s.threads % 32 != 0)
      return configError("threads must be a multiple of 32 in [32, 1024], got " +
                         llvm::Twine(s.threads));
    if (s.rowThreads < 1 || s.threads % s.rowThreads != 0 || !llvm::isPowerOf2_64(s.colThreads))
      return configError("rows = " + llvm::Twine(s.rowThreads) + " must divide threads = " +
                         llvm::Twine(s.threads) + " into a power-of-two number of lanes");
    if (s.colThreads > 32 && s.colThreads % 32 != 0)
      return configError("lanes per row above 32 must be whole warps");
    if (s.cluster > 1 && !spec.target.hasClusters())
      return configError("cluster > 1 needs sm_90 or later, not " +
                         llvm::Twine(spec.target.archName()));
    if (s.cluster < 1 || s.cluster > spec.target.maxClusterBlocks())
      return configError("cluster must be in [1, " + llvm::Twine(spec.target.maxClusterBlocks()) +
                         "], got " + llvm::Twine(s.cluster));
    if (s.cluster > 1) {
      if (s.segs > 1)
        return configError("cluster > 1 and segs > 1 do not combine");
      if ((s.cluster - 1) * s.segCols >= spec.cols)
        return configError("a row of " + llvm::Twine(spec.cols) + " columns in slices of " +
                           llvm::Twine(s.segCols) + " leaves block " + llvm::Twine(s.cluster - 1) +
                           " of the cluster without columns; use a smaller cluster");
    }
    if (s.segs < 1 || s.segs > s.rowChunks)
      return configError("segs must be in [1, " + llvm::Twine(s.rowChunks) +
                         "] (the vector runs per lane in a row), got " + llvm::Twine(s.segs));
    if (s.segs > 1) {
      int64_t needed = ceilDiv(spec.cols, s.segCols);
      if (needed != s.segs)
        return configError("segs = " + llvm::Twine(s.segs) + " gives segments of " +
                           llvm::Twine(s.segCols) + " columns, of which a row needs " +
                           llvm::Twine(needed) + "; use segs = " + llvm::Twine(needed));
      if (!backward() && cfg.get("programs") != 0)
        return configError("segs > 1 takes programs = 0 in the forward pass");
      if (backward() && (cfg.get("prefetch") != 0 || cfg.has("wload")))
        return configError("segs > 1 in the backward pass takes prefetch = 0 and no wload (the "
                           "weight is read for every segment)");
    }
    int64_t limit = backward() ? kMaxElemsPerThreadBwd : kMaxElemsPerThreadFwd;
    if (s.elems > limit)
      return configError("each thread would hold " + llvm::Twine(s.elems) +
                         " elements of a row (limit " + llvm::Twine(limit) +
                         "); use more threads per row, a smaller vec or more segs");
    if (!backward() && (cfg.get("programs") < 0 || cfg.get("programs") > 65535))
      return configError("programs must be 0 (one per tile) or in [1, 65535], got " +
                         llvm::Twine(cfg.get("programs")));
    if (backward()) {
      int64_t p = cfg.get("programs");
      if (p < 1 || p > 65535)
        return configError("programs must be in [1, 65535], got " + llvm::Twine(p));
      int64_t pf = cfg.get("prefetch");
      if (pf != 0 && pf != 1)
        return configError("prefetch must be 0 or 1, got " + llvm::Twine(pf));
      if (cfg.has("wload") && cfg.get("wload") != 0 && cfg.get("wload") != 1)
        return configError("wload must be 0 or 1, got " + llvm::Twine(cfg.get("wload")));
      if (s.rowThreads > 1 && s.rowThreads * s.colThreads * s.elems * 4 > kScratchLimitBytes)
        return configError("the dw column reduction needs " +
                           llvm::Twine(s.rowThreads * s.colThreads * s.elems * 4) +
                           " bytes of shared memory (limit 48 KiB)");
    }
    return llvm::Error::success();
  }

  WorkspaceInfo workspace(const KernelSpec &ks, const TileConfig &cfg) const override {
    const RmsSpec spec(ks);
    if (!backward())
      return {};
    return {cfg.get("programs") * spec.cols * 4};
  }

  std::string_view sourceHash() const override {
    return embedded::templateSourceHash("RmsNormTemplate.cpp");
  }

  llvm::Expected<OwningOpRef<ModuleOp>> build(MLIRContext &ctx, const KernelSpec &ks,
                                              const TileConfig &cfg) const override {
    const RmsSpec spec(ks);
    return buildModule(ctx, *this, ks, cfg, [&](OpBuilder &b, Location loc) {
      bool segmented = shapeOf(spec, cfg).segs > 1;
      if (backward())
        buildBackward(b, loc, spec, cfg, segmented);
      else
        buildForward(b, loc, spec, cfg, segmented);
    });
  }

private:
  std::string baseName(const RmsSpec &spec) const {
    return std::string(op().name) + "_" + std::string(dtypeName(spec.dtype)) + "_" +
           std::string(dtypeName(spec.wdtype)) + "_n" + std::to_string(spec.cols) +
           (spec.zeroCenteredGamma ? "_zcg" : "");
  }

  void buildForward(OpBuilder &b, Location loc, const RmsSpec &spec, const TileConfig &cfg,
                    bool segmented) const {
    MLIRContext &ctx = *b.getContext();
    Shape s = shapeOf(spec, cfg);
    Type xT = elemType(ctx, spec.dtype), wT = elemType(ctx, spec.wdtype), f32 = b.getF32Type();
    int64_t dyn = ShapedType::kDynamic, n = spec.cols;
    SmallVector<Type> args = {MemRefType::get({dyn, n}, xT), MemRefType::get({n}, wT),
                              MemRefType::get({dyn, n}, xT), MemRefType::get({dyn}, f32), f32};
    // programs = 0: one program per tile, grid = ceil(rows / tile rows).
    // programs = P: persistent, grid = min(ceil(rows / tile rows), P), each
    // program looping over its tiles and loading the next while computing.
    int64_t programs = cfg.get("programs");
    AffineExpr tiles = getAffineSymbolExpr(0, &ctx).ceilDiv(s.rowThreads);
    AffineMap grid =
        programs > 0 ? AffineMap::get(0, 1, {tiles, getAffineConstantExpr(programs, &ctx)}, &ctx)
                     : AffineMap::get(0, 1, tiles);
    auto kernel = makeKernel(b, loc, baseName(spec), args, s.threads, grid, {0, 0}, cfg, s.cluster);
    // A row held in up to kMaxHeldFwd (32) elements a thread fits in 64
    // registers, so 1024 threads fit on a multiprocessor. Left alone, ptxas takes a few more
    // where a run is ragged and loses a block: 15000 columns, 512 threads,
    // 70 registers, one block per multiprocessor, 67 % of copy (bench/NOTES.md, v7).
    if (!segmented && programs == 0 && s.elems <= kMaxHeldFwd && s.threads < 1024)
      kernel.setMinBlocksAttr(b.getI64IntegerAttr(1024 / s.threads));
    Block &body = kernel.getBody().front();
    b.setInsertionPointToStart(&body);
    Value x = body.getArgument(0), w = body.getArgument(1), y = body.getArgument(2),
          rstdOut = body.getArgument(3), eps = body.getArgument(4);

    TileBuilder tb{b, loc, tt::BlockedLayoutAttr::get(&ctx, s.vec, s.rowThreads, s.colThreads),
                   s.rowThreads, s.segCols};
    bool stream = cfg.get("stream") != 0;
    Value pid = tt::ProgramIdOp::create(b, loc, tt::Dim::x);
    if (segmented) {
      // (checkConfig: programs = 0, one program per tile of rows.)
      forwardRowsInSegments(b, loc, tb, spec, s, stream, body.getArguments(), pid);
      tt::ReturnOp::create(b, loc);
      b.setInsertionPointAfter(kernel);
      return;
    }
    Value c0 = sliceStart(b, loc, tb, s);
    Value tileRows = tb.index(s.rowThreads);
    Value g = tb.broadcast(tb.gamma(w, wT, spec.zeroCenteredGamma, c0));
    Value invN = tb.splat(tb.f32(1.0 / double(n)), tb.rowsTile());
    Value epsTile = tb.splat(eps, tb.rowsTile());
    auto loadX = [&](Value t) {
      Value row0 = arith::MulIOp::create(b, loc, t, tileRows);
      return tb.load(tb.tile(xT), x, ValueRange{row0, c0}, stream);
    };
    auto compute = [&](Value t, Value xt) {
      Value row0 = arith::MulIOp::create(b, loc, t, tileRows);
      Value xf = tb.widen(xt);
      Value meanSq = tb.mul(tb.rowSum(tb.mul(xf, xf), s.cluster > 1), invN);
      Value rstd = math::RsqrtOp::create(b, loc, tb.add(meanSq, epsTile));
      tb.store(rstd, rstdOut, ValueRange{row0});
      Value yf = tb.mul(tb.mul(xf, tb.broadcast(rstd)), g);
      tb.store(tb.narrow(yf, xT), y, ValueRange{row0, c0}, stream);
    };
    if (programs == 0) {
      compute(pid, loadX(pid));
    } else {
      Value nprog = tt::NumProgramsOp::create(b, loc, tt::Dim::x);
      Value rows = memref::DimOp::create(b, loc, x, 0);
      Value ntiles = arith::DivUIOp::create(
          b, loc, arith::AddIOp::create(b, loc, rows, tb.index(s.rowThreads - 1)), tileRows);
      auto loop = scf::ForOp::create(b, loc, pid, ntiles, nprog, ValueRange{loadX(pid)});
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(loop.getBody());
      Value t = loop.getInductionVar();
      Value next = loadX(arith::AddIOp::create(b, loc, t, nprog));
      compute(t, loop.getRegionIterArgs()[0]);
      scf::YieldOp::create(b, loc, ValueRange{next});
    }
    b.setInsertionPointToEnd(&body);
    tt::ReturnOp::create(b, loc);
    b.setInsertionPointAfter(kernel);
  }

  /// The first column of this block's part of a row: its slice in a
  /// cluster, else 0.
  static Value sliceStart(OpBuilder &b, Location loc, TileBuilder &tb, const Shape &s) {
    if (s.cluster == 1)
      return tb.index(0);
    Value rank = tt::ClusterRankOp::create(b, loc);
    return arith::MulIOp::create(b, loc, rank, tb.index(s.segCols));
  }

  /// for k in [0, segs): body(column of segment k, carried values).
  static scf::ForOp
  forEachSegment(OpBuilder &b, Location loc, TileBuilder &tb, const Shape &s, ValueRange inits,
                 llvm::function_ref<SmallVector<Value>(Value col0, ValueRange carried)> body) {
    auto loop = scf::ForOp::create(b, loc, tb.index(0), tb.index(s.segs), tb.index(1), inits);
    OpBuilder::InsertionGuard guard(b);
    // A loop without carried values comes with its (empty) yield.
    if (inits.empty())
      b.setInsertionPoint(loop.getBody()->getTerminator());
    else
      b.setInsertionPointToStart(loop.getBody());
    Value col0 = arith::MulIOp::create(b, loc, loop.getInductionVar(), tb.index(s.segCols));
    SmallVector<Value> yields = body(col0, loop.getRegionIterArgs());
    if (!inits.empty())
      scf::YieldOp::create(b, loc, yields);
    return loop;
  }

  /// The tile of rows of program `pid`, each row read twice, a segment at a
  /// time: first for the sum of squares, then to write y.
  void forwardRowsInSegments(OpBuilder &b, Location loc, TileBuilder &tb, const RmsSpec &spec,
                             const Shape &s, bool stream, ValueRange args, Value pid) const {
    MLIRContext &ctx = *b.getContext();
    Type xT = elemType(ctx, spec.dtype), wT = elemType(ctx, spec.wdtype), f32 = b.getF32Type();
    Value x = args[0], w = args[1], y = args[2], rstdOut = args[3], eps = args[4];
    Value row0 = arith::MulIOp::create(b, loc, pid, tb.index(s.rowThreads));
    Value zero = tb.splat(tb.f32(0.0), tb.tile(f32));
    auto squares = forEachSegment(b, loc, tb, s, zero, [&](Value col0, ValueRange acc) {
      // Read again below: no streaming hint here.
      Value xf = tb.widen(tb.load(tb.tile(xT), x, ValueRange{row0, col0}));
      return SmallVector<Value>{tb.add(acc[0], tb.mul(xf, xf))};
    });
    Value meanSq = tb.mul(tb.rowSum(squares.getResult(0)),
                          tb.splat(tb.f32(1.0 / double(spec.cols)), tb.rowsTile()));
    Value rstd = math::RsqrtOp::create(b, loc, tb.add(meanSq, tb.splat(eps, tb.rowsTile())));
    tb.store(rstd, rstdOut, ValueRange{row0});
    Value rb = tb.broadcast(rstd);
    forEachSegment(b, loc, tb, s, {}, [&](Value col0, ValueRange) {
      Value xf = tb.widen(tb.load(tb.tile(xT), x, ValueRange{row0, col0}, stream));
      Value g = tb.broadcast(tb.gamma(w, wT, spec.zeroCenteredGamma, col0));
      tb.store(tb.narrow(tb.mul(tb.mul(xf, rb), g), xT), y, ValueRange{row0, col0}, stream);
      return SmallVector<Value>{};
    });
  }

  /// The backward kernel's arguments: dy, x, rstd, w, dx, dw partials.
  struct BwdArgs {
    Value dy, x, rstdIn, w, dx, dwp;
    explicit BwdArgs(ValueRange a)
        : dy(a[0]), x(a[1]), rstdIn(a[2]), w(a[3]), dx(a[4]), dwp(a[5]) {}
  };

  /// Each thread holds its part of a tile of rows (and, unless wload, the
  /// weight) in registers; the program's dw sums stay in registers until the
  /// end.
  void backwardRowsHeld(OpBuilder &b, Location loc, TileBuilder &tb, const RmsSpec &spec,
                        const TileConfig &cfg, const Shape &s, ValueRange args, Value pid,
                        Value nprog, Value ntiles) const {
    MLIRContext &ctx = *b.getContext();
    Type xT = elemType(ctx, spec.dtype), wT = elemType(ctx, spec.wdtype), f32 = b.getF32Type();
    BwdArgs a(args);
    Value x = a.x, dy = a.dy, rstdIn = a.rstdIn, w = a.w, dx = a.dx, dwp = a.dwp;
    int64_t n = spec.cols;
    Value tileRows = tb.index(s.rowThreads);
    // The weight, held for the whole program or (wload) read for each tile.
    bool wload = cfg.has("wload") && cfg.get("wload") != 0;
    Value c0 = sliceStart(b, loc, tb, s);
    auto gamma = [&] { return tb.broadcast(tb.gamma(w, wT, spec.zeroCenteredGamma, c0)); };
    Value heldGamma = wload ? Value() : gamma();
    Value invN = tb.splat(tb.f32(1.0 / double(n)), tb.rowsTile());
    Value zero = tb.splat(tb.f32(0.0), tb.tile(f32));
    // With prefetch, the loads of the next tile are issued before the
    // current one is computed (two-stage software pipeline through the loop's
    // iteration arguments); loads past the last tile are masked.
    bool prefetch = cfg.get("prefetch") != 0, stream = cfg.get("stream") != 0;
    auto loadTile = [&](Value t) {
      Value row0 = arith::MulIOp::create(b, loc, t, tileRows);
      Value xt = tb.load(tb.tile(xT), x, ValueRange{row0, c0}, stream);
      Value dyt = tb.load(tb.tile(xT), dy, ValueRange{row0, c0}, stream);
      Value rs = tb.load(tb.rowsTile(), rstdIn, ValueRange{row0});
      return SmallVector<Value>{xt, dyt, rs};
    };
    SmallVector<Value> inits = {zero};
    if (prefetch)
      inits.append(loadTile(pid));
    auto loop = scf::ForOp::create(b, loc, pid, ntiles, nprog, inits);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(loop.getBody());
      Value t = loop.getInductionVar(), acc = loop.getRegionIterArgs()[0];
      SmallVector<Value> cur, next;
      if (prefetch) {
        cur.assign(loop.getRegionIterArgs().begin() + 1, loop.getRegionIterArgs().end());
        next = loadTile(arith::AddIOp::create(b, loc, t, nprog));
      } else {
        cur = loadTile(t);
      }
      Value row0 = arith::MulIOp::create(b, loc, t, tileRows);
      Value xf = tb.widen(cur[0]);
      Value dyf = tb.widen(cur[1]);
      Value rb = tb.broadcast(cur[2]);
      Value xhat = tb.mul(xf, rb);
      Value dyg = tb.mul(dyf, wload ? gamma() : heldGamma);
      Value mean = tb.mul(tb.rowSum(tb.mul(dyg, xhat), s.cluster > 1), invN);
      Value dxf = tb.mul(tb.sub(dyg, tb.mul(xhat, tb.broadcast(mean))), rb);
      tb.store(tb.narrow(dxf, xT), dx, ValueRange{row0, c0}, stream);
      SmallVector<Value> yields = {tb.add(acc, tb.mul(dyf, xhat))};
      yields.append(next);
      scf::YieldOp::create(b, loc, yields);
    }
    Value partial = tb.colSum(loop.getResult(0));
    tb.store(partial, dwp, ValueRange{pid, c0});
  }

  /// A tile of rows at a time, in segments: the rows' dot products over all
  /// segments first, then dx per segment, each segment's dw contribution added
  /// to the program's partial row (zeroed first; see the file comment).
  void backwardRowsInSegments(OpBuilder &b, Location loc, TileBuilder &tb, const RmsSpec &spec,
                              const TileConfig &cfg, const Shape &s, ValueRange args, Value pid,
                              Value nprog, Value ntiles) const {
    MLIRContext &ctx = *b.getContext();
    Type xT = elemType(ctx, spec.dtype), wT = elemType(ctx, spec.wdtype), f32 = b.getF32Type();
    BwdArgs a(args);
    bool stream = cfg.get("stream") != 0;
    forEachSegment(b, loc, tb, s, {}, [&](Value col0, ValueRange) {
      tb.store(tb.splat(tb.f32(0.0), tb.colsTile(f32)), a.dwp, ValueRange{pid, col0});
      return SmallVector<Value>{};
    });
    auto rowLoop = scf::ForOp::create(b, loc, pid, ntiles, nprog);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(rowLoop.getBody()->getTerminator());
    Value row0 = arith::MulIOp::create(b, loc, rowLoop.getInductionVar(), tb.index(s.rowThreads));
    Value rs = tb.load(tb.rowsTile(), a.rstdIn, ValueRange{row0});
    Value rb = tb.broadcast(rs);
    // dy * g and x of one segment; streaming only on the second reading.
    auto loadSegment = [&](Value col0, bool last) {
      Value xf = tb.widen(tb.load(tb.tile(xT), a.x, ValueRange{row0, col0}, last && stream));
      Value dyf = tb.widen(tb.load(tb.tile(xT), a.dy, ValueRange{row0, col0}, last && stream));
      Value g = tb.broadcast(tb.gamma(a.w, wT, spec.zeroCenteredGamma, col0));
      return std::array<Value, 3>{xf, dyf, tb.mul(dyf, g)};
    };
    Value zero = tb.splat(tb.f32(0.0), tb.tile(f32));
    auto dots = forEachSegment(b, loc, tb, s, zero, [&](Value col0, ValueRange acc) {
      auto [xf, dyf, dyg] = loadSegment(col0, false);
      return SmallVector<Value>{tb.add(acc[0], tb.mul(dyg, xf))};
    });
    // mean(dy*g*xhat) = rstd * sum(dy*g*x) / n
    Value mean = tb.mul(tb.mul(tb.rowSum(dots.getResult(0)), rs),
                        tb.splat(tb.f32(1.0 / double(spec.cols)), tb.rowsTile()));
    Value mb = tb.broadcast(mean);
    forEachSegment(b, loc, tb, s, {}, [&](Value col0, ValueRange) {
      auto [xf, dyf, dyg] = loadSegment(col0, true);
      Value xhat = tb.mul(xf, rb);
      Value dxf = tb.mul(tb.sub(dyg, tb.mul(xhat, mb)), rb);
      tb.store(tb.narrow(dxf, xT), a.dx, ValueRange{row0, col0}, stream);
      Value part = tb.load(tb.colsTile(f32), a.dwp, ValueRange{pid, col0});
      tb.store(tb.add(part, tb.colSum(tb.mul(dyf, xhat))), a.dwp, ValueRange{pid, col0});
      return SmallVector<Value>{};
    });
  }

  void buildBackward(OpBuilder &b, Location loc, const RmsSpec &spec, const TileConfig &cfg,
                     bool segmented) const {
    MLIRContext &ctx = *b.getContext();
    Shape s = shapeOf(spec, cfg);
    Type xT = elemType(ctx, spec.dtype), wT = elemType(ctx, spec.wdtype), f32 = b.getF32Type();
    int64_t dyn = ShapedType::kDynamic, n = spec.cols, programs = cfg.get("programs");

    // Kernel 1: dx, and one dw partial row per program.
    {
      SmallVector<Type> args = {MemRefType::get({dyn, n}, xT), MemRefType::get({dyn, n}, xT),
                                MemRefType::get({dyn}, f32),   MemRefType::get({n}, wT),
                                MemRefType::get({dyn, n}, xT), MemRefType::get({programs, n}, f32)};
      AffineMap grid = AffineMap::get(0, 0, getAffineConstantExpr(programs, &ctx));
      auto kernel = makeKernel(b, loc, baseName(spec), args, s.threads, grid, {}, cfg, s.cluster);
      Block &body = kernel.getBody().front();
      b.setInsertionPointToStart(&body);
      Value x = body.getArgument(1);
      TileBuilder tb{b, loc, tt::BlockedLayoutAttr::get(&ctx, s.vec, s.rowThreads, s.colThreads),
                     s.rowThreads, s.segCols};
      Value pid = tt::ProgramIdOp::create(b, loc, tt::Dim::x);
      Value nprog = tt::NumProgramsOp::create(b, loc, tt::Dim::x);
      Value rows = memref::DimOp::create(b, loc, x, 0);
      Value tileRows = tb.index(s.rowThreads);
      Value ntiles = arith::DivUIOp::create(
          b, loc, arith::AddIOp::create(b, loc, rows, tb.index(s.rowThreads - 1)), tileRows);
      if (segmented)
        backwardRowsInSegments(b, loc, tb, spec, cfg, s, body.getArguments(), pid, nprog, ntiles);
      else
        backwardRowsHeld(b, loc, tb, spec, cfg, s, body.getArguments(), pid, nprog, ntiles);
      tt::ReturnOp::create(b, loc);
      b.setInsertionPointAfter(kernel);
    }

    // Kernel 2: dw = sum of the partial rows, in order, per column strip.
    {
      SmallVector<Type> args = {MemRefType::get({programs, n}, f32), MemRefType::get({n}, wT)};
      const int64_t kDwVec = dwVec(spec), kDwStrip = kDwColThreads * kDwVec;
      int64_t strips = ceilDiv(n, kDwStrip);
      AffineMap grid = AffineMap::get(0, 0, getAffineConstantExpr(strips, &ctx));
      auto kernel = makeKernel(b, loc, baseName(spec) + "_dw", args, kDwRowThreads * kDwColThreads,
                               grid, {}, cfg);
      Block &body = kernel.getBody().front();
      b.setInsertionPointToStart(&body);
      Value dwp = body.getArgument(0), dw = body.getArgument(1);
      TileBuilder tb{b, loc, tt::BlockedLayoutAttr::get(&ctx, kDwVec, kDwRowThreads, kDwColThreads),
                     kDwRowThreads, kDwStrip};
      Value pid = tt::ProgramIdOp::create(b, loc, tt::Dim::x);
      Value col0 = arith::MulIOp::create(b, loc, pid, tb.index(kDwStrip));
      Value zero = tb.splat(tb.f32(0.0), tb.tile(f32));
      auto loop = scf::ForOp::create(b, loc, tb.index(0), tb.index(programs),
                                     tb.index(kDwRowThreads), ValueRange{zero});
      {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(loop.getBody());
        Value part = tb.load(tb.tile(f32), dwp, ValueRange{loop.getInductionVar(), col0});
        scf::YieldOp::create(b, loc, ValueRange{tb.add(loop.getRegionIterArgs()[0], part)});
      }
      Value sum = tb.colSum(loop.getResult(0));
      tb.store(tb.narrow(sum, wT), dw, ValueRange{col0});
      tt::ReturnOp::create(b, loc);
      b.setInsertionPointAfter(kernel);
    }
  }

  bool backward_;
};

} // namespace

const KernelTemplate &rmsNormForwardTemplate() {
  static const RmsNormTemplate t(/*backward=*/false);
  return t;
}

const KernelTemplate &rmsNormBackwardTemplate() {
  static const RmsNormTemplate t(/*backward=*/true);
  return t;
}

} // namespace tilejit
