//===- DeviceBuffer.cpp -----------------------------------------------------===//
#include "runtime/DeviceBuffer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>

namespace tilejit {

llvm::Expected<DeviceBuffer> DeviceBuffer::allocate(size_t bytes) {
  auto drv = CudaDriver::get();
  if (!drv)
    return drv.takeError();
  DeviceBuffer b;
  b.bytes_ = bytes;
  TJ_CU_CHECK(*drv, cuMemAlloc_v2(&b.ptr_, bytes ? bytes : 1));
  return b;
}

DeviceBuffer &DeviceBuffer::operator=(DeviceBuffer &&o) noexcept {
  if (this != &o) {
    this->~DeviceBuffer();
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = 0;
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (!ptr_)
    return;
  if (auto drv = CudaDriver::get())
    drv->cuMemFree_v2(ptr_);
  else
    llvm::consumeError(drv.takeError());
  ptr_ = 0;
}

namespace {
/// tilejit's memory pools, one per context (made at the first use, never
/// destroyed), and their lock.
struct Pools {
  std::mutex mu;
  std::map<CUcontext, CUmemoryPool> byContext;
};
Pools &pools() {
  static Pools p;
  return p;
}

/// tilejit's memory pool on `ctx`'s device, or null where none was made.
CUmemoryPool existingPool(CUcontext ctx) {
  Pools &ps = pools();
  std::lock_guard<std::mutex> lock(ps.mu);
  auto it = ps.byContext.find(ctx);
  return it == ps.byContext.end() ? nullptr : it->second;
}

/// tilejit's memory pool on `ctx`'s device (made at the first call).
llvm::Expected<CUmemoryPool> scratchPool(const CudaDriver &drv, CUcontext ctx) {
  Pools &ps = pools();
  std::lock_guard<std::mutex> lock(ps.mu);
  if (auto it = ps.byContext.find(ctx); it != ps.byContext.end())
    return it->second;
  CUdevice dev;
  TJ_CU_CHECK(drv, cuCtxGetDevice(&dev));
  CUmemPoolProps props = {};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = int(dev);
  CUmemoryPool pool;
  TJ_CU_CHECK(drv, cuMemPoolCreate(&pool, &props));
  uint64_t keep = UINT64_MAX;
  if (CUresult r = drv.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep);
      r != CUDA_SUCCESS) {
    drv.cuMemPoolDestroy(pool);
    return drv.error(r, "cuMemPoolSetAttribute (the scratch pool's threshold)");
  }
  ps.byContext.emplace(ctx, pool);
  return pool;
}
} // namespace

llvm::Expected<StreamBuffer> StreamBuffer::take(CUcontext ctx, size_t bytes, CUstream stream,
                                                const llvm::Twine &what) {
  auto drv = CudaDriver::get();
  if (!drv)
    return drv.takeError();
  auto pool = scratchPool(*drv, ctx);
  if (!pool)
    return pool.takeError();
  StreamBuffer b;
  b.stream_ = stream;
  if (CUresult r = drv->cuMemAllocFromPoolAsync(&b.ptr_, bytes ? bytes : 1, *pool, stream);
      r != CUDA_SUCCESS)
    return drv->error(r, what + " of " + llvm::Twine(uint64_t(bytes)) +
                             " bytes, ordered on the stream (cuMemAllocFromPoolAsync)");
  return b;
}

llvm::Expected<uint64_t> StreamBuffer::release(CUcontext ctx, uint64_t keepBytes) {
  CUmemoryPool pool = existingPool(ctx);
  if (!pool)
    return 0;
  auto drv = CudaDriver::get();
  if (!drv)
    return drv.takeError();
  TJ_CU_CHECK(*drv, cuMemPoolTrimTo(pool, size_t(std::min<uint64_t>(keepBytes, SIZE_MAX))));
  uint64_t bytes = 0;
  TJ_CU_CHECK(*drv, cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &bytes));
  return bytes;
}

llvm::Error StreamBuffer::giveBack(llvm::Error err) {
  if (!ptr_)
    return err;
  CUdeviceptr p = ptr_;
  ptr_ = 0;
  auto drv = CudaDriver::get();
  if (!drv) {
    if (err) {
      llvm::consumeError(drv.takeError());
      return err;
    }
    return drv.takeError();
  }
  CUresult r = drv->cuMemFreeAsync(p, stream_);
  if (r != CUDA_SUCCESS && !err)
    return drv->error(r, "giving scratch memory back (cuMemFreeAsync)");
  return err;
}

StreamBuffer &StreamBuffer::operator=(StreamBuffer &&o) noexcept {
  if (this != &o) {
    llvm::consumeError(giveBack());
    ptr_ = o.ptr_;
    stream_ = o.stream_;
    o.ptr_ = 0;
  }
  return *this;
}

StreamBuffer::~StreamBuffer() { llvm::consumeError(giveBack()); }

llvm::Error DeviceBuffer::upload(const void *src, size_t bytes) {
  auto drv = CudaDriver::get();
  if (!drv)
    return drv.takeError();
  if (bytes > bytes_)
    return llvm::createStringError(llvm::inconvertibleErrorCode(), "upload past the buffer end");
  TJ_CU_CHECK(*drv, cuMemcpyHtoD_v2(ptr_, src, bytes));
  return llvm::Error::success();
}

llvm::Error DeviceBuffer::download(void *dst, size_t bytes) const {
  auto drv = CudaDriver::get();
  if (!drv)
    return drv.takeError();
  if (bytes > bytes_)
    return llvm::createStringError(llvm::inconvertibleErrorCode(), "download past the buffer end");
  TJ_CU_CHECK(*drv, cuMemcpyDtoH_v2(dst, ptr_, bytes));
  return llvm::Error::success();
}

llvm::Error DeviceBuffer::fill(unsigned char value, CUstream stream) {
  auto drv = CudaDriver::get();
  if (!drv)
    return drv.takeError();
  TJ_CU_CHECK(*drv, cuMemsetD8Async(ptr_, value, bytes_, stream));
  return llvm::Error::success();
}

uint16_t floatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f))
    return 0x7fc0;
  u += 0x7fff + ((u >> 16) & 1);
  return uint16_t(u >> 16);
}

float bf16ToFloat(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t floatToF16(float f) {
  // IEEE binary16, round to nearest even; handles subnormals, inf, NaN.
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  uint32_t mant = x & 0x7fffff;
  int32_t exp = int32_t((x >> 23) & 0xff);
  if (exp == 0xff)
    return uint16_t(sign | 0x7c00 | (mant ? 0x200 : 0));
  int32_t e = exp - 127 + 15;
  if (e >= 31)
    return uint16_t(sign | 0x7c00);
  if (e <= 0) {
    if (e < -10)
      return uint16_t(sign);
    mant |= 0x800000;
    uint32_t shift = uint32_t(14 - e);
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1)))
      ++half;
    return uint16_t(sign | half);
  }
  uint32_t half = uint32_t(e) << 10 | (mant >> 13);
  uint32_t rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1)))
    ++half;
  return uint16_t(sign | half);
}

float f16ToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while (!(mant & 0x400));
      u = sign | uint32_t(127 - 15 - e) << 23 | (mant & 0x3ff) << 13;
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000 | mant << 13;
  } else {
    u = sign | (exp - 15 + 127) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float loadElement(const unsigned char *bytes, DType t, size_t i) {
  if (t == DType::F32) {
    float f;
    std::memcpy(&f, bytes + i * 4, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, bytes + i * 2, 2);
  return t == DType::BF16 ? bf16ToFloat(h) : f16ToFloat(h);
}

void storeElement(unsigned char *bytes, DType t, size_t i, float v) {
  if (t == DType::F32) {
    std::memcpy(bytes + i * 4, &v, 4);
    return;
  }
  uint16_t h = t == DType::BF16 ? floatToBf16(v) : floatToF16(v);
  std::memcpy(bytes + i * 2, &h, 2);
}

} // namespace tilejit
