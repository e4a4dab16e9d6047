// AllReduce on the CPU: the replicas' group does the reduction (graph/collective.h); without a group (one
// replica, the op harness) the gradient is only scaled by this replica's share of the batch.
#include <cstring>

#include "backends/cpu/kernels.h"
#include "backends/cpu/parallel.h"
#include "graph/kernel.h"

namespace tk::cpu {
namespace {

using graph::KernelArgs;
using graph::Op;

// (grad) -> sum over replicas of grad * grad_scale; zero_grad clears the input (an accumulator) afterwards.
void all_reduce(const KernelArgs& a) {
  const int64_t n = a.node.shape.numel();
  const float* x = a.input<float>(0);
  float* y = a.output<float>();
  const float w = a.scalars->grad_scale;
  if (graph::Collective* c = a.node.attrs.collective) {
    c->all_reduce(a.node.attrs.replica, x, y, n, w, a.node.name.c_str(), a.node.attrs.begin);
  } else {
    parallel_for(n, [&](int64_t b, int64_t e) {
#pragma omp simd
      for (int64_t i = b; i < e; ++i) y[i] = x[i] * w;
    });
  }
  if (a.node.attrs.zero_grad) std::memset(a.inout<float>(0), 0, sizeof(float) * static_cast<size_t>(n));
}

}  // namespace

void register_collective_kernels() { graph::register_kernel(DeviceKind::cpu, Op::AllReduce, DType::f32, all_reduce); }

}  // namespace tk::cpu
