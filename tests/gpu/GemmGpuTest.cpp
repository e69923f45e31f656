//===- GemmGpuTest.cpp - GEMM kernels on the GPU vs float64 ----------------===//
//
// Every layout (NT, NN, TN), both input types, every output type, ragged
// shapes, beta * C and accumulation into an f32 D in place, a bias, configs other
// than the default (D through TMA stores among them), and a capped persistent grid: fresh random
// inputs each run (the seed is printed on failure; TILEJIT_TEST_SEED replays it), D poisoned with
// NaN first, a float64 reference on the host, compared element by element (every element up to
// 1024^3; sampled rows above). Skips (and says why) where there is no GPU or it has no wgmma.
//
// GpuGemmSm80 runs the sm_80 kernel (cp.async, ldmatrix, mma.sync; the
// kernel of every target without wgmma) on any GPU of sm_80 or later,
// assembled for the GPU's major version without wgmma (sm_90 on an H200:
// an sm_80 cubin does not load there): every layout and type, ragged
// shapes down to 1x1x1 and odd K (element copies), A and B off 16-byte
// alignment (the run-time fallback), beta * C into f32 in place.
//
//===----------------------------------------------------------------------===//
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "compiler/Compiler.h"
#include "ops/gemm/GemmLaunch.h"
#include "runtime/CudaDriver.h"
#include "runtime/DeviceBuffer.h"
#include "tests/support/Compare.h"
#include "tests/support/GemmConfigs.h"
#include "tests/support/GpuTarget.h"
#include "tests/support/Seed.h"

using namespace tilejit;
using tilejit::testing::allClose;
using tilejit::testing::HostTensor;

namespace {

struct Case {
  const char *layout; // "nt", "nn", "tn"
  int64_t m, n, k;
  DType ab = DType::BF16, out = DType::BF16;
  bool hasC = false, cIsD = false;
  float alpha = 1.0f, beta = 0.0f;
  const char *config = ""; // empty: the default
  int64_t maxPrograms = 0;
  int64_t shift = 0; // A and B this many elements past a 16-byte boundary
  bool hasBias = false;
  /// Elements past each row of A, B, C and D before the next (leading
  /// dimensions of the row length plus these; 0: packed rows). The gaps
  /// hold NaN, and D's must still hold it afterwards.
  int64_t padA = 0, padB = 0, padC = 0, padD = 0;
  int64_t shiftD = 0; // D this many elements past a 16-byte boundary
};

/// `t` (rows x cols, packed) as rows `ld` elements apart, the gaps bytes of
/// `fill`.
std::vector<unsigned char> pitched(const HostTensor &t, int64_t rows, int64_t cols, int64_t ld,
                                   unsigned char fill) {
  size_t e = size_t(dtypeBytes(t.type));
  std::vector<unsigned char> out(size_t(rows * ld) * e, fill);
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(out.data() + size_t(r * ld) * e, t.bytes.data() + size_t(r * cols) * e,
                size_t(cols) * e);
  return out;
}

std::string name(const Case &c) {
  return std::string(c.layout) + " " + std::to_string(c.m) + "x" + std::to_string(c.n) + "x" +
         std::to_string(c.k) + " " + std::string(dtypeName(c.ab)) + "->" +
         std::string(dtypeName(c.out)) + (c.hasC ? (c.cIsD ? " D+=" : " +C") : "") +
         (*c.config ? std::string(" [") + c.config + "]" : "") +
         (c.maxPrograms ? " programs<=" + std::to_string(c.maxPrograms) : "") +
         (c.shift ? " shifted " + std::to_string(c.shift) : "") + (c.hasBias ? " +bias" : "") +
         (c.padA || c.padB || c.padC || c.padD
              ? " ld+" + std::to_string(c.padA) + "/" + std::to_string(c.padB) + "/" +
                    std::to_string(c.padC) + "/" + std::to_string(c.padD)
              : "") +
         (c.shiftD ? " D shifted " + std::to_string(c.shiftD) : "");
}

class GpuGemm : public ::testing::Test {
protected:
  void SetUp() override {
    auto ctx = useDevice(0);
    if (!ctx)
      GTEST_SKIP() << "no GPU here: " << llvm::toString(ctx.takeError());
    auto info = queryDevice(0);
    ASSERT_TRUE(bool(info)) << llvm::toString(info.takeError());
    auto t = info->target();
    ASSERT_TRUE(bool(t)) << llvm::toString(t.takeError());
    if (!t->hasWgmma())
      GTEST_SKIP() << info->name << " (" << info->arch() << ") has no wgmma";
    target = *t;
    sms = info->smCount;
  }

  void run(const Case &c) {
    SCOPED_TRACE(name(c));
    uint64_t seed = tilejit::testing::testSeed();
    SCOPED_TRACE(tilejit::testing::replayHint(seed));
    std::mt19937_64 rng(seed);
    gemm::Call call;
    call.ab = c.ab;
    call.out = c.out;
    call.transA = c.layout[0] == 't';
    call.transB = c.layout[1] == 't';
    call.m = c.m;
    call.n = c.n;
    call.k = c.k;
    call.hasC = c.hasC;
    call.hasBias = c.hasBias;
    call.alpha = c.alpha;
    call.beta = c.beta;
    call.maxPrograms = c.maxPrograms;
    int64_t aRows = call.transA ? c.k : c.m, aCols = call.transA ? c.m : c.k;
    int64_t bRows = call.transB ? c.n : c.k, bCols = call.transB ? c.k : c.n;
    int64_t lda = aCols + c.padA, ldb = bCols + c.padB;
    int64_t ldd = c.n + c.padD, ldc = c.cIsD ? ldd : c.n + c.padC;
    call.lda = c.padA ? lda : 0;
    call.ldb = c.padB ? ldb : 0;
    call.ldd = c.padD ? ldd : 0;
    call.ldc = c.cIsD ? call.ldd : (c.padC ? ldc : 0);

    HostTensor a(c.ab, size_t(c.m * c.k)), b(c.ab, size_t(c.k * c.n));
    HostTensor cin(c.out, size_t(c.m * c.n));
    a.randomNormal(rng, 0.0f, 1.0f);
    b.randomNormal(rng, 0.0f, 1.0f);
    cin.randomNormal(rng, 0.0f, 1.0f);
    HostTensor bias(c.ab, size_t(c.n));
    bias.randomNormal(rng, 0.0f, 4.0f);

    // A and B `shift` elements into their buffers (zeros before them), D
    // `shiftD`; every operand's rows its leading dimension apart, NaN
    // between them.
    size_t pad = size_t(c.shift) * size_t(dtypeBytes(c.ab));
    size_t padD = size_t(c.shiftD) * size_t(dtypeBytes(c.out));
    std::vector<unsigned char> aBytes(pad, 0), bBytes(pad, 0), dBytes(padD, 0xFF);
    auto aRowsBytes = pitched(a, aRows, aCols, lda, 0xFF);
    auto bRowsBytes = pitched(b, bRows, bCols, ldb, 0xFF);
    aBytes.insert(aBytes.end(), aRowsBytes.begin(), aRowsBytes.end());
    bBytes.insert(bBytes.end(), bRowsBytes.begin(), bRowsBytes.end());
    auto cBytes = pitched(cin, c.m, c.n, ldc, 0xFF);
    size_t e = size_t(dtypeBytes(c.out));
    auto dRowsBytes = c.cIsD ? pitched(cin, c.m, c.n, ldd, 0xFF)
                             : std::vector<unsigned char>(size_t(c.m * ldd) * e, 0xFF); // NaN
    dBytes.insert(dBytes.end(), dRowsBytes.begin(), dRowsBytes.end());
    auto da = DeviceBuffer::allocate(aBytes.size()), db = DeviceBuffer::allocate(bBytes.size());
    auto dd = DeviceBuffer::allocate(dBytes.size()), dc = DeviceBuffer::allocate(cBytes.size());
    auto dbias = DeviceBuffer::allocate(bias.bytes.size());
    ASSERT_TRUE(da && db && dd && dc && dbias);
    ASSERT_FALSE(bool(dbias->upload(bias.bytes)));
    ASSERT_FALSE(bool(da->upload(aBytes)));
    ASSERT_FALSE(bool(db->upload(bBytes)));
    ASSERT_FALSE(bool(dd->upload(dBytes)));
    if (!c.cIsD) {
      ASSERT_FALSE(bool(dc->upload(cBytes)));
    }
    call.a = da->ptr() + pad;
    call.b = db->ptr() + pad;
    call.d = dd->ptr() + padD;
    call.c = c.cIsD ? call.d : dc->ptr();
    call.bias = dbias->ptr();
    // The spec once the addresses are known (D's alignment is part of it).
    auto spec = gemm::specOf(call, target);
    ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
    TileConfig config;
    if (*c.config) {
      auto parsed = TileConfig::parse(c.config);
      ASSERT_TRUE(bool(parsed)) << llvm::toString(parsed.takeError());
      config = *parsed;
    }
    auto compiled = compileKernel(*spec, config);
    ASSERT_TRUE(bool(compiled)) << llvm::toString(compiled.takeError());
    EXPECT_EQ(compiled->entries.front().spillBytes, 0) << compiled->log;
    auto kernel = LoadedKernel::load(*compiled);
    ASSERT_TRUE(bool(kernel)) << llvm::toString(kernel.takeError());

    if (auto err = gemm::launch(**kernel, call, sms, nullptr))
      FAIL() << llvm::toString(std::move(err));
    auto drv = CudaDriver::get();
    ASSERT_TRUE(bool(drv));
    ASSERT_EQ(drv->cuCtxSynchronize(), CUDA_SUCCESS);
    std::vector<unsigned char> dOut(dBytes.size());
    ASSERT_FALSE(bool(dd->download(dOut)));
    // D's rows out of its buffer; nothing written before D, between its
    // rows or after them.
    HostTensor d(c.out, size_t(c.m * c.n));
    size_t outside = 0;
    for (size_t i = 0; i < padD; ++i)
      outside += dOut[i] != 0xFF;
    for (int64_t r = 0; r < c.m; ++r) {
      const unsigned char *row = dOut.data() + padD + size_t(r * ldd) * e;
      std::memcpy(d.bytes.data() + size_t(r * c.n) * e, row, size_t(c.n) * e);
      for (size_t i = size_t(c.n) * e; i < size_t(ldd) * e; ++i)
        outside += row[i] != 0xFF;
    }
    EXPECT_EQ(outside, 0u) << "bytes written outside D's rows";

    // The reference on every row up to 1024^3 multiply-adds, else on 48
    // random rows and the last one.
    std::vector<int64_t> rows;
    if (c.m * c.n * c.k <= (int64_t(1) << 30)) {
      for (int64_t i = 0; i < c.m; ++i)
        rows.push_back(i);
    } else {
      std::uniform_int_distribution<int64_t> pick(0, c.m - 1);
      for (int i = 0; i < 48; ++i)
        rows.push_back(pick(rng));
      rows.push_back(c.m - 1);
    }
    std::vector<double> ad(a.count), bd(b.count);
    for (size_t i = 0; i < a.count; ++i)
      ad[i] = a.get(i);
    for (size_t i = 0; i < b.count; ++i)
      bd[i] = b.get(i);
    std::vector<double> ref, scale;
    HostTensor got(c.out, rows.size() * size_t(c.n));
    for (size_t r = 0; r < rows.size(); ++r) {
      int64_t i = rows[r];
      for (int64_t j = 0; j < c.n; ++j) {
        double sum = 0, mag = 0;
        for (int64_t k = 0; k < c.k; ++k) {
          double x = call.transA ? ad[size_t(k * c.m + i)] : ad[size_t(i * c.k + k)];
          double y = call.transB ? bd[size_t(j * c.k + k)] : bd[size_t(k * c.n + j)];
          sum += x * y;
          mag += std::fabs(x * y);
        }
        double v = double(c.alpha) * sum;
        if (c.hasC)
          v += double(c.beta) * cin.get(size_t(i * c.n + j));
        if (c.hasBias)
          v += bias.get(size_t(j));
        ref.push_back(v);
        scale.push_back(std::fabs(c.alpha) * mag +
                        (c.hasBias ? std::fabs(bias.get(size_t(j))) : 0));
        got.set(r * size_t(c.n) + size_t(j), d.get(size_t(i * c.n + j)));
      }
    }
    auto tol = tilejit::testing::tolerance(c.out);
    tol.accum = 1e-4; // f32 accumulation of K products on the tensor cores
    EXPECT_TRUE(allClose(got, ref, tol, size_t(c.n), scale));
  }

  /// The error with which the launch of `call` is refused (a failure if it
  /// is not).
  void refused(const gemm::Call &call, std::string &msg, const char *config = "",
               const gemm::Call *launchAs = nullptr) {
    auto spec = gemm::specOf(call, target);
    ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
    TileConfig cfg;
    if (*config)
      cfg = *TileConfig::parse(config);
    auto compiled = compileKernel(*spec, cfg);
    ASSERT_TRUE(bool(compiled)) << llvm::toString(compiled.takeError());
    auto kernel = LoadedKernel::load(*compiled);
    ASSERT_TRUE(bool(kernel)) << llvm::toString(kernel.takeError());
    auto err = gemm::launch(**kernel, launchAs ? *launchAs : call, sms, nullptr);
    ASSERT_TRUE(bool(err)) << "the launch was not refused";
    msg = llvm::toString(std::move(err));
  }

  /// Every layout at tile-sized, larger and ragged sizes: both kernels.
  void everyLayout() {
    for (const char *layout : {"nt", "nn", "tn"}) {
      run({layout, 128, 256, 64});
      run({layout, 256, 512, 192});
      run({layout, 200, 264, 72}); // no size a multiple of a tile
      run({layout, 1024, 1024, 1024});
    }
  }

  /// D = alpha A B (+ beta C) + bias: every layout, ragged N (the bias's
  /// columns masked), with C and into an f32 D in place, other configs.
  void withBias(llvm::ArrayRef<const char *> configs = {}) {
    auto biased = [](Case c) {
      c.hasBias = true;
      return c;
    };
    for (const char *layout : {"nt", "nn", "tn"}) {
      run(biased({layout, 296, 200, 136})); // rows of A 16-byte aligned in every layout
      run(biased({layout, 1024, 1024, 1024, DType::F16, DType::F16}));
    }
    run(biased({"nt", 127, 264, 72, DType::BF16, DType::BF16, true, false, 0.5f, -1.0f}));
    run(biased({"nt", 1, 8, 8}));
    run(biased({"tn", 512, 256, 640, DType::BF16, DType::F32, true, true, 1.0f, 1.0f}));
    for (const char *cfg : configs) {
      Case c = biased({"nt", 520, 448, 200});
      c.config = cfg;
      run(c);
    }
  }

  Target target;
  int sms = 0;
};

TEST_F(GpuGemm, EveryLayoutAgainstFloat64) { everyLayout(); }

TEST_F(GpuGemm, RaggedShapes) {
  run({"nt", 1, 256, 64});       // one row
  run({"nt", 127, 255, 72});     // odd N: element stores
  run({"nt", 8191, 4097, 1000}); // sampled rows
  run({"nn", 1, 136, 40});       // K below one stage
  run({"tn", 64, 8, 8});
}

TEST_F(GpuGemm, InputAndOutputTypes) {
  for (DType out : {DType::BF16, DType::F16, DType::F32}) {
    run({"nt", 300, 200, 136, DType::BF16, out});
    run({"nt", 300, 200, 136, DType::F16, out});
  }
}

TEST_F(GpuGemm, AlphaBetaAndMainGradAccumulation) {
  run({"nt", 256, 384, 128, DType::BF16, DType::BF16, true, false, 0.5f, -2.0f});
  // wgrad into an f32 main_grad in place: D = A^T B + D.
  run({"tn", 512, 256, 640, DType::BF16, DType::F32, true, true, 1.0f, 1.0f});
}

TEST_F(GpuGemm, BiasInTheEpilogue) {
  withBias({"bk=64 bm=128 bn=256 consumers=2 group=8 inflight=1 stages=4",
            "bk=64 bm=64 bn=256 consumers=2 group=4 inflight=1 pingpong=1 stages=5",
            "bk=64 bm=64 bn=128 consumers=1 group=4 stages=3"});
}

TEST_F(GpuGemm, ConfigsOtherThanTheDefault) {
  for (const char *cfg : tilejit::testing::kGemmConfigs)
    for (const char *layout : {"nt", "nn", "tn"}) {
      Case c{layout, 520, 448, 200};
      c.config = cfg;
      run(c);
    }
}

TEST_F(GpuGemm, CappedPersistentGrid) {
  Case c{"nt", 1000, 1000, 256};
  c.maxPrograms = 3; // each program walks about a third of the tiles
  run(c);
  // The consumers taking turns: each program's tiles split between them,
  // an odd count left to the first; K over many rounds of the ring, and of
  // one partial step; with C.
  for (const char *cfg : {"bk=64 bm=128 bn=128 consumers=2 group=8 inflight=1 pingpong=1 stages=6",
                          "bk=64 bm=64 bn=256 consumers=2 group=8 pingpong=1 stages=3"})
    for (int64_t k : {1000, 40}) {
      Case pp{"nn", 1000, 1000, k};
      pp.config = cfg;
      pp.maxPrograms = 5;
      run(pp);
      Case withC{"nt", 700, 520, k, DType::BF16, DType::BF16, true, false, 0.75f, 0.5f};
      withC.config = "bk=64 bm=64 bn=128 consumers=2 group=8 inflight=1 pingpong=1 stages=4";
      withC.maxPrograms = 3;
      run(withC);
    }
}

TEST_F(GpuGemm, TmaStoreEpilogue) {
  // D through shared memory and TMA stores: every layout; edges the copy
  // clips (M and N not multiples of a tile, M = 1); C and a bias; f16;
  // grids capped so that each program stores many tiles through the same
  // buffers; and the panel counts and consumer splits of kGemmConfigs'
  // tmastore entries (ConfigsOtherThanTheDefault runs those at 520 x 448).
  // C beside a whole 128 x 256 or 128 x 128 accumulator takes too many
  // registers (refused): those configs add only the bias.
  struct {
    const char *config;
    bool withC;
  } cases[] = {{"bk=64 bm=128 bn=256 consumers=2 group=8 stages=4 tmastore=1", false},
               {"bk=64 bm=128 bn=192 consumers=2 group=8 stages=4 tmastore=1", true},
               {"bk=64 bm=64 bn=128 consumers=1 group=4 stages=3 tmastore=1", true},
               {"bk=64 bm=128 bn=128 consumers=2 group=8 pingpong=1 stages=4 tmastore=1", false}};
  for (auto [cfg, withC] : cases) {
    for (const char *layout : {"nt", "nn", "tn"}) {
      Case c{layout, 1000, 1000, 256};
      c.config = cfg;
      c.maxPrograms = 3;
      run(c);
    }
    Case edge{"nt", 127, 264, 72, DType::F16, DType::F16, withC, false, 0.5f, -1.0f};
    edge.config = cfg;
    edge.hasBias = true;
    run(edge);
    Case row{"nt", 1, 64, 64};
    row.config = cfg;
    run(row);
  }
  // The copy engine needs D 16-byte aligned: a spec says whether it is
  // (d16), and a kernel built for an aligned D refuses another by name.
  gemm::Call call;
  call.m = call.n = call.k = 64;
  call.a = call.b = call.d = 1 << 20;
  gemm::Call off = call;
  off.d += 4;
  std::string msg;
  refused(call, msg, "bk=64 bm=128 bn=128 consumers=2 group=8 stages=4 tmastore=1", &off);
  EXPECT_NE(msg.find("D is at an address that is not 16-byte aligned"), std::string::npos) << msg;
}

TEST_F(GpuGemm, SplitKAgainstFloat64) {
  // K split 2 to 8 ways (parts of unequal length where K steps do not
  // divide), every layout, ragged edges, C and a bias, f32 D accumulated in
  // place, TMA stores or not, and grids capped below the parts of one tile
  // (a program then runs several parts of a tile, in order).
  struct {
    const char *layout;
    int64_t m, n, k;
    const char *config;
    int64_t maxPrograms;
  } cases[] = {
      {"nt", 256, 512, 4096, "bk=64 bm=128 bn=256 consumers=2 group=8 splitk=8 stages=4 tmastore=1",
       0},
      {"nn", 200, 264, 1000, "bk=64 bm=128 bn=128 consumers=2 group=8 splitk=3 stages=4", 0},
      {"tn", 296, 136, 2500, "bk=64 bm=64 bn=128 consumers=1 group=4 splitk=5 stages=3", 0},
      {"nt", 520, 448, 1024, "bk=64 bm=128 bn=256 consumers=2 group=8 splitk=4 stages=4 tmastore=1",
       3},
      {"nt", 130, 72, 640, "bk=64 bm=128 bn=128 consumers=2 group=8 inflight=1 splitk=2 stages=4",
       1},
  };
  for (const auto &x : cases) {
    Case c{x.layout, x.m, x.n, x.k};
    c.config = x.config;
    c.maxPrograms = x.maxPrograms;
    run(c);
  }
  Case withC{"nt", 127, 264, 1536, DType::F16, DType::F16, true, false, 0.5f, -1.0f};
  withC.config = "bk=64 bm=128 bn=128 consumers=2 group=8 splitk=4 stages=4 tmastore=1";
  withC.hasBias = true;
  run(withC);
  Case mainGrad{"tn", 512, 256, 4096, DType::BF16, DType::F32, true, true, 1.0f, 1.0f};
  mainGrad.config = "bk=64 bm=128 bn=128 consumers=2 group=8 splitk=6 stages=4";
  run(mainGrad);
}

TEST_F(GpuGemm, SplitKIsBitwiseRepeatable) {
  // The parts of a tile are added in one order whichever program runs them
  // and whenever it finishes: D is the same bits across launches, grid caps
  // and a caller's workspace against the stream pool's.
  uint64_t seed = tilejit::testing::testSeed();
  SCOPED_TRACE(tilejit::testing::replayHint(seed));
  std::mt19937_64 rng(seed);
  gemm::Call call;
  call.m = 1000;
  call.n = 1024;
  call.k = 8192;
  HostTensor a(call.ab, size_t(call.m * call.k)), b(call.ab, size_t(call.k * call.n));
  a.randomNormal(rng, 0.0f, 1.0f);
  b.randomNormal(rng, 0.0f, 1.0f);
  auto spec = gemm::specOf(call, target);
  ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
  auto compiled = compileKernel(
      *spec,
      *TileConfig::parse("bk=64 bm=128 bn=256 consumers=2 group=8 splitk=8 stages=4 tmastore=1"));
  ASSERT_TRUE(bool(compiled)) << llvm::toString(compiled.takeError());
  auto kernel = LoadedKernel::load(*compiled);
  ASSERT_TRUE(bool(kernel)) << llvm::toString(kernel.takeError());
  int64_t wsBytes = gemm::workspaceBytes(**kernel, call);
  // 32 tiles, 7 parts of each but the last: their sums and flags.
  EXPECT_EQ(wsBytes, 32 * 7 * 128 * 256 * 4 + 32 * 7 * 2 * 4);
  auto da = DeviceBuffer::allocate(a.bytes.size()), db = DeviceBuffer::allocate(b.bytes.size());
  auto dd = DeviceBuffer::allocate(size_t(call.m * call.n * 2));
  auto ws = DeviceBuffer::allocate(size_t(wsBytes));
  ASSERT_TRUE(da && db && dd && ws);
  ASSERT_FALSE(bool(da->upload(a.bytes)));
  ASSERT_FALSE(bool(db->upload(b.bytes)));
  call.a = da->ptr();
  call.b = db->ptr();
  call.d = dd->ptr();
  auto drv = CudaDriver::get();
  ASSERT_TRUE(bool(drv));
  std::vector<unsigned char> first;
  int runs = 0;
  for (int64_t programs : {int64_t(0), int64_t(7), int64_t(0), int64_t(33), int64_t(0)})
    for (bool own : {false, true}) {
      SCOPED_TRACE("programs " + std::to_string(programs) + (own ? " own workspace" : " pooled"));
      ASSERT_FALSE(bool(dd->fill(0xFF)));
      // Garbage in the caller's workspace each time: a part that read sums
      // before they were flagged would not give the same bits.
      ASSERT_FALSE(bool(ws->fill(0xFF)));
      call.maxPrograms = programs;
      call.workspace = own ? ws->ptr() : 0;
      call.workspaceSize = own ? int64_t(ws->bytes()) : 0;
      if (auto err = gemm::launch(**kernel, call, sms, nullptr))
        FAIL() << llvm::toString(std::move(err));
      ASSERT_EQ(drv->cuCtxSynchronize(), CUDA_SUCCESS);
      std::vector<unsigned char> got(dd->bytes());
      ASSERT_FALSE(bool(dd->download(got)));
      if (first.empty())
        first = got;
      else
        EXPECT_TRUE(got == first) << "D differs from the first launch's";
      ++runs;
    }
  EXPECT_EQ(runs, 10);
  // A caller's workspace smaller than the split needs is refused by name,
  // before anything is launched.
  call.workspace = ws->ptr();
  call.workspaceSize = wsBytes - 16;
  llvm::Error small = gemm::launch(**kernel, call, sms, nullptr);
  std::string why = small ? llvm::toString(std::move(small)) : "launched";
  EXPECT_NE(why.find("the workspace holds " + std::to_string(wsBytes - 16) +
                     " bytes; a split of K into 8 parts needs " + std::to_string(wsBytes)),
            std::string::npos)
      << why;
  // And the bits are right: a sampled check of the last D against float64.
  HostTensor d(call.out, size_t(call.m * call.n));
  d.bytes = first;
  int bad = 0;
  for (int s = 0; s < 64; ++s) {
    int64_t i = int64_t(rng() % uint64_t(call.m)), j = int64_t(rng() % uint64_t(call.n));
    double sum = 0, mag = 0;
    for (int64_t k = 0; k < call.k; ++k) {
      double x = a.get(size_t(i * call.k + k)), y = b.get(size_t(j * call.k + k));
      sum += x * y;
      mag += std::fabs(x * y);
    }
    if (std::fabs(d.get(size_t(i * call.n + j)) - sum) > 1e-2 * std::fabs(sum) + 1e-4 * mag + 1e-3)
      ++bad;
  }
  EXPECT_EQ(bad, 0);
}

// C and D inside wider buffers (rows a leading dimension apart, NaN in the
// gaps, which D's must keep): every layout and output type, C apart from D
// and D itself, TMA stores (the default for 16-bit D whose rows are whole
// multiples of 16 bytes), A and B wider too, a bias, K split.
TEST_F(GpuGemm, LeadingDimensionsOfCAndD) {
  auto ld = [](Case c, int64_t padC, int64_t padD, int64_t padAB = 0) {
    c.padC = padC;
    c.padD = padD;
    c.padA = c.padB = padAB;
    return c;
  };
  for (const char *layout : {"nt", "nn", "tn"}) {
    run(ld({layout, 296, 264, 136}, 0, 8));
    run(ld({layout, 200, 264, 72, DType::BF16, DType::F32, true, false, 0.5f, -1.0f}, 4, 12));
    run(ld({layout, 200, 264, 72, DType::F16, DType::F16, true, true, 1.0f, 1.0f}, 0, 24, 8));
  }
  // 100 bf16 columns: 200-byte rows, 208 bytes apart in D. TMA stores
  // wrote the 8 bytes after each row here; the kernel's own stores do not.
  run(ld({"nt", 256, 100, 64}, 0, 4));
  run(ld({"nt", 127, 255, 72, DType::BF16, DType::F32, true, false, 1.0f, 2.0f}, 5, 9));
  Case biased = ld({"nn", 1024, 1000, 512}, 0, 24);
  biased.hasBias = true;
  run(biased);
  for (const char *cfg : {"bk=64 bm=128 bn=256 consumers=2 group=8 splitk=4 stages=4 tmastore=1",
                          "bk=64 bm=128 bn=128 consumers=2 group=8 splitk=3 stages=4"}) {
    Case c = ld({"nt", 256, 256, 2048, DType::BF16, DType::BF16}, 0, 8);
    c.config = cfg;
    run(c);
  }
}

// A 16-bit D that does not start on a 16-byte boundary: the spec says so
// (d16 = 0), and its default writes D from the consumers' registers.
TEST_F(GpuGemm, DOffSixteenBytesWithoutTmaStores) {
  for (const char *layout : {"nt", "tn"}) {
    Case c{layout, 256, 264, 128};
    c.shiftD = 2;
    run(c);
    c.padD = 8;
    c.hasC = c.cIsD = true;
    c.beta = 1.0f;
    run(c);
  }
}

TEST_F(GpuGemm, UnalignedRowsAreRefusedByName) {
  gemm::Call call;
  call.m = 64;
  call.n = 64;
  call.k = 63; // A's rows 126 bytes apart: no tensor map
  call.a = call.b = call.d = 1 << 20;
  std::string msg;
  refused(call, msg);
  EXPECT_NE(msg.find("A's rows are 126 bytes apart"), std::string::npos) << msg;
}

//===----------------------------------------------------------------------===//
// The sm_80 kernel
//===----------------------------------------------------------------------===//

class GpuGemmSm80 : public GpuGemm {
protected:
  void SetUp() override {
    tilejit::testing::Gpu gpu = tilejit::testing::currentGpuWithoutWgmma();
    if (!gpu.why.empty())
      GTEST_SKIP() << gpu.why;
    target = gpu.target;
    sms = gpu.target.smCount();
  }
};

TEST_F(GpuGemmSm80, EveryLayoutAgainstFloat64) { everyLayout(); }

TEST_F(GpuGemmSm80, RaggedShapes) {
  for (const char *layout : {"nt", "nn", "tn"}) {
    run({layout, 1, 1, 1});      // one element; element copies
    run({layout, 127, 255, 63}); // odd K and N: element copies, element stores
    run({layout, 1, 256, 64});   // one row
    run({layout, 300, 136, 40}); // K below one stage
    run({layout, 65, 130, 1000});
  }
  run({"nt", 8191, 4097, 1000}); // sampled rows
  run({"tn", 64, 8, 8});
}

TEST_F(GpuGemmSm80, MisalignedOperandsFallBackToElementCopies) {
  for (const char *layout : {"nt", "nn", "tn"}) {
    Case c{layout, 200, 192, 128};
    c.shift = 1; // 2 bytes past a 16-byte boundary: no cp.async fits
    run(c);
    c.shift = 4; // 8 bytes past: the same
    run(c);
  }
}

TEST_F(GpuGemmSm80, InputAndOutputTypes) {
  for (const char *layout : {"nt", "nn", "tn"})
    for (DType out : {DType::BF16, DType::F16, DType::F32}) {
      run({layout, 300, 200, 136, DType::BF16, out});
      run({layout, 300, 200, 136, DType::F16, out});
    }
}

TEST_F(GpuGemmSm80, AlphaBetaAndMainGradAccumulation) {
  for (const char *layout : {"nt", "nn", "tn"})
    run({layout, 256, 384, 128, DType::BF16, DType::BF16, true, false, 0.5f, -2.0f});
  // wgrad into an f32 main_grad in place: D = A^T B + D; and ragged.
  run({"tn", 512, 256, 640, DType::BF16, DType::F32, true, true, 1.0f, 1.0f});
  run({"tn", 127, 255, 63, DType::F16, DType::F32, true, true, 1.0f, 1.0f});
  run({"nt", 1, 1, 1, DType::BF16, DType::F32, true, true, 2.0f, 0.5f});
}

TEST_F(GpuGemmSm80, BiasInTheEpilogue) {
  withBias({"bk=64 bm=128 bn=256 group=8 stages=3 vec=8 warps=8",
            "bk=64 bm=64 bn=64 group=1 stages=5 vec=4 warps=4"});
}

TEST_F(GpuGemmSm80, ConfigsOtherThanTheDefault) {
  const char *configs[] = {
      "bk=64 bm=128 bn=128 group=8 stages=3 vec=8 warps=8",
      "bk=64 bm=128 bn=128 group=8 stages=4 vec=8 warps=4",
      "bk=64 bm=256 bn=128 group=8 stages=3 vec=8 warps=8", // 64 x 64 per warp
      "bk=64 bm=64 bn=128 group=4 stages=2 vec=8 warps=4",
      "bk=64 bm=128 bn=256 group=8 stages=3 vec=8 warps=8",
      "bk=64 bm=64 bn=64 group=1 stages=5 vec=4 warps=4",   // 8-byte copies
      "bk=64 bm=128 bn=128 group=8 stages=3 vec=1 warps=8", // element copies only
  };
  for (const char *cfg : configs)
    for (const char *layout : {"nt", "nn", "tn"}) {
      Case c{layout, 520, 448, 200};
      c.config = cfg;
      run(c);
    }
}

// Every operand a leading dimension wide, NaN in the gaps: the sm_80
// kernel's views take row strides (the spec's ld).
TEST_F(GpuGemmSm80, LeadingDimensions) {
  for (const char *layout : {"nt", "nn", "tn"}) {
    Case c{layout, 200, 264, 72, DType::BF16, DType::F32, true, false, 0.5f, -1.0f};
    c.padA = c.padB = 8;
    c.padC = 4;
    c.padD = 12;
    run(c);
    Case d{layout, 127, 255, 63};
    d.padA = layout[0] == 't' ? 1 : 9; // rows of 127 or 63 to 128 and 72
    d.padB = layout[1] == 't' ? 9 : 1; // of 63 or 255 to 72 and 256
    d.padD = 9;
    run(d);
  }
}

} // namespace
