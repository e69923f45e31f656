//===- attn_bench.cpp - attention speed on the GPU, case by case ------------===//
//
// For each case of bench/attn_shapes.json: compiles the default config (or
// the keys of --config over it), fills Q, K and V ([b, s, h, d], bf16) with random values,
// checks 8 sampled rows of O and LSE against float64, then times the kernel
// with events (median of 15 samples of 3 back-to-back launches) and writes
// one JSON record per case (TFLOP/s as FlashAttention counts them: a causal
// mask halves the work; the backward pass is 2.5 times the forward's).
// With --backward it times the backward pass instead (--config then applies
// to it), after checking sampled rows of dQ, dK and dV against float64
// gradients that take P from the forward's LSE (checked first); --split N
// splits the query heads of each KV head's group N ways in the dK/dV kernel
// (where N divides the group) instead of the default. --packed runs the
// pass on the same tensors as packed sequences (THD: b sequences of s rows
// each, with their cu_seqlens), the same work through the varlen path; a
// case with "lengths" instead of b and s packs sequences of those lengths
// (ragged, as varlen training packs documents; --packed only), its TFLOP/s
// the sum of its sequences' work.
// --arch ARCH builds for another target of the GPU (sm_90 on Hopper: the
// kernels of targets without wgmma, cp.async and mma.sync, forward and
// backward). --nondeterministic builds the backward's spec with
// deterministic = 0, which takes configs that add dQ atomically (fused = 1).
// --db FILE runs the winner `tilejit tune` recorded there for the pass's
// spec (the default where it has none, or where the template refuses it).
//   attn_bench [--shapes FILE] [--only SUBSTRING] [--config "k=v ..."] [--backward] [--split N]
//              [--packed] [--arch ARCH] [--nondeterministic] [--db FILE] --out FILE.json
//
//===----------------------------------------------------------------------===//
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "autotune/Harness.h"
#include "bench/BenchUtil.h"
#include "bench/StoredWinners.h"
#include "compiler/Compiler.h"
#include "compiler/templates/Template.h"
#include "ops/attention/AttentionLaunch.h"
#include "ops/attention/AttentionSequences.h"
#include "runtime/CudaDriver.h"
#include "runtime/DeviceBuffer.h"

using namespace tilejit;
using namespace tilejit::bench;

const char *const tilejit::bench::kProgram = "attn_bench";

namespace {

struct Case {
  std::string name;
  int64_t b, hq, hkv, s, d;
  bool causal;
  /// Ragged packed sequences (a case's "lengths": b is their count, s the
  /// longest), else b sequences of s rows.
  bool ragged = false;
  /// The sequences' first rows and lengths (as many queries as keys), one
  /// after another in Q, K and V: BSHD's batch, or THD's packing.
  attention::Sequences seqs;
};

std::vector<Case> readCases(const std::string &path) {
  std::ifstream in(path);
  if (!in)
    die("cannot read " + path);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded())
    die(path + " is not JSON");
  std::vector<Case> out;
  for (auto &c : j["cases"]) {
    Case k{c["name"], 0, c["hq"], c["hkv"], 0, c["d"], c["causal"], c.contains("lengths"), {}};
    if (k.ragged) {
      for (auto &n : c["lengths"]) {
        int64_t len = n;
        if (len < 1)
          die(path + ": case '" + k.name + "' has a sequence of " + std::to_string(len) +
              " rows (lengths must be at least 1)");
        k.seqs.add(len, len);
        k.s = std::max(k.s, len);
      }
      if (k.seqs.count() == 0)
        die(path + ": case '" + k.name + "' has no lengths");
      k.b = k.seqs.count();
    } else {
      k.b = c["b"];
      k.s = c["s"];
      for (int64_t i = 0; i < k.b; ++i)
        k.seqs.add(k.s, k.s);
    }
    out.push_back(std::move(k));
  }
  return out;
}

/// Sampled rows of dQ (2 query rows) and of dK and dV (2 key rows)
/// against float64 gradients with P = exp(scale q k - LSE) from the
/// forward's LSE and D = rowsum(dO * O) from its O. Returns the count of
/// elements out of bounds and the worst error relative to its bound.
std::pair<int, double>
checkBackward(const Case &c, const attention::Call &call, const std::vector<unsigned char> &hq,
              const std::vector<unsigned char> &hk, const std::vector<unsigned char> &hv,
              const std::vector<unsigned char> &hdo, const std::vector<unsigned char> &ho,
              const std::vector<float> &hl, const std::vector<unsigned char> &gq,
              const std::vector<unsigned char> &gk, const std::vector<unsigned char> &gv,
              std::mt19937_64 &rng) {
  auto el = [](const std::vector<unsigned char> &v, size_t i) {
    return double(loadElement(v.data(), DType::BF16, i));
  };
  double scale = 1.0 / std::sqrt(double(c.d));
  int64_t group = c.hq / c.hkv;
  auto qa = [&](int64_t bi, int64_t row, int64_t h) { return c.seqs.qAt(call, bi, h, row); };
  auto ka = [&](int64_t bi, int64_t row, int64_t h) { return c.seqs.kAt(call, bi, h, row); };
  auto dot = [&](const std::vector<unsigned char> &a, size_t ia,
                 const std::vector<unsigned char> &b, size_t ib) {
    double r = 0;
    for (int64_t x = 0; x < c.d; ++x)
      r += el(a, ia + size_t(x)) * el(b, ib + size_t(x));
    return r;
  };
  // P, dP and D of (query i of head h, key j).
  auto terms = [&](int64_t bi, int64_t h, int64_t i, int64_t j, double &p, double &dp, double &dd) {
    int64_t kvh = h / group;
    if (c.causal && j > i) {
      p = dp = dd = 0;
      return;
    }
    p = std::exp(scale * dot(hq, qa(bi, i, h), hk, ka(bi, j, kvh)) -
                 double(hl[attention::Sequences::lseAt(call, bi, h, i)]));
    dp = dot(hdo, qa(bi, i, h), hv, ka(bi, j, kvh));
    dd = dot(hdo, qa(bi, i, h), ho, qa(bi, i, h));
  };
  std::uniform_int_distribution<int64_t> pb(0, c.b - 1), ph(0, c.hq - 1);
  auto pr = [&](int64_t bi) {
    return std::uniform_int_distribution<int64_t>(0, c.seqs.qn[size_t(bi)] - 1)(rng);
  };
  int bad = 0;
  double worst = 0;
  auto judge = [&](double got, double ref, double mag) {
    double err = std::fabs(got - ref) / (1.6e-2 * std::fabs(ref) + 8e-3 * mag + 1e-4);
    worst = std::max(worst, std::isfinite(got) ? err : 1e30);
    bad += !(err <= 1.0);
  };
  std::vector<double> acc(size_t(c.d)), mag(size_t(c.d));
  for (int t = 0; t < 2; ++t) {
    // dQ of query row i of head h.
    int64_t bi = pb(rng), h = ph(rng), i = t ? pr(bi) : c.seqs.qn[size_t(bi)] - 1;
    std::fill(acc.begin(), acc.end(), 0.0);
    std::fill(mag.begin(), mag.end(), 0.0);
    for (int64_t j = 0; j < c.seqs.qn[size_t(bi)]; ++j) {
      double p, dp, dd;
      terms(bi, h, i, j, p, dp, dd);
      if (p == 0)
        continue;
      for (int64_t x = 0; x < c.d; ++x) {
        double kx = el(hk, ka(bi, j, h / group) + size_t(x));
        acc[size_t(x)] += scale * p * (dp - dd) * kx;
        mag[size_t(x)] += scale * p * (std::fabs(dp) + std::fabs(dd)) * std::fabs(kx);
      }
    }
    for (int64_t x = 0; x < c.d; ++x)
      judge(el(gq, qa(bi, i, h) + size_t(x)), acc[size_t(x)], mag[size_t(x)]);
    // dK and dV of key row j of a KV head, over its group's query heads.
    int64_t kvh = h / group, j = t ? pr(bi) : 0;
    std::vector<double> dk(size_t(c.d), 0.0), mk(size_t(c.d), 0.0), dv(size_t(c.d), 0.0),
        mv(size_t(c.d), 0.0);
    for (int64_t hh = kvh * group; hh < (kvh + 1) * group; ++hh)
      for (int64_t i2 = 0; i2 < c.seqs.qn[size_t(bi)]; ++i2) {
        double p, dp, dd;
        terms(bi, hh, i2, j, p, dp, dd);
        if (p == 0)
          continue;
        for (int64_t x = 0; x < c.d; ++x) {
          double qx = el(hq, qa(bi, i2, hh) + size_t(x)), ox = el(hdo, qa(bi, i2, hh) + size_t(x));
          dk[size_t(x)] += scale * p * (dp - dd) * qx;
          mk[size_t(x)] += scale * p * (std::fabs(dp) + std::fabs(dd)) * std::fabs(qx);
          dv[size_t(x)] += p * ox;
          mv[size_t(x)] += p * std::fabs(ox);
        }
      }
    for (int64_t x = 0; x < c.d; ++x) {
      judge(el(gk, ka(bi, j, kvh) + size_t(x)), dk[size_t(x)], mk[size_t(x)]);
      judge(el(gv, ka(bi, j, kvh) + size_t(x)), dv[size_t(x)], mv[size_t(x)]);
    }
  }
  return {bad, worst};
}

} // namespace

int main(int argc, char **argv) {
  std::string shapesPath = "bench/attn_shapes.json", outPath, only, configText, arch, db;
  bool backward = false, packed = false, nondeterministic = false;
  int64_t split = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc)
        die("missing value after " + a);
      return argv[++i];
    };
    if (a == "--shapes")
      shapesPath = next();
    else if (a == "--out")
      outPath = next();
    else if (a == "--only")
      only = next();
    else if (a == "--config")
      configText = next();
    else if (a == "--backward")
      backward = true;
    else if (a == "--split")
      split = std::stoll(next());
    else if (a == "--packed")
      packed = true;
    else if (a == "--arch")
      arch = next();
    else if (a == "--nondeterministic")
      nondeterministic = true;
    else if (a == "--db")
      db = next();
    else
      die("unknown argument '" + a +
          "' (--shapes FILE --out FILE --only SUBSTRING --config TEXT --backward --split N "
          "--packed --arch ARCH --nondeterministic --db FILE)");
  }
  if (outPath.empty())
    die("--out FILE is required");
  if (!db.empty() && !configText.empty())
    die("--db and --config both choose the config: give one");
  std::unique_ptr<Store> store;
  if (!db.empty())
    store = openStoredWinners(db);
  auto ctx = must(useDevice(0));
  (void)ctx;
  auto info = must(queryDevice(0));
  Target target = must(info.target());
  if (!arch.empty()) {
    std::optional<Target> t = Target::parse(arch);
    if (!t)
      die("--arch " + arch + " is not a target (sm_80, sm_86, sm_89, sm_90, sm_90a)");
    target = *t;
    target.setSMs(info.smCount);
  }
  const CudaDriver &d = must(CudaDriver::get());
  CUstream s;
  cu(d.cuStreamCreate(&s, 0), "cuStreamCreate");
  std::mt19937_64 rng(20261202);
  nlohmann::json results = nlohmann::json::array();
  std::printf("%-32s %8s %8s  %s\n", "case", "ms", "TFLOP/s", "config");
  for (const Case &c : readCases(shapesPath)) {
    if (!only.empty() && c.name.find(only) == std::string::npos)
      continue;
    if (c.ragged && !packed) {
      std::string why = "ragged lengths are packed sequences: run with --packed";
      std::printf("%-32s skipped: %s\n", c.name.c_str(), why.c_str());
      results.push_back({{"name", c.name}, {"skipped", why}});
      continue;
    }
    attention::Call call;
    call.d = c.d;
    call.hq = c.hq;
    call.hkv = c.hkv;
    call.causal = c.causal;
    // --split N: the backward's query heads split N ways where N divides
    // the group, else the default.
    if (split > 0 && (c.hq / c.hkv) % split == 0)
      call.headSplit = split;
    call.b = c.b;
    call.sq = call.sk = c.s;
    call.deterministic = !nondeterministic;
    // Packed: the same rows, sequence i's from c.seqs.q0[i]; sq and sk the
    // longest sequence's.
    std::optional<DeviceBuffer> cuSeqlens;
    if (packed) {
      call.layout = attention::Layout::THD;
      call.totalQ = call.totalK = c.seqs.rowsQ();
      std::vector<int32_t> offsets(c.seqs.q0.begin(), c.seqs.q0.end());
      offsets.push_back(int32_t(c.seqs.rowsQ()));
      cuSeqlens.emplace(must(DeviceBuffer::allocate(offsets.size() * 4)));
      must(cuSeqlens->upload(offsets));
      call.cuSeqlensQ = call.cuSeqlensK = cuSeqlens->ptr();
    }
    KernelSpec spec = must(attention::specOf(call, target));
    // --config's keys over the pass's default (none: the default); false
    // where the template refuses the result, which is said and skipped.
    // --db: the stored winner, where there is one the template takes.
    bool tuned = false;
    auto configFor = [&](const KernelSpec &s, const char *pass, TileConfig &config) {
      if (store) {
        if (auto won = storedWinner(*store, s, c.name))
          config = *won, tuned = true;
        return true;
      }
      if (configText.empty())
        return true;
      const KernelTemplate &t = getTemplate(s);
      config = t.defaultConfig(s).mergedWith(must(TileConfig::parse(configText)));
      llvm::Error err = t.checkConfig(s, config);
      if (!err)
        return true;
      std::string why =
          "config " + config.canonical() + " refused: " + llvm::toString(std::move(err));
      std::printf("%-32s skipped: %s\n", c.name.c_str(), why.c_str());
      results.push_back({{"name", c.name}, {"pass", pass}, {"skipped", why}});
      return false;
    };
    TileConfig config;
    if (!backward && !configFor(spec, "forward", config))
      continue;
    auto t0 = std::chrono::steady_clock::now();
    auto compiled = compileKernel(spec, config);
    double compileMs =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!compiled)
      die(c.name + ": " + llvm::toString(compiled.takeError()));
    auto kernel = must(LoadedKernel::load(*compiled));

    size_t nq = size_t(c.seqs.rowsQ() * c.hq * c.d), nk = size_t(c.seqs.rowsK() * c.hkv * c.d);
    auto hq = randomValues(DType::BF16, nq, rng()), hk = randomValues(DType::BF16, nk, rng()),
         hv = randomValues(DType::BF16, nk, rng());
    auto bf16 = [](const std::vector<unsigned char> &v, size_t i) {
      return double(loadElement(v.data(), DType::BF16, i));
    };
    DeviceBuffer q = must(DeviceBuffer::allocate(nq * 2)), k = must(DeviceBuffer::allocate(nk * 2)),
                 v = must(DeviceBuffer::allocate(nk * 2)), o = must(DeviceBuffer::allocate(nq * 2)),
                 lse = must(DeviceBuffer::allocate(size_t(c.b * c.hq * c.s) * 4));
    must(q.upload(hq));
    must(k.upload(hk));
    must(v.upload(hv));
    must(o.fill(0xFF, s));
    must(lse.fill(0xFF, s));
    call.q = q.ptr();
    call.k = k.ptr();
    call.v = v.ptr();
    call.o = o.ptr();
    call.lse = lse.ptr();
    must(attention::launch(*kernel, call, info.smCount, s));
    cu(d.cuStreamSynchronize(s), "sync");

    // 8 sampled rows (the last among them) against float64.
    std::vector<unsigned char> ho(nq * 2);
    std::vector<float> hl(size_t(c.b * c.hq * c.s));
    must(o.download(ho));
    must(lse.download(hl));
    std::uniform_int_distribution<int64_t> pb(0, c.b - 1), ph(0, c.hq - 1);
    int bad = 0;
    double worst = 0, scale = 1.0 / std::sqrt(double(c.d));
    std::vector<double> p(size_t(c.s));
    for (int t = 0; t < 8; ++t) {
      int64_t bi = t ? pb(rng) : c.b - 1, h = t ? ph(rng) : c.hq - 1;
      int64_t len = c.seqs.qn[size_t(bi)],
              i = t ? std::uniform_int_distribution<int64_t>(0, len - 1)(rng) : len - 1;
      int64_t kvh = attention::kvHeadOf(call, h), keys = c.seqs.visible(c.causal, bi, i);
      auto qa = [&](int64_t row) { return c.seqs.qAt(call, bi, h, row); };
      auto ka = [&](int64_t row) { return c.seqs.kAt(call, bi, kvh, row); };
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < keys; ++j) {
        double dot = 0;
        for (int64_t x = 0; x < c.d; ++x)
          dot += bf16(hq, qa(i) + size_t(x)) * bf16(hk, ka(j) + size_t(x));
        p[size_t(j)] = scale * dot;
        mx = std::max(mx, p[size_t(j)]);
      }
      for (int64_t j = 0; j < keys; ++j)
        sum += (p[size_t(j)] = std::exp(p[size_t(j)] - mx));
      for (int64_t x = 0; x < c.d; ++x) {
        double ref = 0, mag = 0;
        for (int64_t j = 0; j < keys; ++j) {
          double term = p[size_t(j)] / sum * bf16(hv, ka(j) + size_t(x));
          ref += term;
          mag += std::fabs(term);
        }
        double got = bf16(ho, qa(i) + size_t(x));
        double err = std::fabs(got - ref) / (1.6e-2 * std::fabs(ref) + 8e-3 * mag + 1e-4);
        worst = std::max(worst, std::isfinite(got) ? err : 1e30);
        bad += !(err <= 1.0);
      }
      double gotL = hl[attention::Sequences::lseAt(call, bi, h, i)], refL = mx + std::log(sum);
      double errL = std::fabs(gotL - refL) / (2e-5 * std::fabs(refL) + 2e-5);
      worst = std::max(worst, std::isfinite(gotL) ? errL : 1e30);
      bad += !(errL <= 1.0);
    }

    std::unique_ptr<LoadedKernel> bwdKernel;
    attention::BackwardCall bcall;
    std::vector<DeviceBuffer> grads;
    if (backward) {
      auto bspecOr = attention::backwardSpecOf(call, target);
      if (!bspecOr) {
        // A case the backward does not take (head dim 256): said, not timed.
        std::string why = llvm::toString(bspecOr.takeError());
        std::printf("%-32s skipped: %s\n", c.name.c_str(), why.c_str());
        results.push_back({{"name", c.name}, {"pass", "backward"}, {"skipped", why}});
        continue;
      }
      KernelSpec bspec = *bspecOr;
      if (!configFor(bspec, "backward", config))
        continue;
      t0 = std::chrono::steady_clock::now();
      compiled = compileKernel(bspec, config);
      compileMs =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (!compiled) {
        // A case the backward does not take (head dim 256): said, not timed.
        std::string why = llvm::toString(compiled.takeError());
        std::printf("%-32s skipped: %s\n", c.name.c_str(), why.c_str());
        results.push_back({{"name", c.name}, {"pass", "backward"}, {"skipped", why}});
        continue;
      }
      bwdKernel = must(LoadedKernel::load(*compiled));
      static_cast<attention::Call &>(bcall) = call;
      auto hdo = randomValues(DType::BF16, nq, rng());
      for (size_t bytes :
           {nq * 2, nq * 2, nk * 2, nk * 2,
            size_t(attention::backwardWorkspaceBytes(call, attention::fusedBackward(*bwdKernel)))})
        grads.push_back(must(DeviceBuffer::allocate(bytes)));
      must(grads[0].upload(hdo));
      for (size_t i = 1; i < grads.size(); ++i)
        must(grads[i].fill(0xFF, s));
      bcall.dO = grads[0].ptr();
      bcall.dQ = grads[1].ptr();
      bcall.dK = grads[2].ptr();
      bcall.dV = grads[3].ptr();
      bcall.workspace = grads[4].ptr();
      bcall.workspaceSize = int64_t(grads[4].bytes());
      must(attention::launchBackward(*bwdKernel, bcall, s));
      cu(d.cuStreamSynchronize(s), "sync");
      std::vector<unsigned char> gq(nq * 2), gk(nk * 2), gv(nk * 2);
      must(grads[1].download(gq));
      must(grads[2].download(gk));
      must(grads[3].download(gv));
      auto [b2, w2] = checkBackward(c, call, hq, hk, hv, hdo, ho, hl, gq, gk, gv, rng);
      bad += b2;
      worst = std::max(worst, w2);
    }
    auto once = [&] {
      if (backward)
        must(attention::launchBackward(*bwdKernel, bcall, s));
      else
        must(attention::launch(*kernel, call, info.smCount, s));
    };

    std::vector<double> ms;
    CUevent e0, e1;
    cu(d.cuEventCreate(&e0, 0), "event");
    cu(d.cuEventCreate(&e1, 0), "event");
    for (int w = 0; w < 3; ++w)
      once();
    for (int r = 0; r < 15; ++r) {
      cu(d.cuEventRecord(e0, s), "record");
      for (int j = 0; j < 3; ++j)
        once();
      cu(d.cuEventRecord(e1, s), "record");
      cu(d.cuEventSynchronize(e1), "sync");
      float t = 0;
      cu(d.cuEventElapsedTime_v2(&t, e0, e1), "elapsed");
      ms.push_back(double(t) / 3);
    }
    double med = median(ms);
    // The backward's two kernels alone: dQ (which fills the workspace),
    // then dK and dV.
    double partMs[2] = {0, 0};
    for (int part = 0; backward && part < 2; ++part) {
      bcall.only = part;
      std::vector<double> pm;
      for (int r = 0; r < 7; ++r) {
        cu(d.cuEventRecord(e0, s), "record");
        once();
        cu(d.cuEventRecord(e1, s), "record");
        cu(d.cuEventSynchronize(e1), "sync");
        float t = 0;
        cu(d.cuEventElapsedTime_v2(&t, e0, e1), "elapsed");
        pm.push_back(double(t));
      }
      partMs[part] = median(pm);
      bcall.only = -1;
    }
    d.cuEventDestroy_v2(e0);
    d.cuEventDestroy_v2(e1);
    // (Ragged: each sequence's work, as a problem of one sequence.)
    attention::Params pp(spec);
    pp.backward = backward;
    double flops = 0;
    for (int64_t len : c.seqs.qn) {
      attention::Params one = pp;
      one.b = 1, one.sq = one.sk = len;
      flops += one.flops();
    }
    double tflops = flops / (med * 1e-3) / 1e12;
    std::printf("%-32s %8.3f %8.1f  %s%s", c.name.c_str(), med, tflops,
                compiled->config.canonical().c_str(), bad ? "  CHECK FAILED" : "");
    if (backward)
      std::printf("  (dQ %.3f ms, dK dV %.3f ms)", partMs[0], partMs[1]);
    std::printf("\n");
    std::fflush(stdout);
    results.push_back({{"name", c.name},
                       {"pass", backward ? "backward" : "forward"},
                       {"layout", attention::layoutName(call.layout)},
                       {"arch", std::string(target.archName())},
                       {"b", c.b},
                       {"hq", c.hq},
                       {"hkv", c.hkv},
                       {"s", c.s},
                       {"tokens", c.seqs.rowsQ()},
                       {"d", c.d},
                       {"causal", c.causal},
                       {"ms", med},
                       {"tflops", tflops},
                       {"config", compiled->config.canonical()},
                       {"tuned", tuned},
                       {"registers", compiled->entries.front().registers},
                       {"spill_bytes", compiled->entries.front().spillBytes},
                       {"compile_ms", compileMs},
                       {"dq_ms", partMs[0]},
                       {"dkdv_ms", partMs[1]},
                       {"check_bad", bad},
                       {"check_worst", worst}});
    if (c.ragged)
      results.back()["lengths"] = c.seqs.qn;
    if (backward)
      results.back()["deterministic"] = !nondeterministic;
  }
  nlohmann::json doc = {{"gpu", info.name}, {"sms", info.smCount}, {"results", results}};
  std::ofstream out(outPath);
  out << doc.dump(1) << "\n";
  if (!out)
    die("cannot write " + outPath);
  return 0;
}
