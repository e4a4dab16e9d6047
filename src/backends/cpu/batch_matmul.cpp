// BatchMatMul on the CPU: one GEMM (gemm.h: OpenBLAS or oneDNN, whichever is faster for the shape) per batch
// element, the operands' batch axes broadcast (math::Strided over the batch axes, strides in matrices).
#include "backends/cpu/gemm.h"
#include "backends/cpu/kernels.h"
#include "backends/strided.h"
#include "graph/kernel.h"

namespace tk::cpu {
namespace {
using graph::KernelArgs;
using graph::Op;

GemmShape batch_gemm_shape(const graph::Graph& g, const graph::Node& n) {
  const Shape& a = g[n.inputs[0]].shape;
  GemmShape s;
  s.m = n.shape[-2];
  s.n = n.shape[-1];
  s.k = n.attrs.trans_a ? a[-2] : a[-1];
  s.ta = n.attrs.trans_a;
  s.tb = n.attrs.trans_b;
  return s;
}

Shape batch_part(const Shape& s) { return Shape(std::vector<int64_t>(s.dims().begin(), s.dims().end() - 2)); }

size_t batch_matmul_workspace(const graph::Graph& g, int node) { return gemm_workspace(batch_gemm_shape(g, g[node])); }

void batch_matmul(const KernelArgs& a) {
  const GemmShape s = batch_gemm_shape(a.g, a.node);
  const Shape ab = batch_part(a.in_shape(0)), bb = batch_part(a.in_shape(1)), yb = batch_part(a.node.shape);
  const math::Strided l = backends::broadcast_layout(yb, {&ab, &bb});
  const int64_t batches = yb.numel(), asize = s.m * s.k, bsize = s.k * s.n, ysize = s.m * s.n;
  const float* x = a.input<float>(0);  // (..., m, k) or (..., k, m)
  const float* w = a.input<float>(1);  // (..., k, n) or (..., n, k)
  float* y = a.output<float>();        // (..., m, n)
  for (int64_t i = 0; i < batches; ++i)
    gemm(s, x + math::strided_offset(l, 0, i) * asize, w + math::strided_offset(l, 1, i) * bsize, nullptr, nullptr,
         y + i * ysize, a.workspace);
}

}  // namespace

void register_batch_matmul_kernels() {
  graph::register_kernel(DeviceKind::cpu, Op::BatchMatMul, DType::f32, batch_matmul);
  graph::register_workspace(DeviceKind::cpu, Op::BatchMatMul, batch_matmul_workspace);
}

}  // namespace tk::cpu
