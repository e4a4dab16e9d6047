// Cast on CUDA: every pair of dtypes, element by element through core/convert_one.h, the very function the CPU's
// conversions call (Tensor::to, batch staging, the CPU Cast kernel): the same rounding to 16 bits, the same
// truncation and saturation to integers, the same NaN rules, so a cast gives the CPU's bits.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "backends/cuda/check.h"
#include "backends/cuda/launch_geometry.h"
#include "backends/cuda/launchers.h"
#include "core/convert_one.h"

namespace tk::cuda {
namespace {

__device__ int64_t first_index() { return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ int64_t grid_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

// A bool is read as its byte, any nonzero byte being true (as the CPU does: foreign bytes are never undefined).
template <typename S>
struct Source {
  using type = S;
  __device__ static S read(const S* x, int64_t i) { return x[i]; }
};
template <>
struct Source<bool> {
  using type = uint8_t;
  __device__ static uint8_t read(const uint8_t* x, int64_t i) { return x[i] != 0 ? 1 : 0; }
};

template <typename S, typename D>
__global__ void cast_kernel(const typename Source<S>::type* __restrict__ x, D* __restrict__ y, int64_t n) {
  using T = typename Source<S>::type;
  for (int64_t i = first_index(); i < n; i += grid_stride())
    y[i] = convert_detail::convert_one<T, D>(Source<S>::read(x, i));
}

template <typename S, typename D>
void launch(const void* x, void* y, int64_t n, const Geometry& g, cudaStream_t s) {
  cast_kernel<S, D><<<g.blocks, g.threads, 0, s>>>(static_cast<const typename Source<S>::type*>(x),
                                                    static_cast<D*>(y), n);
}

// Dtype codes as tk::DType numbers them (cuda_kernels.cpp asserts the order): f32, f16, bf16, i32, i64, u8, bool.
template <typename S>
void launch_to(int to, const void* x, void* y, int64_t n, const Geometry& g, cudaStream_t s) {
  switch (to) {
    case 0:
      return launch<S, float>(x, y, n, g, s);
    case 1:
      return launch<S, float16>(x, y, n, g, s);
    case 2:
      return launch<S, bfloat16>(x, y, n, g, s);
    case 3:
      return launch<S, int32_t>(x, y, n, g, s);
    case 4:
      return launch<S, int64_t>(x, y, n, g, s);
    case 5:
      return launch<S, uint8_t>(x, y, n, g, s);
    case 6:
      return launch<S, bool>(x, y, n, g, s);
    default:
      throw Error("cast kernel: unknown target dtype code " + std::to_string(to));
  }
}

}  // namespace

size_t dtype_code_size(int code) {
  constexpr size_t sizes[7] = {4, 2, 2, 4, 8, 1, 1};
  return code >= 0 && code < 7 ? sizes[code] : 0;
}

void launch_cast(const void* x, int from, void* y, int to, int64_t n, int sm_count, Stream stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (n <= 0) return;
  if (from == to) {  // a byte copy, as the CPU's (even for bool bytes other than 0 and 1)
    check(cudaMemcpyAsync(y, x, static_cast<size_t>(n) * dtype_code_size(from), cudaMemcpyDeviceToDevice, s),
          "cast (a copy)", "launch_cast");
    return;
  }
  const Geometry g = elementwise_geometry(n, sm_count);
  switch (from) {
    case 0:
      launch_to<float>(to, x, y, n, g, s);
      break;
    case 1:
      launch_to<float16>(to, x, y, n, g, s);
      break;
    case 2:
      launch_to<bfloat16>(to, x, y, n, g, s);
      break;
    case 3:
      launch_to<int32_t>(to, x, y, n, g, s);
      break;
    case 4:
      launch_to<int64_t>(to, x, y, n, g, s);
      break;
    case 5:
      launch_to<uint8_t>(to, x, y, n, g, s);
      break;
    case 6:
      launch_to<bool>(to, x, y, n, g, s);
      break;
    default:
      throw Error("cast kernel: unknown source dtype code " + std::to_string(from));
  }
  check(cudaGetLastError(), "cast kernel launch", "launch_cast");
}

}  // namespace tk::cuda
