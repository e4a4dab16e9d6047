// Batch normalization over all axes but the last: x is viewed as (M, C). Per-channel sums accumulate in
// double in the program's workspace (2 * C doubles), in row order, so long batches do not lose precision. The
// math per element and per channel is backends/math/batchnorm.h's, which the CUDA kernels run too.
#include "backends/math/batchnorm.h"

#include "backends/cpu/kernels.h"
#include "graph/kernel.h"

namespace tk::cpu {
using graph::KernelArgs;
using graph::Op;

namespace {

struct View {
  int64_t m, c;
};
View view(const Shape& x) { return {x.numel() / x[-1], x[-1]}; }

size_t double_accumulators(const graph::Graph& g, int node) {  // 2 * C doubles
  return 2 * static_cast<size_t>(g[g[node].inputs[0]].shape[-1]) * sizeof(double);
}

// stats(2, C) = [mean; biased variance]
void bn_stats(const KernelArgs& a) {
  const View v = view(a.in_shape(0));
  const float* x = a.input<float>(0);               // (M, C)
  double* sum = static_cast<double*>(a.workspace);  // (C): the sums, then the means
  double* sq = sum + v.c;                           // (C): the centered squares' sums
  for (int64_t j = 0; j < v.c; ++j) sum[j] = sq[j] = 0.0;
  for (int64_t i = 0; i < v.m; ++i)
    for (int64_t j = 0; j < v.c; ++j) sum[j] += x[i * v.c + j];
  for (int64_t j = 0; j < v.c; ++j) sum[j] = math::bn_mean(sum[j], v.m);
  for (int64_t i = 0; i < v.m; ++i)
    for (int64_t j = 0; j < v.c; ++j) sq[j] += math::bn_centered_square(x[i * v.c + j], sum[j]);
  float* out = a.output<float>();  // (2, C)
  for (int64_t j = 0; j < v.c; ++j) {
    out[j] = static_cast<float>(sum[j]);
    out[v.c + j] = math::bn_variance(sq[j], v.m);
  }
}

// y = gamma * (x - mean) / sqrt(var + eps) + beta, with (mean, var) from stats(2, C) or separate vectors.
void normalize(const KernelArgs& a, const float* mean, const float* var, const float* gamma, const float* beta) {
  const View v = view(a.in_shape(0));
  const float* x = a.input<float>(0);  // (M, C)
  float* y = a.output<float>();        // (M, C)
  const float eps = a.node.attrs.epsilon;
  for (int64_t i = 0; i < v.m; ++i)
    for (int64_t j = 0; j < v.c; ++j)
      y[i * v.c + j] = math::bn_normalize(x[i * v.c + j], mean[j], var[j], eps, gamma[j], beta[j]);
}

void bn_apply(const KernelArgs& a) {
  const float* stats = a.input<float>(1);
  normalize(a, stats, stats + a.in_shape(0)[-1], a.input<float>(2), a.input<float>(3));
}

void bn_inference(const KernelArgs& a) {
  normalize(a, a.input<float>(1), a.input<float>(2), a.input<float>(3), a.input<float>(4));
}

// Per channel: sum(dy) and sum(dy * xhat) into ws[0..C) and ws[C..2C).
void grad_sums(const KernelArgs& a, const float* dy, const float* x, const float* stats, double* ws) {
  const View v = view(a.in_shape(0));
  const float eps = a.node.attrs.epsilon;
  double* sdy = ws;
  double* sdyx = ws + v.c;
  for (int64_t j = 0; j < v.c; ++j) sdy[j] = sdyx[j] = 0.0;
  for (int64_t i = 0; i < v.m; ++i)
    for (int64_t j = 0; j < v.c; ++j) {
      const float xhat = math::bn_xhat(x[i * v.c + j], stats[j], stats[v.c + j], eps);
      sdy[j] += dy[i * v.c + j];
      sdyx[j] += math::bn_dy_xhat(dy[i * v.c + j], xhat);
    }
}

// dx = gamma * invstd / M * (M * dy - sum(dy) - xhat * sum(dy * xhat))
void bn_input_grad(const KernelArgs& a) {
  const View v = view(a.in_shape(0));
  const float* dy = a.input<float>(0);     // (M, C)
  const float* x = a.input<float>(1);      // (M, C)
  const float* stats = a.input<float>(2);  // (2, C)
  const float* gamma = a.input<float>(3);  // (C)
  double* ws = static_cast<double*>(a.workspace);
  grad_sums(a, dy, x, stats, ws);
  const float eps = a.node.attrs.epsilon;
  float* dx = a.output<float>();  // (M, C)
  for (int64_t i = 0; i < v.m; ++i)
    for (int64_t j = 0; j < v.c; ++j)
      dx[i * v.c + j] = math::bn_input_grad(dy[i * v.c + j], x[i * v.c + j], stats[j], stats[v.c + j], eps, gamma[j],
                                            v.m, ws[j], ws[v.c + j]);
}

void bn_gamma_grad(const KernelArgs& a) {
  const int64_t c = a.in_shape(0)[-1];
  double* ws = static_cast<double*>(a.workspace);
  grad_sums(a, a.input<float>(0), a.input<float>(1), a.input<float>(2), ws);
  for (int64_t j = 0; j < c; ++j) a.output<float>()[j] = static_cast<float>(ws[c + j]);
}

// dx = dy * gamma / sqrt(moving_variance + eps)
void bn_inference_grad(const KernelArgs& a) {
  const View v = view(a.in_shape(0));
  const float* dy = a.input<float>(0);     // (M, C)
  const float* var = a.input<float>(1);    // (C)
  const float* gamma = a.input<float>(2);  // (C)
  const float eps = a.node.attrs.epsilon;
  float* dx = a.output<float>();  // (M, C)
  for (int64_t i = 0; i < v.m; ++i)
    for (int64_t j = 0; j < v.c; ++j) dx[i * v.c + j] = math::bn_inference_grad(dy[i * v.c + j], var[j], gamma[j], eps);
}

// dgamma = sum(dy * (x - moving_mean) / sqrt(moving_variance + eps)) per channel, summed in float in row order.
void bn_inference_gamma_grad(const KernelArgs& a) {
  const View v = view(a.in_shape(0));
  const float* dy = a.input<float>(0);    // (M, C)
  const float* x = a.input<float>(1);     // (M, C)
  const float* mean = a.input<float>(2);  // (C)
  const float* var = a.input<float>(3);   // (C)
  const float eps = a.node.attrs.epsilon;
  float* out = a.output<float>();  // (C)
  for (int64_t j = 0; j < v.c; ++j) out[j] = 0.0f;
  for (int64_t i = 0; i < v.m; ++i)
    for (int64_t j = 0; j < v.c; ++j)
      out[j] += math::bn_inference_gamma_term(dy[i * v.c + j], x[i * v.c + j], mean[j], var[j], eps);
}

// moving = moving * momentum + batch * (1 - momentum), for the mean and the (biased) variance (Keras 3).
void bn_update_moving(const KernelArgs& a) {
  const int64_t c = a.in_shape(1)[0];
  const float* stats = a.input<float>(0);  // (2, C)
  float* mean = a.inout<float>(1);         // (C)
  float* var = a.inout<float>(2);          // (C)
  const float mu = a.node.attrs.momentum;
  for (int64_t j = 0; j < c; ++j) {
    mean[j] = math::bn_moving(mean[j], stats[j], mu);
    var[j] = math::bn_moving(var[j], stats[c + j], mu);
  }
}

}  // namespace

void register_batchnorm_kernels() {
  using graph::register_kernel;
  constexpr auto cpu = DeviceKind::cpu;
  constexpr auto f32 = DType::f32;
  register_kernel(cpu, Op::BnStats, f32, bn_stats);
  register_kernel(cpu, Op::BnApply, f32, bn_apply);
  register_kernel(cpu, Op::BnInputGrad, f32, bn_input_grad);
  register_kernel(cpu, Op::BnGammaGrad, f32, bn_gamma_grad);
  register_kernel(cpu, Op::BnInference, f32, bn_inference);
  register_kernel(cpu, Op::BnInferenceGrad, f32, bn_inference_grad);
  register_kernel(cpu, Op::BnInferenceGammaGrad, f32, bn_inference_gamma_grad);
  register_kernel(cpu, Op::BnUpdateMoving, f32, bn_update_moving);
  for (Op op : {Op::BnStats, Op::BnInputGrad, Op::BnGammaGrad}) graph::register_workspace(cpu, op, double_accumulators);
}

}  // namespace tk::cpu
