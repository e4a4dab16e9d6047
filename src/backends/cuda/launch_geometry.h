// Launch geometry of the CUDA backend's elementwise kernels, as host code every build compiles and tests
// (tests/cuda/test_cuda_host.cpp). The kernels are grid-stride loops: any grid covers any n, so the grid is sized
// to fill the device, not to the data: 256 threads per block, at most kBlocksPerSm blocks per multiprocessor, and
// never more blocks than the elements need.
//
//   const tk::cuda::Geometry g = tk::cuda::elementwise_geometry(n, sm_count);
//   if (g.blocks) kernel<<<g.blocks, g.threads, 0, stream>>>(...);   // n == 0: nothing to launch
#pragma once
#include <cstdint>

namespace tk::cuda {

inline constexpr uint32_t kThreadsPerBlock = 256;
inline constexpr uint32_t kBlocksPerSm = 8;  // 2048 threads per SM on sm_80/sm_90: full occupancy

struct Geometry {
  uint32_t blocks = 0, threads = kThreadsPerBlock;
};

// sm_count <= 0 (unknown): as for a 132-SM H100/H200.
Geometry elementwise_geometry(int64_t n, int sm_count);

// Reductions (Reduce, ArgReduce, Softmax rows): how many threads reduce one output together. 1: a thread per output,
// its elements in index order (many short outputs, or strided ones whose neighbours are adjacent in memory, so a warp
// reads a coalesced line per step); 32: a warp per output; 256: a block per output (long reduced axes). A group's
// threads read elements lane, lane + G, ... (adjacent lanes adjacent elements where `contiguous`) and combine their
// partials in a fixed tree: the same bits every run, no atomics.
inline constexpr int kWarpThreads = 32;
int reduce_group_threads(int64_t outputs, int64_t count, bool contiguous, int sm_count);
// Blocks of kThreadsPerBlock threads for `outputs` groups of `group_threads`, as many as fill the device.
Geometry group_geometry(int64_t outputs, int group_threads, int sm_count);

}  // namespace tk::cuda
