// Grouped convolutions (attrs.groups > 1, DepthwiseConv2D's groups = C) computed directly in NHWC / (KH, KW, C/G, F):
// the im2col path's kernels (conv.cpp) hand them here, as a GEMM per group would need a strided im2col. oneDNN's
// grouped convolution (conv_onednn.cpp) is the fast path; these are the path without oneDNN (TK_CONV=im2col, a build
// without it) and need no workspace.
#pragma once
#include "graph/kernel.h"

namespace tk::cpu {
void grouped_conv2d(const graph::KernelArgs& a);              // (x, w) -> y
void grouped_conv2d_grad_input(const graph::KernelArgs& a);   // (dy, w) -> dx
void grouped_conv2d_grad_filter(const graph::KernelArgs& a);  // (x, dy) -> dw
// The input and filter gradients of a depthwise convolution (groups = C), vectorized along the channels.
// conv_onednn.cpp hands it these too: in MobileNetV2's step (bench/zoo_step.sh, batch 64, one thread) oneDNN's
// grouped backward-weights took ~200 ms of ~620, this loop ~14 ms.
void depthwise_conv2d_grad_input(const graph::KernelArgs& a);   // (dy, w) -> dx
void depthwise_conv2d_grad_filter(const graph::KernelArgs& a);  // (x, dy) -> dw
}  // namespace tk::cpu
