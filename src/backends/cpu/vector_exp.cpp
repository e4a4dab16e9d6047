// The lanes of vector_exp.h: one set of row functions per ISA, each compiled for its ISA by a target attribute (so
// the build's -march does not decide), chosen per call from vector_exp.h's VecIsa (by default the CPU's best, found
// once with __builtin_cpu_supports).
#include "backends/cpu/vector_exp.h"

#include <string>

#include "backends/cpu/exp16.h"
#include "trainkit/core/error.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TK_VEC_X86 1
#include <immintrin.h>
#define TK_AVX2 __attribute__((target("avx2,fma")))
#define TK_AVX512 __attribute__((target("avx512f,avx2,fma")))
#endif

namespace tk::cpu {
namespace {

// One lane at a time: the same math (scalar_exp) and the same NaN rule for the max.
float max_scalar(const float* x, int64_t n) {
  float m = x[0];
  for (int64_t j = 1; j < n; ++j) m = m < x[j] ? x[j] : m;
  return m;
}
float exp_scalar(const float* x, float* y, int64_t n, float shift) {
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) sum += (y[j] = scalar_exp(x[j] - shift));
  return sum;
}
void scale_scalar(float* y, int64_t n, float s) {
  for (int64_t j = 0; j < n; ++j) y[j] *= s;
}

void softmax_grad_scalar(const float* dy, const float* y, float* dx, int64_t n) {
  float dot = 0.0f;
  for (int64_t j = 0; j < n; ++j) dot += dy[j] * y[j];
  for (int64_t j = 0; j < n; ++j) dx[j] = y[j] * (dy[j] - dot);
}
double exp_sum_scalar(const float* x, int64_t n, float shift) {
  double s = 0.0;
  for (int64_t j = 0; j < n; ++j) s += static_cast<double>(scalar_exp(x[j] - shift));
  return s;
}

#if TK_VEC_X86
TK_AVX2 inline __m256 exp8(__m256 x) {
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

// The 8 lanes added as a tree (4 + 4, 2 + 2, 1 + 1): three dependent adds.
TK_AVX2 float hsum8(__m256 v) {
  __m128 q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  q = _mm_add_ps(q, _mm_movehl_ps(q, q));
  q = _mm_add_ss(q, _mm_shuffle_ps(q, q, 1));
  return _mm_cvtss_f32(q);
}

// maxps(a, b) returns b when either is NaN: the accumulator goes second, so a NaN x[j] leaves it (and a NaN x[0],
// broadcast into it, stays).
TK_AVX2 float max_avx2(const float* x, int64_t n) {
  float m = x[0];
  int64_t j = 1;
  if (n >= 33) {
    __m256 a0 = _mm256_set1_ps(x[0]), a1 = a0, a2 = a0, a3 = a0;  // four chains: maxps' latency, not its rate
    for (; j + 32 <= n; j += 32) {
      a0 = _mm256_max_ps(_mm256_loadu_ps(x + j), a0);
      a1 = _mm256_max_ps(_mm256_loadu_ps(x + j + 8), a1);
      a2 = _mm256_max_ps(_mm256_loadu_ps(x + j + 16), a2);
      a3 = _mm256_max_ps(_mm256_loadu_ps(x + j + 24), a3);
    }
    for (; j + 8 <= n; j += 8) a0 = _mm256_max_ps(_mm256_loadu_ps(x + j), a0);
    // As max_avx512: a lane is NaN only when x[0] is, which then wins.
    const __m256 a = _mm256_max_ps(_mm256_max_ps(a0, a1), _mm256_max_ps(a2, a3));
    __m128 q = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    q = _mm_max_ps(q, _mm_movehl_ps(q, q));
    q = _mm_max_ss(q, _mm_shuffle_ps(q, q, 1));
    const float v = _mm_cvtss_f32(q);
    m = m < v ? v : m;
  }
  for (; j < n; ++j) m = m < x[j] ? x[j] : m;
  return m;
}

TK_AVX2 float exp_avx2(const float* x, float* y, int64_t n, float shift) {
  int64_t j = 0;
  const __m256 s = _mm256_set1_ps(shift);
  __m256 a0 = _mm256_setzero_ps(), a1 = a0;  // two exps in flight per iteration
  for (; j + 16 <= n; j += 16) {
    const __m256 e0 = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + j), s));
    const __m256 e1 = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + j + 8), s));
    _mm256_storeu_ps(y + j, e0);
    _mm256_storeu_ps(y + j + 8, e1);
    a0 = _mm256_add_ps(a0, e0);
    a1 = _mm256_add_ps(a1, e1);
  }
  for (; j + 8 <= n; j += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + j), s));
    _mm256_storeu_ps(y + j, e);
    a0 = _mm256_add_ps(a0, e);
  }
  float sum = hsum8(_mm256_add_ps(a0, a1));
  for (; j < n; ++j) sum += (y[j] = scalar_exp(x[j] - shift));
  return sum;
}

TK_AVX2 void scale_avx2(float* y, int64_t n, float s) {
  const __m256 v = _mm256_set1_ps(s);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) _mm256_storeu_ps(y + j, _mm256_mul_ps(_mm256_loadu_ps(y + j), v));
  for (; j < n; ++j) y[j] *= s;
}

TK_AVX2 void softmax_avx2(const float* x, float* y, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    const float sum = exp_avx2(x + r * n, y + r * n, n, max_avx2(x + r * n, n));
    scale_avx2(y + r * n, n, 1.0f / sum);
  }
}

TK_AVX2 void softmax_grad_avx2(const float* dy, const float* y, float* dx, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* d = dy + r * n;
    const float* v = y + r * n;
    float* out = dx + r * n;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;  // four chains: the add's latency
    int64_t j = 0;
    for (; j + 32 <= n; j += 32) {
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(d + j), _mm256_loadu_ps(v + j), a0);
      a1 = _mm256_fmadd_ps(_mm256_loadu_ps(d + j + 8), _mm256_loadu_ps(v + j + 8), a1);
      a2 = _mm256_fmadd_ps(_mm256_loadu_ps(d + j + 16), _mm256_loadu_ps(v + j + 16), a2);
      a3 = _mm256_fmadd_ps(_mm256_loadu_ps(d + j + 24), _mm256_loadu_ps(v + j + 24), a3);
    }
    for (; j + 8 <= n; j += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(d + j), _mm256_loadu_ps(v + j), a0);
    float dot = hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; j < n; ++j) dot += d[j] * v[j];
    const __m256 k = _mm256_set1_ps(dot);
    j = 0;
    for (; j + 8 <= n; j += 8)
      _mm256_storeu_ps(out + j, _mm256_mul_ps(_mm256_loadu_ps(v + j), _mm256_sub_ps(_mm256_loadu_ps(d + j), k)));
    for (; j < n; ++j) out[j] = v[j] * (d[j] - dot);
  }
}

// sum(exp(x - shift)) with the exps in float lanes, added in double lanes.
TK_AVX2 double exp_sum_avx2(const float* x, int64_t n, float shift) {
  const __m256 s = _mm256_set1_ps(shift);
  __m256d a0 = _mm256_setzero_pd(), a1 = a0;
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + j), s));
    a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(a0, a1));
  double sum = 0.0;
  for (double v : lanes) sum += v;
  for (; j < n; ++j) sum += static_cast<double>(scalar_exp(x[j] - shift));
  return sum;
}

// GCC 12 warns about its own AVX-512 intrinsics' deliberately undefined pass-through operands once they are inlined
// (-Wmaybe-uninitialized, a known false positive): off for this code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
TK_AVX512 __mmask16 tail_mask(int64_t left) {
  return static_cast<__mmask16>((1u << static_cast<unsigned>(left)) - 1u);  // left in [0, 16)
}

// GCC 12 warns inside its own _mm512_max_ps once the lane combine below is inlined (-Wuninitialized on the
// intrinsic's undefined pass-through operand, a known false positive): off for this function.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
TK_AVX512 float max_avx512(const float* x, int64_t n) {
  const __m512 first = _mm512_set1_ps(x[0]);
  __m512 a0 = first, a1 = first, a2 = first, a3 = first;  // four chains: maxps' latency, not its rate
  int64_t j = 0;
  for (; j + 64 <= n; j += 64) {
    a0 = _mm512_max_ps(_mm512_loadu_ps(x + j), a0);
    a1 = _mm512_max_ps(_mm512_loadu_ps(x + j + 16), a1);
    a2 = _mm512_max_ps(_mm512_loadu_ps(x + j + 32), a2);
    a3 = _mm512_max_ps(_mm512_loadu_ps(x + j + 48), a3);
  }
  for (; j + 16 <= n; j += 16) a0 = _mm512_max_ps(_mm512_loadu_ps(x + j), a0);
  if (j < n) a1 = _mm512_max_ps(_mm512_mask_loadu_ps(first, tail_mask(n - j), x + j), a1);  // masked lanes: x[0]
  // The lanes combined in vector maxes, then x[0]'s rule once: a lane holds NaN only when x[0] is NaN (NaN loads never
  // win maxps' second-operand rule), and then x[0] wins below anyway; otherwise any order finds the same max.
  const __m512 a = _mm512_max_ps(_mm512_max_ps(a0, a1), _mm512_max_ps(a2, a3));
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, a);
  const __m256 h = _mm256_max_ps(_mm256_load_ps(lanes), _mm256_load_ps(lanes + 8));
  __m128 q = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  q = _mm_max_ps(q, _mm_movehl_ps(q, q));
  q = _mm_max_ss(q, _mm_shuffle_ps(q, q, 1));
  const float v = _mm_cvtss_f32(q);
  const float m = x[0];
  return m < v ? v : m;
}
#pragma GCC diagnostic pop

TK_AVX512 float exp_avx512(const float* x, float* y, int64_t n, float shift) {
  const __m512 s = _mm512_set1_ps(shift);
  __m512 a0 = _mm512_setzero_ps(), a1 = a0;  // two exps in flight per iteration
  int64_t j = 0;
  for (; j + 32 <= n; j += 32) {
    const __m512 e0 = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + j), s));
    const __m512 e1 = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + j + 16), s));
    _mm512_storeu_ps(y + j, e0);
    _mm512_storeu_ps(y + j + 16, e1);
    a0 = _mm512_add_ps(a0, e0);
    a1 = _mm512_add_ps(a1, e1);
  }
  for (; j + 16 <= n; j += 16) {
    const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + j), s));
    _mm512_storeu_ps(y + j, e);
    a0 = _mm512_add_ps(a0, e);
  }
  if (j < n) {  // the tail in masked lanes (zero elsewhere, so the sum is unchanged)
    const __mmask16 k = tail_mask(n - j);
    const __m512 e = _mm512_maskz_mov_ps(k, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + j), s)));
    _mm512_mask_storeu_ps(y + j, k, e);
    a1 = _mm512_add_ps(a1, e);
  }
  alignas(64) float lanes[16];  // not _mm512_reduce_add_ps: GCC 12 warns inside it (-Wuninitialized)
  _mm512_store_ps(lanes, _mm512_add_ps(a0, a1));
  // The 16 lanes added as a tree (8 + 8, then hsum8's 4 + 4, 2 + 2, 1 + 1): four dependent adds, not sixteen (a short
  // row's exps, attention's and softmax's, wait on this sum).
  return hsum8(_mm256_add_ps(_mm256_load_ps(lanes), _mm256_load_ps(lanes + 8)));
}

TK_AVX512 void scale_avx512(float* y, int64_t n, float s) {
  const __m512 v = _mm512_set1_ps(s);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) _mm512_storeu_ps(y + j, _mm512_mul_ps(_mm512_loadu_ps(y + j), v));
  if (j < n) {
    const __mmask16 k = tail_mask(n - j);
    _mm512_mask_storeu_ps(y + j, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, y + j), v));
  }
}

TK_AVX512 void softmax_avx512(const float* x, float* y, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    const float sum = exp_avx512(x + r * n, y + r * n, n, max_avx512(x + r * n, n));
    scale_avx512(y + r * n, n, 1.0f / sum);
  }
}
TK_AVX512 void softmax_grad_avx512(const float* dy, const float* y, float* dx, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* d = dy + r * n;
    const float* v = y + r * n;
    float* out = dx + r * n;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;  // four chains: the add's latency
    int64_t j = 0;
    for (; j + 64 <= n; j += 64) {
      a0 = _mm512_fmadd_ps(_mm512_loadu_ps(d + j), _mm512_loadu_ps(v + j), a0);
      a1 = _mm512_fmadd_ps(_mm512_loadu_ps(d + j + 16), _mm512_loadu_ps(v + j + 16), a1);
      a2 = _mm512_fmadd_ps(_mm512_loadu_ps(d + j + 32), _mm512_loadu_ps(v + j + 32), a2);
      a3 = _mm512_fmadd_ps(_mm512_loadu_ps(d + j + 48), _mm512_loadu_ps(v + j + 48), a3);
    }
    for (; j + 16 <= n; j += 16) a0 = _mm512_fmadd_ps(_mm512_loadu_ps(d + j), _mm512_loadu_ps(v + j), a0);
    if (j < n) {
      const __mmask16 k = tail_mask(n - j);
      a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, d + j), _mm512_maskz_loadu_ps(k, v + j), a1);
    }
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
    float dot = 0.0f;
    for (float l : lanes) dot += l;
    const __m512 kd = _mm512_set1_ps(dot);
    j = 0;
    for (; j + 16 <= n; j += 16)
      _mm512_storeu_ps(out + j, _mm512_mul_ps(_mm512_loadu_ps(v + j), _mm512_sub_ps(_mm512_loadu_ps(d + j), kd)));
    if (j < n) {
      const __mmask16 k = tail_mask(n - j);
      _mm512_mask_storeu_ps(
          out + j, k,
          _mm512_mul_ps(_mm512_maskz_loadu_ps(k, v + j), _mm512_sub_ps(_mm512_maskz_loadu_ps(k, d + j), kd)));
    }
  }
}

TK_AVX512 double exp_sum_avx512(const float* x, int64_t n, float shift) {
  const __m512 s = _mm512_set1_ps(shift);
  __m512d a0 = _mm512_setzero_pd(), a1 = a0;
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + j), s));
    a0 = _mm512_add_pd(a0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
    a1 =
        _mm512_add_pd(a1, _mm512_cvtps_pd(_mm512_castps512_ps256(_mm512_shuffle_f32x4(e, e, _MM_SHUFFLE(3, 2, 3, 2)))));
  }
  if (j < n) {  // masked lanes: exp of 0 after maskz, zeroed again before the sum
    const __mmask16 k = tail_mask(n - j);
    const __m512 e = _mm512_maskz_mov_ps(k, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + j), s)));
    a0 = _mm512_add_pd(a0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
    a1 =
        _mm512_add_pd(a1, _mm512_cvtps_pd(_mm512_castps512_ps256(_mm512_shuffle_f32x4(e, e, _MM_SHUFFLE(3, 2, 3, 2)))));
  }
  alignas(64) double lanes[8];
  _mm512_store_pd(lanes, _mm512_add_pd(a0, a1));
  double sum = 0.0;
  for (double v : lanes) sum += v;
  return sum;
}
// y = (x - m) - l over one row (log_softmax_rows' last pass).
TK_AVX512 void shift_avx512(const float* x, float* y, int64_t n, float m, float l) {
  const __m512 vm = _mm512_set1_ps(m), vl = _mm512_set1_ps(l);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) _mm512_storeu_ps(y + j, _mm512_sub_ps(_mm512_sub_ps(_mm512_loadu_ps(x + j), vm), vl));
  if (j < n) {
    const __mmask16 k = tail_mask(n - j);
    _mm512_mask_storeu_ps(y + j, k, _mm512_sub_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + j), vm), vl));
  }
}
#pragma GCC diagnostic pop
TK_AVX2 void shift_avx2(const float* x, float* y, int64_t n, float m, float l) {
  const __m256 vm = _mm256_set1_ps(m), vl = _mm256_set1_ps(l);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) _mm256_storeu_ps(y + j, _mm256_sub_ps(_mm256_sub_ps(_mm256_loadu_ps(x + j), vm), vl));
  for (; j < n; ++j) y[j] = (x[j] - m) - l;
}
#endif  // TK_VEC_X86

void shift_scalar(const float* x, float* y, int64_t n, float m, float l) {
  for (int64_t j = 0; j < n; ++j) y[j] = (x[j] - m) - l;
}

VecIsa detect() {
#if TK_VEC_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return VecIsa::avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return VecIsa::avx2;
#endif
  return VecIsa::scalar;
}

void check(VecIsa isa) {
  if (!vec_isa_supported(isa))
    throw Unsupported("vector_exp: ISA " + std::to_string(static_cast<int>(isa)) +
                      " asked for, which this CPU lacks; pass best_vec_isa()");
}

double exp_sum(const float* x, int64_t n, float shift, VecIsa isa) {  // sum(exp(x - shift)), in double lanes
  switch (isa) {
#if TK_VEC_X86
    case VecIsa::avx512:
      return exp_sum_avx512(x, n, shift);
    case VecIsa::avx2:
      return exp_sum_avx2(x, n, shift);
#endif
    default:
      return exp_sum_scalar(x, n, shift);
  }
}

}  // namespace

VecIsa best_vec_isa() {
  static const VecIsa isa = detect();
  return isa;
}

bool vec_isa_supported(VecIsa isa) { return static_cast<int>(isa) <= static_cast<int>(best_vec_isa()); }

float max_row(const float* x, int64_t n, VecIsa isa) {
  switch (isa) {
#if TK_VEC_X86
    case VecIsa::avx512:
      check(isa);
      return max_avx512(x, n);
    case VecIsa::avx2:
      check(isa);
      return max_avx2(x, n);
#endif
    default:
      return max_scalar(x, n);
  }
}

float exp_row(const float* x, float* y, int64_t n, float shift, VecIsa isa) {
  switch (isa) {
#if TK_VEC_X86
    case VecIsa::avx512:
      check(isa);
      return exp_avx512(x, y, n, shift);
    case VecIsa::avx2:
      check(isa);
      return exp_avx2(x, y, n, shift);
#endif
    default:
      return exp_scalar(x, y, n, shift);
  }
}

void softmax_rows(const float* x, float* y, int64_t rows, int64_t n, VecIsa isa) {
  if (n <= 0) return;
  switch (isa) {
#if TK_VEC_X86
    case VecIsa::avx512:
      check(isa);
      return softmax_avx512(x, y, rows, n);
    case VecIsa::avx2:
      check(isa);
      return softmax_avx2(x, y, rows, n);
#endif
    default:
      for (int64_t r = 0; r < rows; ++r)
        scale_scalar(y + r * n, n, 1.0f / exp_scalar(x + r * n, y + r * n, n, max_scalar(x + r * n, n)));
  }
}

void softmax_grad_rows(const float* dy, const float* y, float* dx, int64_t rows, int64_t n, VecIsa isa) {
  if (n <= 0) return;
  switch (isa) {
#if TK_VEC_X86
    case VecIsa::avx512:
      check(isa);
      return softmax_grad_avx512(dy, y, dx, rows, n);
    case VecIsa::avx2:
      check(isa);
      return softmax_grad_avx2(dy, y, dx, rows, n);
#endif
    default:
      for (int64_t r = 0; r < rows; ++r) softmax_grad_scalar(dy + r * n, y + r * n, dx + r * n, n);
  }
}

void log_softmax_rows(const float* x, float* y, int64_t rows, int64_t n, VecIsa isa) {
  if (n <= 0) return;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    const float m = max_row(xr, n, isa);  // NaN, +-inf: the exps' sum below is NaN, and so is the row
    // The exps stored into y as they are summed (softmax's loop, two in flight), then overwritten; in place, x == y,
    // they are only summed (in double lanes).
    const float l =
        static_cast<float>(xr != yr ? std::log(exp_row(xr, yr, n, m, isa)) : std::log(exp_sum(xr, n, m, isa)));
    switch (isa) {
#if TK_VEC_X86
      case VecIsa::avx512:
        shift_avx512(xr, yr, n, m, l);
        break;
      case VecIsa::avx2:
        shift_avx2(xr, yr, n, m, l);
        break;
#endif
      default:
        shift_scalar(xr, yr, n, m, l);
    }
  }
}

float logsumexp_row(const float* x, int64_t n, VecIsa isa) {
  const float m = max_row(x, n, isa);  // a NaN after x[0] does not win here: the exps' sum becomes NaN instead
  if (m != m) return m;
  if (m - m != m - m) {  // +-inf: reduce.h's max would be NaN if the row holds a NaN
    for (int64_t j = 0; j < n; ++j)
      if (x[j] != x[j]) return x[j];
    return m;
  }
  double s = 0.0;
  switch (isa) {
#if TK_VEC_X86
    case VecIsa::avx512:
      s = exp_sum_avx512(x, n, m);
      break;
    case VecIsa::avx2:
      s = exp_sum_avx2(x, n, m);
      break;
#endif
    default:
      s = exp_sum_scalar(x, n, m);
  }
  return m + static_cast<float>(std::log(s));
}

}  // namespace tk::cpu
