//===- engine_bench.cpp - the warm lookup: Engine::get on a hit ---------------===//
//
// Google Benchmark. The kernel is loaded once; each iteration is the hot
// path a training step takes: canonical spec text, a hash lookup under a
// shared lock. Needs a GPU (the engine loads kernels); says so and exits
// otherwise.
//
//   engine_bench [--benchmark_out=results.json --benchmark_out_format=json]
//
//===----------------------------------------------------------------------===//
#include <benchmark/benchmark.h>

#include <cstdio>

#include "ops/rmsnorm/RmsNormDecl.h"
#include "service/Engine.h"

using namespace tilejit;

namespace {

std::unique_ptr<Engine> engine;

KernelSpec specFor(bool backward) {
  rmsnorm::Params s;
  s.backward = backward;
  s.rows = 16384;
  s.cols = 4096;
  s.target = engine->target();
  return s;
}

void BM_EngineGetHit(benchmark::State &state) {
  KernelSpec spec = specFor(state.range(0) ? true : false);
  if (auto k = engine->get(spec); !k) {
    state.SkipWithError(llvm::toString(k.takeError()).c_str());
    return;
  }
  for (auto _ : state) {
    auto k = engine->get(spec);
    benchmark::DoNotOptimize(&*k);
  }
}
BENCHMARK(BM_EngineGetHit)->Arg(0)->Arg(1);

} // namespace

int main(int argc, char **argv) {
  auto e = Engine::create(EngineOptions{});
  if (!e) {
    std::printf("engine_bench: skipped, %s\n", llvm::toString(e.takeError()).c_str());
    return 0;
  }
  engine = std::move(*e);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  engine.reset();
  return 0;
}
