// The depthwise convolution DepthwiseConv2D and SeparableConv2D share: Keras' kernel (KH, KW, C, M) is, in memory,
// the grouped convolution's (KH, KW, 1, C * M) with groups = C (output channel c * M + m reads channel c), so the
// kernel is reshaped (no transposition) and one Conv2D runs on oneDNN's / cuDNN's grouped convolutions.
#pragma once
#include <string>

#include "graph/op.h"
#include "nn/layers/context.h"

namespace tk::nn {

// x (N, H, W, C), kernel (KH, KW, C, M) -> (N, OH, OW, C * M); a: the window (graph::Attrs of window_attrs).
inline int depthwise_conv(CallContext& ctx, int x, int kernel, graph::Attrs a, const std::string& name) {
  const Shape k = ctx.g[kernel].shape;  // a copy: add() may move the graph's nodes
  graph::Attrs r;
  r.shape = Shape{k[0], k[1], 1, k[2] * k[3]};
  const int grouped = ctx.g.add(graph::Op::Reshape, {kernel}, r, name + "/kernel_as_groups");
  a.groups = k[2];
  return ctx.g.add(graph::Op::Conv2D, {x, grouped}, a, name + "/depthwise");
}

}  // namespace tk::nn
