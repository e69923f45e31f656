// reduce.cuh - reductions across the threads of a block.
//
// Results are bitwise identical in every thread that receives them and from
// run to run: butterfly shuffles combine commutatively, and partials that
// cross warps are combined in a fixed order.
#pragma once
#include "frag.cuh"

namespace tj {

enum ReduceKind { kSum = 0, kMax = 1, kMin = 2 };

template <int KIND> TJ_DEVICE float combine(float a, float b) {
  if (KIND == kSum)
    return a + b;
  if (KIND == kMax)
    return fmaxf(a, b);
  return fminf(a, b);
}

/// Reduces along a tile row (#tile.blocked -> #tile.slice<dim = 1>): over this
/// thread's K elements, then over the TC lanes of its row. `scratch` holds at
/// least TR * (TC / 32) floats when TC > 32.
template <int KIND, int TR, int TC, int K>
TJ_DEVICE Frag<float, 1> reduce_row(const Frag<float, K> &x, float *scratch) {
  float acc = x.v[0];
#pragma unroll
  for (int i = 1; i < K; ++i)
    acc = combine<KIND>(acc, x.v[i]);
  constexpr int kWarpLanes = TC < 32 ? TC : 32;
#pragma unroll
  for (int off = kWarpLanes / 2; off > 0; off /= 2)
    acc = combine<KIND>(acc, __shfl_xor_sync(0xffffffffu, acc, off));
  if (TC > 32) {
    constexpr int W = TC / 32;
    const int tid = threadIdx.x, row = tid / TC, lane = tid % TC;
    __syncthreads(); // the scratch may still be read by an earlier reduction
    if (lane % 32 == 0)
      scratch[row * W + lane / 32] = acc;
    __syncthreads();
    acc = scratch[row * W];
#pragma unroll
    for (int w = 1; w < W; ++w)
      acc = combine<KIND>(acc, scratch[row * W + w]);
  }
  Frag<float, 1> r;
  r.v[0] = acc;
  return r;
}

/// Reduces along tile columns (#tile.blocked -> #tile.slice<dim = 0>): over
/// the TR rows of threads. `scratch` holds at least TR * TC * K floats when
/// TR > 1.
template <int KIND, int TR, int TC, int K>
TJ_DEVICE Frag<float, K> reduce_col(const Frag<float, K> &x, float *scratch) {
  if (TR == 1)
    return x;
  const int tid = threadIdx.x, row = tid / TC, lane = tid % TC;
  __syncthreads();
#pragma unroll
  for (int j = 0; j < K; ++j)
    scratch[(row * K + j) * TC + lane] = x.v[j];
  __syncthreads();
  Frag<float, K> r;
#pragma unroll
  for (int j = 0; j < K; ++j) {
    float acc = scratch[j * TC + lane];
    for (int q = 1; q < TR; ++q)
      acc = combine<KIND>(acc, scratch[(q * K + j) * TC + lane]);
    r.v[j] = acc;
  }
  return r;
}

//===----------------------------------------------------------------------===//
// Row reductions across a cluster (sm_90): a program instance of C blocks on
// neighbouring multiprocessors, which read each other's shared memory. The
// cluster queries and cluster_sync are in prelude.cuh.
//===----------------------------------------------------------------------===//

TJ_DEVICE uint32_t shared_address(const void *p) {
  uint32_t a;
  asm("{\n\t.reg .u64 t;\n\tcvta.to.shared.u64 t, %1;\n\tcvt.u32.u64 %0, t;\n\t}"
      : "=r"(a)
      : "l"(p));
  return a;
}

/// The address of the same shared variable in block `rank` of the cluster.
TJ_DEVICE uint32_t peer_address(uint32_t local, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(local), "r"(rank));
  return r;
}

/// Where the blocks of a cluster exchange row results: two rounds of C x ROWS
/// floats and a transaction barrier for each. Round r % 2 of a block receives
/// every block's results of reduction r; the barrier's phase completes once
/// all C * rows floats have landed.
template <int C, int ROWS> struct ClusterSlots {
  float slots[2][C][ROWS];
  alignas(8) uint64_t bars[2];
};

/// Once, before any cluster reduction: the barriers are set up, and no block
/// sends before every block's are.
template <int C, int ROWS> TJ_DEVICE void cluster_slots_init(ClusterSlots<C, ROWS> &cs) {
  if (threadIdx.x == 0) {
#pragma unroll
    for (int i = 0; i < 2; ++i)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(&cs.bars[i]))
                   : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  cluster_sync();
}

/// reduce_row across the C blocks of a cluster. Lane 0 of each row of threads
/// sends its block's result to every block of the cluster (its own included)
/// with asynchronous stores that count against the receiver's transaction
/// barrier: no block waits for another's memory traffic, only for the C
/// results of each row. Every block then adds the C results in rank order, so
/// all get the same bits. Rounds alternate between two sets of slots; a block
/// sends round r + 2 only after it has passed round r + 1, which needs every
/// block to have sent round r + 1, after reading round r (the barrier before
/// sending orders a block's own readers).
template <int KIND, int TR, int TC, int K, int C, int ROWS>
TJ_DEVICE Frag<float, 1> reduce_row_cluster(const Frag<float, K> &x, float *scratch,
                                            ClusterSlots<C, ROWS> &cs, unsigned &round) {
  static_assert(TR <= ROWS, "cluster slots too small");
  Frag<float, 1> local = reduce_row<KIND, TR, TC, K>(x, scratch);
  const int tid = threadIdx.x, row = tid / TC;
  const unsigned set = round & 1u, parity = (round >> 1) & 1u;
  ++round;
  const uint32_t bar = shared_address(&cs.bars[set]);
  // This block's reads of the previous round of this set are done (reduce_row
  // already synchronized the block when its lanes span several warps).
  if (TC <= 32)
    __syncthreads();
  // Relaxed: a release would first wait for this thread's loads in flight
  // (the next rows, prefetched).
  if (tid == 0)
    asm volatile("mbarrier.arrive.expect_tx.relaxed.cta.shared::cta.b64 _, [%0], %1;" ::"r"(bar),
                 "r"(uint32_t(C * TR * sizeof(float)))
                 : "memory");
  if (tid % TC == 0) {
    const uint32_t slot = shared_address(&cs.slots[set][cluster_rank()][row]);
    const uint32_t bits = __float_as_uint(local.v[0]);
#pragma unroll
    for (int q = 0; q < C; ++q)
      asm volatile(
          "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(
              peer_address(slot, q)),
          "r"(bits), "r"(peer_address(bar, q))
          : "memory");
  }
  uint32_t done = 0;
  while (!done)
    asm volatile("{\n\t.reg .pred p;\n\t"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                 "selp.u32 %0, 1, 0, p;\n\t}"
                 : "=r"(done)
                 : "r"(bar), "r"(parity)
                 : "memory");
  float acc = cs.slots[set][0][row];
#pragma unroll
  for (int q = 1; q < C; ++q)
    acc = combine<KIND>(acc, cs.slots[set][q][row]);
  Frag<float, 1> r;
  r.v[0] = acc;
  return r;
}

} // namespace tj
