// The tiles of small_gemm.h: per ISA a micro-kernel of R rows x two vectors of columns whose accumulators stay in
// registers over the whole k loop (b's row loaded once per p, a's element broadcast per row), compiled for its ISA by
// a target attribute and chosen per call. Column tails use masked loads and stores (no read or write past n).
#include "backends/cpu/small_gemm.h"

#include <algorithm>
#include <cmath>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TK_SG_X86 1
#include <immintrin.h>
#define TK_SG_AVX2 __attribute__((target("avx2,fma")))
#define TK_SG_AVX512 __attribute__((target("avx512f,avx2,fma")))
#endif

namespace tk::cpu {
namespace {

// Where op(a)(i, p) lives: a + i * row + p * col.
struct AView {
  const float* a;
  int64_t row, col;
};
AView view_of(const float* a, int64_t lda, bool transposed) { return transposed ? AView{a, 1, lda} : AView{a, lda, 1}; }

void tile_scalar(const SmallGemm& s, AView a, const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  for (int64_t i = 0; i < s.m; ++i)
    for (int64_t j = 0; j < s.n; ++j) {
      float sum = 0.0f;
      for (int64_t p = 0; p < s.k; ++p) sum = std::fma(a.a[i * a.row + p * a.col], b[p * ldb + j], sum);
      c[i * ldc + j] = accumulate ? c[i * ldc + j] + sum : sum;
    }
}

#if TK_SG_X86
// AVX-512F: R rows x 32 columns (two zmm per row), the columns [0, w) of the tile kept by masks.
template <int R>
TK_SG_AVX512 void tile_avx512(int64_t k, AView a, const float* b, int64_t ldb, float* c, int64_t ldc, int64_t w,
                              bool accumulate) {
  const __mmask16 m0 = w >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << w) - 1);
  const __mmask16 m1 = w >= 32 ? __mmask16(0xFFFF) : w > 16 ? __mmask16((1u << (w - 16)) - 1) : __mmask16(0);
  __m512 acc0[R], acc1[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) acc0[r] = _mm512_setzero_ps(), acc1[r] = _mm512_setzero_ps();
  for (int64_t p = 0; p < k; ++p) {
    const __m512 b0 = _mm512_maskz_loadu_ps(m0, b + p * ldb);
    const __m512 b1 = _mm512_maskz_loadu_ps(m1, b + p * ldb + 16);
    const float* ap = a.a + p * a.col;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_set1_ps(ap[r * a.row]);
      acc0[r] = _mm512_fmadd_ps(av, b0, acc0[r]);
      acc1[r] = _mm512_fmadd_ps(av, b1, acc1[r]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    float* cr = c + r * ldc;
    if (accumulate) {
      acc0[r] = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, cr), acc0[r]);
      acc1[r] = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, cr + 16), acc1[r]);
    }
    _mm512_mask_storeu_ps(cr, m0, acc0[r]);
    _mm512_mask_storeu_ps(cr + 16, m1, acc1[r]);
  }
}

// AVX2 + FMA: R rows x 16 columns (two ymm per row); lanes past w masked.
TK_SG_AVX2 __m256i lanes_below(int64_t w) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(std::clamp<int64_t>(w, 0, 8))), idx);
}
template <int R>
TK_SG_AVX2 void tile_avx2(int64_t k, AView a, const float* b, int64_t ldb, float* c, int64_t ldc, int64_t w,
                          bool accumulate) {
  const __m256i m0 = lanes_below(w), m1 = lanes_below(w - 8);
  __m256 acc0[R], acc1[R];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) acc0[r] = _mm256_setzero_ps(), acc1[r] = _mm256_setzero_ps();
  for (int64_t p = 0; p < k; ++p) {
    const __m256 b0 = _mm256_maskload_ps(b + p * ldb, m0);
    const __m256 b1 = _mm256_maskload_ps(b + p * ldb + 8, m1);
    const float* ap = a.a + p * a.col;
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const __m256 av = _mm256_broadcast_ss(ap + r * a.row);
      acc0[r] = _mm256_fmadd_ps(av, b0, acc0[r]);
      acc1[r] = _mm256_fmadd_ps(av, b1, acc1[r]);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    float* cr = c + r * ldc;
    if (accumulate) {
      acc0[r] = _mm256_add_ps(_mm256_maskload_ps(cr, m0), acc0[r]);
      acc1[r] = _mm256_add_ps(_mm256_maskload_ps(cr + 8, m1), acc1[r]);
    }
    _mm256_maskstore_ps(cr, m0, acc0[r]);
    _mm256_maskstore_ps(cr + 8, m1, acc1[r]);
  }
}

// The tile of `rows` rows (1 .. 8 on AVX-512, 1 .. 6 on AVX2): the template instance.
#define TK_SG_ROWS(FN, R) \
  case R:                 \
    return FN<R>(k, a, b, ldb, c, ldc, w, acc);
void rows_avx512(int rows, int64_t k, AView a, const float* b, int64_t ldb, float* c, int64_t ldc, int64_t w,
                 bool acc) {
  switch (rows) {
    TK_SG_ROWS(tile_avx512, 1)
    TK_SG_ROWS(tile_avx512, 2)
    TK_SG_ROWS(tile_avx512, 3)
    TK_SG_ROWS(tile_avx512, 4)
    TK_SG_ROWS(tile_avx512, 5)
    TK_SG_ROWS(tile_avx512, 6)
    TK_SG_ROWS(tile_avx512, 7)
    default:
      return tile_avx512<8>(k, a, b, ldb, c, ldc, w, acc);
  }
}
void rows_avx2(int rows, int64_t k, AView a, const float* b, int64_t ldb, float* c, int64_t ldc, int64_t w, bool acc) {
  switch (rows) {
    TK_SG_ROWS(tile_avx2, 1)
    TK_SG_ROWS(tile_avx2, 2)
    TK_SG_ROWS(tile_avx2, 3)
    TK_SG_ROWS(tile_avx2, 4)
    TK_SG_ROWS(tile_avx2, 5)
    default:
      return tile_avx2<6>(k, a, b, ldb, c, ldc, w, acc);
  }
}
#undef TK_SG_ROWS

// The output in tiles of (kRows, kCols): rows outer, so a tile's a rows stay in L1 across its column tiles.
template <int kRows, int64_t kCols, typename Rows>
void tiled(const SmallGemm& s, AView a, const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate,
           Rows rows_fn) {
  for (int64_t i = 0; i < s.m; i += kRows) {
    const int rows = static_cast<int>(std::min<int64_t>(kRows, s.m - i));
    const AView ai{a.a + i * a.row, a.row, a.col};
    for (int64_t j = 0; j < s.n; j += kCols)
      rows_fn(rows, s.k, ai, b + j, ldb, c + i * ldc + j, ldc, std::min(kCols, s.n - j), accumulate);
  }
}
#endif

}  // namespace

void small_gemm(const SmallGemm& s, const float* a, int64_t lda, bool a_transposed, const float* b, int64_t ldb,
                float* c, int64_t ldc, bool accumulate, VecIsa isa) {
  if (s.m <= 0 || s.n <= 0) return;
  const AView av = view_of(a, lda, a_transposed);
  switch (isa) {
#if TK_SG_X86
    case VecIsa::avx512:
      return tiled<8, 32>(s, av, b, ldb, c, ldc, accumulate, rows_avx512);
    case VecIsa::avx2:
      return tiled<6, 16>(s, av, b, ldb, c, ldc, accumulate, rows_avx2);
#endif
    default:
      return tile_scalar(s, av, b, ldb, c, ldc, accumulate);
  }
}

}  // namespace tk::cpu
