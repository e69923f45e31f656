//===- AttentionSequences.h - the sequences of an attention problem -*- C++ -*-===//
//
// The sequences of an attention call, where each one's rows lie in Q, K, V
// and their outputs; the small problem the tuning harnesses check each
// candidate on against float64 (checkedSequences), the problem they time it
// on (tuningSequences) and how many of its sequences the device reference
// covers (referenceSequences). Host-side, for the harnesses and their
// tests.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "ops/attention/AttentionLaunch.h"

namespace tilejit::attention {

/// Offset of element 0 of row i of sequence s, head h, in a tensor of
/// `heads` heads and `rows` rows a sequence (BHSD) or of rows first..
/// (BSHD, THD: [rows, heads, d]).
inline size_t rowAt(const Call &c, int64_t heads, int64_t rows, int64_t first, int64_t s, int64_t h,
                    int64_t i) {
  return c.layout != Layout::BHSD ? size_t(((first + i) * heads + h) * c.d)
                                  : size_t(((s * heads + h) * rows + i) * c.d);
}

/// The KV head query head h reads.
inline int64_t kvHeadOf(const Call &c, int64_t h) { return h / (c.hq / c.hkv); }

/// The sequences of a problem: their first rows in Q (O, dO) and in K (V)
/// and their lengths. BSHD and BHSD: b of sq queries and sk keys; THD: the
/// sequences cu_seqlens describes.
struct Sequences {
  std::vector<int64_t> q0, qn, k0, kn;

  void add(int64_t queries, int64_t keys) {
    q0.push_back(q0.empty() ? 0 : q0.back() + qn.back());
    k0.push_back(k0.empty() ? 0 : k0.back() + kn.back());
    qn.push_back(queries);
    kn.push_back(keys);
  }
  int64_t count() const { return int64_t(qn.size()); }
  int64_t rowsQ() const { return q0.back() + qn.back(); }
  int64_t rowsK() const { return k0.back() + kn.back(); }
  /// The rows of Q (K) of the first n sequences.
  int64_t rowsQ(int64_t n) const { return n < count() ? q0[size_t(n)] : rowsQ(); }
  int64_t rowsK(int64_t n) const { return n < count() ? k0[size_t(n)] : rowsK(); }
  /// The longest sequence's queries and the shortest's.
  int64_t longestQ() const { return *std::max_element(qn.begin(), qn.end()); }
  int64_t shortestQ() const { return *std::min_element(qn.begin(), qn.end()); }
  /// The sequence of row `row` (counted over all; `first`: q0 or k0), and
  /// the row in it.
  static std::pair<int64_t, int64_t> locate(const std::vector<int64_t> &first, int64_t row) {
    int64_t s = int64_t(std::upper_bound(first.begin(), first.end(), row) - first.begin()) - 1;
    return {s, row - first[size_t(s)]};
  }
  /// Keys query row i of sequence s sees (a causal mask's diagonal
  /// top-left, as the kernels' contract).
  int64_t visible(bool causal, int64_t s, int64_t i) const {
    return causal ? std::min(kn[size_t(s)], i + 1) : kn[size_t(s)];
  }
  /// Offsets, in the tensors of the call c these sequences are of, of row
  /// i of sequence s: of query head h in Q, O, dO and dQ; of KV head kvh
  /// in K, V, dK and dV; of query head h in LSE and D ([b, hq, sq]).
  size_t qAt(const Call &c, int64_t s, int64_t h, int64_t i) const {
    return rowAt(c, c.hq, c.sq, q0[size_t(s)], s, h, i);
  }
  size_t kAt(const Call &c, int64_t s, int64_t kvh, int64_t j) const {
    return rowAt(c, c.hkv, c.sk, k0[size_t(s)], s, kvh, j);
  }
  static size_t lseAt(const Call &c, int64_t s, int64_t h, int64_t i) {
    return size_t((s * c.hq + h) * c.sq + i);
  }
};

/// b sequences of sq queries and sk keys each (BSHD, BHSD).
inline Sequences equalSequences(const Call &c) {
  Sequences seqs;
  for (int64_t i = 0; i < c.b; ++i)
    seqs.add(c.sq, c.sk);
  return seqs;
}

/// The problem a candidate is checked on: at most 333 queries and keys
/// (sq == sk kept when they are equal). BSHD and BHSD: two sequences (the
/// batch's stride in the candidate and in the device reference). THD:
/// three, of about two thirds, one and all of the rows: a tile that runs
/// past its sequence into the next one's rows, a sequence of one row, and
/// one of the longest length, so the offsets, the masks of rows and keys
/// past a sequence and (fused) dQ's sums of each sequence are all checked.
inline Sequences checkedSequences(Call &c) {
  bool square = c.sq == c.sk;
  c.sq = std::min<int64_t>(c.sq, 333);
  c.sk = square ? c.sq : std::min<int64_t>(c.sk, 333);
  if (c.layout != Layout::THD) {
    c.b = 2;
    return equalSequences(c);
  }
  Sequences seqs;
  seqs.add(c.sq - c.sq / 3, c.sk - c.sk / 3);
  seqs.add(1, 1);
  seqs.add(c.sq, c.sk);
  c.b = seqs.count();
  return seqs;
}

/// The sequences of the problem a candidate is timed on, from its spec's
/// sizes. BSHD and BHSD: b of sq queries and sk keys. THD, where the spec
/// gives the count and the longest (max_seqlen): lengths in a cycle of
/// kTuningCycle, the longest first, then 6, 14 and 2 23rds of it (at least
/// one row): ragged as packed documents are, most ending inside a tile, so
/// that the timing sees what a share of unequal tiles costs (a static
/// share's slowest program; bench/NOTES.md b32, b33).
constexpr int64_t kTuningCycle = 4;
inline Sequences tuningSequences(const Call &c) {
  if (c.layout != Layout::THD)
    return equalSequences(c);
  constexpr int64_t parts[kTuningCycle] = {23, 6, 14, 2};
  Sequences seqs;
  for (int64_t i = 0; i < c.b; ++i) {
    int64_t p = parts[i % kTuningCycle];
    seqs.add(std::max<int64_t>(c.sq * p / 23, 1), std::max<int64_t>(c.sk * p / 23, 1));
  }
  return seqs;
}

/// How many of `seqs` (the first ones) the device reference covers: all of
/// them, or as many as keep its f32 arrays (`queryRowBytes` a query row,
/// `keyRowBytes` a key row) within `maxBytes` and its work within
/// `maxWork` (query row, key, head) triples, and their count within a
/// grid's third dimension (`maxSequences`). The backward's timed problem
/// repeats the covered sequences' inputs over the others, a block of all
/// of them at a time, so their count is a whole number of the lengths'
/// cycles: at least one cycle (past the bounds where one sequence already
/// is: a cycle holds about twice the longest's rows and 1.5 times its
/// work), or every sequence where there are fewer.
inline int64_t referenceSequences(const Call &c, const Sequences &seqs, size_t queryRowBytes,
                                  size_t keyRowBytes, size_t maxBytes, int64_t maxWork,
                                  int64_t maxSequences) {
  size_t bytes = 0;
  int64_t work = 0, fit = 0;
  for (; fit < seqs.count() && fit < maxSequences; ++fit) {
    size_t s = size_t(fit);
    bytes += size_t(seqs.qn[s]) * queryRowBytes + size_t(seqs.kn[s]) * keyRowBytes;
    work += c.hq * seqs.qn[s] * seqs.kn[s];
    if (bytes > maxBytes || work > maxWork)
      break;
  }
  if (fit >= seqs.count())
    return seqs.count();
  int64_t cycle = c.layout == Layout::THD ? kTuningCycle : 1;
  if (seqs.count() <= cycle)
    return seqs.count();
  return std::max(cycle, fit / cycle * cycle);
}

} // namespace tilejit::attention
