// Losses, their gradients and accuracy metrics on CUDA: one thread per element (mean squared error, binary
// crossentropy and accuracy) or per batch row (the categorical ones) over the math of backends/math/losses.h (the
// CPU kernels' functions), then one thread sums the terms in double and in order, as the CPU does, so the batch mean
// does not depend on the launch.
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
__global__ void element_terms(const float* __restrict__ p, const float* __restrict__ t, double* __restrict__ out,
                              int64_t n, ElementLoss kind) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    switch (kind) {
      case ElementLoss::mse:
        out[i] = math::mse_term(p[i], t[i]);
        break;
      case ElementLoss::bce_logits:
      case ElementLoss::bce_probabilities:
        out[i] = math::bce_term(p[i], t[i], kind == ElementLoss::bce_logits);
        break;
      case ElementLoss::binary_accuracy:
        out[i] = math::binary_hit(p[i], t[i]) ? 1.0 : 0.0;
        break;
    }
  }
}
__global__ void element_grads(const float* __restrict__ p, const float* __restrict__ t, const float* dy,
                              float* __restrict__ g, int64_t n, ElementLoss kind) {
  const float scale = (dy ? *dy : 1.0f) / static_cast<float>(n ? n : 1);  // the CPU's scale_of
  for (int64_t i = first_index(); i < n; i += grid_stride())
    g[i] = kind == ElementLoss::mse ? math::mse_grad_element(p[i], t[i], 2.0f * scale)
                                    : math::bce_grad_element(p[i], t[i], scale, kind == ElementLoss::bce_logits);
}
__global__ void dense_cce_rows(const float* __restrict__ x, const float* __restrict__ t, double* __restrict__ out,
                               int64_t rows, int64_t n, bool from_logits) {
  for (int64_t r = first_index(); r < rows; r += grid_stride())
    out[r] = math::cce_row(x + r * n, t + r * n, n, from_logits);
}
__global__ void dense_cce_grad_rows(const float* __restrict__ x, const float* __restrict__ t, const float* dy,
                                    float* __restrict__ g, int64_t rows, int64_t n, bool from_logits) {
  const float k = (dy ? *dy : 1.0f) / static_cast<float>(rows ? rows : 1);
  for (int64_t r = first_index(); r < rows; r += grid_stride())
    math::cce_grad_row(x + r * n, t + r * n, g + r * n, n, k, from_logits);
}
__global__ void categorical_hit_rows(const float* __restrict__ x, const float* __restrict__ t, double* __restrict__ out,
                                     int64_t rows, int64_t n) {
  for (int64_t r = first_index(); r < rows; r += grid_stride())
    out[r] = math::categorical_hit(x + r * n, t + r * n, n) ? 1.0 : 0.0;
}

// The batch mean in row order: one thread, as the CPU's loop (rows are a batch: thousands at most).
__global__ void ordered_mean(const double* __restrict__ v, int64_t rows, float* out, bool as_count) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  double s = 0.0;
  for (int64_t r = 0; r < rows; ++r) s += v[r];
  const int64_t d = rows ? rows : 1;
  *out = as_count ? static_cast<float>(s) / static_cast<float>(d) : static_cast<float>(s / static_cast<double>(d));
}

// One term per row (or element) into `scratch` by `launch_terms`, then their mean into `out` in order; `what` names
// the kernel in a launch error.
template <typename LaunchTerms>
void terms_then_mean(int64_t count, double* scratch, float* out, bool as_count, int sm_count, cudaStream_t s,
                     const char* what, LaunchTerms launch_terms) {
  const Geometry g = elementwise_geometry(count, sm_count);
  if (g.blocks) launch_terms(g);
  ordered_mean<<<1, 1, 0, s>>>(scratch, count, out, as_count);
  check(cudaGetLastError(), what, "losses.cu");
}

}  // namespace

void launch_sparse_cce(const float* x, const int32_t* labels, float* loss, int64_t rows, int64_t classes,
                       bool from_logits, double* rows_scratch, int sm_count, Stream stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  terms_then_mean(rows, rows_scratch, loss, false, sm_count, s, "sparse crossentropy kernel launch",
                  [&](const Geometry& g) {
                    cce_rows<<<g.blocks, g.threads, 0, s>>>(x, labels, rows_scratch, rows, classes, from_logits);
                  });
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
  terms_then_mean(rows, rows_scratch, out, true, sm_count, s, "accuracy kernel launch", [&](const Geometry& g) {
    hit_rows<<<g.blocks, g.threads, 0, s>>>(x, labels, rows_scratch, rows, classes);
  });
}

void launch_element_loss(ElementLoss kind, const float* p, const float* t, float* out, int64_t n, double* scratch,
                         int sm_count, Stream stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  terms_then_mean(n, scratch, out, kind == ElementLoss::binary_accuracy, sm_count, s, "elementwise loss kernel launch",
                  [&](const Geometry& g) { element_terms<<<g.blocks, g.threads, 0, s>>>(p, t, scratch, n, kind); });
}

void launch_element_loss_grad(ElementLoss kind, const float* p, const float* t, const float* dy, float* g, int64_t n,
                              int sm_count, Stream stream) {
  const Geometry geo = elementwise_geometry(n, sm_count);
  if (geo.blocks)
    element_grads<<<geo.blocks, geo.threads, 0, static_cast<cudaStream_t>(stream)>>>(p, t, dy, g, n, kind);
  check(cudaGetLastError(), "elementwise loss gradient kernel launch", "launch_element_loss_grad");
}

void launch_cce(const float* x, const float* targets, float* loss, int64_t rows, int64_t classes, bool from_logits,
                double* rows_scratch, int sm_count, Stream stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  terms_then_mean(rows, rows_scratch, loss, false, sm_count, s, "categorical crossentropy kernel launch",
                  [&](const Geometry& g) {
                    dense_cce_rows<<<g.blocks, g.threads, 0, s>>>(x, targets, rows_scratch, rows, classes, from_logits);
                  });
}

void launch_cce_grad(const float* x, const float* targets, const float* dy, float* g, int64_t rows, int64_t classes,
                     bool from_logits, int sm_count, Stream stream) {
  const Geometry geo = elementwise_geometry(rows, sm_count);
  if (geo.blocks)
    dense_cce_grad_rows<<<geo.blocks, geo.threads, 0, static_cast<cudaStream_t>(stream)>>>(x, targets, dy, g, rows,
                                                                                           classes, from_logits);
  check(cudaGetLastError(), "categorical crossentropy gradient kernel launch", "launch_cce_grad");
}

void launch_categorical_accuracy(const float* x, const float* targets, float* out, int64_t rows, int64_t classes,
                                 double* rows_scratch, int sm_count, Stream stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  terms_then_mean(rows, rows_scratch, out, true, sm_count, s, "categorical accuracy kernel launch",
                  [&](const Geometry& g) {
                    categorical_hit_rows<<<g.blocks, g.threads, 0, s>>>(x, targets, rows_scratch, rows, classes);
                  });
}

}  // namespace tk::cuda
