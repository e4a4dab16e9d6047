// The general tensor ops on CUDA (tensor_launchers.h): one thread per output element in grid-stride loops, the
// per-element math and the reductions' order shared with the CPU kernels (backends/math/). Reductions and the
// gather gradient run each output's elements in index order on one thread: the CPU's grouping, no atomics.
#include <cuda_runtime.h>

#include <cstring>
#include <string>

#include "backends/cuda/check.h"
#include "backends/cuda/dtype_dispatch.h"
#include "backends/cuda/first_error.cuh"
#include "backends/cuda/launch_geometry.h"
#include "backends/cuda/tensor_launchers.h"
#include "backends/math/binary.h"
#include "backends/math/gather.h"
#include "backends/math/layer_norm.h"
#include "backends/math/reduce.h"
#include "backends/math/unary.h"
#include "trainkit/core/error.h"

namespace tk::cuda {
namespace {
using graph::BinaryFn;
using graph::ReduceFn;
using graph::UnaryFn;

__device__ int64_t first_index() { return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ int64_t grid_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

template <UnaryFn F>
__global__ void unary_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n, float p0, float p1) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) y[i] = math::unary<F>(x[i], p0, p1);
}
template <UnaryFn F>
__global__ void unary_grad_kernel(const float* __restrict__ dy, const float* __restrict__ x, float* __restrict__ dx,
                                  int64_t n, float p0, float p1) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) dx[i] = math::unary_grad<F>(dy[i], x[i], p0, p1);
}
template <BinaryFn F>
__global__ void binary_kernel(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ y,
                              math::Strided s, int64_t total) {
  for (int64_t i = first_index(); i < total; i += grid_stride())
    y[i] = math::arithmetic<F>(a[math::strided_offset(s, 0, i)], b[math::strided_offset(s, 1, i)]);
}
template <BinaryFn F>
__global__ void compare_kernel(const float* __restrict__ a, const float* __restrict__ b, bool* __restrict__ y,
                               math::Strided s, int64_t total) {
  for (int64_t i = first_index(); i < total; i += grid_stride())
    y[i] = math::comparison<F>(a[math::strided_offset(s, 0, i)], b[math::strided_offset(s, 1, i)]);
}
template <typename T>
__global__ void where_kernel(const bool* __restrict__ c, const T* __restrict__ a, const T* __restrict__ b,
                             T* __restrict__ y, math::Strided s, int64_t total) {
  for (int64_t i = first_index(); i < total; i += grid_stride())
    y[i] = c[math::strided_offset(s, 0, i)] ? a[math::strided_offset(s, 1, i)] : b[math::strided_offset(s, 2, i)];
}
template <typename T>
__global__ void strided_copy_kernel(const T* __restrict__ x, T* __restrict__ y, math::Strided s, int64_t total) {
  for (int64_t i = first_index(); i < total; i += grid_stride()) y[i] = x[math::strided_offset(s, 0, i)];
}
template <typename T>
__global__ void pad_kernel(const T* __restrict__ x, T* __restrict__ y, PadGeo g, T fill, int64_t total) {
  for (int64_t i = first_index(); i < total; i += grid_stride()) {
    int64_t rest = i, off = 0, stride = 1;
    bool inside = true;
    for (int d = g.rank - 1; d >= 0; --d) {
      const int64_t c = rest % g.ydims[d] - g.before[d];
      rest /= g.ydims[d];
      inside = inside && c >= 0 && c < g.xdims[d];
      off += c * stride;
      stride *= g.xdims[d];
    }
    y[i] = inside ? x[off] : fill;
  }
}
template <ReduceFn F>
__global__ void reduce_kernel(const float* __restrict__ x, float* __restrict__ y, math::Strided kept,
                              math::Strided reduced, int64_t outputs, int64_t count) {
  const bool one_run = reduced.rank == 1;
  for (int64_t o = first_index(); o < outputs; o += grid_stride()) {
    const float* xo = x + math::strided_offset(kept, 0, o);
    y[o] = one_run ? math::reduce_strided<F>(xo, count, reduced.stride[0][0])
                   : math::reduce_offsets<F>(xo, reduced, count);
  }
}
__global__ void arg_reduce_kernel(bool max, const float* __restrict__ x, int32_t* __restrict__ y, int64_t outer,
                                  int64_t n, int64_t inner) {
  for (int64_t k = first_index(); k < outer * inner; k += grid_stride())
    y[k] = math::arg_extreme(x + (k / inner) * n * inner + k % inner, n, inner, max);
}
// Gather's bounds check, one block before the gather (first_error.cuh), with the CPU's scan (math::first_outside).
// Indices are tens of thousands at most: one block reads them in microseconds.
template <typename I>
__global__ void check_indices_kernel(const I* __restrict__ idx, int64_t count, int64_t rows,
                                     backends::DeviceErrorRecord* record, int32_t site) {
  record_first_bad(
      count, [&](int64_t start, int64_t step) { return math::first_outside(idx, count, rows, start, step); }, idx, rows,
      record, site);
}
template <typename T, typename I>
__global__ void gather_kernel(const T* __restrict__ table, const I* __restrict__ idx, T* __restrict__ y, T bad,
                              int64_t outer, int64_t rows, int64_t inner, int64_t count) {
  const int64_t total = outer * count * inner;
  for (int64_t k = first_index(); k < total; k += grid_stride()) {
    const int64_t i = k % inner, j = (k / inner) % count, o = k / (inner * count);
    const int64_t r = static_cast<int64_t>(idx[j]);
    y[k] = r >= 0 && r < rows ? table[(o * rows + r) * inner + i] : bad;
  }
}
template <typename I>
__global__ void gather_grad_kernel(const float* __restrict__ dy, const I* __restrict__ idx, float* __restrict__ dx,
                                   int64_t outer, int64_t rows, int64_t inner, int64_t count) {
  // One thread per (outer, inner) column: zero its column of dx, then add dy's rows in index order.
  for (int64_t k = first_index(); k < outer * inner; k += grid_stride()) {
    const int64_t o = k / inner, i = k % inner;
    for (int64_t r = 0; r < rows; ++r) dx[(o * rows + r) * inner + i] = 0.0f;
    for (int64_t j = 0; j < count; ++j) {
      const int64_t r = static_cast<int64_t>(idx[j]);
      if (r >= 0 && r < rows) dx[(o * rows + r) * inner + i] += dy[(o * count + j) * inner + i];
    }
  }
}
template <typename I>
__global__ void one_hot_kernel(const I* __restrict__ idx, float* __restrict__ y, int64_t n, int64_t depth) {
  for (int64_t k = first_index(); k < n * depth; k += grid_stride())
    y[k] = static_cast<int64_t>(idx[k / depth]) == k % depth ? 1.0f : 0.0f;
}

__global__ void ln_stats_kernel(const float* __restrict__ x, float* __restrict__ s, int64_t rows, int64_t n,
                                float eps) {
  for (int64_t r = first_index(); r < rows; r += grid_stride())
    math::layer_norm_stats(x + r * n, n, eps, s + 2 * r, s + 2 * r + 1);
}
__global__ void ln_apply_kernel(const float* __restrict__ x, const float* __restrict__ s,
                                const float* __restrict__ gamma, const float* __restrict__ beta, float* __restrict__ y,
                                int64_t rows, int64_t n) {
  for (int64_t i = first_index(); i < rows * n; i += grid_stride()) {
    const int64_t r = i / n, j = i % n;
    const float inv = s[2 * r + 1] * gamma[j];
    y[i] = x[i] * inv + (beta[j] - s[2 * r] * inv);
  }
}
__global__ void ln_input_grad_kernel(const float* __restrict__ dy, const float* __restrict__ x,
                                     const float* __restrict__ s, const float* __restrict__ gamma,
                                     float* __restrict__ dx, int64_t rows, int64_t n) {
  for (int64_t r = first_index(); r < rows; r += grid_stride())
    math::layer_norm_input_grad(dy + r * n, x + r * n, n, s[2 * r], s[2 * r + 1], gamma, dx + r * n);
}
__global__ void ln_gamma_grad_kernel(const float* __restrict__ dy, const float* __restrict__ x,
                                     const float* __restrict__ s, float* __restrict__ out, int64_t rows, int64_t n) {
  for (int64_t j = first_index(); j < n; j += grid_stride()) {  // out (2, n): [dgamma; dbeta]
    double dg = 0.0, db = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
      dg += static_cast<double>(dy[r * n + j]) * ((x[r * n + j] - static_cast<double>(s[2 * r])) * s[2 * r + 1]);
      db += static_cast<double>(dy[r * n + j]);
    }
    out[j] = static_cast<float>(dg);
    out[n + j] = static_cast<float>(db);
  }
}

__global__ void step_value_kernel(const float* learning_rate, const int64_t* iterations, float* y) {
  y[0] = learning_rate ? *learning_rate : static_cast<float>(*iterations + 1);
}

template <typename Kernel, typename... Args>
void launch(const char* what, int64_t n, int sms, Stream stream, Kernel kernel, Args... args) {
  const Geometry g = elementwise_geometry(n, sms);
  if (g.blocks) kernel<<<g.blocks, g.threads, 0, static_cast<cudaStream_t>(stream)>>>(args...);
  check(cudaGetLastError(), what, "tensor_ops.cu");
}

[[noreturn]] void no_function(const char* what) {
  throw InvalidArgument(std::string(what) + ": the function names no known one");
}

}  // namespace

void launch_unary(UnaryFn f, const float* x, float* y, int64_t n, float p0, float p1, int sms, Stream stream) {
  switch (f) {
#define TK_CASE(name) \
  case UnaryFn::name: \
    return launch("unary kernel launch", n, sms, stream, unary_kernel<UnaryFn::name>, x, y, n, p0, p1);
    TK_UNARY_FNS(TK_CASE)
#undef TK_CASE
    default:
      no_function("launch_unary");
  }
}

void launch_unary_grad(UnaryFn f, const float* dy, const float* x, float* dx, int64_t n, float p0, float p1, int sms,
                       Stream stream) {
  switch (f) {
#define TK_CASE(name)                                                                                                 \
  case UnaryFn::name:                                                                                                 \
    return launch("unary gradient kernel launch", n, sms, stream, unary_grad_kernel<UnaryFn::name>, dy, x, dx, n, p0, \
                  p1);
    TK_UNARY_FNS(TK_CASE)
#undef TK_CASE
    default:
      no_function("launch_unary_grad");
  }
}

void launch_binary(BinaryFn f, const float* a, const float* b, float* y, const math::Strided& s, int64_t total, int sms,
                   Stream stream) {
  switch (f) {
#define TK_CASE(name)  \
  case BinaryFn::name: \
    return launch("binary kernel launch", total, sms, stream, binary_kernel<BinaryFn::name>, a, b, y, s, total);
    TK_ARITHMETIC_FNS(TK_CASE)
#undef TK_CASE
    default:
      no_function("launch_binary");
  }
}

void launch_compare(BinaryFn f, const float* a, const float* b, bool* y, const math::Strided& s, int64_t total, int sms,
                    Stream stream) {
  switch (f) {
#define TK_CASE(name)  \
  case BinaryFn::name: \
    return launch("compare kernel launch", total, sms, stream, compare_kernel<BinaryFn::name>, a, b, y, s, total);
    TK_COMPARISON_FNS(TK_CASE)
#undef TK_CASE
    default:
      no_function("launch_compare");
  }
}

void launch_where(const bool* c, const void* a, const void* b, void* y, int bytes, const math::Strided& s,
                  int64_t total, int sms, Stream stream) {
  with_width(bytes, [&](auto t) {
    using T = typename decltype(t)::type;
    launch("where kernel launch", total, sms, stream, where_kernel<T>, c, static_cast<const T*>(a),
           static_cast<const T*>(b), static_cast<T*>(y), s, total);
  });
}

void launch_gather_strided(const void* x, void* y, int bytes, const math::Strided& s, int64_t total, int sms,
                           Stream stream) {
  with_width(bytes, [&](auto t) {
    using T = typename decltype(t)::type;
    launch("strided copy kernel launch", total, sms, stream, strided_copy_kernel<T>, static_cast<const T*>(x),
           static_cast<T*>(y), s, total);
  });
}

void launch_pad(const void* x, void* y, int bytes, const PadGeo& g, uint64_t fill_bits, int64_t total, int sms,
                Stream stream) {
  with_width(bytes, [&](auto t) {
    using T = typename decltype(t)::type;
    T fill;
    static_assert(sizeof(T) <= sizeof(uint64_t));
    memcpy(&fill, &fill_bits, sizeof(T));
    launch("pad kernel launch", total, sms, stream, pad_kernel<T>, static_cast<const T*>(x), static_cast<T*>(y), g,
           fill, total);
  });
}

void launch_reduce(ReduceFn f, const float* x, float* y, const math::Strided& kept, const math::Strided& reduced,
                   int64_t outputs, int64_t count, int sms, Stream stream) {
  switch (f) {
#define TK_CASE(name)                                                                                               \
  case ReduceFn::name:                                                                                              \
    return launch("reduce kernel launch", outputs, sms, stream, reduce_kernel<ReduceFn::name>, x, y, kept, reduced, \
                  outputs, count);
    TK_REDUCE_FNS(TK_CASE)
#undef TK_CASE
    default:
      no_function("launch_reduce");
  }
}

void launch_arg_reduce(bool max, const float* x, int32_t* y, int64_t outer, int64_t n, int64_t inner, int sms,
                       Stream stream) {
  launch("arg reduce kernel launch", outer * inner, sms, stream, arg_reduce_kernel, max, x, y, outer, n, inner);
}

namespace {
template <typename T, typename I>
void gather_as(const void* table, const void* idx, void* y, T bad, int64_t outer, int64_t rows, int64_t inner,
               int64_t count, int sms, Stream stream) {
  launch("gather kernel launch", outer * count * inner, sms, stream, gather_kernel<T, I>, static_cast<const T*>(table),
         static_cast<const I*>(idx), static_cast<T*>(y), bad, outer, rows, inner, count);
}
template <typename I>
void gather_bytes(const void* table, const void* idx, void* y, int bytes, bool is_float, int64_t outer, int64_t rows,
                  int64_t inner, int64_t count, int sms, Stream stream) {
  switch (bytes) {
    case 1:
      return gather_as<uint8_t, I>(table, idx, y, 0, outer, rows, inner, count, sms, stream);
    case 2:  // float16 / bfloat16: a quiet NaN in both is 0x7fff (the sign, all exponent bits, a mantissa bit)
      return gather_as<uint16_t, I>(table, idx, y, is_float ? 0x7fff : 0, outer, rows, inner, count, sms, stream);
    case 4:
      return gather_as<uint32_t, I>(table, idx, y, is_float ? 0x7fc00000u : 0u, outer, rows, inner, count, sms, stream);
    default:
      return gather_as<uint64_t, I>(table, idx, y, 0, outer, rows, inner, count, sms, stream);
  }
}
}  // namespace

void launch_gather(const void* table, const void* idx, int idx_bytes, void* y, int bytes, bool is_float, int64_t outer,
                   int64_t rows, int64_t inner, int64_t count, int sms, Stream stream) {
  if (idx_bytes == 8)
    gather_bytes<int64_t>(table, idx, y, bytes, is_float, outer, rows, inner, count, sms, stream);
  else
    gather_bytes<int32_t>(table, idx, y, bytes, is_float, outer, rows, inner, count, sms, stream);
}

void launch_check_indices(const void* idx, int idx_bytes, int64_t count, int64_t rows,
                          backends::DeviceErrorRecord* record, int32_t site, Stream stream) {
  if (count <= 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  if (idx_bytes == 8)
    check_indices_kernel<int64_t>
        <<<1, kCheckThreads, 0, s>>>(static_cast<const int64_t*>(idx), count, rows, record, site);
  else
    check_indices_kernel<int32_t>
        <<<1, kCheckThreads, 0, s>>>(static_cast<const int32_t*>(idx), count, rows, record, site);
  check(cudaGetLastError(), "gather index check kernel launch", std::to_string(count) + " indices");
}

void launch_gather_grad(const float* dy, const void* idx, int idx_bytes, float* dx, int64_t outer, int64_t rows,
                        int64_t inner, int64_t count, int sms, Stream stream) {
  if (idx_bytes == 8)
    launch("gather gradient kernel launch", outer * inner, sms, stream, gather_grad_kernel<int64_t>, dy,
           static_cast<const int64_t*>(idx), dx, outer, rows, inner, count);
  else
    launch("gather gradient kernel launch", outer * inner, sms, stream, gather_grad_kernel<int32_t>, dy,
           static_cast<const int32_t*>(idx), dx, outer, rows, inner, count);
}

void launch_one_hot(const void* idx, int idx_bytes, float* y, int64_t n, int64_t depth, int sms, Stream stream) {
  if (idx_bytes == 8)
    launch("one hot kernel launch", n * depth, sms, stream, one_hot_kernel<int64_t>, static_cast<const int64_t*>(idx),
           y, n, depth);
  else
    launch("one hot kernel launch", n * depth, sms, stream, one_hot_kernel<int32_t>, static_cast<const int32_t*>(idx),
           y, n, depth);
}

void launch_layer_norm_stats(const float* x, float* stats, int64_t rows, int64_t n, float eps, int sms, Stream stream) {
  launch("layer norm stats kernel launch", rows, sms, stream, ln_stats_kernel, x, stats, rows, n, eps);
}
void launch_layer_norm_apply(const float* x, const float* stats, const float* gamma, const float* beta, float* y,
                             int64_t rows, int64_t n, int sms, Stream stream) {
  launch("layer norm kernel launch", rows * n, sms, stream, ln_apply_kernel, x, stats, gamma, beta, y, rows, n);
}
void launch_layer_norm_input_grad(const float* dy, const float* x, const float* stats, const float* gamma, float* dx,
                                  int64_t rows, int64_t n, int sms, Stream stream) {
  launch("layer norm input gradient kernel launch", rows, sms, stream, ln_input_grad_kernel, dy, x, stats, gamma, dx,
         rows, n);
}
void launch_layer_norm_gamma_grad(const float* dy, const float* x, const float* stats, float* dgamma, int64_t rows,
                                  int64_t n, int sms, Stream stream) {
  launch("layer norm gamma gradient kernel launch", n, sms, stream, ln_gamma_grad_kernel, dy, x, stats, dgamma, rows,
         n);
}

void launch_step_value(const float* learning_rate, const int64_t* iterations, float* y, Stream stream) {
  step_value_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(learning_rate, iterations, y);
  check(cudaGetLastError(), "step value kernel launch", "tensor_ops.cu");
}

}  // namespace tk::cuda
