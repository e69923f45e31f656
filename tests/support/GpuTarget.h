//===- GpuTarget.h - the GPU a test runs on -----------------------*- C++ -*-===//
#pragma once

#include <string>

#include "runtime/CudaDriver.h"

namespace tilejit::testing {

/// GPU 0, made current: its target (with its multiprocessors), or in `why`
/// the reason a GPU test skips (no GPU, or one older than `minCapability`).
struct Gpu {
  Target target;
  std::string why;
};
inline Gpu currentGpu(int minCapability = 0) {
  Gpu g;
  auto ctx = useDevice(0);
  if (!ctx) {
    g.why = "no GPU here: " + llvm::toString(ctx.takeError());
    return g;
  }
  auto info = queryDevice(0);
  if (!info) {
    g.why = "no GPU here: " + llvm::toString(info.takeError());
    return g;
  }
  auto t = info->target();
  if (!t) {
    g.why = info->name + ": " + llvm::toString(t.takeError());
    return g;
  }
  if (t->computeCapability() < minCapability) {
    g.why = info->name + " (" + info->arch() + ") predates sm_" + std::to_string(minCapability);
    return g;
  }
  g.target = *t;
  g.target.setSMs(info->smCount);
  return g;
}

/// The target a test of the kernels without wgmma (sm_80's) builds for on
/// `gpu`: the GPU's own, or on Hopper sm_90 (the newest target of its
/// major version without wgmma; an sm_80 cubin would run there too).
inline Target withoutWgmma(const Target &gpu) {
  if (!gpu.hasWgmma())
    return gpu;
  Target t = *Target::parse("sm_90");
  t.setSMs(gpu.smCount());
  return t;
}

/// GPU 0 (sm_80 or later) with the target the kernels without wgmma build
/// for on it (withoutWgmma), or in `why` the reason their tests skip.
inline Gpu currentGpuWithoutWgmma() {
  Gpu g = currentGpu(80);
  if (g.why.empty())
    g.target = withoutWgmma(g.target);
  return g;
}

} // namespace tilejit::testing
