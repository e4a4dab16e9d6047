#include <cblas.h>

#include <algorithm>
#include <cstring>

#include "backends/cpu/kernels.h"
#include "backends/cpu/parallel.h"
#include "graph/kernel.h"

namespace tk::cpu {
using graph::KernelArgs;
using graph::Op;

namespace {

// C(m,n) = op(A) op(B); A is (m,k) or (k,m) when transposed, B is (k,n) or (n,k).
void matmul(const KernelArgs& a) {
  const Shape& sa = a.in_shape(0);
  const Shape& sb = a.in_shape(1);
  const bool ta = a.node.attrs.trans_a, tb = a.node.attrs.trans_b;
  const auto m = static_cast<blasint>(a.node.shape[0]), n = static_cast<blasint>(a.node.shape[1]);
  const auto k = static_cast<blasint>(ta ? sa[0] : sa[1]);
  if (m == 0 || n == 0) return;
  if (k == 0) {
    std::memset(a.out, 0, sizeof(float) * static_cast<size_t>(m) * static_cast<size_t>(n));
    return;
  }
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, 1.0f,
              a.input<float>(0), static_cast<blasint>(sa[1]), a.input<float>(1), static_cast<blasint>(sb[1]), 0.0f,
              a.output<float>(), n);
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
  graph::register_kernel(DeviceKind::cpu, Op::BiasAdd, DType::f32, bias_add);
  graph::register_kernel(DeviceKind::cpu, Op::BiasGrad, DType::f32, bias_grad);
}

}  // namespace tk::cpu
