// Batch normalization over all axes but the last: x is viewed as (M, C). Per-channel sums accumulate in
// double in the program's workspace (2 * C doubles), in row order, so long batches do not lose precision. The
// math per element and per channel is backends/math/batchnorm.h's, which the CUDA kernels run too.
#include "backends/math/batchnorm.h"

#include <algorithm>

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

// 2 * C doubles; synchronized (attrs.collective): then 2 * C + 1 floats, what is summed over the replicas.
size_t double_accumulators(const graph::Graph& g, int node) {
  const size_t c = static_cast<size_t>(g[g[node].inputs[0]].shape[-1]);
  return 2 * c * sizeof(double) + (g[node].attrs.collective ? (2 * c + 2) * sizeof(float) : 0);
}
float* sync_buffer(const KernelArgs& a, int64_t c) {  // (2C + 2) floats after the doubles
  return reinterpret_cast<float*>(static_cast<double*>(a.workspace) + 2 * c);
}
// Synchronized statistics: every replica's rows count once (weight 1), except a rank's stand-in row when it has
// none of the global batch (its share, grad_scale, is 0 then: nn/distribute/batch_split.h).
float counts(const KernelArgs& a) { return a.scalars->grad_scale > 0.0f ? 1.0f : 0.0f; }

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

// Synchronized (attrs.collective): the same two passes over the global batch. Each replica's sums, with its row
// count, are summed over the replicas; then its squares centered on the global mean are.
void bn_stats_synchronized(const KernelArgs& a) {
  const View v = view(a.in_shape(0));
  const float* x = a.input<float>(0);               // (M, C): this replica's rows
  double* sum = static_cast<double*>(a.workspace);  // (C): this replica's sums, then the global means
  double* sq = sum + v.c;                           // (C): this replica's centered squares
  float* global = sync_buffer(a, v.c);              // (C + 2): sums and row count, summed over the replicas
  graph::Collective& group = *a.node.attrs.collective;
  const int replica = a.node.attrs.replica;
  const float w = counts(a);
  for (int64_t j = 0; j < v.c; ++j) sum[j] = sq[j] = 0.0;
  for (int64_t i = 0; i < v.m; ++i)
    for (int64_t j = 0; j < v.c; ++j) sum[j] += x[i * v.c + j];
  for (int64_t j = 0; j < v.c; ++j) global[j] = static_cast<float>(sum[j]);
  global[v.c] = math::bn_count_high(v.m);
  global[v.c + 1] = math::bn_count_low(v.m);
  group.all_reduce(replica, global, global, v.c + 2, w, a.node.name.c_str(), a.node.attrs.begin);
  const int64_t m = math::bn_count(global[v.c], global[v.c + 1]);  // the global batch's rows
  for (int64_t j = 0; j < v.c; ++j) sum[j] = math::bn_mean(global[j], m);
  for (int64_t i = 0; i < v.m; ++i)
    for (int64_t j = 0; j < v.c; ++j) sq[j] += math::bn_centered_square(x[i * v.c + j], sum[j]);
  for (int64_t j = 0; j < v.c; ++j) global[j] = static_cast<float>(sq[j]);
  group.all_reduce(replica, global, global, v.c, w, a.node.name.c_str(), a.node.attrs.begin + 1);
  float* out = a.output<float>();  // (2, C)
  for (int64_t j = 0; j < v.c; ++j) {
    out[j] = static_cast<float>(sum[j]);
    out[v.c + j] = math::bn_variance(global[j], m);
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
  if (graph::Collective* group = a.node.attrs.collective) {
    // Synchronized: sum(dy) and sum(dy * xhat) over the global batch. dy is this replica's loss's gradient; the
    // global loss's is dy * share (grad_scale = rows / global rows), so the sums are weighted by the share, as the
    // gradients are. Back in this replica's scale, dx = gamma * invstd / rows * (rows * dy - sums): the formula with
    // this replica's row count and the global sums (rows = share * global rows).
    float* sums = sync_buffer(a, v.c);  // (2C): global sum(dy), sum(dy * xhat)
    for (int64_t j = 0; j < 2 * v.c; ++j) sums[j] = static_cast<float>(ws[j]);
    const float share = a.scalars->grad_scale;
    group->all_reduce(a.node.attrs.replica, sums, sums, 2 * v.c, share, a.node.name.c_str(), a.node.attrs.begin + 2);
    for (int64_t j = 0; j < 2 * v.c; ++j) ws[j] = sums[j];
    if (share == 0.0f) {  // a stand-in row that counts for nothing (its gradients are weighted 0): keep it finite
      std::fill(dx, dx + v.m * v.c, 0.0f);
      return;
    }
  }
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
  register_kernel(cpu, Op::BnStats, f32, [](const KernelArgs& a) {
    if (a.node.attrs.collective)
      bn_stats_synchronized(a);
    else
      bn_stats(a);
  });
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
