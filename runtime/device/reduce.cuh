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
// Clusters (sm_90): a program instance of C blocks on neighbouring
// multiprocessors, which read each other's shared memory.
//===----------------------------------------------------------------------===//

TJ_DEVICE size_t cluster_rank() {
  uint32_t r;
  asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
TJ_DEVICE size_t cluster_id_x() {
  uint32_t r;
  asm("mov.u32 %0, %%clusterid.x;" : "=r"(r));
  return r;
}
TJ_DEVICE size_t num_clusters_x() {
  uint32_t r;
  asm("mov.u32 %0, %%nclusterid.x;" : "=r"(r));
  return r;
}

/// Every thread of every block of the cluster: what each wrote to shared
/// memory before is visible to all after.
TJ_DEVICE void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\t"
               "barrier.cluster.wait.acquire.aligned;" ::
                   : "memory");
}

/// reduce_row across the C blocks of a cluster. Lane 0 of each row of threads
/// puts its block's result in `slots` (2 * TR floats: the half `phase` picks
/// alternates, so a block that runs ahead into the next reduction never
/// overwrites a slot a slower block still reads; the barrier of that next
/// reduction orders them). After a cluster barrier every thread reads its
/// row's C results in rank order: all blocks get the same bits.
template <int KIND, int TR, int TC, int K, int C>
TJ_DEVICE Frag<float, 1> reduce_row_cluster(const Frag<float, K> &x, float *scratch,
                                            float *slots, unsigned &phase) {
  Frag<float, 1> local = reduce_row<KIND, TR, TC, K>(x, scratch);
  const int tid = threadIdx.x;
  float *slot = slots + (phase & 1u) * TR + tid / TC;
  ++phase;
  if (tid % TC == 0)
    *slot = local.v[0];
  cluster_sync();
  uint32_t addr;
  asm("{\n\t.reg .u64 a;\n\tcvta.to.shared.u64 a, %1;\n\tcvt.u32.u64 %0, a;\n\t}"
      : "=r"(addr)
      : "l"(slot));
  float acc = 0.0f;
#pragma unroll
  for (int q = 0; q < C; ++q) {
    uint32_t remote;
    float v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(addr), "r"(q));
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
    acc = q == 0 ? v : combine<KIND>(acc, v);
  }
  Frag<float, 1> r;
  r.v[0] = acc;
  return r;
}

} // namespace tj
