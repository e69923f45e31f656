//===- DeviceBuffer.h - device memory owned by the host -----------*- C++ -*-===//
//
// A plain device allocation through the driver, freed on destruction. Used by
// the tuner's benchmark harness, the GPU tests and the benchmarks.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cuda.h>
#include <vector>

#include "core/KernelSpec.h"
#include "runtime/CudaDriver.h"

namespace tilejit {

class DeviceBuffer {
public:
  static llvm::Expected<DeviceBuffer> allocate(size_t bytes);
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer &&o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = 0; }
  DeviceBuffer &operator=(DeviceBuffer &&o) noexcept;
  ~DeviceBuffer();

  CUdeviceptr ptr() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  llvm::Error upload(const void *src, size_t bytes);
  llvm::Error download(void *dst, size_t bytes) const;
  /// Fills every byte with `value` (0xFF makes NaNs of bf16, f16 and f32).
  llvm::Error fill(unsigned char value, CUstream stream = nullptr);

  template <class T> llvm::Error upload(const std::vector<T> &v) {
    return upload(v.data(), v.size() * sizeof(T));
  }
  template <class T> llvm::Error download(std::vector<T> &v) const {
    return download(v.data(), v.size() * sizeof(T));
  }

private:
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
};

/// Device memory for one launch's scratch (split-K's partial sums, a fused
/// attention backward's dQ sums): taken from a memory pool of tilejit's on
/// the context's device, ordered on `stream` (CUDA graph capture records
/// it), and given back on the stream after the work queued with it. The
/// pool keeps what it reserved instead of returning it to the system at
/// every synchronization (the process's default pool, with its threshold of
/// 0, made every first launch after a synchronize map its memory anew); the
/// process's default pool is left as others set it.
class StreamBuffer {
public:
  /// `bytes` on `ctx`'s device; `what` names it in an error.
  static llvm::Expected<StreamBuffer> take(CUcontext ctx, size_t bytes, CUstream stream,
                                           const llvm::Twine &what);
  StreamBuffer() = default;
  StreamBuffer(StreamBuffer &&o) noexcept : ptr_(o.ptr_), stream_(o.stream_) { o.ptr_ = 0; }
  StreamBuffer &operator=(StreamBuffer &&o) noexcept;
  /// Gives it back if giveBack was not called (an error then is dropped).
  ~StreamBuffer();
  /// Returns the pool on `ctx`'s device's memory to the system down to
  /// `keepBytes` reserved, except what backs scratch still taken or still
  /// in use by work queued on a stream (the driver keeps that); the bytes
  /// it then holds reserved (0 where no scratch was ever taken there).
  static llvm::Expected<uint64_t> release(CUcontext ctx, uint64_t keepBytes);
  CUdeviceptr ptr() const { return ptr_; }
  /// Gives it back on its stream; `err`, or else the driver's refusal (with
  /// `err` set, a refusal is dropped and the memory stays in the pool).
  llvm::Error giveBack(llvm::Error err = llvm::Error::success());

private:
  CUdeviceptr ptr_ = 0;
  CUstream stream_ = nullptr;
};

/// Host conversions for the 16-bit storage types (round to nearest even).
uint16_t floatToBf16(float f);
float bf16ToFloat(uint16_t b);
uint16_t floatToF16(float f);
float f16ToFloat(uint16_t h);
/// Element `i` of a host array of `t`, as float; and the inverse.
float loadElement(const unsigned char *bytes, DType t, size_t i);
void storeElement(unsigned char *bytes, DType t, size_t i, float v);

} // namespace tilejit
