// AllReduce on the CPU: the replicas' group does the reduction (graph/collective.h); without a group (one
// replica, the op harness) the gradient is only scaled by this replica's share of the batch.
#include <algorithm>
#include <cstring>

#include "backends/cpu/kernels.h"
#include "backends/cpu/parallel.h"
#include "graph/bucket.h"
#include "graph/kernel.h"

namespace tk::cpu {
namespace {

using graph::KernelArgs;
using graph::Op;

// (grad) -> sum over replicas of grad * grad_scale; zero_grad clears the input (an accumulator) afterwards.
// A bucket (k > 1 inputs, graph/bucket.h): the gradients are packed into the flat output at their offsets (the
// padding zeroed), and the bucket is reduced in place: one collective for all of them.
void all_reduce(const KernelArgs& a) {
  const size_t k = a.node.inputs.size();
  float* y = a.output<float>();
  const int64_t n = a.node.shape.numel();
  const float* x = y;
  if (k == 1) {
    x = a.input<float>(0);
  } else {
    int64_t at = 0;
    for (size_t i = 0; i < k; ++i) {  // (n_i) -> y[at, at + slot)
      const int64_t len = a.in_shape(static_cast<int>(i)).numel(), slot = graph::bucket_slot(len);
      const float* src = a.input<float>(static_cast<int>(i));
      float* dst = y + at;
      parallel_for(len, [&](int64_t b, int64_t e) {
        std::memcpy(dst + b, src + b, sizeof(float) * static_cast<size_t>(e - b));
      });
      std::fill(dst + len, dst + slot, 0.0f);
      at += slot;
    }
  }
  const float w = a.scalars->grad_scale;
  if (graph::Collective* c = a.node.attrs.collective) {
    if (a.node.attrs.overlap)  // its AllReduceWait finishes it
      c->start_all_reduce(a.node.attrs.replica, x, y, n, w, a.node.name.c_str(), a.node.attrs.begin);
    else
      c->all_reduce(a.node.attrs.replica, x, y, n, w, a.node.name.c_str(), a.node.attrs.begin);
  } else {
    parallel_for(n, [&](int64_t b, int64_t e) {
#pragma omp simd
      for (int64_t i = b; i < e; ++i) y[i] = x[i] * w;
    });
  }
  if (a.node.attrs.zero_grad)
    for (size_t i = 0; i < k; ++i)
      std::memset(a.inout<float>(static_cast<int>(i)), 0,
                  sizeof(float) * static_cast<size_t>(a.in_shape(static_cast<int>(i)).numel()));
}

// (a started AllReduce) -> the same memory, once its reduction is done.
void all_reduce_wait(const KernelArgs& a) {
  const graph::Node& started = a.g[a.node.inputs[0]];
  if (graph::Collective* c = started.attrs.collective) c->finish_all_reduce(started.attrs.replica, started.attrs.begin);
}

}  // namespace

void register_collective_kernels() {
  graph::register_kernel(DeviceKind::cpu, Op::AllReduce, DType::f32, all_reduce);
  graph::register_kernel(DeviceKind::cpu, Op::AllReduceWait, DType::f32, all_reduce_wait);
}

}  // namespace tk::cpu
