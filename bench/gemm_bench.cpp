//===- gemm_bench.cpp - GEMM speed on the GPU, shape by shape ---------------===//
//
// For each shape of bench/gemm_shapes.json (Llama linear layers as forward,
// dgrad and wgrad, and two cubes): compiles the default config, fills A and
// B with random bf16 (a 64M-element random pool repeated: never zeros),
// checks 64 sampled elements of D against a float64 dot product, then times
// the kernel with events (median of 20 samples of 5 back-to-back launches)
// and writes one JSON record per shape.
// With --db, each shape runs the winner `tilejit tune` recorded there (the
// default where none is, or where the template refuses it).
//   gemm_bench [--shapes FILE] [--only SUBSTRING] [--config "k=v ..."] [--db FILE]
//              [--arch sm_80] [--bias] [--workspace] --out FILE.json
// --bias adds a bias vector in the epilogue (F.linear's). --workspace gives a
// kernel that splits K a workspace of the bench's own (else each launch
// takes one from tilejit's stream-ordered pool, as the C interface does).
//
//===----------------------------------------------------------------------===//
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/BenchUtil.h"
#include "bench/StoredWinners.h"
#include "compiler/Compiler.h"
#include "compiler/templates/Template.h"
#include "ops/gemm/GemmLaunch.h"
#include "runtime/CudaDriver.h"
#include "runtime/DeviceBuffer.h"

using namespace tilejit;
using namespace tilejit::bench;

const char *const tilejit::bench::kProgram = "gemm_bench";

namespace {

struct ShapeCase {
  std::string name, layout;
  int64_t m, n, k;
};

std::vector<ShapeCase> readShapes(const std::string &path) {
  std::ifstream in(path);
  if (!in)
    die("cannot read " + path);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded())
    die(path + " is not JSON");
  std::vector<ShapeCase> out;
  int64_t t = j.value("tokens", 8192);
  for (auto &l : j["linears"]) {
    std::string nm = l["model"].get<std::string>() + " " + l["name"].get<std::string>();
    int64_t in_ = l["in"], out_ = l["out"];
    out.push_back({nm + " fwd", "nt", t, out_, in_});
    out.push_back({nm + " dgrad", "nn", t, in_, out_});
    out.push_back({nm + " wgrad", "tn", out_, in_, t});
  }
  for (auto &c : j["cubes"]) {
    int64_t s = c;
    out.push_back({std::to_string(s) + "^3", "nt", s, s, s});
  }
  // Shapes given one by one: {"name", "layout", "m", "n", "k"}.
  if (j.contains("shapes"))
    for (auto &x : j["shapes"])
      out.push_back(
          {x["name"].get<std::string>(), x["layout"].get<std::string>(), x["m"], x["n"], x["k"]});
  return out;
}

uint16_t toBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7FFF + ((u >> 16) & 1);
  return uint16_t(u >> 16);
}
float fromBf16(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

} // namespace

int main(int argc, char **argv) {
  std::string shapesPath = "bench/gemm_shapes.json", outPath, only, configText, db, arch;
  bool withBias = false, ownWorkspace = false;
  int64_t ldPad = 0;       // D's rows this many elements wider (a leading dimension)
  int64_t maxPrograms = 0; // the persistent grid's cap in blocks (0: every multiprocessor)
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc)
        die("missing value after " + a);
      return argv[++i];
    };
    if (a == "--shapes")
      shapesPath = next();
    else if (a == "--out")
      outPath = next();
    else if (a == "--only")
      only = next();
    else if (a == "--config")
      configText = next();
    else if (a == "--db")
      db = next();
    else if (a == "--arch")
      arch = next();
    else if (a == "--workspace")
      ownWorkspace = true;
    else if (a == "--bias")
      withBias = true;
    else if (a == "--ld-pad")
      ldPad = std::stoll(next());
    else if (a == "--max-programs")
      maxPrograms = std::stoll(next());
    else
      die("unknown argument '" + a +
          "' (--shapes FILE --out FILE --only SUBSTRING --config TEXT --db FILE --arch ARCH "
          "--bias --workspace --ld-pad ELEMENTS --max-programs BLOCKS)");
  }
  if (outPath.empty())
    die("--out FILE is required");
  auto ctx = must(useDevice(0));
  (void)ctx;
  auto info = must(queryDevice(0));
  Target target = must(info.target());
  // --arch runs the kernel of another target: sm_90 on an H200 is the path of
  // every target without wgmma (cp.async, ldmatrix, mma.sync), assembled
  // for it. Machine code loads only on its own major version: sm_80's
  // cubin does not load on an sm_90 GPU.
  if (!arch.empty()) {
    auto t = Target::parse(arch);
    if (!t)
      die("unknown --arch '" + arch + "' (known: " + Target::knownArchs() + ")");
    if (t->computeCapability() > target.computeCapability())
      die("--arch " + arch + " is newer than the GPU (" + std::string(target.archName()) + ")");
    if (t->computeCapability() / 10 != target.computeCapability() / 10)
      die("an " + arch + " cubin does not load on this " + std::string(target.archName()) +
          " GPU (machine code is per major version); --arch sm_" +
          std::to_string(target.computeCapability() / 10 * 10) + " builds the same kernel for it");
    t->setSMs(info.smCount);
    target = *t;
  }
  const CudaDriver &d = must(CudaDriver::get());
  CUstream s;
  cu(d.cuStreamCreate(&s, 0), "cuStreamCreate");

  // The random pool, bf16, on the host and the device.
  const size_t poolN = size_t(1) << 26;
  std::vector<uint16_t> pool(poolN);
  std::mt19937_64 rng(20261202);
  {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<uint16_t> table(1 << 16);
    for (auto &x : table)
      x = toBf16(normal(rng));
    uint64_t st = rng();
    for (size_t i = 0; i < poolN; ++i) {
      st += 0x9e3779b97f4a7c15ull;
      uint64_t z = (st ^ (st >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      pool[i] = table[(z ^ (z >> 31)) & 0xFFFF];
    }
  }
  DeviceBuffer dpool = must(DeviceBuffer::allocate(poolN * 2));
  must(dpool.upload(pool));
  auto fillFromPool = [&](DeviceBuffer &b, size_t elems, size_t start) {
    size_t done = 0;
    while (done < elems) {
      size_t from = (start + done) % poolN;
      size_t n = std::min(elems - done, poolN - from);
      cu(d.cuMemcpyDtoDAsync_v2(b.ptr() + done * 2, dpool.ptr() + from * 2, n * 2, s), "copy");
      done += n;
    }
  };

  std::unique_ptr<Store> store;
  if (!db.empty())
    store = openStoredWinners(db);
  std::vector<ShapeCase> shapes = readShapes(shapesPath);
  nlohmann::json results = nlohmann::json::array();
  std::printf("%-26s %-3s %6s %6s %6s  %8s %8s  %s\n", "shape", "lay", "M", "N", "K", "ms",
              "TFLOP/s", "config");
  for (const ShapeCase &c : shapes) {
    if (!only.empty() && c.name.find(only) == std::string::npos)
      continue;
    gemm::Call call;
    call.transA = c.layout[0] == 't';
    call.transB = c.layout[1] == 't';
    call.m = c.m;
    call.n = c.n;
    call.k = c.k;
    call.hasBias = withBias;
    call.ldd = ldPad ? c.n + ldPad : 0;
    call.maxPrograms = maxPrograms;
    int64_t ldd = c.n + ldPad;
    KernelSpec spec = must(gemm::specOf(call, target));
    TileConfig config;
    bool tuned = false;
    if (!configText.empty()) {
      // The keys given, over the shape's default config.
      config =
          getTemplate(spec).defaultConfig(spec).mergedWith(must(TileConfig::parse(configText)));
    } else if (store) {
      if (auto won = storedWinner(*store, spec, c.name))
        config = *won, tuned = true;
    }
    auto t0 = std::chrono::steady_clock::now();
    auto compiled = compileKernel(spec, config);
    double compileMs =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!compiled)
      die(c.name + ": " + llvm::toString(compiled.takeError()));
    auto kernel = must(LoadedKernel::load(*compiled));
    size_t aN = size_t(c.m * c.k), bN = size_t(c.k * c.n), dN = size_t(c.m * ldd);
    DeviceBuffer a = must(DeviceBuffer::allocate(aN * 2)), b = must(DeviceBuffer::allocate(bN * 2)),
                 dd = must(DeviceBuffer::allocate(dN * 2));
    size_t bStart = 12345, biasStart = 777;
    fillFromPool(a, aN, 0);
    fillFromPool(b, bN, bStart);
    DeviceBuffer bias;
    if (withBias) {
      bias = must(DeviceBuffer::allocate(size_t(c.n) * 2));
      fillFromPool(bias, size_t(c.n), biasStart);
      call.bias = bias.ptr();
    }
    must(dd.fill(0xFF, s));
    call.a = a.ptr();
    call.b = b.ptr();
    call.d = dd.ptr();
    DeviceBuffer ws;
    if (int64_t wsBytes = gemm::workspaceBytes(*kernel, call); ownWorkspace && wsBytes > 0) {
      ws = must(DeviceBuffer::allocate(size_t(wsBytes)));
      call.workspace = ws.ptr();
      call.workspaceSize = wsBytes;
    }
    must(gemm::launch(*kernel, call, info.smCount, s));
    cu(d.cuStreamSynchronize(s), "sync");

    // 64 sampled elements against float64 dot products of the pool's values.
    std::vector<uint16_t> dHost(dN);
    must(dd.download(dHost));
    std::uniform_int_distribution<int64_t> pm(0, c.m - 1), pn(0, c.n - 1);
    int bad = 0;
    double worst = 0;
    for (int t = 0; t < 64; ++t) {
      int64_t i = t == 0 ? c.m - 1 : pm(rng), j = t == 0 ? c.n - 1 : pn(rng);
      double sum = 0, mag = 0;
      for (int64_t k = 0; k < c.k; ++k) {
        size_t ai = call.transA ? size_t(k * c.m + i) : size_t(i * c.k + k);
        size_t bi = call.transB ? size_t(j * c.k + k) : size_t(k * c.n + j);
        double x = fromBf16(pool[ai % poolN]), y = fromBf16(pool[(bStart + bi) % poolN]);
        sum += x * y;
        mag += std::fabs(x * y);
      }
      if (withBias)
        sum += fromBf16(pool[(biasStart + size_t(j)) % poolN]);
      double got = fromBf16(dHost[size_t(i * ldd + j)]);
      double err = std::fabs(got - sum) / (1e-2 * std::fabs(sum) + 1e-4 * mag + 1e-6);
      worst = std::max(worst, std::isfinite(got) ? err : 1e30);
      if (!(err <= 1.0))
        ++bad;
    }

    std::vector<double> ms;
    CUevent e0, e1;
    cu(d.cuEventCreate(&e0, 0), "event");
    cu(d.cuEventCreate(&e1, 0), "event");
    for (int w = 0; w < 5; ++w)
      must(gemm::launch(*kernel, call, info.smCount, s));
    for (int r = 0; r < 20; ++r) {
      cu(d.cuEventRecord(e0, s), "record");
      for (int j = 0; j < 5; ++j)
        must(gemm::launch(*kernel, call, info.smCount, s));
      cu(d.cuEventRecord(e1, s), "record");
      cu(d.cuEventSynchronize(e1), "sync");
      float t = 0;
      cu(d.cuEventElapsedTime_v2(&t, e0, e1), "elapsed");
      ms.push_back(double(t) / 5);
    }
    d.cuEventDestroy_v2(e0);
    d.cuEventDestroy_v2(e1);
    double med = median(ms);
    double tflops = 2.0 * double(c.m) * double(c.n) * double(c.k) / (med * 1e-3) / 1e12;
    std::printf("%-26s %-3s %6lld %6lld %6lld  %8.4f %8.1f  %s%s\n", c.name.c_str(),
                c.layout.c_str(), (long long)c.m, (long long)c.n, (long long)c.k, med, tflops,
                compiled->config.canonical().c_str(), bad ? "  CHECK FAILED" : "");
    std::fflush(stdout);
    results.push_back({{"name", c.name},
                       {"layout", c.layout},
                       {"m", c.m},
                       {"n", c.n},
                       {"k", c.k},
                       {"ms", med},
                       {"tflops", tflops},
                       {"config", compiled->config.canonical()},
                       {"tuned", tuned},
                       {"bias", withBias},
                       {"ldd", call.ldd},
                       {"max_programs", maxPrograms},
                       {"registers", compiled->entries.front().registers},
                       {"spill_bytes", compiled->entries.front().spillBytes},
                       {"compile_ms", compileMs},
                       {"check_bad", bad},
                       {"check_worst", worst}});
  }
  nlohmann::json doc = {{"gpu", info.name},
                        {"sms", info.smCount},
                        {"arch", std::string(target.archName())},
                        {"results", results}};
  std::ofstream o(outPath);
  o << doc.dump(1) << "\n";
  if (!o)
    die("cannot write " + outPath);
  return 0;
}
