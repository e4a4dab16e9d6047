// exp(x) in float32 for loops that are exp-bound (Softmax on the CPU): glibc's expf is a call per element (GCC
// vectorizes it only under -ffast-math), so rows of exps run in vector lanes, the ISA chosen when the program runs
// (`__builtin_cpu_supports`, never the build's -march: a binary built on an AVX-512 machine runs on an AVX2 one):
// 16 lanes on AVX-512F, 8 on AVX2 + FMA, one lane at a time otherwise. Cephes' expf: x = n ln2 + r, |r| <= ln2 / 2,
// e^r by a degree-6 polynomial, 2^n through the exponent bits (AVX-512: vscalefps); within 1.2e-7 relative of expf
// over its normal range. Below -87.3 (where expf's results are subnormal or 0) it gives 0; above 88.7 inf; NaN stays
// NaN. vector_exp.cpp holds the lanes (functions compiled for their ISA by target attributes).
//
//   tk::cpu::exp_row(x, y, n, shift);         // y[j] = exp(x[j] - shift), returns the sum of y
//   tk::cpu::softmax_rows(x, y, rows, n);     // y(rows, n) = softmax of each row of x(rows, n)
//   tk::cpu::softmax_rows(x, y, rows, n, tk::cpu::VecIsa::avx2);   // one ISA's lanes (tests; must be supported)
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>

namespace tk::cpu {

inline constexpr float kExpLo = -87.3f, kExpHi = 88.7f;

// The vector ISAs the row functions have lanes for, best last.
enum class VecIsa { scalar, avx2, avx512 };
VecIsa best_vec_isa();  // this CPU's best, found once
bool vec_isa_supported(VecIsa isa);

inline float scalar_exp(float x) {
  if (x != x) return x;
  if (x < kExpLo) return 0.0f;
  if (x > kExpHi) return INFINITY;
  const float z = std::floor(x * 1.44269504088896341f + 0.5f);
  const float r = x - z * 0.693359375f - z * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e = p * (r * r) + r + 1.0f;
  const int32_t n = static_cast<int32_t>(z);  // in [-126, 128]: 2^128 is not a float, so 128 takes 2^127 * 2
  return n > 127 ? e * std::bit_cast<float>(254 << 23) * 2.0f : e * std::bit_cast<float>((n + 127) << 23);
}

// The largest x[j] as `m < x[j] ? x[j] : m` from m = x[0] finds it (a NaN never wins, except x[0] itself).
float max_row(const float* x, int64_t n, VecIsa isa = best_vec_isa());

// y[j] = exp(x[j] - shift); returns the sum of the y[j] (lane sums added as a tree, then the tail in order).
float exp_row(const float* x, float* y, int64_t n, float shift, VecIsa isa = best_vec_isa());

// Softmax of each row of x(rows, n) into y(rows, n): exp(x - max) / sum, three passes over a row that sits in L1 (the
// max, the exps stored with their sum, the scale). Measured against one-pass online max/sum and a scratch row in
// docs/benchmarks.md. x == y is allowed.
void softmax_rows(const float* x, float* y, int64_t rows, int64_t n, VecIsa isa = best_vec_isa());

// Log-softmax of each row of x(rows, n) into y(rows, n), backends/math/activations.h's log_softmax_row in lanes:
// (x - max) - log(sum(exp(x - max))), softmax's passes over a row in L1 (the max; the exps, stored into y and summed in
// float lanes, two in flight; the subtraction overwriting them), x read from memory once. A NaN in a row, or a max of
// +-inf, makes the row NaN (as tf.nn.log_softmax). x == y is allowed (the exps are then summed in double lanes).
void log_softmax_rows(const float* x, float* y, int64_t rows, int64_t n, VecIsa isa = best_vec_isa());

// Softmax's gradient over each row of y(rows, n): dx = y * (dy - sum(dy * y)), the sum in vector lanes.
void softmax_grad_rows(const float* dy, const float* y, float* dx, int64_t rows, int64_t n,
                       VecIsa isa = best_vec_isa());

// log(sum(exp(x))) of one contiguous row, as backends/math/reduce.h's reduce_strided<logsumexp> defines it: the
// max first (a NaN anywhere: NaN; a max of +-inf: itself), then max + log(sum(exp(x - max))), the exps in vector
// lanes and their sum in double lanes (lane sums, then the tail in order; not reduce.h's index order).
float logsumexp_row(const float* x, int64_t n, VecIsa isa = best_vec_isa());

}  // namespace tk::cpu
