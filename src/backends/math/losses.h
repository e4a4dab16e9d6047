// Keras 3's losses and accuracy metrics, one element or one batch row at a time: the one definition the CPU kernels
// (backends/cpu/losses.cpp) and the CUDA kernels (backends/cuda/losses.cu) both run. The batch mean (the terms
// summed in double, in order, divided by the count) is the drivers' part.
//
//   float loss_r = tk::math::sparse_cce_logits_row(logits + r * n, n, label[r]);
//   tk::math::sparse_cce_logits_grad_row(logits + r * n, grad + r * n, n, label[r], dy / rows);
//   double term_i = tk::math::bce_term(p[i], t[i], from_logits);   // mean = sum of terms / n
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

// ---- mean squared error, per element: (p - t)^2, and its gradient k * (p - t) with k = 2 * dy / n
TK_HD double mse_term(float p, float t) {
  const double d = static_cast<double>(p - t);
  return d * d;
}
TK_HD float mse_grad_element(float p, float t, float k) { return k * (p - t); }

// ---- binary crossentropy, per element (the mean is over every element)
// softplus(x) = max(x, 0) + log1p(exp(-|x|)); a NaN stays NaN (std::max(x, 0.0f)'s order).
TK_HD float softplus(float x) { return (x < 0.0f ? 0.0f : x) + log1pf(expf(-fabsf(x))); }
// From logits: softplus(x) - x t. From probabilities: -(t log(clip(p)) + (1 - t) log(1 - clip(p))).
TK_HD double bce_term(float p, float t, bool from_logits) {
  if (from_logits) return static_cast<double>(softplus(p) - p * t);
  const float c = clip_probability(p);
  return -static_cast<double>(t * logf(c) + (1.0f - t) * logf(1.0f - c));
}
// k = dy / n. From logits: k (sigmoid(x) - t). From probabilities: -k (t / p - (1 - t) / (1 - p)), zero outside the
// clip.
TK_HD float bce_grad_element(float p, float t, float k, bool from_logits) {
  if (from_logits) return k * (1.0f / (1.0f + expf(-p)) - t);
  return inside_clip(p) ? -k * (t / p - (1.0f - t) / (1.0f - p)) : 0.0f;
}

// ---- categorical crossentropy (one-hot or soft targets), per row
// From logits: -sum t_j (x_j - logsumexp(x)). From probabilities: q = p / sum(p), -sum t_j log(clip(q_j)). The row's
// terms summed in double.
TK_HD double cce_row(const float* p, const float* t, int64_t n, bool from_logits) {
  double s = 0.0;
  if (from_logits) {
    const float mx = p[argmax_row(p, n)];
    float z = 0.0f;
    for (int64_t j = 0; j < n; ++j) z += expf(p[j] - mx);
    const float lse = mx + logf(z);
    for (int64_t j = 0; j < n; ++j) s -= t[j] * (p[j] - lse);
  } else {
    float sum = 0.0f;
    for (int64_t j = 0; j < n; ++j) sum += p[j];
    for (int64_t j = 0; j < n; ++j) s -= t[j] * logf(clip_probability(p[j] / sum));
  }
  return s;
}
// k = dy / rows. From logits: k (softmax(x) sum(t) - t). From probabilities: with g_j = dL/dq_j (zero outside the
// clip), dL/dp_j = k (g_j - sum_i g_i q_i) / sum(p).
TK_HD void cce_grad_row(const float* p, const float* t, float* g, int64_t n, float k, bool from_logits) {
  if (from_logits) {
    const float mx = p[argmax_row(p, n)];
    float z = 0.0f, tsum = 0.0f;
    for (int64_t j = 0; j < n; ++j) z += (g[j] = expf(p[j] - mx));
    for (int64_t j = 0; j < n; ++j) tsum += t[j];
    for (int64_t j = 0; j < n; ++j) g[j] = k * (g[j] / z * tsum - t[j]);
  } else {
    float sum = 0.0f, gq = 0.0f;
    for (int64_t j = 0; j < n; ++j) sum += p[j];
    for (int64_t j = 0; j < n; ++j) {
      const float q = p[j] / sum;
      g[j] = inside_clip(q) ? -t[j] / q : 0.0f;
      gq += g[j] * q;
    }
    for (int64_t j = 0; j < n; ++j) g[j] = k * (g[j] - gq) / sum;
  }
}

// ---- accuracy metrics: 1 for a hit, 0 for a miss (the mean is the fraction of hits)
TK_HD bool categorical_hit(const float* p, const float* t, int64_t n) { return argmax_row(p, n) == argmax_row(t, n); }
TK_HD bool binary_hit(float p, float t) { return (p > 0.5f) == (t > 0.5f); }

}  // namespace tk::math
