// Conv2D (NHWC) as im2col + GEMM: a chunk of images is unrolled into col (chunk * OH * OW, KH * KW * C)
// in the program's workspace, then one OpenBLAS GEMM multiplies it with the kernel viewed as (K, F).
#include <cblas.h>

#include <algorithm>
#include <cstring>

#include "backends/cpu/conv_grouped.h"
#include "backends/cpu/gemm.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/parallel.h"
#include "graph/kernel.h"
#include "graph/window.h"

namespace tk::cpu {
using graph::KernelArgs;
using graph::Op;
using graph::Window;

namespace {

// im2col buffers are filled for a chunk of images at a time so that the scratch stays bounded: the CPU
// backend's workspace rule for the three convolution ops.
constexpr size_t kConvWorkspaceCap = size_t{16} << 20;
int64_t conv_images_per_chunk(const Window& g) {
  const size_t per_image = static_cast<size_t>(std::max<int64_t>(g.pixels() * g.patch(), 1)) * sizeof(float);
  return std::clamp<int64_t>(static_cast<int64_t>(kConvWorkspaceCap / per_image), 1, std::max<int64_t>(g.n, 1));
}

size_t conv_workspace(const graph::Graph& gr, int node) {
  const graph::Node& n = gr[node];
  if (n.attrs.groups != 1) return 0;  // conv_grouped.cpp: direct, no col buffer
  const Window g = Window::of(n.op == Op::Conv2DGradInput ? n.attrs.shape : gr[n.inputs[0]].shape, n.attrs);
  return static_cast<size_t>(conv_images_per_chunk(g) * g.pixels() * g.patch()) * sizeof(float);
}

// col(P, K) for one image: row p = (oh, ow), column (kh * KW + kw) * C + c; zeros where the window
// reads padding. Without dilation a kernel row is KW * C contiguous floats of x, copied at once.
void im2col(const Window& g, const float* x, float* col) {
  const int64_t row_len = g.kw * g.c;
  for (int64_t oh = 0; oh < g.oh; ++oh)
    for (int64_t ow = 0; ow < g.ow; ++ow) {
      float* row = col + (oh * g.ow + ow) * g.patch();
      const int64_t iw0 = ow * g.sw - g.pl;
      const bool whole_row = g.dw == 1 && iw0 >= 0 && iw0 + g.kw <= g.w;
      for (int64_t kh = 0; kh < g.kh; ++kh) {
        const int64_t ih = oh * g.sh - g.pt + kh * g.dh;
        float* dst_row = row + kh * row_len;
        if (ih < 0 || ih >= g.h) {
          std::memset(dst_row, 0, sizeof(float) * static_cast<size_t>(row_len));
        } else if (whole_row) {
          std::memcpy(dst_row, x + (ih * g.w + iw0) * g.c, sizeof(float) * static_cast<size_t>(row_len));
        } else {
          for (int64_t kw = 0; kw < g.kw; ++kw) {
            const int64_t iw = iw0 + kw * g.dw;
            float* dst = dst_row + kw * g.c;
            if (iw < 0 || iw >= g.w)
              std::memset(dst, 0, sizeof(float) * static_cast<size_t>(g.c));
            else
              std::memcpy(dst, x + (ih * g.w + iw) * g.c, sizeof(float) * static_cast<size_t>(g.c));
          }
        }
      }
    }
}

// dx(H, W, C) = the columns of dcol(P, K) scattered back (added) to the pixels they were read from.
void col2im(const Window& g, const float* dcol, float* dx) {
  std::memset(dx, 0, sizeof(float) * static_cast<size_t>(g.h * g.w * g.c));
  const int64_t row_len = g.kw * g.c;
  for (int64_t oh = 0; oh < g.oh; ++oh)
    for (int64_t ow = 0; ow < g.ow; ++ow) {
      const float* row = dcol + (oh * g.ow + ow) * g.patch();
      const int64_t iw0 = ow * g.sw - g.pl;
      const bool whole_row = g.dw == 1 && iw0 >= 0 && iw0 + g.kw <= g.w;
      for (int64_t kh = 0; kh < g.kh; ++kh) {
        const int64_t ih = oh * g.sh - g.pt + kh * g.dh;
        if (ih < 0 || ih >= g.h) continue;
        const float* src_row = row + kh * row_len;
        if (whole_row) {
          float* dst = dx + (ih * g.w + iw0) * g.c;
#pragma omp simd
          for (int64_t i = 0; i < row_len; ++i) dst[i] += src_row[i];
          continue;
        }
        for (int64_t kw = 0; kw < g.kw; ++kw) {
          const int64_t iw = iw0 + kw * g.dw;
          if (iw < 0 || iw >= g.w) continue;
          const float* src = src_row + kw * g.c;
          float* dst = dx + (ih * g.w + iw) * g.c;
#pragma omp simd
          for (int64_t c = 0; c < g.c; ++c) dst[c] += src[c];
        }
      }
    }
}

// Unrolls images [n0, n0 + count) into col, one image per thread.
void im2col_chunk(const Window& g, const float* x, int64_t n0, int64_t count, float* col) {
  parallel_for(
      count,
      [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) im2col(g, x + (n0 + i) * g.h * g.w * g.c, col + i * g.pixels() * g.patch());
      },
      1);
}

blasint bl(int64_t v) { return static_cast<blasint>(v); }

// y(N, OH, OW, F) = conv(x(N, H, W, C), w(KH, KW, C, F))
void conv2d(const KernelArgs& a) {
  if (a.node.attrs.groups != 1) return grouped_conv2d(a);
  const Window g = Window::of(a.in_shape(0), a.node.attrs);
  const int64_t f = a.node.shape[3], chunk = conv_images_per_chunk(g);
  const float* x = a.input<float>(0);
  const float* w = a.input<float>(1);
  float* col = static_cast<float*>(a.workspace);
  for (int64_t n0 = 0; n0 < g.n; n0 += chunk) {
    const int64_t count = std::min(chunk, g.n - n0);
    im2col_chunk(g, x, n0, count, col);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bl(count * g.pixels()), bl(f), bl(g.patch()), 1.0f, col,
                bl(g.patch()), w, bl(f), 0.0f, a.output<float>() + n0 * g.pixels() * f, bl(f));
  }
}

// (x, w, bias) -> conv + bias [relu]: the convolution, then one pass over its output (N·OH·OW rows of F).
void fused_conv2d(const KernelArgs& a) {
  conv2d(a);
  const int64_t f = a.node.shape[3];
  const GemmShape rows{.m = a.node.shape.numel() / std::max<int64_t>(f, 1),
                       .n = f,
                       .epilogue = a.node.attrs.epilogue == Op::Relu ? Epilogue::bias_relu : Epilogue::bias};
  apply_epilogue(rows, a.input<float>(2), nullptr, a.output<float>());
}

// dx = col2im(dy(N·P, F) · wᵀ(F, K))
void conv2d_grad_input(const KernelArgs& a) {
  if (a.node.attrs.groups != 1) return grouped_conv2d_grad_input(a);
  const Window g = Window::of(a.node.shape, a.node.attrs);
  const int64_t f = a.in_shape(0)[3], chunk = conv_images_per_chunk(g);
  const float* dy = a.input<float>(0);
  const float* w = a.input<float>(1);
  float* dcol = static_cast<float*>(a.workspace);
  float* dx = a.output<float>();
  for (int64_t n0 = 0; n0 < g.n; n0 += chunk) {
    const int64_t count = std::min(chunk, g.n - n0);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bl(count * g.pixels()), bl(g.patch()), bl(f), 1.0f,
                dy + n0 * g.pixels() * f, bl(f), w, bl(f), 0.0f, dcol, bl(g.patch()));
    parallel_for(
        count,
        [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) col2im(g, dcol + i * g.pixels() * g.patch(), dx + (n0 + i) * g.h * g.w * g.c);
        },
        1);
  }
}

// dw(K, F) = sum over chunks of colᵀ(K, N·P) · dy(N·P, F)
void conv2d_grad_filter(const KernelArgs& a) {
  if (a.node.attrs.groups != 1) return grouped_conv2d_grad_filter(a);
  const Window g = Window::of(a.in_shape(0), a.node.attrs);
  const int64_t f = a.node.shape[3], chunk = conv_images_per_chunk(g);
  const float* x = a.input<float>(0);
  const float* dy = a.input<float>(1);
  float* col = static_cast<float*>(a.workspace);
  for (int64_t n0 = 0; n0 < g.n; n0 += chunk) {
    const int64_t count = std::min(chunk, g.n - n0);
    im2col_chunk(g, x, n0, count, col);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bl(g.patch()), bl(f), bl(count * g.pixels()), 1.0f, col,
                bl(g.patch()), dy + n0 * g.pixels() * f, bl(f), n0 == 0 ? 0.0f : 1.0f, a.output<float>(), bl(f));
  }
}

}  // namespace

void register_conv_kernels() {
  graph::register_kernel(DeviceKind::cpu, Op::Conv2D, DType::f32, conv2d);
  graph::register_kernel(DeviceKind::cpu, Op::FusedConv2D, DType::f32, fused_conv2d);
  graph::register_kernel(DeviceKind::cpu, Op::Conv2DGradInput, DType::f32, conv2d_grad_input);
  graph::register_kernel(DeviceKind::cpu, Op::Conv2DGradFilter, DType::f32, conv2d_grad_filter);
  for (Op op : {Op::Conv2D, Op::FusedConv2D, Op::Conv2DGradInput, Op::Conv2DGradFilter})
    graph::register_workspace(DeviceKind::cpu, op, conv_workspace);
}

}  // namespace tk::cpu
