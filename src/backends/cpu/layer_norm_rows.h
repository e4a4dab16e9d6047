// LayerNormalization's row loops on the CPU (backends/cpu/layer_norm.cpp's kernels call them): the math of
// backends/math/layer_norm.h (which CUDA runs) with each row's sums in vector lanes, compiled once per ISA by target
// attributes and chosen when the program runs (vector_exp.h's VecIsa: AVX-512F, AVX2 + FMA, or one lane at a time;
// never the build's -march). Statistics in double lanes, two passes over a row that sits in L1; the per-element
// results in float, as before. A row's sums are combined in a fixed order, so the bits depend on the ISA, not on the
// thread count.
//
//   tk::cpu::layer_norm_stats_rows(x, stats, rows, n, eps);                 // stats (rows, 2): [mean, rstd]
//   tk::cpu::layer_norm_apply_rows(x, stats, gamma, beta, y, rows, n);
//   tk::cpu::layer_norm_input_grad_rows(dy, x, stats, gamma, dx, rows, n);
//   // dx and the block's parameter sums in one sweep (LayerNormGrad): acc (2, n) double += [dy * xhat; dy]
//   tk::cpu::layer_norm_grad_rows(dy, x, stats, gamma, dx, rows, n, acc, chunk);  // chunk: 2n floats of scratch
#pragma once
#include <cstdint>

#include "backends/cpu/vector_exp.h"

namespace tk::cpu {

// x, y, dy, dx (rows, n) row-major; stats (rows, 2); gamma, beta (n).
void layer_norm_stats_rows(const float* x, float* stats, int64_t rows, int64_t n, float eps,
                           VecIsa isa = best_vec_isa());
void layer_norm_apply_rows(const float* x, const float* stats, const float* gamma, const float* beta, float* y,
                           int64_t rows, int64_t n, VecIsa isa = best_vec_isa());
void layer_norm_input_grad_rows(const float* dy, const float* x, const float* stats, const float* gamma, float* dx,
                                int64_t rows, int64_t n, VecIsa isa = best_vec_isa());
// dx as layer_norm_input_grad_rows, and acc[j] += sum of dy * xhat, acc[n + j] += sum of dy over these rows: in float
// over chunks of 16 rows (chunk: 2n floats of scratch), each chunk added to acc in double, in row order.
void layer_norm_grad_rows(const float* dy, const float* x, const float* stats, const float* gamma, float* dx,
                          int64_t rows, int64_t n, double* acc, float* chunk, VecIsa isa = best_vec_isa());

}  // namespace tk::cpu
