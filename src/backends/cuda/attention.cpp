// The fused attention ops on CUDA (graph/attention_rules.h): the kernels of attention.cu, queued on the compute
// stream. float32; 16-bit through widen.cpp.
#ifdef TK_HAVE_CUDA
#include "backends/cuda/attention_launchers.h"
#include "graph/attention_rules.h"
#include "graph/kernel.h"

namespace tk::cuda {

int sm_count(int index);  // cuda_kernels.cpp

namespace {
using graph::AttentionLayout;
using graph::KernelArgs;
using graph::Op;

AttentionDims dims_of(const AttentionLayout& L) {
  return {L.batch, L.heads, L.steps_q, L.steps_k, L.dim, L.dim_v, L.causal, L.scale};
}

// The gradient's (N * H * T) logsumexps and rowsum(do * o), between its two kernels.
size_t grad_workspace(const graph::Graph& g, int node) {
  const AttentionLayout L = graph::attention_layout(g, node);
  return sizeof(float) * static_cast<size_t>(2 * L.batch * L.heads * L.steps_q);
}

void attention(const KernelArgs& a) {
  const AttentionLayout L = graph::attention_layout(a.g, a.node);
  launch_attention(dims_of(L), a.input<float>(0), a.input<float>(1), a.input<float>(2),
                   L.has_mask ? a.input<float>(3) : nullptr, a.output<float>(), sm_count(a.ctx.device.index),
                   a.ctx.stream);
}

void attention_grad(const KernelArgs& a) {
  const AttentionLayout L = graph::attention_layout(a.g, a.node);
  launch_attention_grad(dims_of(L), a.input<float>(0), a.input<float>(1), a.input<float>(2), a.input<float>(3),
                        a.input<float>(4), L.has_mask ? a.input<float>(5) : nullptr, a.output<float>(),
                        static_cast<float*>(a.workspace), sm_count(a.ctx.device.index), a.ctx.stream);
}

}  // namespace

void register_attention_kernels() {
  graph::register_kernel(DeviceKind::cuda, Op::Attention, DType::f32, attention);
  graph::register_kernel(DeviceKind::cuda, Op::AttentionGrad, DType::f32, attention_grad);
  graph::register_workspace(DeviceKind::cuda, Op::AttentionGrad, grad_workspace);
}

}  // namespace tk::cuda
#endif
