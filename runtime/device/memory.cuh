// memory.cuh - moving tiles between global memory and registers.
//
// Each function serves one tile layout: the thread's position in the block
// (row of threads `tid / TC`, lane `tid % TC`) decides which elements it
// moves. Runs of VEC contiguous elements move as one access of up to 16 bytes
// when they lie wholly inside the operand; the partial run at a ragged edge
// moves element by element, masked.
//
// A tile of f32 may access bf16/f16 memory (T, the memory's type, differs
// from U, the tile's): loads widen each word as it arrives, stores round two
// elements into one word.
#pragma once
#include "frag.cuh"

namespace tj {

// How an access uses the caches. Loads: kCached and kStream read through the
// read-only (non-coherent) path, kStream without L1 allocation, for data read
// once; kCoherent is a plain load, for an operand the kernel also writes.
// Stores: kStream is evict-first (.cs), for data not read again soon.
enum Cache : int { kCached = 0, kStream = 1, kCoherent = 2 };

namespace detail {

template <int W> struct Words { uint32_t w[W]; };

// Coherent loads also order against the plain stores around them ("memory").
#define TJ_LOAD_WORDS(W, CACHE, OPS, ...)                                                          \
  template <> TJ_DEVICE Words<W> load_words<W, CACHE>(const void *p) {                             \
    Words<W> r;                                                                                    \
    if constexpr (CACHE == kCoherent)                                                              \
      asm volatile(OPS:__VA_ARGS__ : "l"(p) : "memory");                                           \
    else                                                                                           \
      asm volatile(OPS:__VA_ARGS__ : "l"(p));                                                      \
    return r;                                                                                      \
  }
#define TJ_LOAD_WORDS_ALL(CACHE, OP)                                                               \
  TJ_LOAD_WORDS(4, CACHE, OP ".v4.u32 {%0, %1, %2, %3}, [%4];", "=r"(r.w[0]), "=r"(r.w[1]),        \
                "=r"(r.w[2]), "=r"(r.w[3]))                                                        \
  TJ_LOAD_WORDS(2, CACHE, OP ".v2.u32 {%0, %1}, [%2];", "=r"(r.w[0]), "=r"(r.w[1]))                \
  TJ_LOAD_WORDS(1, CACHE, OP ".u32 %0, [%1];", "=r"(r.w[0]))
template <int W, int CACHE> TJ_DEVICE Words<W> load_words(const void *p);
TJ_LOAD_WORDS_ALL(kCached, "ld.global.nc")
TJ_LOAD_WORDS_ALL(kStream, "ld.global.nc.L1::no_allocate")
TJ_LOAD_WORDS_ALL(kCoherent, "ld.global")
#undef TJ_LOAD_WORDS_ALL
#undef TJ_LOAD_WORDS

template <int W, bool STREAM> TJ_DEVICE void store_words(void *p, const Words<W> &r);
#define TJ_STORE_WORDS(STREAM, OP)                                                                 \
  template <> TJ_DEVICE void store_words<4, STREAM>(void *p, const Words<4> &r) {                  \
    asm volatile(OP ".v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(r.w[0]), "r"(r.w[1]),          \
                 "r"(r.w[2]), "r"(r.w[3])                                                          \
                 : "memory");                                                                      \
  }                                                                                                \
  template <> TJ_DEVICE void store_words<2, STREAM>(void *p, const Words<2> &r) {                  \
    asm volatile(OP ".v2.u32 [%0], {%1, %2};" ::"l"(p), "r"(r.w[0]), "r"(r.w[1]) : "memory");      \
  }                                                                                                \
  template <> TJ_DEVICE void store_words<1, STREAM>(void *p, const Words<1> &r) {                  \
    asm volatile(OP ".u32 [%0], %1;" ::"l"(p), "r"(r.w[0]) : "memory");                            \
  }
TJ_STORE_WORDS(false, "st.global")
TJ_STORE_WORDS(true, "st.global.cs")
#undef TJ_STORE_WORDS

/// Loads the run of VEC elements at p[c .. c+VEC) into out[at ..] as U,
/// reading only elements below `limit` of a row that exists (`ok`); the
/// others become `pad`.
/// FULL: the run is known to lie inside the row, so only the row check `ok`
/// remains and the masked path is not even instantiated.
/// (The row is checked per run, not once around all of them: a branch that
/// returns a whole padded fragment made NVVM keep large fragments in local
/// memory, 2.4 KB per thread for 64 elements held across a persistent loop.)
/// EVEN: the row length is a multiple of VEC. Runs start at multiples of VEC
/// (vector accesses need it), so a run lies wholly inside or wholly outside
/// the row: one check, and no element-wise path that would keep the compiler
/// from unrolling loops around the access.
template <class T, class U, int VEC, int CACHE, bool FULL, bool EVEN, int K>
TJ_DEVICE void load_run(Frag<U, K> &out, int at, const T *p, int64_t c, int64_t limit, bool ok,
                        U pad) {
  constexpr int kBytes = VEC * int(sizeof(T));
  if constexpr (kBytes >= 4) {
    if (ok && (FULL || (EVEN ? c < limit : c + VEC <= limit))) {
      // At most 16 bytes per access: wider runs (8 x f32) take several.
      constexpr int W = kBytes >= 16 ? 4 : kBytes / 4;
      constexpr int kPerAccess = W * 4 / int(sizeof(T));
      constexpr int kPerWord = 4 / int(sizeof(T));
#pragma unroll
      for (int g = 0; g < VEC / kPerAccess; ++g) {
        Words<W> w = load_words<W, CACHE>(p + c + g * kPerAccess);
#pragma unroll
        for (int e = 0; e < kPerAccess; ++e)
          out.v[at + g * kPerAccess + e] = unpack<T, U>(w.w[e / kPerWord], e % kPerWord);
      }
      return;
    }
    if constexpr (FULL || EVEN) {
#pragma unroll
      for (int e = 0; e < VEC; ++e)
        out.v[at + e] = pad;
      return;
    }
  }
#pragma unroll
  for (int e = 0; e < VEC; ++e)
    out.v[at + e] = (ok && (FULL || c + e < limit)) ? cast<U>(p[c + e]) : pad;
}

/// Stores the run in[at ..] of U to p[c .. c+VEC) as T, below `limit`.
template <class T, class U, int VEC, int CACHE, bool FULL, bool EVEN, int K>
TJ_DEVICE void store_run(const Frag<U, K> &in, int at, T *p, int64_t c, int64_t limit) {
  constexpr int kBytes = VEC * int(sizeof(T));
  if constexpr (kBytes >= 4) {
    if (FULL || (EVEN ? c < limit : c + VEC <= limit)) {
      constexpr int W = kBytes >= 16 ? 4 : kBytes / 4;
      constexpr int kPerAccess = W * 4 / int(sizeof(T));
#pragma unroll
      for (int g = 0; g < VEC / kPerAccess; ++g) {
        const int e = at + g * kPerAccess;
        Words<W> w;
#pragma unroll
        for (int i = 0; i < W; ++i) {
          if constexpr (sizeof(T) == 2)
            w.w[i] = pack2<T, U>(in.v[e + 2 * i], in.v[e + 2 * i + 1]);
          else
            w.w[i] = to_bits(cast<T>(in.v[e + i]));
        }
        store_words<W, CACHE == kStream>(p + c + g * kPerAccess, w);
      }
      return;
    }
    if constexpr (FULL || EVEN)
      return;
  }
#pragma unroll
  for (int e = 0; e < VEC; ++e)
    if (FULL || c + e < limit)
      p[c + e] = cast<T>(in.v[at + e]);
}

/// Offset of the tile's first row and whether the leading indices (those the
/// tile does not span) are in bounds. TILE_RANK trailing dimensions are
/// spanned by the tile.
template <class T, int R, int TILE_RANK>
TJ_DEVICE const T *leading(const View<T, R> &v, const Index<R> &at, bool &ok) {
  int64_t off = 0;
  ok = true;
#pragma unroll
  for (int d = 0; d < R - TILE_RANK; ++d) {
    ok = ok && at.i[d] < v.size[d];
    off = off * v.size[d] + at.i[d];
  }
#pragma unroll
  for (int d = R - TILE_RANK; d < R; ++d)
    off *= v.size[d];
  return v.ptr + off;
}

/// This thread's row of a rank-2 tile at `at` (row of threads tid / TC): its
/// start, whether it exists, and the row length (COLS when known).
template <class T, int TC, int64_t COLS, int R>
TJ_DEVICE const T *tile_row(const View<T, R> &v, const Index<R> &at, bool &ok, int64_t &ncols) {
  static_assert(R >= 2, "a rank-2 tile needs a rank-2 operand");
  const T *base = leading<T, R, 2>(v, at, ok);
  ncols = COLS >= 0 ? COLS : v.size[R - 1];
  const int64_t row = at.i[R - 2] + int(threadIdx.x) / TC;
  ok = ok && row < v.size[R - 2];
  return base + row * ncols;
}

/// The padding as the memory holds it (rounded to T), then as the tile's U.
template <class T, class U> TJ_DEVICE U pad_value(float pad) {
  if constexpr (same_type<T, bf16>::value)
    return cast<U>(bf16_constant(pad));
  else
    return cast<U>(from_float<T>(pad));
}

/// How many leading chunks of a tile starting at column COL0 of a row of COLS
/// columns are whole for every lane (either -1: not known at compile time,
/// then none is); the remaining ones of CH are masked.
/// (A function, not a variable template: NVRTC would emit the variable as a
/// device global.)
template <int VEC, int TC, int CH, int64_t COLS, int64_t COL0> constexpr int fullChunks() {
  if (COLS < 0 || COL0 < 0 || COL0 >= COLS)
    return 0;
  const int64_t whole = (COLS - COL0) / (int64_t(TC) * VEC);
  return whole < CH ? int(whole) : CH;
}

/// This thread's CH runs of a row starting at p: run k at column c0 + k*TC*VEC
/// (the tile starts at column COL0, when known). `ok`: the row exists.
/// Whole runs first (FULL, no column checks), then the ragged ones.
template <class T, class U, int VEC, int TC, int CH, int64_t COLS, int64_t COL0, int CACHE>
TJ_DEVICE Frag<U, CH * VEC> load_chunks(const T *p, int64_t c0, int64_t ncols, bool ok, U pad) {
  constexpr int kFull = fullChunks<VEC, TC, CH, COLS, COL0>();
  constexpr bool kEven = COLS >= 0 && COLS % VEC == 0;
  Frag<U, CH * VEC> out;
#pragma unroll
  for (int k = 0; k < kFull; ++k)
    load_run<T, U, VEC, CACHE, true, kEven>(out, k * VEC, p, c0 + int64_t(k) * TC * VEC, ncols, ok,
                                            pad);
  // (Not even instantiated when every run is whole.)
  if constexpr (kFull < CH) {
#pragma unroll
    for (int k = kFull; k < CH; ++k)
      load_run<T, U, VEC, CACHE, false, kEven>(out, k * VEC, p, c0 + int64_t(k) * TC * VEC, ncols,
                                               ok, pad);
  }
  return out;
}

template <class T, class U, int VEC, int TC, int CH, int64_t COLS, int64_t COL0, int CACHE>
TJ_DEVICE void store_chunks(const Frag<U, CH * VEC> &in, T *p, int64_t c0, int64_t ncols, bool ok) {
  constexpr int kFull = fullChunks<VEC, TC, CH, COLS, COL0>();
  constexpr bool kEven = COLS >= 0 && COLS % VEC == 0;
  if (!ok)
    return;
#pragma unroll
  for (int k = 0; k < kFull; ++k)
    store_run<T, U, VEC, CACHE, true, kEven>(in, k * VEC, p, c0 + int64_t(k) * TC * VEC, ncols);
  if constexpr (kFull < CH) {
#pragma unroll
    for (int k = kFull; k < CH; ++k)
      store_run<T, U, VEC, CACHE, false, kEven>(in, k * VEC, p, c0 + int64_t(k) * TC * VEC, ncols);
  }
}

} // namespace detail

/// Rank-2 tile with layout #tile.blocked<VEC, TR, TC>, CH chunks per thread.
/// COLS is the operand's last size and COL0 the tile's first column when known
/// at compile time, else -1; CACHE is a detail::Cache; U the tile's element
/// type.
template <class T, int VEC, int TR, int TC, int CH, int64_t COLS, int64_t COL0, int CACHE,
          class U = T, int R>
TJ_DEVICE Frag<U, CH * VEC> load_tile(const View<T, R> &v, Index<R> at, float pad) {
  bool ok;
  int64_t ncols;
  const T *p = detail::tile_row<T, TC, COLS>(v, at, ok, ncols);
  const U padv = detail::pad_value<T, U>(pad);
  return detail::load_chunks<T, U, VEC, TC, CH, COLS, COL0, CACHE>(
      p, at.i[R - 1] + int64_t(int(threadIdx.x) % TC) * VEC, ncols, ok, padv);
}

template <class T, int VEC, int TR, int TC, int CH, int64_t COLS, int64_t COL0, int CACHE,
          class U = T, int R>
TJ_DEVICE void store_tile(const Frag<U, CH * VEC> &in, const View<T, R> &v, Index<R> at) {
  bool ok;
  int64_t ncols;
  T *p = const_cast<T *>(detail::tile_row<T, TC, COLS>(v, at, ok, ncols));
  detail::store_chunks<T, U, VEC, TC, CH, COLS, COL0, CACHE>(
      in, p, at.i[R - 1] + int64_t(int(threadIdx.x) % TC) * VEC, ncols, ok);
}

/// Rank-1 tile of columns (#tile.slice<dim = 0>): every row of threads holds
/// the same columns; on store, only the first row of threads writes.
template <class T, int VEC, int TR, int TC, int CH, int64_t COLS, int64_t COL0, int CACHE,
          class U = T, int R>
TJ_DEVICE Frag<U, CH * VEC> load_cols(const View<T, R> &v, Index<R> at, float pad) {
  bool ok;
  const T *p = detail::leading<T, R, 1>(v, at, ok);
  const int lane = threadIdx.x % TC;
  const int64_t ncols = COLS >= 0 ? COLS : v.size[R - 1];
  const U padv = detail::pad_value<T, U>(pad);
  return detail::load_chunks<T, U, VEC, TC, CH, COLS, COL0, CACHE>(
      p, at.i[R - 1] + int64_t(lane) * VEC, ncols, ok, padv);
}

template <class T, int VEC, int TR, int TC, int CH, int64_t COLS, int64_t COL0, int CACHE,
          class U = T, int R>
TJ_DEVICE void store_cols(const Frag<U, CH * VEC> &in, const View<T, R> &v, Index<R> at) {
  bool ok;
  T *p = const_cast<T *>(detail::leading<T, R, 1>(v, at, ok));
  const int tid = threadIdx.x, lane = tid % TC;
  ok = ok && tid / TC == 0;
  const int64_t ncols = COLS >= 0 ? COLS : v.size[R - 1];
  detail::store_chunks<T, U, VEC, TC, CH, COLS, COL0, CACHE>(
      in, p, at.i[R - 1] + int64_t(lane) * VEC, ncols, ok);
}

/// Rank-1 tile of one value per row of threads (#tile.slice<dim = 1>); on
/// store, only lane 0 of each row writes.
template <class T, int TR, int TC, class U = T, int R>
TJ_DEVICE Frag<U, 1> load_rows(const View<T, R> &v, Index<R> at, float pad) {
  bool ok;
  const T *p = detail::leading<T, R, 1>(v, at, ok);
  const int64_t row = at.i[R - 1] + threadIdx.x / TC;
  Frag<U, 1> out;
  out.v[0] = (ok && row < v.size[R - 1]) ? cast<U>(p[row]) : detail::pad_value<T, U>(pad);
  return out;
}

template <class T, int TR, int TC, class U = T, int R>
TJ_DEVICE void store_rows(const Frag<U, 1> &in, const View<T, R> &v, Index<R> at) {
  bool ok;
  T *p = const_cast<T *>(detail::leading<T, R, 1>(v, at, ok));
  const int64_t row = at.i[R - 1] + threadIdx.x / TC;
  if (ok && threadIdx.x % TC == 0 && row < v.size[R - 1])
    p[row] = cast<T>(in.v[0]);
}

} // namespace tj
