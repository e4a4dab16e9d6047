// trainkit's GEMMs are row-major; cuBLAS and cuBLASLt are column-major. A row-major matrix read as column-major is
// its transpose, so the row-major product C = op(A) op(B) (m x n) is computed as the column-major product
// C^T = op(B)^T op(A)^T: the operands swap, and each keeps its own transpose flag. This mapping is host code, built
// in every build and tested against a column-major reference GEMM on the CPU (tests/cuda/test_cuda_host.cpp).
//
//   const tk::cuda::ColumnMajorGemm g = tk::cuda::to_column_major(m, n, k, ta, tb);
//   // cublasLtMatmul with A' = B's buffer (op: g.trans_a, ld g.lda), B' = A's buffer (g.trans_b, g.ldb),
//   // D' of g.m x g.n with g.ldc; a bias epilogue adds a vector of g.m = n values: one per output feature.
#pragma once
#include <cstdint>
#include <vector>

namespace tk::cuda {

struct ColumnMajorGemm {
  int64_t m = 0, n = 0, k = 0;  // the column-major D' is m x n (= trainkit's n x m), k the inner dimension
  bool trans_a = false;         // op on A' (trainkit's B buffer)
  bool trans_b = false;         // op on B' (trainkit's A buffer)
  int64_t lda = 0, ldb = 0, ldc = 0;
};

// Row-major C(m x n) = op(A) op(B), A stored m x k (k x m when ta), B stored k x n (n x k when tb), all dense.
ColumnMajorGemm to_column_major(int64_t m, int64_t n, int64_t k, bool ta, bool tb);

// Op determinism's choice among cuBLASLt's ranked heuristic results, given each one's CUBLASLT_ALGO_CONFIG_SPLITK_NUM
// (1: k is not split; -1: the attribute could not be read): the first that does not split k, or -1 when every one
// does (the caller then takes the first and says so once). Asking the heuristics with the reduction-scheme mask
// NONE instead can filter out every algorithm of a shape.
int first_unsplit_algorithm(const std::vector<int>& split_k);

}  // namespace tk::cuda
