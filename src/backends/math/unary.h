// The general Unary op's functions and their derivatives (graph/tensor_fns.h: UnaryFn), per element: one definition
// the CPU kernels (backends/cpu/unary.cpp) and the CUDA kernels (backends/cuda/tensor_ops.cu) both run. Keras 3's
// definitions; NaN propagates through every function (relu, relu6 and clip of NaN are NaN, as in TensorFlow); the
// gradients of relu, relu6 and clip select by their masks (below).
//
//   float y = tk::math::unary<tk::graph::UnaryFn::gelu_tanh>(x, 0.0f, 0.0f);
//   float dx = tk::math::unary_grad<tk::graph::UnaryFn::gelu_tanh>(dy, x, 0.0f, 0.0f);
#pragma once
#include <cmath>

#include "backends/math/activations.h"
#include "backends/math/host_device.h"
#include "graph/tensor_fns.h"

namespace tk::math {

inline constexpr float kSeluAlpha = 1.67326324235437728f;
inline constexpr float kSeluScale = 1.05070098735548049f;
inline constexpr float kSqrt2OverPi = 0.79788456080286536f;
inline constexpr float kGeluTanhCubic = 0.044715f;
inline constexpr float kTwoOverSqrtPi = 1.12837916709551257f;

TK_HD float softplus_(float x) { return x > 0.0f ? x + log1pf(expf(-x)) : log1pf(expf(x)); }
TK_HD float sigmoid_(float x) { return 1.0f / (1.0f + expf(-x)); }

// y = f(x); p0, p1: the function's parameters (graph/tensor_fns.h).
template <graph::UnaryFn F>
TK_HD float unary(float x, float p0, float p1) {
  using graph::UnaryFn;
  (void)p0, (void)p1;
  if constexpr (F == UnaryFn::exp) return expf(x);
  if constexpr (F == UnaryFn::expm1) return expm1f(x);
  if constexpr (F == UnaryFn::log) return logf(x);
  if constexpr (F == UnaryFn::log1p) return log1pf(x);
  if constexpr (F == UnaryFn::sqrt) return sqrtf(x);
  if constexpr (F == UnaryFn::rsqrt) return 1.0f / sqrtf(x);
  if constexpr (F == UnaryFn::square) return x * x;
  if constexpr (F == UnaryFn::abs) return fabsf(x);
  if constexpr (F == UnaryFn::negative) return -x;
  if constexpr (F == UnaryFn::sign) return x > 0.0f ? 1.0f : x < 0.0f ? -1.0f : x;  // NaN stays NaN, 0 stays 0
  if constexpr (F == UnaryFn::reciprocal) return 1.0f / x;
  if constexpr (F == UnaryFn::sin) return sinf(x);
  if constexpr (F == UnaryFn::cos) return cosf(x);
  if constexpr (F == UnaryFn::tanh) return tanhf(x);
  if constexpr (F == UnaryFn::sigmoid) return sigmoid_(x);
  if constexpr (F == UnaryFn::softplus) return softplus_(x);
  if constexpr (F == UnaryFn::softsign) return x / (1.0f + fabsf(x));
  if constexpr (F == UnaryFn::erf) return erff(x);
  if constexpr (F == UnaryFn::gelu) return gelu(x, 0.0f);
  if constexpr (F == UnaryFn::gelu_tanh)
    return 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * (x + kGeluTanhCubic * x * x * x)));
  if constexpr (F == UnaryFn::silu) return x * sigmoid_(x);
  if constexpr (F == UnaryFn::mish) return x * tanhf(softplus_(x));
  if constexpr (F == UnaryFn::hard_sigmoid) return x != x ? x : fminf(fmaxf(x + 3.0f, 0.0f), 6.0f) / 6.0f;
  if constexpr (F == UnaryFn::hard_swish) return x != x ? x : x * (fminf(fmaxf(x + 3.0f, 0.0f), 6.0f) / 6.0f);
  if constexpr (F == UnaryFn::relu) return x > 0.0f ? x : x != x ? x : 0.0f;
  if constexpr (F == UnaryFn::relu6) return x > 6.0f ? 6.0f : x > 0.0f ? x : x != x ? x : 0.0f;
  if constexpr (F == UnaryFn::selu) return kSeluScale * (x > 0.0f ? x : kSeluAlpha * expm1f(x));
  if constexpr (F == UnaryFn::elu) return x > 0.0f ? x : p0 * expm1f(x);
  if constexpr (F == UnaryFn::leaky_relu) return x >= 0.0f ? x : p0 * x;
  if constexpr (F == UnaryFn::clip) return x < p0 ? p0 : x > p1 ? p1 : x;  // NaN fails both tests: stays NaN
  return x;
}

// dx = dy * f'(x).
template <graph::UnaryFn F>
TK_HD float unary_grad(float dy, float x, float p0, float p1) {
  using graph::UnaryFn;
  (void)p0, (void)p1;
  if constexpr (F == UnaryFn::exp || F == UnaryFn::expm1) return dy * expf(x);
  if constexpr (F == UnaryFn::log) return dy / x;
  if constexpr (F == UnaryFn::log1p) return dy / (1.0f + x);
  if constexpr (F == UnaryFn::sqrt) return dy * 0.5f / sqrtf(x);
  if constexpr (F == UnaryFn::rsqrt) return dy * -0.5f / (x * sqrtf(x));
  if constexpr (F == UnaryFn::square) return dy * 2.0f * x;
  if constexpr (F == UnaryFn::abs) return x > 0.0f ? dy : x < 0.0f ? -dy : 0.0f * dy;
  if constexpr (F == UnaryFn::negative) return -dy;
  if constexpr (F == UnaryFn::sign) return 0.0f * dy;
  if constexpr (F == UnaryFn::reciprocal) return -dy / (x * x);
  if constexpr (F == UnaryFn::sin) return dy * cosf(x);
  if constexpr (F == UnaryFn::cos) return -dy * sinf(x);
  if constexpr (F == UnaryFn::tanh) {
    const float t = tanhf(x);
    return dy * (1.0f - t * t);
  }
  if constexpr (F == UnaryFn::sigmoid) {
    const float s = sigmoid_(x);
    return dy * s * (1.0f - s);
  }
  if constexpr (F == UnaryFn::softplus) return dy * sigmoid_(x);
  if constexpr (F == UnaryFn::softsign) {
    const float d = 1.0f + fabsf(x);
    return dy / (d * d);
  }
  if constexpr (F == UnaryFn::erf) return dy * kTwoOverSqrtPi * expf(-x * x);
  if constexpr (F == UnaryFn::gelu) return gelu_grad(dy, x, 0.0f);
  if constexpr (F == UnaryFn::gelu_tanh) {
    const float x2 = x * x, t = tanhf(kSqrt2OverPi * (x + kGeluTanhCubic * x2 * x));
    return dy * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * kGeluTanhCubic * x2));
  }
  if constexpr (F == UnaryFn::silu) {
    const float s = sigmoid_(x);
    return dy * s * (1.0f + x * (1.0f - s));
  }
  if constexpr (F == UnaryFn::mish) {
    const float t = tanhf(softplus_(x));
    return dy * (t + x * (1.0f - t * t) * sigmoid_(x));
  }
  if constexpr (F == UnaryFn::hard_sigmoid) return x > -3.0f && x < 3.0f ? dy / 6.0f : x != x ? x : 0.0f * dy;
  if constexpr (F == UnaryFn::hard_swish)
    return x < -3.0f ? 0.0f * dy : x > 3.0f ? dy : x != x ? x : dy * (2.0f * x + 3.0f) / 6.0f;
  // The masks of relu, relu6 and clip select, as the fused ReluGrad and TensorFlow's ReluGrad / Relu6Grad /
  // clip_by_value gradient do: dy where the mask holds, else 0 — a NaN x is outside relu's mask (gradient 0), inside
  // clip's (TensorFlow zeroes only x < min and x > max). The forward pass already carried the NaN to the loss.
  if constexpr (F == UnaryFn::relu) return x > 0.0f ? dy : 0.0f;
  if constexpr (F == UnaryFn::relu6) return x > 0.0f && x < 6.0f ? dy : 0.0f;
  if constexpr (F == UnaryFn::selu) return dy * kSeluScale * (x > 0.0f ? 1.0f : kSeluAlpha * expf(x));
  if constexpr (F == UnaryFn::elu) return x > 0.0f ? dy : dy * p0 * expf(x);
  if constexpr (F == UnaryFn::leaky_relu) return x >= 0.0f ? dy : p0 * dy;
  if constexpr (F == UnaryFn::clip) return x < p0 || x > p1 ? 0.0f : dy;  // TF's mask
  return dy;
}

}  // namespace tk::math
