// Conv2D, FusedConv2D and their gradients on CUDA. On cuDNN when it is loaded and can run the convolution
// (cudnn_conv.h: heuristic algorithms under this op's planned workspace); else as the CPU's im2col path does them
// (backends/cpu/conv.cpp): a chunk of images unrolled into col (chunk * OH * OW, KH * KW * C) in the program's
// workspace by a kernel, one cuBLASLt GEMM with the kernel viewed as (K, F) (the bias as its epilogue, the relu after
// it), col2im gathering the input gradient back. Both paths use the same workspace rule (conv_workspace), so the memory
// plan does not depend on which runs. Max and average pooling (conv_pool.cu) are registered here too.
#include "backends/cuda/cuda_kernels.h"

#ifdef TK_HAVE_CUDA
#include <algorithm>
#include <numeric>

#include "backends/cuda/cudnn_conv.h"
#include "backends/cuda/gemm_cublaslt.h"
#include "backends/cuda/launchers.h"
#include "graph/kernel.h"
#include "graph/window.h"
#include "trainkit/core/error.h"

namespace tk::cuda {
using cpu::Epilogue;
using cpu::GemmShape;
using graph::KernelArgs;
using graph::Op;
using graph::Window;

int sm_count(int index);  // cuda_kernels.cpp

Window conv_window(const graph::Graph& gr, const graph::Node& n) {
  return Window::of(n.op == Op::Conv2DGradInput ? n.attrs.shape : gr[n.inputs[0]].shape, n.attrs);
}
int64_t conv_filters(const graph::Graph& gr, const graph::Node& n) {
  return n.op == Op::Conv2DGradInput ? gr[n.inputs[0]].shape[3] : n.shape[3];
}

namespace {

// The col buffer is filled for a chunk of images at a time; 128 MiB holds the tutorial CNN's largest (conv2 at
// batch 128: 128 x 196 x 800 floats, 80 MB) in one chunk.
constexpr size_t kColCap = size_t{128} << 20;
size_t align256(size_t b) { return (b + 255) & ~size_t{255}; }

WindowGeo geo_of(const Window& g) {
  return {g.n, g.h, g.w, g.c, g.kh, g.kw, g.sh, g.sw, g.dh, g.dw, g.pt, g.pl, g.oh, g.ow};
}
// Images per chunk: as many as kColCap holds, and a multiple of what keeps every chunk's slice of the (N·P, F)
// output or output gradient 64-byte aligned, as the GEMM's plan promises cuBLASLt (gemm_cublaslt.cpp). f: the
// convolution's filters.
int64_t images_per_chunk(const Window& g, int64_t f) {
  const size_t per_image = static_cast<size_t>(std::max<int64_t>(g.pixels() * g.patch(), 1)) * sizeof(float);
  const int64_t n = std::max<int64_t>(g.n, 1);
  int64_t chunk = std::clamp<int64_t>(static_cast<int64_t>(kColCap / per_image), 1, n);
  if (chunk == n) return n;
  const int64_t floats = std::max<int64_t>(g.pixels() * f, 1);  // one image's output rows
  const int64_t step = 16 / std::gcd<int64_t>(16, floats);      // images per 64 bytes of output
  chunk = std::max(step, chunk / step * step);
  return std::min(chunk, n);
}
size_t col_bytes(const Window& g, int64_t f) {
  return align256(static_cast<size_t>(images_per_chunk(g, f) * g.pixels() * g.patch()) * sizeof(float));
}
// [col | the GEMM's workspace]
size_t conv_workspace(const graph::Graph& gr, int node) {
  return col_bytes(conv_window(gr, gr[node]), conv_filters(gr, gr[node])) + gemm_workspace_bytes();
}

// What every convolution kernel needs of a node: its window (conv_window), filters (conv_filters), chunking and scratch
// ([col | the GEMM's workspace]), the same numbers conv_workspace planned.
struct Conv {
  Window g;
  WindowGeo geo;
  int64_t f, chunk;
  float* col;
  void* gemm_ws;
  int sms;
  explicit Conv(const KernelArgs& a)
      : g(conv_window(a.g, a.node)),
        geo(geo_of(g)),
        f(conv_filters(a.g, a.node)),
        chunk(images_per_chunk(g, f)),
        col(static_cast<float*>(a.workspace)),
        gemm_ws(static_cast<char*>(a.workspace) + col_bytes(g, f)),
        sms(sm_count(a.ctx.device.index)) {}
};

// True where cuDNN ran the convolution, in the bytes conv_workspace planned for this node (which it divides its own
// way); else the im2col path starts. That path multiplies one (K, F) kernel: a grouped convolution (attrs.groups > 1,
// DepthwiseConv2D) runs on cuDNN only.
bool ran_on_cudnn(const KernelArgs& a, const Conv& c, ConvKind kind) {
  if (cudnn_convolution(a, kind, c.g, c.f, col_bytes(c.g, c.f) + gemm_workspace_bytes())) return true;
  if (a.node.attrs.groups != 1)
    throw Unsupported(
        "node '" + a.node.name + "': a grouped convolution (groups = " + std::to_string(a.node.attrs.groups) +
        ") runs on CUDA through cuDNN only, and cuDNN is not loaded, switched off (TK_CUDNN=0) or refused "
        "it (the log says which); run it on the CPU or install cuDNN");
  count_conv_path(false);
  return false;
}

// y(N, OH, OW, F) = epilogue(conv(x(N, H, W, C), w(KH, KW, C, F)))
void convolve(const KernelArgs& a, Epilogue epilogue, const float* bias) {
  const Conv c(a);
  if (ran_on_cudnn(a, c, ConvKind::forward)) {
    // cuDNN's product, then the epilogue as the CPU's FusedConv2D applies it: one pass each over y (N·P rows of F).
    const int64_t rows = c.g.n * c.g.pixels();
    if (epilogue == Epilogue::bias || epilogue == Epilogue::bias_relu)
      launch_bias_add(a.output<float>(), bias, a.output<float>(), rows, c.f, c.sms, a.ctx.stream);
    if (epilogue == Epilogue::bias_relu)
      launch_activation(Activation::relu, a.output<float>(), a.output<float>(), rows * c.f, 0.0f, c.sms, a.ctx.stream);
    return;
  }
  for (int64_t n0 = 0; n0 < c.g.n; n0 += c.chunk) {
    const int64_t count = std::min(c.chunk, c.g.n - n0);
    launch_im2col(a.input<float>(0), c.geo, n0, count, c.col, c.sms, a.ctx.stream);
    gemm({count * c.g.pixels(), c.f, c.g.patch(), false, false, epilogue}, c.col, a.input<float>(1), bias,
         a.output<float>() + n0 * c.g.pixels() * c.f, 0.0f, c.gemm_ws, a.ctx.device.index, a.ctx.stream, a.node);
  }
}
void conv2d(const KernelArgs& a) { convolve(a, Epilogue::none, nullptr); }
void fused_conv2d(const KernelArgs& a) {
  convolve(a, a.node.attrs.epilogue == Op::Relu ? Epilogue::bias_relu : Epilogue::bias, a.input<float>(2));
}

// dx = col2im(dy(N·P, F) · wᵀ(F, K))
void conv2d_grad_input(const KernelArgs& a) {
  const Conv c(a);
  if (ran_on_cudnn(a, c, ConvKind::backward_data)) return;
  for (int64_t n0 = 0; n0 < c.g.n; n0 += c.chunk) {
    const int64_t count = std::min(c.chunk, c.g.n - n0);
    gemm({count * c.g.pixels(), c.g.patch(), c.f, false, true, Epilogue::none},
         a.input<float>(0) + n0 * c.g.pixels() * c.f, a.input<float>(1), nullptr, c.col, 0.0f, c.gemm_ws,
         a.ctx.device.index, a.ctx.stream, a.node);
    launch_col2im(c.col, c.geo, n0, count, a.output<float>(), c.sms, a.ctx.stream);
  }
}

// dw(K, F) = sum over chunks of colᵀ(K, N·P) · dy(N·P, F)
void conv2d_grad_filter(const KernelArgs& a) {
  const Conv c(a);
  if (ran_on_cudnn(a, c, ConvKind::backward_filter)) return;
  for (int64_t n0 = 0; n0 < c.g.n; n0 += c.chunk) {
    const int64_t count = std::min(c.chunk, c.g.n - n0);
    launch_im2col(a.input<float>(0), c.geo, n0, count, c.col, c.sms, a.ctx.stream);
    gemm({c.g.patch(), c.f, count * c.g.pixels(), true, false, Epilogue::none}, c.col,
         a.input<float>(1) + n0 * c.g.pixels() * c.f, nullptr, a.output<float>(), n0 == 0 ? 0.0f : 1.0f, c.gemm_ws,
         a.ctx.device.index, a.ctx.stream, a.node);
  }
}

void max_pool(const KernelArgs& a) {
  launch_max_pool(a.input<float>(0), geo_of(Window::of(a.in_shape(0), a.node.attrs)), a.output<float>(),
                  sm_count(a.ctx.device.index), a.ctx.stream);
}
void max_pool_grad(const KernelArgs& a) {
  launch_max_pool_grad(a.input<float>(0), a.input<float>(1), a.input<float>(2),
                       geo_of(Window::of(a.node.shape, a.node.attrs)), a.node.attrs.split_ties,
                       a.node.attrs.epilogue == Op::ReluGrad, a.output<float>(), sm_count(a.ctx.device.index),
                       a.ctx.stream);
  if (a.side_out) launch_side_bias_grad(a, a.output<float>(), 0);  // the fused bias gradient (graph/fuse.h)
}
size_t max_pool_grad_workspace(const graph::Graph& g, int node) { return side_bias_grad_workspace(g, node, 0); }
void avg_pool(const KernelArgs& a) {
  launch_avg_pool(a.input<float>(0), geo_of(Window::of(a.in_shape(0), a.node.attrs)), a.output<float>(),
                  sm_count(a.ctx.device.index), a.ctx.stream);
}
void avg_pool_grad(const KernelArgs& a) {
  launch_avg_pool_grad(a.input<float>(0), geo_of(Window::of(a.node.shape, a.node.attrs)), a.output<float>(),
                       sm_count(a.ctx.device.index), a.ctx.stream);
}

}  // namespace

void register_conv_kernels() {
  const DeviceKind cuda = DeviceKind::cuda;
  graph::register_kernel(cuda, Op::Conv2D, DType::f32, conv2d);
  graph::register_kernel(cuda, Op::FusedConv2D, DType::f32, fused_conv2d);
  graph::register_kernel(cuda, Op::Conv2DGradInput, DType::f32, conv2d_grad_input);
  graph::register_kernel(cuda, Op::Conv2DGradFilter, DType::f32, conv2d_grad_filter);
  for (Op op : {Op::Conv2D, Op::FusedConv2D, Op::Conv2DGradInput, Op::Conv2DGradFilter})
    graph::register_workspace(cuda, op, conv_workspace);
  graph::register_kernel(cuda, Op::MaxPool2D, DType::f32, max_pool);
  graph::register_kernel(cuda, Op::MaxPool2DGrad, DType::f32, max_pool_grad);
  graph::register_workspace(cuda, Op::MaxPool2DGrad, max_pool_grad_workspace);
  graph::register_kernel(cuda, Op::AvgPool2D, DType::f32, avg_pool);
  graph::register_kernel(cuda, Op::AvgPool2DGrad, DType::f32, avg_pool_grad);
}

}  // namespace tk::cuda
#endif
