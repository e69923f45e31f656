//===- rmsnorm_bench.cpp - RMSNorm kernels and compile latency on the GPU ----===//
//
// Times tilejit's RMSNorm forward and backward with CUDA events (warm-up,
// median of many samples of 10 back-to-back launches, two input sets
// alternated so the L2 cache does not hold the inputs), the device-to-device
// copy bandwidth in the same run, the
// compile latency (spec to cubin) and the warm in-process lookup. Writes JSON.
//
//   rmsnorm_bench [--shapes 16384x4096,16384x8192] [--dtype bf16] [--reps 100]
//                 [--sweep N] [--out results.json]
// --sweep N also times the first N configs of each template's config space;
// --db FILE times the winners `tilejit tune` recorded there (else the defaults).
//
//===----------------------------------------------------------------------===//
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "autotune/Tuner.h"
#include "bench/BenchUtil.h"
#include "compiler/templates/Template.h"
#include "ops/rmsnorm/RmsNormCached.h"
#include "ops/rmsnorm/RmsNormDecl.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Store.h"

using namespace tilejit;
using namespace tilejit::bench;

const char *const tilejit::bench::kProgram = "rmsnorm_bench";

namespace {

/// Times `launch(i)` with events; returns ms per launch. Each sample is
/// `inner` launches enqueued back to back (i alternates the input sets), so
/// the GPU never waits for the host between them and launch latency is not
/// counted as kernel time.
template <class F>
std::vector<double> timeIt(const CudaDriver &d, CUstream s, int reps, F launch, int inner = 10) {
  CUevent a, b;
  cu(d.cuEventCreate(&a, 0), "cuEventCreate");
  cu(d.cuEventCreate(&b, 0), "cuEventCreate");
  for (int i = 0; i < 10; ++i)
    launch(i);
  cu(d.cuStreamSynchronize(s), "sync");
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    cu(d.cuEventRecord(a, s), "record");
    for (int j = 0; j < inner; ++j)
      launch(i * inner + j);
    cu(d.cuEventRecord(b, s), "record");
    cu(d.cuEventSynchronize(b), "sync");
    float t = 0;
    cu(d.cuEventElapsedTime_v2(&t, a, b), "elapsed");
    ms.push_back(double(t) / inner);
  }
  d.cuEventDestroy_v2(a);
  d.cuEventDestroy_v2(b);
  return ms;
}

/// Normal(mean, 1) values: drawn from a table of 65536 normal samples at
/// random places (a draw per element took most of a run at the larger
/// shapes; the kernels' speed does not depend on the values).
void randomFill(DeviceBuffer &b, DType t, size_t count, std::mt19937_64 &rng, float mean) {
  static std::vector<float> table = [&] {
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> v(1 << 16);
    for (float &x : v)
      x = dist(rng);
    return v;
  }();
  std::vector<unsigned char> host(count * dtypeBytes(t));
  uint64_t state = rng();
  for (size_t i = 0; i < count; ++i) {
    state += 0x9e3779b97f4a7c15ull; // splitmix64
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    storeElement(host.data(), t, i, mean + table[(z ^ (z >> 31)) & 0xffff]);
  }
  must(b.upload(host.data(), host.size()));
}

} // namespace

int main(int argc, char **argv) {
  std::string shapes = "16384x4096,16384x8192", out = "rmsnorm_bench.json", dtypeName_ = "bf16";
  int reps = 100;
  int sweep = 0;  // time up to this many configs of each template's space
  std::string db; // take each shape's config from this store's tuned winners
  std::string backendName_ = "nvptx";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc)
        die("missing value after " + a);
      return argv[++i];
    };
    if (a == "--shapes")
      shapes = next();
    else if (a == "--out")
      out = next();
    else if (a == "--dtype")
      dtypeName_ = next();
    else if (a == "--reps")
      reps = std::stoi(next());
    else if (a == "--sweep")
      sweep = std::stoi(next());
    else if (a == "--db")
      db = next();
    else if (a == "--backend")
      backendName_ = next();
    else
      die("unknown argument '" + a + "'");
  }
  auto dtype = parseDType(dtypeName_);
  if (!dtype)
    die("unknown dtype '" + dtypeName_ + "'");
  auto backend = parseBackend(backendName_);
  if (!backend)
    die("unknown back end '" + backendName_ + "' (known: " + backendNames() + ")");
  CompileOptions compileOptions;
  compileOptions.backend = *backend;

  must(useDevice(0));
  DeviceInfo dev = must(queryDevice(0));
  const CudaDriver &d = must(CudaDriver::get());
  CUstream stream;
  cu(d.cuStreamCreate(&stream, 0), "cuStreamCreate");
  std::mt19937_64 rng(1234);

  std::string json = "{\n  \"gpu\": \"" + dev.name + "\",\n  \"arch\": \"" + dev.arch() +
                     "\",\n  \"sms\": " + std::to_string(dev.smCount) + ",\n";
  char date[32];
  std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M", std::gmtime(&now));
  json += "  \"date\": \"" + std::string(date) + " UTC\",\n";
  json += "  \"backend\": \"" + backendName_ + "\",\n";

  // Copy bandwidth: 1 GiB device to device, bytes read plus bytes written.
  {
    size_t bytes = size_t(1) << 30;
    auto src = must(DeviceBuffer::allocate(bytes));
    auto dst = must(DeviceBuffer::allocate(bytes));
    must(src.fill(1, stream));
    auto ms = timeIt(d, stream, 30, [&](int) {
      cu(d.cuMemcpyDtoDAsync_v2(dst.ptr(), src.ptr(), bytes, stream), "copy");
    });
    double tbs = 2.0 * bytes / (median(ms) * 1e-3) / 1e12;
    std::printf("copy  1 GiB D2D: %.3f ms, %.2f TB/s\n", median(ms), tbs);
    json += "  \"copy_tbs\": " + std::to_string(tbs) + ",\n";
  }

  // Compile latency: the first compile in the process, then the median of
  // further compiles of the same spec (spec to cubin: MLIR, then ptxas or
  // NVRTC).
  {
    rmsnorm::Params s;
    s.cols = 4096;
    std::vector<double> total, mlir, nvrtc;
    for (int i = 0; i < 11; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      auto k = must(compileKernel(s, {}, compileOptions));
      total.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      mlir.push_back(k.mlirMs);
      nvrtc.push_back(k.binaryMs);
    }
    double first = total.front();
    total.erase(total.begin());
    std::printf(
        "compile rmsnorm_fwd 4096 (%s): first %.1f ms, median %.1f ms (MLIR %.1f, %s %.1f)\n",
        backendName_.c_str(), first, median(total), median(mlir),
        *backend != Backend::Cuda ? "ptxas" : "NVRTC", median(nvrtc));
    json += "  \"compile_first_ms\": " + std::to_string(first) + ",\n";
    json += "  \"compile_median_ms\": " + std::to_string(median(total)) + ",\n";
    json += "  \"compile_mlir_ms\": " + std::to_string(median(mlir)) + ",\n";
    json += "  \"compile_binary_ms\": " + std::to_string(median(nvrtc)) + ",\n";
  }

  const Target target = must(dev.target());
  KernelCache cache(*backend);
  std::unique_ptr<Store> store;
  if (!db.empty())
    store = must(Store::open(db));
  // The config a shape runs with: the store's winner, else the default.
  auto configFor = [&](const KernelSpec &spec) {
    if (store) {
      auto w = must(store->winner(tuneKey(spec, *backend)));
      if (w)
        return must(TileConfig::parse(w->config));
      std::fprintf(stderr, "rmsnorm_bench: %s not tuned in %s; using the default\n",
                   spec.canonical().c_str(), db.c_str());
    }
    return getTemplate(spec).defaultConfig(spec);
  };
  json += "  \"shapes\": [\n";
  bool firstShape = true;
  size_t start = 0;
  while (start < shapes.size()) {
    size_t comma = shapes.find(',', start);
    std::string shape =
        shapes.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? shapes.size() : comma + 1;
    auto x = shape.find('x');
    if (x == std::string::npos)
      die("bad shape '" + shape + "'");
    int64_t rows = std::stoll(shape.substr(0, x)), cols = std::stoll(shape.substr(x + 1));
    size_t n = size_t(rows * cols), eb = dtypeBytes(*dtype);

    DeviceBuffer xs[2] = {must(DeviceBuffer::allocate(n * eb)),
                          must(DeviceBuffer::allocate(n * eb))};
    DeviceBuffer dys[2] = {must(DeviceBuffer::allocate(n * eb)),
                           must(DeviceBuffer::allocate(n * eb))};
    DeviceBuffer ys[2] = {must(DeviceBuffer::allocate(n * eb)),
                          must(DeviceBuffer::allocate(n * eb))};
    auto w = must(DeviceBuffer::allocate(cols * eb));
    auto dw = must(DeviceBuffer::allocate(cols * eb));
    auto rstd = must(DeviceBuffer::allocate(rows * 4));
    for (int i = 0; i < 2; ++i) {
      randomFill(xs[i], *dtype, n, rng, 0.0f);
      randomFill(dys[i], *dtype, n, rng, 0.0f);
    }
    randomFill(w, *dtype, cols, rng, 1.0f);

    RmsNormForward f;
    f.dtype = f.wdtype = *dtype;
    f.w = w.ptr();
    f.rstd = rstd.ptr();
    f.rows = rows;
    f.cols = cols;
    f.x = xs[0].ptr();
    f.y = ys[0].ptr();
    TileConfig fconfig = configFor(rmsNormSpec(f, target));
    auto fwd = timeIt(d, stream, reps, [&](int i) {
      f.x = xs[i & 1].ptr();
      f.y = ys[i & 1].ptr();
      must(rmsNormForward(cache, f, stream, target, fconfig));
    });
    RmsNormBackward b;
    b.dtype = b.wdtype = *dtype;
    b.w = w.ptr();
    b.dw = dw.ptr();
    b.rstd = rstd.ptr();
    b.rows = rows;
    b.cols = cols;
    b.x = xs[0].ptr();
    b.dy = dys[0].ptr();
    b.dx = ys[0].ptr();
    TileConfig bconfig = configFor(rmsNormSpec(b, target));
    int64_t wsBytes = must(rmsNormBackwardWorkspace(cache, b, target, bconfig));
    auto ws = must(DeviceBuffer::allocate(size_t(wsBytes)));
    b.workspace = ws.ptr();
    auto bwd = timeIt(d, stream, reps, [&](int i) {
      b.x = xs[i & 1].ptr();
      b.dy = dys[i & 1].ptr();
      b.dx = ys[i & 1].ptr();
      must(rmsNormBackward(cache, b, stream, target, bconfig));
    });
    double fwdMs = median(fwd), bwdMs = median(bwd);
    double fwdTbs = 2.0 * n * eb / (fwdMs * 1e-3) / 1e12;
    double bwdTbs = 3.0 * n * eb / (bwdMs * 1e-3) / 1e12;
    KernelSpec fs = rmsNormSpec(f, target), bs = rmsNormSpec(b, target);
    std::string fcfg = fconfig.canonical();
    std::string bcfg = bconfig.canonical();
    std::printf("rmsnorm %s %s: fwd %.4f ms %.2f TB/s [%s]; bwd %.4f ms %.2f TB/s [%s]\n",
                shape.c_str(), dtypeName_.c_str(), fwdMs, fwdTbs, fcfg.c_str(), bwdMs, bwdTbs,
                bcfg.c_str());

    std::string sweepJson;
    if (sweep > 0) {
      for (bool backward : {false, true}) {
        KernelSpec spec = backward ? bs : fs;
        auto space = getTemplate(spec).configSpace(spec);
        std::vector<std::pair<double, std::string>> timed;
        for (size_t c = 0; c < space.size() && int(c) < sweep; ++c) {
          const TileConfig &cfg = space[c];
          std::vector<double> ms;
          if (!backward) {
            ms = timeIt(d, stream, 30, [&](int i) {
              f.x = xs[i & 1].ptr();
              f.y = ys[i & 1].ptr();
              must(rmsNormForward(cache, f, stream, target, cfg));
            });
          } else {
            int64_t need = must(rmsNormBackwardWorkspace(cache, b, target, cfg));
            auto ws2 = must(DeviceBuffer::allocate(size_t(need)));
            RmsNormBackward b2 = b;
            b2.workspace = ws2.ptr();
            ms = timeIt(d, stream, 30, [&](int i) {
              b2.x = xs[i & 1].ptr();
              b2.dy = dys[i & 1].ptr();
              b2.dx = ys[i & 1].ptr();
              must(rmsNormBackward(cache, b2, stream, target, cfg));
            });
          }
          timed.push_back({median(ms), cfg.canonical()});
        }
        std::sort(timed.begin(), timed.end());
        for (size_t r = 0; r < timed.size() && r < 6; ++r) {
          double tbs = (backward ? 3.0 : 2.0) * n * eb / (timed[r].first * 1e-3) / 1e12;
          std::printf("  sweep %s %s #%zu: %.4f ms %.2f TB/s [%s]\n", backward ? "bwd" : "fwd",
                      shape.c_str(), r + 1, timed[r].first, tbs, timed[r].second.c_str());
        }
        for (auto &[ms, cfg] : timed) {
          char item[256];
          std::snprintf(item, sizeof item, "%s{\"op\": \"%s\", \"config\": \"%s\", \"ms\": %.5f}",
                        sweepJson.empty() ? "" : ", ", backward ? "bwd" : "fwd", cfg.c_str(), ms);
          sweepJson += item;
        }
      }
    }

    // Warm in-process lookup: spec -> loaded kernel, a hit.
    const int lookups = 200000;
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < lookups; ++i)
      if (!cache.find(fs, fconfig))
        die("lookup missed");
    double lookupUs =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
        lookups;

    if (!firstShape)
      json += ",\n";
    firstShape = false;
    static char buf[1 << 16];
    std::snprintf(buf, sizeof buf,
                  "    {\"shape\": \"%s\", \"dtype\": \"%s\", \"fwd_ms\": %.5f, \"fwd_tbs\": %.3f, "
                  "\"fwd_config\": \"%s\", \"bwd_ms\": %.5f, \"bwd_tbs\": %.3f, \"bwd_config\": "
                  "\"%s\", \"lookup_us\": %.4f, \"sweep\": [%s]}",
                  shape.c_str(), dtypeName_.c_str(), fwdMs, fwdTbs, fcfg.c_str(), bwdMs, bwdTbs,
                  bcfg.c_str(), lookupUs, sweepJson.c_str());
    json += buf;
    std::printf("warm lookup: %.3f us\n", lookupUs);
  }
  json += "\n  ]\n}\n";
  FILE *fo = std::fopen(out.c_str(), "w");
  if (!fo)
    die("cannot write " + out);
  std::fputs(json.c_str(), fo);
  std::fclose(fo);
  return 0;
}
