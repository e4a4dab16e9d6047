// Keras' keras.ops.image.affine_transform on NHWC float32 images (its jax backend: jax.scipy.ndimage.map_coordinates,
// order 0 or 1), one output pixel at a time, for the AffineTransform kernels on every backend: the CPU loops and the
// CUDA threads call the same functions. It moves RandomTranslation's, RandomRotation's and RandomZoom's pixels.
//
//   float y = tk::math::affine_at(x, t, l, n, oy, ox, c);   // t: image n's 8 transform values
//   tk::math::affine_scatter_grad(dy, t, l, n, c, dx);      // image n, channel c: every output's gradient back
//
// A transform [a0 a1 a2 b0 b1 b2 c0 c1] (TensorFlow's; c0, c1 ignored, as Keras' jax backend does) maps output pixel
// (x, y) to the input point (a0 x + a1 y + a2, b0 x + b1 y + b2). Bilinear weighs the 2 x 2 pixels around it, nearest
// takes the closest (halves rounded away from zero); a neighbour outside the image comes from fill_mode:
//   constant  fill_value (any tap outside: that tap is fill_value)   nearest  the edge pixel
//   wrap      index mod size                                          mirror   d c b | a b c d | c b a
//   reflect   d c b a | a b c d | d c b a
#pragma once
#include <cmath>
#include <cstdint>

#include "backends/math/host_device.h"

namespace tk::math {

enum class FillMode : uint8_t { constant = 0, nearest = 1, wrap = 2, mirror = 3, reflect = 4 };

struct AffineLayout {
  int64_t n = 0, h = 0, w = 0, c = 0;
  bool bilinear = true;
  FillMode mode = FillMode::reflect;
  float fill_value = 0.0f;
};

TK_HD int64_t floor_mod(int64_t a, int64_t b) { return ((a % b) + b) % b; }
TK_HD int64_t mirror_index(int64_t i, int64_t size) {
  const int64_t s = size - 1;  // half the wavelength of the triangular wave
  if (s == 0) return 0;
  const int64_t r = floor_mod(i + s, 2 * s) - s;
  return r < 0 ? -r : r;
}
// The pixel index a (possibly outside) index reads; for constant, the index itself (validity decides).
TK_HD int64_t fix_index(int64_t i, int64_t size, FillMode m) {
  switch (m) {
    case FillMode::constant:
      return i;
    case FillMode::nearest:
      return i < 0 ? 0 : i > size - 1 ? size - 1 : i;
    case FillMode::wrap:
      return floor_mod(i, size);
    case FillMode::mirror:
      return mirror_index(i, size);
    case FillMode::reflect: {
      const int64_t r = mirror_index(2 * i + 1, 2 * size + 1) - 1;  // >= 0: r is odd
      return r >= 0 ? r / 2 : -((-r + 1) / 2);
    }
  }
  return i;
}

// One axis' taps at coordinate f: up to two (index, weight) pairs.
struct AffineTaps {
  int64_t index[2] = {0, 0};
  float weight[2] = {0.0f, 0.0f};
  int count = 0;
};
TK_HD AffineTaps affine_taps(float f, bool bilinear) {
  AffineTaps t;
  if (!bilinear) {
    t.index[0] = static_cast<int64_t>(f < 0.0f ? -floorf(-f + 0.5f) : floorf(f + 0.5f));  // half away from zero
    t.weight[0] = 1.0f;
    t.count = 1;
    return t;
  }
  const float lower = floorf(f);
  t.index[0] = static_cast<int64_t>(lower);
  t.index[1] = t.index[0] + 1;
  t.weight[1] = f - lower;
  t.weight[0] = 1.0f - t.weight[1];
  t.count = 2;
  return t;
}

// The input point output pixel (oy, ox) samples: (row, column).
TK_HD void affine_source(const float* t, int64_t oy, int64_t ox, float& row, float& col) {
  const float x = static_cast<float>(ox), y = static_cast<float>(oy);
  row = t[3] * x + t[4] * y + t[5];
  col = t[0] * x + t[1] * y + t[2];
}

// y[n, oy, ox, c] from x (n, h, w, c) and image n's transform t.
TK_HD float affine_at(const float* x, const float* t, const AffineLayout& l, int64_t n, int64_t oy, int64_t ox,
                      int64_t c) {
  float row, col;
  affine_source(t, oy, ox, row, col);
  const AffineTaps th = affine_taps(row, l.bilinear), tw = affine_taps(col, l.bilinear);
  float sum = 0.0f;
  for (int i = 0; i < th.count; ++i)
    for (int j = 0; j < tw.count; ++j) {
      const int64_t ih = th.index[i], iw = tw.index[j];
      float v;
      if (l.mode == FillMode::constant && (ih < 0 || ih >= l.h || iw < 0 || iw >= l.w))
        v = l.fill_value;
      else
        v = x[((n * l.h + fix_index(ih, l.h, l.mode)) * l.w + fix_index(iw, l.w, l.mode)) * l.c + c];
      sum += th.weight[i] * tw.weight[j] * v;
    }
  return sum;
}

// dx[n, :, :, c] = the sum, over image n's output pixels in order, of each tap's weight times dy there (a tap that
// reads fill_value passes nothing back). dx's slice must start at zero; one caller per (n, c).
TK_HD void affine_scatter_grad(const float* dy, const float* t, const AffineLayout& l, int64_t n, int64_t c,
                               float* dx) {
  for (int64_t oy = 0; oy < l.h; ++oy)
    for (int64_t ox = 0; ox < l.w; ++ox) {
      const float g = dy[((n * l.h + oy) * l.w + ox) * l.c + c];
      float row, col;
      affine_source(t, oy, ox, row, col);
      const AffineTaps th = affine_taps(row, l.bilinear), tw = affine_taps(col, l.bilinear);
      for (int i = 0; i < th.count; ++i)
        for (int j = 0; j < tw.count; ++j) {
          const int64_t ih = th.index[i], iw = tw.index[j];
          if (l.mode == FillMode::constant && (ih < 0 || ih >= l.h || iw < 0 || iw >= l.w)) continue;
          dx[((n * l.h + fix_index(ih, l.h, l.mode)) * l.w + fix_index(iw, l.w, l.mode)) * l.c + c] +=
              th.weight[i] * tw.weight[j] * g;
        }
    }
}

}  // namespace tk::math
