#include "backends/cuda/launch_geometry.h"

#include <algorithm>

namespace tk::cuda {

Geometry elementwise_geometry(int64_t n, int sm_count) {
  Geometry g;
  if (n <= 0) return g;
  const int64_t sms = sm_count > 0 ? sm_count : 132;
  const int64_t needed = (n + kThreadsPerBlock - 1) / kThreadsPerBlock;
  g.blocks = static_cast<uint32_t>(std::min<int64_t>(needed, sms * kBlocksPerSm));
  return g;
}

int reduce_group_threads(int64_t outputs, int64_t count, bool contiguous, int sm_count) {
  const int64_t sms = sm_count > 0 ? sm_count : 132;
  if (count < kWarpThreads) return 1;  // a group would idle most of its lanes
  // Strided elements (a column sum): a thread per output reads coalesced across outputs; enough of them fill the
  // device (half its resident threads) without cooperation.
  if (!contiguous && outputs >= sms * kBlocksPerSm * kThreadsPerBlock / 2) return 1;
  return count >= 1024 ? static_cast<int>(kThreadsPerBlock) : kWarpThreads;
}

Geometry group_geometry(int64_t outputs, int group_threads, int sm_count) {
  Geometry g;
  if (outputs <= 0 || group_threads <= 0) return g;
  const int64_t sms = sm_count > 0 ? sm_count : 132, per_block = kThreadsPerBlock / group_threads;
  g.blocks = static_cast<uint32_t>(std::min<int64_t>((outputs + per_block - 1) / per_block, sms * kBlocksPerSm));
  return g;
}

}  // namespace tk::cuda
