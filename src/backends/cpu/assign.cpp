// The two ops optimizers written in the general ops need (nn/optimizer_rule.h): StepValue reads this step's learning
// rate or update count from StepScalars; Assign overwrites a variable's storage with a value (any dtype: bytes).
#include <cstring>

#include "backends/cpu/kernels.h"
#include "graph/kernel.h"

namespace tk::cpu {
namespace {
using graph::KernelArgs;
using graph::Op;

void step_value(const KernelArgs& a) {
  *a.output<float>() =
      a.node.attrs.step_value == 0 ? a.scalars->learning_rate : static_cast<float>(a.scalars->iterations + 1);
}

void assign(const KernelArgs& a) {
  std::memcpy(const_cast<void*>(a.in[0]), a.in[1],
              static_cast<size_t>(a.in_shape(0).numel()) * dtype_size(a.in_dtypes[0]));
}

}  // namespace

void register_assign_kernels() {
  graph::register_kernel(DeviceKind::cpu, Op::StepValue, DType::f32, step_value);
  for (int t = 0; t < kDTypeCount; ++t)
    graph::register_kernel(DeviceKind::cpu, Op::Assign, static_cast<DType>(t), assign);
}

}  // namespace tk::cpu
