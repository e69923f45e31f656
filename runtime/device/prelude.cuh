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

// (An enum, not a static constexpr member, which NVRTC emits as a device global.)
template <class A, class B> struct same_type {
  enum { value = 0 };
};
template <class A> struct same_type<A, A> {
  enum { value = 1 };
};

/// One value of storage type T as a U (through f32; exact when widening).
template <class U, class T> TJ_DEVICE U cast(T v) {
  if constexpr (same_type<U, T>::value)
    return v;
  else
    return from_float<U>(to_float(v));
}

/// A constant as bf16, in plain arithmetic the compiler folds (the asm of
/// from_float it cannot): rounded to nearest even, NaN kept quiet.
TJ_DEVICE bf16 bf16_constant(float v) {
  const uint32_t u = __float_as_uint(v);
  return bf16{uint16_t(v != v ? 0x7fc0u : (u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
}

/// Raw bits of a storage type, for packing vector memory accesses.
TJ_DEVICE uint32_t to_bits(float v) { return __float_as_uint(v); }
TJ_DEVICE uint32_t to_bits(bf16 v) { return v.bits; }
TJ_DEVICE uint32_t to_bits(f16 v) { return v.bits; }
template <class T> TJ_DEVICE T from_bits(uint32_t b);
template <> TJ_DEVICE float from_bits<float>(uint32_t b) { return __uint_as_float(b); }
template <> TJ_DEVICE bf16 from_bits<bf16>(uint32_t b) { return bf16{uint16_t(b)}; }
template <> TJ_DEVICE f16 from_bits<f16>(uint32_t b) { return f16{uint16_t(b)}; }

/// Element `h` of a 32-bit word of memory holding T, as a U: a bf16 widens
/// to f32 by placing its bits in the high half, with no 16-bit step.
template <class T, class U> TJ_DEVICE U unpack(uint32_t w, int h) {
  if constexpr (sizeof(T) == 2)
    return cast<U>(from_bits<T>(h ? w >> 16 : w));
  else
    return cast<U>(from_bits<T>(w));
}
template <> TJ_DEVICE float unpack<bf16, float>(uint32_t w, int h) {
  return __uint_as_float(h ? w & 0xffff0000u : w << 16);
}

/// Two U values as the 32-bit word of 16-bit T that memory holds (`lo` at the
/// lower address); f32 narrows both with one instruction.
template <class T, class U> TJ_DEVICE uint32_t pack2(U lo, U hi) {
  return to_bits(cast<T>(lo)) | (to_bits(cast<T>(hi)) << 16);
}
template <> TJ_DEVICE uint32_t pack2<bf16, float>(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
template <> TJ_DEVICE uint32_t pack2<f16, float>(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

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
