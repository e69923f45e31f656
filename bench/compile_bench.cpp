//===- compile_bench.cpp - cold compile latency, spec to cubin, no GPU -------===//
//
// Compiles each kernel several times in one process, as a first use does,
// with each back end (MLIR + LLVM + ptxas, and MLIR + C++ + NVRTC), and prints
// the first compile and the median of the others, with the split between
// MLIR and the toolchain. Runs on any machine with the CUDA toolkit.
// Each compile is paired with one of NVRTC's floor, a kernel of one store and
// no includes: on a machine whose speed drifts, the median ratio of the pairs
// says more than either time alone.
//   compile_bench [--reps N] [--backend nvptx|cuda|all] [--out FILE.json]
//
//===----------------------------------------------------------------------===//
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "compiler/Compiler.h"
#include "compiler/Nvrtc.h"
#include "compiler/Ptxas.h"
#include "ops/rmsnorm/RmsNormDecl.h"

using namespace tilejit;

namespace {
// NVRTC's floor on this machine: one store, no includes.
const char *kFloorSource =
    "extern \"C\" __global__ void tj_floor(float *p) { p[threadIdx.x] = 1.0f; }\n";

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}
} // namespace

int main(int argc, char **argv) {
  int reps = 11;
  std::string out, which = "all";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc)
      reps = std::max(2, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--backend") && i + 1 < argc)
      which = argv[++i];
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
  struct Case {
    bool backward;
    int64_t cols;
  };
  const Case cases[] = {{false, 4096}, {false, 8192}, {false, 4097}, {true, 4096}, {true, 8192}};
  std::string json = "{\n  \"nvrtc\": \"" + nvrtcVersionString() + "\",\n  \"ptxas\": \"" +
                     ptxasVersionString() +
                     "\",\n  \"cores\": " + std::to_string(std::thread::hardware_concurrency()) +
                     ",\n  \"kernels\": [\n";
  bool firstCase = true;
  for (Backend backend : backends)
    for (const Case &c : cases) {
      CompileOptions options;
      options.backend = backend;
      rmsnorm::Params s;
      s.backward = c.backward;
      s.cols = c.cols;
      s.align = c.cols % 8 == 0 ? 16 : 2;
      std::vector<double> total, mlir, nvrtc, floor, ratio;
      for (int i = 0; i < reps; ++i) {
        auto t0 = std::chrono::steady_clock::now();
        auto f = compileWithNvrtc(kFloorSource, "floor", std::string(s.target.archName()));
        if (!f) {
          std::fprintf(stderr, "compile_bench: %s\n", llvm::toString(f.takeError()).c_str());
          return 1;
        }
        auto t1 = std::chrono::steady_clock::now();
        auto k = compileKernel(s, {}, options);
        if (!k) {
          std::fprintf(stderr, "compile_bench: %s\n", llvm::toString(k.takeError()).c_str());
          return 1;
        }
        auto t2 = std::chrono::steady_clock::now();
        floor.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        total.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
        ratio.push_back(total.back() / floor.back());
        mlir.push_back(k->mlirMs);
        nvrtc.push_back(k->binaryMs);
      }
      // The first of each pair pays the process's one-time set-up.
      double first = total.front();
      total.erase(total.begin());
      floor.erase(floor.begin());
      ratio.erase(ratio.begin());
      const char *tool = backend != Backend::Cuda ? "ptxas" : "NVRTC";
      std::printf("%-4s %-56s first %6.1f ms, median %6.1f ms (MLIR %.1f, %s %.1f); "
                  "floor %.1f ms, ratio %.2f\n",
                  backendName(backend), KernelSpec(s).canonical(false).c_str(), first,
                  median(total), median(mlir), tool, median(nvrtc), median(floor), median(ratio));
      char row[512];
      std::snprintf(row, sizeof row,
                    "%s    {\"backend\": \"%s\", \"spec\": \"%s\", \"first_ms\": %.2f, "
                    "\"median_ms\": %.2f, \"mlir_ms\": %.2f, \"binary_ms\": %.2f, "
                    "\"floor_ms\": %.2f, \"ratio_to_floor\": %.3f}",
                    firstCase ? "" : ",\n", backendName(backend),
                    KernelSpec(s).canonical(false).c_str(), first, median(total), median(mlir),
                    median(nvrtc), median(floor), median(ratio));
      json += row;
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
