// Cast on CUDA: every pair of dtypes, element by element through core/convert_one.h, the very function the CPU's
// conversions call (Tensor::to, batch staging, the CPU Cast kernel): the same rounding to 16 bits, the same
// truncation and saturation to integers, the same NaN rules, so a cast gives the CPU's bits.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "backends/cuda/check.h"
#include "backends/cuda/dtype_dispatch.h"
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
  cast_kernel<S, D>
      <<<g.blocks, g.threads, 0, s>>>(static_cast<const typename Source<S>::type*>(x), static_cast<D*>(y), n);
}

size_t dtype_code_size(int code) {
  constexpr size_t sizes[7] = {4, 2, 2, 4, 8, 1, 1};
  return code >= 0 && code < 7 ? sizes[code] : 0;
}

}  // namespace

void launch_cast(const void* x, int from, void* y, int to, int64_t n, int sm_count, Stream stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (n <= 0) return;
  if (from == to) {  // a byte copy, as the CPU's (even for bool bytes other than 0 and 1)
    check(cudaMemcpyAsync(y, x, static_cast<size_t>(n) * dtype_code_size(from), cudaMemcpyDeviceToDevice, s),
          "cast (a copy)", "launch_cast");
    return;
  }
  const Geometry g = elementwise_geometry(n, sm_count);
  with_type(from, "cast kernel", "source", [&](auto source) {
    with_type(to, "cast kernel", "target", [&](auto target) {
      launch<typename decltype(source)::type, typename decltype(target)::type>(x, y, n, g, s);
    });
  });
  check(cudaGetLastError(), "cast kernel launch", "launch_cast");
}

}  // namespace tk::cuda
