// LayerNormalization's fused kernels on the CPU: the math of backends/math/layer_norm.h (which the CUDA kernels run)
// in the row loops of layer_norm_rows.h (vector lanes chosen at run time; statistics and row sums in double). Rows
// split between threads. LayerNormGrad, the backward in one sweep: dx row by row, and the parameter sums over fixed
// blocks of rows (their number set by the row count alone), each block's sums in the workspace, added in block order:
// the bits do not depend on the thread count. LayerNormGammaGrad alone (when dx is not needed): columns split between
// threads, rows in order.
#include <algorithm>
#include <cstddef>

#include "backends/cpu/kernels.h"
#include "backends/cpu/layer_norm_rows.h"
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
// Calls f(b, e) over blocks [b, e) of r's rows, split between threads.
template <typename F>
void for_rows(Rows r, F f) {
  parallel_for(r.rows, f, std::max<int64_t>(1, kParallelGrain / r.n));
}

void stats(const KernelArgs& a) {
  const Rows r = rows_of(a.in_shape(0));
  const float* x = a.input<float>(0);  // (rows, n)
  float* s = a.output<float>();        // (rows, 2)
  for_rows(r, [&](int64_t b, int64_t e) {
    layer_norm_stats_rows(x + b * r.n, s + 2 * b, e - b, r.n, a.node.attrs.epsilon);
  });
}

void apply(const KernelArgs& a) {
  const Rows r = rows_of(a.in_shape(0));
  const float* x = a.input<float>(0);
  const float* s = a.input<float>(1);
  const float* gamma = a.input<float>(2);
  const float* beta = a.input<float>(3);
  float* y = a.output<float>();
  for_rows(r, [&](int64_t b, int64_t e) {
    layer_norm_apply_rows(x + b * r.n, s + 2 * b, gamma, beta, y + b * r.n, e - b, r.n);
  });
}

void input_grad(const KernelArgs& a) {
  const Rows r = rows_of(a.in_shape(1));
  const float* dy = a.input<float>(0);
  const float* x = a.input<float>(1);
  const float* s = a.input<float>(2);
  const float* gamma = a.input<float>(3);
  float* dx = a.output<float>();
  for_rows(r, [&](int64_t b, int64_t e) {
    layer_norm_input_grad_rows(dy + b * r.n, x + b * r.n, s + 2 * b, gamma, dx + b * r.n, e - b, r.n);
  });
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

// LayerNormGrad's blocks of rows: at most 32, each a multiple of 16 rows (the float chunks) but the last.
struct GradBlocks {
  int64_t count, rows;  // blocks, rows per block
};
GradBlocks grad_blocks(int64_t rows) {
  const int64_t want = std::clamp<int64_t>((rows + 15) / 16, 1, 32);
  const int64_t per = ((rows + want - 1) / want + 15) / 16 * 16;
  return {std::max<int64_t>(1, (rows + per - 1) / per), per};
}

// Per block: its sums (2n doubles), then its float chunk (2n floats).
size_t grad_workspace(const graph::Graph& g, int node) {
  const Rows r = rows_of(g[g[node].inputs[1]].shape);
  return static_cast<size_t>(grad_blocks(r.rows).count * 2 * r.n) * (sizeof(double) + sizeof(float));
}

// (dy, x, stats, gamma) -> (rows + 2, n): dx, then the sums over rows of dy * xhat (gamma's) and of dy (beta's).
void grad(const KernelArgs& a) {
  const Rows r = rows_of(a.in_shape(1));
  const float* dy = a.input<float>(0);
  const float* x = a.input<float>(1);
  const float* s = a.input<float>(2);
  const float* gamma = a.input<float>(3);
  float* out = a.output<float>();
  const GradBlocks bl = grad_blocks(r.rows);
  auto* acc = static_cast<double*>(a.workspace);                       // (blocks, 2, n)
  float* chunks = reinterpret_cast<float*>(acc + bl.count * 2 * r.n);  // (blocks, 2, n)
  parallel_for(
      bl.count,
      [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
          const int64_t i0 = b * bl.rows, i1 = std::min(r.rows, i0 + bl.rows);
          double* sums = acc + b * 2 * r.n;
          std::fill(sums, sums + 2 * r.n, 0.0);
          layer_norm_grad_rows(dy + i0 * r.n, x + i0 * r.n, s + 2 * i0, gamma, out + i0 * r.n, i1 - i0, r.n, sums,
                               chunks + b * 2 * r.n);
        }
      },
      r.rows * r.n <= kParallelGrain ? bl.count : 1);
  float* params = out + r.rows * r.n;  // (2, n)
  parallel_for(2 * r.n, [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      double v = 0.0;
      for (int64_t b = 0; b < bl.count; ++b) v += acc[b * 2 * r.n + j];
      params[j] = static_cast<float>(v);
    }
  });
}

}  // namespace

void register_layer_norm_kernels() {
  graph::register_kernel(DeviceKind::cpu, Op::LayerNormStats, DType::f32, stats);
  graph::register_kernel(DeviceKind::cpu, Op::LayerNormApply, DType::f32, apply);
  graph::register_kernel(DeviceKind::cpu, Op::LayerNormInputGrad, DType::f32, input_grad);
  graph::register_kernel(DeviceKind::cpu, Op::LayerNormGammaGrad, DType::f32, gamma_grad);
  graph::register_kernel(DeviceKind::cpu, Op::LayerNormGrad, DType::f32, grad);
  graph::register_workspace(DeviceKind::cpu, Op::LayerNormGrad, grad_workspace);
}

}  // namespace tk::cpu
