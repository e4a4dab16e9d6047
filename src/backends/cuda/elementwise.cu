// Elementwise and bias kernels on CUDA: the CPU kernels' arithmetic in the same order (backends/cpu/elementwise.cpp,
// linalg.cpp). Sums of plain additions (Add, BiasGrad) give the CPU's bits; where a multiply meets an add (Scale,
// AccumulateGrad), nvcc and GCC each decide whether to fuse it, so the last bit may differ.
#include <cuda_runtime.h>

#include <algorithm>

#include "backends/cuda/check.h"
#include "backends/cuda/launch_geometry.h"
#include "backends/cuda/launchers.h"
#include "backends/math/random.h"

namespace tk::cuda {
namespace {

__device__ int64_t first_index() { return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ int64_t grid_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

struct Inputs {
  const float* x[6];
  int k;
};

__global__ void fill(float* y, int64_t n, float v) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) y[i] = v;
}
__global__ void add(Inputs in, float* __restrict__ y, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    float s = in.k > 1 ? in.x[0][i] + in.x[1][i] : in.x[0][i];
    for (int j = 2; j < in.k; ++j) s += in.x[j][i];
    y[i] = s;
  }
}
__global__ void mul(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ y, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) y[i] = a[i] * b[i];
}
__global__ void scale_shift(const float* __restrict__ x, float* __restrict__ y, int64_t n, float k, float b) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) y[i] = x[i] * k + b;
}
__global__ void bias_add(const float* __restrict__ x, const float* __restrict__ bias, float* __restrict__ y,
                         int64_t total, int64_t n) {
  for (int64_t i = first_index(); i < total; i += grid_stride()) y[i] = x[i] + bias[i % n];
}
// Column sums in two fixed passes (deterministic: the grouping depends on the shape alone): chunk c of the rows is
// summed in double, in row order, by one thread per column (coalesced across a warp's columns) into partials[c * n +
// j]; then one thread per column adds the chunks in order. In double, like the CPU's row-order sums: the float results
// differ from the CPU's only when a double sum lands within an ulp of a float rounding boundary.
__global__ void bias_grad_chunks(const float* __restrict__ dy, double* __restrict__ partials, int64_t rows, int64_t n,
                                 int64_t chunks) {
  const int64_t c = blockIdx.y, r0 = rows * c / chunks, r1 = rows * (c + 1) / chunks;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < n;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double acc = 0.0;
    for (int64_t r = r0; r < r1; ++r) acc += static_cast<double>(dy[r * n + j]);
    partials[c * n + j] = acc;
  }
}
__global__ void bias_grad_finish(const double* __restrict__ partials, float* __restrict__ db, int64_t n,
                                 int64_t chunks) {
  for (int64_t j = first_index(); j < n; j += grid_stride()) {
    double acc = 0.0;
    for (int64_t c = 0; c < chunks; ++c) acc += partials[c * n + j];
    db[j] = static_cast<float>(acc);
  }
}
__global__ void accumulate(float* __restrict__ acc, const float* __restrict__ g, int64_t n, const float* scale) {
  const float k = *scale;
  for (int64_t i = first_index(); i < n; i += grid_stride()) acc[i] += g[i] * k;
}

__global__ void dropout_mask(float* __restrict__ y, int64_t n, uint64_t node_seed, const uint64_t* step,
                             const int64_t* first_row, float rate, math::DropoutLayout layout) {
  const uint64_t stream = math::dropout_stream(node_seed, *step);
  layout.first_row = *first_row;
  const float keep = 1.0f / (1.0f - rate);
  for (int64_t i = first_index(); i < n; i += grid_stride())
    y[i] = math::dropout_value(stream, math::dropout_key(i, layout), rate, keep);
}

__global__ void random_values(float* __restrict__ y, int64_t n, bool normal, uint64_t node_seed, const uint64_t* step,
                              const int64_t* first_row, int64_t per_row) {
  const uint64_t stream = math::dropout_stream(node_seed, *step);
  const math::DropoutLayout layout{false, 1, 1, per_row, *first_row};
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const uint64_t key = math::dropout_key(i, layout);
    y[i] = normal ? math::standard_normal(stream, key) : math::uniform01(stream, key);
  }
}

template <typename Kernel, typename... Args>
void launch(const char* what, int64_t n, int sms, Stream stream, Kernel kernel, Args... args) {
  const Geometry g = elementwise_geometry(n, sms);
  if (g.blocks) kernel<<<g.blocks, g.threads, 0, static_cast<cudaStream_t>(stream)>>>(args...);
  check(cudaGetLastError(), what, "elementwise.cu");
}

}  // namespace

void launch_fill(float* y, int64_t n, float value, int sm_count, Stream stream) {
  launch("fill kernel launch", n, sm_count, stream, fill, y, n, value);
}
void launch_add(const float* const* x, int k, float* y, int64_t n, int sm_count, Stream stream) {
  if (k < 1 || k > 6) throw InvalidArgument("launch_add: 1 to 6 inputs, got " + std::to_string(k));
  Inputs in{};
  for (int j = 0; j < k; ++j) in.x[j] = x[j];
  in.k = k;
  launch("add kernel launch", n, sm_count, stream, add, in, y, n);
}
void launch_mul(const float* a, const float* b, float* y, int64_t n, int sm_count, Stream stream) {
  launch("mul kernel launch", n, sm_count, stream, mul, a, b, y, n);
}
void launch_scale_shift(const float* x, float* y, int64_t n, float k, float b, int sm_count, Stream stream) {
  launch("scale kernel launch", n, sm_count, stream, scale_shift, x, y, n, k, b);
}
void launch_bias_add(const float* x, const float* bias, float* y, int64_t rows, int64_t n, int sm_count,
                     Stream stream) {
  launch("bias add kernel launch", rows * n, sm_count, stream, bias_add, x, bias, y, rows * n, n);
}
int64_t bias_grad_chunks(int64_t rows) { return std::clamp<int64_t>(rows / 64, 1, 1024); }

void launch_bias_grad(const float* dy, float* db, int64_t rows, int64_t n, double* partials, int sm_count,
                      Stream stream) {
  if (n <= 0) return;
  const int64_t chunks = bias_grad_chunks(rows);
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>((n + 127) / 128, 64)), static_cast<unsigned>(chunks));
  bias_grad_chunks<<<grid, 128, 0, static_cast<cudaStream_t>(stream)>>>(dy, partials, rows, n, chunks);
  check(cudaGetLastError(), "bias gradient kernel launch", "elementwise.cu");
  launch("bias gradient kernel launch", n, sm_count, stream, bias_grad_finish, partials, db, n, chunks);
}
void launch_accumulate(float* acc, const float* g, int64_t n, const float* scale, int sm_count, Stream stream) {
  launch("accumulate kernel launch", n, sm_count, stream, accumulate, acc, g, n, scale);
}

void launch_dropout_mask(float* y, int64_t n, uint64_t node_seed, const uint64_t* step, const int64_t* first_row,
                         float rate, bool spatial, int64_t per_sample, int64_t channels, int64_t per_row, int sm_count,
                         Stream stream) {
  const math::DropoutLayout layout{spatial, per_sample, channels, per_row, 0};
  launch("dropout mask kernel launch", n, sm_count, stream, dropout_mask, y, n, node_seed, step, first_row, rate,
         layout);
}

void launch_random_values(float* y, int64_t n, bool normal, uint64_t node_seed, const uint64_t* step,
                          const int64_t* first_row, int64_t per_row, int sm_count, Stream stream) {
  launch("random values kernel launch", n, sm_count, stream, random_values, y, n, normal, node_seed, step, first_row,
         per_row);
}

}  // namespace tk::cuda
