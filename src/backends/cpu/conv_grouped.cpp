// Direct grouped convolutions in float32 (conv_grouped.h). Output channel o = g * FG + j reads input channels
// [g * CG, (g + 1) * CG); the kernel w(KH, KW, CG, F) stores that filter at w[((kh * KW + kw) * CG + ci) * F + o].
// Each loop nest writes disjoint outputs per thread, and sums in a fixed order: the bits do not depend on the
// thread count.
#include "backends/cpu/conv_grouped.h"

#include <algorithm>
#include <cstring>

#include "backends/cpu/parallel.h"
#include "graph/window.h"

namespace tk::cpu {
using graph::KernelArgs;
using graph::Window;

namespace {

struct Groups {
  int64_t g, cg, f, fg;  // groups, input channels per group, filters, filters per group
};
Groups groups_of(const Window& w, int64_t groups, int64_t filters) {
  return {groups, w.c / groups, filters, filters / groups};
}

// Calls fn(kh, kw, ih, iw) for every tap of output pixel (oh, ow) that reads inside the input.
template <typename Fn>
void for_taps(const Window& w, int64_t oh, int64_t ow, Fn fn) {
  for (int64_t kh = 0; kh < w.kh; ++kh) {
    const int64_t ih = oh * w.sh - w.pt + kh * w.dh;
    if (ih < 0 || ih >= w.h) continue;
    for (int64_t kw = 0; kw < w.kw; ++kw) {
      const int64_t iw = ow * w.sw - w.pl + kw * w.dw;
      if (iw >= 0 && iw < w.w) fn(kh, kw, ih, iw);
    }
  }
}

}  // namespace

// y(N, OH, OW, F): per output pixel, y_row(F) += x(ci of group g) * w_row(g's FG filters) over taps and ci.
void grouped_conv2d(const KernelArgs& a) {
  const Window w = Window::of(a.in_shape(0), a.node.attrs);
  const Groups gr = groups_of(w, a.node.attrs.groups, a.node.shape[3]);
  const float* x = a.input<float>(0);  // (N, H, W, C)
  const float* k = a.input<float>(1);  // (KH, KW, CG, F)
  float* y = a.output<float>();        // (N, OH, OW, F)
  parallel_for(
      w.n * w.oh,
      [&](int64_t b, int64_t e) {
        for (int64_t row = b; row < e; ++row) {
          const int64_t n = row / w.oh, oh = row % w.oh;
          for (int64_t ow = 0; ow < w.ow; ++ow) {
            float* yp = y + ((n * w.oh + oh) * w.ow + ow) * gr.f;
            std::fill(yp, yp + gr.f, 0.0f);
            for_taps(w, oh, ow, [&](int64_t kh, int64_t kw, int64_t ih, int64_t iw) {
              const float* xp = x + ((n * w.h + ih) * w.w + iw) * w.c;
              const float* kp = k + (kh * w.kw + kw) * gr.cg * gr.f;
              for (int64_t g = 0; g < gr.g; ++g)
                for (int64_t ci = 0; ci < gr.cg; ++ci) {
                  const float xv = xp[g * gr.cg + ci];
                  const float* kr = kp + ci * gr.f + g * gr.fg;
                  float* yg = yp + g * gr.fg;
#pragma omp simd
                  for (int64_t j = 0; j < gr.fg; ++j) yg[j] += xv * kr[j];
                }
            });
          }
        }
      },
      1);
}

// Depthwise (F = C * M): dx(c) of the pixel each tap reads += sum over j of dy(c * M + j) * w(tap, c * M + j), along
// the contiguous channels; the same order of sums as the grouped loop below (one image per thread).
void depthwise_conv2d_grad_input(const KernelArgs& a) {
  const Window w = Window::of(a.node.shape, a.node.attrs);
  const int64_t f = a.in_shape(0)[3], m = f / w.c;  // filters, depth multiplier
  const float* dy = a.input<float>(0);              // (N, OH, OW, F)
  const float* k = a.input<float>(1);               // (KH, KW, 1, F)
  float* dx = a.output<float>();                    // (N, H, W, C)
  parallel_for(
      w.n,
      [&](int64_t b, int64_t e) {
        for (int64_t n = b; n < e; ++n) {
          std::fill(dx + n * w.h * w.w * w.c, dx + (n + 1) * w.h * w.w * w.c, 0.0f);
          for (int64_t oh = 0; oh < w.oh; ++oh)
            for (int64_t ow = 0; ow < w.ow; ++ow) {
              const float* dyp = dy + ((n * w.oh + oh) * w.ow + ow) * f;
              for_taps(w, oh, ow, [&](int64_t kh, int64_t kw, int64_t ih, int64_t iw) {
                float* dxp = dx + ((n * w.h + ih) * w.w + iw) * w.c;
                const float* kp = k + (kh * w.kw + kw) * f;
                if (m == 1) {
#pragma omp simd
                  for (int64_t c = 0; c < w.c; ++c) dxp[c] += dyp[c] * kp[c];
                } else {
                  for (int64_t c = 0; c < w.c; ++c) {
                    float s = 0.0f;
                    for (int64_t j = 0; j < m; ++j) s += dyp[c * m + j] * kp[c * m + j];
                    dxp[c] += s;
                  }
                }
              });
            }
        }
      },
      1);
}

// dx(N, H, W, C): each image's output pixels scatter dy · wᵀ back to the pixels their taps read (one image per
// thread: no two threads write one dx).
void grouped_conv2d_grad_input(const KernelArgs& a) {
  const Window w = Window::of(a.node.shape, a.node.attrs);
  const Groups gr = groups_of(w, a.node.attrs.groups, a.in_shape(0)[3]);
  if (gr.cg == 1) return depthwise_conv2d_grad_input(a);
  const float* dy = a.input<float>(0);  // (N, OH, OW, F)
  const float* k = a.input<float>(1);   // (KH, KW, CG, F)
  float* dx = a.output<float>();        // (N, H, W, C)
  parallel_for(
      w.n,
      [&](int64_t b, int64_t e) {
        for (int64_t n = b; n < e; ++n) {
          std::fill(dx + n * w.h * w.w * w.c, dx + (n + 1) * w.h * w.w * w.c, 0.0f);
          for (int64_t oh = 0; oh < w.oh; ++oh)
            for (int64_t ow = 0; ow < w.ow; ++ow) {
              const float* dyp = dy + ((n * w.oh + oh) * w.ow + ow) * gr.f;
              for_taps(w, oh, ow, [&](int64_t kh, int64_t kw, int64_t ih, int64_t iw) {
                float* dxp = dx + ((n * w.h + ih) * w.w + iw) * w.c;
                const float* kp = k + (kh * w.kw + kw) * gr.cg * gr.f;
                for (int64_t g = 0; g < gr.g; ++g)
                  for (int64_t ci = 0; ci < gr.cg; ++ci) {
                    const float* kr = kp + ci * gr.f + g * gr.fg;
                    const float* dyg = dyp + g * gr.fg;
                    float s = 0.0f;
                    for (int64_t j = 0; j < gr.fg; ++j) s += dyg[j] * kr[j];
                    dxp[g * gr.cg + ci] += s;
                  }
              });
            }
        }
      },
      1);
}

// Depthwise (one input channel per group, F = C * M filters, M the depth multiplier): dw(KH, KW, 1, F) += x(c) *
// dy(c * M + j) per tap, along the channels that x, dy and dw all store contiguously (the grouped loops below run
// one group at a time, a scalar each). The channels are split among threads; each channel sums in a fixed order.
void depthwise_conv2d_grad_filter(const KernelArgs& a) {
  const Window w = Window::of(a.in_shape(0), a.node.attrs);
  const int64_t f = a.node.shape[3], m = f / w.c;  // filters, depth multiplier
  const float* x = a.input<float>(0);              // (N, H, W, C)
  const float* dy = a.input<float>(1);             // (N, OH, OW, F)
  float* dk = a.output<float>();                   // (KH, KW, 1, F)
  parallel_for(
      w.c,
      [&](int64_t cb, int64_t ce) {
        for (int64_t t = 0; t < w.kh * w.kw; ++t) std::fill(dk + t * f + cb * m, dk + t * f + ce * m, 0.0f);
        for (int64_t n = 0; n < w.n; ++n)
          for (int64_t oh = 0; oh < w.oh; ++oh)
            for (int64_t ow = 0; ow < w.ow; ++ow) {
              const float* dyp = dy + ((n * w.oh + oh) * w.ow + ow) * f;
              for_taps(w, oh, ow, [&](int64_t kh, int64_t kw, int64_t ih, int64_t iw) {
                const float* xp = x + ((n * w.h + ih) * w.w + iw) * w.c;
                float* kp = dk + (kh * w.kw + kw) * f;
                if (m == 1) {
#pragma omp simd
                  for (int64_t c = cb; c < ce; ++c) kp[c] += xp[c] * dyp[c];
                } else {
                  for (int64_t c = cb; c < ce; ++c)
                    for (int64_t j = 0; j < m; ++j) kp[c * m + j] += xp[c] * dyp[c * m + j];
                }
              });
            }
      },
      1);
}

// dw(KH, KW, CG, F) = sum over images and output pixels of x(ci of group g) * dy(g's filters); the groups are split
// among threads (each writes only its groups' columns of dw).
void grouped_conv2d_grad_filter(const KernelArgs& a) {
  const Window w = Window::of(a.in_shape(0), a.node.attrs);
  const Groups gr = groups_of(w, a.node.attrs.groups, a.node.shape[3]);
  if (gr.cg == 1) return depthwise_conv2d_grad_filter(a);
  const float* x = a.input<float>(0);   // (N, H, W, C)
  const float* dy = a.input<float>(1);  // (N, OH, OW, F)
  float* dk = a.output<float>();        // (KH, KW, CG, F)
  parallel_for(
      gr.g,
      [&](int64_t b, int64_t e) {
        for (int64_t t = 0; t < w.kh * w.kw * gr.cg; ++t)
          std::fill(dk + t * gr.f + b * gr.fg, dk + t * gr.f + e * gr.fg, 0.0f);
        for (int64_t n = 0; n < w.n; ++n)
          for (int64_t oh = 0; oh < w.oh; ++oh)
            for (int64_t ow = 0; ow < w.ow; ++ow) {
              const float* dyp = dy + ((n * w.oh + oh) * w.ow + ow) * gr.f;
              for_taps(w, oh, ow, [&](int64_t kh, int64_t kw, int64_t ih, int64_t iw) {
                const float* xp = x + ((n * w.h + ih) * w.w + iw) * w.c;
                float* kp = dk + (kh * w.kw + kw) * gr.cg * gr.f;
                for (int64_t g = b; g < e; ++g)
                  for (int64_t ci = 0; ci < gr.cg; ++ci) {
                    const float xv = xp[g * gr.cg + ci];
                    float* kr = kp + ci * gr.f + g * gr.fg;
                    const float* dyg = dyp + g * gr.fg;
#pragma omp simd
                    for (int64_t j = 0; j < gr.fg; ++j) kr[j] += xv * dyg[j];
                  }
              });
            }
      },
      1);
}

}  // namespace tk::cpu
