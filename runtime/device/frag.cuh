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

template <int K> TJ_DEVICE Frag<float, K> splat(float s) {
  Frag<float, K> r;
#pragma unroll
  for (int i = 0; i < K; ++i)
    r.v[i] = s;
  return r;
}

/// Widens or narrows every element (bf16/f16 <-> f32).
template <class U, class T, int K> TJ_DEVICE Frag<U, K> convert(const Frag<T, K> &a) {
  Frag<U, K> r;
#pragma unroll
  for (int i = 0; i < K; ++i)
    r.v[i] = from_float<U>(to_float(a.v[i]));
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
