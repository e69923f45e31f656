//===- HostTensor.h - host copies of device tensors for the tests --*- C++ -*-===//
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/KernelSpec.h"
#include "runtime/DeviceBuffer.h"

namespace tilejit::testing {

/// Elements of one dtype in host memory, read and written as float.
struct HostTensor {
  DType type;
  size_t count;
  std::vector<unsigned char> bytes;

  HostTensor(DType t, size_t n) : type(t), count(n), bytes(n * dtypeBytes(t)) {}

  float get(size_t i) const { return loadElement(bytes.data(), type, i); }
  void set(size_t i, float v) { storeElement(bytes.data(), type, i, v); }
  void randomNormal(std::mt19937_64 &rng, float mean, float stddev) {
    std::normal_distribution<float> d(mean, stddev);
    for (size_t i = 0; i < count; ++i)
      set(i, d(rng));
  }
};

} // namespace tilejit::testing
