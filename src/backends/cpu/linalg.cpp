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
void bias_grad(const KernelArgs& a) {
  const int64_t n = a.node.shape[0], rows = a.in_shape(0).numel() / (n ? n : 1);
  const float* dy = a.input<float>(0);
  float* db = a.output<float>();
  std::memset(db, 0, sizeof(float) * static_cast<size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) db[j] += dy[r * n + j];
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
