// The fused LSTM ops' per-step element passes on CUDA (lstm_launchers.h): one thread per (row, unit) element, the
// math of backends/math/lstm.h (which the CPU kernels run too). The GEMMs between them are cuBLASLt's (lstm.cpp).
#include <cuda_runtime.h>

#include "backends/cuda/check.h"
#include "backends/cuda/launch_geometry.h"
#include "backends/cuda/lstm_launchers.h"
#include "backends/math/lstm.h"

namespace tk::cuda {
namespace {

__device__ int64_t first_index() { return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ int64_t grid_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

__global__ void cell_kernel(const float* __restrict__ proj, const float* __restrict__ hu,
                            const float* __restrict__ c_prev, float* __restrict__ gates, float* __restrict__ c,
                            float* __restrict__ h, int64_t n, int64_t u) {
  for (int64_t k = first_index(); k < n * u; k += grid_stride()) {
    const int64_t r = k / u, j = k % u, z = r * 4 * u + j;
    math::lstm_cell(proj[z] + hu[z], proj[z + u] + hu[z + u], proj[z + 2 * u] + hu[z + 2 * u],
                    proj[z + 3 * u] + hu[z + 3 * u], c_prev[k], gates + z, gates + z + u, gates + z + 2 * u,
                    gates + z + 3 * u, c + k, h + k);
  }
}

__global__ void cell_grad_kernel(const float* __restrict__ gates, const float* __restrict__ c,
                                 const float* __restrict__ c_prev, const float* __restrict__ dy_h,
                                 const float* __restrict__ dy_c, const float* __restrict__ dy_g,
                                 const float* __restrict__ dh, float* __restrict__ dc, float* __restrict__ dz,
                                 int64_t n, int64_t u) {
  for (int64_t k = first_index(); k < n * u; k += grid_stride()) {
    const int64_t r = k / u, j = k % u, z = r * 4 * u + j;
    math::lstm_cell_grad(gates[z], gates[z + u], gates[z + 2 * u], gates[z + 3 * u], c[k], c_prev[k], dy_h[k] + dh[k],
                         dc[k] + dy_c[k], dy_g[z], dy_g[z + u], dy_g[z + 2 * u], dy_g[z + 3 * u], dz + z, dz + z + u,
                         dz + z + 2 * u, dz + z + 3 * u, dc + k);
  }
}

__global__ void initial_grad_kernel(const float* __restrict__ dy_h0, const float* __restrict__ dy_c0,
                                    const float* __restrict__ dh, const float* __restrict__ dc, float* __restrict__ out,
                                    int64_t s) {
  for (int64_t k = first_index(); k < 4 * s; k += grid_stride())
    out[k] = k < s ? dy_h0[k] + dh[k] : k < 2 * s ? dy_c0[k - s] + dc[k - s] : 0.0f;
}

template <typename Kernel, typename... Args>
void launch(const char* what, int64_t n, int sms, Stream stream, Kernel kernel, Args... args) {
  const Geometry g = elementwise_geometry(n, sms);
  if (g.blocks) kernel<<<g.blocks, g.threads, 0, static_cast<cudaStream_t>(stream)>>>(args...);
  check(cudaGetLastError(), what, "lstm.cu");
}

}  // namespace

void launch_lstm_cell(const float* proj, const float* hu, const float* c_prev, float* gates, float* c, float* h,
                      int64_t n, int64_t u, int sms, Stream stream) {
  launch("lstm cell kernel launch", n * u, sms, stream, cell_kernel, proj, hu, c_prev, gates, c, h, n, u);
}
void launch_lstm_cell_grad(const float* gates, const float* c, const float* c_prev, const float* dy_h,
                           const float* dy_c, const float* dy_g, const float* dh, float* dc, float* dz, int64_t n,
                           int64_t u, int sms, Stream stream) {
  launch("lstm cell gradient kernel launch", n * u, sms, stream, cell_grad_kernel, gates, c, c_prev, dy_h, dy_c, dy_g,
         dh, dc, dz, n, u);
}
void launch_lstm_initial_grad(const float* dy_h0, const float* dy_c0, const float* dh, const float* dc, float* out,
                              int64_t s, int sms, Stream stream) {
  launch("lstm initial state gradient kernel launch", 4 * s, sms, stream, initial_grad_kernel, dy_h0, dy_c0, dh, dc,
         out, s);
}

}  // namespace tk::cuda
