/* tilejit.h - the C interface of libtilejit.so
 *
 * Kernels for a process: each call builds the kernel spec from its arguments,
 * takes the kernel from the engine's memory, its store, or compiles it (and
 * tunes it first where TILEJIT_TUNE says so), and launches it on the caller's
 * CUDA stream. Pointers are device addresses in the current CUDA context of
 * the engine's device (PyTorch's primary context); nothing synchronizes the
 * stream. While the stream captures a CUDA graph, only kernels already loaded
 * launch (a miss is an error): run each shape once before capturing.
 *
 * Settings come from the environment when the engine is created: TILEJIT_TUNE
 * (off | on-miss | background), TILEJIT_DETERMINISTIC,
 * TILEJIT_ALLOW_NONDETERMINISTIC, TILEJIT_CACHE_DIR (the
 * store), TILEJIT_TUNE_ISOLATION, TILEJIT_WORKER, TILEJIT_SM_MARGIN
 * (multiprocessors persistent kernels leave free, as TransformerEngine's
 * NVTE_*_SM_MARGIN do).
 *
 * Every function returns TJ_OK or an error status; tj_last_error() then
 * holds the message, per thread, until the next call on that thread.
 */
#ifndef TILEJIT_H
#define TILEJIT_H

#include <stdint.h>

#if defined(__GNUC__)
#define TJ_API __attribute__((visibility("default")))
#else
#define TJ_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tj_engine tj_engine;

typedef enum tj_status {
  TJ_OK = 0,
  TJ_INVALID_ARGUMENT = 1, /* a bad argument: named in tj_last_error() */
  TJ_ERROR = 2             /* no GPU, a compile, a launch or the store failed */
} tj_status;

typedef enum tj_dtype { TJ_BF16 = 0, TJ_F16 = 1, TJ_F32 = 2 } tj_dtype;

/* How attention's Q, K, V and O are stored (row-major, head dim innermost). */
typedef enum tj_attn_layout {
  TJ_BSHD = 0, /* [batch, seq, heads, dim]: Megatron's and FlashAttention's */
  TJ_BHSD = 1, /* [batch, heads, seq, dim]: torch's scaled_dot_product_attention */
  TJ_THD = 2   /* [tokens, heads, dim]: packed sequences (tj_attn_varlen_fwd and _bwd) */
} tj_attn_layout;

/* The library's version, e.g. "0.6.0" (the soname carries its minor version). */
TJ_API const char *tj_version(void);
/* The message of this thread's last failed call ("" after a success). */
TJ_API const char *tj_last_error(void);

/* An engine on CUDA device `device`, settings from the environment. */
TJ_API tj_status tj_engine_create(int device, tj_engine **out);
TJ_API void tj_engine_destroy(tj_engine *engine);
/* The device's multiprocessors and compute capability (e.g. 132, 90). */
TJ_API tj_status tj_engine_device(tj_engine *engine, int *sms, int *compute_capability);
/* Multiprocessors persistent kernels leave free for kernels that run beside
 * them (communication); 0: none. Takes effect at the next launch, without
 * recompiling. */
TJ_API tj_status tj_engine_set_sm_margin(tj_engine *engine, int sm_margin);
/* Deterministic mode (1): no tuning at run time; stored winners or defaults;
 * only kernels whose results are bitwise repeatable, whatever
 * tj_engine_set_allow_nondeterministic says. */
TJ_API tj_status tj_engine_set_deterministic(tj_engine *engine, int on);
/* 1: kernels whose results are not bitwise repeatable may be used
 * (tj_attn_bwd's configs that add dQ's parts atomically, for the shapes that
 * have them: sm_90a, head dims 64 and 128, packed sequences too), unless in
 * deterministic mode;
 * 0 (the default, or TILEJIT_ALLOW_NONDETERMINISTIC's): the same inputs give
 * the same bits. Those calls' kernels are tuned and stored apart from the
 * others. */
TJ_API tj_status tj_engine_set_allow_nondeterministic(tj_engine *engine, int allow);
/* tilejit's scratch memory on the engine's device (a fused attention
 * backward's dQ sums, split-K's partial sums) comes from a memory pool of its
 * own, ordered on the caller's stream, which keeps what it reserved between
 * calls. This returns the pool's memory to the system down to keep_bytes
 * reserved (0: all it can), except what work still queued on a stream uses,
 * and writes what the pool then holds to *reserved (if not null). The next
 * call that needs scratch reserves it again. */
TJ_API tj_status tj_engine_release_scratch(tj_engine *engine, uint64_t keep_bytes,
                                           uint64_t *reserved);

/* Warm-up: loads (compiles, tunes as the settings say) the kernel a call of
 * these arguments would use, without launching, so that later calls (and CUDA
 * graph captures) find it loaded. */
TJ_API tj_status tj_rms_norm_prepare(tj_engine *engine, int backward, tj_dtype dtype,
                                     tj_dtype wdtype, int64_t rows, int64_t cols,
                                     int zero_centered_gamma);
/* gemm: the leading dimensions as tj_gemm will get them; d_aligned: D will
 * start on a 16-byte boundary (as PyTorch's allocations do). */
TJ_API tj_status tj_gemm_prepare(tj_engine *engine, tj_dtype ab, tj_dtype out, int trans_a,
                                 int trans_b, int64_t m, int64_t n, int64_t k, int64_t lda,
                                 int64_t ldb, int64_t ldc, int64_t ldd, int with_c, int with_bias,
                                 int d_aligned);
TJ_API tj_status tj_attn_fwd_prepare(tj_engine *engine, tj_dtype dtype, tj_attn_layout layout,
                                     int64_t b, int64_t sq, int64_t sk, int64_t hq, int64_t hkv,
                                     int64_t d, int causal);
TJ_API tj_status tj_attn_bwd_prepare(tj_engine *engine, tj_dtype dtype, tj_attn_layout layout,
                                     int64_t b, int64_t sq, int64_t sk, int64_t hq, int64_t hkv,
                                     int64_t d, int causal);

/* What a call of `spec` (canonical text, e.g. "gemm ab=bf16 out=bf16 ta=0
 * tb=1 c=0 m=8192 n=4096 k=4096 bias=0"; the engine's device is the target) uses:
 * the kernel loaded for it and its config and source, or what a miss would
 * do (the store's winner, a tuning, the default). Writes up to `capacity`
 * bytes of text, NUL-terminated, into `out`; `*needed` (if not null) gets the
 * size the whole text needs. Never compiles or tunes. */
TJ_API tj_status tj_explain(tj_engine *engine, const char *spec, char *out, int64_t capacity,
                            int64_t *needed);
/* tj_explain for the attention call of these arguments (backward 0: the
 * forward, 1: the backward), as tj_attn_fwd_prepare and tj_attn_bwd_prepare
 * would build its spec: for the backward, whether dQ may be added atomically
 * follows the engine's settings (tj_engine_set_deterministic,
 * tj_engine_set_allow_nondeterministic). Never compiles or tunes. */
TJ_API tj_status tj_attn_explain(tj_engine *engine, int backward, tj_dtype dtype,
                                 tj_attn_layout layout, int64_t b, int64_t sq, int64_t sk,
                                 int64_t hq, int64_t hkv, int64_t d, int causal, char *out,
                                 int64_t capacity, int64_t *needed);

/* RMSNorm forward: rstd = 1/sqrt(mean(x^2) + eps), y = x * rstd * g with
 * g = w, or 1 + w when zero_centered_gamma. x, y: rows x cols of `dtype`,
 * contiguous; w: cols of `wdtype`; rstd: rows f32. */
TJ_API tj_status tj_rms_norm_fwd(tj_engine *engine, tj_dtype dtype, tj_dtype wdtype, const void *x,
                                 const void *w, void *y, float *rstd, int64_t rows, int64_t cols,
                                 float eps, int zero_centered_gamma, void *stream);
/* Bytes of workspace tj_rms_norm_bwd needs for this shape. */
TJ_API tj_status tj_rms_norm_bwd_workspace(tj_engine *engine, tj_dtype dtype, tj_dtype wdtype,
                                           int64_t rows, int64_t cols, int zero_centered_gamma,
                                           int64_t *bytes);
/* RMSNorm backward: dx = rstd * (dy*g - xhat * mean(dy*g*xhat)), dw = the sum
 * over rows of dy * xhat, in f32 and in a fixed order (dw has `wdtype`). */
TJ_API tj_status tj_rms_norm_bwd(tj_engine *engine, tj_dtype dtype, tj_dtype wdtype, const void *dy,
                                 const void *x, const float *rstd, const void *w, void *dx,
                                 void *dw, void *workspace, int64_t rows, int64_t cols,
                                 int zero_centered_gamma, void *stream);

/* D = alpha * op(A) @ op(B) + beta * C + bias, f32 accumulation. Row-major
 * storage: A is m x k (k x m with trans_a), B is k x n (n x k with trans_b:
 * the weight of a linear layer), C and D are m x n (C may be D:
 * accumulation into D, with ldc = ldd; C null: beta ignored); bias: n
 * elements of `ab`, added to every row (null: none). lda, ldb, ldc, ldd:
 * elements from one row to the next, at least a row (0: packed rows).
 * Rows that are not packed must lie a multiple of 16 bytes apart, and then
 * so must C's and D's (on sm_80 also A's and B's) even where packed; on
 * sm_90a A's and B's must, packed or not (they are read by the copy
 * engine). C and D start on a boundary of two elements; a D that does not
 * start on a 16-byte boundary is written by the threads themselves, not
 * through TMA stores. ab: bf16 or f16; out: bf16, f16 or f32. A GEMM
 * with few tiles over a long K splits K and takes its workspace from a
 * memory pool of tilejit's, ordered on `stream` (CUDA graph capture
 * records it).
 * sm_margin: multiprocessors to leave free for this call (-1: the engine's). */
TJ_API tj_status tj_gemm(tj_engine *engine, tj_dtype ab, tj_dtype out, int trans_a, int trans_b,
                         int64_t m, int64_t n, int64_t k, const void *a, int64_t lda, const void *b,
                         int64_t ldb, const void *c, int64_t ldc, const void *bias, void *d,
                         int64_t ldd, float alpha, float beta, int sm_margin, void *stream);

/* Attention forward (sm_80 and later; TMA and wgmma on sm_90a): O =
 * softmax(scale * Q K^T + mask) V with f32 accumulation, and lse = the
 * natural log-sum-exp of each row of scale * Q K^T (masked), f32. Q and O are
 * b x sq x hq x d (TJ_BSHD) or b x hq x sq x d (TJ_BHSD), K and V the same
 * with hkv heads and sk rows, all contiguous; lse is b x hq x sq. Query head
 * h reads kv head h / (hq / hkv) (GQA; hkv divides hq). causal: query row i
 * sees keys 0..i (the upper-left diagonal, as torch's is_causal). scale: 0
 * means 1/sqrt(d). dtype: bf16 or f16; d: 64, 128 or 256; every size >= 1,
 * hq at most 1024, sq and sk at most 2^22. Each tensor's address 16-byte
 * aligned; o and lse must not share memory with q, k, v or each other
 * (refused). */
TJ_API tj_status tj_attn_fwd(tj_engine *engine, tj_dtype dtype, tj_attn_layout layout, int64_t b,
                             int64_t sq, int64_t sk, int64_t hq, int64_t hkv, int64_t d, int causal,
                             float scale, const void *q, const void *k, const void *v, void *o,
                             float *lse, void *stream);

/* Bytes of workspace tj_attn_bwd needs for these sizes: f32 LSE and
 * rowsum(dO * O) of every query row, rows padded to 128; and where the KV
 * heads are too few to fill the GPU (hq / hkv query heads split over
 * programs), the f32 dK and dV of each part. Ask for each call's sizes:
 * fewer or shorter sequences may need more (their heads split over more
 * programs). */
TJ_API tj_status tj_attn_bwd_workspace_size(tj_engine *engine, int64_t b, int64_t sq, int64_t sk,
                                            int64_t hq, int64_t hkv, int64_t d, int64_t *bytes);
/* Attention backward: dQ, dK and dV of tj_attn_fwd from dO and the forward's
 * O and lse, for the same arguments (head dim 64, 128 or 256; on the targets
 * without wgmma, sm_80, sm_86, sm_89 and sm_90, too). dO, dQ
 * are stored as O and Q, dK and dV as K and V; all contiguous, 16-byte
 * aligned. workspace: workspace_bytes bytes, at least
 * tj_attn_bwd_workspace_size's for these sizes (refused otherwise), 16-byte
 * aligned, contents irrelevant. dq, dk, dv and the workspace must not
 * share memory with any input or with each other (nor o and lse in
 * tj_attn_fwd): refused. Deterministic (what is summed over programs is added
 * in a fixed order: the same inputs give the same bits) unless
 * tj_engine_set_allow_nondeterministic allowed otherwise; a config that adds
 * dQ's parts atomically then takes its f32 sums of dQ (b * hq * sq rounded
 * up to 128 * d * 4 bytes) from a memory pool of tilejit's, ordered on
 * `stream`, as tj_gemm's split-K does; the pool keeps the most it held for
 * the process's life (outside PyTorch's allocator). (A fused config for a
 * deterministic spec, the default at head dim 128 with enough programs
 * (under a causal mask only with as many KV heads as query heads), or a
 * stored winner, adds them in order,
 * and takes the flags that order them, 4 bytes per 64 query rows of each
 * head, beside them from the same pool.) */
TJ_API tj_status tj_attn_bwd(tj_engine *engine, tj_dtype dtype, tj_attn_layout layout, int64_t b,
                             int64_t sq, int64_t sk, int64_t hq, int64_t hkv, int64_t d, int causal,
                             float scale, const void *q, const void *k, const void *v,
                             const void *o, const float *lse, const void *dout, void *dq, void *dk,
                             void *dv, void *workspace, int64_t workspace_bytes, void *stream);

/* Attention over b packed sequences of different lengths (TJ_THD:
 * FlashAttention's varlen, Megatron's THD): q and o are total_q x hq x d, k
 * and v total_k x hkv x d, contiguous. Sequence i's query rows run from
 * cu_seqlens_q[i] to cu_seqlens_q[i + 1] and its key rows from cu_seqlens_k[i]
 * to cu_seqlens_k[i + 1]: int32, b + 1 of each, on the device, 4-byte
 * aligned, starting at 0, non-decreasing, ending at total_q and total_k (the
 * kernels read them as they are, unchecked; whatever they hold, each
 * sequence's row counts are taken as at least 0 and at most max_sq and
 * max_sk, so the kernels end as a valid call's would, and no write reaches
 * outside q's, k's and their gradients' rows). max_sq and max_sk are at
 * least the longest sequence's query and key rows (smaller values give
 * wrong results), and total_q, total_k at most b * max_sq, b * max_sk
 * (checked). lse is b x hq x max_sq: row r of sequence i at [i, head,
 * r]; its rows past a sequence's end hold unspecified values. causal: a
 * sequence's query row r sees its keys 0..r (top-left, as tj_attn_fwd;
 * FlashAttention aligns the diagonal bottom-right where a sequence's query
 * and key lengths differ). A sequence with queries and no keys gets o = 0
 * and lse = -inf. Inputs must be finite: a tile's rows past a sequence are
 * the next sequence's, multiplied by zero probabilities, so an Inf or NaN
 * there reaches this one. total_q or total_k of 0 (no query or no key rows
 * at all) runs no kernel: without keys o = 0 and lse = -inf (the backward's
 * dq = 0), without queries the backward's dk = dv = 0, filled on the stream;
 * a tensor without rows (and the workspace) may be null there, and max_sq or
 * max_sk 0. Otherwise as tj_attn_fwd; tj_attn_fwd_prepare with TJ_THD and
 * (b, max_sq, max_sk) loads the kernel ahead. */
TJ_API tj_status tj_attn_varlen_fwd(tj_engine *engine, tj_dtype dtype, int64_t b, int64_t max_sq,
                                    int64_t max_sk, int64_t total_q, int64_t total_k, int64_t hq,
                                    int64_t hkv, int64_t d, int causal, float scale,
                                    const int32_t *cu_seqlens_q, const int32_t *cu_seqlens_k,
                                    const void *q, const void *k, const void *v, void *o,
                                    float *lse, void *stream);
/* Its backward, as tj_attn_bwd: dq as q, dk and dv as k. workspace:
 * workspace_bytes, at least tj_attn_bwd_workspace_size(b, max_sq, max_sk,
 * hq, hkv, d). A fused
 * config's f32 sums of dQ from tilejit's pool take (total_q + 64 * b) * hq *
 * d * 4 bytes here (each sequence's rows padded to whole tiles of 64). */
TJ_API tj_status tj_attn_varlen_bwd(tj_engine *engine, tj_dtype dtype, int64_t b, int64_t max_sq,
                                    int64_t max_sk, int64_t total_q, int64_t total_k, int64_t hq,
                                    int64_t hkv, int64_t d, int causal, float scale,
                                    const int32_t *cu_seqlens_q, const int32_t *cu_seqlens_k,
                                    const void *q, const void *k, const void *v, const void *o,
                                    const float *lse, const void *dout, void *dq, void *dk,
                                    void *dv, void *workspace, int64_t workspace_bytes,
                                    void *stream);

#ifdef __cplusplus
}
#endif

#endif /* TILEJIT_H */
