// Keras 3's sparse categorical crossentropy and accuracy, one batch row at a time: the one definition the CPU
// kernels (backends/cpu/losses.cpp) and the CUDA kernels (backends/cuda/losses.cu) both run. The batch mean
// (sum over rows in double, in row order, divided by the rows) is the drivers' part.
//
//   float loss_r = tk::math::sparse_cce_logits_row(logits + r * n, n, label[r]);
//   tk::math::sparse_cce_logits_grad_row(logits + r * n, grad + r * n, n, label[r], dy / rows);
#pragma once
#include <cmath>
#include <cstdint>

#include "backends/math/host_device.h"

namespace tk::math {

inline constexpr float kProbabilityEpsilon = 1e-7f;  // Keras' backend epsilon

// Probabilities are clipped to [eps, 1 - eps] (std::clamp's order: NaN stays NaN).
TK_HD float clip_probability(float p) {
  return p < kProbabilityEpsilon ? kProbabilityEpsilon
                                 : (1.0f - kProbabilityEpsilon < p ? 1.0f - kProbabilityEpsilon : p);
}
TK_HD bool inside_clip(float p) { return p >= kProbabilityEpsilon && p <= 1.0f - kProbabilityEpsilon; }

// The first index of the largest value (std::max_element's choice).
TK_HD int64_t argmax_row(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t j = 1; j < n; ++j)
    if (x[best] < x[j]) best = j;
  return best;
}

// From logits: logsumexp(x) - x_y.
TK_HD float sparse_cce_logits_row(const float* x, int64_t n, int32_t y) {
  const float mx = x[argmax_row(x, n)];
  float z = 0.0f;
  for (int64_t j = 0; j < n; ++j) z += expf(x[j] - mx);
  return mx + logf(z) - x[y];
}
// From probabilities: log(sum(clip(p))) - log(clip(p_y)).
TK_HD float sparse_cce_probabilities_row(const float* p, int64_t n, int32_t y) {
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) sum += clip_probability(p[j]);
  return logf(sum) - logf(clip_probability(p[y]));
}

// g = k * (softmax(x) - onehot(y)), k = dy / rows.
TK_HD void sparse_cce_logits_grad_row(const float* x, float* g, int64_t n, int32_t y, float k) {
  const float mx = x[argmax_row(x, n)];
  float z = 0.0f;
  for (int64_t j = 0; j < n; ++j) z += (g[j] = expf(x[j] - mx));
  const float inv = k / z;
  for (int64_t j = 0; j < n; ++j) g[j] *= inv;
  g[y] -= k;
}
// The gradient through the clip is zero outside [eps, 1 - eps].
TK_HD void sparse_cce_probabilities_grad_row(const float* p, float* g, int64_t n, int32_t y, float k) {
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) sum += clip_probability(p[j]);
  for (int64_t j = 0; j < n; ++j) {
    const float d = 1.0f / sum - (j == y ? 1.0f / clip_probability(p[j]) : 0.0f);
    g[j] = inside_clip(p[j]) ? k * d : 0.0f;
  }
}

}  // namespace tk::math
