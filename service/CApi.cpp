//===- CApi.cpp - the C interface of libtilejit.so --------------------------===//
//
// Each entry point checks its arguments (a bad one is TJ_INVALID_ARGUMENT
// naming it), builds the spec, takes the kernel from the engine and launches
// it. No C++ exception or LLVM error crosses the boundary: every failure is a
// status and a message kept per thread.
//
//===----------------------------------------------------------------------===//
#include "include/tilejit/tilejit.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include "core/Settings.h"

#include "compiler/Compiler.h"
#include "ops/attention/AttentionLaunch.h"
#include "ops/gemm/GemmLaunch.h"
#include "ops/rmsnorm/RmsNormLaunch.h"
#include "runtime/CudaDriver.h"
#include "runtime/DeviceBuffer.h"
#include "service/Engine.h"

struct tj_engine {
  std::unique_ptr<tilejit::Engine> engine;
  int device = 0;
  std::atomic<int> smMargin{0};
};

namespace {

thread_local std::string lastError;

tj_status ok() {
  lastError.clear();
  return TJ_OK;
}
tj_status invalid(const std::string &msg) {
  lastError = msg;
  return TJ_INVALID_ARGUMENT;
}
tj_status failed(llvm::Error e) {
  lastError = llvm::toString(std::move(e));
  return TJ_ERROR;
}

bool dtypeOf(tj_dtype t, tilejit::DType &out) {
  switch (t) {
  case TJ_BF16:
    out = tilejit::DType::BF16;
    return true;
  case TJ_F16:
    out = tilejit::DType::F16;
    return true;
  case TJ_F32:
    out = tilejit::DType::F32;
    return true;
  }
  return false;
}

#define TJ_DTYPE(var, arg)                                                                         \
  tilejit::DType var;                                                                              \
  if (!dtypeOf(arg, var))                                                                          \
    return invalid(#arg " is not a tj_dtype (" + std::to_string(int(arg)) + ")");

#define TJ_ENGINE(e)                                                                               \
  if (!(e) || !(e)->engine)                                                                        \
    return invalid("engine is null");

/// The shape of an RMSNorm call (forward or backward), no buffers yet.
template <class A>
A rmsArgs(tilejit::DType dt, tilejit::DType wdt, int64_t rows, int64_t cols, int zcg) {
  A a;
  a.dtype = dt;
  a.wdtype = wdt;
  a.rows = rows;
  a.cols = cols;
  a.zeroCenteredGamma = zcg != 0;
  return a;
}

/// The shape of an attention forward call, no buffers yet; false if `layout`
/// is not a tj_attn_layout (or, unless `packed`, is TJ_THD). THD: sq and sk
/// are the longest sequences', and the totals as if every sequence were.
bool attnCall(tilejit::DType dt, tj_attn_layout layout, int64_t b, int64_t sq, int64_t sk,
              int64_t hq, int64_t hkv, int64_t d, int causal, tilejit::attention::Call &c,
              bool packed = false) {
  using tilejit::attention::Layout;
  if (layout != TJ_BSHD && layout != TJ_BHSD && !(packed && layout == TJ_THD))
    return false;
  c.dt = dt;
  c.layout = layout == TJ_BSHD ? Layout::BSHD : layout == TJ_BHSD ? Layout::BHSD : Layout::THD;
  // (Sizes out of range are named by the spec's check; their product is
  // not formed then.)
  if (c.layout == Layout::THD && b > 0 && sq > 0 && sk > 0 &&
      (__builtin_mul_overflow(b, sq, &c.totalQ) || __builtin_mul_overflow(b, sk, &c.totalK)))
    c.totalQ = c.totalK = 0;
  c.b = b;
  c.sq = sq;
  c.sk = sk;
  c.hq = hq;
  c.hkv = hkv;
  c.d = d;
  c.causal = causal != 0;
  return true;
}

tj_status badLayout(tj_attn_layout layout) {
  if (layout == TJ_THD)
    return invalid("layout TJ_THD (2), packed sequences, goes through tj_attn_varlen_fwd and "
                   "tj_attn_varlen_bwd, which take cu_seqlens");
  return invalid("layout must be TJ_BSHD (0) or TJ_BHSD (1), got " + std::to_string(int(layout)));
}

/// Launches `launch(kernel)` with the kernel for `spec`, its context
/// current for the launch (the caller's thread may have another device's:
/// a launch in a context other than the function's and the stream's fails
/// before CUDA 13).
template <class F>
tj_status withKernel(tj_engine *e, const tilejit::KernelSpec &spec, void *stream, F launch) {
  auto kernel = e->engine->get(spec, stream);
  if (!kernel)
    return failed(kernel.takeError());
  auto scope = tilejit::ScopedDevice::enter(kernel->context());
  if (!scope)
    return failed(scope.takeError());
  if (llvm::Error err = launch(*kernel))
    return failed(std::move(err));
  return ok();
}

/// The attn_bwd spec of `call` for `e`: deterministic = 0 where the engine
/// allows results that are not bitwise repeatable and the shape has such
/// configs (elsewhere the two specs would tune and store the same kernels
/// twice).
llvm::Expected<tilejit::KernelSpec> backwardSpecFor(tj_engine *e, tilejit::attention::Call call) {
  call.deterministic = true;
  auto spec = tilejit::attention::backwardSpecOf(call, e->engine->target());
  if (spec && e->engine->nondeterministic() &&
      tilejit::attention::atomicDqTunable(tilejit::attention::Params(*spec)))
    spec->set(tilejit::attention::Deterministic, 0);
  return spec;
}

/// The spec of an attention call of these arguments (packed sequences'
/// sizes as tj_attn_fwd_prepare takes them) into `spec`, as the call builds
/// it; else the status that names what was wrong. (The engine is checked by
/// the caller.)
tj_status attnSpec(tj_engine *e, bool backward, tj_dtype dtype, tj_attn_layout layout, int64_t b,
                   int64_t sq, int64_t sk, int64_t hq, int64_t hkv, int64_t d, int causal,
                   std::optional<tilejit::KernelSpec> &spec) {
  TJ_DTYPE(dt, dtype);
  tilejit::attention::Call call;
  if (!attnCall(dt, layout, b, sq, sk, hq, hkv, d, causal, call, /*packed=*/true))
    return invalid("layout must be TJ_BSHD (0), TJ_BHSD (1) or TJ_THD (2), got " +
                   std::to_string(int(layout)));
  auto built =
      backward ? backwardSpecFor(e, call) : tilejit::attention::specOf(call, e->engine->target());
  if (!built)
    return invalid(llvm::toString(built.takeError()));
  spec = std::move(*built);
  return ok();
}

tj_status attnPrepare(tj_engine *e, bool backward, tj_dtype dtype, tj_attn_layout layout, int64_t b,
                      int64_t sq, int64_t sk, int64_t hq, int64_t hkv, int64_t d, int causal) {
  TJ_ENGINE(e);
  std::optional<tilejit::KernelSpec> spec;
  if (tj_status st = attnSpec(e, backward, dtype, layout, b, sq, sk, hq, hkv, d, causal, spec);
      st != TJ_OK)
    return st;
  auto kernel = e->engine->get(*spec);
  if (!kernel)
    return failed(kernel.takeError());
  return ok();
}

/// tj_explain's text for `spec` into `out` (up to `capacity` bytes,
/// NUL-terminated; `*needed`, if not null, the whole text's size).
tj_status explainInto(tj_engine *e, const tilejit::KernelSpec &spec, char *out, int64_t capacity,
                      int64_t *needed) {
  if (capacity < 0 || (capacity > 0 && !out))
    return invalid("out is null or capacity negative");
  auto text = e->engine->explain(spec);
  if (!text)
    return failed(text.takeError());
  if (needed)
    *needed = int64_t(text->size()) + 1;
  if (capacity > 0) {
    size_t n = std::min<size_t>(text->size(), size_t(capacity - 1));
    std::memcpy(out, text->data(), n);
    out[n] = '\0';
  }
  return ok();
}

/// Every named tensor is a device pointer, 16-byte aligned; else an error
/// naming the first that is not.
std::optional<tj_status>
checkAttnTensors(std::initializer_list<std::pair<const char *, const void *>> tensors,
                 const char *all) {
  for (const auto &[name, ptr] : tensors) {
    if (!ptr)
      return invalid(std::string(name) + " is null; " + all + " must be device pointers");
    if (uintptr_t(ptr) % 16 != 0) {
      char addr[32];
      std::snprintf(addr, sizeof addr, "%p", ptr);
      return invalid(std::string(name) + " is at " + addr + ", not 16-byte aligned; " + all +
                     " must be");
    }
  }
  return std::nullopt;
}

/// Packed sequences' offsets: device pointers to int32, 4-byte aligned;
/// else an error naming the first that is not.
std::optional<tj_status> checkOffsets(const int32_t *cuQ, const int32_t *cuK) {
  for (auto [name, ptr] : {std::pair{"cu_seqlens_q", cuQ}, std::pair{"cu_seqlens_k", cuK}})
    if (!ptr || uintptr_t(ptr) % 4 != 0)
      return invalid(std::string(name) + (ptr ? " is not 4-byte aligned" : " is null") +
                     "; cu_seqlens_q and cu_seqlens_k must be device pointers to int32");
  return std::nullopt;
}

/// The forward's part of an attention call: its sizes, scale and tensors
/// (each a device pointer, 16-byte aligned), or the status that refuses them.
/// `packed` (TJ_THD): the rows in all and each sequence's offsets too.
struct Packed {
  int64_t totalQ, totalK;
  const int32_t *cuQ, *cuK;
};
std::optional<tj_status> attnForward(tilejit::DType dt, tj_attn_layout layout, int64_t b,
                                     int64_t sq, int64_t sk, int64_t hq, int64_t hkv, int64_t d,
                                     int causal, float scale, const void *q, const void *k,
                                     const void *v, const void *o, const float *lse,
                                     tilejit::attention::Call &call,
                                     const Packed *packed = nullptr) {
  if (!attnCall(dt, layout, b, sq, sk, hq, hkv, d, causal, call, packed != nullptr))
    return badLayout(layout);
  if (packed) {
    if (auto bad = checkOffsets(packed->cuQ, packed->cuK))
      return bad;
    call.totalQ = packed->totalQ;
    call.totalK = packed->totalK;
    call.cuSeqlensQ = uint64_t(packed->cuQ);
    call.cuSeqlensK = uint64_t(packed->cuK);
  }
  call.scale = scale;
  if (auto bad = checkAttnTensors({{"q", q}, {"k", k}, {"v", v}, {"o", o}, {"lse", lse}},
                                  "q, k, v, o and lse"))
    return bad;
  call.q = uint64_t(q);
  call.k = uint64_t(k);
  call.v = uint64_t(v);
  call.o = uint64_t(o);
  call.lse = uint64_t(lse);
  return std::nullopt;
}
} // namespace

extern "C" {

const char *tj_version(void) { return tilejit::tilejitVersion(); }

const char *tj_last_error(void) { return lastError.c_str(); }

tj_status tj_engine_create(int device, tj_engine **out) {
  if (!out)
    return invalid("out is null");
  *out = nullptr;
  if (device < 0)
    return invalid("device must be >= 0, got " + std::to_string(device));
  auto options = tilejit::EngineOptions::fromEnvironment();
  if (!options)
    return failed(options.takeError());
  options->device = device;
  auto engine = tilejit::Engine::create(std::move(*options));
  if (!engine)
    return failed(engine.takeError());
  // What became of the store (moved aside as corrupt, or none at the
  // default place): said once, when the engine is made.
  if (const std::string &notice = (*engine)->storeNotice(); !notice.empty())
    std::fprintf(stderr, "tilejit: %s\n", notice.c_str());
  // TILEJIT_SM_MARGIN's form was checked with every setting; its bound is
  // this GPU's.
  int margin = 0;
  if (std::string m = tilejit::settings::value("TILEJIT_SM_MARGIN"); !m.empty()) {
    long v = std::strtol(m.c_str(), nullptr, 10);
    if (v >= (*engine)->target().smCount())
      return invalid("TILEJIT_SM_MARGIN='" + m + "' is not a number in [0, " +
                     std::to_string((*engine)->target().smCount() - 1) + "]");
    margin = int(v);
  }
  auto *e = new tj_engine;
  e->engine = std::move(*engine);
  e->device = device;
  e->smMargin = margin;
  *out = e;
  return ok();
}

void tj_engine_destroy(tj_engine *engine) { delete engine; }

tj_status tj_engine_device(tj_engine *e, int *sms, int *cc) {
  TJ_ENGINE(e);
  if (sms)
    *sms = e->engine->target().smCount();
  if (cc)
    *cc = e->engine->target().computeCapability();
  return ok();
}

tj_status tj_engine_set_sm_margin(tj_engine *e, int margin) {
  TJ_ENGINE(e);
  int sms = e->engine->target().smCount();
  if (margin < 0 || margin >= sms)
    return invalid("sm_margin must be in [0, " + std::to_string(sms - 1) + "], got " +
                   std::to_string(margin));
  e->smMargin = margin;
  return ok();
}

tj_status tj_engine_set_deterministic(tj_engine *e, int on) {
  TJ_ENGINE(e);
  e->engine->setDeterministic(on != 0);
  return ok();
}

tj_status tj_engine_set_allow_nondeterministic(tj_engine *e, int allow) {
  TJ_ENGINE(e);
  e->engine->setAllowNondeterministic(allow != 0);
  return ok();
}

tj_status tj_engine_release_scratch(tj_engine *e, uint64_t keep_bytes, uint64_t *reserved) {
  TJ_ENGINE(e);
  auto scope = tilejit::ScopedDevice::enter(e->device);
  if (!scope)
    return failed(scope.takeError());
  auto left = tilejit::StreamBuffer::release(scope->context(), keep_bytes);
  if (!left)
    return failed(left.takeError());
  if (reserved)
    *reserved = *left;
  return ok();
}

tj_status tj_explain(tj_engine *e, const char *specText, char *out, int64_t capacity,
                     int64_t *needed) {
  TJ_ENGINE(e);
  if (!specText)
    return invalid("spec is null");
  auto spec = tilejit::KernelSpec::parse(specText);
  if (!spec)
    return invalid(llvm::toString(spec.takeError()));
  spec->target = e->engine->target();
  return explainInto(e, *spec, out, capacity, needed);
}

tj_status tj_attn_explain(tj_engine *e, int backward, tj_dtype dtype, tj_attn_layout layout,
                          int64_t b, int64_t sq, int64_t sk, int64_t hq, int64_t hkv, int64_t d,
                          int causal, char *out, int64_t capacity, int64_t *needed) {
  TJ_ENGINE(e);
  std::optional<tilejit::KernelSpec> spec;
  if (tj_status st = attnSpec(e, backward != 0, dtype, layout, b, sq, sk, hq, hkv, d, causal, spec);
      st != TJ_OK)
    return st;
  return explainInto(e, *spec, out, capacity, needed);
}

tj_status tj_rms_norm_prepare(tj_engine *e, int backward, tj_dtype dtype, tj_dtype wdtype,
                              int64_t rows, int64_t cols, int zcg) {
  TJ_ENGINE(e);
  TJ_DTYPE(dt, dtype);
  TJ_DTYPE(wdt, wdtype);
  if (auto err = tilejit::checkRmsNormShape(rows, cols))
    return invalid(llvm::toString(std::move(err)));
  const tilejit::Target &t = e->engine->target();
  tilejit::KernelSpec spec =
      backward
          ? tilejit::rmsNormSpec(rmsArgs<tilejit::RmsNormBackward>(dt, wdt, rows, cols, zcg), t)
          : tilejit::rmsNormSpec(rmsArgs<tilejit::RmsNormForward>(dt, wdt, rows, cols, zcg), t);
  auto kernel = e->engine->get(spec);
  if (!kernel)
    return failed(kernel.takeError());
  return ok();
}

tj_status tj_gemm_prepare(tj_engine *e, tj_dtype ab, tj_dtype out, int trans_a, int trans_b,
                          int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc,
                          int64_t ldd, int with_c, int with_bias, int d_aligned) {
  TJ_ENGINE(e);
  TJ_DTYPE(abt, ab);
  TJ_DTYPE(outt, out);
  tilejit::gemm::Params p;
  p.ab = abt;
  p.out = outt;
  p.transA = trans_a != 0;
  p.transB = trans_b != 0;
  p.hasC = with_c != 0;
  p.hasBias = with_bias != 0;
  p.m = m;
  p.n = n;
  p.k = k;
  tilejit::gemm::Call call = tilejit::gemm::callOf(p);
  call.lda = lda;
  call.ldb = ldb;
  call.ldc = ldc;
  call.ldd = ldd;
  auto spec = tilejit::gemm::specOf(call, e->engine->target());
  if (!spec)
    return invalid(llvm::toString(spec.takeError()));
  spec->set(tilejit::gemm::DAligned, d_aligned != 0);
  auto kernel = e->engine->get(*spec);
  if (!kernel)
    return failed(kernel.takeError());
  return ok();
}

tj_status tj_attn_fwd_prepare(tj_engine *e, tj_dtype dtype, tj_attn_layout layout, int64_t b,
                              int64_t sq, int64_t sk, int64_t hq, int64_t hkv, int64_t d,
                              int causal) {
  return attnPrepare(e, false, dtype, layout, b, sq, sk, hq, hkv, d, causal);
}

tj_status tj_attn_bwd_prepare(tj_engine *e, tj_dtype dtype, tj_attn_layout layout, int64_t b,
                              int64_t sq, int64_t sk, int64_t hq, int64_t hkv, int64_t d,
                              int causal) {
  return attnPrepare(e, true, dtype, layout, b, sq, sk, hq, hkv, d, causal);
}

tj_status tj_rms_norm_fwd(tj_engine *e, tj_dtype dtype, tj_dtype wdtype, const void *x,
                          const void *w, void *y, float *rstd, int64_t rows, int64_t cols,
                          float eps, int zcg, void *stream) {
  TJ_ENGINE(e);
  TJ_DTYPE(dt, dtype);
  TJ_DTYPE(wdt, wdtype);
  if (auto err = tilejit::checkRmsNormShape(rows, cols))
    return invalid(llvm::toString(std::move(err)));
  if (rows == 0)
    return ok();
  if (!x || !w || !y || !rstd)
    return invalid("x, w, y and rstd must be device pointers, not null");
  auto a = rmsArgs<tilejit::RmsNormForward>(dt, wdt, rows, cols, zcg);
  a.x = uint64_t(x);
  a.w = uint64_t(w);
  a.y = uint64_t(y);
  a.rstd = uint64_t(rstd);
  a.eps = eps;
  return withKernel(e, tilejit::rmsNormSpec(a, e->engine->target()), stream,
                    [&](const tilejit::LoadedKernel &k) {
                      return tilejit::launchRmsNormForward(k, a, static_cast<CUstream>(stream));
                    });
}

tj_status tj_rms_norm_bwd_workspace(tj_engine *e, tj_dtype dtype, tj_dtype wdtype, int64_t rows,
                                    int64_t cols, int zcg, int64_t *bytes) {
  TJ_ENGINE(e);
  TJ_DTYPE(dt, dtype);
  TJ_DTYPE(wdt, wdtype);
  if (!bytes)
    return invalid("bytes is null");
  if (auto err = tilejit::checkRmsNormShape(rows, cols))
    return invalid(llvm::toString(std::move(err)));
  auto kernel = e->engine->get(tilejit::rmsNormSpec(
      rmsArgs<tilejit::RmsNormBackward>(dt, wdt, rows, cols, zcg), e->engine->target()));
  if (!kernel)
    return failed(kernel.takeError());
  *bytes = kernel->workspaceBytes();
  return ok();
}

tj_status tj_rms_norm_bwd(tj_engine *e, tj_dtype dtype, tj_dtype wdtype, const void *dy,
                          const void *x, const float *rstd, const void *w, void *dx, void *dw,
                          void *workspace, int64_t rows, int64_t cols, int zcg, void *stream) {
  TJ_ENGINE(e);
  TJ_DTYPE(dt, dtype);
  TJ_DTYPE(wdt, wdtype);
  if (auto err = tilejit::checkRmsNormShape(rows, cols))
    return invalid(llvm::toString(std::move(err)));
  if (!dw || (rows > 0 && (!dy || !x || !rstd || !w || !dx || !workspace)))
    return invalid("dy, x, rstd, w, dx, dw and workspace must be device pointers, not null");
  auto a = rmsArgs<tilejit::RmsNormBackward>(dt, wdt, rows, cols, zcg);
  a.dy = uint64_t(dy);
  a.x = uint64_t(x);
  a.rstd = uint64_t(rstd);
  a.w = uint64_t(w);
  a.dx = uint64_t(dx);
  a.dw = uint64_t(dw);
  a.workspace = uint64_t(workspace);
  return withKernel(e, tilejit::rmsNormSpec(a, e->engine->target()), stream,
                    [&](const tilejit::LoadedKernel &k) {
                      return tilejit::launchRmsNormBackward(k, a, static_cast<CUstream>(stream));
                    });
}

tj_status tj_gemm(tj_engine *e, tj_dtype ab, tj_dtype out, int trans_a, int trans_b, int64_t m,
                  int64_t n, int64_t k, const void *a, int64_t lda, const void *b, int64_t ldb,
                  const void *c, int64_t ldc, const void *bias, void *d, int64_t ldd, float alpha,
                  float beta, int sm_margin, void *stream) {
  TJ_ENGINE(e);
  int sms = e->engine->target().smCount();
  if (sm_margin < -1 || sm_margin >= sms)
    return invalid("sm_margin must be -1 (the engine's) or in [0, " + std::to_string(sms - 1) +
                   "], got " + std::to_string(sm_margin));
  TJ_DTYPE(abt, ab);
  TJ_DTYPE(outt, out);
  tilejit::gemm::Call call;
  call.ab = abt;
  call.out = outt;
  call.transA = trans_a != 0;
  call.transB = trans_b != 0;
  call.m = m;
  call.n = n;
  call.k = k;
  call.a = uint64_t(a);
  call.b = uint64_t(b);
  call.c = uint64_t(c);
  call.d = uint64_t(d);
  call.lda = lda;
  call.ldb = ldb;
  call.ldc = ldc;
  call.ldd = ldd;
  call.alpha = alpha;
  call.beta = beta;
  call.hasC = c != nullptr;
  call.bias = uint64_t(bias);
  call.hasBias = bias != nullptr;
  call.maxPrograms = sms - (sm_margin >= 0 ? sm_margin : e->smMargin.load());
  if (!a || !b || !d)
    return invalid("a, b and d must be device pointers, not null");
  auto spec = tilejit::gemm::specOf(call, e->engine->target());
  if (!spec)
    return invalid(llvm::toString(spec.takeError()));
  return withKernel(e, *spec, stream, [&](const tilejit::LoadedKernel &kernel) {
    return tilejit::gemm::launch(kernel, call, e->engine->target().smCount(),
                                 static_cast<CUstream>(stream));
  });
}

namespace {
/// A tensor's bytes in device memory, for the overlap check.
struct Extent {
  const char *name;
  const void *at;
  int64_t bytes;
};

/// The status naming the first of `outputs` that shares bytes with another
/// of `all` (an output that overlaps an input reads what another kernel
/// wrote: the results depend on the config), or none. Sizes are the spec's,
/// checked to fit in 64 bits.
std::optional<tj_status> overlapping(std::initializer_list<Extent> outputs,
                                     std::initializer_list<Extent> all) {
  for (const Extent &out : outputs)
    for (const Extent &other : all) {
      if (std::strcmp(out.name, other.name) == 0 || out.bytes <= 0 || other.bytes <= 0)
        continue;
      uint64_t a = uint64_t(out.at), b = uint64_t(other.at);
      if (a < b + uint64_t(other.bytes) && b < a + uint64_t(out.bytes))
        return invalid(std::string(out.name) + " overlaps " + other.name +
                       ": the outputs must not share memory with the inputs or with each other");
    }
  return std::nullopt;
}

/// The attention tensors' extents of `c` (rows of Q and of K: b * sq and
/// b * sk, or the packed totals).
struct AttnExtents {
  int64_t qBytes, kBytes, lseBytes;
  /// Packed sequences: the offsets (b + 1 int32 each; else 0 bytes).
  int64_t offsetBytes;
  const void *cuQ, *cuK;
  explicit AttnExtents(const tilejit::attention::Call &c) {
    bool thd = c.layout == tilejit::attention::Layout::THD;
    int64_t elem = tilejit::dtypeBytes(c.dt);
    qBytes = (thd ? c.totalQ : c.b * c.sq) * c.hq * c.d * elem;
    kBytes = (thd ? c.totalK : c.b * c.sk) * c.hkv * c.d * elem;
    lseBytes = c.b * c.hq * c.sq * 4;
    offsetBytes = thd ? (c.b + 1) * 4 : 0;
    cuQ = reinterpret_cast<const void *>(c.cuSeqlensQ);
    cuK = reinterpret_cast<const void *>(c.cuSeqlensK);
  }
};
} // namespace

namespace {
tj_status attnFwd(tj_engine *e, tj_dtype dtype, tj_attn_layout layout, int64_t b, int64_t sq,
                  int64_t sk, int64_t hq, int64_t hkv, int64_t d, int causal, float scale,
                  const void *q, const void *k, const void *v, void *o, float *lse, void *stream,
                  const Packed *packed) {
  TJ_ENGINE(e);
  TJ_DTYPE(dt, dtype);
  tilejit::attention::Call call;
  if (auto bad = attnForward(dt, layout, b, sq, sk, hq, hkv, d, causal, scale, q, k, v, o, lse,
                             call, packed))
    return *bad;
  auto spec = tilejit::attention::specOf(call, e->engine->target());
  if (!spec)
    return invalid(llvm::toString(spec.takeError()));
  AttnExtents x(call);
  if (auto bad = overlapping({{"o", o, x.qBytes}, {"lse", lse, x.lseBytes}},
                             {{"q", q, x.qBytes},
                              {"k", k, x.kBytes},
                              {"v", v, x.kBytes},
                              {"o", o, x.qBytes},
                              {"lse", lse, x.lseBytes},
                              {"cu_seqlens_q", x.cuQ, x.offsetBytes},
                              {"cu_seqlens_k", x.cuK, x.offsetBytes}}))
    return *bad;
  // A persistent kernel leaves the engine's margin of multiprocessors free.
  int sms = e->engine->target().smCount();
  call.maxPrograms = sms - e->smMargin.load();
  return withKernel(e, *spec, stream, [&](const tilejit::LoadedKernel &kernel) {
    return tilejit::attention::launch(kernel, call, sms, static_cast<CUstream>(stream));
  });
}
} // namespace

tj_status tj_attn_fwd(tj_engine *e, tj_dtype dtype, tj_attn_layout layout, int64_t b, int64_t sq,
                      int64_t sk, int64_t hq, int64_t hkv, int64_t d, int causal, float scale,
                      const void *q, const void *k, const void *v, void *o, float *lse,
                      void *stream) {
  return attnFwd(e, dtype, layout, b, sq, sk, hq, hkv, d, causal, scale, q, k, v, o, lse, stream,
                 nullptr);
}

} // extern "C"

namespace {
/// A packed call with no query rows in all, or no key rows: no kernel runs.
/// Without keys every query row's o (and dq) is 0 and its lse -inf; without
/// queries dk and dv are 0 (no query sees a key). What it writes is filled on
/// `stream`. It is checked as a call with rows is (sizes, scale, the
/// offsets, every tensor that has rows); a tensor of no rows may be null, and
/// the longest sequence given as 0 where there are none. nullopt: the call
/// has rows of both.
struct Fill {
  const char *name;
  const void *ptr;
  int64_t rows, heads; // of the tensor (d wide); 0 rows: the pointer is not read
  bool write;          // zeroed (else only checked)
};
std::optional<tj_status> varlenWithoutRows(tj_engine *e, tilejit::DType dt, bool backward,
                                           int64_t b, int64_t maxSq, int64_t maxSk, int64_t totalQ,
                                           int64_t totalK, int64_t hq, int64_t hkv, int64_t d,
                                           int causal, float scale, const int32_t *cuQ,
                                           const int32_t *cuK, std::initializer_list<Fill> tensors,
                                           const float *lse, bool fillLse, void *stream) {
  if (totalQ < 0 || totalK < 0)
    return invalid("total_q and total_k (the rows of q and of k in all) must be >= 0, got "
                   "total_q=" +
                   std::to_string(totalQ) + " total_k=" + std::to_string(totalK));
  if (maxSq < 0 || maxSk < 0)
    return invalid("max_sq and max_sk (the longest sequence's rows) must be >= 0, got max_sq=" +
                   std::to_string(maxSq) + " max_sk=" + std::to_string(maxSk));
  // (Named here as the C interface calls them; the spec's checks would say
  // sq and sk.)
  for (auto [name, most, total, totalName] : {std::tuple{"max_sq", maxSq, totalQ, "total_q"},
                                              std::tuple{"max_sk", maxSk, totalK, "total_k"}}) {
    if (total > INT32_MAX)
      return invalid(std::string(totalName) + "=" + std::to_string(total) +
                     " is more than cu_seqlens (int32) can count (2147483647)");
    if (total > 0 && most < 1)
      return invalid(std::string(name) + " must be >= 1 where " + totalName + " > 0, got " + name +
                     "=" + std::to_string(most) + " " + totalName + "=" + std::to_string(total));
    if (most > tilejit::attention::kMaxSeq)
      return invalid(std::string(name) + "=" + std::to_string(most) +
                     " is above the longest sequence supported (" +
                     std::to_string(tilejit::attention::kMaxSeq) + ")");
  }
  if (totalQ > 0 && totalK > 0)
    return std::nullopt;
  // (The longest sequence may be given as 0 where there are no rows.)
  tilejit::attention::Call call;
  attnCall(dt, TJ_THD, b, totalQ == 0 ? std::max<int64_t>(maxSq, 1) : maxSq,
           totalK == 0 ? std::max<int64_t>(maxSk, 1) : maxSk, hq, hkv, d, causal, call,
           /*packed=*/true);
  call.totalQ = std::max<int64_t>(totalQ, 1);
  call.totalK = std::max<int64_t>(totalK, 1);
  call.scale = scale;
  auto spec = backward ? tilejit::attention::backwardSpecOf(call, e->engine->target())
                       : tilejit::attention::specOf(call, e->engine->target());
  // (The spec's check holds b sequences of at most max rows each to the
  // rows in all, which bounds the byte counts below.)
  if (!spec)
    return invalid(llvm::toString(spec.takeError()));
  if (auto bad = checkOffsets(cuQ, cuK))
    return bad;
  for (const Fill &f : tensors)
    if (f.rows > 0)
      if (auto bad = checkAttnTensors({{f.name, f.ptr}}, f.name))
        return bad;
  if (totalQ > 0) // lse is b x hq x max_sq
    if (auto bad = checkAttnTensors({{"lse", lse}}, "lse"))
      return bad;
  auto scope = tilejit::ScopedDevice::enter(e->device);
  if (!scope)
    return failed(scope.takeError());
  auto drv = tilejit::CudaDriver::get();
  if (!drv)
    return failed(drv.takeError());
  CUstream s = static_cast<CUstream>(stream);
  // (Each count below is at most b * max rows * heads * d * 4 bytes, which
  // the spec's checks (the sizes' limits, the rows in all at most b * max
  // rows) keep in 64 bits.)
  int64_t elem = tilejit::dtypeBytes(dt);
  for (const Fill &f : tensors) {
    if (!f.write || f.rows == 0)
      continue;
    size_t bytes = size_t(f.rows) * size_t(f.heads) * size_t(d) * size_t(elem);
    if (CUresult r = drv->cuMemsetD8Async(CUdeviceptr(f.ptr), 0, bytes, s); r != CUDA_SUCCESS)
      return failed(drv->error(r, std::string("zeroing ") + f.name + " (cuMemsetD8Async)"));
  }
  if (fillLse && totalQ > 0) {
    // Every row of [b, hq, max_sq]: rows past a sequence's end are unspecified.
    size_t n = size_t(b) * size_t(hq) * size_t(maxSq);
    if (CUresult r = drv->cuMemsetD32Async(CUdeviceptr(lse), 0xff800000u, n, s); r != CUDA_SUCCESS)
      return failed(drv->error(r, "filling lse with -inf (cuMemsetD32Async)"));
  }
  return ok();
}
} // namespace

extern "C" {

tj_status tj_attn_varlen_fwd(tj_engine *e, tj_dtype dtype, int64_t b, int64_t max_sq,
                             int64_t max_sk, int64_t total_q, int64_t total_k, int64_t hq,
                             int64_t hkv, int64_t d, int causal, float scale,
                             const int32_t *cu_seqlens_q, const int32_t *cu_seqlens_k,
                             const void *q, const void *k, const void *v, void *o, float *lse,
                             void *stream) {
  TJ_ENGINE(e);
  TJ_DTYPE(dt, dtype);
  // No keys: o = 0, lse = -inf; no queries: nothing to write.
  if (auto done = varlenWithoutRows(e, dt, false, b, max_sq, max_sk, total_q, total_k, hq, hkv, d,
                                    causal, scale, cu_seqlens_q, cu_seqlens_k,
                                    {{"q", q, total_q, hq, false},
                                     {"k", k, total_k, hkv, false},
                                     {"v", v, total_k, hkv, false},
                                     {"o", o, total_q, hq, true}},
                                    lse, /*fillLse=*/true, stream))
    return *done;
  Packed packed{total_q, total_k, cu_seqlens_q, cu_seqlens_k};
  return attnFwd(e, dtype, TJ_THD, b, max_sq, max_sk, hq, hkv, d, causal, scale, q, k, v, o, lse,
                 stream, &packed);
}

tj_status tj_attn_bwd_workspace_size(tj_engine *e, int64_t b, int64_t sq, int64_t sk, int64_t hq,
                                     int64_t hkv, int64_t d, int64_t *bytes) {
  TJ_ENGINE(e);
  if (!bytes)
    return invalid("bytes is null");
  if (b < 1 || sq < 1 || sk < 1 || hq < 1 || hkv < 1 || d < 1)
    return invalid("b, sq, sk, hq, hkv and d must be positive, got b=" + std::to_string(b) +
                   " sq=" + std::to_string(sq) + " sk=" + std::to_string(sk) + " hq=" +
                   std::to_string(hq) + " hkv=" + std::to_string(hkv) + " d=" + std::to_string(d));
  if (hq % hkv != 0)
    return invalid("hkv=" + std::to_string(hkv) + " must divide hq=" + std::to_string(hq));
  tilejit::attention::Call call;
  call.b = b;
  call.sq = sq;
  call.sk = sk;
  call.hq = hq;
  call.hkv = hkv;
  call.d = d;
  // (Sizes tj_attn_bwd would refuse get no size: the head dim, the limits.)
  if (auto spec = tilejit::attention::backwardSpecOf(call, e->engine->target()); !spec)
    return invalid(llvm::toString(spec.takeError()));
  int64_t need = tilejit::attention::backwardWorkspaceBytes(call);
  if (need < 0)
    return invalid("b=" + std::to_string(b) + " sq=" + std::to_string(sq) +
                   " sk=" + std::to_string(sk) + " hq=" + std::to_string(hq) +
                   " hkv=" + std::to_string(hkv) + " d=" + std::to_string(d) +
                   ": the workspace's size does not fit in 64 bits");
  *bytes = need;
  return ok();
}

namespace {
tj_status attnBwd(tj_engine *e, tj_dtype dtype, tj_attn_layout layout, int64_t b, int64_t sq,
                  int64_t sk, int64_t hq, int64_t hkv, int64_t d, int causal, float scale,
                  const void *q, const void *k, const void *v, const void *o, const float *lse,
                  const void *dout, void *dq, void *dk, void *dv, void *workspace,
                  int64_t workspaceBytes, void *stream, const Packed *packed) {
  TJ_ENGINE(e);
  TJ_DTYPE(dt, dtype);
  tilejit::attention::BackwardCall call;
  if (auto bad = attnForward(dt, layout, b, sq, sk, hq, hkv, d, causal, scale, q, k, v, o, lse,
                             call, packed))
    return *bad;
  if (auto bad = checkAttnTensors(
          {{"dout", dout}, {"dq", dq}, {"dk", dk}, {"dv", dv}, {"workspace", workspace}},
          "dout, dq, dk, dv and workspace"))
    return *bad;
  call.dO = uint64_t(dout);
  call.dQ = uint64_t(dq);
  call.dK = uint64_t(dk);
  call.dV = uint64_t(dv);
  call.workspace = uint64_t(workspace);
  auto spec = backwardSpecFor(e, call);
  if (!spec)
    return invalid(llvm::toString(spec.takeError()));
  // The workspace holds at least what tj_attn_bwd_workspace_size gives for
  // these sizes (which may be more for fewer or shorter sequences: the
  // heads split over more programs); a fused config's dQ sums (and, adding
  // in order for a deterministic spec, its flags) come from the pool.
  int64_t need = tilejit::attention::backwardWorkspaceBytes(call);
  if (workspaceBytes < need)
    return invalid("workspace_bytes=" + std::to_string(workspaceBytes) + " is less than the " +
                   std::to_string(need) +
                   " bytes these sizes need (tj_attn_bwd_workspace_size, asked for each call's "
                   "sizes)");
  AttnExtents x(call);
  if (auto bad = overlapping({{"dq", dq, x.qBytes},
                              {"dk", dk, x.kBytes},
                              {"dv", dv, x.kBytes},
                              {"workspace", workspace, workspaceBytes}},
                             {{"q", q, x.qBytes},
                              {"k", k, x.kBytes},
                              {"v", v, x.kBytes},
                              {"o", o, x.qBytes},
                              {"lse", lse, x.lseBytes},
                              {"dout", dout, x.qBytes},
                              {"dq", dq, x.qBytes},
                              {"dk", dk, x.kBytes},
                              {"dv", dv, x.kBytes},
                              {"workspace", workspace, workspaceBytes},
                              {"cu_seqlens_q", x.cuQ, x.offsetBytes},
                              {"cu_seqlens_k", x.cuK, x.offsetBytes}}))
    return *bad;
  // The launch checks the kernel against the spec's mode.
  call.deterministic = tilejit::attention::Params(*spec).deterministic;
  // A persistent kernel leaves the engine's margin of multiprocessors free.
  call.maxPrograms = e->engine->target().smCount() - e->smMargin.load();
  return withKernel(e, *spec, stream, [&](const tilejit::LoadedKernel &kernel) {
    return tilejit::attention::launchBackward(kernel, call, static_cast<CUstream>(stream));
  });
}
} // namespace

tj_status tj_attn_bwd(tj_engine *e, tj_dtype dtype, tj_attn_layout layout, int64_t b, int64_t sq,
                      int64_t sk, int64_t hq, int64_t hkv, int64_t d, int causal, float scale,
                      const void *q, const void *k, const void *v, const void *o, const float *lse,
                      const void *dout, void *dq, void *dk, void *dv, void *workspace,
                      int64_t workspace_bytes, void *stream) {
  return attnBwd(e, dtype, layout, b, sq, sk, hq, hkv, d, causal, scale, q, k, v, o, lse, dout, dq,
                 dk, dv, workspace, workspace_bytes, stream, nullptr);
}

tj_status tj_attn_varlen_bwd(tj_engine *e, tj_dtype dtype, int64_t b, int64_t max_sq,
                             int64_t max_sk, int64_t total_q, int64_t total_k, int64_t hq,
                             int64_t hkv, int64_t d, int causal, float scale,
                             const int32_t *cu_seqlens_q, const int32_t *cu_seqlens_k,
                             const void *q, const void *k, const void *v, const void *o,
                             const float *lse, const void *dout, void *dq, void *dk, void *dv,
                             void *workspace, int64_t workspace_bytes, void *stream) {
  TJ_ENGINE(e);
  TJ_DTYPE(dt, dtype);
  // No keys: dq = 0; no queries: dk = dv = 0 (no query sees a key).
  if (auto done = varlenWithoutRows(e, dt, true, b, max_sq, max_sk, total_q, total_k, hq, hkv, d,
                                    causal, scale, cu_seqlens_q, cu_seqlens_k,
                                    {{"q", q, total_q, hq, false},
                                     {"o", o, total_q, hq, false},
                                     {"dout", dout, total_q, hq, false},
                                     {"dq", dq, total_q, hq, true},
                                     {"k", k, total_k, hkv, false},
                                     {"v", v, total_k, hkv, false},
                                     {"dk", dk, total_k, hkv, true},
                                     {"dv", dv, total_k, hkv, true}},
                                    lse, /*fillLse=*/false, stream))
    return *done;
  Packed packed{total_q, total_k, cu_seqlens_q, cu_seqlens_k};
  return attnBwd(e, dtype, TJ_THD, b, max_sq, max_sk, hq, hkv, d, causal, scale, q, k, v, o, lse,
                 dout, dq, dk, dv, workspace, workspace_bytes, stream, &packed);
}

} // extern "C"
