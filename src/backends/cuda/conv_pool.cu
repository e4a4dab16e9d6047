// Convolution helpers and pooling on CUDA (NHWC), one thread per output element, each reading what it needs (no
// atomics, so every run adds in the same order): im2col / col2im around cuBLASLt GEMMs (conv.cpp), and max/average
// pooling with the CPU's rules (backends/cpu/pooling.cpp), whose order of additions the gradients follow.
#include <cuda_runtime.h>

#include "backends/cuda/check.h"
#include "backends/cuda/launch_geometry.h"
#include "backends/cuda/launchers.h"
#include "backends/math/activations.h"

namespace tk::cuda {
namespace {

#define TK_GRID_LOOP(i, n)                                                               \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

__global__ void im2col(const float* __restrict__ x, WindowGeo g, int64_t n0, int64_t count, float* __restrict__ col) {
  const int64_t patch = g.kh * g.kw * g.c, rows = count * g.oh * g.ow;
  TK_GRID_LOOP(i, rows * patch) {
    const int64_t row = i / patch, k = i % patch;
    const int64_t img = row / (g.oh * g.ow), p = row % (g.oh * g.ow), oh = p / g.ow, ow = p % g.ow;
    const int64_t c = k % g.c, kw = (k / g.c) % g.kw, kh = k / (g.c * g.kw);
    const int64_t ih = oh * g.sh - g.pt + kh * g.dh, iw = ow * g.sw - g.pl + kw * g.dw;
    col[i] = ih < 0 || ih >= g.h || iw < 0 || iw >= g.w ? 0.0f : x[(((n0 + img) * g.h + ih) * g.w + iw) * g.c + c];
  }
}

// The output positions whose window (extent k, stride s, padding before `pad`) reads input row i: [lo, hi).
__device__ void covering(int64_t i, int64_t pad, int64_t k, int64_t s, int64_t out, int64_t& lo, int64_t& hi) {
  const int64_t t = i + pad;  // o * s <= t < o * s + k
  lo = t - k + 1 <= 0 ? 0 : (t - k + 1 + s - 1) / s;
  hi = t / s + 1 < out ? t / s + 1 : out;
}

// The CPU's col2im adds, per image, output pixels (oh, ow) in row-major order and within each its (kh, kw) in order:
// a pixel's sum visits its contributions in that order here too (only the windows that cover it).
__global__ void col2im(const float* __restrict__ dcol, WindowGeo g, int64_t n0, int64_t count, float* __restrict__ dx) {
  const int64_t patch = g.kh * g.kw * g.c;
  TK_GRID_LOOP(i, count * g.h * g.w * g.c) {
    const int64_t c = i % g.c, iw = (i / g.c) % g.w, ih = (i / (g.c * g.w)) % g.h, img = i / (g.c * g.w * g.h);
    int64_t oh0, oh1, ow0, ow1;
    covering(ih, g.pt, (g.kh - 1) * g.dh + 1, g.sh, g.oh, oh0, oh1);
    covering(iw, g.pl, (g.kw - 1) * g.dw + 1, g.sw, g.ow, ow0, ow1);
    float s = 0.0f;
    for (int64_t oh = oh0; oh < oh1; ++oh) {
      const int64_t dh = ih + g.pt - oh * g.sh;  // = kh * dilation
      if (dh < 0 || dh % g.dh != 0 || dh / g.dh >= g.kh) continue;
      const int64_t kh = dh / g.dh;
      for (int64_t ow = ow0; ow < ow1; ++ow) {
        const int64_t dw = iw + g.pl - ow * g.sw;
        if (dw < 0 || dw % g.dw != 0 || dw / g.dw >= g.kw) continue;
        const int64_t kw = dw / g.dw;
        s += dcol[((img * g.oh + oh) * g.ow + ow) * patch + (kh * g.kw + kw) * g.c + c];
      }
    }
    dx[((n0 + img) * g.h * g.w) * g.c + i % (g.h * g.w * g.c)] = s;
  }
}

struct Clip {
  int64_t h0, h1, w0, w1;
};
__device__ Clip window_of(const WindowGeo& g, int64_t oh, int64_t ow) {
  const int64_t h0 = oh * g.sh - g.pt, w0 = ow * g.sw - g.pl;
  return {h0 < 0 ? 0 : h0, h0 + g.kh < g.h ? h0 + g.kh : g.h, w0 < 0 ? 0 : w0, w0 + g.kw < g.w ? w0 + g.kw : g.w};
}

// Output element i of a pooling (n, oh, ow, c) and its window; input element i (n, ih, iw, c) and the output windows
// that cover it, [oh0, oh1) x [ow0, ow1).
struct OutPixel {
  int64_t n, oh, ow, c;
  Clip w;
};
__device__ OutPixel out_pixel(const WindowGeo& g, int64_t i) {
  const int64_t c = i % g.c, ow = (i / g.c) % g.ow, oh = (i / (g.c * g.ow)) % g.oh, n = i / (g.c * g.ow * g.oh);
  return {n, oh, ow, c, window_of(g, oh, ow)};
}
struct InPixel {
  int64_t n, ih, iw, c, oh0, oh1, ow0, ow1;
};
__device__ InPixel in_pixel(const WindowGeo& g, int64_t i) {
  InPixel p;
  p.c = i % g.c, p.iw = (i / g.c) % g.w, p.ih = (i / (g.c * g.w)) % g.h, p.n = i / (g.c * g.w * g.h);
  covering(p.ih, g.pt, g.kh, g.sh, g.oh, p.oh0, p.oh1);
  covering(p.iw, g.pl, g.kw, g.sw, g.ow, p.ow0, p.ow1);
  return p;
}
__device__ float inverse_count(const Clip& w) {
  const int64_t count = (w.h1 - w.h0) * (w.w1 - w.w0);
  return 1.0f / static_cast<float>(count > 1 ? count : 1);
}

__global__ void max_pool(const float* __restrict__ x, WindowGeo g, float* __restrict__ y) {
  TK_GRID_LOOP(i, g.n * g.oh * g.ow * g.c) {
    const OutPixel o = out_pixel(g, i);
    float m = -__int_as_float(0x7f800000);  // -inf
    for (int64_t ih = o.w.h0; ih < o.w.h1; ++ih)
      for (int64_t iw = o.w.w0; iw < o.w.w1; ++iw) {
        const float v = x[((o.n * g.h + ih) * g.w + iw) * g.c + o.c];
        m = math::pool_max(m, v);  // a NaN in the window gives NaN (the cpu kernel's rule)
      }
    y[i] = m;
  }
}

__global__ void max_pool_grad(const float* __restrict__ dy, const float* __restrict__ x, const float* __restrict__ y,
                              WindowGeo g, bool split, bool relu, float* __restrict__ dx) {
  TK_GRID_LOOP(i, g.n * g.h * g.w * g.c) {
    const InPixel p = in_pixel(g, i);
    const int64_t n = p.n, ih = p.ih, iw = p.iw, c = p.c;
    const float xv = x[i];
    float s = 0.0f;
    for (int64_t oh = p.oh0; oh < p.oh1; ++oh)
      for (int64_t ow = p.ow0; ow < p.ow1; ++ow) {
        const int64_t out = ((n * g.oh + oh) * g.ow + ow) * g.c + c;
        const float m = y[out];
        if (!(xv == m)) continue;
        const Clip w = window_of(g, oh, ow);
        if (split) {  // shared by every tied maximum
          int ties = 0;
          for (int64_t h = w.h0; h < w.h1; ++h)
            for (int64_t v = w.w0; v < w.w1; ++v) ties += x[((n * g.h + h) * g.w + v) * g.c + c] == m;
          s += dy[out] / static_cast<float>(ties > 1 ? ties : 1);
        } else {  // only the first maximum in row-major order
          bool first = true;
          for (int64_t h = w.h0; h <= ih && first; ++h)
            for (int64_t v = w.w0; v < w.w1; ++v) {
              if (h == ih && v == iw) break;
              if (x[((n * g.h + h) * g.w + v) * g.c + c] == m) {
                first = false;
                break;
              }
            }
          if (first) s += dy[out];
        }
      }
    dx[i] = relu && !(xv > 0.0f) ? 0.0f : s;
  }
}

__global__ void avg_pool(const float* __restrict__ x, WindowGeo g, float* __restrict__ y) {
  TK_GRID_LOOP(i, g.n * g.oh * g.ow * g.c) {
    const OutPixel o = out_pixel(g, i);
    float s = 0.0f;
    for (int64_t ih = o.w.h0; ih < o.w.h1; ++ih)
      for (int64_t iw = o.w.w0; iw < o.w.w1; ++iw) s += x[((o.n * g.h + ih) * g.w + iw) * g.c + o.c];
    y[i] = s * inverse_count(o.w);
  }
}

__global__ void avg_pool_grad(const float* __restrict__ dy, WindowGeo g, float* __restrict__ dx) {
  TK_GRID_LOOP(i, g.n * g.h * g.w * g.c) {
    const InPixel p = in_pixel(g, i);
    float s = 0.0f;
    for (int64_t oh = p.oh0; oh < p.oh1; ++oh)
      for (int64_t ow = p.ow0; ow < p.ow1; ++ow)
        s += dy[((p.n * g.oh + oh) * g.ow + ow) * g.c + p.c] * inverse_count(window_of(g, oh, ow));
    dx[i] = s;
  }
}

template <typename Launch>
void launch(int64_t n, int sm_count, const char* what, Launch k) {
  const Geometry geo = elementwise_geometry(n, sm_count);
  if (geo.blocks) k(geo);
  check(cudaGetLastError(), what, "conv_pool.cu");
}

}  // namespace

void launch_im2col(const float* x, const WindowGeo& g, int64_t n0, int64_t count, float* col, int sm_count,
                   Stream stream) {
  launch(count * g.oh * g.ow * g.kh * g.kw * g.c, sm_count, "im2col kernel launch", [&](const Geometry& geo) {
    im2col<<<geo.blocks, geo.threads, 0, static_cast<cudaStream_t>(stream)>>>(x, g, n0, count, col);
  });
}
void launch_col2im(const float* dcol, const WindowGeo& g, int64_t n0, int64_t count, float* dx, int sm_count,
                   Stream stream) {
  launch(count * g.h * g.w * g.c, sm_count, "col2im kernel launch", [&](const Geometry& geo) {
    col2im<<<geo.blocks, geo.threads, 0, static_cast<cudaStream_t>(stream)>>>(dcol, g, n0, count, dx);
  });
}
void launch_max_pool(const float* x, const WindowGeo& g, float* y, int sm_count, Stream stream) {
  launch(g.n * g.oh * g.ow * g.c, sm_count, "max pool kernel launch", [&](const Geometry& geo) {
    max_pool<<<geo.blocks, geo.threads, 0, static_cast<cudaStream_t>(stream)>>>(x, g, y);
  });
}
void launch_max_pool_grad(const float* dy, const float* x, const float* y, const WindowGeo& g, bool split_ties,
                          bool relu, float* dx, int sm_count, Stream stream) {
  launch(g.n * g.h * g.w * g.c, sm_count, "max pool gradient kernel launch", [&](const Geometry& geo) {
    max_pool_grad<<<geo.blocks, geo.threads, 0, static_cast<cudaStream_t>(stream)>>>(dy, x, y, g, split_ties, relu, dx);
  });
}
void launch_avg_pool(const float* x, const WindowGeo& g, float* y, int sm_count, Stream stream) {
  launch(g.n * g.oh * g.ow * g.c, sm_count, "average pool kernel launch", [&](const Geometry& geo) {
    avg_pool<<<geo.blocks, geo.threads, 0, static_cast<cudaStream_t>(stream)>>>(x, g, y);
  });
}
void launch_avg_pool_grad(const float* dy, const WindowGeo& g, float* dx, int sm_count, Stream stream) {
  launch(g.n * g.h * g.w * g.c, sm_count, "average pool gradient kernel launch", [&](const Geometry& geo) {
    avg_pool_grad<<<geo.blocks, geo.threads, 0, static_cast<cudaStream_t>(stream)>>>(dy, g, dx);
  });
}

}  // namespace tk::cuda
