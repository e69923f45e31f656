//===- AttentionReference.cpp - a plain attention on the device -------------===//
#include "ops/attention/AttentionReference.h"

#include <cmath>
#include <map>
#include <mutex>
#include <vector>

#include "compiler/Nvrtc.h"
#include "runtime/CudaDriver.h"
#include "runtime/DeviceBuffer.h"

namespace tilejit::attention {
namespace {

llvm::Error fail(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

// One side of the problem as the kernels read it: Q's (O, dO, dQ) or K's
// (V, dK, dV). Element x of row i of sequence s, head h, is at
// s * batch + i * row + h * head + x, or with offsets (THD) at
// (cu[s] + i) * row + h * head + x. len: a sequence's rows (THD: the most).
struct Side {
  int64_t row, head, batch;
  uint64_t cu;
  int32_t len, heads;
};
struct Problem {
  Side q, k;
  float scale;
  int32_t causal, f16, unused;
};
static_assert(sizeof(Side) == 40 && sizeof(Problem) == 96, "the kernels' layout");

// The kernels. One warp a row: lane l holds elements l, l + 32, ... of the
// row's d (E = d / 32 of them); dot products are the lanes' sums added
// across the warp.
constexpr const char *kSource = R"cuda(
typedef unsigned short u16;
typedef long long i64;
typedef unsigned long long u64;
#define TJ_INF __int_as_float(0x7f800000)
struct Side { i64 row, head, batch; u64 cu; int len, heads; };
struct Problem { Side q, k; float scale; int causal, f16, unused; };

__device__ __forceinline__ float ld(const u16 *p, i64 i, int f16) {
  u16 v = p[i];
  float r;
  if (f16)
    asm("cvt.f32.f16 %0, %1;" : "=f"(r) : "h"(v));
  else
    r = __uint_as_float(((unsigned)v) << 16);
  return r;
}
__device__ __forceinline__ u16 narrow(float f, int f16) {
  u16 r;
  if (f16)
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(f));
  else
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(f));
  return r;
}
__device__ __forceinline__ float warpSum(float v) {
  for (int o = 16; o; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ void rows(const Side &t, int s, i64 &first, int &n) {
  if (t.cu) {
    const int *cu = (const int *)t.cu;
    first = cu[s];
    n = cu[s + 1] - cu[s];
  } else {
    first = 0;
    n = t.len;
  }
}
__device__ __forceinline__ i64 at(const Side &t, int s, i64 first, int i, int h) {
  return t.cu ? (first + i) * t.row + h * t.head : s * t.batch + i * t.row + h * t.head;
}
// A warp's row (of Q; of K in dK/dV's kernel): its block's (x) warp,
// head y, sequence z; the sequence's first rows and lengths in Q and K.
struct Warp {
  int lane, r, h, s, qn, kn;
  i64 q0, k0;
  __device__ explicit Warp(const Problem &p) {
    lane = threadIdx.x & 31;
    r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    h = blockIdx.y;
    s = blockIdx.z;
    rows(p.q, s, q0, qn);
    rows(p.k, s, k0, kn);
  }
  // A query row's: the KV head its head reads, and the keys it sees (a
  // causal mask's diagonal top-left).
  __device__ int kvHead(const Problem &p) const { return h / (p.q.heads / p.k.heads); }
  __device__ int keys(const Problem &p) const { return p.causal ? min(kn, r + 1) : kn; }
};
// The row of LSE, D and D's magnitude: [b, hq, sq].
__device__ __forceinline__ i64 stat(const Problem &p, int s, int h, int i) {
  return ((i64)s * p.q.heads + h) * p.q.len + i;
}

// Forward: one warp a query row of one head; O = sum_j p_j v_j / sum_j p_j
// with the running maximum.
template <int E>
__device__ void forward(const Problem &p, const u16 *Q, const u16 *K, const u16 *V, float *o,
                        float *mag, float *lse, u16 *o16) {
  const Warp w(p);
  if (w.r >= w.qn)
    return;
  int lane = w.lane, i = w.r, h = w.h, s = w.s, g = w.kvHead(p), keys = w.keys(p);
  i64 qa = at(p.q, s, w.q0, i, h) + lane;
  float q[E], acc[E], am[E], m = -TJ_INF, l = 0;
  for (int e = 0; e < E; ++e) {
    q[e] = ld(Q, qa + 32 * e, p.f16);
    acc[e] = am[e] = 0;
  }
  for (int j = 0; j < keys; ++j) {
    i64 ka = at(p.k, s, w.k0, j, g) + lane;
    float part = 0;
    for (int e = 0; e < E; ++e)
      part += q[e] * ld(K, ka + 32 * e, p.f16);
    float sc = warpSum(part) * p.scale, mn = fmaxf(m, sc);
    float alpha = expf(m - mn), pr = expf(sc - mn);
    l = l * alpha + pr;
    for (int e = 0; e < E; ++e) {
      float v = ld(V, ka + 32 * e, p.f16);
      acc[e] = acc[e] * alpha + pr * v;
      am[e] = am[e] * alpha + pr * fabsf(v);
    }
    m = mn;
  }
  float inv = keys ? 1.0f / l : 0.0f;
  for (int e = 0; e < E; ++e) {
    i64 x = qa + 32 * e;
    if (o)
      o[x] = acc[e] * inv;
    if (mag)
      mag[x] = am[e] * inv;
    if (o16)
      o16[x] = narrow(acc[e] * inv, p.f16);
  }
  if (lane == 0)
    lse[stat(p, s, h, i)] = keys ? m + logf(l) : -TJ_INF;
}

// D = rowsum(dO * O) of each query row and the sum of its terms' magnitudes.
extern "C" __global__ void ref_dsum(Problem p, const u16 *O, const u16 *dO, float *D, float *Dmag,
                                    int d) {
  const Warp w(p);
  int lane = w.lane, i = w.r, h = w.h, s = w.s;
  if (i >= w.qn)
    return;
  i64 qa = at(p.q, s, w.q0, i, h);
  float sum = 0, abs = 0;
  for (int x = lane; x < d; x += 32) {
    float t = ld(dO, qa + x, p.f16) * ld(O, qa + x, p.f16);
    sum += t;
    abs += fabsf(t);
  }
  sum = warpSum(sum);
  abs = warpSum(abs);
  if (lane == 0) {
    D[stat(p, s, h, i)] = sum;
    Dmag[stat(p, s, h, i)] = abs;
  }
}

// dQ of one query row of one head: scale * sum_j dS_j k_j, dS_j = P_j (dP_j
// - D), P_j = exp(scale q k_j - LSE), dP_j = dO v_j.
template <int E>
__device__ void gradQ(const Problem &p, const u16 *Q, const u16 *K, const u16 *V, const u16 *dO,
                      const float *lse, const float *D, const float *Dmag, float *dq, float *mag) {
  const Warp w(p);
  if (w.r >= w.qn)
    return;
  int lane = w.lane, i = w.r, h = w.h, s = w.s, g = w.kvHead(p), keys = w.keys(p);
  i64 qa = at(p.q, s, w.q0, i, h) + lane, r = stat(p, s, h, i);
  float q[E], dout[E], acc[E], am[E];
  for (int e = 0; e < E; ++e) {
    q[e] = ld(Q, qa + 32 * e, p.f16);
    dout[e] = ld(dO, qa + 32 * e, p.f16);
    acc[e] = am[e] = 0;
  }
  float L = keys ? lse[r] : 0.0f, Dr = D[r], Dm = Dmag[r];
  for (int j = 0; j < keys; ++j) {
    i64 ka = at(p.k, s, w.k0, j, g) + lane;
    float k[E], a = 0, b = 0;
    for (int e = 0; e < E; ++e) {
      k[e] = ld(K, ka + 32 * e, p.f16);
      a += q[e] * k[e];
      b += dout[e] * ld(V, ka + 32 * e, p.f16);
    }
    float pr = expf(warpSum(a) * p.scale - L), dp = warpSum(b);
    float ds = pr * (dp - Dr), dsm = pr * (fabsf(dp) + Dm);
    for (int e = 0; e < E; ++e) {
      acc[e] += ds * k[e];
      am[e] += dsm * fabsf(k[e]);
    }
  }
  for (int e = 0; e < E; ++e) {
    dq[qa + 32 * e] = acc[e] * p.scale;
    mag[qa + 32 * e] = am[e] * p.scale;
  }
}

// dK and dV of one key row of one KV head: over the query heads of its
// group and the query rows that see it, dV = sum_i P_i dO_i, dK = scale *
// sum_i dS_i q_i.
template <int E>
__device__ void gradKV(const Problem &p, const u16 *Q, const u16 *K, const u16 *V, const u16 *dO,
                       const float *lse, const float *D, const float *Dmag, float *dk,
                       float *dkMag, float *dv, float *dvMag) {
  const Warp w(p);
  int lane = w.lane, j = w.r, g = w.h, s = w.s, qn = w.qn;
  if (j >= w.kn)
    return;
  int group = p.q.heads / p.k.heads;
  i64 ka = at(p.k, s, w.k0, j, g) + lane;
  float k[E], v[E], gk[E], mk[E], gv[E], mv[E];
  for (int e = 0; e < E; ++e) {
    k[e] = ld(K, ka + 32 * e, p.f16);
    v[e] = ld(V, ka + 32 * e, p.f16);
    gk[e] = mk[e] = gv[e] = mv[e] = 0;
  }
  // (Row i sees keys 0 .. min(kn, i + 1) - 1: key j where j <= i. Each
  // head's sums apart, then added: at most a sequence's rows of terms in
  // one f32 sum, however many heads a group has.)
  for (int h = g * group; h < (g + 1) * group; ++h) {
    float hk[E], hmk[E], hv[E], hmv[E];
    for (int e = 0; e < E; ++e)
      hk[e] = hmk[e] = hv[e] = hmv[e] = 0;
    for (int i = p.causal ? j : 0; i < qn; ++i) {
      i64 qa = at(p.q, s, w.q0, i, h) + lane, r = stat(p, s, h, i);
      float q[E], dout[E], a = 0, b = 0;
      for (int e = 0; e < E; ++e) {
        q[e] = ld(Q, qa + 32 * e, p.f16);
        dout[e] = ld(dO, qa + 32 * e, p.f16);
        a += q[e] * k[e];
        b += dout[e] * v[e];
      }
      float pr = expf(warpSum(a) * p.scale - lse[r]), dp = warpSum(b);
      float ds = pr * (dp - D[r]), dsm = pr * (fabsf(dp) + Dmag[r]);
      for (int e = 0; e < E; ++e) {
        hv[e] += pr * dout[e];
        hmv[e] += pr * fabsf(dout[e]);
        hk[e] += ds * q[e];
        hmk[e] += dsm * fabsf(q[e]);
      }
    }
    for (int e = 0; e < E; ++e) {
      gk[e] += hk[e];
      mk[e] += hmk[e];
      gv[e] += hv[e];
      mv[e] += hmv[e];
    }
  }
  for (int e = 0; e < E; ++e) {
    i64 x = ka + 32 * e;
    dk[x] = gk[e] * p.scale;
    dkMag[x] = mk[e] * p.scale;
    dv[x] = gv[e];
    dvMag[x] = mv[e];
  }
}

#define TJ_REF_ENTRIES(E)                                                                          \
  extern "C" __global__ void ref_fwd_##E(Problem p, const u16 *Q, const u16 *K, const u16 *V,     \
                                         float *o, float *mag, float *lse, u16 *o16) {             \
    forward<E>(p, Q, K, V, o, mag, lse, o16);                                                      \
  }                                                                                                \
  extern "C" __global__ void ref_dq_##E(Problem p, const u16 *Q, const u16 *K, const u16 *V,      \
                                        const u16 *dO, const float *lse, const float *D,           \
                                        const float *Dmag, float *dq, float *mag) {                \
    gradQ<E>(p, Q, K, V, dO, lse, D, Dmag, dq, mag);                                               \
  }                                                                                                \
  extern "C" __global__ void ref_dkdv_##E(Problem p, const u16 *Q, const u16 *K, const u16 *V,    \
                                          const u16 *dO, const float *lse, const float *D,         \
                                          const float *Dmag, float *dk, float *dkMag, float *dv,   \
                                          float *dvMag) {                                          \
    gradKV<E>(p, Q, K, V, dO, lse, D, Dmag, dk, dkMag, dv, dvMag);                                 \
  }
TJ_REF_ENTRIES(2)
TJ_REF_ENTRIES(4)
TJ_REF_ENTRIES(8)

// Counts the elements of `got` outside their bounds; words[1]: the first.
// (Each warp takes 32 elements at a time and counts its failures at once.)
extern "C" __global__ void ref_compare(const u16 *got, const float *ref, const float *mag, i64 n,
                                       int f16, float rel, float prel, float abs, u64 *words) {
  int lane = threadIdx.x & 31;
  i64 warp = (blockIdx.x * (i64)blockDim.x + threadIdx.x) >> 5;
  i64 warps = (gridDim.x * (i64)blockDim.x) >> 5;
  for (i64 base = warp * 32; base < n; base += warps * 32) {
    i64 x = base + lane;
    bool bad = false;
    if (x < n) {
      float g = ld(got, x, f16), r = ref[x];
      bad = !(fabsf(g - r) <= rel * fabsf(r) + prel * mag[x] + abs);
    }
    unsigned failed = __ballot_sync(0xffffffffu, bad);
    if (failed && lane == 0) {
      atomicAdd(&words[0], (u64)__popc(failed));
      atomicMin(&words[1], (u64)(base + __ffs(failed) - 1));
    }
  }
}
)cuda";

constexpr int kWarps = 8; // a block's rows

llvm::Expected<const std::vector<char> &> cubinFor(const Target &target) {
  static std::mutex mu;
  static auto *cubins = new std::map<std::string, std::vector<char>>();
  std::lock_guard<std::mutex> lock(mu);
  std::string arch(target.archName());
  auto it = cubins->find(arch);
  if (it != cubins->end())
    return it->second;
  auto out = compileWithNvrtc(kSource, "attention_reference", arch);
  if (!out)
    return out.takeError();
  return cubins->emplace(arch, std::move(out->cubin)).first->second;
}

Problem problemOf(const Call &c) {
  auto side = [&](int64_t heads, int64_t len, uint64_t cu) {
    Side s{};
    s.heads = int32_t(heads);
    s.len = int32_t(len);
    if (c.layout == Layout::BHSD) {
      s.row = c.d;
      s.head = len * c.d;
      s.batch = heads * len * c.d;
    } else {
      s.row = heads * c.d;
      s.head = c.d;
      s.batch = len * heads * c.d;
    }
    s.cu = c.layout == Layout::THD ? cu : 0;
    return s;
  };
  Problem p{};
  p.q = side(c.hq, c.sq, c.cuSeqlensQ);
  p.k = side(c.hkv, c.sk, c.cuSeqlensK);
  p.scale = c.scale > 0 ? c.scale : float(1.0 / std::sqrt(double(c.d)));
  p.causal = c.causal;
  p.f16 = c.dt == DType::F16;
  return p;
}

llvm::Expected<int> widthIndex(const Call &c) {
  switch (c.d) {
  case 64:
    return 0;
  case 128:
    return 1;
  case 256:
    return 2;
  default:
    return fail("the attention reference takes head dims 64, 128 and 256, not " + llvm::Twine(c.d));
  }
}

llvm::Error launch(CUfunction f, int64_t rows, int64_t heads, int64_t batches, void **args,
                   CUstream stream) {
  auto drv = CudaDriver::get();
  if (!drv)
    return drv.takeError();
  if (rows <= 0 || heads <= 0 || batches <= 0)
    return llvm::Error::success();
  if (batches > Reference::kMaxSequences || heads > Reference::kMaxHeads)
    return fail("the attention reference covers at most " + llvm::Twine(Reference::kMaxSequences) +
                " sequences and " + llvm::Twine(Reference::kMaxHeads) + " heads a call, not " +
                llvm::Twine(batches) + " and " + llvm::Twine(heads));
  TJ_CU_CHECK(*drv, cuLaunchKernel(f, unsigned((rows + kWarps - 1) / kWarps), unsigned(heads),
                                   unsigned(batches), 32 * kWarps, 1, 1, 0, stream, args, nullptr));
  return llvm::Error::success();
}

} // namespace

llvm::Error Reference::compile(const Target &target) {
  auto cubin = cubinFor(target);
  return cubin ? llvm::Error::success() : cubin.takeError();
}

llvm::Expected<std::unique_ptr<Reference>> Reference::load(const Target &target) {
  auto cubin = cubinFor(target);
  if (!cubin)
    return cubin.takeError();
  auto module = LoadedModule::load(cubin->data());
  if (!module)
    return module.takeError();
  std::unique_ptr<Reference> r(new Reference());
  r->module_ = std::move(*module);
  auto get = [&](CUfunction &f, const std::string &name) -> llvm::Error {
    auto fn = r->module_.function(name.c_str());
    if (!fn)
      return fn.takeError();
    f = *fn;
    return llvm::Error::success();
  };
  const char *widths[3] = {"2", "4", "8"};
  for (int w = 0; w < 3; ++w)
    for (auto [f, name] :
         {std::pair{&r->fwd_[w], "ref_fwd_"}, {&r->dq_[w], "ref_dq_"}, {&r->dkdv_[w], "ref_dkdv_"}})
      if (auto e = get(*f, name + std::string(widths[w])))
        return e;
  if (auto e = get(r->dsum_, "ref_dsum"))
    return e;
  if (auto e = get(r->compare_, "ref_compare"))
    return e;
  return r;
}

llvm::Error Reference::forward(const Call &call, int64_t batches, CUdeviceptr o, CUdeviceptr mag,
                               CUdeviceptr lse, CUdeviceptr o16, CUstream stream) const {
  auto w = widthIndex(call);
  if (!w)
    return w.takeError();
  Problem p = problemOf(call);
  uint64_t q = call.q, k = call.k, v = call.v;
  void *args[] = {&p, &q, &k, &v, &o, &mag, &lse, &o16};
  return launch(fwd_[*w], call.sq, call.hq, batches, args, stream);
}

llvm::Error Reference::backward(const BackwardCall &call, int64_t batches, const Gradients &out,
                                CUdeviceptr scratch, CUstream stream) const {
  auto w = widthIndex(call);
  if (!w)
    return w.takeError();
  Problem p = problemOf(call);
  uint64_t q = call.q, k = call.k, v = call.v, o = call.o, dO = call.dO, lse = call.lse;
  uint64_t D = scratch, Dmag = scratch + uint64_t(call.b * call.hq * call.sq) * 4;
  Gradients g = out;
  int d = int(call.d);
  void *dsumArgs[] = {&p, &o, &dO, &D, &Dmag, &d};
  if (auto e = launch(dsum_, call.sq, call.hq, batches, dsumArgs, stream))
    return e;
  void *dqArgs[] = {&p, &q, &k, &v, &dO, &lse, &D, &Dmag, &g.dq, &g.dqMag};
  if (auto e = launch(dq_[*w], call.sq, call.hq, batches, dqArgs, stream))
    return e;
  void *kvArgs[] = {&p, &q, &k, &v, &dO, &lse, &D, &Dmag, &g.dk, &g.dkMag, &g.dv, &g.dvMag};
  return launch(dkdv_[*w], call.sk, call.hkv, batches, kvArgs, stream);
}

llvm::Expected<Reference::Mismatches> Reference::compare(DType dt, CUdeviceptr got, CUdeviceptr ref,
                                                         CUdeviceptr mag, int64_t n, double rel,
                                                         double prel, double abs, CUdeviceptr words,
                                                         CUstream stream) const {
  auto drv = CudaDriver::get();
  if (!drv)
    return drv.takeError();
  TJ_CU_CHECK(*drv, cuMemsetD32Async(words, 0, 2, stream));
  TJ_CU_CHECK(*drv, cuMemsetD32Async(words + 8, 0xFFFFFFFFu, 2, stream));
  int f16 = dt == DType::F16;
  float r = float(rel), pr = float(prel), a = float(abs);
  void *args[] = {&got, &ref, &mag, &n, &f16, &r, &pr, &a, &words};
  if (n > 0)
    TJ_CU_CHECK(*drv, cuLaunchKernel(compare_, 1024, 1, 1, 256, 1, 1, 0, stream, args, nullptr));
  TJ_CU_CHECK(*drv, cuStreamSynchronize(stream));
  uint64_t w[2];
  TJ_CU_CHECK(*drv, cuMemcpyDtoH_v2(w, words, sizeof w));
  Mismatches m;
  m.count = w[0];
  if (!m.count)
    return m;
  m.first = int64_t(w[1]);
  uint16_t g = 0;
  float rf = 0, mf = 0;
  TJ_CU_CHECK(*drv, cuMemcpyDtoH_v2(&g, got + uint64_t(m.first) * 2, 2));
  TJ_CU_CHECK(*drv, cuMemcpyDtoH_v2(&rf, ref + uint64_t(m.first) * 4, 4));
  TJ_CU_CHECK(*drv, cuMemcpyDtoH_v2(&mf, mag + uint64_t(m.first) * 4, 4));
  m.got = dt == DType::F16 ? f16ToFloat(g) : bf16ToFloat(g);
  m.ref = rf;
  m.allowed = rel * std::fabs(rf) + prel * mf + abs;
  return m;
}

} // namespace tilejit::attention
