// Which ops the CUDA backend does not run yet, and why (cuda_kernels.h).
#include "backends/cuda/cuda_kernels.h"

namespace tk::cuda {

const std::vector<Excluded>& excluded_ops() {
  using graph::Op;
  constexpr std::string_view kBatchNorm = "BatchNormalization on CUDA is not written yet (issue 13)";
  static const std::vector<Excluded> list = {
      {Op::BnStats, kBatchNorm},
      {Op::BnApply, kBatchNorm},
      {Op::BnInputGrad, kBatchNorm},
      {Op::BnGammaGrad, kBatchNorm},
      {Op::BnInference, kBatchNorm},
      {Op::BnInferenceGrad, kBatchNorm},
      {Op::BnInferenceGammaGrad, kBatchNorm},
      {Op::BnUpdateMoving, kBatchNorm},
  };
  return list;
}

}  // namespace tk::cuda
