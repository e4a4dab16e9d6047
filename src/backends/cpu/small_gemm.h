// Register-blocked GEMMs for the small blocks of the fused attention (backends/cpu/attention.cpp): the (128 x 128 x
// 32)-sized products of one head's block, run on one thread each, where a library call's packing and dispatch cost
// about as much as the arithmetic. Tiles of 8 rows x 32 columns (AVX-512F: 16 accumulators) or 6 x 16 (AVX2 + FMA:
// 12), the ISA chosen when the program runs (vector_exp.h's VecIsa; functions compiled for their ISA by target
// attributes, never the build's -march); any m, n, k (column tails masked). Each c(i, j) is the sum over p in order
// of a(i, p) b(p, j), one fused multiply-add at a time, then added to c when accumulating: the bits depend on the ISA
// (fused or not), not on threads or the tiling.
//
//   // c(m, n) = a(m, k) b(k, n), all row-major:
//   tk::cpu::small_gemm({m, n, k}, a, /*lda=*/k, /*a_transposed=*/false, b, /*ldb=*/n, c, /*ldc=*/n, false);
//   // c(m, n) += a^T b with a stored (k, m):
//   tk::cpu::small_gemm({m, n, k}, a, /*lda=*/m, true, b, n, c, n, /*accumulate=*/true);
#pragma once
#include <cstdint>

#include "backends/cpu/vector_exp.h"

namespace tk::cpu {

struct SmallGemm {
  int64_t m = 0, n = 0, k = 0;
};

// c(m, n) [+]= op(a) b: op(a)(i, p) is a[i * lda + p], or a[p * lda + i] when a_transposed; b(p, j) is b[p * ldb + j];
// c(i, j) is c[i * ldc + j]. Nothing is allocated.
void small_gemm(const SmallGemm& s, const float* a, int64_t lda, bool a_transposed, const float* b, int64_t ldb,
                float* c, int64_t ldc, bool accumulate, VecIsa isa = best_vec_isa());

}  // namespace tk::cpu
