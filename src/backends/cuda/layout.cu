// Ops that only move values, on CUDA: Concat and Slice over the last axis, Reverse along any axis (any dtype), Pad2D /
// Crop2D (an image block shifted into a zeroed one) and nearest-neighbour Upsample2D with its gradient, in NHWC as the
// CPU kernels (backends/cpu/elementwise.cpp, pooling.cpp). One thread per output element; the upsampling gradient adds
// each pixel's sources in the CPU's order (rows, then columns), so it gives the CPU's bits.
#include <cuda_runtime.h>

#include "backends/cuda/check.h"
#include "backends/cuda/dtype_dispatch.h"
#include "backends/cuda/launch_geometry.h"
#include "backends/cuda/launchers.h"
#include "backends/math/affine.h"
#include "backends/math/resize.h"

namespace tk::cuda {
namespace {

__device__ int64_t first_index() { return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ int64_t grid_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

// y(rows, width) column `col` .. col + c from x(rows, c)
__global__ void place_columns(const float* __restrict__ x, float* __restrict__ y, int64_t rows, int64_t c,
                              int64_t width, int64_t col) {
  for (int64_t i = first_index(); i < rows * c; i += grid_stride()) y[(i / c) * width + col + i % c] = x[i];
}
// y(rows, size) = x(rows, width)[:, begin:begin + size]
__global__ void take_columns(const float* __restrict__ x, float* __restrict__ y, int64_t rows, int64_t size,
                             int64_t width, int64_t begin) {
  for (int64_t i = first_index(); i < rows * size; i += grid_stride()) y[i] = x[(i / size) * width + begin + i % size];
}
// dst(N, DH, DW, C) = src shifted by (dh, dw), zero where src has no pixel
__global__ void shifted(const float* __restrict__ src, Image s, float* __restrict__ dst, Image d, int64_t dh,
                        int64_t dw) {
  const int64_t total = d.n * d.h * d.w * d.c;
  for (int64_t i = first_index(); i < total; i += grid_stride()) {
    const int64_t c = i % d.c, w = (i / d.c) % d.w, h = (i / (d.c * d.w)) % d.h, n = i / (d.c * d.w * d.h);
    const int64_t sh = h - dh, sw = w - dw;
    dst[i] = sh >= 0 && sh < s.h && sw >= 0 && sw < s.w ? src[((n * s.h + sh) * s.w + sw) * s.c + c] : 0.0f;
  }
}
// y(N, H * fh, W * fw, C) = x at (h / fh, w / fw)
__global__ void upsample(const float* __restrict__ x, Image xs, float* __restrict__ y, Image ys, int64_t fh,
                         int64_t fw) {
  const int64_t total = ys.n * ys.h * ys.w * ys.c;
  for (int64_t i = first_index(); i < total; i += grid_stride()) {
    const int64_t c = i % ys.c, w = (i / ys.c) % ys.w, h = (i / (ys.c * ys.w)) % ys.h, n = i / (ys.c * ys.w * ys.h);
    y[i] = x[((n * xs.h + h / fh) * xs.w + w / fw) * xs.c + c];
  }
}
// dx(N, H, W, C) = sum of dy over the pixels that read it (rows, then columns, as the CPU adds them)
__global__ void upsample_grad(const float* __restrict__ dy, Image ys, float* __restrict__ dx, Image xs, int64_t fh,
                              int64_t fw) {
  const int64_t total = xs.n * xs.h * xs.w * xs.c;
  for (int64_t i = first_index(); i < total; i += grid_stride()) {
    const int64_t c = i % xs.c, w = (i / xs.c) % xs.w, h = (i / (xs.c * xs.w)) % xs.h, n = i / (xs.c * xs.w * xs.h);
    float s = 0.0f;
    for (int64_t a = h * fh; a < (h + 1) * fh && a < ys.h; ++a)
      for (int64_t b = w * fw; b < (w + 1) * fw && b < ys.w; ++b) s += dy[((n * ys.h + a) * ys.w + b) * ys.c + c];
    dx[i] = s;
  }
}

template <typename T>
__global__ void reverse_axis(const T* __restrict__ x, T* __restrict__ y, int64_t outer, int64_t len, int64_t inner) {
  for (int64_t i = first_index(); i < outer * len * inner; i += grid_stride()) {
    const int64_t k = i % inner, j = (i / inner) % len, r = i / (inner * len);
    y[i] = x[(r * len + len - 1 - j) * inner + k];
  }
}

// Resize: one thread per output element; ResizeGrad: one per input element, gathering (backends/math/resize.h).
// AffineTransform: one thread per output element; its gradient: one thread per (image, channel), scattering in the
// CPU kernel's order (backends/math/affine.h), so both backends sum alike and nothing races.
__global__ void affine(const float* __restrict__ x, const float* __restrict__ t, float* __restrict__ y,
                       math::AffineLayout l) {
  const int64_t total = l.n * l.h * l.w * l.c;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int64_t c = i % l.c, ox = i / l.c % l.w, oy = i / (l.c * l.w) % l.h, n = i / (l.c * l.w * l.h);
    y[i] = math::affine_at(x, t + 8 * n, l, n, oy, ox, c);
  }
}
__global__ void affine_grad(const float* __restrict__ dy, const float* __restrict__ t, float* __restrict__ dx,
                            math::AffineLayout l) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < l.n * l.c; k += stride)
    math::affine_scatter_grad(dy, t + 8 * (k / l.c), l, k / l.c, k % l.c, dx);
}

__global__ void resize(const float* __restrict__ x, float* __restrict__ y, math::ResizeLayout l) {
  const int64_t total = l.n * l.out_h * l.out_w * l.c;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int64_t c = i % l.c, ow = i / l.c % l.out_w, oh = i / (l.c * l.out_w) % l.out_h;
    y[i] = math::resize_at(x, l, i / (l.c * l.out_w * l.out_h), oh, ow, c);
  }
}
__global__ void resize_grad(const float* __restrict__ dy, float* __restrict__ dx, math::ResizeLayout l) {
  const int64_t total = l.n * l.in_h * l.in_w * l.c;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int64_t c = i % l.c, iw = i / l.c % l.in_w, ih = i / (l.c * l.in_w) % l.in_h;
    dx[i] = math::resize_grad_at(dy, l, i / (l.c * l.in_w * l.in_h), ih, iw, c);
  }
}

}  // namespace

void launch_reverse(const void* x, void* y, int elem_bytes, int64_t outer, int64_t len, int64_t inner, int sm_count,
                    Stream stream) {
  const Geometry g = elementwise_geometry(outer * len * inner, sm_count);
  const auto s = static_cast<cudaStream_t>(stream);
  if (g.blocks)
    with_width(elem_bytes, [&](auto t) {
      using T = typename decltype(t)::type;
      reverse_axis<<<g.blocks, g.threads, 0, s>>>(static_cast<const T*>(x), static_cast<T*>(y), outer, len, inner);
    });
  check(cudaGetLastError(), "reverse kernel launch", "launch_reverse");
}

void launch_concat(const float* const* x, const int64_t* widths, int k, float* y, int64_t rows, int sm_count,
                   Stream stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  int64_t width = 0;
  for (int j = 0; j < k; ++j) width += widths[j];
  int64_t col = 0;
  for (int j = 0; j < k; ++j) {
    const Geometry g = elementwise_geometry(rows * widths[j], sm_count);
    if (g.blocks) place_columns<<<g.blocks, g.threads, 0, s>>>(x[j], y, rows, widths[j], width, col);
    col += widths[j];
  }
  check(cudaGetLastError(), "concat kernel launch", "launch_concat");
}

void launch_slice(const float* x, float* y, int64_t rows, int64_t width, int64_t begin, int64_t size, int sm_count,
                  Stream stream) {
  const Geometry g = elementwise_geometry(rows * size, sm_count);
  if (g.blocks)
    take_columns<<<g.blocks, g.threads, 0, static_cast<cudaStream_t>(stream)>>>(x, y, rows, size, width, begin);
  check(cudaGetLastError(), "slice kernel launch", "launch_slice");
}

void launch_shifted(const float* src, Image s, float* dst, Image d, int64_t dh, int64_t dw, int sm_count,
                    Stream stream) {
  const Geometry g = elementwise_geometry(d.n * d.h * d.w * d.c, sm_count);
  if (g.blocks) shifted<<<g.blocks, g.threads, 0, static_cast<cudaStream_t>(stream)>>>(src, s, dst, d, dh, dw);
  check(cudaGetLastError(), "pad/crop kernel launch", "launch_shifted");
}

void launch_upsample(const float* x, Image xs, float* y, Image ys, int64_t fh, int64_t fw, int sm_count,
                     Stream stream) {
  const Geometry g = elementwise_geometry(ys.n * ys.h * ys.w * ys.c, sm_count);
  if (g.blocks) upsample<<<g.blocks, g.threads, 0, static_cast<cudaStream_t>(stream)>>>(x, xs, y, ys, fh, fw);
  check(cudaGetLastError(), "upsample kernel launch", "launch_upsample");
}

void launch_affine(const float* x, const float* t, float* y, const math::AffineLayout& l, int sm_count, Stream stream) {
  const Geometry g = elementwise_geometry(l.n * l.h * l.w * l.c, sm_count);
  if (g.blocks) affine<<<g.blocks, g.threads, 0, static_cast<cudaStream_t>(stream)>>>(x, t, y, l);
  check(cudaGetLastError(), "affine transform kernel launch", "launch_affine");
}

void launch_affine_grad(const float* dy, const float* t, float* dx, const math::AffineLayout& l, int sm_count,
                        Stream stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  check(cudaMemsetAsync(dx, 0, sizeof(float) * static_cast<size_t>(l.n * l.h * l.w * l.c), s), "cudaMemsetAsync",
        "launch_affine_grad");
  const Geometry g = elementwise_geometry(l.n * l.c, sm_count);
  if (g.blocks) affine_grad<<<g.blocks, g.threads, 0, s>>>(dy, t, dx, l);
  check(cudaGetLastError(), "affine transform gradient kernel launch", "launch_affine_grad");
}

void launch_resize(const float* x, float* y, const math::ResizeLayout& l, int sm_count, Stream stream) {
  const Geometry g = elementwise_geometry(l.n * l.out_h * l.out_w * l.c, sm_count);
  if (g.blocks) resize<<<g.blocks, g.threads, 0, static_cast<cudaStream_t>(stream)>>>(x, y, l);
  check(cudaGetLastError(), "resize kernel launch", "launch_resize");
}

void launch_resize_grad(const float* dy, float* dx, const math::ResizeLayout& l, int sm_count, Stream stream) {
  const Geometry g = elementwise_geometry(l.n * l.in_h * l.in_w * l.c, sm_count);
  if (g.blocks) resize_grad<<<g.blocks, g.threads, 0, static_cast<cudaStream_t>(stream)>>>(dy, dx, l);
  check(cudaGetLastError(), "resize gradient kernel launch", "launch_resize_grad");
}

void launch_upsample_grad(const float* dy, Image ys, float* dx, Image xs, int64_t fh, int64_t fw, int sm_count,
                          Stream stream) {
  const Geometry g = elementwise_geometry(xs.n * xs.h * xs.w * xs.c, sm_count);
  if (g.blocks) upsample_grad<<<g.blocks, g.threads, 0, static_cast<cudaStream_t>(stream)>>>(dy, ys, dx, xs, fh, fw);
  check(cudaGetLastError(), "upsample gradient kernel launch", "launch_upsample_grad");
}

}  // namespace tk::cuda
