#include "backends/cuda/gemm_mapping.h"

#include <cstddef>

namespace tk::cuda {

ColumnMajorGemm to_column_major(int64_t m, int64_t n, int64_t k, bool ta, bool tb) {
  ColumnMajorGemm g;
  g.m = n;  // C^T is n x m
  g.n = m;
  g.k = k;
  // A' = B. Stored k x n row-major (ld n), read column-major it is B^T = op(B)^T: no transpose. Stored n x k
  // (tb, ld k), read column-major it is B (k x n) and op(B)^T = B^T needs the transpose.
  g.trans_a = tb;
  g.lda = tb ? k : n;
  // B' = A. Stored m x k (ld k), read column-major it is A^T = op(A)^T. Stored k x m (ta, ld m): transpose.
  g.trans_b = ta;
  g.ldb = ta ? m : k;
  g.ldc = n;
  return g;
}

int first_unsplit_algorithm(const std::vector<int>& split_k) {
  for (std::size_t i = 0; i < split_k.size(); ++i)
    if (split_k[i] == 1) return static_cast<int>(i);
  return -1;
}

}  // namespace tk::cuda
