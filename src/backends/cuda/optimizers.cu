// Optimizer updates on CUDA: one grid-stride pass per variable over the per-element rules of
// backends/math/optimizers.h, the functions the CPU kernels run. The learning rate, the iteration count (Adam's bias
// correction) and the StepControl pair are read on the device, so nothing per step is baked into a launch.
#include <cuda_runtime.h>

#include "backends/cuda/check.h"
#include "backends/cuda/launch_geometry.h"
#include "backends/cuda/launchers.h"
#include "backends/math/constraints.h"
#include "backends/math/optimizers.h"

namespace tk::cuda {
namespace {

template <Rule R>
__global__ void update(UpdateArgs a) {
  if (a.control && a.control[0] == 0.0f) return;  // a gated step with a non-finite gradient is skipped
  const float lr = *a.learning_rate;
  const float alpha = R == Rule::adam ? math::adam_alpha(lr, *a.iterations, a.beta_1, a.beta_2) : 0.0f;
  const math::GradFactor factor{a.factor ? *a.factor : a.control ? a.control[1] : 1.0f, a.clipvalue};
  const float decay = 1.0f - a.weight_decay * lr;  // decoupled weight decay (AdamW), before the rule
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.n; i += stride) {
    float w = a.w[i];
    if (a.weight_decay > 0.0f) w *= decay;
    const float g = factor(a.g[i]);
    if constexpr (R == Rule::sgd) {
      if (a.momentum == 0.0f) {
        math::sgd(w, g, lr);
      } else {
        float m = a.slot[0][i];
        if (a.nesterov)
          math::sgd_nesterov(w, m, g, lr, a.momentum);
        else
          math::sgd_momentum(w, m, g, lr, a.momentum);
        a.slot[0][i] = m;
      }
    } else if constexpr (R == Rule::adam) {
      float m = a.slot[0][i], v = a.slot[1][i];
      math::adam(w, m, v, g, alpha, 1.0f - a.beta_1, 1.0f - a.beta_2, a.epsilon);
      a.slot[0][i] = m;
      a.slot[1][i] = v;
    } else {
      float vel = a.slot[0][i], mom = a.momentum > 0.0f ? a.slot[1][i] : 0.0f, avg = a.centered ? a.slot[2][i] : 0.0f;
      math::rmsprop(w, vel, mom, avg, g, lr, a.rho, a.epsilon, a.momentum, a.centered);
      a.slot[0][i] = vel;
      if (a.momentum > 0.0f) a.slot[1][i] = mom;
      if (a.centered) a.slot[2][i] = avg;
    }
    a.w[i] = w;
  }
}

// One thread per slice of the variable (the elements that share a norm), as the CPU loop runs them.
__global__ void constrain(float* w, math::ConstraintLayout l) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < l.slices; k += stride)
    math::constrain_slice(w, l, k);
}

}  // namespace

void launch_constrain(float* w, const math::ConstraintLayout& layout, int sm_count, Stream stream) {
  const Geometry g = elementwise_geometry(layout.slices, sm_count);
  if (!g.blocks) return;
  constrain<<<g.blocks, g.threads, 0, static_cast<cudaStream_t>(stream)>>>(w, layout);
  check(cudaGetLastError(), "weight constraint kernel launch", "launch_constrain");
}

void launch_update(Rule rule, const UpdateArgs& args, int sm_count, Stream stream) {
  const Geometry g = elementwise_geometry(args.n, sm_count);
  if (!g.blocks) return;
  const auto s = static_cast<cudaStream_t>(stream);
  switch (rule) {
    case Rule::sgd:
      update<Rule::sgd><<<g.blocks, g.threads, 0, s>>>(args);
      break;
    case Rule::adam:
      update<Rule::adam><<<g.blocks, g.threads, 0, s>>>(args);
      break;
    case Rule::rmsprop:
      update<Rule::rmsprop><<<g.blocks, g.threads, 0, s>>>(args);
      break;
  }
  check(cudaGetLastError(), "optimizer update kernel launch", "launch_update");
}

}  // namespace tk::cuda
