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

}  // namespace tk::cuda
