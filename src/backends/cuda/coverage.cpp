// Which ops the CUDA backend does not run yet, and why (cuda_kernels.h). Empty while every op with a float32 CPU
// kernel has a CUDA one; an entry is {Op::X, "why (issue N)"}.
#include "backends/cuda/cuda_kernels.h"

namespace tk::cuda {

const std::vector<Excluded>& excluded_ops() {
  static const std::vector<Excluded> list = {};
  return list;
}

}  // namespace tk::cuda
