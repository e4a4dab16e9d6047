// The filter transposes around cuDNN (cudnn_conv.cpp): trainkit keeps a convolution's kernel as (KH, KW, C, F),
// cuDNN takes filters as KRSC (F, KH, KW, C) or KCRS only. A plain tiled transpose through shared memory.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backends/cuda/check.h"

namespace tk::cuda {
namespace {

constexpr int kTile = 32, kRowsPerPass = 8;

// y(cols, rows) = x(rows, cols)ᵀ; block (kTile, kRowsPerPass) per kTile x kTile tile, grid-strided over tiles.
__global__ void transpose_kernel(const float* x, float* y, int64_t rows, int64_t cols, int64_t tiles_c, int64_t tiles) {
  __shared__ float tile[kTile][kTile + 1];  // +1: no bank conflicts on the transposed read
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

}  // namespace

void launch_transpose(const float* x, float* y, int64_t rows, int64_t cols, int sm_count, void* stream) {
  if (rows <= 0 || cols <= 0) return;
  const int64_t tiles_c = (cols + kTile - 1) / kTile, tiles = (rows + kTile - 1) / kTile * tiles_c;
  const int64_t blocks = std::min<int64_t>(tiles, int64_t{std::max(sm_count, 1)} * 8);
  transpose_kernel<<<static_cast<unsigned>(blocks), dim3(kTile, kRowsPerPass), 0, static_cast<cudaStream_t>(stream)>>>(
      x, y, rows, cols, tiles_c, tiles);
  check(cudaGetLastError(), "transpose_kernel launch", "cudnn_layout.cu");
}

}  // namespace tk::cuda
