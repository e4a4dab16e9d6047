// Which ops the CUDA backend does not run yet, and why (cuda_kernels.h).
#include "backends/cuda/cuda_kernels.h"

namespace tk::cuda {

const std::vector<Excluded>& excluded_ops() {
  using graph::Op;
  constexpr std::string_view kCudnn = "on cuDNN, not written yet (issue 13)";
  static const std::vector<Excluded> list = {
      {Op::Conv2D, kCudnn},         {Op::Conv2DGradInput, kCudnn}, {Op::Conv2DGradFilter, kCudnn},
      {Op::FusedConv2D, kCudnn},    {Op::MaxPool2D, kCudnn},       {Op::MaxPool2DGrad, kCudnn},
      {Op::AvgPool2D, kCudnn},      {Op::AvgPool2DGrad, kCudnn},   {Op::BnStats, kCudnn},
      {Op::BnApply, kCudnn},        {Op::BnInputGrad, kCudnn},     {Op::BnGammaGrad, kCudnn},
      {Op::BnInference, kCudnn},    {Op::BnInferenceGrad, kCudnn}, {Op::BnInferenceGammaGrad, kCudnn},
      {Op::BnUpdateMoving, kCudnn},
  };
  return list;
}

}  // namespace tk::cuda
