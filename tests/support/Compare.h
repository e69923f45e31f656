//===- Compare.h - element-by-element comparison with a reference --*- C++ -*-===//
//
// As torch.testing.assert_close: every element must satisfy
//   |a[i] - ref[i]| <= atol * rms(ref) + rtol * |ref[i]| + accum * scale[i]
// where rms(ref) is the reference's root mean square (atol follows the
// reference's magnitude), rtol covers the result's rounding to its dtype, and
// `scale`, where given, is the sum of the magnitudes of the f32 terms that
// make up the element (its cancellation: rounding in f32 is relative to it,
// not to the result). A failure names the worst element, by its index, with
// both values and the bound it broke, and how many elements broke theirs. A
// non-finite element where the reference is finite always fails.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <gtest/gtest.h>
#include <string>
#include <vector>

#include "tests/support/HostTensor.h"

namespace tilejit::testing {

struct Tolerance {
  double rtol = 0; // of |ref[i]|
  double atol = 0; // of rms(ref)
  /// Of scale[i]: f32 rounding of a sum of terms, relative to the terms.
  double accum = 1e-5;
};

/// Tolerances for a result stored as `t`: rtol is about eight times the
/// dtype's rounding (half a unit in the last place) for bf16 and four times
/// for f16; f32 results come from f32 reductions of up to 10^5 elements.
inline Tolerance tolerance(DType t) {
  switch (t) {
  case DType::BF16:
    return {1.6e-2, 1e-3};
  case DType::F16:
    return {2e-3, 1e-4};
  case DType::F32:
    return {1e-5, 1e-6};
  }
  return {};
}

/// The outcome of one comparison.
struct Comparison {
  size_t count = 0;      // elements compared
  size_t mismatches = 0; // elements outside their bound
  size_t worst = 0;      // the element furthest outside (or nearest to) its bound
  double actual = 0, expected = 0, diff = 0, allowed = 0;
  double rms = 0; // of the reference
  bool ok() const { return mismatches == 0; }
};

/// Compares `a` with `ref` element by element; `scale` is empty or one value
/// per element.
inline Comparison compare(const HostTensor &a, const std::vector<double> &ref, Tolerance tol,
                          const std::vector<double> &scale = {}) {
  Comparison r;
  r.count = ref.size();
  // Over the finite references: an infinite one (an LSE of no keys) must
  // be matched exactly, and must not widen every other element's bound.
  double sumSq = 0;
  size_t finite = 0;
  for (double v : ref)
    if (std::isfinite(v)) {
      sumSq += v * v;
      ++finite;
    }
  r.rms = finite ? std::sqrt(sumSq / double(finite)) : 0;
  double worstRatio = -1;
  for (size_t i = 0; i < ref.size(); ++i) {
    double v = i < a.count ? double(a.get(i)) : NAN;
    double allowed = tol.atol * r.rms + tol.rtol * std::fabs(ref[i]) +
                     (scale.empty() ? 0.0 : tol.accum * std::fabs(scale[i]));
    double diff = std::fabs(v - ref[i]);
    bool good;
    double ratio;
    if (!std::isfinite(ref[i])) {
      good = v == ref[i] || (std::isnan(v) && std::isnan(ref[i]));
      ratio = good ? 0 : INFINITY;
    } else if (!std::isfinite(v)) {
      good = false;
      ratio = INFINITY;
    } else {
      good = diff <= allowed;
      ratio = allowed > 0 ? diff / allowed : (diff > 0 ? INFINITY : 0);
    }
    if (!good)
      ++r.mismatches;
    if (ratio > worstRatio) {
      worstRatio = ratio;
      r.worst = i;
      r.actual = v;
      r.expected = ref[i];
      r.diff = diff;
      r.allowed = allowed;
    }
  }
  if (a.count != ref.size())
    r.mismatches = std::max<size_t>(r.mismatches, 1);
  return r;
}

/// "[row, col]" of flat index `i` in rows of `cols` elements; "[i]" for cols 0.
inline std::string indexName(size_t i, size_t cols) {
  if (cols == 0)
    return "[" + std::to_string(i) + "]";
  return "[" + std::to_string(i / cols) + ", " + std::to_string(i % cols) + "]";
}

/// For EXPECT_TRUE: `a` matches `ref` (rows of `cols` elements; 0 for a
/// vector) within `tol`.
inline ::testing::AssertionResult allClose(const HostTensor &a, const std::vector<double> &ref,
                                           Tolerance tol, size_t cols,
                                           const std::vector<double> &scale = {}) {
  Comparison c = compare(a, ref, tol, scale);
  if (c.ok())
    return ::testing::AssertionSuccess();
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "%zu of %zu elements (%zu given) outside |a - ref| <= %g * rms(ref) + %g * |ref|%s "
                "(rms(ref) %.6g); worst %s (flat %zu): got %.9g, expected %.9g, |diff| %.6g > "
                "%.6g allowed",
                c.mismatches, c.count, a.count, tol.atol, tol.rtol,
                scale.empty() ? "" : (" + " + std::to_string(tol.accum) + " * scale").c_str(),
                c.rms, indexName(c.worst, cols).c_str(), c.worst, c.actual, c.expected, c.diff,
                c.allowed);
  return ::testing::AssertionFailure() << buf;
}

} // namespace tilejit::testing
