// Keras' image resize (keras.ops.image.resize, antialias=False: TensorFlow's tf.image.resize with half-pixel centers,
// jax.image.resize alike) on NHWC float32 images, one output or input pixel at a time, for the Resize and ResizeGrad
// kernels on every backend (the CPU loops and the CUDA threads call the same functions).
//
//   float y = tk::math::resize_at(x, l, n, oh, ow, c);      // output pixel (oh, ow), channel c, of image n
//   float dx = tk::math::resize_grad_at(dy, l, n, ih, iw, c); // the gradient at input pixel (ih, iw)
//
// Along each axis an output index j samples the input at f = (j + 0.5) * in / out - 0.5:
//   bilinear  between floor(f) and floor(f) + 1 (each clamped to [0, in - 1]) with weight f - floor(f);
//   nearest   the input index min(floor((j + 0.5) * in / out), in - 1).
// (jax.image.resize normalizes the two weights and drops a neighbour outside the image: the same values.)
// The gradient gathers, for each input pixel, every output pixel that sampled it, times its weight: no atomics, the
// same sums in the same order on every backend.
#pragma once
#include <cmath>
#include <cstdint>

#include "backends/math/host_device.h"

namespace tk::math {

struct ResizeLayout {
  int64_t n = 0, in_h = 0, in_w = 0, out_h = 0, out_w = 0, c = 0;
  bool bilinear = true;  // or nearest
};

// One axis' sample for output index j: out = x[lo] * (1 - frac) + x[hi] * frac (nearest: lo = hi, frac = 0).
struct ResizeTap {
  int64_t lo = 0, hi = 0;
  float frac = 0.0f;
};

TK_HD int64_t clamp_index(int64_t i, int64_t n) { return i < 0 ? 0 : i > n - 1 ? n - 1 : i; }

TK_HD ResizeTap resize_tap(int64_t j, int64_t in, int64_t out, bool bilinear) {
  // (j + 0.5) * in / out in this order (jax's): exact where the true value is an integer, so nearest's floor never
  // lands one pixel short
  const float center = (static_cast<float>(j) + 0.5f) * static_cast<float>(in) / static_cast<float>(out);
  ResizeTap t;
  if (!bilinear) {
    t.lo = t.hi = clamp_index(static_cast<int64_t>(floorf(center)), in);
    return t;
  }
  const float f = center - 0.5f;
  const float fl = floorf(f);
  t.lo = clamp_index(static_cast<int64_t>(fl), in);
  t.hi = clamp_index(static_cast<int64_t>(fl) + 1, in);
  t.frac = f - fl;
  return t;
}

// The weight output index j gives input index i along one axis.
TK_HD float resize_weight(const ResizeTap& t, int64_t i) {
  return (t.lo == i ? 1.0f - t.frac : 0.0f) + (t.hi == i ? t.frac : 0.0f);
}

// The output indices that may sample input index i along one axis: [first, last] (a superset; weights decide).
TK_HD void resize_sources(int64_t i, int64_t in, int64_t out, int64_t& first, int64_t& last) {
  const float inv = static_cast<float>(out) / static_cast<float>(in);
  first = static_cast<int64_t>(floorf((static_cast<float>(i) - 0.5f) * inv - 0.5f)) - 2;
  last = static_cast<int64_t>(ceilf((static_cast<float>(i) + 1.5f) * inv - 0.5f)) + 2;
  if (first < 0 || i == 0) first = 0;
  if (last > out - 1 || i == in - 1) last = out - 1;
}

// y[n, oh, ow, c] from x (n, in_h, in_w, c).
TK_HD float resize_at(const float* x, const ResizeLayout& l, int64_t n, int64_t oh, int64_t ow, int64_t c) {
  const ResizeTap th = resize_tap(oh, l.in_h, l.out_h, l.bilinear);
  const ResizeTap tw = resize_tap(ow, l.in_w, l.out_w, l.bilinear);
  auto at = [&](int64_t h, int64_t w) { return x[((n * l.in_h + h) * l.in_w + w) * l.c + c]; };
  if (!l.bilinear) return at(th.lo, tw.lo);
  const float top_left = at(th.lo, tw.lo), top_right = at(th.lo, tw.hi);
  const float bottom_left = at(th.hi, tw.lo), bottom_right = at(th.hi, tw.hi);
  const float top = top_left + (top_right - top_left) * tw.frac;
  const float bottom = bottom_left + (bottom_right - bottom_left) * tw.frac;
  return top + (bottom - top) * th.frac;
}

// dx[n, ih, iw, c] from dy (n, out_h, out_w, c): the sum over the output pixels that sampled (ih, iw).
TK_HD float resize_grad_at(const float* dy, const ResizeLayout& l, int64_t n, int64_t ih, int64_t iw, int64_t c) {
  int64_t h0, h1, w0, w1;
  resize_sources(ih, l.in_h, l.out_h, h0, h1);
  resize_sources(iw, l.in_w, l.out_w, w0, w1);
  float sum = 0.0f;
  for (int64_t oh = h0; oh <= h1; ++oh) {
    const float wh = resize_weight(resize_tap(oh, l.in_h, l.out_h, l.bilinear), ih);
    if (wh == 0.0f) continue;
    float row = 0.0f;
    for (int64_t ow = w0; ow <= w1; ++ow) {
      const float ww = resize_weight(resize_tap(ow, l.in_w, l.out_w, l.bilinear), iw);
      if (ww != 0.0f) row += ww * dy[((n * l.out_h + oh) * l.out_w + ow) * l.c + c];
    }
    sum += wh * row;
  }
  return sum;
}

}  // namespace tk::math
