// The ops that write variables outside the fused update rules: StepValue reads this step's learning rate or update
// count from StepScalars and Assign overwrites a variable's storage with a value (any dtype: bytes), the two ops
// optimizers written in the general ops need (nn/optimizer_rule.h); Constrain applies a Keras weight constraint in
// place after the update (backends/math/constraints.h).
#include <cstring>

#include "backends/cpu/kernels.h"
#include "backends/op_layouts.h"
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

void constrain(const KernelArgs& a) {
  const math::ConstraintLayout l = backends::constraint_layout(a.in_shape(0), a.node.attrs);
  float* w = a.inout<float>(0);
  for (int64_t k = 0; k < l.slices; ++k) math::constrain_slice(w, l, k);
}

}  // namespace

void register_assign_kernels() {
  graph::register_kernel(DeviceKind::cpu, Op::Constrain, DType::f32, constrain);
  graph::register_kernel(DeviceKind::cpu, Op::StepValue, DType::f32, step_value);
  for (int t = 0; t < kDTypeCount; ++t)
    graph::register_kernel(DeviceKind::cpu, Op::Assign, static_cast<DType>(t), assign);
}

}  // namespace tk::cpu
