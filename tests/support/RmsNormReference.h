//===- RmsNormReference.h - RMSNorm in float64 on the host ---------*- C++ -*-===//
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "tests/support/HostTensor.h"

namespace tilejit::testing {

struct RmsNormReference {
  std::vector<double> y, rstd, dx, dw;
  /// Per element of dx and dw, the sum of the magnitudes of the terms that
  /// make it up (rstd * (|dy*g| + |xhat * mean|), and the sum over rows of
  /// |dy * xhat|): where the terms cancel (a row of one element, a column of
  /// dw whose terms sum to about zero) f32 rounding is relative to these.
  std::vector<double> dxScale, dwScale;
};

/// The forward (y, rstd) of `rows` x `cols` x with weight w, and with `dy`
/// the backward (dx, dw) too. The backward uses rstd rounded to f32, as the
/// kernel receives it.
inline RmsNormReference rmsNormReference(int64_t rows, int64_t cols, bool zeroCenteredGamma,
                                         const HostTensor &x, const HostTensor &w,
                                         const HostTensor *dy, double eps) {
  RmsNormReference r;
  size_t n = size_t(cols);
  r.y.resize(rows * n);
  r.rstd.resize(rows);
  r.dx.resize(dy ? rows * n : 0);
  r.dxScale.resize(dy ? rows * n : 0);
  r.dw.assign(dy ? n : 0, 0.0);
  r.dwScale.assign(dy ? n : 0, 0.0);
  std::vector<double> g(n);
  for (size_t j = 0; j < n; ++j)
    g[j] = double(w.get(j)) + (zeroCenteredGamma ? 1.0 : 0.0);
  for (int64_t i = 0; i < rows; ++i) {
    double ss = 0;
    for (size_t j = 0; j < n; ++j) {
      double v = x.get(i * n + j);
      ss += v * v;
    }
    double rs = 1.0 / std::sqrt(ss / double(n) + eps);
    r.rstd[i] = rs;
    double rsf = double(float(rs));
    for (size_t j = 0; j < n; ++j)
      r.y[i * n + j] = double(x.get(i * n + j)) * rs * g[j];
    if (!dy)
      continue;
    double dot = 0;
    for (size_t j = 0; j < n; ++j)
      dot += double(dy->get(i * n + j)) * g[j] * double(x.get(i * n + j)) * rsf;
    double mean = dot / double(n);
    for (size_t j = 0; j < n; ++j) {
      double xhat = double(x.get(i * n + j)) * rsf;
      double dyg = double(dy->get(i * n + j)) * g[j];
      r.dx[i * n + j] = rsf * (dyg - xhat * mean);
      r.dxScale[i * n + j] = rsf * (std::fabs(dyg) + std::fabs(xhat * mean));
      r.dw[j] += double(dy->get(i * n + j)) * xhat;
      r.dwScale[j] += std::fabs(double(dy->get(i * n + j)) * xhat);
    }
  }
  return r;
}

} // namespace tilejit::testing
