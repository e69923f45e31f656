//===- TensorMap.cpp --------------------------------------------------------===//
#include "runtime/TensorMap.h"

#include "runtime/CudaDriver.h"

#include <algorithm>

namespace tilejit {

namespace {
llvm::Error error(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), "tensor map: " + msg);
}

bool sameDesc(const TensorMapDesc &a, const TensorMapDesc &b) {
  if (a.dtype != b.dtype || a.rank != b.rank || a.address != b.address || a.swizzle != b.swizzle ||
      a.oobNaN != b.oobNaN)
    return false;
  for (int i = 0; i < a.rank; ++i)
    if (a.dims[i] != b.dims[i] || a.box[i] != b.box[i] ||
        (i + 1 < a.rank && a.strideBytes[i] != b.strideBytes[i]))
      return false;
  return true;
}

/// The last maps this thread made, by their descriptions.
struct MapCache {
  static constexpr int kEntries = 64;
  TensorMapDesc desc[kEntries];
  CUtensorMap map[kEntries];
  int used = 0, next = 0;
  uint64_t encodes = 0;

  const CUtensorMap *find(const TensorMapDesc &d) const {
    for (int i = 0; i < used; ++i)
      if (sameDesc(desc[i], d))
        return &map[i];
    return nullptr;
  }
  void add(const TensorMapDesc &d, const CUtensorMap &m) {
    desc[next] = d;
    map[next] = m;
    next = (next + 1) % kEntries;
    used = std::min(used + 1, kEntries);
  }
};
thread_local MapCache cache;

llvm::Expected<CUtensorMap> encode(const TensorMapDesc &d);
} // namespace

uint64_t tensorMapEncodes() { return cache.encodes; }

llvm::Expected<CUtensorMap> encodeTensorMap(const TensorMapDesc &d) {
  if (const CUtensorMap *hit = cache.find(d))
    return *hit;
  auto map = encode(d);
  if (map) {
    ++cache.encodes;
    cache.add(d, *map);
  }
  return map;
}

namespace {
llvm::Expected<CUtensorMap> encode(const TensorMapDesc &d) {
  if (d.rank < 1 || d.rank > 5)
    return error("rank must be 1 to 5, got " + llvm::Twine(d.rank));
  if (d.address == 0 || d.address % 16 != 0)
    return error("the global address must be non-null and 16-byte aligned");
  int64_t elem = dtypeBytes(d.dtype);
  cuuint64_t dims[5], strides[4];
  cuuint32_t box[5], elementStrides[5];
  for (int i = 0; i < d.rank; ++i) {
    if (d.dims[i] < 1 || d.dims[i] > (int64_t(1) << 32))
      return error("dims[" + llvm::Twine(i) + "] = " + llvm::Twine(d.dims[i]) +
                   " is outside [1, 2^32]");
    if (d.box[i] < 1 || d.box[i] > 256)
      return error("box[" + llvm::Twine(i) + "] = " + llvm::Twine(d.box[i]) +
                   " is outside [1, 256]");
    dims[i] = cuuint64_t(d.dims[i]);
    box[i] = d.box[i];
    elementStrides[i] = 1;
  }
  for (int i = 0; i + 1 < d.rank; ++i) {
    if (d.strideBytes[i] <= 0 || d.strideBytes[i] % 16 != 0 ||
        d.strideBytes[i] >= (int64_t(1) << 40))
      return error("strideBytes[" + llvm::Twine(i) + "] = " + llvm::Twine(d.strideBytes[i]) +
                   " is not a positive multiple of 16 below 2^40");
    strides[i] = cuuint64_t(d.strideBytes[i]);
  }
  int64_t innerBytes = int64_t(d.box[0]) * elem;
  if (innerBytes % 16 != 0)
    return error("the box's inner dimension is " + llvm::Twine(innerBytes) +
                 " bytes, not a multiple of 16");
  const int64_t span[] = {0, 32, 64, 128};
  if (d.swizzle != TensorMapDesc::None && innerBytes > span[d.swizzle])
    return error("the box's inner dimension is " + llvm::Twine(innerBytes) +
                 " bytes, more than the " + llvm::Twine(span[d.swizzle]) + "-byte swizzle span");
  CUtensorMapDataType type = d.dtype == DType::BF16  ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                             : d.dtype == DType::F16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                     : CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  const CUtensorMapSwizzle swizzle[] = {CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_SWIZZLE_32B,
                                        CU_TENSOR_MAP_SWIZZLE_64B, CU_TENSOR_MAP_SWIZZLE_128B};
  auto drv = CudaDriver::get();
  if (!drv)
    return drv.takeError();
  CUtensorMap map;
  TJ_CU_CHECK(*drv, cuTensorMapEncodeTiled(
                        &map, type, cuuint32_t(d.rank), reinterpret_cast<void *>(d.address), dims,
                        strides, box, elementStrides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                        swizzle[d.swizzle], CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                        d.oobNaN ? CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA
                                 : CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
  return map;
}
} // namespace

} // namespace tilejit
