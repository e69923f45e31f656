//===- compile_bench.cpp - cold compile latency, spec to cubin, no GPU -------===//
//
// Compiles each kernel several times in one process, as a first use does,
// through compileKernel (the path the engine and the tuner take), with each
// back end (MLIR + LLVM + ptxas, and MLIR + C++ + NVRTC), and prints the first
// compile and the median and spread of the others, their CPU time (this
// process and the ptxas program it waits for) and the median of each stage.
// Runs on any machine with the CUDA toolkit.
// Each compile is paired with one of NVRTC's floor, a kernel of one store and
// no includes: on a machine whose speed drifts, the median ratio of the pairs
// says more than either time alone.
//   compile_bench [--reps N] [--backend nvptx|cuda|all] [--only SUBSTRING]
//                 [--no-floor] [--out FILE.json]
//
//===----------------------------------------------------------------------===//
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <sys/resource.h>
#include <thread>
#include <vector>

#include "compiler/Compiler.h"
#include "compiler/Nvrtc.h"
#include "compiler/Ptxas.h"
#include "ops/gemm/GemmDecl.h"
#include "ops/rmsnorm/RmsNormDecl.h"

using namespace tilejit;

namespace {
// NVRTC's floor on this machine: one store, no includes.
const char *kFloorSource =
    "extern \"C\" __global__ void tj_floor(float *p) { p[threadIdx.x] = 1.0f; }\n";

/// The value at fraction `q` of the sorted `v` (0.5: the median, the upper
/// one of an even count; 0 for none).
double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[std::min(v.size() - 1, size_t(q * double(v.size())))];
}
double median(const std::vector<double> &v) { return quantile(v, 0.5); }

/// User + system CPU milliseconds of this process and of its children that
/// have ended (the ptxas program).
double cpuMs() {
  double ms = 0;
  for (int who : {RUSAGE_SELF, RUSAGE_CHILDREN}) {
    rusage u{};
    getrusage(who, &u);
    ms += (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e3 +
          (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e3;
  }
  return ms;
}

double msBetween(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

/// 1-minute load average, to note a busy machine in the results.
double loadAverage() {
  double l[1] = {0};
  return getloadavg(l, 1) == 1 ? l[0] : -1;
}
} // namespace

int main(int argc, char **argv) {
  int reps = 11;
  bool withFloor = true;
  std::string out, which = "all", only;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc)
      reps = std::max(2, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--backend") && i + 1 < argc)
      which = argv[++i];
    else if (!std::strcmp(argv[i], "--only") && i + 1 < argc)
      only = argv[++i];
    else if (!std::strcmp(argv[i], "--no-floor"))
      withFloor = false;
    else if (!std::strcmp(argv[i], "--out") && i + 1 < argc)
      out = argv[++i];
    else {
      std::fprintf(stderr, "compile_bench: unknown argument '%s'\n", argv[i]);
      return 2;
    }
  }
  std::vector<Backend> backends;
  if (which == "all")
    backends = {Backend::Nvptx, Backend::Cuda};
  else if (auto b = parseBackend(which))
    backends = {*b};
  else {
    std::fprintf(stderr, "compile_bench: unknown back end '%s' (nvptx, cuda, all)\n",
                 which.c_str());
    return 2;
  }
  std::vector<KernelSpec> specs;
  for (auto [backward, cols] :
       {std::pair{false, 4096}, {false, 8192}, {false, 4097}, {true, 4096}, {true, 8192}}) {
    rmsnorm::Params s;
    s.backward = backward;
    s.cols = cols;
    s.align = cols % 8 == 0 ? 16 : 2;
    specs.push_back(s);
  }
  {
    // One GEMM variant with its default config: 8192^3, the forward (NT).
    gemm::Params g;
    g.m = g.n = g.k = 8192;
    specs.push_back(g);
  }
  std::string json = "{\n  \"nvrtc\": \"" + nvrtcVersionString() + "\",\n  \"ptxas\": \"" +
                     ptxasVersionString() +
                     "\",\n  \"cores\": " + std::to_string(std::thread::hardware_concurrency()) +
                     ",\n  \"reps\": " + std::to_string(reps) + ",\n  \"kernels\": [\n";
  bool firstCase = true;
  for (Backend backend : backends)
    for (const KernelSpec &spec : specs) {
      std::string name = spec.canonical(false);
      if (!only.empty() && name.find(only) == std::string::npos)
        continue;
      if (backend == Backend::Cuda && std::string(spec.opName()).rfind("rmsnorm", 0) != 0)
        continue; // the C++ back end has RMSNorm only
      CompileOptions options;
      options.backend = backend;
      std::vector<double> total, cpu, mlir, binary, floor, ratio;
      std::map<std::string, std::vector<double>> stageMs;
      std::vector<std::string> stageOrder;
      double load0 = loadAverage();
      for (int i = 0; i < reps; ++i) {
        auto t0 = std::chrono::steady_clock::now();
        if (withFloor) {
          auto f = compileWithNvrtc(kFloorSource, "floor", std::string(spec.target.archName()));
          if (!f) {
            std::fprintf(stderr, "compile_bench: %s\n", llvm::toString(f.takeError()).c_str());
            return 1;
          }
        }
        auto t1 = std::chrono::steady_clock::now();
        double c0 = cpuMs();
        auto k = compileKernel(spec, {}, options);
        double c1 = cpuMs();
        auto t2 = std::chrono::steady_clock::now();
        if (!k) {
          std::fprintf(stderr, "compile_bench: %s\n", llvm::toString(k.takeError()).c_str());
          return 1;
        }
        floor.push_back(msBetween(t0, t1));
        total.push_back(msBetween(t1, t2));
        cpu.push_back(c1 - c0);
        ratio.push_back(withFloor ? total.back() / floor.back() : 0);
        mlir.push_back(k->mlirMs);
        binary.push_back(k->binaryMs);
        if (i > 0)
          for (const StageTime &s : k->stages) {
            if (!stageMs.count(s.name))
              stageOrder.push_back(s.name);
            stageMs[s.name].push_back(s.ms);
          }
      }
      // The first of each pair pays the process's one-time set-up.
      double first = total.front(), firstCpu = cpu.front();
      for (auto *v : {&total, &cpu, &mlir, &binary, &floor, &ratio})
        v->erase(v->begin());
      double load1 = loadAverage();
      const char *tool = backend != Backend::Cuda ? "ptxas" : "NVRTC";
      std::printf("%-5s %s\n  first %.1f ms (cpu %.1f); median %.1f ms [p10 %.1f, p90 %.1f], "
                  "cpu %.1f ms; MLIR+%s %.1f, %s %.1f",
                  backendName(backend), name.c_str(), first, firstCpu, median(total),
                  quantile(total, 0.1), quantile(total, 0.9), median(cpu),
                  backend != Backend::Cuda ? "LLVM" : "C++", median(mlir), tool, median(binary));
      if (withFloor)
        std::printf("; floor %.1f ms, ratio %.2f", median(floor), median(ratio));
      std::printf("; load %.2f-%.2f\n  stages:", load0, load1);
      std::string stagesJson;
      for (const std::string &s : stageOrder) {
        std::printf(" %s %.2f", s.c_str(), median(stageMs[s]));
        char one[96];
        std::snprintf(one, sizeof one, "%s\"%s\": %.2f", stagesJson.empty() ? "" : ", ", s.c_str(),
                      median(stageMs[s]));
        stagesJson += one;
      }
      std::printf("\n");
      std::fflush(stdout);
      char row[768];
      std::snprintf(row, sizeof row,
                    "%s    {\"backend\": \"%s\", \"spec\": \"%s\", \"first_ms\": %.2f, "
                    "\"median_ms\": %.2f, \"p10_ms\": %.2f, \"p90_ms\": %.2f, \"cpu_ms\": %.2f, "
                    "\"mlir_ms\": %.2f, \"binary_ms\": %.2f, \"floor_ms\": %.2f, "
                    "\"ratio_to_floor\": %.3f, \"load\": [%.2f, %.2f],\n     \"stages_ms\": {",
                    firstCase ? "" : ",\n", backendName(backend), name.c_str(), first,
                    median(total), quantile(total, 0.1), quantile(total, 0.9), median(cpu),
                    median(mlir), median(binary), median(floor), median(ratio), load0, load1);
      json += row + stagesJson + "}}";
      firstCase = false;
    }
  json += "\n  ]\n}\n";
  if (!out.empty()) {
    std::ofstream f(out);
    f << json;
    if (!f) {
      std::fprintf(stderr, "compile_bench: cannot write %s\n", out.c_str());
      return 1;
    }
  }
  return 0;
}
