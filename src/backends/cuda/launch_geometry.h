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

}  // namespace tk::cuda
