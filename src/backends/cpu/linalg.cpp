#include <algorithm>
#include <cstring>

#include "backends/cpu/gemm.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/parallel.h"
#include "graph/kernel.h"

namespace tk::cpu {
using graph::KernelArgs;
using graph::Op;

namespace {

size_t matmul_workspace(const graph::Graph& g, int node) { return gemm_workspace(gemm_shape(g, g[node])); }

void matmul(const KernelArgs& a) {
  gemm(gemm_shape(a.g, a.node), a.input<float>(0), a.input<float>(1), nullptr, nullptr, a.output<float>(), a.workspace);
}

// (a, b, bias) or (a, b, y): the product and its epilogue in one kernel (gemm.h).
void fused_matmul(const KernelArgs& a) {
  const GemmShape s = gemm_shape(a.g, a.node);
  const float* e = a.input<float>(2);
  gemm(s, a.input<float>(0), a.input<float>(1), s.epilogue == Epilogue::relu_grad ? nullptr : e,
       s.epilogue == Epilogue::relu_grad ? e : nullptr, a.output<float>(), a.workspace);
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

// db(n) = sum over rows of dy(rows, n)
// db(n) = column sums of dy(rows, n), accumulated in double: a convolution's bias gradient sums batch x height x
// width rows (100k for the tutorial CNN's first layer), where float accumulation loses about log2(rows) bits, and
// data-parallel replicas must agree with one device on the sum however the rows are split (nn/distribute/).
void bias_grad(const KernelArgs& a) {
  const int64_t n = a.node.shape[0], rows = a.in_shape(0).numel() / (n ? n : 1);
  const float* dy = a.input<float>(0);
  float* db = a.output<float>();
  constexpr int64_t kColumns = 256;  // accumulators on the stack, a block of columns at a time
  double acc[kColumns];
  for (int64_t j0 = 0; j0 < n; j0 += kColumns) {
    const int64_t w = std::min(kColumns, n - j0);
    std::fill(acc, acc + w, 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = dy + r * n + j0;
#pragma omp simd
      for (int64_t j = 0; j < w; ++j) acc[j] += double(row[j]);
    }
    for (int64_t j = 0; j < w; ++j) db[j0 + j] = static_cast<float>(acc[j]);
  }
}

}  // namespace

void register_linalg_kernels() {
  graph::register_kernel(DeviceKind::cpu, Op::MatMul, DType::f32, matmul);
  graph::register_kernel(DeviceKind::cpu, Op::FusedMatMul, DType::f32, fused_matmul);
  graph::register_workspace(DeviceKind::cpu, Op::MatMul, matmul_workspace);
  graph::register_workspace(DeviceKind::cpu, Op::FusedMatMul, matmul_workspace);
  graph::register_kernel(DeviceKind::cpu, Op::BiasAdd, DType::f32, bias_add);
  graph::register_kernel(DeviceKind::cpu, Op::BiasGrad, DType::f32, bias_grad);
}

}  // namespace tk::cpu
