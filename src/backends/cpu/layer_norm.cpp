// LayerNormalization's fused kernels on the CPU: the math of backends/math/layer_norm.h (which the CUDA kernels run)
// with each row's sums vectorized (double lanes, combined in a fixed order: the bits depend on the build's vector
// width, not on the thread count or the data). Rows split between threads; the gamma gradient's column sums in double
// over rows in order, columns split between threads.
#include "backends/math/layer_norm.h"

#include <algorithm>
#include <cmath>

#include "backends/cpu/kernels.h"
#include "backends/cpu/parallel.h"
#include "graph/kernel.h"

namespace tk::cpu {
namespace {
using graph::KernelArgs;
using graph::Op;

// Row statistics and input gradient with vectorized sums (math::layer_norm_stats / layer_norm_input_grad's math).
void row_stats(const float* x, int64_t n, float eps, float* mean, float* rstd) {
  double s = 0.0;
#pragma omp simd reduction(+ : s)
  for (int64_t j = 0; j < n; ++j) s += static_cast<double>(x[j]);
  const double m = s / static_cast<double>(n);
  double v = 0.0;
#pragma omp simd reduction(+ : v)
  for (int64_t j = 0; j < n; ++j) {
    const double d = static_cast<double>(x[j]) - m;
    v += d * d;
  }
  *mean = static_cast<float>(m);
  *rstd = static_cast<float>(1.0 / std::sqrt(v / static_cast<double>(n) + static_cast<double>(eps)));
}

void row_input_grad(const float* dy, const float* x, int64_t n, float mean, float rstd, const float* gamma, float* dx) {
  double sg = 0.0, sgx = 0.0;
  const double m = mean, r = rstd;
#pragma omp simd reduction(+ : sg, sgx)
  for (int64_t j = 0; j < n; ++j) {
    const double g = static_cast<double>(dy[j]) * gamma[j];
    sg += g;
    sgx += g * ((static_cast<double>(x[j]) - m) * r);
  }
  // The sums in double; the per-element result in float (as the float32 result it is rounded to).
  const float mg = static_cast<float>(sg / static_cast<double>(n)),
              mgx = static_cast<float>(sgx / static_cast<double>(n));
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) dx[j] = rstd * (dy[j] * gamma[j] - mg - (x[j] - mean) * rstd * mgx);
}

struct Rows {
  int64_t rows, n;
};
Rows rows_of(const Shape& x) { return {x.numel() / x[-1], x[-1]}; }

void stats(const KernelArgs& a) {
  const Rows r = rows_of(a.in_shape(0));
  const float* x = a.input<float>(0);  // (rows, n)
  float* s = a.output<float>();        // (rows, 2)
  parallel_for(
      r.rows,
      [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) row_stats(x + i * r.n, r.n, a.node.attrs.epsilon, s + 2 * i, s + 2 * i + 1);
      },
      std::max<int64_t>(1, kParallelGrain / r.n));
}

void apply(const KernelArgs& a) {
  const Rows r = rows_of(a.in_shape(0));
  const float* x = a.input<float>(0);
  const float* s = a.input<float>(1);
  const float* gamma = a.input<float>(2);
  const float* beta = a.input<float>(3);
  float* y = a.output<float>();
  parallel_for(
      r.rows,
      [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i)
          math::layer_norm_apply(x + i * r.n, r.n, s[2 * i], s[2 * i + 1], gamma, beta, y + i * r.n);
      },
      std::max<int64_t>(1, kParallelGrain / r.n));
}

void input_grad(const KernelArgs& a) {
  const Rows r = rows_of(a.in_shape(1));
  const float* dy = a.input<float>(0);
  const float* x = a.input<float>(1);
  const float* s = a.input<float>(2);
  const float* gamma = a.input<float>(3);
  float* dx = a.output<float>();
  parallel_for(
      r.rows,
      [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i)
          row_input_grad(dy + i * r.n, x + i * r.n, r.n, s[2 * i], s[2 * i + 1], gamma, dx + i * r.n);
      },
      std::max<int64_t>(1, kParallelGrain / r.n));
}

// (2, n): [sum over rows of dy * xhat; sum over rows of dy], columns in blocks split between threads, rows in order
// (chunks of 16 rows in float, the chunks in double).
void gamma_grad(const KernelArgs& a) {
  const Rows r = rows_of(a.in_shape(1));
  const float* dy = a.input<float>(0);
  const float* x = a.input<float>(1);
  const float* s = a.input<float>(2);
  float* out = a.output<float>();  // (2, n)
  constexpr int64_t kBlock = 256;
  const int64_t blocks = (r.n + kBlock - 1) / kBlock;
  parallel_for(
      blocks,
      [&](int64_t b0, int64_t b1) {
        for (int64_t bl = b0; bl < b1; ++bl) {
          const int64_t j0 = bl * kBlock, m = std::min(kBlock, r.n - j0);
          // Chunks of 16 rows summed in float lanes, the chunks added in double, in row order.
          double dg[kBlock] = {}, db[kBlock] = {};
          for (int64_t i0 = 0; i0 < r.rows; i0 += 16) {
            float cg[kBlock] = {}, cb[kBlock] = {};
            for (int64_t i = i0; i < std::min(r.rows, i0 + 16); ++i) {
              const float* dyr = dy + i * r.n + j0;
              const float* xr = x + i * r.n + j0;
              const float mean = s[2 * i], rstd = s[2 * i + 1];
#pragma omp simd
              for (int64_t j = 0; j < m; ++j) {
                cg[j] += dyr[j] * ((xr[j] - mean) * rstd);
                cb[j] += dyr[j];
              }
            }
#pragma omp simd
            for (int64_t j = 0; j < m; ++j) dg[j] += cg[j], db[j] += cb[j];
          }
          for (int64_t j = 0; j < m; ++j)
            out[j0 + j] = static_cast<float>(dg[j]), out[r.n + j0 + j] = static_cast<float>(db[j]);
        }
      },
      1);
}

}  // namespace

void register_layer_norm_kernels() {
  graph::register_kernel(DeviceKind::cpu, Op::LayerNormStats, DType::f32, stats);
  graph::register_kernel(DeviceKind::cpu, Op::LayerNormApply, DType::f32, apply);
  graph::register_kernel(DeviceKind::cpu, Op::LayerNormInputGrad, DType::f32, input_grad);
  graph::register_kernel(DeviceKind::cpu, Op::LayerNormGammaGrad, DType::f32, gamma_grad);
}

}  // namespace tk::cpu
