// exp(x) in float32 for loops that are exp-bound (Softmax on the CPU): glibc's expf is a call per element (GCC
// vectorizes it only under -ffast-math), so rows of exps run through exp16 on AVX-512F (16 lanes) or exp8 on AVX2 (8
// lanes) where the build targets them (-march=native: the building machine's ISA), and through the same math one lane
// at a time otherwise. Cephes' expf: x = n ln2 + r, |r| <= ln2 / 2, e^r by a
// degree-6 polynomial, 2^n through the exponent bits; within 1.2e-7 relative of expf over its normal range. Below
// -87.3 (where expf's results are subnormal or 0) it gives 0; above 88.7 inf; NaN stays NaN.
//
//   tk::cpu::exp_row(x, y, n, shift);   // y[j] = exp(x[j] - shift), returns the sum of y (lanes, then in order)
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace tk::cpu {

inline constexpr float kExpLo = -87.3f, kExpHi = 88.7f;

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

#if defined(__AVX2__) && defined(__FMA__)
inline __m256 exp8(__m256 x) {
  const __m256 lo = _mm256_set1_ps(kExpLo), hi = _mm256_set1_ps(kExpHi);
  const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo), hi);  // NaN lanes become hi; fixed below
  const __m256 z = _mm256_floor_ps(_mm256_fmadd_ps(xc, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
  __m256 r = _mm256_fnmadd_ps(z, _mm256_set1_ps(0.693359375f), xc);
  r = _mm256_fnmadd_ps(z, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  const __m256 e = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
  // 2^z as exponent bits, z in [-126, 128]: 2^128 is not a float, so z = 128 takes 2^127 * 2
  const __m256 top = _mm256_cmp_ps(z, _mm256_set1_ps(127.0f), _CMP_GT_OQ);
  const __m256i n =
      _mm256_add_epi32(_mm256_cvttps_epi32(_mm256_min_ps(z, _mm256_set1_ps(127.0f))), _mm256_set1_epi32(127));
  __m256 y = _mm256_mul_ps(e, _mm256_castsi256_ps(_mm256_slli_epi32(n, 23)));
  y = _mm256_mul_ps(y, _mm256_blendv_ps(_mm256_set1_ps(1.0f), _mm256_set1_ps(2.0f), top));
  y = _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps(x, lo, _CMP_LT_OQ));
  y = _mm256_blendv_ps(y, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x, hi, _CMP_GT_OQ));
  return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}
#endif

#if defined(__AVX512F__)
// GCC 12 warns about its own AVX-512 intrinsics' deliberately undefined pass-through operands once they are inlined
// (-Wmaybe-uninitialized, a known false positive): off for this code, restored after exp_row.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// exp8's math in 16 lanes, where the build targets AVX-512F.
inline __m512 exp16(__m512 x) {
  const __m512 lo = _mm512_set1_ps(kExpLo), hi = _mm512_set1_ps(kExpHi);
  const __m512 xc = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
  const __m512 z = _mm512_roundscale_ps(_mm512_fmadd_ps(xc, _mm512_set1_ps(1.44269504088896341f), _mm512_set1_ps(0.5f)),
                                        _MM_FROUND_TO_NEG_INF);
  __m512 r = _mm512_fnmadd_ps(z, _mm512_set1_ps(0.693359375f), xc);
  r = _mm512_fnmadd_ps(z, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 e = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  const __mmask16 top = _mm512_cmp_ps_mask(z, _mm512_set1_ps(127.0f), _CMP_GT_OQ);
  const __m512i n =
      _mm512_add_epi32(_mm512_cvttps_epi32(_mm512_min_ps(z, _mm512_set1_ps(127.0f))), _mm512_set1_epi32(127));
  __m512 y = _mm512_mul_ps(e, _mm512_castsi512_ps(_mm512_slli_epi32(n, 23)));
  y = _mm512_mask_mul_ps(y, top, y, _mm512_set1_ps(2.0f));
  y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ), y, _mm512_setzero_ps());
  y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ), y, _mm512_set1_ps(INFINITY));
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), y, x);
}
#endif

// The largest x[j] as `m < x[j] ? x[j] : m` from m = x[0] finds it (a NaN never wins, except x[0] itself), in 8 lanes.
inline float max_row(const float* x, int64_t n) {
  float m = x[0];
  int64_t j = 1;
#if defined(__AVX2__) && defined(__FMA__)
  if (n >= 9) {
    __m256 acc = _mm256_set1_ps(x[0]);
    for (; j + 8 <= n; j += 8) acc = _mm256_max_ps(_mm256_loadu_ps(x + j), acc);  // a NaN operand: acc stays
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, acc);
    for (float v : lanes) m = m < v ? v : m;
  }
#endif
  for (; j < n; ++j) m = m < x[j] ? x[j] : m;
  return m;
}

// y[j] = exp(x[j] - shift); returns the sum of the y[j] (8 lane sums added in lane order, then the tail in order).
inline float exp_row(const float* x, float* y, int64_t n, float shift) {
  int64_t j = 0;
  float sum = 0.0f;
#if defined(__AVX512F__)
  {
    __m512 acc16 = _mm512_setzero_ps();
    const __m512 s16 = _mm512_set1_ps(shift);
    for (; j + 16 <= n; j += 16) {
      const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + j), s16));
      _mm512_storeu_ps(y + j, e);
      acc16 = _mm512_add_ps(acc16, e);
    }
    alignas(64) float lanes16[16];
    _mm512_store_ps(lanes16, acc16);
    for (float v : lanes16) sum += v;
  }
#endif
#if defined(__AVX2__) && defined(__FMA__)
  __m256 acc = _mm256_setzero_ps();
  const __m256 s = _mm256_set1_ps(shift);
  for (; j + 8 <= n; j += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + j), s));
    _mm256_storeu_ps(y + j, e);
    acc = _mm256_add_ps(acc, e);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc);
  for (float v : lanes) sum += v;
#endif
  for (; j < n; ++j) sum += (y[j] = scalar_exp(x[j] - shift));
  return sum;
}
#if defined(__AVX512F__)
#pragma GCC diagnostic pop
#endif

}  // namespace tk::cpu
