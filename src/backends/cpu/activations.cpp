// Activations (Keras 3 definitions) and their gradients.
#include "backends/math/activations.h"

#include <algorithm>
#include <cmath>

#include "backends/cpu/column_sums.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/vector_exp.h"
#include "graph/kernel.h"

namespace tk::cpu {
using graph::KernelArgs;
using graph::Op;

namespace {

// y[i] = F(x[i], alpha)
template <typename F>
void unary(const KernelArgs& a, F f) {
  const int64_t n = a.node.shape.numel();
  const float* x = a.input<float>(0);
  float* y = a.output<float>();
  const float alpha = a.node.attrs.alpha;
  parallel_for(n, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) y[i] = f(x[i], alpha);
  });
}

// dx[i] = F(dy[i], v[i], alpha), v being x or y as the op's gradient rule chose.
template <typename F>
void binary_grad(const KernelArgs& a, F f) {
  const int64_t n = a.node.shape.numel();
  const float* dy = a.input<float>(0);
  const float* v = a.input<float>(1);
  float* dx = a.output<float>();
  const float alpha = a.node.attrs.alpha;
  parallel_for(n, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) dx[i] = f(dy[i], v[i], alpha);
  });
}

// The per-element math is backends/math/activations.h, shared with the CUDA kernels; lambdas (not function
// pointers) so that each loop inlines it and vectorizes.
void relu(const KernelArgs& a) {
  unary(a, [](float x, float al) { return math::relu(x, al); });
}
// With attrs.side_output, the bias gradient too (graph/fuse.h): dx's column sums, added while dx is written.
void relu_grad(const KernelArgs& a) {
  if (!a.side_out) {
    binary_grad(a, [](float dy, float y, float al) { return math::relu_grad(dy, y, al); });
    return;
  }
  const int64_t c = a.node.shape.rank() ? a.node.shape[-1] : 1, rows = a.node.shape.numel() / (c ? c : 1);
  const float* dy = a.input<float>(0);
  const float* y = a.input<float>(1);
  float* dx = a.output<float>();
  auto* partial = static_cast<double*>(a.workspace);
  const ColumnSums cs(rows, c);
  const float alpha = a.node.attrs.alpha;
  parallel_chunks(cs, partial, [&](int64_t k, int64_t r0, int64_t r1) {
    for_row_tiles(r0, r1, c, [&](int64_t t0, int64_t t1) {  // a tile of rows written, then summed from L1
      const float* __restrict d = dy;
      const float* __restrict v = y;
      float* __restrict out = dx;
#pragma omp simd
      for (int64_t i = t0 * c; i < t1 * c; ++i) out[i] = math::relu_grad(d[i], v[i], alpha);
      add_column_sums(dx, c, t0, t1, partial + k * c);
    });
  });
  cs.finish(partial, static_cast<float*>(a.side_out));
}
size_t relu_grad_workspace(const graph::Graph& g, int node) {
  const graph::Node& n = g[node];
  if (!n.attrs.side_output) return 0;
  const int64_t c = n.shape.rank() ? n.shape[-1] : 1;
  return ColumnSums(n.shape.numel() / (c ? c : 1), c).workspace_bytes();
}
void sigmoid(const KernelArgs& a) {
  unary(a, [](float x, float al) { return math::sigmoid(x, al); });
}
void sigmoid_grad(const KernelArgs& a) {
  binary_grad(a, [](float dy, float y, float al) { return math::sigmoid_grad(dy, y, al); });
}
void tanh_(const KernelArgs& a) {
  unary(a, [](float x, float al) { return math::tanh_(x, al); });
}
void tanh_grad(const KernelArgs& a) {
  binary_grad(a, [](float dy, float y, float al) { return math::tanh_grad(dy, y, al); });
}
void gelu(const KernelArgs& a) {
  unary(a, [](float x, float al) { return math::gelu(x, al); });
}
void gelu_grad(const KernelArgs& a) {
  binary_grad(a, [](float dy, float x, float al) { return math::gelu_grad(dy, x, al); });
}
void elu(const KernelArgs& a) {
  unary(a, [](float x, float al) { return math::elu(x, al); });
}
void elu_grad(const KernelArgs& a) {
  binary_grad(a, [](float dy, float x, float al) { return math::elu_grad(dy, x, al); });
}
void leaky_relu(const KernelArgs& a) {
  unary(a, [](float x, float al) { return math::leaky_relu(x, al); });
}
void leaky_relu_grad(const KernelArgs& a) {
  binary_grad(a, [](float dy, float x, float al) { return math::leaky_relu_grad(dy, x, al); });
}

// Calls f(offset, rows, n) over blocks of the rows of n elements along s's last axis, split between threads.
template <typename F>
void last_axis_rows(const Shape& s, F f) {
  const int64_t n = s[-1], rows = s.numel() / (n ? n : 1);
  parallel_for(
      rows, [&](int64_t rb, int64_t re) { f(rb * n, re - rb, n); }, kParallelGrain / std::max<int64_t>(n, 1));
}

// Softmax over the last axis, y(rows, n): backends/math/activations.h's softmax_row (the max subtracted, the sum
// normalized), in the CPU's vector lanes (vector_exp.h: exp within 1.2e-7 of expf, the ISA chosen at run time).
void softmax(const KernelArgs& a) {
  const float* x = a.input<float>(0);
  float* y = a.output<float>();
  last_axis_rows(a.node.shape, [&](int64_t o, int64_t rows, int64_t n) { softmax_rows(x + o, y + o, rows, n); });
}
// Log-softmax over the last axis: math::log_softmax_row in the vector lanes (vector_exp.h's log_softmax_rows).
void log_softmax(const KernelArgs& a) {
  const float* x = a.input<float>(0);
  float* y = a.output<float>();
  last_axis_rows(a.node.shape, [&](int64_t o, int64_t rows, int64_t n) { log_softmax_rows(x + o, y + o, rows, n); });
}
void softmax_grad(const KernelArgs& a) {
  const float* dy = a.input<float>(0);
  const float* y = a.input<float>(1);
  float* dx = a.output<float>();
  last_axis_rows(a.node.shape, [&](int64_t o, int64_t rows, int64_t n) {
    softmax_grad_rows(dy + o, y + o, dx + o, rows, n);  // math::softmax_grad_row in lanes
  });
}

}  // namespace

void register_activation_kernels() {
  using graph::register_kernel;
  constexpr auto cpu = DeviceKind::cpu;
  constexpr auto f32 = DType::f32;
  register_kernel(cpu, Op::Relu, f32, relu);
  register_kernel(cpu, Op::ReluGrad, f32, relu_grad);
  graph::register_workspace(cpu, Op::ReluGrad, relu_grad_workspace);
  register_kernel(cpu, Op::Sigmoid, f32, sigmoid);
  register_kernel(cpu, Op::SigmoidGrad, f32, sigmoid_grad);
  register_kernel(cpu, Op::Tanh, f32, tanh_);
  register_kernel(cpu, Op::TanhGrad, f32, tanh_grad);
  register_kernel(cpu, Op::Gelu, f32, gelu);
  register_kernel(cpu, Op::GeluGrad, f32, gelu_grad);
  register_kernel(cpu, Op::Elu, f32, elu);
  register_kernel(cpu, Op::EluGrad, f32, elu_grad);
  register_kernel(cpu, Op::LeakyRelu, f32, leaky_relu);
  register_kernel(cpu, Op::LeakyReluGrad, f32, leaky_relu_grad);
  register_kernel(cpu, Op::Softmax, f32, softmax);
  register_kernel(cpu, Op::SoftmaxGrad, f32, softmax_grad);
  register_kernel(cpu, Op::LogSoftmax, f32, log_softmax);
}

}  // namespace tk::cpu
