// Batch normalization on CUDA over the math of backends/math/batchnorm.h (the CPU kernels' functions): x is viewed
// as (M, C), channels last. Elementwise kernels are grid-stride loops over M * C; the per-channel sums are
// launch_bias_grad's deterministic two passes in double (fixed chunks of rows, each summed in row order by one
// thread per channel, then the chunks added in order), so every run gives the same bits and no atomics are used.
// With M <= 127 (one chunk) the sums are added in the CPU's order; BnInferenceGammaGrad's terms, which the CPU adds
// in float, are added in double here too.
#include <cuda_runtime.h>

#include <algorithm>

#include "backends/cuda/check.h"
#include "backends/cuda/launch_geometry.h"
#include "backends/cuda/launchers.h"
#include "backends/math/batchnorm.h"

namespace tk::cuda {
namespace {

__device__ int64_t first_index() { return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ int64_t grid_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

// What element i (of channel j) adds to its channel's kCount sums.
struct SumTerms {  // sum(x)
  static constexpr int kCount = 1;
  const float* x;  // (M, C)
  __device__ void add(int64_t i, int64_t, double* acc) const { acc[0] += x[i]; }
};
struct SquareTerms {  // sum((x - mean)^2)
  static constexpr int kCount = 1;
  const float* x;      // (M, C)
  const double* mean;  // (C)
  __device__ void add(int64_t i, int64_t j, double* acc) const { acc[0] += math::bn_centered_square(x[i], mean[j]); }
};
struct GradTerms {  // sum(dy), sum(dy * xhat)
  static constexpr int kCount = 2;
  const float *dy, *x;  // (M, C)
  const float* stats;   // (2, C)
  int64_t c;
  float eps;
  __device__ void add(int64_t i, int64_t j, double* acc) const {
    const float xhat = math::bn_xhat(x[i], stats[j], stats[c + j], eps);
    acc[0] += dy[i];
    acc[1] += math::bn_dy_xhat(dy[i], xhat);
  }
};
struct InferenceGammaTerms {  // sum(dy * (x - moving_mean) / sqrt(moving_variance + eps))
  static constexpr int kCount = 1;
  const float *dy, *x;      // (M, C)
  const float *mean, *var;  // (C)
  float eps;
  __device__ void add(int64_t i, int64_t j, double* acc) const {
    acc[0] += math::bn_inference_gamma_term(dy[i], x[i], mean[j], var[j], eps);
  }
};

// Pass 1: chunk k of the rows, summed in row order, one thread per channel (coalesced across a warp's channels):
// partials(kCount, chunks, C).
template <typename Terms>
__global__ void chunk_sums(Terms t, double* __restrict__ partials, int64_t m, int64_t c, int64_t chunks) {
  const int64_t k = blockIdx.y, r0 = m * k / chunks, r1 = m * (k + 1) / chunks;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < c;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double acc[Terms::kCount] = {};
    for (int64_t r = r0; r < r1; ++r) t.add(r * c + j, j, acc);
    for (int s = 0; s < Terms::kCount; ++s) partials[(s * chunks + k) * c + j] = acc[s];
  }
}
// Pass 2: sums(count, C) = the partials of each channel added in chunk order.
__global__ void finish_sums(const double* __restrict__ partials, double* __restrict__ sums, int64_t c, int64_t chunks,
                            int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const int64_t s = i / c, j = i % c;
    double acc = 0.0;
    for (int64_t k = 0; k < chunks; ++k) acc += partials[(s * chunks + k) * c + j];
    sums[i] = acc;
  }
}

// The statistics from the sums: mean(C) in place of the sums (double, for the variance's pass), stats[0] its float;
// then stats[1] the biased variance.
__global__ void stats_mean(double* __restrict__ sums, float* __restrict__ stats, int64_t m, int64_t c) {
  for (int64_t j = first_index(); j < c; j += grid_stride()) {
    sums[j] = math::bn_mean(sums[j], m);
    stats[j] = static_cast<float>(sums[j]);
  }
}
__global__ void stats_variance(const double* __restrict__ squares, float* __restrict__ stats, int64_t m, int64_t c) {
  for (int64_t j = first_index(); j < c; j += grid_stride()) stats[c + j] = math::bn_variance(squares[j], m);
}
__global__ void to_float(const double* __restrict__ sums, float* __restrict__ out, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) out[i] = static_cast<float>(sums[i]);
}

// Synchronized BatchNormalization (graph/op.h: BnStats and BnInputGrad with attrs.collective). `sync` is
// [sums(C), rows(2), squares(C), weight] for the statistics: this replica's sums and row count (in two exact parts,
// backends/math/batchnorm.h), then (after the caller's all-reduce) the global batch's; the weight the all-reduces read
// is 1, or 0 for a rank's stand-in row (share 0).
__global__ void sync_pack_sums(const double* __restrict__ sums, float* __restrict__ sync, const float* share, int64_t m,
                               int64_t c) {
  for (int64_t j = first_index(); j < c; j += grid_stride()) sync[j] = static_cast<float>(sums[j]);
  if (first_index() == 0) {
    sync[c] = math::bn_count_high(m);
    sync[c + 1] = math::bn_count_low(m);
    sync[2 * c + 2] = *share > 0.0f ? 1.0f : 0.0f;
  }
}
__global__ void sync_global_mean(const float* __restrict__ sync, double* __restrict__ mean, int64_t c) {
  const int64_t rows = math::bn_count(sync[c], sync[c + 1]);
  for (int64_t j = first_index(); j < c; j += grid_stride()) mean[j] = math::bn_mean(sync[j], rows);
}
__global__ void sync_stats(const double* __restrict__ mean, const float* __restrict__ sync, float* __restrict__ stats,
                           int64_t c) {
  const int64_t rows = math::bn_count(sync[c], sync[c + 1]);
  for (int64_t j = first_index(); j < c; j += grid_stride()) {
    stats[j] = static_cast<float>(mean[j]);
    stats[c + j] = math::bn_variance(sync[c + 2 + j], rows);
  }
}
// dx with the global sums(2, C) weighted by the shares, in this replica's scale (as the CPU's bn_input_grad); 0 for a
// stand-in row, whose gradients count for nothing.
__global__ void sync_input_grad(const float* __restrict__ dy, const float* __restrict__ x, const float* stats,
                                const float* gamma, const float* sums, const float* share, float* __restrict__ dx,
                                int64_t m, int64_t c, float eps) {
  const bool counts = *share != 0.0f;
  for (int64_t i = first_index(); i < m * c; i += grid_stride()) {
    const int64_t j = i % c;
    dx[i] = counts ? math::bn_input_grad(dy[i], x[i], stats[j], stats[c + j], eps, gamma[j], m, sums[j], sums[c + j])
                   : 0.0f;
  }
}

__global__ void normalize(const float* __restrict__ x, const float* mean, const float* var, const float* gamma,
                          const float* beta, float* __restrict__ y, int64_t n, int64_t c, float eps) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const int64_t j = i % c;
    y[i] = math::bn_normalize(x[i], mean[j], var[j], eps, gamma[j], beta[j]);
  }
}
__global__ void input_grad(const float* __restrict__ dy, const float* __restrict__ x, const float* stats,
                           const float* gamma, const double* sums, float* __restrict__ dx, int64_t m, int64_t c,
                           float eps) {
  for (int64_t i = first_index(); i < m * c; i += grid_stride()) {
    const int64_t j = i % c;
    dx[i] = math::bn_input_grad(dy[i], x[i], stats[j], stats[c + j], eps, gamma[j], m, sums[j], sums[c + j]);
  }
}
__global__ void inference_grad(const float* __restrict__ dy, const float* var, const float* gamma,
                               float* __restrict__ dx, int64_t n, int64_t c, float eps) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const int64_t j = i % c;
    dx[i] = math::bn_inference_grad(dy[i], var[j], gamma[j], eps);
  }
}
__global__ void update_moving(const float* __restrict__ stats, float* __restrict__ mean, float* __restrict__ var,
                              int64_t c, float momentum) {
  for (int64_t j = first_index(); j < c; j += grid_stride()) {
    mean[j] = math::bn_moving(mean[j], stats[j], momentum);
    var[j] = math::bn_moving(var[j], stats[c + j], momentum);
  }
}

template <typename Kernel, typename... Args>
void launch(const char* what, int64_t n, int sms, Stream stream, Kernel kernel, Args... args) {
  const Geometry g = elementwise_geometry(n, sms);
  if (g.blocks) kernel<<<g.blocks, g.threads, 0, static_cast<cudaStream_t>(stream)>>>(args...);
  check(cudaGetLastError(), what, "batchnorm.cu");
}

// The workspace of bn_workspace_doubles(m, c): partials(2, chunks, C), then sums(2, C).
struct Workspace {
  double* partials;
  double* sums;
};
Workspace split(double* ws, int64_t m, int64_t c) { return {ws, ws + 2 * bias_grad_chunks(m) * c}; }

// sums(Terms::kCount, C) = the per-channel sums of the terms over x's m rows, in both passes.
template <typename Terms>
void channel_sums(const char* what, Terms t, int64_t m, int64_t c, double* partials, double* sums, int sms,
                  Stream stream) {
  const int64_t chunks = bias_grad_chunks(m);
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>((c + 127) / 128, 64)), static_cast<unsigned>(chunks));
  chunk_sums<<<grid, 128, 0, static_cast<cudaStream_t>(stream)>>>(t, partials, m, c, chunks);
  check(cudaGetLastError(), what, "batchnorm.cu");
  launch(what, Terms::kCount * c, sms, stream, finish_sums, partials, sums, c, chunks, Terms::kCount * c);
}

}  // namespace

int64_t bn_workspace_doubles(int64_t m, int64_t c) { return 2 * (bias_grad_chunks(m) + 1) * c; }

void launch_bn_stats(const float* x, float* stats, int64_t m, int64_t c, double* ws, int sm_count, Stream stream) {
  if (c <= 0) return;
  const Workspace w = split(ws, m, c);
  channel_sums("batchnorm sums kernel launch", SumTerms{x}, m, c, w.partials, w.sums, sm_count, stream);
  launch("batchnorm mean kernel launch", c, sm_count, stream, stats_mean, w.sums, stats, m, c);
  channel_sums("batchnorm squares kernel launch", SquareTerms{x, w.sums}, m, c, w.partials, w.sums + c, sm_count,
               stream);
  launch("batchnorm variance kernel launch", c, sm_count, stream, stats_variance, w.sums + c, stats, m, c);
}

int64_t bn_sync_floats(int64_t c) { return 2 * c + 3; }

void launch_bn_sync_local_sums(const float* x, int64_t m, int64_t c, double* ws, float* sync, const float* share,
                               int sm_count, Stream stream) {
  if (c <= 0) return;
  const Workspace w = split(ws, m, c);
  channel_sums("batchnorm sums kernel launch", SumTerms{x}, m, c, w.partials, w.sums, sm_count, stream);
  launch("batchnorm sums packing kernel launch", c, sm_count, stream, sync_pack_sums, w.sums, sync, share, m, c);
}

void launch_bn_sync_centered_squares(const float* x, int64_t m, int64_t c, double* ws, float* sync, int sm_count,
                                     Stream stream) {
  if (c <= 0) return;
  const Workspace w = split(ws, m, c);
  launch("batchnorm global mean kernel launch", c, sm_count, stream, sync_global_mean, sync, w.sums, c);
  channel_sums("batchnorm squares kernel launch", SquareTerms{x, w.sums}, m, c, w.partials, w.sums + c, sm_count,
               stream);
  launch("batchnorm squares packing kernel launch", c, sm_count, stream, to_float, w.sums + c, sync + c + 2, c);
}

void launch_bn_sync_stats(int64_t m, int64_t c, double* ws, const float* sync, float* stats, int sm_count,
                          Stream stream) {
  if (c <= 0) return;
  launch("batchnorm synchronized statistics kernel launch", c, sm_count, stream, sync_stats, split(ws, m, c).sums, sync,
         stats, c);
}

void launch_bn_sync_grad_sums(const float* dy, const float* x, const float* stats, int64_t m, int64_t c, float eps,
                              double* ws, float* sync, int sm_count, Stream stream) {
  if (c <= 0) return;
  const Workspace w = split(ws, m, c);
  channel_sums("batchnorm gradient sums kernel launch", GradTerms{dy, x, stats, c, eps}, m, c, w.partials, w.sums,
               sm_count, stream);
  launch("batchnorm gradient sums packing kernel launch", 2 * c, sm_count, stream, to_float, w.sums, sync, 2 * c);
}

void launch_bn_sync_input_grad(const float* dy, const float* x, const float* stats, const float* gamma,
                               const float* sync, const float* share, float* dx, int64_t m, int64_t c, float eps,
                               int sm_count, Stream stream) {
  if (c <= 0) return;
  launch("batchnorm synchronized input gradient kernel launch", m * c, sm_count, stream, sync_input_grad, dy, x, stats,
         gamma, sync, share, dx, m, c, eps);
}

void launch_bn_normalize(const float* x, const float* mean, const float* var, const float* gamma, const float* beta,
                         float* y, int64_t m, int64_t c, float eps, int sm_count, Stream stream) {
  if (c <= 0) return;
  launch("batchnorm normalize kernel launch", m * c, sm_count, stream, normalize, x, mean, var, gamma, beta, y, m * c,
         c, eps);
}

void launch_bn_input_grad(const float* dy, const float* x, const float* stats, const float* gamma, float* dx, int64_t m,
                          int64_t c, float eps, double* ws, int sm_count, Stream stream) {
  if (c <= 0) return;
  const Workspace w = split(ws, m, c);
  channel_sums("batchnorm gradient sums kernel launch", GradTerms{dy, x, stats, c, eps}, m, c, w.partials, w.sums,
               sm_count, stream);
  launch("batchnorm input gradient kernel launch", m * c, sm_count, stream, input_grad, dy, x, stats, gamma, w.sums, dx,
         m, c, eps);
}

void launch_bn_gamma_grad(const float* dy, const float* x, const float* stats, float* dgamma, int64_t m, int64_t c,
                          float eps, double* ws, int sm_count, Stream stream) {
  if (c <= 0) return;
  const Workspace w = split(ws, m, c);
  channel_sums("batchnorm gradient sums kernel launch", GradTerms{dy, x, stats, c, eps}, m, c, w.partials, w.sums,
               sm_count, stream);
  launch("batchnorm gamma gradient kernel launch", c, sm_count, stream, to_float, w.sums + c, dgamma, c);
}

void launch_bn_inference_grad(const float* dy, const float* var, const float* gamma, float* dx, int64_t m, int64_t c,
                              float eps, int sm_count, Stream stream) {
  if (c <= 0) return;
  launch("batchnorm inference gradient kernel launch", m * c, sm_count, stream, inference_grad, dy, var, gamma, dx,
         m * c, c, eps);
}

void launch_bn_inference_gamma_grad(const float* dy, const float* x, const float* mean, const float* var, float* dgamma,
                                    int64_t m, int64_t c, float eps, double* ws, int sm_count, Stream stream) {
  if (c <= 0) return;
  const Workspace w = split(ws, m, c);
  channel_sums("batchnorm inference gamma sums kernel launch", InferenceGammaTerms{dy, x, mean, var, eps}, m, c,
               w.partials, w.sums, sm_count, stream);
  launch("batchnorm inference gamma gradient kernel launch", c, sm_count, stream, to_float, w.sums, dgamma, c);
}

void launch_bn_update_moving(const float* stats, float* mean, float* var, int64_t c, float momentum, int sm_count,
                             Stream stream) {
  launch("batchnorm moving statistics kernel launch", c, sm_count, stream, update_moving, stats, mean, var, c,
         momentum);
}

}  // namespace tk::cuda
