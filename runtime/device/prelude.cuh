// prelude.cuh - what every generated kernel includes first.
//
// NVRTC defines no fixed-width integer types without toolkit headers, and
// including <cuda_bf16.h> roughly doubles a compile; this prelude defines the
// few types the generated code names, and tilejit's own 16-bit float storage
// types with their conversions.
#pragma once

#ifdef __CUDACC_RTC__
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
typedef unsigned long size_t;
typedef long ptrdiff_t;
#else
#include <cstddef>
#include <cstdint>
#endif

#define TJ_DEVICE __forceinline__ __device__

#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000) // emitted for infinite constants
#endif

namespace tj {

/// bf16 and fp16 values as stored in memory. Arithmetic happens in f32: a
/// value is widened with to_float() and narrowed with from_float<T>().
struct bf16 {
  uint16_t bits;
};
struct f16 {
  uint16_t bits;
};

TJ_DEVICE float to_float(float v) { return v; }
TJ_DEVICE float to_float(bf16 v) { return __uint_as_float(uint32_t(v.bits) << 16); }
TJ_DEVICE float to_float(f16 v) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.bits));
  return f;
}

template <class T> TJ_DEVICE T from_float(float v);
template <> TJ_DEVICE float from_float<float>(float v) { return v; }
template <> TJ_DEVICE bf16 from_float<bf16>(float v) {
  bf16 r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r.bits) : "f"(v));
  return r;
}
template <> TJ_DEVICE f16 from_float<f16>(float v) {
  f16 r;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.bits) : "f"(v));
  return r;
}

/// Raw bits of a storage type, for packing vector memory accesses.
TJ_DEVICE uint32_t to_bits(float v) { return __float_as_uint(v); }
TJ_DEVICE uint32_t to_bits(bf16 v) { return v.bits; }
TJ_DEVICE uint32_t to_bits(f16 v) { return v.bits; }
template <class T> TJ_DEVICE T from_bits(uint32_t b);
template <> TJ_DEVICE float from_bits<float>(uint32_t b) { return __uint_as_float(b); }
template <> TJ_DEVICE bf16 from_bits<bf16>(uint32_t b) { return bf16{uint16_t(b)}; }
template <> TJ_DEVICE f16 from_bits<f16>(uint32_t b) { return f16{uint16_t(b)}; }

/// A global operand: a contiguous row-major array and its sizes. The host
/// passes it by value with every size filled in (static ones too).
template <class T, int R> struct View {
  T *ptr;
  int64_t size[R];
};

/// A tuple of indices into a View.
template <int R> struct Index { int64_t i[R]; };
template <class... I> TJ_DEVICE Index<sizeof...(I)> idx(I... i) {
  return Index<sizeof...(I)>{{int64_t(i)...}};
}

template <int D, class T, int R> TJ_DEVICE size_t dim(const View<T, R> &v) {
  return size_t(v.size[D]);
}

TJ_DEVICE size_t program_id_x() { return blockIdx.x; }
TJ_DEVICE size_t num_programs_x() { return gridDim.x; }

// In a kernel that runs in clusters (sm_90) a program is a cluster: its index,
// the number of them, and this block's rank in its cluster. Every such kernel
// ends with cluster_sync, so these live here, where every kernel finds them.
#define TJ_SPECIAL_REGISTER(NAME, REG)                                                             \
  TJ_DEVICE size_t NAME() {                                                                        \
    uint32_t r;                                                                                    \
    asm("mov.u32 %0, " REG ";" : "=r"(r));                                                         \
    return r;                                                                                      \
  }
TJ_SPECIAL_REGISTER(cluster_id_x, "%%clusterid.x")
TJ_SPECIAL_REGISTER(num_clusters_x, "%%nclusterid.x")
TJ_SPECIAL_REGISTER(cluster_rank, "%%cluster_ctarank")
#undef TJ_SPECIAL_REGISTER

/// Every thread of every block of the cluster: what each wrote to shared
/// memory before is visible to all after.
TJ_DEVICE void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\t"
               "barrier.cluster.wait.acquire.aligned;" ::
                   : "memory");
}

} // namespace tj
