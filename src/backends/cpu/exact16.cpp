// 16-bit kernels for ops that are exact in any dtype — max pooling, its gradient, the relu gradient: they select
// values and never round — and for the bias gradient, read in 16 bits and summed in float32; so there is no
// reason to widen whole activations to float32 in the workspace (widen.cpp takes 4 bytes per element of every operand:
// the relu gradient of the first convolution was the largest workspace of a 16-bit CNN step). Values are compared as
// float32 in registers. The gradient takes the non-overlapping, unpadded windows of the usual 2x2 / stride 2 (every
// input pixel in at most one window); other windows, and split_ties, stay on the widened kernel.
#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>

#include "backends/cpu/kernels.h"
#include "backends/cpu/parallel.h"
#include "backends/math/activations.h"
#include "graph/kernel.h"
#include "graph/window.h"
#include "trainkit/core/half.h"

namespace tk::cpu {
using graph::KernelArgs;
using graph::Op;
using graph::Window;

namespace {

graph::KernelFn g_widened_grad[2] = {};   // MaxPool2DGrad's widened kernels (float16, bfloat16)
graph::WorkspaceFn g_widened_ws[2] = {};  // MaxPool2D, MaxPool2DGrad: the widened rules

template <typename T>
void max_pool16(const KernelArgs& a) {
  const Window g = Window::of(a.in_shape(0), a.node.attrs);
  const T* x = static_cast<const T*>(a.in[0]);
  T* y = static_cast<T*>(a.out);
  parallel_for(
      g.n * g.oh,
      [&](int64_t b, int64_t e) {
        constexpr int64_t kBlock = 256;
        float best[kBlock];
        for (int64_t row = b; row < e; ++row) {
          const int64_t n = row / g.oh, oh = row % g.oh;
          const int64_t h0 = std::max<int64_t>(oh * g.sh - g.pt, 0), h1 = std::min(oh * g.sh - g.pt + g.kh, g.h);
          for (int64_t ow = 0; ow < g.ow; ++ow) {
            const int64_t w0 = std::max<int64_t>(ow * g.sw - g.pl, 0), w1 = std::min(ow * g.sw - g.pl + g.kw, g.w);
            T* out = y + ((n * g.oh + oh) * g.ow + ow) * g.c;
            for (int64_t c0 = 0; c0 < g.c; c0 += kBlock) {
              const int64_t cn = std::min(kBlock, g.c - c0);
              for (int64_t c = 0; c < cn; ++c) best[c] = -std::numeric_limits<float>::infinity();
              for (int64_t ih = h0; ih < h1; ++ih)
                for (int64_t iw = w0; iw < w1; ++iw) {
                  const T* in = x + ((n * g.h + ih) * g.w + iw) * g.c + c0;
                  for (int64_t c = 0; c < cn; ++c) best[c] = math::pool_max(best[c], in[c].to_float());
                }
              for (int64_t c = 0; c < cn; ++c) out[c0 + c] = T::from_float(best[c]);  // exact: one of the inputs
            }
          }
        }
      },
      1);
}

bool tiled(const Window& g, const graph::Node& n) {
  return !n.attrs.split_ties && g.sh == g.kh && g.sw == g.kw && g.pt == 0 && g.pb == 0 && g.pl == 0 && g.pr == 0 &&
         g.dh == 1 && g.dw == 1;
}

// Whether a == b as numbers, from the bits alone: equal bits, or +0 against -0; a NaN equals nothing (as in float).
template <typename T>
constexpr bool same_number(uint16_t a, uint16_t b) {
  constexpr uint16_t kInf = std::is_same_v<T, bfloat16> ? 0x7f80 : 0x7c00;
  return (a == b || ((a | b) & 0x7fff) == 0) && (a & 0x7fff) <= kInf;
}

// The tiled case (non-overlapping windows, no padding): channels are the inner loop, every test is on the bits and
// every pointer a local __restrict one, so the loop vectorizes (a per-channel scalar walk took 5.8 ms for the
// tutorial CNN's first pooling gradient). Relu: the fused ReluGrad (graph/fuse.h), dy lands only where the maximum,
// the relu's output, is > 0.
template <typename T, bool Relu>
void max_pool_grad16_tiled(const Window& g, const T* dy, const T* x, const T* y, T* dx) {
  if (!(g.oh * g.kh == g.h && g.ow * g.kw == g.w))
    std::memset(static_cast<void*>(dx), 0, sizeof(T) * static_cast<size_t>(g.n * g.h * g.w * g.c));
  constexpr int64_t kBlock = 64;
  const int64_t oh_n = g.oh, ow_n = g.ow, kh_n = g.kh, kw_n = g.kw, h_n = g.h, w_n = g.w, c_n = g.c;
  parallel_for(
      g.n * g.oh,
      [=](int64_t b, int64_t e) {
        for (int64_t row = b; row < e; ++row) {
          const int64_t n = row / oh_n, oh = row % oh_n;
          for (int64_t ow = 0; ow < ow_n; ++ow) {
            const int64_t out = ((n * oh_n + oh) * ow_n + ow) * c_n;
            for (int64_t c0 = 0; c0 < c_n; c0 += kBlock) {
              const int64_t cn = std::min(kBlock, c_n - c0);
              const uint16_t* __restrict ym = &y[out + c0].bits;
              const uint16_t* __restrict d = &dy[out + c0].bits;
              uint16_t taken[kBlock];  // 1 once this channel's maximum has been given its gradient
              for (int64_t c = 0; c < cn; ++c) taken[c] = 0;
              for (int64_t kh = 0; kh < kh_n; ++kh)
                for (int64_t kw = 0; kw < kw_n; ++kw) {
                  const int64_t at = ((n * h_n + oh * kh_n + kh) * w_n + ow * kw_n + kw) * c_n + c0;
                  const uint16_t* __restrict xp = &x[at].bits;
                  uint16_t* __restrict dp = &dx[at].bits;
#pragma omp simd
                  for (int64_t c = 0; c < cn; ++c) {
                    const bool hit = same_number<T>(xp[c], ym[c]) && taken[c] == 0;
                    const bool pass = hit && (!Relu || positive(T::from_bits(ym[c])));
                    dp[c] = pass ? d[c] : uint16_t{0};
                    taken[c] = hit ? uint16_t{1} : taken[c];
                  }
                }
            }
          }
        }
      },
      1);
}

// dx gets dy at the first maximum of each window (row-major, as TensorFlow), 0 elsewhere.
template <typename T>
void max_pool_grad16(const KernelArgs& a) {
  const Window g = Window::of(a.node.shape, a.node.attrs);
  if (!tiled(g, a.node)) return g_widened_grad[std::is_same_v<T, bfloat16> ? 1 : 0](a);
  const T* dy = static_cast<const T*>(a.in[0]);
  const T* x = static_cast<const T*>(a.in[1]);
  const T* y = static_cast<const T*>(a.in[2]);
  T* dx = static_cast<T*>(a.out);
  if (a.node.attrs.epilogue == Op::ReluGrad)
    max_pool_grad16_tiled<T, true>(g, dy, x, y, dx);
  else
    max_pool_grad16_tiled<T, false>(g, dy, x, y, dx);
}

// dx = dy where y > 0, else 0 (ReluGrad: (dy, y)).
template <typename T>
void relu_grad16(const KernelArgs& a) {
  const T* dy = static_cast<const T*>(a.in[0]);
  const T* y = static_cast<const T*>(a.in[1]);
  T* dx = static_cast<T*>(a.out);
  // Branch-free on the bits, and the pointers copied in (no reloads through the capture): the loop vectorizes. A
  // relu mask is about half ones and half zeros, which a branch mispredicts half the time.
  parallel_for(a.node.shape.numel(), [dy, y, dx](int64_t b, int64_t e) {
    const T* __restrict in = dy;
    const T* __restrict keep = y;
    T* __restrict out = dx;
    for (int64_t i = b; i < e; ++i) out[i].bits = in[i].bits & positive_mask(keep[i]);
  });
}
graph::WorkspaceFn g_widened_relu_ws = nullptr, g_widened_bias_ws = nullptr;

// None for a 16-bit node (no float32 copies), else the widened kernels' rule *Widened (ReluGrad's, BiasGrad's).
template <graph::WorkspaceFn* Widened>
size_t workspace_no16(const graph::Graph& gr, int node) {
  const DType t = gr[node].dtype;
  return t == DType::f16 || t == DType::bf16 || !*Widened ? 0 : (*Widened)(gr, node);
}

// db(n) = sum over rows of dy(rows, n), read in 16 bits and summed in float32 in row order, then rounded once (the
// float32 kernel, linalg.cpp, sums in double over chunks of rows: this is within the 16-bit result's rounding of
// it), without a float32 copy of dy (a convolution's bias gradient reads its whole output gradient).
template <typename T>
void bias_grad16(const KernelArgs& a) {
  const int64_t n = a.node.shape[0], rows = a.in_shape(0).numel() / (n ? n : 1);
  const T* dy = static_cast<const T*>(a.in[0]);
  T* db = static_cast<T*>(a.out);
  constexpr int64_t kBlock = 512;  // columns per pass, with float32 sums on the stack
  for (int64_t j0 = 0; j0 < n; j0 += kBlock) {
    const int64_t jn = std::min(kBlock, n - j0);
    float sum[kBlock] = {};
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < jn; ++j) sum[j] += dy[r * n + j0 + j].to_float();
    for (int64_t j = 0; j < jn; ++j) db[j0 + j] = T::from_float(sum[j]);
  }
}

size_t workspace16(const graph::Graph& gr, int node) {
  const graph::Node& n = gr[node];
  const bool is16 = n.dtype == DType::f16 || n.dtype == DType::bf16;
  if (is16 && (n.op == Op::MaxPool2D || tiled(Window::of(n.shape, n.attrs), n))) return 0;
  const graph::WorkspaceFn f = g_widened_ws[n.op == Op::MaxPool2D ? 0 : 1];
  return f ? f(gr, node) : 0;
}

}  // namespace

void register_exact16_kernels() {
  const auto cpu = DeviceKind::cpu;
  g_widened_grad[0] =
      graph::registered_kernel(cpu, Op::MaxPool2DGrad, graph::signature_for(Op::MaxPool2DGrad, DType::f16));
  g_widened_grad[1] =
      graph::registered_kernel(cpu, Op::MaxPool2DGrad, graph::signature_for(Op::MaxPool2DGrad, DType::bf16));
  g_widened_ws[0] = graph::registered_workspace(cpu, Op::MaxPool2D);
  g_widened_ws[1] = graph::registered_workspace(cpu, Op::MaxPool2DGrad);
  if (!g_widened_grad[0] || !g_widened_grad[1]) return;
  graph::register_kernel(cpu, Op::MaxPool2D, DType::f16, max_pool16<float16>);
  graph::register_kernel(cpu, Op::MaxPool2D, DType::bf16, max_pool16<bfloat16>);
  graph::register_kernel(cpu, Op::MaxPool2DGrad, DType::f16, max_pool_grad16<float16>);
  graph::register_kernel(cpu, Op::MaxPool2DGrad, DType::bf16, max_pool_grad16<bfloat16>);
  graph::register_workspace(cpu, Op::MaxPool2D, workspace16);
  graph::register_workspace(cpu, Op::MaxPool2DGrad, workspace16);
  g_widened_relu_ws = graph::registered_workspace(cpu, Op::ReluGrad);
  graph::register_kernel(cpu, Op::ReluGrad, DType::f16, relu_grad16<float16>);
  graph::register_kernel(cpu, Op::ReluGrad, DType::bf16, relu_grad16<bfloat16>);
  graph::register_workspace(cpu, Op::ReluGrad, workspace_no16<&g_widened_relu_ws>);
  g_widened_bias_ws = graph::registered_workspace(cpu, Op::BiasGrad);
  graph::register_kernel(cpu, Op::BiasGrad, DType::f16, bias_grad16<float16>);
  graph::register_kernel(cpu, Op::BiasGrad, DType::bf16, bias_grad16<bfloat16>);
  graph::register_workspace(cpu, Op::BiasGrad, workspace_no16<&g_widened_bias_ws>);
}

}  // namespace tk::cpu
