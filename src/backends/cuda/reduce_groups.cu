// Cooperative reductions (tensor_launchers.h: launch_reduce_groups, launch_arg_reduce_groups): a warp (G = 32) or a
// block (G = 256) per output, for long reduced axes that one thread per output (tensor_ops.cu) would walk alone.
// Lane t of a group accumulates elements t, t + G, t + 2G, ... as backends/math/reduce.h does (sums and products in
// double, max/min NaN-propagating, logsumexp's max first), then the group combines its partials in a fixed tree
// (warp shuffles, then the block's warps in order through shared memory): deterministic, no atomics. The grouping
// differs from the CPU's index order only in the rounding of double sums.
#include <cuda_runtime.h>

#include <string>

#include "backends/cuda/check.h"
#include "backends/cuda/group_reduce.h"
#include "backends/cuda/launch_geometry.h"
#include "backends/cuda/tensor_launchers.h"
#include "backends/math/reduce.h"
#include "trainkit/core/error.h"

namespace tk::cuda {
namespace {
using graph::ReduceFn;

// The element r of an output's reduced set (one equally spaced run, or the general strided walk).
__device__ int64_t reduced_offset(const math::Strided& reduced, bool one_run, int64_t r) {
  return one_run ? r * reduced.stride[0][0] : math::strided_offset(reduced, 0, r);
}

template <ReduceFn F, int G>
__global__ void reduce_groups_kernel(const float* __restrict__ x, float* __restrict__ y, math::Strided kept,
                                     math::Strided reduced, int64_t outputs, int64_t count) {
  __shared__ double dsmem[kWarps];
  __shared__ float fsmem[kWarps];
  constexpr int kGroups = kBlock / G;
  const int lane = static_cast<int>(threadIdx.x) % G, group = static_cast<int>(threadIdx.x) / G;
  const bool one_run = reduced.rank == 1;
  // G = 256: o is the block's (uniform, so every thread reaches group_reduce's barriers); G = 32: the warp's.
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * kGroups + group; o < outputs;
       o += static_cast<int64_t>(gridDim.x) * kGroups) {
    const float* xo = x + math::strided_offset(kept, 0, o);
    float result;
    if constexpr (F == ReduceFn::sum || F == ReduceFn::mean || F == ReduceFn::prod) {
      double acc = F == ReduceFn::prod ? 1.0 : 0.0;
      for (int64_t r = lane; r < count; r += G) {
        const double v = xo[reduced_offset(reduced, one_run, r)];
        acc = F == ReduceFn::prod ? acc * v : acc + v;
      }
      acc = F == ReduceFn::prod ? group_reduce<G>(acc, MulD{}, dsmem) : group_reduce<G>(acc, AddD{}, dsmem);
      result = static_cast<float>(F == ReduceFn::mean ? acc / static_cast<double>(count) : acc);
    } else {
      // max / min / logsumexp's max: lanes past the end start from the identity (count >= 1: lane 0 has x[0])
      float m = F == ReduceFn::min ? INFINITY : -INFINITY;
      for (int64_t r = lane; r < count; r += G) {
        const float v = xo[reduced_offset(reduced, one_run, r)];
        m = F == ReduceFn::min ? math::nan_min(m, v) : math::nan_max(m, v);
      }
      m = F == ReduceFn::min ? group_reduce<G>(m, MinF{}, fsmem) : group_reduce<G>(m, MaxF{}, fsmem);
      if constexpr (F == ReduceFn::logsumexp) {
        // NaN, or +-inf (exp(x - m) would be NaN): m itself, as reduce_strided; uniform across the group
        if (m == m && !math::infinite(m)) {
          double s = 0.0;
          for (int64_t r = lane; r < count; r += G)
            s += static_cast<double>(expf(xo[reduced_offset(reduced, one_run, r)] - m));
          s = group_reduce<G>(s, AddD{}, dsmem);
          m += static_cast<float>(log(s));
        }
      }
      result = m;
    }
    if (lane == 0) y[o] = result;
  }
}

// The first max (or min) along the middle axis of x(outer, n, inner), a NaN the extreme (math::arg_extreme's rule):
// each lane's first extreme of its elements, then pairs combined keeping the earlier index on ties and NaN.
struct Best {
  float v;
  int32_t i;  // -1: no element
};
__device__ Best better(Best a, Best b, bool max) {
  if (a.i < 0) return b;
  if (b.i < 0) return a;
  const bool an = a.v != a.v, bn = b.v != b.v;
  if (an || bn) return an && bn ? (a.i < b.i ? a : b) : (an ? a : b);
  if (max ? a.v > b.v : a.v < b.v) return a;
  if (max ? b.v > a.v : b.v < a.v) return b;
  return a.i < b.i ? a : b;
}
template <int G>
__device__ Best group_best(Best v, bool max, Best* smem) {
  for (int off = kWarpThreads / 2; off > 0; off /= 2) {
    Best o;
    o.v = __shfl_down_sync(0xffffffffu, v.v, off);
    o.i = __shfl_down_sync(0xffffffffu, v.i, off);
    v = better(v, o, max);
  }
  v.v = __shfl_sync(0xffffffffu, v.v, 0);
  v.i = __shfl_sync(0xffffffffu, v.i, 0);
  if constexpr (G == kWarpThreads) {
    return v;
  } else {
    const int warp = static_cast<int>(threadIdx.x) / kWarpThreads, lane = static_cast<int>(threadIdx.x) % kWarpThreads;
    if (lane == 0) smem[warp] = v;
    __syncthreads();
    Best r = smem[0];
    for (int w = 1; w < kWarps; ++w) r = better(r, smem[w], max);
    __syncthreads();
    return r;
  }
}
template <int G>
__global__ void arg_reduce_groups_kernel(bool max, const float* __restrict__ x, int32_t* __restrict__ y, int64_t outer,
                                         int64_t n, int64_t inner) {
  __shared__ Best smem[kWarps];
  constexpr int kGroups = kBlock / G;
  const int lane = static_cast<int>(threadIdx.x) % G, group = static_cast<int>(threadIdx.x) / G;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * kGroups + group; k < outer * inner;
       k += static_cast<int64_t>(gridDim.x) * kGroups) {
    const float* xk = x + (k / inner) * n * inner + k % inner;
    Best b{0.0f, -1};
    for (int64_t r = lane; r < n; r += G) {
      const float v = xk[r * inner];
      if (v != v) {  // this lane's first NaN: nothing after it in the lane can win
        b = Best{v, static_cast<int32_t>(r)};
        break;
      }
      if (b.i < 0 || (max ? v > b.v : v < b.v)) b = Best{v, static_cast<int32_t>(r)};
    }
    b = group_best<G>(b, max, smem);
    if (lane == 0) y[k] = b.i;
  }
}

template <ReduceFn F>
void reduce_as(int group_threads, const float* x, float* y, const math::Strided& kept, const math::Strided& reduced,
               int64_t outputs, int64_t count, int sms, Stream stream) {
  const Geometry g = group_geometry(outputs, group_threads, sms);
  if (!g.blocks) return;
  const auto s = static_cast<cudaStream_t>(stream);
  if (group_threads == kBlock)
    reduce_groups_kernel<F, kBlock><<<g.blocks, g.threads, 0, s>>>(x, y, kept, reduced, outputs, count);
  else
    reduce_groups_kernel<F, kWarpThreads><<<g.blocks, g.threads, 0, s>>>(x, y, kept, reduced, outputs, count);
  check(cudaGetLastError(), "cooperative reduce kernel launch", std::to_string(group_threads) + " threads per output");
}

void check_group(int group_threads, const char* where) {
  if (group_threads != kWarpThreads && group_threads != kBlock)
    throw InvalidArgument(std::string(where) + ": " + std::to_string(group_threads) +
                          " threads per output; 32 or 256 (reduce_group_threads)");
}

}  // namespace

void launch_reduce_groups(graph::ReduceFn f, int group_threads, const float* x, float* y, const math::Strided& kept,
                          const math::Strided& reduced, int64_t outputs, int64_t count, int sms, Stream stream) {
  check_group(group_threads, "launch_reduce_groups");
  switch (f) {
#define TK_CASE(name)  \
  case ReduceFn::name: \
    return reduce_as<ReduceFn::name>(group_threads, x, y, kept, reduced, outputs, count, sms, stream);
    TK_REDUCE_FNS(TK_CASE)
#undef TK_CASE
    default:
      throw InvalidArgument("launch_reduce_groups: the function names no known one");
  }
}

void launch_arg_reduce_groups(bool max, int group_threads, const float* x, int32_t* y, int64_t outer, int64_t n,
                              int64_t inner, int sms, Stream stream) {
  check_group(group_threads, "launch_arg_reduce_groups");
  const Geometry g = group_geometry(outer * inner, group_threads, sms);
  if (!g.blocks) return;
  const auto s = static_cast<cudaStream_t>(stream);
  if (group_threads == kBlock)
    arg_reduce_groups_kernel<kBlock><<<g.blocks, g.threads, 0, s>>>(max, x, y, outer, n, inner);
  else
    arg_reduce_groups_kernel<kWarpThreads><<<g.blocks, g.threads, 0, s>>>(max, x, y, outer, n, inner);
  check(cudaGetLastError(), "cooperative arg reduce kernel launch", std::to_string(group_threads) + " threads");
}

}  // namespace tk::cuda
