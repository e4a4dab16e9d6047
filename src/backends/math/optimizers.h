// Keras 3's optimizer rules, per element: the one definition the CPU update kernels (backends/cpu/optimizers.cpp)
// and the CUDA ones (backends/cuda/optimizers.cu) both run. Per variable, in Keras' order: the gradient is scaled
// (loss-scale inverse, clipnorm), clipped to clipvalue, then the rule updates the weight and its slots in place.
//
//   const tk::math::GradFactor f{scale, clipvalue};
//   tk::math::adam(w[i], m[i], v[i], f(g[i]), alpha, 1 - beta_1, 1 - beta_2, epsilon);
#pragma once
#include <cmath>
#include <cstdint>

#include "backends/math/host_device.h"

namespace tk::math {

// g * scale, then clipped to [-clip, clip] when clip > 0 (std::clamp's order: a NaN stays NaN).
struct GradFactor {
  float scale, clip;
  TK_HD float operator()(float g) const {
    g *= scale;
    if (!(clip > 0.0f)) return g;
    return g < -clip ? -clip : (clip < g ? clip : g);
  }
};

// clipnorm (per variable, Keras' clip_by_norm on the unscaled gradient): the factor a variable's gradient is
// multiplied by, from its sum of squares (in double), the variable's clipnorm and the loss scale's inverse `unscale`
// (1 without loss scaling, which is also the StepControl's global-clip factor when gated).
TK_HD float clipnorm_factor(double sum_squares, float clipnorm, float unscale) {
  const float norm = static_cast<float>(sqrt(sum_squares)) * unscale;
  return (norm > clipnorm ? clipnorm / norm : 1.0f) * unscale;
}

// Adam's step size with the bias correction of update t = iterations + 1, in double as Keras computes it:
// lr * sqrt(1 - beta_2^t) / (1 - beta_1^t).
TK_HD float adam_alpha(float learning_rate, int64_t iterations, float beta_1, float beta_2) {
  const double t = static_cast<double>(iterations + 1);
  return static_cast<float>(learning_rate * sqrt(1.0 - pow(static_cast<double>(beta_2), t)) /
                            (1.0 - pow(static_cast<double>(beta_1), t)));
}

// SGD without momentum: w -= lr * g.
TK_HD void sgd(float& w, float g, float lr) { w -= lr * g; }
// SGD with momentum m (Keras: m = mu * m - lr * g; w += m).
TK_HD void sgd_momentum(float& w, float& m, float g, float lr, float mu) {
  m = mu * m - lr * g;
  w += m;
}
// Nesterov momentum (Keras: m = mu * m - lr * g; w += mu * m - lr * g).
TK_HD void sgd_nesterov(float& w, float& m, float g, float lr, float mu) {
  m = mu * m - lr * g;
  w += mu * m - lr * g;
}
// Adam with the bias correction folded into alpha = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t);
// one_minus_b1 = 1 - beta_1, one_minus_b2 = 1 - beta_2 (Keras' update form).
TK_HD void adam(float& w, float& m, float& v, float g, float alpha, float one_minus_b1, float one_minus_b2, float eps) {
  m += (g - m) * one_minus_b1;
  v += (g * g - v) * one_minus_b2;
  w -= alpha * m / (sqrtf(v) + eps);
}
// RMSprop: velocity vel, momentum mom (used when mu > 0), average gradient avg (used when centered).
TK_HD void rmsprop(float& w, float& vel, float& mom, float& avg, float g, float lr, float rho, float eps, float mu,
                   bool centered) {
  vel = rho * vel + (1.0f - rho) * g * g;
  float denom = vel;
  if (centered) {
    avg = rho * avg + (1.0f - rho) * g;
    denom -= avg * avg;
  }
  const float inc = lr * g / sqrtf(denom + eps);
  if (mu > 0.0f) {
    mom = mu * mom + inc;
    w -= mom;
  } else {
    w -= inc;
  }
}

// ---- StepControl: what a step does with its gradients, from their global sum of squares (double, +Inf or NaN
// when one of them is not finite). The CPU kernel (backends/cpu/optimizers.cpp) and the CUDA one
// (backends/cuda/optimizers.cu) both finish with this.
struct StepControlRule {
  float global_clipnorm;  // 0: off
  bool skip_nonfinite;    // skip the whole step when a gradient is not finite
  bool scaling;           // dynamic loss scaling (state: [scale, finite steps, skipped steps])
  int64_t growth_steps;   // finite steps before the scale doubles
};
// out[0] = 1 to apply the step, 0 to skip it; out[1] = the factor the updates multiply the gradients by
// (1 / scale, times the global-norm clip). With scaling, the state is updated in place in TensorFlow's order: a
// finite step counts (and doubles the scale at growth_steps), a non-finite one halves the scale and is counted as
// skipped.
TK_HD void step_control_finish(double sum, const StepControlRule& c, float* out, float* state) {
  const bool finite = sum - sum == 0.0;  // false for +Inf and NaN
  const double scale = c.scaling ? static_cast<double>(state[0]) : 1.0;
  out[0] = (!c.skip_nonfinite && !c.scaling) || finite ? 1.0f : 0.0f;
  const double norm = sqrt(sum) / scale;
  const double clip = c.global_clipnorm > 0.0f && finite && norm > c.global_clipnorm ? c.global_clipnorm / norm : 1.0;
  out[1] = static_cast<float>(clip / scale);
  if (!c.scaling) return;
  if (finite) {
    if (state[1] + 1.0f >= static_cast<float>(c.growth_steps)) {
      state[0] *= 2.0f;
      state[1] = 0.0f;
    } else {
      state[1] += 1.0f;
    }
  } else {
    state[0] *= 0.5f;
    state[1] = 0.0f;
    state[2] += 1.0f;
  }
}

}  // namespace tk::math
