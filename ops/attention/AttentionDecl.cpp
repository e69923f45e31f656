//===- AttentionDecl.cpp --------------------------------------------------===//
#include "ops/attention/AttentionDecl.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/Twine.h"

#include <algorithm>
#include <numeric>
#include <vector>

namespace tilejit::attention {

namespace {
llvm::Error error(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

llvm::Error check(const KernelSpec &spec) {
  Params p(spec);
  const char *op = p.backward ? "attn_bwd" : "attn_fwd";
  if (p.dt == DType::F32)
    return error(llvm::Twine(op) + " takes bf16 or f16 Q, K and V, got dt=f32");
  if (p.d != 64 && p.d != 128 && p.d != 256)
    return error(llvm::Twine(op) + " head dim d must be 64, 128 or 256, got d=" + llvm::Twine(p.d));
  if (p.hq % p.hkv != 0)
    return error(llvm::Twine(op) + " kv heads must divide query heads, got hq=" +
                 llvm::Twine(p.hq) + " hkv=" + llvm::Twine(p.hkv));
  return llvm::Error::success();
}

/// Tuning measures at most this many rows (the next power of two).
constexpr int64_t kTuningSeqCap = 16384;

std::vector<ParamDecl> params() {
  return {
      {"dt", ParamDecl::Type, 0, 0, int64_t(DType::BF16), false, 0, "Q, K, V and O"},
      {"d", ParamDecl::Int, 64, 256, 128, false, 0, "head dim: 64, 128 or 256"},
      {"hq", ParamDecl::Int, 1, 1024, 1, false, 0, "query heads"},
      {"hkv", ParamDecl::Int, 1, 1024, 1, false, 0, "key and value heads (divide hq)"},
      {"causal", ParamDecl::Bool, 0, 1, 0, false, 0, "row i sees keys 0..i"},
      {"layout", ParamDecl::Int, 0, 2, 0, false, 0,
       "0: [b, s, h, d]; 1: [b, h, s, d]; 2: packed sequences [tokens, h, d]"},
      {"b", ParamDecl::Int, 1, 1 << 20, 1, true, 64, "batch: given at launch"},
      {"sq", ParamDecl::Int, 1, kMaxSeq, 1, true, kTuningSeqCap,
       "query rows per sequence: given at launch"},
      {"sk", ParamDecl::Int, 1, kMaxSeq, 1, true, kTuningSeqCap,
       "key rows per sequence: given at launch"},
  };
}

/// The forward's, and whether the results must be bitwise repeatable.
std::vector<ParamDecl> backwardParams() {
  std::vector<ParamDecl> p = params();
  p.push_back({"deterministic", ParamDecl::Bool, 0, 1, 1, false, 0,
               "1: dQ's parts added in a fixed order, the same inputs give the same bits; 0: "
               "configs that add them atomically, in any order, may be chosen too"});
  return p;
}
} // namespace

const char *layoutName(Layout layout) {
  return layout == Layout::BSHD ? "bshd" : layout == Layout::BHSD ? "bhsd" : "thd";
}

const OpDecl &forwardOp() {
  static const OpDecl decl{"attn_fwd", params(),
                           "O = softmax(scale * Q K^T + mask) V, and the log-sum-exp of each row",
                           check};
  return decl;
}

const OpDecl &backwardOp() {
  static const OpDecl decl{"attn_bwd", backwardParams(),
                           "dQ, dK and dV of attn_fwd from dO, O and its log-sum-exp", check};
  return decl;
}

bool atomicDqTunable(const Params &p) {
  // (Head dim 256 has no fused config.)
  return p.backward && p.target.hasWgmma() && p.d <= 128;
}

bool isForward(const KernelSpec &spec) { return spec.is(forwardOp()); }
bool isBackward(const KernelSpec &spec) { return spec.is(backwardOp()); }

Params::Params(const KernelSpec &s) : target(s.target) {
  if (!isForward(s) && !isBackward(s))
    return;
  backward = isBackward(s);
  dt = DType(s[DT]);
  d = s[HeadDim];
  hq = s[QHeads];
  hkv = s[KvHeads];
  causal = s[Causal] != 0;
  layout = Layout(s[Storage]);
  b = s[Batch];
  sq = s[SeqQ];
  sk = s[SeqK];
  if (backward)
    deterministic = s[Deterministic] != 0;
}

KernelSpec Params::spec() const {
  KernelSpec s(backward ? backwardOp() : forwardOp(), target);
  s.set(DT, int64_t(dt))
      .set(HeadDim, d)
      .set(QHeads, hq)
      .set(KvHeads, hkv)
      .set(Causal, causal)
      .set(Storage, int64_t(layout))
      .set(Batch, b)
      .set(SeqQ, sq)
      .set(SeqK, sk);
  if (backward)
    s.set(Deterministic, deterministic);
  return s;
}

int64_t backwardHeadSplit(int64_t b, int64_t hq, int64_t hkv, int64_t sk) {
  if (b < 1 || hq < 1 || hkv < 1 || sk < 1 || hq % hkv != 0)
    return 1;
  int64_t programs = (sk + 127) / 128 * b * hkv, group = hq / hkv;
  for (int64_t split = 1; split < group; ++split)
    if (group % split == 0 && programs * split >= 512)
      return split;
  return group;
}

double snakeShareExcess(llvm::ArrayRef<double> steps, int64_t units, int64_t programs) {
  int64_t per = int64_t(steps.size()), tiles;
  if (per < 1 || units < 1 || __builtin_mul_overflow(per, units, &tiles) ||
      tiles > (int64_t(1) << 20))
    return 1.0;
  programs = std::min(programs, tiles);
  if (programs < 1)
    return 1.0;
  // Tile t's steps repeat every `per` tiles and its program every two
  // rounds, so the loads repeat every lcm(per, 2 programs) tiles: that
  // many are walked once (the whole periods counted by multiplying) and
  // the rest are the period's first ones. (The sums are of whole numbers,
  // exact in doubles.)
  int64_t period = std::lcm(per, 2 * programs);
  int64_t walked = std::min(tiles, period), rest = tiles % walked;
  double periods = double(tiles / walked);
  std::vector<double> load(programs, 0.0), partial;
  double total = 0, partialTotal = 0, longest = 0;
  for (int64_t t = 0; t < walked; ++t) {
    if (t == rest) {
      partial = load;
      partialTotal = total;
    }
    double w = steps[t % per];
    int64_t round = t / programs, q = t % programs;
    load[round % 2 ? programs - 1 - q : q] += w;
    total += w;
    longest = std::max(longest, w);
  }
  if (rest == 0)
    partial.assign(programs, 0.0);
  double most = 0;
  for (int64_t q = 0; q < programs; ++q)
    most = std::max(most, periods * load[q] + partial[q]);
  total = periods * total + partialTotal;
  double best = std::max(total / double(programs), longest);
  return best > 0 ? most / best : 1.0;
}

double byHeadShareExcess(const Params &p, int64_t bm, int64_t bn, int64_t programs) {
  if (bm < 1 || bn < 1 || p.sq < 1 || p.sq / bm > (int64_t(1) << 20))
    return 1.0;
  int64_t mTiles = (p.sq + bm - 1) / bm, units;
  if (__builtin_mul_overflow(p.b, p.hq, &units))
    return 1.0;
  std::vector<double> steps(mTiles);
  for (int64_t i = 0; i < mTiles; ++i) {
    int64_t m = mTiles - 1 - i;
    int64_t keys = p.causal ? std::min(p.sk, (m + 1) * bm) : p.sk;
    steps[i] = double((keys + bn - 1) / bn + 1);
  }
  return snakeShareExcess(steps, units, programs);
}

double dkvShareExcess(const Params &p, int64_t bn, int64_t kvBm, int64_t programs) {
  if (bn < 1 || kvBm < 1 || p.sk < 1 || p.sk / bn > (int64_t(1) << 20))
    return 1.0;
  int64_t nTiles = (p.sk + bn - 1) / bn, units;
  int64_t split = backwardHeadSplit(p.b, p.hq, p.hkv, p.sk);
  if (__builtin_mul_overflow(p.b, p.hkv, &units) || __builtin_mul_overflow(units, split, &units))
    return 1.0;
  int64_t queryTiles = (p.sq + kvBm - 1) / kvBm;
  double heads = double(std::max<int64_t>(1, p.hq / std::max<int64_t>(p.hkv, 1) / split));
  std::vector<double> steps(nTiles);
  for (int64_t n = 0; n < nTiles; ++n)
    steps[n] =
        heads * double(std::max<int64_t>(p.causal ? queryTiles - n * bn / kvBm : queryTiles, 0)) +
        2;
  return snakeShareExcess(steps, units, programs);
}

double Params::flops() const {
  // The convention of FlashAttention's and torch's benchmarks: a causal
  // mask halves the work.
  double full = 4.0 * double(b) * double(hq) * double(sq) * double(sk) * double(d);
  double fwd = causal ? full / 2 : full;
  return backward ? 2.5 * fwd : fwd;
}

} // namespace tilejit::attention
