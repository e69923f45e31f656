// frag.cuh - the elements of a tile that one thread holds, and elementwise
// arithmetic on them.
//
// A tile value lowers to a Frag<T, K>: this thread's K elements, passed by
// value. Every index is a compile-time constant after unrolling, so a Frag
// lives in registers.
#pragma once
#include "prelude.cuh"

namespace tj {

template <class T, int K> struct Frag { T v[K]; };

/// 16-bit elements are held as memory holds them, in pairs: element i in the
/// low (even i) or high (odd i) half of word i / 2. A vector access moves
/// whole words, and widening one costs a shift or a mask: no 16-bit values
/// to cut out, carry and extend (in the PTX, a third of a kernel that keeps
/// bf16 tiles across a loop).
template <int K> struct PackedFrag { uint32_t w[(K + 1) / 2]; };
template <int K> struct Frag<bf16, K> : PackedFrag<K> {};
template <int K> struct Frag<f16, K> : PackedFrag<K> {};

/// Element i of any fragment, read or written.
template <class T, int K> TJ_DEVICE T get(const Frag<T, K> &f, int i) {
  if constexpr (sizeof(T) == 2)
    return from_bits<T>(i % 2 ? f.w[i / 2] >> 16 : f.w[i / 2]);
  else
    return f.v[i];
}
template <class T, int K> TJ_DEVICE void set(Frag<T, K> &f, int i, T x) {
  if constexpr (sizeof(T) == 2) {
    uint32_t &w = f.w[i / 2];
    w = i % 2 ? (w & 0xffffu) | (to_bits(x) << 16) : (w & 0xffff0000u) | to_bits(x);
  } else {
    f.v[i] = x;
  }
}

template <int K> TJ_DEVICE Frag<float, K> splat(float s) {
  Frag<float, K> r;
#pragma unroll
  for (int i = 0; i < K; ++i)
    r.v[i] = s;
  return r;
}

/// Widens or narrows every element (bf16/f16 <-> f32): a word of two 16-bit
/// elements at a time.
template <class U, class T, int K> TJ_DEVICE Frag<U, K> convert(const Frag<T, K> &a) {
  Frag<U, K> r{};
  if constexpr (sizeof(T) == 2 && sizeof(U) == 4) {
#pragma unroll
    for (int i = 0; i < K; ++i)
      r.v[i] = unpack<T, U>(a.w[i / 2], i % 2);
  } else if constexpr (sizeof(T) == 4 && sizeof(U) == 2) {
#pragma unroll
    for (int i = 0; i < K; i += 2)
      r.w[i / 2] = pack2<U, T>(a.v[i], i + 1 < K ? a.v[i + 1] : T(0));
  } else {
#pragma unroll
    for (int i = 0; i < K; ++i)
      set(r, i, cast<U>(get(a, i)));
  }
  return r;
}

#define TJ_BINARY(name, expr)                                                                      \
  template <int K>                                                                                 \
  TJ_DEVICE Frag<float, K> name(const Frag<float, K> &a, const Frag<float, K> &b) {                \
    Frag<float, K> r;                                                                              \
    _Pragma("unroll") for (int i = 0; i < K; ++i) {                                                \
      float x = a.v[i], y = b.v[i];                                                                \
      r.v[i] = (expr);                                                                             \
    }                                                                                              \
    return r;                                                                                      \
  }
TJ_BINARY(add, x + y)
TJ_BINARY(sub, x - y)
TJ_BINARY(mul, x *y)
TJ_BINARY(div, x / y)
TJ_BINARY(max, fmaxf(x, y))
TJ_BINARY(min, fminf(x, y))
#undef TJ_BINARY

#define TJ_UNARY(name, expr)                                                                       \
  TJ_DEVICE float name(float x) { return (expr); }                                                 \
  template <int K> TJ_DEVICE Frag<float, K> name(const Frag<float, K> &a) {                        \
    Frag<float, K> r;                                                                              \
    _Pragma("unroll") for (int i = 0; i < K; ++i) r.v[i] = name(a.v[i]);                           \
    return r;                                                                                      \
  }
TJ_UNARY(neg, -x)
TJ_UNARY(rsqrt, rsqrtf(x))
TJ_UNARY(sqrt, sqrtf(x))
TJ_UNARY(exp, expf(x))
TJ_UNARY(exp2, exp2f(x))
TJ_UNARY(abs, fabsf(x))
#undef TJ_UNARY

/// A value per tile row (a #tile.slice<dim = 1>) spread over the row.
template <int K> TJ_DEVICE Frag<float, K> broadcast_row(const Frag<float, 1> &a) {
  return splat<K>(a.v[0]);
}

} // namespace tj
