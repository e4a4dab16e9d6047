// Keras 3's activations and their gradients, per element: the one definition the CPU kernels
// (backends/cpu/activations.cpp) and the CUDA kernels (backends/cuda/activations.cu) both run.
//
//   float y = tk::math::gelu(x, 0.0f);          // forward: (x, alpha)
//   float dx = tk::math::gelu_grad(dy, x, 0.0f); // backward: (dy, x or y as the op's gradient rule takes, alpha)
//
// Every function takes alpha (used by elu and leaky_relu) so that one launcher drives them all.
//
// NaN and Inf follow TensorFlow (docs/architecture.md, "NaN and Inf"): a NaN input gives a NaN output (relu(NaN) is
// NaN, never 0: a relu that maps NaN to 0 hides a diverged layer from the loss), relu(+Inf) = +Inf, relu(-Inf) = 0.
// The gradients select: dy where the op's mask holds, else 0.
#pragma once
#include <cmath>
#include <cstdint>

#include "backends/math/host_device.h"

namespace tk::math {

inline constexpr float kInvSqrt2 = 0.70710678118654752f;
inline constexpr float kInvSqrt2Pi = 0.39894228040143268f;

// x > 0 or NaN: x (the NaN test is what keeps NaN; `x > 0 ? x : 0` alone maps it to 0).
TK_HD float relu(float x, float) { return x > 0.0f || x != x ? x : 0.0f; }
TK_HD float relu_grad(float dy, float y, float) { return y > 0.0f ? dy : 0.0f; }
TK_HD float sigmoid(float x, float) { return 1.0f / (1.0f + expf(-x)); }
TK_HD float sigmoid_grad(float dy, float y, float) { return dy * y * (1.0f - y); }
TK_HD float tanh_(float x, float) { return tanhf(x); }
TK_HD float tanh_grad(float dy, float y, float) { return dy * (1.0f - y * y); }
// Keras' gelu default is the exact form: x * Phi(x).
TK_HD float gelu(float x, float) { return 0.5f * x * (1.0f + erff(x * kInvSqrt2)); }
TK_HD float gelu_grad(float dy, float x, float) {
  return dy * (0.5f * (1.0f + erff(x * kInvSqrt2)) + x * kInvSqrt2Pi * expf(-0.5f * x * x));
}
TK_HD float elu(float x, float al) { return x > 0.0f ? x : al * (expf(x) - 1.0f); }
TK_HD float elu_grad(float dy, float x, float al) { return x > 0.0f ? dy : dy * al * expf(x); }
TK_HD float leaky_relu(float x, float al) { return x >= 0.0f ? x : al * x; }
TK_HD float leaky_relu_grad(float dy, float x, float al) { return x >= 0.0f ? dy : al * dy; }

// The running maximum of a max-pooling window, from m = -inf: a NaN input makes it NaN and it stays NaN (TensorFlow's
// max pooling and tf.maximum). `m < v ? v : m` (std::max) would skip a NaN v; x86's maxps(m, v) does too.
TK_HD float pool_max(float m, float v) { return v > m || v != v ? v : m; }

// Softmax over one row of n: y = exp(x - max) / sum, the sum in float in index order.
TK_HD void softmax_row(const float* x, float* y, int64_t n) {
  float mx = x[0];
  for (int64_t j = 1; j < n; ++j) mx = mx < x[j] ? x[j] : mx;  // std::max_element's value
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) sum += (y[j] = expf(x[j] - mx));
  const float inv = 1.0f / sum;
  for (int64_t j = 0; j < n; ++j) y[j] *= inv;
}
// Log-softmax over one row of n in TensorFlow's order: (x - max) - log(sum(exp(x - max))), the sum in float in index
// order. A NaN anywhere, or a max of +-inf, makes the sum and so the whole row NaN (as tf.nn.log_softmax).
TK_HD void log_softmax_row(const float* x, float* y, int64_t n) {
  float mx = x[0];
  for (int64_t j = 1; j < n; ++j) mx = mx < x[j] ? x[j] : mx;
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) sum += expf(x[j] - mx);
  const float l = logf(sum);
  for (int64_t j = 0; j < n; ++j) y[j] = (x[j] - mx) - l;
}
// dx = y * (dy - sum(dy * y)) over one row.
TK_HD void softmax_grad_row(const float* dy, const float* y, float* dx, int64_t n) {
  float dot = 0.0f;
  for (int64_t j = 0; j < n; ++j) dot += dy[j] * y[j];
  for (int64_t j = 0; j < n; ++j) dx[j] = y[j] * (dy[j] - dot);
}

}  // namespace tk::math
