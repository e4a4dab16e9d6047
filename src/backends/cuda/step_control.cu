// StepControl on CUDA: the global sum of squares of a step's gradients (float32, float16 or bfloat16, each read in
// its own dtype), then backends/math/optimizers.h's step_control_finish, the rule the CPU kernel finishes with (skip
// a non-finite step, the global-norm clip, the loss-scale state). Deterministic: each gradient is summed by a fixed
// grid into per-block partials in double, and one thread adds the partials in order, so the bits do not depend on
// scheduling. (The CPU adds its threads' partials in OpenMP's order: the two may differ in the last bits of the
// norm, never in finiteness.)
#include <cuda_runtime.h>

#include "backends/cuda/check.h"
#include "backends/cuda/launchers.h"
#include "backends/math/optimizers.h"
#include "trainkit/core/half.h"

namespace tk::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
__device__ double square(T x) {
  double v;
  if constexpr (std::is_same_v<T, float>)
    v = static_cast<double>(x);
  else
    v = static_cast<double>(x.to_float());
  return v * v;
}

// partials[blockIdx.x] = this block's share of sum g^2.
template <typename T>
__global__ void sum_squares(const T* __restrict__ g, int64_t n, double* __restrict__ partials) {
  __shared__ double lane[kThreads];
  double s = 0.0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) s += square(g[i]);
  lane[threadIdx.x] = s;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {  // a fixed tree: the same order every launch
    if (static_cast<int>(threadIdx.x) < half) lane[threadIdx.x] += lane[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = lane[0];
}

__global__ void finish(const double* __restrict__ partials, int count, math::StepControlRule rule, float* out,
                       float* state) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  double sum = 0.0;
  for (int i = 0; i < count; ++i) sum += partials[i];
  math::step_control_finish(sum, rule, out, state);
}

__global__ void clipnorm_finish(const double* __restrict__ partials, float clipnorm, const float* control,
                                float* factor) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  double sum = 0.0;
  for (int i = 0; i < kStepControlBlocks; ++i) sum += partials[i];
  *factor = math::clipnorm_factor(sum, clipnorm, control ? control[1] : 1.0f);
}

}  // namespace

void launch_clipnorm_factor(const float* g, int64_t n, float clipnorm, const float* control, double* partials,
                            float* factor, Stream stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  sum_squares<<<kStepControlBlocks, kThreads, 0, s>>>(g, n, partials);
  clipnorm_finish<<<1, 1, 0, s>>>(partials, clipnorm, control, factor);
  check(cudaGetLastError(), "clipnorm kernel launch", "launch_clipnorm_factor");
}

void launch_step_control(const StepControlGradient* grads, int count, float global_clipnorm, bool skip_nonfinite,
                         bool scaling, int64_t growth_steps, float* out, float* state, double* partials,
                         Stream stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  for (int j = 0; j < count; ++j) {
    double* mine = partials + static_cast<int64_t>(j) * kStepControlBlocks;
    const StepControlGradient& g = grads[j];
    if (g.dtype == 1)
      sum_squares<<<kStepControlBlocks, kThreads, 0, s>>>(static_cast<const float16*>(g.data), g.n, mine);
    else if (g.dtype == 2)
      sum_squares<<<kStepControlBlocks, kThreads, 0, s>>>(static_cast<const bfloat16*>(g.data), g.n, mine);
    else
      sum_squares<<<kStepControlBlocks, kThreads, 0, s>>>(static_cast<const float*>(g.data), g.n, mine);
  }
  const math::StepControlRule rule{global_clipnorm, skip_nonfinite, scaling, growth_steps};
  finish<<<1, 1, 0, s>>>(partials, count * kStepControlBlocks, rule, out, state);
  check(cudaGetLastError(), "step control kernel launch", "launch_step_control");
}

}  // namespace tk::cuda
