// Conv2D / FusedConv2D and their gradients on cuDNN (cudnn_conv.cpp), called by conv.cpp's kernels before their
// im2col path: each returns false when that path must run instead (cuDNN not loaded or switched off, a convolution
// cuDNN cannot take, no heuristic algorithm within the planned workspace, the algorithm refused on its first call;
// cudnn_mapping.h says which and why).
//
//   if (!tk::cuda::cudnn_convolution(a, tk::cuda::ConvKind::forward, g, filters, planned)) { ...im2col... }
#pragma once
#include <cstddef>
#include <cstdint>

#include "backends/cuda/launchers.h"
#include "graph/kernel.h"
#include "graph/window.h"

namespace tk::cuda {

// forward: y = conv(x = input 0, w = input 1); backward_data: dx = conv_grad_input(dy = input 0, w = input 1);
// backward_filter: dw = conv_grad_filter(x = input 0, dy = input 1). Output: the node's. `planned`: the bytes of
// a.workspace (conv.cpp's workspace rule).
enum class ConvKind { forward, backward_data, backward_filter };
bool cudnn_convolution(const graph::KernelArgs& a, ConvKind kind, const graph::Window& g, int64_t filters,
                       size_t planned);

// How many convolution kernel calls took each path in this process (tests: the path they meant to check ran).
struct ConvPathCounts {
  int64_t cudnn = 0, im2col = 0;
};
ConvPathCounts conv_path_counts();
void count_conv_path(bool cudnn);

// y(cols, rows) = x(rows, cols)ᵀ (cudnn_layout.cu): trainkit's filter (KH·KW·C, F) to cuDNN's KRSC (F, KH·KW·C) and a
// filter gradient back.
void launch_transpose(const float* x, float* y, int64_t rows, int64_t cols, int sm_count, Stream stream);

}  // namespace tk::cuda
