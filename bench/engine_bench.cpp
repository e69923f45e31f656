//===- engine_bench.cpp - the warm lookup and launch on the host -------------===//
//
// Google Benchmark. The kernel is loaded once; BM_EngineGetHit is the hot
// path a training step takes to its kernel: canonical spec text, a hash
// lookup under a shared lock. BM_LaunchRmsNormForward is the host side of a
// warm launch of a tiny RMSNorm forward (4 x 1024), taken apart: 0 the
// engine's lookup and the launch (what the C interface does after its
// checks), 1 the launch with the kernel in hand (argument checks, grid,
// packing, cuLaunchKernelEx), 2 cuLaunchKernelEx alone on packed arguments,
// 3 cuLaunchKernel alone on the same. Needs a GPU (the engine loads
// kernels); says so and exits otherwise.
//
//   engine_bench [--benchmark_out=results.json --benchmark_out_format=json]
//
//===----------------------------------------------------------------------===//
#include <benchmark/benchmark.h>

#include <cstdio>

#include "ops/rmsnorm/RmsNormDecl.h"
#include "ops/rmsnorm/RmsNormLaunch.h"
#include "runtime/CudaDriver.h"
#include "runtime/DeviceBuffer.h"
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

void BM_LaunchRmsNormForward(benchmark::State &state) {
  auto drv = CudaDriver::get();
  if (!drv) {
    state.SkipWithError(llvm::toString(drv.takeError()).c_str());
    return;
  }
  constexpr int64_t rows = 4, cols = 1024;
  auto buf = DeviceBuffer::allocate(size_t(1) << 20);
  if (!buf) {
    state.SkipWithError(llvm::toString(buf.takeError()).c_str());
    return;
  }
  RmsNormForward a;
  a.rows = rows;
  a.cols = cols;
  a.x = buf->ptr();
  a.w = a.x + 65536;
  a.y = a.x + 131072;
  a.rstd = a.x + 196608;
  KernelSpec spec = rmsNormSpec(a, engine->target());
  auto k = engine->get(spec);
  if (!k) {
    state.SkipWithError(llvm::toString(k.takeError()).c_str());
    return;
  }
  CUstream stream = nullptr;
  if (drv->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
    state.SkipWithError("cuStreamCreate failed");
    return;
  }
  // The packed arguments of variants 2 and 3: each view its address and
  // sizes (dense: no strides), then eps.
  struct {
    uint64_t x[3], w[2], y[3], rstd[2];
    float eps;
  } packed = {{a.x, uint64_t(rows), uint64_t(cols)},
              {a.w, uint64_t(cols)},
              {a.y, uint64_t(rows), uint64_t(cols)},
              {a.rstd, uint64_t(rows)},
              a.eps};
  void *params[] = {packed.x, packed.w, packed.y, packed.rstd, &packed.eps};
  KernelArg args[] = {KernelArg::view(a.x, {rows, cols}), KernelArg::view(a.w, {cols}),
                      KernelArg::view(a.y, {rows, cols}), KernelArg::view(a.rstd, {rows}),
                      KernelArg::f32(a.eps)};
  auto grid = k->gridFor(0, args, std::size(args));
  if (!grid) {
    state.SkipWithError(llvm::toString(grid.takeError()).c_str());
    return;
  }
  for (const ParamInfo &p : k->entry(0).params)
    if (!p.staticStrides.empty()) {
      state.SkipWithError("the kernel takes strides: the hand-packed arguments do not fit");
      return;
    }
  CUlaunchConfig cfg = k->launchConfig(0, *grid, stream);
  CUfunction f = k->function(0);
  int64_t variant = state.range(0), n = 0;
  for (auto _ : state) {
    bool ok = true;
    switch (variant) {
    case 0: {
      auto kk = engine->get(spec, stream);
      if (!kk) {
        llvm::consumeError(kk.takeError());
        ok = false;
      } else if (llvm::Error e = launchRmsNormForward(*kk, a, stream)) {
        llvm::consumeError(std::move(e));
        ok = false;
      }
      break;
    }
    case 1:
      if (llvm::Error e = k->launch(0, args, std::size(args), stream)) {
        llvm::consumeError(std::move(e));
        ok = false;
      }
      break;
    case 2:
      ok = drv->cuLaunchKernelEx(&cfg, f, params, nullptr) == CUDA_SUCCESS;
      break;
    default:
      ok = drv->cuLaunchKernel(f, cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ, cfg.blockDimX, 1, 1,
                               cfg.sharedMemBytes, stream, params, nullptr) == CUDA_SUCCESS;
      break;
    }
    if (!ok) {
      state.SkipWithError("a launch failed");
      break;
    }
    // The GPU keeps up with these launches; a sync now and then keeps the
    // queue from filling whatever it does.
    if (++n % 1024 == 0)
      drv->cuStreamSynchronize(stream);
  }
  drv->cuStreamSynchronize(stream);
  drv->cuStreamDestroy_v2(stream);
}
BENCHMARK(BM_LaunchRmsNormForward)->DenseRange(0, 3);

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
