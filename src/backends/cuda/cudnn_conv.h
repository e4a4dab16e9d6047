// Conv2D / FusedConv2D and their gradients on cuDNN (cudnn_conv.cpp), called by conv.cpp's kernels before their
// im2col path: each returns false when that path must run instead (cuDNN not loaded or switched off, a convolution
// cuDNN cannot take, no heuristic algorithm within the planned workspace, the algorithm refused on its first call;
// cudnn_mapping.h says which and why). float32 convolutions, and float16 / bfloat16 ones in their own dtype
// (conv_native16.cpp, which falls back to the widened float32 kernel instead).
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
// backward_filter: dw = conv_grad_filter(x = input 0, dy = input 1). Output: the node's. Every tensor in the output's
// dtype (float32, float16 or bfloat16: cudnn_conv_types). `planned`: the bytes of a.workspace (the op's workspace
// rule). `bias` (forward only, or nullptr): y starts as this (F) vector on every row and cuDNN adds its product to it
// (beta = 1), so bias + convolution is summed in cuDNN's float32 compute and rounded once (the 16-bit FusedConv2D).
enum class ConvKind { forward, backward_data, backward_filter };
bool cudnn_convolution(const graph::KernelArgs& a, ConvKind kind, const graph::Window& g, int64_t filters,
                       size_t planned, const void* bias = nullptr);

// A convolution node's window (for Conv2DGradInput: of the input it is the gradient of) and filters (conv.cpp).
graph::Window conv_window(const graph::Graph& gr, const graph::Node& n);
int64_t conv_filters(const graph::Graph& gr, const graph::Node& n);

// How many convolution kernel calls took each path in this process (tests: the path they meant to check ran).
// cudnn: float32 convolutions on cuDNN (a widened 16-bit one included); cudnn16: float16 / bfloat16 ones on cuDNN in
// their own dtype; im2col: float32 ones on im2col + cuBLASLt.
struct ConvPathCounts {
  int64_t cudnn = 0, im2col = 0, cudnn16 = 0;
};
ConvPathCounts conv_path_counts();
void count_conv_path(bool cudnn);

// float16 / bfloat16 Conv2D, FusedConv2D and their gradients on cuDNN in their own dtypes (conv_native16.cpp),
// registered after the widened kernels (backends/widen.h), which they fall back to; and whether `fn` is that kernel
// (tests: the registration holds).
void register_native16_conv_kernels();
bool conv16_is_native(graph::KernelFn fn);

// Whether float16 / bfloat16 convolutions may run on cuDNN in their own dtype: TK_CUDA_NATIVE16 is not 0 (read once,
// as the GEMMs read it); tests switch it.
bool native16_conv_enabled();
void set_native16_conv_enabled(bool on);

// y(cols, rows) = x(rows, cols)ᵀ (cudnn_layout.cu): trainkit's filter (KH·KW·C, F) to cuDNN's KRSC (F, KH·KW·C) and a
// filter gradient back; element_bytes 4 (float32) or 2 (float16 / bfloat16: the bits are moved, never converted).
void launch_transpose(const void* x, void* y, int64_t rows, int64_t cols, size_t element_bytes, int sm_count,
                      Stream stream);
// y(rows, n) = row(n) on every row, element_bytes 4 or 2 (the 16-bit FusedConv2D's bias before cuDNN adds to it).
void launch_broadcast_rows(const void* row, void* y, int64_t rows, int64_t n, size_t element_bytes, int sm_count,
                           Stream stream);
// y = relu(y) in place on n float16 (dtype 1) or bfloat16 (dtype 2) values: exact (each is kept or zeroed), the
// shared math's relu (-0 becomes +0, NaN stays NaN).
void launch_relu16(void* y, int64_t n, int dtype, int sm_count, Stream stream);

}  // namespace tk::cuda
