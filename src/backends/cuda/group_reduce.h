// nvcc only (device code): included by .cu files.
// A warp's or a block's threads combining one value each into one result that every thread gets, in a fixed order
// (deterministic, no atomics): the cooperative reductions (reduce_groups.cu) and softmax rows (activations.cu).
// launch_geometry.h's reduce_group_threads chooses G; blocks are kThreadsPerBlock threads.
//
//   float m = group_reduce<256>(v, MaxF{}, smem);   // smem: __shared__ float[kWarps]; every thread of the block calls
#pragma once
#include <cuda_runtime.h>

#include "backends/cuda/launch_geometry.h"
#include "backends/math/reduce.h"

namespace tk::cuda {

constexpr int kBlock = static_cast<int>(kThreadsPerBlock);
constexpr int kWarps = kBlock / kWarpThreads;

struct AddD {
  __device__ double operator()(double a, double b) const { return a + b; }
};
struct AddF {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct MulD {
  __device__ double operator()(double a, double b) const { return a * b; }
};
struct MaxF {
  __device__ float operator()(float a, float b) const { return math::nan_max(a, b); }
};
struct MinF {
  __device__ float operator()(float a, float b) const { return math::nan_min(a, b); }
};

// Every lane of the group gets the combination of the group's values: a shuffle-down tree to lane 0 (fixed pairs),
// broadcast from lane 0, then, for a block, warps 0..7's results combined in order. `smem` holds kWarps values; the
// block's threads must all call it (G = 256: the loop over outputs is uniform per block).
template <int G, typename T, typename Op>
__device__ T group_reduce(T v, Op op, T* smem) {
  for (int off = kWarpThreads / 2; off > 0; off /= 2) v = op(v, __shfl_down_sync(0xffffffffu, v, off));
  v = __shfl_sync(0xffffffffu, v, 0);
  if constexpr (G == kWarpThreads) {
    return v;
  } else {
    const int warp = static_cast<int>(threadIdx.x) / kWarpThreads, lane = static_cast<int>(threadIdx.x) % kWarpThreads;
    if (lane == 0) smem[warp] = v;
    __syncthreads();
    T r = smem[0];
    for (int w = 1; w < kWarps; ++w) r = op(r, smem[w]);
    __syncthreads();  // smem is reused by the next call
    return r;
  }
}

}  // namespace tk::cuda
