// Column sums of a row-major (rows, n) matrix, the bias gradient: accumulated in double over a fixed split of the
// rows into chunks (a function of the matrix's size alone, never of the thread count), each chunk summed in row
// order into its own partial row, then the partials added in chunk order. Every run, with any number of threads,
// computes the same bits; a matrix of one chunk (the MLP's) is summed exactly as one sequential pass.
// BiasGrad runs it alone (linalg.cpp); the kernels that write the bias gradient as a second output (graph/fuse.h:
// FusedMatMul's relu_grad epilogue, MaxPool2DGrad, ReluGrad) add each chunk's values while they write them.
//
//   const ColumnSums cs(rows, n);                       // partial: cs.workspace_bytes() from the op's workspace
//   parallel_chunks(cs, partial, [&](int64_t k, int64_t r0, int64_t r1) {
//     add_column_sums(m, n, r0, r1, partial + k * n);  // zeroed before; rows [r0, r1) added in row order
//   });
//   cs.finish(partial, db);                             // db(n) = float(sum over chunks)
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "backends/cpu/parallel.h"

namespace tk::cpu {

struct ColumnSums {
  static constexpr int64_t kMaxChunks = 64;
  int64_t rows, n, chunks;

  // `rows` are the units the rows are split in (a pooling kernel's rows of windows); `elements` what they hold in
  // all, which sets the number of chunks: one up to kParallelGrain elements (as parallel_for runs such a loop on
  // one thread), else one per kParallelGrain / 8 elements (enough for 16 threads from 128 Ki elements), at most
  // kMaxChunks and never more than the rows.
  static int64_t chunks_for(int64_t rows, int64_t elements) {
    if (elements <= kParallelGrain) return 1;
    return std::clamp<int64_t>(elements / (kParallelGrain / 8), 1, std::min(kMaxChunks, std::max<int64_t>(rows, 1)));
  }
  ColumnSums(int64_t rows_, int64_t n_, int64_t elements = -1)
      : rows(rows_), n(n_), chunks(chunks_for(rows_, elements < 0 ? rows_ * n_ : elements)) {}

  size_t workspace_bytes() const { return static_cast<size_t>(chunks * n) * sizeof(double); }
  int64_t begin(int64_t chunk) const { return chunk * rows / chunks; }

  // out[j] = the partials' column j, added in chunk order, rounded once.
  void finish(const double* partial, float* out) const {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0.0;
      for (int64_t k = 0; k < chunks; ++k) s += partial[k * n + j];
      out[j] = static_cast<float>(s);
    }
  }
};

// body(chunk, first row, end row) for every chunk, chunks spread over the threads; the partial rows are zeroed first.
template <typename Body>
void parallel_chunks(const ColumnSums& cs, double* partial, Body body) {
  std::fill(partial, partial + cs.chunks * cs.n, 0.0);
  parallel_for(
      cs.chunks,
      [&](int64_t kb, int64_t ke) {
        for (int64_t k = kb; k < ke; ++k) body(k, cs.begin(k), cs.begin(k + 1));
      },
      1);
}

// acc(n) += the column sums of m(rows r0..r1, n), in row order, a block of columns at a time on the stack.
inline void add_column_sums(const float* m, int64_t n, int64_t r0, int64_t r1, double* acc) {
  constexpr int64_t kColumns = 256;
  double block[kColumns];
  for (int64_t j0 = 0; j0 < n; j0 += kColumns) {
    const int64_t w = std::min(kColumns, n - j0);
    std::copy(acc + j0, acc + j0 + w, block);
    for (int64_t r = r0; r < r1; ++r) {
      const float* row = m + r * n + j0;
#pragma omp simd
      for (int64_t j = 0; j < w; ++j) block[j] += double(row[j]);
    }
    std::copy(block, block + w, acc + j0);
  }
}

// body(t0, t1) over [r0, r1) in tiles of rows of about 16 KiB of floats: a fused kernel writes a tile, then adds its
// column sums (add_column_sums) while it is in L1.
template <typename Body>
void for_row_tiles(int64_t r0, int64_t r1, int64_t n, Body body) {
  const int64_t tile = std::max<int64_t>(1, 4096 / std::max<int64_t>(n, 1));
  for (int64_t t = r0; t < r1; t += tile) body(t, std::min(r1, t + tile));
}

// out(n) = the column sums of m(rows, n), partial from the workspace (ColumnSums(rows, n).workspace_bytes()).
inline void column_sums(const float* m, int64_t rows, int64_t n, double* partial, float* out) {
  const ColumnSums cs(rows, n);
  parallel_chunks(cs, partial,
                  [&](int64_t k, int64_t r0, int64_t r1) { add_column_sums(m, n, r0, r1, partial + k * n); });
  cs.finish(partial, out);
}

}  // namespace tk::cpu
