// Max and average pooling (NHWC), and the spatial reshaping ops Pad2D, Crop2D, Upsample2D, Resize.
#include <algorithm>
#include <cstring>
#include <limits>

#include "backends/cpu/column_sums.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/parallel.h"
#include "backends/math/activations.h"
#include "backends/op_layouts.h"
#include "graph/kernel.h"
#include "graph/window.h"

namespace tk::cpu {
using graph::KernelArgs;
using graph::Op;
using graph::Window;

namespace {

// Calls f(n, oh, ow, ih0, ih1, iw0, iw1): the window of output pixel (oh, ow) clipped to the image.
template <typename F>
void for_each_window(const Window& g, F f) {
  parallel_for(
      g.n,
      [&](int64_t b, int64_t e) {
        for (int64_t n = b; n < e; ++n)
          for (int64_t oh = 0; oh < g.oh; ++oh)
            for (int64_t ow = 0; ow < g.ow; ++ow) {
              const int64_t h0 = oh * g.sh - g.pt, w0 = ow * g.sw - g.pl;
              f(n, oh, ow, std::max<int64_t>(h0, 0), std::min(h0 + g.kh, g.h), std::max<int64_t>(w0, 0),
                std::min(w0 + g.kw, g.w));
            }
      },
      1);
}

// y(N, OH, OW, C) = max over the window; padding never wins; a NaN in the window gives NaN.
void max_pool(const KernelArgs& a) {
  const Window g = Window::of(a.in_shape(0), a.node.attrs);
  const float* x = a.input<float>(0);
  float* y = a.output<float>();
  for_each_window(g, [&](int64_t n, int64_t oh, int64_t ow, int64_t h0, int64_t h1, int64_t w0, int64_t w1) {
    float* out = y + ((n * g.oh + oh) * g.ow + ow) * g.c;
    for (int64_t c = 0; c < g.c; ++c) out[c] = -std::numeric_limits<float>::infinity();
    for (int64_t ih = h0; ih < h1; ++ih)
      for (int64_t iw = w0; iw < w1; ++iw) {
        const float* in = x + ((n * g.h + ih) * g.w + iw) * g.c;
        for (int64_t c = 0; c < g.c; ++c) out[c] = math::pool_max(out[c], in[c]);
      }
  });
}

// The chunks of a MaxPool2DGrad's bias-gradient sums (graph/fuse.h): rows of windows in the tiled kernel, pixel
// rows otherwise; the kernel and its workspace rule both take them from here.
ColumnSums pool_grad_sums(const Window& g, bool tiled) {
  return tiled ? ColumnSums(g.n * g.oh, g.c, g.n * g.h * g.w * g.c) : ColumnSums(g.n * g.h * g.w, g.c);
}

// dx gets each dy at the first maximum of its window (row-major scan, as TensorFlow's MaxPoolGrad), or,
// with split_ties (a global max: TensorFlow's reduce_max gradient), shared evenly by all tied maxima.
// The maximum itself is y, so one pass over the window finds it; channels are the inner, contiguous loop.
// Non-overlapping windows without padding (the usual 2x2 / stride 2): every pixel belongs to at most one
// window, so each dx element is written exactly once (no zeroing pass) and channels vectorize.
// Relu: the fused ReluGrad (graph/fuse.h): dy lands only where the maximum, the relu's output, is > 0.
// Everything the inner loop reads is a local value or a __restrict pointer (no loads through the lambda's captures,
// which kept it scalar: 7.2 ms for the tutorial CNN's first pooling gradient, against 0.7 ms for a memory pass of
// the same size), and the first-maximum bookkeeping is a select, so the channel loop vectorizes.
// Sums: the bias gradient too (graph/fuse.h): the column sums of each row of windows' dx, added while that part of
// dx is still in L1 (column_sums.h), so the convolution's output gradient is not read again from memory.
template <bool Relu, bool Sums>
void max_pool_grad_tiled(const Window& g, const float* dy, const float* x, const float* y, float* dx,
                         float* db = nullptr, double* partial = nullptr) {
  const bool covered = g.oh * g.kh == g.h && g.ow * g.kw == g.w;
  if (!covered) std::memset(dx, 0, sizeof(float) * static_cast<size_t>(g.n * g.h * g.w * g.c));
  constexpr int64_t kBlock = 64;
  const int64_t oh_n = g.oh, ow_n = g.ow, kh_n = g.kh, kw_n = g.kw, h_n = g.h, w_n = g.w, c_n = g.c;
  // Output rows [b, e) (image n, pooled row oh).
  auto rows = [=](int64_t b, int64_t e, double* acc) {
    for (int64_t row = b; row < e; ++row) {
      const int64_t n = row / oh_n, oh = row % oh_n;
      for (int64_t ow = 0; ow < ow_n; ++ow) {
        const int64_t out = ((n * oh_n + oh) * ow_n + ow) * c_n;
        for (int64_t c0 = 0; c0 < c_n; c0 += kBlock) {
          const int64_t cn = std::min(kBlock, c_n - c0);
          const float* __restrict ym = y + out + c0;
          const float* __restrict d = dy + out + c0;
          float taken[kBlock];  // 1 once this channel's maximum has been given its gradient
          for (int64_t c = 0; c < cn; ++c) taken[c] = 0.0f;
          for (int64_t kh = 0; kh < kh_n; ++kh)
            for (int64_t kw = 0; kw < kw_n; ++kw) {
              const int64_t at = ((n * h_n + oh * kh_n + kh) * w_n + ow * kw_n + kw) * c_n + c0;
              const float* __restrict xp = x + at;
              float* __restrict dp = dx + at;
#pragma omp simd
              for (int64_t c = 0; c < cn; ++c) {
                const bool hit = xp[c] == ym[c] && taken[c] == 0.0f;
                const bool pass = hit && (!Relu || ym[c] > 0.0f);
                dp[c] = pass ? d[c] : 0.0f;  // a select, not a product: inf * 0 would be NaN
                taken[c] = hit ? 1.0f : taken[c];
              }
            }
        }
      }
      // Sums: the kh image rows this row of windows just wrote (dx as (pixels, c), in L1), added to the chunk's sums.
      if (acc) add_column_sums(dx, c_n, (n * h_n + oh * kh_n) * w_n, (n * h_n + oh * kh_n + kh_n) * w_n, acc);
    }
  };
  if constexpr (Sums) {  // over fixed chunks of rows of windows (column_sums.h), not the threads
    const ColumnSums cs = pool_grad_sums(g, true);
    parallel_chunks(cs, partial, [&](int64_t k, int64_t r0, int64_t r1) { rows(r0, r1, partial + k * g.c); });
    cs.finish(partial, db);
  } else {
    parallel_for(
        g.n * g.oh, [&](int64_t b, int64_t e) { rows(b, e, nullptr); }, 1);
  }
}

bool tiled_pool_grad(const Window& g, bool split) {
  return !split && g.sh == g.kh && g.sw == g.kw && g.pt == 0 && g.pb == 0 && g.pl == 0 && g.pr == 0 && g.dh == 1 &&
         g.dw == 1;
}
size_t max_pool_grad_workspace(const graph::Graph& gr, int node) {
  const graph::Node& n = gr[node];
  if (!n.attrs.side_output) return 0;
  const Window g = Window::of(n.shape, n.attrs);
  return pool_grad_sums(g, tiled_pool_grad(g, n.attrs.split_ties)).workspace_bytes();
}

void max_pool_grad(const KernelArgs& a) {
  const Window g = Window::of(a.node.shape, a.node.attrs);
  const bool split = a.node.attrs.split_ties;
  const float* dy = a.input<float>(0);
  const float* x = a.input<float>(1);
  const float* y = a.input<float>(2);
  float* dx = a.output<float>();
  const bool relu = a.node.attrs.epilogue == Op::ReluGrad;
  float* db = static_cast<float*>(a.side_out);  // the fused bias gradient (graph/fuse.h), or null
  auto* partial = static_cast<double*>(a.workspace);
  if (tiled_pool_grad(g, split)) {
    if (db)
      return relu ? max_pool_grad_tiled<true, true>(g, dy, x, y, dx, db, partial)
                  : max_pool_grad_tiled<false, true>(g, dy, x, y, dx, db, partial);
    return relu ? max_pool_grad_tiled<true, false>(g, dy, x, y, dx)
                : max_pool_grad_tiled<false, false>(g, dy, x, y, dx);
  }
  std::memset(dx, 0, sizeof(float) * static_cast<size_t>(a.node.shape.numel()));
  constexpr int64_t kBlock = 256;  // channels handled per pass, with per-channel state on the stack
  for_each_window(g, [&](int64_t n, int64_t oh, int64_t ow, int64_t h0, int64_t h1, int64_t w0, int64_t w1) {
    const int64_t out = ((n * g.oh + oh) * g.ow + ow) * g.c;
    for (int64_t c0 = 0; c0 < g.c; c0 += kBlock) {
      const int64_t cn = std::min(kBlock, g.c - c0);
      float share[kBlock];
      bool done[kBlock];
      for (int64_t c = 0; c < cn; ++c) done[c] = false, share[c] = dy[out + c0 + c];
      if (split) {  // count the ties first
        int ties[kBlock] = {};
        for (int64_t ih = h0; ih < h1; ++ih)
          for (int64_t iw = w0; iw < w1; ++iw) {
            const float* xp = x + ((n * g.h + ih) * g.w + iw) * g.c + c0;
            for (int64_t c = 0; c < cn; ++c) ties[c] += xp[c] == y[out + c0 + c];
          }
        for (int64_t c = 0; c < cn; ++c) share[c] /= static_cast<float>(std::max(ties[c], 1));
      }
      for (int64_t ih = h0; ih < h1; ++ih)
        for (int64_t iw = w0; iw < w1; ++iw) {
          const int64_t at = ((n * g.h + ih) * g.w + iw) * g.c + c0;
          for (int64_t c = 0; c < cn; ++c)
            if (!done[c] && x[at + c] == y[out + c0 + c]) {
              dx[at + c] += share[c];
              done[c] = !split;
            }
        }
    }
  });
  if (relu)  // the fused ReluGrad: what landed on a non-positive input is zeroed (after overlapping windows summed)
    parallel_for(a.node.shape.numel(), [dx, x](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) dx[i] = x[i] > 0.0f ? dx[i] : 0.0f;
    });
  if (db) column_sums(dx, g.n * g.h * g.w, g.c, partial, db);  // overlapping windows: a pass of its own
}

// Average over the window's pixels inside the image (padding excluded, as TensorFlow).
void avg_pool(const KernelArgs& a) {
  const Window g = Window::of(a.in_shape(0), a.node.attrs);
  const float* x = a.input<float>(0);
  float* y = a.output<float>();
  for_each_window(g, [&](int64_t n, int64_t oh, int64_t ow, int64_t h0, int64_t h1, int64_t w0, int64_t w1) {
    float* out = y + ((n * g.oh + oh) * g.ow + ow) * g.c;
    for (int64_t c = 0; c < g.c; ++c) out[c] = 0.0f;
    for (int64_t ih = h0; ih < h1; ++ih)
      for (int64_t iw = w0; iw < w1; ++iw) {
        const float* in = x + ((n * g.h + ih) * g.w + iw) * g.c;
        for (int64_t c = 0; c < g.c; ++c) out[c] += in[c];
      }
    const float inv = 1.0f / static_cast<float>(std::max<int64_t>((h1 - h0) * (w1 - w0), 1));
    for (int64_t c = 0; c < g.c; ++c) out[c] *= inv;
  });
}

void avg_pool_grad(const KernelArgs& a) {
  const Window g = Window::of(a.node.shape, a.node.attrs);
  const float* dy = a.input<float>(0);
  float* dx = a.output<float>();
  std::memset(dx, 0, sizeof(float) * static_cast<size_t>(a.node.shape.numel()));
  for_each_window(g, [&](int64_t n, int64_t oh, int64_t ow, int64_t h0, int64_t h1, int64_t w0, int64_t w1) {
    const float* d = dy + ((n * g.oh + oh) * g.ow + ow) * g.c;
    const float inv = 1.0f / static_cast<float>(std::max<int64_t>((h1 - h0) * (w1 - w0), 1));
    for (int64_t ih = h0; ih < h1; ++ih)
      for (int64_t iw = w0; iw < w1; ++iw) {
        float* out = dx + ((n * g.h + ih) * g.w + iw) * g.c;
        for (int64_t c = 0; c < g.c; ++c) out[c] += d[c] * inv;
      }
  });
}

// Copies the overlap of a (N, H, W, C) image block into another, offset by (dh, dw); the rest of dst is zero.
void copy_shifted(const Shape& src_s, const float* src, const Shape& dst_s, float* dst, int64_t dh, int64_t dw) {
  std::memset(dst, 0, sizeof(float) * static_cast<size_t>(dst_s.numel()));
  const int64_t c = src_s[3];
  for (int64_t n = 0; n < src_s[0]; ++n)
    for (int64_t h = 0; h < src_s[1]; ++h) {
      const int64_t th = h + dh;
      if (th < 0 || th >= dst_s[1]) continue;
      for (int64_t w = 0; w < src_s[2]; ++w) {
        const int64_t tw = w + dw;
        if (tw < 0 || tw >= dst_s[2]) continue;
        std::memcpy(dst + ((n * dst_s[1] + th) * dst_s[2] + tw) * c, src + ((n * src_s[1] + h) * src_s[2] + w) * c,
                    sizeof(float) * static_cast<size_t>(c));
      }
    }
}

void pad2d(const KernelArgs& a) {
  copy_shifted(a.in_shape(0), a.input<float>(0), a.node.shape, a.output<float>(), a.node.attrs.pad[0],
               a.node.attrs.pad[2]);
}
void crop2d(const KernelArgs& a) {
  copy_shifted(a.in_shape(0), a.input<float>(0), a.node.shape, a.output<float>(), -a.node.attrs.pad[0],
               -a.node.attrs.pad[2]);
}

// y(N, H*sh, W*sw, C): nearest neighbour.
void upsample(const KernelArgs& a) {
  const Shape& x = a.in_shape(0);
  const Shape& y = a.node.shape;
  const int64_t sh = a.node.attrs.kernel[0], sw = a.node.attrs.kernel[1], c = x[3];
  const float* in = a.input<float>(0);
  float* out = a.output<float>();
  for (int64_t n = 0; n < y[0]; ++n)
    for (int64_t h = 0; h < y[1]; ++h)
      for (int64_t w = 0; w < y[2]; ++w)
        std::memcpy(out + ((n * y[1] + h) * y[2] + w) * c, in + ((n * x[1] + h / sh) * x[2] + w / sw) * c,
                    sizeof(float) * static_cast<size_t>(c));
}

void upsample_grad(const KernelArgs& a) {
  const Shape& dy_s = a.in_shape(0);
  const Shape& x = a.node.shape;
  const int64_t sh = a.node.attrs.kernel[0], sw = a.node.attrs.kernel[1], c = x[3];
  const float* dy = a.input<float>(0);
  float* dx = a.output<float>();
  std::memset(dx, 0, sizeof(float) * static_cast<size_t>(x.numel()));
  for (int64_t n = 0; n < dy_s[0]; ++n)
    for (int64_t h = 0; h < dy_s[1]; ++h)
      for (int64_t w = 0; w < dy_s[2]; ++w) {
        const float* src = dy + ((n * dy_s[1] + h) * dy_s[2] + w) * c;
        float* dst = dx + ((n * x[1] + h / sh) * x[2] + w / sw) * c;
        for (int64_t k = 0; k < c; ++k) dst[k] += src[k];
      }
}

// Resize and its gradient (backends/math/resize.h): one output (input) pixel's channels per step, pixels in parallel.
void resize(const KernelArgs& a) {
  const math::ResizeLayout l = backends::resize_layout(a.in_shape(0), a.node.shape, a.node.attrs.bilinear);
  const float* x = a.input<float>(0);
  float* y = a.output<float>();
  parallel_for(l.n * l.out_h * l.out_w, [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) {
      const int64_t ow = p % l.out_w, oh = p / l.out_w % l.out_h, n = p / (l.out_w * l.out_h);
      for (int64_t c = 0; c < l.c; ++c) y[p * l.c + c] = math::resize_at(x, l, n, oh, ow, c);
    }
  });
}
void resize_grad(const KernelArgs& a) {
  const math::ResizeLayout l = backends::resize_layout(a.node.shape, a.in_shape(0), a.node.attrs.bilinear);
  const float* dy = a.input<float>(0);
  float* dx = a.output<float>();
  parallel_for(l.n * l.in_h * l.in_w, [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) {
      const int64_t iw = p % l.in_w, ih = p / l.in_w % l.in_h, n = p / (l.in_w * l.in_h);
      for (int64_t c = 0; c < l.c; ++c) dx[p * l.c + c] = math::resize_grad_at(dy, l, n, ih, iw, c);
    }
  });
}

}  // namespace

void register_pooling_kernels() {
  using graph::register_kernel;
  constexpr auto cpu = DeviceKind::cpu;
  constexpr auto f32 = DType::f32;
  register_kernel(cpu, Op::MaxPool2D, f32, max_pool);
  register_kernel(cpu, Op::MaxPool2DGrad, f32, max_pool_grad);
  graph::register_workspace(cpu, Op::MaxPool2DGrad, max_pool_grad_workspace);
  register_kernel(cpu, Op::AvgPool2D, f32, avg_pool);
  register_kernel(cpu, Op::AvgPool2DGrad, f32, avg_pool_grad);
  register_kernel(cpu, Op::Pad2D, f32, pad2d);
  register_kernel(cpu, Op::Crop2D, f32, crop2d);
  register_kernel(cpu, Op::Upsample2D, f32, upsample);
  register_kernel(cpu, Op::Upsample2DGrad, f32, upsample_grad);
  register_kernel(cpu, Op::Resize, f32, resize);
  register_kernel(cpu, Op::ResizeGrad, f32, resize_grad);
}

}  // namespace tk::cpu
