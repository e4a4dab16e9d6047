// The general ops on int32/int64 on CUDA (integer_launchers.h): Binary, Compare, Reduce and ArgReduce with the CPU's
// per-element math (backends/math/binary.h, reduce.h), one thread per output element in grid-stride loops, each
// reduction in index order on one thread (exact for integers whatever the order; the CPU's order anyway). An integer
// divisor of 0 or a negative exponent is found by a one-block scan of the second operand before the op runs and
// recorded (device_errors_cuda.h): the host throws the CPU kernel's InvalidArgument at the next synchronization; the
// op itself computes 0 there, never a trap.
#include <cuda_runtime.h>

#include <string>

#include "backends/cuda/check.h"
#include "backends/cuda/first_error.cuh"
#include "backends/cuda/integer_launchers.h"
#include "backends/cuda/launch_geometry.h"
#include "backends/math/binary.h"
#include "backends/math/reduce.h"
#include "trainkit/core/error.h"

namespace tk::cuda {
namespace {
using graph::BinaryFn;
using graph::ReduceFn;

__device__ int64_t first_index() { return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ int64_t grid_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

template <BinaryFn F, typename T>
__global__ void integer_binary_kernel(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ y,
                                      math::Strided s, int64_t total) {
  for (int64_t i = first_index(); i < total; i += grid_stride())
    y[i] = math::arithmetic<F>(a[math::strided_offset(s, 0, i)], b[math::strided_offset(s, 1, i)]);
}
template <BinaryFn F, typename T>
__global__ void integer_compare_kernel(const T* __restrict__ a, const T* __restrict__ b, bool* __restrict__ y,
                                       math::Strided s, int64_t total) {
  for (int64_t i = first_index(); i < total; i += grid_stride())
    y[i] = math::comparison<F>(a[math::strided_offset(s, 0, i)], b[math::strided_offset(s, 1, i)]);
}
template <ReduceFn F, typename T>
__global__ void integer_reduce_kernel(const T* __restrict__ x, T* __restrict__ y, math::Strided kept,
                                      math::Strided reduced, int64_t outputs, int64_t count) {
  for (int64_t o = first_index(); o < outputs; o += grid_stride())
    y[o] = math::reduce_integers<F>(x + math::strided_offset(kept, 0, o), reduced, count);
}
template <typename T>
__global__ void integer_arg_reduce_kernel(const T* __restrict__ x, int32_t* __restrict__ y, int64_t outer, int64_t n,
                                          int64_t inner, bool max) {
  for (int64_t k = first_index(); k < outer * inner; k += grid_stride())
    y[k] = math::arg_extreme(x + (k / inner) * n * inner + k % inner, n, inner, max);
}
// The operand check (first_error.cuh) with the CPU's scan, math::first_bad_operand.
template <typename T>
__global__ void check_operand_kernel(BinaryFn f, const T* __restrict__ b, int64_t count,
                                     backends::DeviceErrorRecord* record, int32_t site) {
  record_first_bad(
      count, [&](int64_t start, int64_t step) { return math::first_bad_operand(f, b, count, start, step); }, b, 0,
      record, site);
}

template <typename Kernel, typename... Args>
void launch(const char* what, int64_t n, int sms, Stream stream, Kernel kernel, Args... args) {
  const Geometry g = elementwise_geometry(n, sms);
  if (g.blocks) kernel<<<g.blocks, g.threads, 0, static_cast<cudaStream_t>(stream)>>>(args...);
  check(cudaGetLastError(), what, "integer_ops.cu");
}

[[noreturn]] void no_function(const char* what) {
  throw InvalidArgument(std::string(what) + ": the function is not one the integer kernels compute");
}

template <typename T>
void binary_as(BinaryFn f, const void* a, const void* b, void* y, const math::Strided& s, int64_t total, int sms,
               Stream stream) {
  const T* at = static_cast<const T*>(a);
  const T* bt = static_cast<const T*>(b);
  switch (f) {
#define TK_CASE(name)                                                                                               \
  case BinaryFn::name:                                                                                              \
    return launch("integer binary kernel launch", total, sms, stream, integer_binary_kernel<BinaryFn::name, T>, at, \
                  bt, static_cast<T*>(y), s, total);
    TK_CASE(add)
    TK_CASE(subtract)
    TK_CASE(multiply)
    TK_CASE(maximum)
    TK_CASE(minimum)
    TK_CASE(power)
    TK_CASE(squared_difference)
    TK_CASE(floor_divide)
    TK_CASE(mod)
#undef TK_CASE
    default:
      no_function("launch_integer_binary");
  }
}

template <typename T>
void compare_as(BinaryFn f, const void* a, const void* b, bool* y, const math::Strided& s, int64_t total, int sms,
                Stream stream) {
  const T* at = static_cast<const T*>(a);
  const T* bt = static_cast<const T*>(b);
  switch (f) {
#define TK_CASE(name)                                                                                                 \
  case BinaryFn::name:                                                                                                \
    return launch("integer compare kernel launch", total, sms, stream, integer_compare_kernel<BinaryFn::name, T>, at, \
                  bt, y, s, total);
    TK_COMPARISON_FNS(TK_CASE)
#undef TK_CASE
    default:
      no_function("launch_integer_compare");
  }
}

template <typename T>
void reduce_as(ReduceFn f, const void* x, void* y, const math::Strided& kept, const math::Strided& reduced,
               int64_t outputs, int64_t count, int sms, Stream stream) {
  const T* xt = static_cast<const T*>(x);
  T* yt = static_cast<T*>(y);
  switch (f) {
#define TK_CASE(name)                                                                                                 \
  case ReduceFn::name:                                                                                                \
    return launch("integer reduce kernel launch", outputs, sms, stream, integer_reduce_kernel<ReduceFn::name, T>, xt, \
                  yt, kept, reduced, outputs, count);
    TK_CASE(sum)
    TK_CASE(prod)
    TK_CASE(max)
    TK_CASE(min)
#undef TK_CASE
    default:
      no_function("launch_integer_reduce");
  }
}

}  // namespace

void launch_integer_binary(BinaryFn f, const void* a, const void* b, void* y, int elem_bytes, const math::Strided& s,
                           int64_t total, int sms, Stream stream) {
  if (elem_bytes == 8) return binary_as<int64_t>(f, a, b, y, s, total, sms, stream);
  binary_as<int32_t>(f, a, b, y, s, total, sms, stream);
}

void launch_integer_compare(BinaryFn f, const void* a, const void* b, bool* y, int elem_bytes, const math::Strided& s,
                            int64_t total, int sms, Stream stream) {
  if (elem_bytes == 8) return compare_as<int64_t>(f, a, b, y, s, total, sms, stream);
  compare_as<int32_t>(f, a, b, y, s, total, sms, stream);
}

void launch_check_integer_operand(BinaryFn f, const void* b, int elem_bytes, int64_t count,
                                  backends::DeviceErrorRecord* record, int32_t site, Stream stream) {
  if (count <= 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  if (elem_bytes == 8)
    check_operand_kernel<int64_t><<<1, kCheckThreads, 0, s>>>(f, static_cast<const int64_t*>(b), count, record, site);
  else
    check_operand_kernel<int32_t><<<1, kCheckThreads, 0, s>>>(f, static_cast<const int32_t*>(b), count, record, site);
  check(cudaGetLastError(), "integer operand check kernel launch", std::to_string(count) + " elements");
}

void launch_integer_reduce(ReduceFn f, const void* x, void* y, int elem_bytes, const math::Strided& kept,
                           const math::Strided& reduced, int64_t outputs, int64_t count, int sms, Stream stream) {
  if (elem_bytes == 8) return reduce_as<int64_t>(f, x, y, kept, reduced, outputs, count, sms, stream);
  reduce_as<int32_t>(f, x, y, kept, reduced, outputs, count, sms, stream);
}

void launch_integer_arg_reduce(bool max, const void* x, int elem_bytes, int32_t* y, int64_t outer, int64_t n,
                               int64_t inner, int sms, Stream stream) {
  if (elem_bytes == 8)
    return launch("integer arg reduce kernel launch", outer * inner, sms, stream, integer_arg_reduce_kernel<int64_t>,
                  static_cast<const int64_t*>(x), y, outer, n, inner, max);
  launch("integer arg reduce kernel launch", outer * inner, sms, stream, integer_arg_reduce_kernel<int32_t>,
         static_cast<const int32_t*>(x), y, outer, n, inner, max);
}

}  // namespace tk::cuda
