// LayerNormalization's fused kernels on the CPU (backends/math/layer_norm.h): rows split between threads; the gamma
// gradient's column sums in double over rows in order, columns split between threads (the bits do not depend on the
// thread count).
#include "backends/math/layer_norm.h"

#include <algorithm>

#include "backends/cpu/kernels.h"
#include "backends/cpu/parallel.h"
#include "graph/kernel.h"

namespace tk::cpu {
namespace {
using graph::KernelArgs;
using graph::Op;

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
        for (int64_t i = b; i < e; ++i)
          math::layer_norm_stats(x + i * r.n, r.n, a.node.attrs.epsilon, s + 2 * i, s + 2 * i + 1);
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
          math::layer_norm_input_grad(dy + i * r.n, x + i * r.n, r.n, s[2 * i], s[2 * i + 1], gamma, dx + i * r.n);
      },
      std::max<int64_t>(1, kParallelGrain / r.n));
}

void gamma_grad(const KernelArgs& a) {
  const Rows r = rows_of(a.in_shape(1));
  const float* dy = a.input<float>(0);
  const float* x = a.input<float>(1);
  const float* s = a.input<float>(2);
  float* dg = a.output<float>();  // (n)
  constexpr int64_t kBlock = 256;
  const int64_t blocks = (r.n + kBlock - 1) / kBlock;
  parallel_for(
      blocks,
      [&](int64_t b0, int64_t b1) {
        for (int64_t bl = b0; bl < b1; ++bl) {
          const int64_t j0 = bl * kBlock, m = std::min(kBlock, r.n - j0);
          double acc[kBlock] = {};
          for (int64_t i = 0; i < r.rows; ++i) {
            const float* dyr = dy + i * r.n + j0;
            const float* xr = x + i * r.n + j0;
            const double mean = s[2 * i], rstd = s[2 * i + 1];
            for (int64_t j = 0; j < m; ++j) acc[j] += static_cast<double>(dyr[j]) * ((xr[j] - mean) * rstd);
          }
          for (int64_t j = 0; j < m; ++j) dg[j0 + j] = static_cast<float>(acc[j]);
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
