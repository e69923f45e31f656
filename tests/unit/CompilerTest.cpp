//===- CompilerTest.cpp - the pipeline to CUDA C++ and NVRTC, no GPU needed --===//
#include <gtest/gtest.h>

#include "compiler/Compiler.h"
#include "compiler/Nvptx.h"
#include "compiler/Nvrtc.h"
#include "compiler/Ptxas.h"
#include "compiler/passes/Passes.h"
#include "compiler/templates/Template.h"
#include "dialects/Tile/TileDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "ops/rmsnorm/RmsNormDecl.h"
#include "runtime/CudaDriver.h"
#include "tests/support/TmaCopyKernel.h"

using namespace tilejit;

namespace {

KernelSpec spec(bool backward, int64_t cols, DType t = DType::BF16, bool zcg = false) {
  rmsnorm::Params s;
  s.backward = backward;
  s.cols = cols;
  s.dtype = s.wdtype = t;
  s.zeroCenteredGamma = zcg;
  s.align = alignmentOf({}, cols * dtypeBytes(t));
  return s;
}

CompileOptions cudaSource() {
  CompileOptions o;
  o.stopAt = Stage::Cuda;
  return o;
}

CompileOptions withBackend(Backend b) {
  CompileOptions o;
  o.backend = b;
  return o;
}

TEST(Compiler, EmitsTileIrAfterEachPass) {
  KernelSpec s = spec(false, 4096);
  CompileOptions o;
  o.stopAt = Stage::Mlir;
  auto ir = compileKernel(s, {}, o);
  ASSERT_TRUE(bool(ir)) << llvm::toString(ir.takeError());
  EXPECT_NE(ir->mlir.find("tile.kernel @rmsnorm_fwd_bf16_bf16_n4096"), std::string::npos);
  EXPECT_NE(ir->mlir.find("reduce sum"), std::string::npos);
  EXPECT_EQ(ir->mlir.find("scratch_bytes"), std::string::npos);
  auto has = [](const std::string &ir, const char *what) {
    return ir.find(what) != std::string::npos;
  };
  for (Backend b : {Backend::Nvptx, Backend::Cuda}) {
    o.backend = b;
    for (const std::string &pass : pipelinePasses(b)) {
      SCOPED_TRACE(std::string(backendName(b)) + " " + pass);
      o.afterPass = pass;
      auto after = compileKernel(s, {}, o);
      ASSERT_TRUE(bool(after)) << pass << ": " << llvm::toString(after.takeError());
      const std::string &m = after->mlir;
      if (pass == "tile-check-target") {
        // Checked, not yet folded: x widened and y narrowed by arith ops.
        EXPECT_TRUE(has(m, "arith.extf") && has(m, "arith.truncf")) << m;
        EXPECT_FALSE(has(m, "scratch_bytes")) << m;
      }
      if (pass == "canonicalize") {
        // The conversions folded into the accesses.
        EXPECT_TRUE(has(m, "memref<?x4096xbf16> -> tensor<")) << m;
        EXPECT_FALSE(has(m, "arith.extf") || has(m, "arith.truncf")) << m;
        EXPECT_TRUE(has(m, "reduce sum")) << m;
      }
      if (pass == "tile-allocate-shared") { // a row of 256 lanes: 8 warps' results
        EXPECT_TRUE(has(m, "scratch_bytes = 32 : i64")) << m;
      }
      if (pass == "convert-scf-to-cf") {
        EXPECT_FALSE(has(m, "scf.")) << m;
      }
      if (pass == "convert-tile-to-llvm") {
        // No tile op is left; the kernel is an NVVM kernel of LLVM ops.
        EXPECT_TRUE(has(m, "llvm.func @rmsnorm_fwd_bf16_bf16_n4096") && has(m, "nvvm.kernel")) << m;
        EXPECT_TRUE(has(m, "nvvm.shfl.sync  bfly") && has(m, "ld.global.v4.b32")) << m;
        EXPECT_TRUE(has(m, "llvm.nvvm.rsqrt.approx.f")) << m;
        EXPECT_FALSE(has(m, "tile.") || has(m, "arith.")) << m;
      }
      if (pass == "reconcile-unrealized-casts") {
        EXPECT_FALSE(has(m, "unrealized_conversion_cast")) << m;
      }
      if (pass == "tile-lower-to-emitc") {
        // Every tile op is a call into the device library; none is left.
        EXPECT_TRUE(has(m, "emitc.func")) << m;
        for (const char *call : {"\"tj::load_tile\"", "\"tj::reduce_row\"", "\"tj::store_tile\"",
                                 "\"tj::broadcast_row\"", "\"tj::rsqrt\""})
          EXPECT_TRUE(has(m, call)) << call;
        EXPECT_FALSE(has(m, "tile.kernel") || has(m, "reduce sum")) << m;
      }
    }
  }
  o.backend = Backend::Nvptx;
  o.afterPass = "tile-lower-to-emitc"; // the C++ back end's pass, not this one's
  auto other = compileKernel(s, {}, o);
  ASSERT_FALSE(bool(other));
  EXPECT_NE(llvm::toString(other.takeError()).find("the nvptx pipeline"), std::string::npos);
  o.afterPass = "no-such-pass";
  auto bad = compileKernel(s, {}, o);
  ASSERT_FALSE(bool(bad));
  EXPECT_NE(llvm::toString(bad.takeError()).find("unknown pass 'no-such-pass'"), std::string::npos);
}

// --emit llvm and --emit ptx stop after LLVM IR and after PTX: no ptxas.
TEST(Compiler, StopsAtLlvmIrAndPtx) {
  KernelSpec s = spec(true, 4096);
  CompileOptions o;
  o.backend = Backend::Nvptx;
  o.stopAt = Stage::Llvm;
  auto ll = compileKernel(s, {}, o);
  ASSERT_TRUE(bool(ll)) << llvm::toString(ll.takeError());
  EXPECT_NE(ll->llvm.find("define ptx_kernel void @rmsnorm_bwd_bf16_bf16_n4096("),
            std::string::npos);
  EXPECT_NE(ll->llvm.find("define ptx_kernel void @rmsnorm_bwd_bf16_bf16_n4096_dw("),
            std::string::npos);
  EXPECT_TRUE(ll->cubin.empty());
  o.stopAt = Stage::Ptx;
  auto ptx = compileKernel(s, {}, o);
  ASSERT_TRUE(bool(ptx)) << llvm::toString(ptx.takeError());
  EXPECT_NE(ptx->ptx.find(".entry rmsnorm_bwd_bf16_bf16_n4096_dw"), std::string::npos);
  EXPECT_NE(ptx->ptx.find(".target sm_90a"), std::string::npos);
  EXPECT_TRUE(ptx->cubin.empty());
  EXPECT_TRUE(ptx->llvm.empty());
}

// Canonicalization folds the conversions of the forward into its accesses: x
// and the weight arrive as f32, y leaves as bf16 from f32, and no fragment
// is converted on its own.
TEST(Compiler, ForwardConvertsInItsAccesses) {
  auto k = compileKernel(spec(false, 4096), {}, cudaSource());
  ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
  EXPECT_EQ(k->cuda.find("tj::convert<"), std::string::npos) << k->cuda;
  // The template arguments of the first call of `callee`: memory type first,
  // the tile's last.
  auto args = [&](const std::string &callee) {
    size_t at = k->cuda.find(callee + "<");
    if (at == std::string::npos)
      return std::string("(no call)");
    at += callee.size() + 1;
    return k->cuda.substr(at, k->cuda.find(">(", at) - at);
  };
  for (const char *callee : {"tj::load_tile", "tj::load_cols", "tj::store_tile"}) {
    std::string a = args(callee);
    EXPECT_EQ(a.rfind("tj::bf16, ", 0), 0u) << callee << "<" << a << ">";
    EXPECT_EQ(a.substr(a.size() - 7), ", float") << callee << "<" << a << ">";
  }
}

TEST(Compiler, CudaUsesTheDeviceLibrary) {
  auto k = compileKernel(spec(true, 1000), {}, cudaSource());
  ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
  EXPECT_NE(k->cuda.find("#include \"memory.cuh\""), std::string::npos);
  EXPECT_NE(k->cuda.find("extern \"C\" __global__ __launch_bounds__("), std::string::npos);
  EXPECT_NE(k->cuda.find("tj::reduce_row<"), std::string::npos);
  EXPECT_NE(k->cuda.find("tj::reduce_col<"), std::string::npos);
  ASSERT_EQ(k->entries.size(), 2u);
  EXPECT_EQ(k->entries[0].params.size(), 6u);
  EXPECT_GT(k->workspaceBytes, 0);
}

// A forward row held in up to 32 elements a thread asks for 1024 threads a
// multiprocessor (64 registers): at 15000 columns ptxas otherwise took 70 and
// one block of 512 fit instead of two.
TEST(Compiler, HeldForwardRowsKeepTwoBlocksOf512) {
  for (Backend b : {Backend::Nvptx, Backend::Cuda}) {
    SCOPED_TRACE(backendName(b));
    auto k = compileKernel(spec(false, 15000), {}, withBackend(b));
    ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
    ASSERT_EQ(k->config.get("threads"), 512);
    ASSERT_EQ(k->backend, backendName(b));
    if (b == Backend::Cuda) {
      EXPECT_NE(k->cuda.find("__launch_bounds__(512, 2)"), std::string::npos);
    }
    EXPECT_NE(k->ptx.find(".maxntid 512, 1, 1"), std::string::npos);
    EXPECT_NE(k->ptx.find(".minnctapersm 2"), std::string::npos);
    EXPECT_LE(k->entries[0].registers, 64);
  }
  // Rows in segments of 1024 threads need no such bound.
  auto seg = compileKernel(spec(false, 100000), {}, cudaSource());
  ASSERT_TRUE(bool(seg)) << llvm::toString(seg.takeError());
  EXPECT_NE(seg->cuda.find("__launch_bounds__(1024)"), std::string::npos);
}

// Both back ends build for sm_90a without a GPU: every default kernel must
// build to a cubin, with no spills for the hidden sizes that matter.
TEST(Compiler, BothBackendsBuildCubinsForManyShapes) {
  struct S {
    bool backward;
    int64_t cols;
    DType t;
    bool zcg;
  };
  std::vector<S> shapes = {{false, 1, DType::BF16, false},
                           {false, 4097, DType::BF16, true},
                           {false, 8192, DType::F16, false},
                           {false, 4096, DType::F32, false},
                           {true, 7, DType::BF16, true},
                           {true, 4096, DType::BF16, false},
                           {true, 8192, DType::BF16, false},
                           // In segments:
                           {false, 100000, DType::BF16, false},
                           {false, 65537, DType::F32, true},
                           {true, 65536, DType::BF16, false},
                           {true, 40001, DType::F16, true}};
  for (Backend b : {Backend::Nvptx, Backend::Cuda})
    for (const S &x : shapes) {
      KernelSpec s = spec(x.backward, x.cols, x.t, x.zcg);
      SCOPED_TRACE(std::string(backendName(b)) + " " + s.canonical());
      auto k = compileKernel(s, {}, withBackend(b));
      ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
      EXPECT_EQ(k->backend, backendName(b));
      EXPECT_GT(k->cubin.size(), 1000u);
      EXPECT_NE(k->ptx.find(".entry"), std::string::npos);
      for (const EntryInfo &e : k->entries) {
        EXPECT_GT(e.registers, 0) << e.name << ": ptxas report not parsed\n" << k->log;
        if (x.cols <= 8192 || x.cols > 32768) {
          EXPECT_EQ(e.spillBytes, 0) << e.name << " spills";
        }
      }
    }
}

// The key names the back end: a binary of one is never handed out for the
// other.
TEST(Compiler, KeysDifferByBackend) {
  KernelSpec s = spec(false, 4096);
  EXPECT_NE(kernelKey(s, {}, Backend::Nvptx), kernelKey(s, {}, Backend::Cuda));
  EXPECT_EQ(kernelKey(s, {}), kernelKey(s, {}, Backend::Nvptx));
  EXPECT_EQ(parseBackend("nvptx"), Backend::Nvptx);
  EXPECT_FALSE(parseBackend("ptx"));
  EXPECT_EQ(parseBackend("cuda"), Backend::Cuda);
  EXPECT_FALSE(parseBackend("llvm"));
}

// A row split over a cluster compiles to a kernel with cluster dimensions,
// and its launch information says so (the runtime multiplies the grid).
TEST(Compiler, ClusterKernelsBuildAndCarryTheirClusterSize) {
  KernelSpec s = spec(true, 16384);
  TileConfig c = *TileConfig::parse("cluster=2 prefetch=1 programs=66 rows=1 stream=0 "
                                    "threads=512 vec=8");
  auto k = compileKernel(s, c);
  ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
  EXPECT_NE(k->ptx.find(".reqnctapercluster 2"), std::string::npos) << k->ptx.substr(0, 2000);
  auto viaLlvm = compileKernel(s, c, withBackend(Backend::Nvptx));
  ASSERT_TRUE(bool(viaLlvm)) << llvm::toString(viaLlvm.takeError());
  EXPECT_NE(viaLlvm->ptx.find(".reqnctapercluster 2, 1, 1"), std::string::npos)
      << viaLlvm->ptx.substr(0, 2000);
  EXPECT_NE(viaLlvm->ptx.find("st.async.shared::cluster"), std::string::npos);
  EXPECT_NE(viaLlvm->ptx.find("mapa.shared::cluster"), std::string::npos);
  auto src = compileKernel(s, c, cudaSource());
  ASSERT_TRUE(bool(src)) << llvm::toString(src.takeError());
  EXPECT_NE(src->cuda.find("__cluster_dims__(2, 1, 1)"), std::string::npos);
  ASSERT_EQ(k->entries.size(), 2u);
  EXPECT_EQ(k->entries[0].clusterBlocks(), 2);
  EXPECT_EQ(k->entries[1].clusterBlocks(), 1);
  auto back = entriesFromJson(entriesToJson(k->entries));
  ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError());
  EXPECT_EQ((*back)[0].clusterBlocks(), 2);
  // Any size up to 8: 40960 columns go to clusters of 5 by default, and the
  // launch information survives the store's JSON.
  auto five = compileKernel(spec(true, 40960), {});
  ASSERT_TRUE(bool(five)) << llvm::toString(five.takeError());
  EXPECT_NE(five->ptx.find(".reqnctapercluster 5, 1, 1"), std::string::npos);
  auto fiveBack = entriesFromJson(entriesToJson(five->entries));
  ASSERT_TRUE(bool(fiveBack)) << llvm::toString(fiveBack.takeError());
  EXPECT_EQ((*fiveBack)[0].clusterBlocks(), 5);
}

/// Compiles hand-written CUDA that uses the device library through NVRTC and
/// expects each of `needles` in the PTX.
void expectPtxHas(const char *src, const char *arch, std::initializer_list<const char *> needles) {
  auto out = compileWithNvrtc(src, "library_use", arch);
  ASSERT_TRUE(bool(out)) << llvm::toString(out.takeError());
  for (const char *needle : needles)
    EXPECT_NE(out->ptx.find(needle), std::string::npos) << needle;
}

// The lowering names the cluster queries and cluster_sync in every kernel that
// runs in clusters, with or without reductions: the prelude alone (which
// every kernel includes) must provide them.
TEST(Compiler, ClusterQueriesNeedOnlyThePrelude) {
  const char *src = R"(#include "prelude.cuh"
extern "C" __global__ __launch_bounds__(64) __cluster_dims__(2, 1, 1) void k(float *out) {
  out[tj::cluster_id_x() * 2 + tj::cluster_rank()] = float(tj::num_clusters_x());
  tj::cluster_sync();
}
)";
  expectPtxHas(src, "sm_90a", {"%cluster_ctarank", "barrier.cluster.arrive"});
}

// Every access, converting between f32 tiles and 16-bit memory or not, in
// each access width (16, 4 and 2 bytes per run, the last element by element),
// for each layout, instantiates and compiles, and so do the conversions of
// 16-bit fragments. (The GPU tests check the values.)
TEST(Compiler, EveryAccessAndConversionCompiles) {
  const char *src = R"(#include "memory.cuh"
template <class T, int VEC, int COLS>
__device__ void roundTrip(const tj::View<T, 2> &x, const tj::View<T, 1> &w, tj::View<T, 1> &r) {
  auto t = tj::load_tile<T, VEC, 2, 32, 2, COLS, 0, tj::kStream, float>(x, tj::idx(0, 0), 0.f);
  auto c = tj::load_cols<T, VEC, 2, 32, 2, COLS, 0, tj::kCached, float>(w, tj::idx(0), 1.f);
  auto q = tj::load_rows<T, 2, 32, float>(r, tj::idx(0), -1.f);
  tj::store_tile<T, VEC, 2, 32, 2, COLS, 0, tj::kStream, float>(tj::mul(t, c), x, tj::idx(0, 0));
  tj::store_cols<T, VEC, 2, 32, 2, COLS, 0, tj::kCached, float>(c, w, tj::idx(0));
  tj::store_rows<T, 2, 32, float>(q, r, tj::idx(0));
  // The tile in the memory's own type, converted apart.
  auto n = tj::load_tile<T, VEC, 2, 32, 2, COLS, 0, tj::kCached>(x, tj::idx(0, 0), 0.f);
  auto m = tj::load_rows<T, 2, 32>(r, tj::idx(0), 0.f);
  tj::store_tile<T, VEC, 2, 32, 2, COLS, 0, tj::kCached>(
      tj::convert<T>(tj::mul(tj::convert<float>(n), c)), x, tj::idx(0, 0));
  tj::store_rows<T, 2, 32>(m, r, tj::idx(0));
}
extern "C" __global__ void k(tj::View<tj::bf16, 2> xb, tj::View<tj::bf16, 1> wb,
                             tj::View<tj::bf16, 1> rb, tj::View<tj::f16, 2> xh,
                             tj::View<tj::f16, 1> wh, tj::View<tj::f16, 1> rh,
                             tj::View<float, 2> xf, tj::View<float, 1> wf, tj::View<float, 1> rf) {
  roundTrip<tj::bf16, 8, 1024>(xb, wb, rb);
  roundTrip<tj::bf16, 2, 257>(xb, wb, rb);
  roundTrip<tj::bf16, 1, 33>(xb, wb, rb);
  roundTrip<tj::f16, 8, 1000>(xh, wh, rh);
  roundTrip<tj::f16, 2, 130>(xh, wh, rh);
  roundTrip<float, 4, 300>(xf, wf, rf);
}
)";
  expectPtxHas(src, "sm_80", {"cvt.rn.bf16x2.f32", "cvt.rn.f16x2.f32"});
}

TEST(Compiler, NvrtcErrorCarriesTheLog) {
  // CUDA C++ that NVRTC rejects: the error names the program and carries
  // NVRTC's log, with the line and the undefined name.
  auto nv = compileWithNvrtc("extern \"C\" __global__ void k(float *p) {\n"
                             "  p[0] = tj_undefined_name;\n"
                             "}\n",
                             "broken_kernel", "sm_90a");
  ASSERT_FALSE(bool(nv));
  std::string log = llvm::toString(nv.takeError());
  EXPECT_NE(log.find("NVRTC compilation failed for 'broken_kernel'"), std::string::npos) << log;
  EXPECT_NE(log.find("(2): error: identifier \"tj_undefined_name\" is undefined"),
            std::string::npos)
      << log;
  // A bad config is refused before any IR is built, naming the parameter.
  TileConfig bad;
  bad.set("vec", 8).set("threads", 100).set("rows", 1).set("stream", 0).set("programs", 0);
  auto b = compileKernel(spec(false, 64), bad);
  ASSERT_FALSE(bool(b));
  EXPECT_NE(llvm::toString(b.takeError()).find("threads must be a multiple of 32"),
            std::string::npos);
}

// Every compile reports each entry's registers and spills, the second of
// the same kernel too (NVRTC's own cache, where a CUDA driver is present,
// would answer it without ptxas's report).
TEST(Compiler, EveryCompileReportsResources) {
  KernelSpec s = spec(true, 1000);
  for (int i = 0; i < 2; ++i) {
    auto k = compileKernel(s, {});
    ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
    ASSERT_EQ(k->entries.size(), 2u);
    for (auto &e : k->entries)
      EXPECT_GT(e.registers, 0) << "compile " << i + 1 << ", " << e.name;
  }
}

// A thread compiles in one MLIR context for a number of compiles, then in a
// fresh one: a kernel's PTX must not depend on what was compiled before it
// or on which context it was compiled in. More than 64 compiles cross at
// least one change of context.
TEST(Compiler, ReusedContextsGiveTheSamePtx) {
  CompileOptions ptx;
  ptx.stopAt = Stage::Ptx;
  KernelSpec fwd = spec(false, 4096), bwd = spec(true, 4096);
  auto first = compileKernel(fwd, {}, ptx);
  ASSERT_TRUE(bool(first)) << llvm::toString(first.takeError());
  for (int i = 0; i < 70; ++i) {
    KernelSpec other = i % 3 == 0 ? bwd : spec(i % 2 == 0, 1024 + 64 * i, DType::F16);
    CompileOptions o;
    o.stopAt = i % 5 == 0 ? Stage::Ptx : Stage::Mlir;
    auto k = compileKernel(other, {}, o);
    ASSERT_TRUE(bool(k)) << "compile " << i << ": " << llvm::toString(k.takeError());
    if (i % 10 == 0) {
      auto again = compileKernel(fwd, {}, ptx);
      ASSERT_TRUE(bool(again)) << llvm::toString(again.takeError());
      EXPECT_EQ(again->ptx, first->ptx) << "after " << i + 1 << " other compiles";
    }
  }
  // A compile that fails in the context (a module that does not parse)
  // leaves nothing behind.
  auto bad = compileLlvmDialectModule("module { llvm.func @k( }", Target(), {});
  ASSERT_FALSE(bool(bad));
  llvm::consumeError(bad.takeError());
  auto last = compileKernel(fwd, {}, ptx);
  ASSERT_TRUE(bool(last)) << llvm::toString(last.takeError());
  EXPECT_EQ(last->ptx, first->ptx);
}

// Each stage of a compile is timed, in the order it ran, and the stages add
// up to the compile's two figures.
TEST(Compiler, ReportsTheTimeOfEachStage) {
  auto k = compileKernel(spec(true, 4096), {});
  ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
  std::vector<std::string> names;
  double sum = 0;
  for (const StageTime &s : k->stages) {
    names.push_back(s.name);
    EXPECT_GE(s.ms, 0) << s.name;
    sum += s.ms;
  }
  std::vector<std::string> want = {"setup", "build"};
  for (const std::string &p : pipelinePasses(Backend::Nvptx))
    want.push_back(p);
  for (const char *s : {"translate", "llvm-opt", "codegen", "ptxas"})
    want.push_back(s);
  EXPECT_EQ(names, want);
  // The sum is the whole by construction (each stage a lap of one clock);
  // what can go wrong is a stage timed as nothing: code generation and
  // ptxas take milliseconds for any kernel.
  EXPECT_NEAR(sum, k->mlirMs + k->binaryMs, 0.02 * (k->mlirMs + k->binaryMs) + 0.2);
  for (const StageTime &s : k->stages) {
    if (s.name == "codegen" || s.name == "ptxas" || s.name == "build") {
      EXPECT_GT(s.ms, s.name == "build" ? 0.0 : 0.5) << s.name;
    }
  }

  auto cuda = compileKernel(spec(false, 4096), {}, withBackend(Backend::Cuda));
  ASSERT_TRUE(bool(cuda)) << llvm::toString(cuda.takeError());
  ASSERT_FALSE(cuda->stages.empty());
  EXPECT_EQ(cuda->stages[cuda->stages.size() - 2].name, "emit-cpp");
  EXPECT_EQ(cuda->stages.back().name, "nvrtc");
}

TEST(CudaDriver, MissingDriverIsACleanError) {
  auto drv = CudaDriver::get();
  if (drv)
    GTEST_SKIP() << "a CUDA driver is present on this machine";
  std::string msg = llvm::toString(drv.takeError());
  EXPECT_TRUE(msg.find("no CUDA driver") != std::string::npos ||
              msg.find("no CUDA device") != std::string::npos)
      << msg;
  auto ctx = useDevice(0);
  ASSERT_FALSE(bool(ctx));
  llvm::consumeError(ctx.takeError());
}

} // namespace

namespace {
/// A context with every dialect the pipeline uses, loaded.
struct TileContext {
  mlir::DialectRegistry registry;
  mlir::MLIRContext ctx;
  TileContext() : ctx((registerTileJitDialects(registry), registry)) {
    ctx.loadAllAvailableDialects();
  }
};

/// Runs the NVPTX back end's pipeline (tile IR to the LLVM dialect).
mlir::LogicalResult lowerToLlvm(mlir::ModuleOp m, const std::string &arch) {
  mlir::PassManager pm(m.getContext());
  for (const std::string &name : pipelinePasses(Backend::Nvptx))
    if (!addPipelinePass(pm, name, arch))
      return mlir::failure();
  return pm.run(m);
}

// A kernel of one warp that applies `op` to 32 floats in place.
std::string elementwiseKernel(const char *op) {
  const char *tile =
      "tensor<32xf32, #tile.slice<dim = 0, parent = #tile.blocked<vec = 1, rowThreads = 1, "
      "colThreads = 32>>>";
  return std::string("module {\n  tile.kernel @k(%a: memref<32xf32>) attributes {block_threads "
                     "= 32 : i64, grid = affine_map<() -> (1)>, grid_operands = array<i64>, "
                     "scratch_bytes = 0 : i64} {\n    %c0 = arith.constant 0 : index\n"
                     "    %0 = tile.load %a[%c0] : memref<32xf32> -> ") +
         tile + "\n    %1 = " + op + " %0 : " + tile + "\n    tile.store %1, %a[%c0] : " + tile +
         ", memref<32xf32>\n    tile.return\n  }\n}\n";
}
} // namespace

// The NVPTX back end lowers what the PTX writer could not (math.exp, as
// ex2.approx of x * log2(e)) and what it lowers ptxas accepts for sm_80 too.
TEST(Compiler, NvptxBackendLowersMathForEveryArch) {
  TileContext tc;
  mlir::MLIRContext &ctx = tc.ctx;
  struct Case {
    const char *op, *arch, *ptx;
  };
  for (Case c :
       {Case{"math.exp", "sm_90a", "ex2.approx.ftz.f32"}, Case{"math.sqrt", "sm_80", "sqrt.rn.f32"},
        Case{"math.rsqrt", "sm_80", "rsqrt.approx.f32"}}) {
    SCOPED_TRACE(std::string(c.op) + " " + c.arch);
    auto m = mlir::parseSourceString<mlir::ModuleOp>(elementwiseKernel(c.op), &ctx);
    ASSERT_TRUE(bool(m));
    ASSERT_TRUE(mlir::succeeded(lowerToLlvm(*m, c.arch)));
    auto ptx = translateToPtx(*m, c.arch);
    ASSERT_TRUE(bool(ptx)) << llvm::toString(ptx.takeError());
    EXPECT_NE(ptx->find(c.ptx), std::string::npos) << *ptx;
    EXPECT_NE(ptx->find(std::string(".target ") + c.arch), std::string::npos);
    auto bin = assembleWithPtxas(*ptx, "k", c.arch);
    ASSERT_TRUE(bool(bin)) << llvm::toString(bin.takeError()) << "\n" << *ptx;
    EXPECT_FALSE(bin->cubin.empty());
  }
}

// An operation no pattern lowers fails the conversion, and the error names
// it: the compiler never switches back ends behind the caller's back.
TEST(Compiler, NvptxBackendNamesWhatItDoesNotLower) {
  TileContext tc;
  mlir::MLIRContext &ctx = tc.ctx;
  std::string diag;
  mlir::ScopedDiagnosticHandler handler(&ctx, [&](mlir::Diagnostic &d) {
    diag += d.str() + "\n";
    return mlir::success();
  });
  auto m = mlir::parseSourceString<mlir::ModuleOp>(elementwiseKernel("math.tanh"), &ctx);
  ASSERT_TRUE(bool(m));
  EXPECT_TRUE(mlir::failed(lowerToLlvm(*m, "sm_90a")));
  EXPECT_NE(diag.find("math.tanh"), std::string::npos) << diag;
}

// The layout interface is the one description of which thread holds which
// element: thread t of #tile.blocked<vec = 4, rowThreads = 2, colThreads =
// 8> holds row t / 8 and, in run k, columns (k * 8 + t % 8) * 4 + [0, 4); a
// dim = 0 slice is stored by row 0 of threads, a dim = 1 slice by lane 0.
TEST(Compiler, LayoutInterfacePlacesEveryElement) {
  TileContext tc;
  mlir::MLIRContext &ctx = tc.ctx;
  auto blocked = tile::BlockedLayoutAttr::get(&ctx, 4, 2, 8);
  auto layout = mlir::cast<tile::LayoutAttrInterface>(blocked);
  std::vector<int64_t> shape = {2, 100}; // 100 columns: 4 runs of 4 per lane
  EXPECT_EQ(layout.getElemsPerThread(shape), 16);
  EXPECT_EQ(layout.getNumThreads(), 16);
  EXPECT_EQ(layout.getContiguity(), 4);
  for (int64_t t = 0; t < 16; ++t) {
    auto base = layout.getThreadBase().compose(llvm::ArrayRef<int64_t>{t});
    ASSERT_EQ(base.size(), 2u);
    EXPECT_EQ(base[0], t / 8);
    EXPECT_EQ(base[1], (t % 8) * 4);
  }
  for (int64_t i = 0; i < 16; ++i) {
    auto off = layout.getElemOffset(shape, i);
    ASSERT_EQ(off.size(), 2u);
    EXPECT_EQ(off[0], 0);
    EXPECT_EQ(off[1], (i / 4) * 32 + i % 4) << i;
  }
  EXPECT_EQ(layout.getOwnerMap().getNumResults(), 0u); // every element has one holder

  auto cols = mlir::cast<tile::LayoutAttrInterface>(tile::SliceLayoutAttr::get(&ctx, 0, blocked));
  auto rows = mlir::cast<tile::LayoutAttrInterface>(tile::SliceLayoutAttr::get(&ctx, 1, blocked));
  EXPECT_EQ(cols.getElemsPerThread({100}), 16);
  EXPECT_EQ(rows.getElemsPerThread({2}), 1);
  EXPECT_EQ(rows.getContiguity(), 1);
  for (int64_t t = 0; t < 16; ++t) {
    EXPECT_EQ(cols.getThreadBase().compose(llvm::ArrayRef<int64_t>{t})[0], (t % 8) * 4);
    EXPECT_EQ(rows.getThreadBase().compose(llvm::ArrayRef<int64_t>{t})[0], t / 8);
    // Row 0 of threads owns the columns; lane 0 of each row owns its value.
    EXPECT_EQ(cols.getOwnerMap().compose(llvm::ArrayRef<int64_t>{t})[0] == 0, t < 8) << t;
    EXPECT_EQ(rows.getOwnerMap().compose(llvm::ArrayRef<int64_t>{t})[0] == 0, t % 8 == 0) << t;
  }
}

namespace {

// A kernel written in the LLVM dialect: its launch information comes from
// its signature (a 128-byte by-value tensor map, a global pointer, i32
// scalars), its nvvm.maxntid, and the launch shape given for it.
TEST(Compiler, LlvmDialectKernelsGetTheirLaunchFromTheSignature) {
  auto target = *Target::parse("sm_90a");
  auto k = compileLlvmDialectModule(tilejit::testing::tmaCopyKernel(), target,
                                    {tilejit::testing::tmaCopyLaunch()});
  ASSERT_TRUE(bool(k)) << llvm::toString(k.takeError());
  EXPECT_GT(k->cubin.size(), 1000u);
  ASSERT_EQ(k->entries.size(), 1u);
  const EntryInfo &e = k->entries[0];
  EXPECT_EQ(e.name, "tma_box_copy");
  EXPECT_EQ(e.blockThreads, 128);
  EXPECT_EQ(e.dynamicSmemBytes, tilejit::testing::kTmaDynamicSmemBytes);
  ASSERT_EQ(e.params.size(), 5u);
  EXPECT_EQ(e.params[0].kind, ParamInfo::TensorMap);
  EXPECT_EQ(e.params[1].kind, ParamInfo::Ptr);
  EXPECT_EQ(e.params[2].kind, ParamInfo::I32);
  EXPECT_EQ(e.spillBytes, 0);
  EXPECT_GT(e.registers, 0) << "ptxas's report was read";
  EXPECT_EQ(k->key.size(), 64u);
  // The launch evaluates to a 3-D grid: 300 columns, 600 rows, depth 3.
  int64_t cols = 300, rows = 600, depth = 3;
  EXPECT_EQ(e.grid[0].evaluate(&cols, 1), 5);
  EXPECT_EQ(e.grid[1].evaluate(&rows, 1), 3);
  EXPECT_EQ(e.grid[2].evaluate(&depth, 1), 3);

  // What cannot be launched is named before anything is compiled.
  auto noShape = compileLlvmDialectModule(tilejit::testing::tmaCopyKernel(), target, {});
  EXPECT_NE(llvm::toString(noShape.takeError()).find("no launch shape"), std::string::npos);
  LaunchShape big = tilejit::testing::tmaCopyLaunch();
  big.dynamicSmemBytes = 300 * 1024;
  auto tooBig = compileLlvmDialectModule(tilejit::testing::tmaCopyKernel(), target, {big});
  EXPECT_NE(llvm::toString(tooBig.takeError()).find("sm_90a allows 232448"), std::string::npos);
  const char *badArg = R"(llvm.func @k(%a: vector<4xf32>) attributes {nvvm.kernel,
      nvvm.maxntid = array<i32: 32, 1, 1>} { llvm.return })";
  LaunchShape one{"k", {GridRule::constant(1), {}, {}}, 0};
  auto bad = compileLlvmDialectModule(badArg, target, {one});
  EXPECT_NE(llvm::toString(bad.takeError()).find("kernel 'k', argument 0: type vector<4xf32>"),
            std::string::npos);
  const char *noThreads = R"(llvm.func @k() attributes {nvvm.kernel} { llvm.return })";
  auto threads = compileLlvmDialectModule(noThreads, target, {one});
  EXPECT_NE(llvm::toString(threads.takeError()).find("no nvvm.maxntid"), std::string::npos);
  auto parse = compileLlvmDialectModule("llvm.func @", target, {one});
  EXPECT_NE(llvm::toString(parse.takeError()).find("does not parse"), std::string::npos);
}

} // namespace
