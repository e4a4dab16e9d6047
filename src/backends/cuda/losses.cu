// Sparse categorical crossentropy, its gradient and accuracy on CUDA: one thread per batch row over the per-row
// math of backends/math/losses.h (the CPU kernels' functions), then one thread sums the rows in double and in row
// order, as the CPU does, so the batch mean does not depend on the launch.
#include <cuda_runtime.h>

#include <cmath>

#include "backends/cuda/check.h"
#include "backends/cuda/launch_geometry.h"
#include "backends/cuda/launchers.h"
#include "backends/math/losses.h"

namespace tk::cuda {
namespace {

__device__ int64_t first_index() { return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ int64_t grid_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }
__device__ bool valid(int32_t label, int64_t classes) { return label >= 0 && label < classes; }

__global__ void cce_rows(const float* __restrict__ x, const int32_t* __restrict__ y, double* __restrict__ out,
                         int64_t rows, int64_t n, bool from_logits) {
  for (int64_t r = first_index(); r < rows; r += grid_stride()) {
    if (!valid(y[r], n)) {
      out[r] = nan("");
      continue;
    }
    const float l = from_logits ? math::sparse_cce_logits_row(x + r * n, n, y[r])
                                : math::sparse_cce_probabilities_row(x + r * n, n, y[r]);
    out[r] = static_cast<double>(l);
  }
}
__global__ void cce_grad_rows(const float* __restrict__ x, const int32_t* __restrict__ y, const float* dy,
                              float* __restrict__ g, int64_t rows, int64_t n, bool from_logits) {
  const float k = (dy ? *dy : 1.0f) / static_cast<float>(rows ? rows : 1);
  for (int64_t r = first_index(); r < rows; r += grid_stride()) {
    if (!valid(y[r], n)) {
      for (int64_t j = 0; j < n; ++j) g[r * n + j] = nanf("");
      continue;
    }
    if (from_logits)
      math::sparse_cce_logits_grad_row(x + r * n, g + r * n, n, y[r], k);
    else
      math::sparse_cce_probabilities_grad_row(x + r * n, g + r * n, n, y[r], k);
  }
}
__global__ void hit_rows(const float* __restrict__ x, const int32_t* __restrict__ y, double* __restrict__ out,
                         int64_t rows, int64_t n) {
  for (int64_t r = first_index(); r < rows; r += grid_stride())
    out[r] = math::argmax_row(x + r * n, n) == static_cast<int64_t>(y[r]) ? 1.0 : 0.0;
}
// The batch mean in row order: one thread, as the CPU's loop (rows are a batch: thousands at most).
__global__ void ordered_mean(const double* __restrict__ v, int64_t rows, float* out, bool as_count) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  double s = 0.0;
  for (int64_t r = 0; r < rows; ++r) s += v[r];
  const int64_t d = rows ? rows : 1;
  *out = as_count ? static_cast<float>(s) / static_cast<float>(d) : static_cast<float>(s / static_cast<double>(d));
}

}  // namespace

void launch_sparse_cce(const float* x, const int32_t* labels, float* loss, int64_t rows, int64_t classes,
                       bool from_logits, double* rows_scratch, int sm_count, Stream stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  const Geometry g = elementwise_geometry(rows, sm_count);
  if (g.blocks) cce_rows<<<g.blocks, g.threads, 0, s>>>(x, labels, rows_scratch, rows, classes, from_logits);
  ordered_mean<<<1, 1, 0, s>>>(rows_scratch, rows, loss, false);
  check(cudaGetLastError(), "sparse crossentropy kernel launch", "launch_sparse_cce");
}

void launch_sparse_cce_grad(const float* x, const int32_t* labels, const float* dy, float* g, int64_t rows,
                            int64_t classes, bool from_logits, int sm_count, Stream stream) {
  const Geometry geo = elementwise_geometry(rows, sm_count);
  if (geo.blocks)
    cce_grad_rows<<<geo.blocks, geo.threads, 0, static_cast<cudaStream_t>(stream)>>>(x, labels, dy, g, rows, classes,
                                                                                     from_logits);
  check(cudaGetLastError(), "sparse crossentropy gradient kernel launch", "launch_sparse_cce_grad");
}

void launch_sparse_accuracy(const float* x, const int32_t* labels, float* out, int64_t rows, int64_t classes,
                            double* rows_scratch, int sm_count, Stream stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  const Geometry g = elementwise_geometry(rows, sm_count);
  if (g.blocks) hit_rows<<<g.blocks, g.threads, 0, s>>>(x, labels, rows_scratch, rows, classes);
  ordered_mean<<<1, 1, 0, s>>>(rows_scratch, rows, out, true);
  check(cudaGetLastError(), "accuracy kernel launch", "launch_sparse_accuracy");
}

}  // namespace tk::cuda
