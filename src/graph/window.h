// Geometry of sliding-window ops (Conv2D, pooling) in NHWC, shared by shape rules, workspace sizing and
// kernels so that they can never disagree.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "graph/op.h"

namespace tk::graph {

struct Window {
  int64_t n, h, w, c;  // input (N, H, W, C)
  int64_t kh, kw, sh, sw, dh, dw;
  int64_t pt, pb, pl, pr;
  int64_t oh, ow;  // output spatial size

  static Window of(const Shape& x, const Attrs& a) {
    Window g{x[0],          x[1],          x[2],     x[3],     a.kernel[0], a.kernel[1], a.stride[0], a.stride[1],
             a.dilation[0], a.dilation[1], a.pad[0], a.pad[1], a.pad[2],    a.pad[3],    0,           0};
    const int64_t ekh = (g.kh - 1) * g.dh + 1, ekw = (g.kw - 1) * g.dw + 1;  // dilated extent
    g.oh = (g.h + g.pt + g.pb - ekh) / g.sh + 1;
    g.ow = (g.w + g.pl + g.pr - ekw) / g.sw + 1;
    if (g.h + g.pt + g.pb < ekh || g.w + g.pl + g.pr < ekw) g.oh = g.ow = 0;
    return g;
  }
  int64_t patch() const { return kh * kw * c; }  // im2col row length, K of the GEMM
  int64_t pixels() const { return oh * ow; }     // im2col rows per image
};

// Keras/TensorFlow "same" padding: total = max((out - 1) * stride + extent - in, 0), the odd pixel
// going to the bottom/right. Returns {before, after}.
inline std::pair<int64_t, int64_t> same_padding(int64_t in, int64_t kernel, int64_t stride, int64_t dilation) {
  const int64_t out = (in + stride - 1) / stride, extent = (kernel - 1) * dilation + 1;
  const int64_t total = std::max<int64_t>((out - 1) * stride + extent - in, 0);
  return {total / 2, total - total / 2};
}

}  // namespace tk::graph
