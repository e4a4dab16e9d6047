// Optimizer updates with Keras 3 rules, applied in place. Per variable, in Keras' order: clipnorm
// (per-variable norm), then clipvalue, then decoupled weight decay, then the rule itself.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "backends/cpu/kernels.h"
#include "backends/cpu/parallel.h"
#include "graph/kernel.h"

namespace tk::cpu {
using graph::KernelArgs;
using graph::Op;
using graph::UpdateConfig;

namespace {

// Scale that clip_by_norm applies (1 when off), computed once per variable.
float clipnorm_scale(const float* g, int64_t n, float clipnorm) {
  if (clipnorm <= 0.0f) return 1.0f;
  double s = 0;
  if (n > kParallelGrain) {
#pragma omp parallel for reduction(+ : s)
    for (int64_t i = 0; i < n; ++i) s += double(g[i]) * g[i];
  } else {
    for (int64_t i = 0; i < n; ++i) s += double(g[i]) * g[i];
  }
  const float norm = static_cast<float>(std::sqrt(s));
  return norm > clipnorm ? clipnorm / norm : 1.0f;
}

struct Grad {
  float scale, clip;
  float operator()(float g) const {
    g *= scale;
    return clip > 0.0f ? std::clamp(g, -clip, clip) : g;
  }
};

// The step's global-norm clip factor from a gated update's StepControl input (1 when not gated).
float global_clip(const KernelArgs& a) {
  if (!a.node.attrs.gated) return 1.0f;
  return static_cast<const float*>(a.in[a.node.inputs.size() - 1])[1];
}

Grad prepare(const KernelArgs& a, float* w, const float* g, int64_t n) {
  const UpdateConfig& c = *a.node.attrs.update;
  if (c.weight_decay > 0.0f) {
    const float k = 1.0f - c.weight_decay * a.scalars->learning_rate;
    parallel_for(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) w[i] *= k;
    });
  }
  return {clipnorm_scale(g, n, c.clipnorm) * global_clip(a), c.clipvalue};
}

// (param, grad, momentum)
void sgd(const KernelArgs& a) {
  const UpdateConfig& c = *a.node.attrs.update;
  const int64_t n = a.in_shape(0).numel();
  float* w = a.inout<float>(0);
  const float* g = a.input<float>(1);
  float* m = a.inout<float>(2);
  const Grad clip = prepare(a, w, g, n);
  const float lr = a.scalars->learning_rate, mu = c.momentum;
  if (mu == 0.0f) {
    parallel_for(n, [&](int64_t b, int64_t e) {
#pragma omp simd
      for (int64_t i = b; i < e; ++i) w[i] -= lr * clip(g[i]);
    });
  } else if (c.nesterov) {
    parallel_for(n, [&](int64_t b, int64_t e) {
#pragma omp simd
      for (int64_t i = b; i < e; ++i) {
        const float gi = clip(g[i]);
        m[i] = mu * m[i] - lr * gi;
        w[i] += mu * m[i] - lr * gi;
      }
    });
  } else {
    parallel_for(n, [&](int64_t b, int64_t e) {
#pragma omp simd
      for (int64_t i = b; i < e; ++i) {
        m[i] = mu * m[i] - lr * clip(g[i]);
        w[i] += m[i];
      }
    });
  }
}

// (param, grad, m, v)
void adam(const KernelArgs& a) {
  const UpdateConfig& c = *a.node.attrs.update;
  const int64_t n = a.in_shape(0).numel();
  float* w = a.inout<float>(0);
  const float* g = a.input<float>(1);
  float* m = a.inout<float>(2);
  float* v = a.inout<float>(3);
  const Grad clip = prepare(a, w, g, n);
  const double t = static_cast<double>(a.scalars->iterations + 1);
  const float alpha = static_cast<float>(a.scalars->learning_rate * std::sqrt(1.0 - std::pow(double(c.beta_2), t)) /
                                         (1.0 - std::pow(double(c.beta_1), t)));
  const float b1 = 1.0f - c.beta_1, b2 = 1.0f - c.beta_2, eps = c.epsilon;
  parallel_for(n, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) {
      const float gi = clip(g[i]);
      m[i] += (gi - m[i]) * b1;
      v[i] += (gi * gi - v[i]) * b2;
      w[i] -= alpha * m[i] / (std::sqrt(v[i]) + eps);
    }
  });
}

// (param, grad, velocity, momentum, average_gradient)
void rmsprop(const KernelArgs& a) {
  const UpdateConfig& c = *a.node.attrs.update;
  const int64_t n = a.in_shape(0).numel();
  float* w = a.inout<float>(0);
  const float* g = a.input<float>(1);
  float* vel = a.inout<float>(2);
  float* mom = a.inout<float>(3);
  float* avg = a.inout<float>(4);
  const Grad clip = prepare(a, w, g, n);
  const float rho = c.rho, lr = a.scalars->learning_rate, eps = c.epsilon, mu = c.momentum;
  const bool centered = c.centered;
  parallel_for(n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float gi = clip(g[i]);
      vel[i] = rho * vel[i] + (1.0f - rho) * gi * gi;
      float denom = vel[i];
      if (centered) {
        avg[i] = rho * avg[i] + (1.0f - rho) * gi;
        denom -= avg[i] * avg[i];
      }
      const float inc = lr * gi / std::sqrt(denom + eps);
      if (mu > 0.0f) {
        mom[i] = mu * mom[i] + inc;
        w[i] -= mom[i];
      } else {
        w[i] -= inc;
      }
    }
  });
}

}  // namespace

// An update that skips the step when its StepControl says a gradient is not finite, and, when asked
// (micro-batching), clears the gradient accumulator it consumed.
template <void (*Update)(const KernelArgs&)>
void with_zero_grad(const KernelArgs& a) {
  const bool apply = !a.node.attrs.gated || static_cast<const float*>(a.in[a.node.inputs.size() - 1])[0] != 0.0f;
  if (apply) Update(a);
  if (a.node.attrs.zero_grad)
    std::memset(a.inout<float>(1), 0, sizeof(float) * static_cast<size_t>(a.in_shape(1).numel()));
}

// acc += grad * grad_scale (this step's scalar)
void accumulate_grad(const KernelArgs& a) {
  const int64_t n = a.in_shape(0).numel();
  float* acc = a.inout<float>(0);
  const float* g = a.input<float>(1);
  const float k = a.scalars->grad_scale;
  parallel_for(n, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) acc[i] += g[i] * k;
  });
}

// (grads...) -> [all finite, global-norm clip factor]: one pass over every gradient, summing squares in double
// (which cannot overflow for float32 values, so the sum is finite exactly when every element is).
// Squares of one gradient in double, read in its own dtype (a step's gradients may mix float32 and 16 bits).
template <typename T>
double sum_squares(const T* g, int64_t n) {
  auto v = [](T x) {
    if constexpr (std::is_same_v<T, float>)
      return double(x);
    else
      return double(x.to_float());
  };
  double s = 0;
  if (n > kParallelGrain) {
#pragma omp parallel for reduction(+ : s)
    for (int64_t i = 0; i < n; ++i) s += v(g[i]) * v(g[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) s += v(g[i]) * v(g[i]);
  }
  return s;
}

static void step_control(const KernelArgs& a) {
  const UpdateConfig& c = *a.node.attrs.update;
  double sum = 0;
  for (size_t j = 0; j < a.node.inputs.size(); ++j) {
    const int in = static_cast<int>(j);
    const int64_t n = a.in_shape(in).numel();
    switch (a.in_dtypes[j]) {
      case DType::f16:
        sum += sum_squares(a.input<float16>(in), n);
        break;
      case DType::bf16:
        sum += sum_squares(a.input<bfloat16>(in), n);
        break;
      default:
        sum += sum_squares(a.input<float>(in), n);
    }
  }
  const bool finite = std::isfinite(sum);
  float* out = a.output<float>();
  out[0] = !c.skip_nonfinite || finite ? 1.0f : 0.0f;
  const double norm = std::sqrt(sum);
  out[1] = c.global_clipnorm > 0.0f && finite && norm > c.global_clipnorm
               ? static_cast<float>(double(c.global_clipnorm) / norm)
               : 1.0f;
}

void register_optimizer_kernels() {
  for (DType t : {DType::f32, DType::f16, DType::bf16})  // reads every input in its own dtype
    graph::register_kernel(DeviceKind::cpu, Op::StepControl, t, step_control);
  graph::register_kernel(DeviceKind::cpu, Op::AccumulateGrad, DType::f32, accumulate_grad);
  graph::register_kernel(DeviceKind::cpu, Op::SgdUpdate, DType::f32, with_zero_grad<sgd>);
  graph::register_kernel(DeviceKind::cpu, Op::AdamUpdate, DType::f32, with_zero_grad<adam>);
  graph::register_kernel(DeviceKind::cpu, Op::RmspropUpdate, DType::f32, with_zero_grad<rmsprop>);
}

}  // namespace tk::cpu
