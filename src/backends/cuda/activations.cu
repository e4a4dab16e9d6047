// Activations and their gradients on CUDA: grid-stride loops over the per-element math of
// backends/math/activations.h, the functions the CPU kernels run (one definition, two drivers).
#include <cuda_runtime.h>

#include "backends/cuda/check.h"
#include "backends/cuda/group_reduce.h"
#include "backends/cuda/launch_geometry.h"
#include "backends/cuda/launchers.h"
#include "backends/math/activations.h"

namespace tk::cuda {
namespace {

#define TK_ACTIVATION(Name, fwd, bwd)                                                              \
  struct Name {                                                                                    \
    static __device__ float f(float x, float alpha) { return math::fwd(x, alpha); }                \
    static __device__ float df(float dy, float v, float alpha) { return math::bwd(dy, v, alpha); } \
  };
TK_ACTIVATION(Relu, relu, relu_grad)
TK_ACTIVATION(Sigmoid, sigmoid, sigmoid_grad)
TK_ACTIVATION(Tanh, tanh_, tanh_grad)
TK_ACTIVATION(Gelu, gelu, gelu_grad)
TK_ACTIVATION(Elu, elu, elu_grad)
TK_ACTIVATION(LeakyRelu, leaky_relu, leaky_relu_grad)
#undef TK_ACTIVATION

__device__ int64_t first_index() { return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ int64_t grid_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

template <typename F>
__global__ void forward(const float* __restrict__ x, float* __restrict__ y, int64_t n, float alpha) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) y[i] = F::f(x[i], alpha);
}

template <typename F>
__global__ void backward(const float* __restrict__ dy, const float* __restrict__ v, float* __restrict__ dx, int64_t n,
                         float alpha) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) dx[i] = F::df(dy[i], v[i], alpha);
}

__global__ void relu_mask(float* __restrict__ c, const float* __restrict__ y, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) c[i] = y[i] > 0.0f ? c[i] : 0.0f;
}

__global__ void scale_by(const float* x, float* y, int64_t n, const float* scale) {  // in place too (a bucket)
  const float k = *scale;
  for (int64_t i = first_index(); i < n; i += grid_stride()) y[i] = x[i] * k;
}

__global__ void softmax(const float* __restrict__ x, float* __restrict__ y, int64_t rows, int64_t n) {
  for (int64_t r = first_index(); r < rows; r += grid_stride()) math::softmax_row(x + r * n, y + r * n, n);
}
__global__ void log_softmax(const float* __restrict__ x, float* __restrict__ y, int64_t rows, int64_t n) {
  for (int64_t r = first_index(); r < rows; r += grid_stride()) math::log_softmax_row(x + r * n, y + r * n, n);
}
__global__ void softmax_grad(const float* __restrict__ dy, const float* __restrict__ y, float* __restrict__ dx,
                             int64_t rows, int64_t n) {
  for (int64_t r = first_index(); r < rows; r += grid_stride())
    math::softmax_grad_row(dy + r * n, y + r * n, dx + r * n, n);
}

// Softmax rows with G threads per row (launch_geometry.h's reduce_group_threads): the row's max (NaN-propagating: a
// row holding a NaN is NaN throughout, as softmax_row's), the sum of exp(x - max) in float lanes combined in a fixed
// tree, then y = exp(x - max) * (1 / sum), each lane writing the elements it read. In place allowed (x == y).
template <int G>
__global__ void softmax_groups(const float* x, float* y, int64_t rows, int64_t n) {
  __shared__ float smem[kWarps];
  constexpr int kGroups = kBlock / G;
  const int lane = static_cast<int>(threadIdx.x) % G, group = static_cast<int>(threadIdx.x) / G;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kGroups + group; r < rows;
       r += static_cast<int64_t>(gridDim.x) * kGroups) {  // uniform per group (G = 256: per block)
    const float* xr = x + r * n;
    float* yr = y + r * n;
    float m = -INFINITY;
    for (int64_t j = lane; j < n; j += G) m = math::nan_max(m, xr[j]);
    m = group_reduce<G>(m, MaxF{}, smem);
    float s = 0.0f;
    for (int64_t j = lane; j < n; j += G) s += expf(xr[j] - m);
    const float inv = 1.0f / group_reduce<G>(s, AddF{}, smem);
    for (int64_t j = lane; j < n; j += G) yr[j] = expf(xr[j] - m) * inv;
  }
}
// dx = y * (dy - sum(dy * y)) per row, the sum as softmax_groups' (float lanes, fixed tree).
template <int G>
__global__ void softmax_grad_groups(const float* __restrict__ dy, const float* __restrict__ y, float* __restrict__ dx,
                                    int64_t rows, int64_t n) {
  __shared__ float smem[kWarps];
  constexpr int kGroups = kBlock / G;
  const int lane = static_cast<int>(threadIdx.x) % G, group = static_cast<int>(threadIdx.x) / G;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kGroups + group; r < rows;
       r += static_cast<int64_t>(gridDim.x) * kGroups) {
    const int64_t base = r * n;
    float dot = 0.0f;
    for (int64_t j = lane; j < n; j += G) dot += dy[base + j] * y[base + j];
    dot = group_reduce<G>(dot, AddF{}, smem);
    for (int64_t j = lane; j < n; j += G) dx[base + j] = y[base + j] * (dy[base + j] - dot);
  }
}

template <typename F>
void run_forward(const float* x, float* y, int64_t n, float alpha, int sms, cudaStream_t s) {
  const Geometry g = elementwise_geometry(n, sms);
  if (g.blocks) forward<F><<<g.blocks, g.threads, 0, s>>>(x, y, n, alpha);
}

template <typename F>
void run_backward(const float* dy, const float* v, float* dx, int64_t n, float alpha, int sms, cudaStream_t s) {
  const Geometry g = elementwise_geometry(n, sms);
  if (g.blocks) backward<F><<<g.blocks, g.threads, 0, s>>>(dy, v, dx, n, alpha);
}

template <typename F>
struct Tag {
  using type = F;
};

// Calls run(Tag<F>{}) with the functor F of `f`: the one place that maps an Activation to its math (C++17: nvcc
// builds these files as C++17, so no templated lambdas).
template <typename Run>
void dispatch(Activation f, Run&& run) {
  switch (f) {
    case Activation::relu:
      return run(Tag<Relu>{});
    case Activation::sigmoid:
      return run(Tag<Sigmoid>{});
    case Activation::tanh:
      return run(Tag<Tanh>{});
    case Activation::gelu:
      return run(Tag<Gelu>{});
    case Activation::elu:
      return run(Tag<Elu>{});
    case Activation::leaky_relu:
      return run(Tag<LeakyRelu>{});
  }
}

}  // namespace

void launch_activation(Activation f, const float* x, float* y, int64_t n, float alpha, int sm_count, Stream stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  dispatch(f, [&](auto tag) { run_forward<typename decltype(tag)::type>(x, y, n, alpha, sm_count, s); });
  check(cudaGetLastError(), "activation kernel launch", "launch_activation");
}

void launch_activation_grad(Activation f, const float* dy, const float* v, float* dx, int64_t n, float alpha,
                            int sm_count, Stream stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  dispatch(f, [&](auto tag) { run_backward<typename decltype(tag)::type>(dy, v, dx, n, alpha, sm_count, s); });
  check(cudaGetLastError(), "activation gradient kernel launch", "launch_activation_grad");
}

void launch_softmax(const float* x, float* y, int64_t rows, int64_t n, int sm_count, Stream stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  const int group = reduce_group_threads(rows, n, true, sm_count);
  const Geometry g = group > 1 ? group_geometry(rows, group, sm_count) : elementwise_geometry(rows, sm_count);
  if (g.blocks && group == kBlock)
    softmax_groups<kBlock><<<g.blocks, g.threads, 0, s>>>(x, y, rows, n);
  else if (g.blocks && group == kWarpThreads)
    softmax_groups<kWarpThreads><<<g.blocks, g.threads, 0, s>>>(x, y, rows, n);
  else if (g.blocks)
    softmax<<<g.blocks, g.threads, 0, s>>>(x, y, rows, n);
  check(cudaGetLastError(), "softmax kernel launch", "launch_softmax");
}

void launch_softmax_grad(const float* dy, const float* y, float* dx, int64_t rows, int64_t n, int sm_count,
                         Stream stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  const int group = reduce_group_threads(rows, n, true, sm_count);
  const Geometry g = group > 1 ? group_geometry(rows, group, sm_count) : elementwise_geometry(rows, sm_count);
  if (g.blocks && group == kBlock)
    softmax_grad_groups<kBlock><<<g.blocks, g.threads, 0, s>>>(dy, y, dx, rows, n);
  else if (g.blocks && group == kWarpThreads)
    softmax_grad_groups<kWarpThreads><<<g.blocks, g.threads, 0, s>>>(dy, y, dx, rows, n);
  else if (g.blocks)
    softmax_grad<<<g.blocks, g.threads, 0, s>>>(dy, y, dx, rows, n);
  check(cudaGetLastError(), "softmax gradient kernel launch", "launch_softmax_grad");
}

void launch_log_softmax(const float* x, float* y, int64_t rows, int64_t n, int sm_count, Stream stream) {
  const Geometry g = elementwise_geometry(rows, sm_count);
  if (g.blocks) log_softmax<<<g.blocks, g.threads, 0, static_cast<cudaStream_t>(stream)>>>(x, y, rows, n);
  check(cudaGetLastError(), "log-softmax kernel launch", "launch_log_softmax");
}

void launch_relu_mask(float* c, const float* y, int64_t n, int sm_count, Stream stream) {
  const Geometry g = elementwise_geometry(n, sm_count);
  if (g.blocks) relu_mask<<<g.blocks, g.threads, 0, static_cast<cudaStream_t>(stream)>>>(c, y, n);
  check(cudaGetLastError(), "relu mask kernel launch", "launch_relu_mask");
}

void launch_scale(const float* x, float* y, int64_t n, const float* scale, int sm_count, Stream stream) {
  const Geometry g = elementwise_geometry(n, sm_count);
  if (g.blocks) scale_by<<<g.blocks, g.threads, 0, static_cast<cudaStream_t>(stream)>>>(x, y, n, scale);
  check(cudaGetLastError(), "scale kernel launch", "launch_scale");
}

}  // namespace tk::cuda
