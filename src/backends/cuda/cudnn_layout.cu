// The layout kernels around cuDNN (cudnn_conv.cpp): trainkit keeps a convolution's kernel as (KH, KW, C, F), cuDNN
// takes filters as KRSC (F, KH, KW, C) or KCRS only, so a plain tiled transpose through shared memory moves it (in
// float32, or the bits of float16 / bfloat16); and the 16-bit FusedConv2D's bias broadcast and relu.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backends/cuda/check.h"
#include "backends/math/activations.h"
#include "trainkit/core/half.h"

namespace tk::cuda {
namespace {

constexpr int kTile = 32, kRowsPerPass = 8, kThreads = 256;

// y(cols, rows) = x(rows, cols)ᵀ; block (kTile, kRowsPerPass) per kTile x kTile tile, grid-strided over tiles. T:
// float, or uint16_t for the 16-bit dtypes (bits moved as they are).
template <typename T>
__global__ void transpose_kernel(const T* x, T* y, int64_t rows, int64_t cols, int64_t tiles_c, int64_t tiles) {
  __shared__ T tile[kTile][kTile + 1];  // +1: no bank conflicts on the transposed read
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t r0 = (t / tiles_c) * kTile, c0 = (t % tiles_c) * kTile;
    for (int i = threadIdx.y; i < kTile; i += kRowsPerPass) {
      const int64_t r = r0 + i, c = c0 + threadIdx.x;
      if (r < rows && c < cols) tile[i][threadIdx.x] = x[r * cols + c];
    }
    __syncthreads();
    for (int i = threadIdx.y; i < kTile; i += kRowsPerPass) {
      const int64_t c = c0 + i, r = r0 + threadIdx.x;  // y's row c, column r
      if (r < rows && c < cols) y[c * rows + r] = tile[threadIdx.x][i];
    }
    __syncthreads();
  }
}

// y[i] = row[i % n] over rows * n values, grid-strided.
template <typename T>
__global__ void broadcast_rows_kernel(const T* row, T* y, int64_t total, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x)
    y[i] = row[i % n];
}

// y = relu(y) on 16-bit bits: widened exactly, the shared math's relu, back (exact: the value or +0).
template <bool Bf16>
__global__ void relu16_kernel(uint16_t* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float v = Bf16 ? half_detail::bf16_bits_to_f32(y[i]) : half_detail::f16_bits_to_f32(y[i]);
    const float r = math::relu(v, 0.0f);
    y[i] = Bf16 ? half_detail::f32_to_bf16_bits(r) : half_detail::f32_to_f16_bits(r);
  }
}

unsigned blocks_for(int64_t work, int64_t per_block, int sm_count) {
  return static_cast<unsigned>(
      std::clamp<int64_t>((work + per_block - 1) / per_block, 1, int64_t{std::max(sm_count, 1)} * 8));
}

}  // namespace

void launch_transpose(const void* x, void* y, int64_t rows, int64_t cols, size_t element_bytes, int sm_count,
                      void* stream) {
  if (rows <= 0 || cols <= 0) return;
  const int64_t tiles_c = (cols + kTile - 1) / kTile, tiles = (rows + kTile - 1) / kTile * tiles_c;
  const unsigned blocks = blocks_for(tiles, 1, sm_count);
  const auto s = static_cast<cudaStream_t>(stream);
  if (element_bytes == 2)
    transpose_kernel<<<blocks, dim3(kTile, kRowsPerPass), 0, s>>>(
        static_cast<const uint16_t*>(x), static_cast<uint16_t*>(y), rows, cols, tiles_c, tiles);
  else
    transpose_kernel<<<blocks, dim3(kTile, kRowsPerPass), 0, s>>>(static_cast<const float*>(x), static_cast<float*>(y),
                                                                  rows, cols, tiles_c, tiles);
  check(cudaGetLastError(), "transpose_kernel launch", "cudnn_layout.cu");
}

void launch_broadcast_rows(const void* row, void* y, int64_t rows, int64_t n, size_t element_bytes, int sm_count,
                           void* stream) {
  const int64_t total = rows * n;
  if (total <= 0) return;
  const unsigned blocks = blocks_for(total, kThreads, sm_count);
  const auto s = static_cast<cudaStream_t>(stream);
  if (element_bytes == 2)
    broadcast_rows_kernel<<<blocks, kThreads, 0, s>>>(static_cast<const uint16_t*>(row), static_cast<uint16_t*>(y),
                                                      total, n);
  else
    broadcast_rows_kernel<<<blocks, kThreads, 0, s>>>(static_cast<const float*>(row), static_cast<float*>(y), total, n);
  check(cudaGetLastError(), "broadcast_rows_kernel launch", "cudnn_layout.cu");
}

void launch_relu16(void* y, int64_t n, int dtype, int sm_count, void* stream) {
  if (n <= 0) return;
  const unsigned blocks = blocks_for(n, kThreads, sm_count);
  const auto s = static_cast<cudaStream_t>(stream);
  if (dtype == 2)  // tk::DType::bf16
    relu16_kernel<true><<<blocks, kThreads, 0, s>>>(static_cast<uint16_t*>(y), n);
  else
    relu16_kernel<false><<<blocks, kThreads, 0, s>>>(static_cast<uint16_t*>(y), n);
  check(cudaGetLastError(), "relu16_kernel launch", "cudnn_layout.cu");
}

}  // namespace tk::cuda
