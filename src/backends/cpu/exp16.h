// exp in 16 AVX-512 lanes: vector_exp.cpp's rows (chosen at run time) and the fused LSTM's sigmoid
// (backends/cpu/lstm.cpp, under a build targeting AVX-512F). Compiled for AVX-512F by its target attribute, whatever
// the build's -march: call it only where the CPU has AVX-512F (vec_isa_supported(VecIsa::avx512), or code compiled for
// it).
#pragma once
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include "backends/cpu/vector_exp.h"  // kExpLo

namespace tk::cpu {

// GCC 12 warns about its own AVX-512 intrinsics' deliberately undefined pass-through operands once they are inlined
// (-Wmaybe-uninitialized, a known false positive): off for this code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// exp8's math in 16 lanes, 2^z by vscalefps (which gives inf past 2^127 and needs no exponent-bit clamps). Below
// kExpLo the lane is zeroed (a NaN compares "not less" and keeps its NaN); x is clamped to [kExpLo, 89] first so that
// +-inf makes no NaN in r (89: e^89 overflows to inf through scalef, as expf).
__attribute__((target("avx512f,avx2,fma"))) inline __m512 exp16(__m512 x) {
  const __m512 xc = _mm512_min_ps(_mm512_set1_ps(89.0f), _mm512_max_ps(_mm512_set1_ps(kExpLo), x));  // NaN stays
  const __m512 z = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(z, _mm512_set1_ps(0.693359375f), xc);
  r = _mm512_fnmadd_ps(z, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 e = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(kExpLo), _CMP_NLT_UQ), e, z);
}

#pragma GCC diagnostic pop

}  // namespace tk::cpu
#endif
