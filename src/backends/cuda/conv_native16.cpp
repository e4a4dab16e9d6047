// float16 / bfloat16 Conv2D, FusedConv2D and their gradients on cuDNN in their own dtype (cudnn_conv.h): 16-bit
// tensors, float32 accumulation, each output rounded once, as the widened kernels compute it (backends/widen.h: the
// float32 convolution of the widened operands, rounded once). Registered over the widened kernels and falling back to
// them: a node with mixed dtypes, TK_CUDA_NATIVE16=0, cuDNN not loaded, a shape cuDNN does not take (asymmetric
// padding), no algorithm within the planned workspace, or an algorithm cuDNN refuses (cudnn_mapping.h says which).
// The planned workspace stays the widened rule's (float32 copies of the operands and the output, then the float32
// convolution's), so the memory plan does not depend on which path runs; the native path uses it for the 16-bit
// filter copy and cuDNN's workspace, which then gets more room than the float32 convolution's.
// FusedConv2D: the bias broadcast into y and cuDNN's product added to it (beta = 1) in its float32 compute, one
// rounding; the relu after it on the 16-bit values is exact (a value is kept or zeroed).
// The filter gradient is written in the node's 16-bit dtype, as Conv2DGradFilter's dtype rule says (under
// mixed_bfloat16 its cast to float32 is not folded, unlike a MatMul's: graph/fuse.h).
#include "backends/cuda/cudnn_conv.h"

#ifdef TK_HAVE_CUDA
#include <functional>
#include <span>

#include "backends/cuda/cudnn_mapping.h"
#include "backends/widen.h"
#include "graph/kernel.h"

namespace tk::cuda {

int sm_count(int index);  // cuda_kernels.cpp

namespace {
using graph::KernelArgs;
using graph::Op;
using Widened = backends::Widened<DeviceKind::cuda>;

ConvKind kind_of(Op op) {
  return op == Op::Conv2DGradInput    ? ConvKind::backward_data
         : op == Op::Conv2DGradFilter ? ConvKind::backward_filter
                                      : ConvKind::forward;
}

// The bytes the memory plan gave this node: the op's registered workspace rule (the widened one) on this node.
// -1 when the node is not one of the graph's own (then the widened kernel runs).
int64_t planned_bytes(const KernelArgs& a) {
  const graph::Node* first = a.g.nodes.data();
  const std::less<const graph::Node*> before;
  if (before(&a.node, first) || !before(&a.node, first + a.g.nodes.size())) return -1;
  const graph::WorkspaceFn rule = graph::registered_workspace(DeviceKind::cuda, a.node.op);
  return rule ? static_cast<int64_t>(rule(a.g, static_cast<int>(&a.node - first))) : 0;
}

void conv16(const KernelArgs& a) {
  const graph::Node& n = a.node;
  const std::span<const DType> inputs(a.in_dtypes, n.inputs.size());
  const int64_t planned = planned_bytes(a);
  if (planned < 0 || !native16_conv_unsupported(inputs, a.out_dtype, native16_conv_enabled()).empty()) {
    Widened::kernel(a);
    return;
  }
  const bool fused = n.op == Op::FusedConv2D;
  if (!cudnn_convolution(a, kind_of(n.op), conv_window(a.g, n), conv_filters(a.g, n), static_cast<size_t>(planned),
                         fused ? a.in[2] : nullptr)) {
    Widened::kernel(a);  // overwrites the whole output
    return;
  }
  if (fused && n.attrs.epilogue == Op::Relu)
    launch_relu16(a.out, n.shape.numel(), static_cast<int>(a.out_dtype), sm_count(a.ctx.device.index), a.ctx.stream);
}

}  // namespace

void register_native16_conv_kernels() {
  for (DType t : {DType::f16, DType::bf16})
    for (Op op : {Op::Conv2D, Op::FusedConv2D, Op::Conv2DGradInput, Op::Conv2DGradFilter})
      graph::register_kernel(DeviceKind::cuda, op, t, conv16);
}

bool conv16_is_native(graph::KernelFn fn) { return fn == conv16; }

}  // namespace tk::cuda
#else
namespace tk::cuda {
void register_native16_conv_kernels() {}
bool conv16_is_native(graph::KernelFn) { return false; }
}  // namespace tk::cuda
#endif
