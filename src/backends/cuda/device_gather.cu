// The gather kernel of device_gather.h: rows of a device-resident array into a program input, converted element by
// element through core/convert_one.h (the rule the host staging follows, so a batch gathered here has the host's
// bits) and scaled as the host staging scales, to(float(x) * scale + offset), here with one rounding (fmaf, written
// out rather than left to nvcc's contraction). The host loop (core/convert.cpp) rounds once where the compiler
// contracts it (GCC's default -ffp-contract=fast with FMA in the ISA: -march=native on x86-64 since Haswell) and twice
// in a portable build, so a scaled value may differ from the host's by one ulp; the CPU's bits are pinned by parity
// tests and left alone. A same-dtype gather (a shuffled batch) moves raw bytes, as the host's memcpy does: a bool
// byte other than 0 or 1 reaches the program unchanged.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "backends/cuda/check.h"
#include "backends/cuda/device_gather_launch.h"
#include "backends/cuda/dtype_dispatch.h"
#include "backends/cuda/launch_geometry.h"
#include "core/convert_one.h"

namespace tk::cuda {
namespace {

// A bool is read as its byte, any nonzero byte being true (as cast.cu and the CPU read them).
template <typename S>
struct Source {
  using type = S;   // what the array holds
  using value = S;  // what is converted
  __device__ static S read(const S* x, int64_t i) { return x[i]; }
};
template <>
struct Source<bool> {
  using type = uint8_t;
  using value = bool;
  __device__ static bool read(const uint8_t* x, int64_t i) { return x[i] != 0; }
};

// dst(n, row) <- src rows: one thread per output element, grid-stride.
template <typename S, typename D>
__global__ void gather_kernel(const typename Source<S>::type* __restrict__ src, D* __restrict__ dst,
                              const int64_t* __restrict__ idx, int64_t first, int64_t n, int64_t row, bool scaled,
                              float scale, float offset) {
  const int64_t total = n * row;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / row, c = i - r * row;
    const int64_t from = (idx ? idx[r] : first + r) * row + c;
    using V = typename Source<S>::value;
    if constexpr (convert_detail::is_float_type<D>) {
      if (scaled) {
        dst[i] =
            convert_detail::from_float<D>(fmaf(convert_detail::to_float(Source<S>::read(src, from)), scale, offset));
        continue;
      }
    }
    if constexpr (std::is_same_v<S, D>) {  // the bytes as they are (the host memcpys them)
      reinterpret_cast<typename Source<S>::type*>(dst)[i] = src[from];
    } else {
      dst[i] = convert_detail::convert_one<V, D>(Source<S>::read(src, from));
    }
  }
}

}  // namespace

void launch_gather_rows(const void* src, int from, void* dst, int to, const int64_t* idx, int64_t first, int64_t n,
                        int64_t row, bool scaled, float scale, float offset, int sm_count, void* stream) {
  const Geometry g = elementwise_geometry(n * row, sm_count);
  if (!g.blocks) return;
  const auto s = static_cast<cudaStream_t>(stream);
  with_type(from, "device gather", "source", [&](auto source) {
    with_type(to, "device gather", "target", [&](auto target) {
      using S = typename decltype(source)::type;
      using D = typename decltype(target)::type;
      gather_kernel<S, D><<<g.blocks, g.threads, 0, s>>>(static_cast<const typename Source<S>::type*>(src),
                                                         static_cast<D*>(dst), idx, first, n, row, scaled, scale,
                                                         offset);
    });
  });
  check(cudaGetLastError(), "gather kernel launch", "launch_gather_rows (a batch of a Dataset::on_device source)");
}

}  // namespace tk::cuda
