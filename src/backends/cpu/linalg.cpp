#include <algorithm>
#include <cstddef>
#include <cstring>

#include "backends/cpu/column_sums.h"
#include "backends/cpu/gemm.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/parallel.h"
#include "graph/kernel.h"
#include "graph/schedule.h"

namespace tk::cpu {
using graph::KernelArgs;
using graph::Op;

namespace {

// A FusedMatMul that also writes the bias gradient (graph/fuse.h) keeps its column sums' partials first in its
// workspace, then the GEMM's scratch (sized without building anything on the step's path).
size_t side_sums_bytes(const graph::Node& n) {
  if (!n.attrs.side_output) return 0;
  const size_t bytes = ColumnSums(n.shape[0], n.shape[1]).workspace_bytes();
  return (bytes + graph::kArenaAlignment - 1) / graph::kArenaAlignment * graph::kArenaAlignment;  // the GEMM's after
}
size_t matmul_workspace(const graph::Graph& g, int node) {
  return side_sums_bytes(g[node]) + gemm_workspace(gemm_shape(g, g[node]));
}

void matmul(const KernelArgs& a) {
  gemm(gemm_shape(a.g, a.node), a.input<float>(0), a.input<float>(1), nullptr, nullptr, a.output<float>(), a.workspace);
}

// (a, b, bias) or (a, b, y): the product and its epilogue in one kernel (gemm.h).
// With attrs.side_output (relu_grad only), the bias gradient too: the output's column sums, added by the epilogue's
// pass (gemm.h).
void fused_matmul(const KernelArgs& a) {
  const GemmShape s = gemm_shape(a.g, a.node);
  const float* e = a.input<float>(2);
  const SumsOut sums{static_cast<float*>(a.side_out), static_cast<double*>(a.workspace)};
  void* gemm_ws = static_cast<std::byte*>(a.workspace) + (a.side_out ? side_sums_bytes(a.node) : 0);
  gemm(s, a.input<float>(0), a.input<float>(1), s.epilogue == Epilogue::relu_grad ? nullptr : e,
       s.epilogue == Epilogue::relu_grad ? e : nullptr, a.output<float>(), gemm_ws, a.side_out ? &sums : nullptr);
}

// y(rows, n) = x(rows, n) + b(n)
void bias_add(const KernelArgs& a) {
  const int64_t n = a.node.shape[-1], rows = a.node.shape.numel() / (n ? n : 1);
  const float* x = a.input<float>(0);
  const float* b = a.input<float>(1);
  float* y = a.output<float>();
  parallel_for(
      rows,
      [&](int64_t rb, int64_t re) {
        for (int64_t r = rb; r < re; ++r) {
#pragma omp simd
          for (int64_t j = 0; j < n; ++j) y[r * n + j] = x[r * n + j] + b[j];
        }
      },
      kParallelGrain / std::max<int64_t>(n, 1));
}

// db(n) = column sums of dy(rows, n), accumulated in double: a convolution's bias gradient sums batch x height x
// width rows (100k for the tutorial CNN's first layer), where float accumulation loses about log2(rows) bits, and
// data-parallel replicas must agree with one device on the sum however the rows are split (nn/distribute/). Over
// fixed chunks of rows, spread over the threads (column_sums.h).
size_t bias_grad_workspace(const graph::Graph& g, int node) {
  const int64_t n = g[node].shape[0];
  return ColumnSums(g[g[node].inputs[0]].shape.numel() / (n ? n : 1), n).workspace_bytes();
}
void bias_grad(const KernelArgs& a) {
  const int64_t n = a.node.shape[0], rows = a.in_shape(0).numel() / (n ? n : 1);
  column_sums(a.input<float>(0), rows, n, static_cast<double*>(a.workspace), a.output<float>());
}

}  // namespace

void register_linalg_kernels() {
  graph::register_kernel(DeviceKind::cpu, Op::MatMul, DType::f32, matmul);
  graph::register_kernel(DeviceKind::cpu, Op::FusedMatMul, DType::f32, fused_matmul);
  graph::register_workspace(DeviceKind::cpu, Op::MatMul, matmul_workspace);
  graph::register_workspace(DeviceKind::cpu, Op::FusedMatMul, matmul_workspace);
  graph::register_kernel(DeviceKind::cpu, Op::BiasAdd, DType::f32, bias_add);
  graph::register_kernel(DeviceKind::cpu, Op::BiasGrad, DType::f32, bias_grad);
  graph::register_workspace(DeviceKind::cpu, Op::BiasGrad, bias_grad_workspace);
}

}  // namespace tk::cpu
