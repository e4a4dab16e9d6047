// The lanes of layer_norm_rows.h: one generic row loop per kernel (vectorized by `omp simd`), instantiated in a
// function per ISA compiled for it by a target attribute (AVX-512F with 512-bit vectors preferred, AVX2 + FMA, the
// build's baseline), so the build's -march does not decide; the ISA is chosen per call (by default the CPU's best,
// found once with __builtin_cpu_supports in vector_exp.cpp).
#include "backends/cpu/layer_norm_rows.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "trainkit/core/error.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TK_LN_X86 1
#define TK_LN_AVX2 __attribute__((target("avx2,fma"), noinline))
#define TK_LN_AVX512 __attribute__((target("avx512f,avx2,fma,prefer-vector-width=512"), noinline))
#endif
#define TK_LN_INLINE [[gnu::always_inline]] inline

namespace tk::cpu {
namespace {

// math::layer_norm_stats over one row, the sums in double lanes.
TK_LN_INLINE void stats_row(const float* x, int64_t n, float eps, float* out) {
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
  out[0] = static_cast<float>(m);
  out[1] = static_cast<float>(1.0 / std::sqrt(v / static_cast<double>(n) + static_cast<double>(eps)));
}

// math::layer_norm_apply: y = x * inv + (beta - mean * inv), inv = rstd * gamma (Keras' order of operations).
TK_LN_INLINE void apply_row(const float* __restrict x, float mean, float rstd, const float* __restrict gamma,
                            const float* __restrict beta, float* __restrict y, int64_t n) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) {
    const float inv = rstd * gamma[j];
    y[j] = x[j] * inv + (beta[j] - mean * inv);
  }
}

// The two row sums of the input gradient, sum(g) and sum(g * xhat) with g = dy * gamma, in double lanes; returned as
// their means in float.
TK_LN_INLINE void grad_means(const float* __restrict dy, const float* __restrict x, const float* __restrict gamma,
                             float mean, float rstd, int64_t n, float* mg, float* mgx) {
  double sg = 0.0, sgx = 0.0;
  const double m = mean, r = rstd;
#pragma omp simd reduction(+ : sg, sgx)
  for (int64_t j = 0; j < n; ++j) {
    const double g = static_cast<double>(dy[j]) * gamma[j];
    sg += g;
    sgx += g * ((static_cast<double>(x[j]) - m) * r);
  }
  *mg = static_cast<float>(sg / static_cast<double>(n));
  *mgx = static_cast<float>(sgx / static_cast<double>(n));
}

// dx = rstd * (dy * gamma - mean(g) - xhat * mean(g * xhat)), per element in float.
TK_LN_INLINE void input_grad_row(const float* __restrict dy, const float* __restrict x, float mean, float rstd,
                                 const float* __restrict gamma, float* __restrict dx, int64_t n) {
  float mg, mgx;
  grad_means(dy, x, gamma, mean, rstd, n, &mg, &mgx);
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) dx[j] = rstd * (dy[j] * gamma[j] - mg - (x[j] - mean) * rstd * mgx);
}

// input_grad_row, and cg[j] += dy * xhat, cb[j] += dy in the same pass over the row.
TK_LN_INLINE void grad_row(const float* __restrict dy, const float* __restrict x, float mean, float rstd,
                           const float* __restrict gamma, float* __restrict dx, float* __restrict cg,
                           float* __restrict cb, int64_t n) {
  float mg, mgx;
  grad_means(dy, x, gamma, mean, rstd, n, &mg, &mgx);
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) {
    const float d = dy[j], xhat = (x[j] - mean) * rstd;
    dx[j] = rstd * (d * gamma[j] - mg - xhat * mgx);
    cg[j] += d * xhat;
    cb[j] += d;
  }
}

TK_LN_INLINE void stats_loop(const float* x, float* stats, int64_t rows, int64_t n, float eps) {
  for (int64_t i = 0; i < rows; ++i) stats_row(x + i * n, n, eps, stats + 2 * i);
}
TK_LN_INLINE void apply_loop(const float* x, const float* stats, const float* gamma, const float* beta, float* y,
                             int64_t rows, int64_t n) {
  for (int64_t i = 0; i < rows; ++i) apply_row(x + i * n, stats[2 * i], stats[2 * i + 1], gamma, beta, y + i * n, n);
}
TK_LN_INLINE void input_grad_loop(const float* dy, const float* x, const float* stats, const float* gamma, float* dx,
                                  int64_t rows, int64_t n) {
  for (int64_t i = 0; i < rows; ++i)
    input_grad_row(dy + i * n, x + i * n, stats[2 * i], stats[2 * i + 1], gamma, dx + i * n, n);
}
TK_LN_INLINE void grad_loop(const float* dy, const float* x, const float* stats, const float* gamma, float* dx,
                            int64_t rows, int64_t n, double* __restrict acc, float* __restrict chunk) {
  float* cg = chunk;
  float* cb = chunk + n;
  for (int64_t i0 = 0; i0 < rows; i0 += 16) {
    std::fill(chunk, chunk + 2 * n, 0.0f);
    const int64_t i1 = std::min(rows, i0 + 16);
    for (int64_t i = i0; i < i1; ++i)
      grad_row(dy + i * n, x + i * n, stats[2 * i], stats[2 * i + 1], gamma, dx + i * n, cg, cb, n);
#pragma omp simd
    for (int64_t j = 0; j < 2 * n; ++j) acc[j] += static_cast<double>(chunk[j]);
  }
}

#if TK_LN_X86
TK_LN_AVX512 void stats_avx512(const float* x, float* s, int64_t rows, int64_t n, float eps) {
  stats_loop(x, s, rows, n, eps);
}
TK_LN_AVX2 void stats_avx2(const float* x, float* s, int64_t rows, int64_t n, float eps) {
  stats_loop(x, s, rows, n, eps);
}
TK_LN_AVX512 void apply_avx512(const float* x, const float* s, const float* g, const float* b, float* y, int64_t rows,
                               int64_t n) {
  apply_loop(x, s, g, b, y, rows, n);
}
TK_LN_AVX2 void apply_avx2(const float* x, const float* s, const float* g, const float* b, float* y, int64_t rows,
                           int64_t n) {
  apply_loop(x, s, g, b, y, rows, n);
}
TK_LN_AVX512 void input_grad_avx512(const float* dy, const float* x, const float* s, const float* g, float* dx,
                                    int64_t rows, int64_t n) {
  input_grad_loop(dy, x, s, g, dx, rows, n);
}
TK_LN_AVX2 void input_grad_avx2(const float* dy, const float* x, const float* s, const float* g, float* dx,
                                int64_t rows, int64_t n) {
  input_grad_loop(dy, x, s, g, dx, rows, n);
}
TK_LN_AVX512 void grad_avx512(const float* dy, const float* x, const float* s, const float* g, float* dx, int64_t rows,
                              int64_t n, double* acc, float* chunk) {
  grad_loop(dy, x, s, g, dx, rows, n, acc, chunk);
}
TK_LN_AVX2 void grad_avx2(const float* dy, const float* x, const float* s, const float* g, float* dx, int64_t rows,
                          int64_t n, double* acc, float* chunk) {
  grad_loop(dy, x, s, g, dx, rows, n, acc, chunk);
}
#endif

void check(VecIsa isa) {
  if (!vec_isa_supported(isa))
    throw Unsupported("layer_norm_rows: ISA " + std::to_string(static_cast<int>(isa)) +
                      " asked for, which this CPU lacks; pass best_vec_isa()");
}

}  // namespace

void layer_norm_stats_rows(const float* x, float* stats, int64_t rows, int64_t n, float eps, VecIsa isa) {
  check(isa);
#if TK_LN_X86
  if (isa == VecIsa::avx512) return stats_avx512(x, stats, rows, n, eps);
  if (isa == VecIsa::avx2) return stats_avx2(x, stats, rows, n, eps);
#endif
  stats_loop(x, stats, rows, n, eps);
}

void layer_norm_apply_rows(const float* x, const float* stats, const float* gamma, const float* beta, float* y,
                           int64_t rows, int64_t n, VecIsa isa) {
  check(isa);
#if TK_LN_X86
  if (isa == VecIsa::avx512) return apply_avx512(x, stats, gamma, beta, y, rows, n);
  if (isa == VecIsa::avx2) return apply_avx2(x, stats, gamma, beta, y, rows, n);
#endif
  apply_loop(x, stats, gamma, beta, y, rows, n);
}

void layer_norm_input_grad_rows(const float* dy, const float* x, const float* stats, const float* gamma, float* dx,
                                int64_t rows, int64_t n, VecIsa isa) {
  check(isa);
#if TK_LN_X86
  if (isa == VecIsa::avx512) return input_grad_avx512(dy, x, stats, gamma, dx, rows, n);
  if (isa == VecIsa::avx2) return input_grad_avx2(dy, x, stats, gamma, dx, rows, n);
#endif
  input_grad_loop(dy, x, stats, gamma, dx, rows, n);
}

void layer_norm_grad_rows(const float* dy, const float* x, const float* stats, const float* gamma, float* dx,
                          int64_t rows, int64_t n, double* acc, float* chunk, VecIsa isa) {
  check(isa);
#if TK_LN_X86
  if (isa == VecIsa::avx512) return grad_avx512(dy, x, stats, gamma, dx, rows, n, acc, chunk);
  if (isa == VecIsa::avx2) return grad_avx2(dy, x, stats, gamma, dx, rows, n, acc, chunk);
#endif
  grad_loop(dy, x, stats, gamma, dx, rows, n, acc, chunk);
}

}  // namespace tk::cpu
