//===- FakeWorker.h - the tuner's fake worker and the device it reports -*- C++ -*-===//
//
// Tuner tests without a GPU run candidates on tests/unit/FakeWorker.cpp: a
// worker process that reports the timings its plan gives. Its path comes
// from TILEJIT_FAKE_WORKER (set by ctest), else from the build's definition.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <vector>

#include "autotune/Worker.h"
#include "compiler/templates/Template.h"
#include "ops/rmsnorm/RmsNormDecl.h"
#include "runtime/CudaDriver.h"

namespace tilejit::testing {

/// A started fake worker process.
inline llvm::Expected<std::unique_ptr<WorkerProcess>> startFakeWorker() {
  const char *env = std::getenv("TILEJIT_FAKE_WORKER");
  WorkerProcess::Options wo;
  wo.path = env && *env ? env : TILEJIT_FAKE_WORKER;
  return WorkerProcess::start(wo);
}

/// The device the fake worker stands for: an sm_90 part of 132 SMs.
inline DeviceInfo fakeDevice() {
  DeviceInfo device;
  device.name = "Fake GPU";
  device.smCount = 132;
  device.ccMajor = 9;
  device.ccMinor = 0;
  return device;
}

/// The kernel the tuning tests tune: the RMSNorm forward of 4096 x 4096
/// bf16 rows on `target`.
inline KernelSpec tuningTestSpec(const Target &target) {
  rmsnorm::Params p;
  p.backward = false;
  p.rows = 4096;
  p.cols = 4096;
  p.target = target;
  p.align = alignmentOf({}, p.cols * 2);
  return p;
}

/// Tests that tune tuningTestSpec on a started fake worker: the worker, the
/// device it stands for, the spec and its config space (at least 4).
class FakeTuningTest : public ::testing::Test {
protected:
  void SetUp() override {
    auto w = startFakeWorker();
    ASSERT_TRUE(bool(w)) << llvm::toString(w.takeError());
    worker = std::move(*w);
    device = fakeDevice();
    spec = tuningTestSpec(*device.target());
    space = getTemplate(spec).configSpace(spec.tuningSpec());
    ASSERT_GE(space.size(), 4u);
  }

  std::unique_ptr<WorkerProcess> worker;
  DeviceInfo device;
  KernelSpec spec;
  std::vector<TileConfig> space;
};

} // namespace tilejit::testing
