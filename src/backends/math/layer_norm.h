// LayerNormalization's fused kernels' math over one row of n features (the CPU's backends/cpu/layer_norm.cpp and
// CUDA's tensor_ops.cu both run it): statistics in double, two passes; y in Keras 3's order of operations
// (inv = rstd * gamma; y = x * inv + (beta - mean * inv)), so the fused op rounds as Keras' composite does.
//
//   tk::math::layer_norm_stats(x, n, eps, &mean, &rstd);
#pragma once
#include <cmath>
#include <cstdint>

#include "backends/math/host_device.h"

namespace tk::math {

TK_HD void layer_norm_stats(const float* x, int64_t n, float eps, float* mean, float* rstd) {
  double s = 0.0;
  for (int64_t j = 0; j < n; ++j) s += static_cast<double>(x[j]);
  const double m = s / static_cast<double>(n);
  double v = 0.0;
  for (int64_t j = 0; j < n; ++j) {
    const double d = static_cast<double>(x[j]) - m;
    v += d * d;
  }
  *mean = static_cast<float>(m);
  *rstd = static_cast<float>(1.0 / sqrt(v / static_cast<double>(n) + static_cast<double>(eps)));
}

TK_HD void layer_norm_apply(const float* x, int64_t n, float mean, float rstd, const float* gamma, const float* beta,
                            float* y) {
  for (int64_t j = 0; j < n; ++j) {
    const float inv = rstd * gamma[j];
    y[j] = x[j] * inv + (beta[j] - mean * inv);
  }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma, xhat = (x - mean) * rstd; sums in double.
TK_HD void layer_norm_input_grad(const float* dy, const float* x, int64_t n, float mean, float rstd, const float* gamma,
                                 float* dx) {
  double sg = 0.0, sgx = 0.0;
  for (int64_t j = 0; j < n; ++j) {
    const double g = static_cast<double>(dy[j]) * gamma[j];
    const double xhat = (static_cast<double>(x[j]) - mean) * rstd;
    sg += g;
    sgx += g * xhat;
  }
  const double mg = sg / static_cast<double>(n), mgx = sgx / static_cast<double>(n);
  for (int64_t j = 0; j < n; ++j) {
    const double xhat = (static_cast<double>(x[j]) - mean) * rstd;
    dx[j] = static_cast<float>(rstd * (static_cast<double>(dy[j]) * gamma[j] - mg - xhat * mgx));
  }
}

}  // namespace tk::math
