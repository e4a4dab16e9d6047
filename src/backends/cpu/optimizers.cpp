// Optimizer updates with Keras 3 rules, applied in place. Per variable, in Keras' order: clipnorm
// (per-variable norm), then clipvalue, then decoupled weight decay, then the rule itself.
#include "backends/math/optimizers.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include "backends/cpu/kernels.h"
#include "backends/cpu/parallel.h"
#include "graph/kernel.h"
#include "trainkit/core/error.h"

namespace tk::cpu {
using graph::KernelArgs;
using graph::Op;
using graph::UpdateConfig;

namespace {

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

// The factor for g: clip_by_norm's scale of g * unscale, times unscale (just unscale when clipnorm is off).
float clipnorm_factor(const float* g, int64_t n, float clipnorm, float unscale) {
  if (clipnorm <= 0.0f) return unscale;
  return math::clipnorm_factor(sum_squares(g, n), clipnorm, unscale);
}

using Grad = math::GradFactor;  // backends/math/optimizers.h: shared with the CUDA kernels

// The step's gradient factor from a gated update's StepControl input (1 when not gated): the loss scale's
// inverse times the global-norm clip factor.
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
  const float step = global_clip(a);
  return {clipnorm_factor(g, n, c.clipnorm, step), c.clipvalue};
}

// The rules, per element range [b, e) of one variable: the single-variable kernels and the multi-tensor kernel
// (MultiUpdate) run the same code, so grouping updates never changes a bit.
struct Rule {
  const UpdateConfig& c;
  float lr;
  float alpha;  // Adam: the bias-corrected step size
};

Rule rule_of(const KernelArgs& a, Op rule) {
  const UpdateConfig& c = *a.node.attrs.update;
  Rule r{c, a.scalars->learning_rate, 0.0f};
  if (rule == Op::AdamUpdate)
    r.alpha = math::adam_alpha(a.scalars->learning_rate, a.scalars->iterations, c.beta_1, c.beta_2);
  return r;
}

// One variable's buffers: param, grad, and the rule's slots (null: one its config does not use).
struct Var {
  float* w;
  const float* g;
  float* s[3];
  int64_t n;
  Grad clip;
};

// The per-element rules are backends/math/optimizers.h, shared with the CUDA kernels.
// (param, grad[, momentum])
void sgd_range(const Rule& r, const Var& v, int64_t b, int64_t e) {
  float* w = v.w;
  const float* g = v.g;
  float* m = v.s[0];
  const Grad clip = v.clip;
  const float lr = r.lr, mu = r.c.momentum;
  if (mu == 0.0f) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) math::sgd(w[i], clip(g[i]), lr);
  } else if (r.c.nesterov) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) math::sgd_nesterov(w[i], m[i], clip(g[i]), lr, mu);
  } else {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) math::sgd_momentum(w[i], m[i], clip(g[i]), lr, mu);
  }
}

// (param, grad, m, v)
void adam_range(const Rule& r, const Var& v, int64_t b, int64_t e) {
  float* w = v.w;
  const float* g = v.g;
  float* m = v.s[0];
  float* vv = v.s[1];
  const Grad clip = v.clip;
  const float alpha = r.alpha, b1 = 1.0f - r.c.beta_1, b2 = 1.0f - r.c.beta_2, eps = r.c.epsilon;
#pragma omp simd
  for (int64_t i = b; i < e; ++i) math::adam(w[i], m[i], vv[i], clip(g[i]), alpha, b1, b2, eps);
}

// (param, grad, velocity[, momentum][, average_gradient])
void rmsprop_range(const Rule& r, const Var& v, int64_t b, int64_t e) {
  float* w = v.w;
  const float* g = v.g;
  float* vel = v.s[0];
  float* mom = v.s[1];
  float* avg = v.s[2];
  const Grad clip = v.clip;
  const float rho = r.c.rho, lr = r.lr, eps = r.c.epsilon, mu = r.c.momentum;
  const bool centered = r.c.centered;
  float unused = 0.0f;  // a slot the config does not use (no momentum, not centered) is absent: null
  for (int64_t i = b; i < e; ++i)
    math::rmsprop(w[i], vel[i], mu > 0.0f ? mom[i] : unused, centered ? avg[i] : unused, clip(g[i]), lr, rho, eps, mu,
                  centered);
}

using RangeFn = void (*)(const Rule&, const Var&, int64_t, int64_t);
RangeFn range_fn(Op rule) {
  return rule == Op::AdamUpdate ? adam_range : rule == Op::RmspropUpdate ? rmsprop_range : sgd_range;
}

// The node holds the slots its config uses now: the config is shared and mutable, and a momentum turned on after the
// program was built would need a slot that has no memory (Keras, too, makes the slots when it builds).
void check_slot_inputs(const KernelArgs& a, int count, int slots) {
  const size_t operands = a.node.inputs.size() - (a.node.attrs.gated ? 1 : 0);
  if (operands != static_cast<size_t>(count) * static_cast<size_t>(2 + slots))
    throw Error("'" + a.node.name + "': the optimizer's config now uses " + std::to_string(slots) +
                " slot(s) per variable but the update was built with " +
                std::to_string(operands / static_cast<size_t>(count) - 2) +
                " (momentum and centered cannot change after the first step: compile again)");
}

// Variable k of an update node: inputs (params 0..K-1, grads K..2K-1, then the slots its config uses per variable:
// graph::update_slot_mask), K = 1 for the single-variable update ops. A slot the config does not use has no input and
// a null pointer (the rules never touch it). Applies weight decay and computes the clip scales (per variable, as
// Keras).
Var variable(const KernelArgs& a, Op rule, int k, int count) {
  const int mask = graph::update_slot_mask(rule, *a.node.attrs.update);
  const int slots = graph::update_slot_count(rule, *a.node.attrs.update);
  check_slot_inputs(a, count, slots);
  Var v{};
  v.w = a.inout<float>(k);
  v.g = a.input<float>(count + k);
  for (int j = 0, in = 2 * count + k * slots; j < 3; ++j) v.s[j] = mask & (1 << j) ? a.inout<float>(in++) : nullptr;
  v.n = a.in_shape(k).numel();
  v.clip = prepare(a, v.w, v.g, v.n);
  return v;
}

// One variable's update (SgdUpdate, AdamUpdate, RmspropUpdate).
template <Op R>
void update_one(const KernelArgs& a) {
  const Rule r = rule_of(a, R);
  const Var v = variable(a, R, 0, 1);
  const RangeFn fn = range_fn(R);
  parallel_for(v.n, [&](int64_t b, int64_t e) { fn(r, v, b, e); });
}

// MultiUpdate: every variable of a readiness group in one pass over a flat view of their elements: each thread
// takes an equal share of the total and walks the variables its share covers (one parallel region instead of
// one per variable; small variables such as biases ride along with the large ones).
void update_many(const KernelArgs& a) {
  const Op rule = a.node.attrs.epilogue;  // the single-variable op of the group's rule
  const Rule r = rule_of(a, rule);
  const int count = static_cast<int>(a.node.attrs.size);
  constexpr int kMaxVars = 64;
  std::array<Var, kMaxVars> vars;
  std::array<int64_t, kMaxVars + 1> start{};
  for (int k = 0; k < count; ++k) {
    vars[static_cast<size_t>(k)] = variable(a, rule, k, count);
    start[static_cast<size_t>(k + 1)] = start[static_cast<size_t>(k)] + vars[static_cast<size_t>(k)].n;
  }
  const RangeFn fn = range_fn(rule);
  parallel_for(start[static_cast<size_t>(count)], [&](int64_t b, int64_t e) {
    for (int k = 0; k < count; ++k) {
      const int64_t lo = std::max(b, start[static_cast<size_t>(k)]),
                    hi = std::min(e, start[static_cast<size_t>(k + 1)]);
      if (lo < hi)
        fn(r, vars[static_cast<size_t>(k)], lo - start[static_cast<size_t>(k)], hi - start[static_cast<size_t>(k)]);
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
  if (a.node.attrs.zero_grad) {
    const int count = a.node.op == Op::MultiUpdate ? static_cast<int>(a.node.attrs.size) : 1;
    for (int k = count; k < 2 * count; ++k)
      std::memset(a.inout<float>(k), 0, sizeof(float) * static_cast<size_t>(a.in_shape(k).numel()));
  }
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
// With loss scaling (Keras' LossScaleOptimizer, TensorFlow's order): a finite step is applied with the
// gradients divided by the scale, then the finite-step counter grows and the scale doubles when it reaches
// growth_steps; a step with a non-finite gradient is skipped, the scale halves and the counter restarts.
// Without a global norm to compute, the check only needs "is every element finite": x * 0 is 0 for finite x
// and NaN for Inf and NaN, so a float sum of x * 0 (a vectorized reduction, 4 bytes read per element) is 0
// exactly when all are finite — instead of a sum of squares in double.
template <typename T>
bool all_finite(const T* g, int64_t n) {
  float s = 0.0f;
  if constexpr (std::is_same_v<T, float>) {
    if (n > kParallelGrain) {
#pragma omp parallel for simd reduction(+ : s)
      for (int64_t i = 0; i < n; ++i) s += g[i] * 0.0f;
    } else {
#pragma omp simd reduction(+ : s)
      for (int64_t i = 0; i < n; ++i) s += g[i] * 0.0f;
    }
  } else {
    for (int64_t i = 0; i < n; ++i) s += g[i].to_float() * 0.0f;
  }
  return s == 0.0f;
}

static void step_control(const KernelArgs& a) {
  const UpdateConfig& c = *a.node.attrs.update;
  const bool scaling = c.loss_scale_initial > 0.0f;
  const size_t grads = a.node.inputs.size() - (scaling ? 1 : 0);
  // f(gradient j, its size), the gradient read in its own dtype.
  auto own_dtype = [&](size_t j, auto f) {
    const int in = static_cast<int>(j);
    const int64_t n = a.in_shape(in).numel();
    return a.in_dtypes[j] == DType::f16    ? f(a.input<float16>(in), n)
           : a.in_dtypes[j] == DType::bf16 ? f(a.input<bfloat16>(in), n)
                                           : f(a.input<float>(in), n);
  };
  double sum = 0;
  if (c.global_clipnorm <= 0.0f) {  // only finiteness matters: the unscale factor is 1 / scale
    bool ok = true;
    for (size_t j = 0; j < grads && ok; ++j)
      ok = own_dtype(j, [](const auto* g, int64_t n) { return all_finite(g, n); });
    sum = ok ? 0.0 : std::numeric_limits<double>::infinity();
  }
  for (size_t j = 0; j < grads && c.global_clipnorm > 0.0f; ++j)
    sum += own_dtype(j, [](const auto* g, int64_t n) { return sum_squares(g, n); });
  // [scale, finite steps since the scale last changed, skipped steps]; written in place (a Variable).
  auto* state = scaling ? const_cast<float*>(static_cast<const float*>(a.in[grads])) : nullptr;
  const math::StepControlRule rule{c.global_clipnorm, c.skip_nonfinite, scaling, c.loss_scale_growth_steps};
  math::step_control_finish(sum, rule, a.output<float>(), state);
}

void register_optimizer_kernels() {
  for (DType t : {DType::f32, DType::f16, DType::bf16})  // reads every input in its own dtype
    graph::register_kernel(DeviceKind::cpu, Op::StepControl, t, step_control);
  graph::register_kernel(DeviceKind::cpu, Op::AccumulateGrad, DType::f32, accumulate_grad);
  graph::register_kernel(DeviceKind::cpu, Op::SgdUpdate, DType::f32, with_zero_grad<update_one<Op::SgdUpdate>>);
  graph::register_kernel(DeviceKind::cpu, Op::AdamUpdate, DType::f32, with_zero_grad<update_one<Op::AdamUpdate>>);
  graph::register_kernel(DeviceKind::cpu, Op::RmspropUpdate, DType::f32, with_zero_grad<update_one<Op::RmspropUpdate>>);
  graph::register_kernel(DeviceKind::cpu, Op::MultiUpdate, DType::f32, with_zero_grad<update_many>);
}

}  // namespace tk::cpu
