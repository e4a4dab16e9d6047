// The CPU driver of math::Strided layouts (backends/strided.h): the output's elements in rows of its last (merged)
// axis, rows (and pieces of long rows) split between threads; per piece, each operand's first offset and its stride
// along the row.
//
//   for_rows(s, 2, [&](int64_t o, const int64_t* off, const int64_t* step, int64_t n) {
//     for (int64_t j = 0; j < n; ++j) y[o + j] = a[off[0] + j * step[0]] + b[off[1] + j * step[1]];
//   });
#pragma once
#include <algorithm>
#include <cstring>

#include "backends/cpu/parallel.h"
#include "backends/math/strided.h"
#include "graph/kernel.h"

namespace tk::cpu {

template <typename Body>
void for_rows(const math::Strided& s, int operands, Body body) {
  const int64_t inner = s.dims[s.rank - 1];
  int64_t total = 1;
  for (int d = 0; d < s.rank; ++d) total *= s.dims[d];
  if (total == 0 || inner == 0) return;
  const int64_t rows = total / inner;
  int64_t step[math::Strided::kOperands] = {};
  for (int k = 0; k < operands; ++k) step[k] = s.stride[k][s.rank - 1];
  // Long rows (contiguous operands merge into one) are cut into pieces, so that threads share even a single row.
  const int64_t piece = std::min<int64_t>(inner, std::max<int64_t>(kParallelGrain / 4, 1));
  const int64_t pieces = (inner + piece - 1) / piece;
  parallel_for(
      rows * pieces,
      [&](int64_t t0, int64_t t1) {
        int64_t off[math::Strided::kOperands] = {};
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t r = t / pieces, begin = (t % pieces) * piece, n = std::min(piece, inner - begin);
          for (int k = 0; k < operands; ++k) off[k] = math::strided_offset(s, k, r * inner) + begin * step[k];
          body(r * inner + begin, static_cast<const int64_t*>(off), static_cast<const int64_t*>(step), n);
        }
      },
      std::max<int64_t>(1, kParallelGrain / piece));
}

// y = x in s's order (operand 0: x's offsets), runs of contiguous x copied at once.
template <typename T>
void copy_rows(const math::Strided& s, const T* x, T* y) {
  for_rows(s, 1, [&](int64_t o, const int64_t* off, const int64_t* st, int64_t n) {
    const T* xr = x + off[0];
    if (st[0] == 1) {
      std::memcpy(y + o, xr, sizeof(T) * static_cast<size_t>(n));
    } else {
      for (int64_t j = 0; j < n; ++j) y[o + j] = xr[j * st[0]];
    }
  });
}

// Fn<T>::run(a) with T the unsigned integer as wide as the output's elements: ops that move values, in any dtype.
template <template <typename> class Fn>
void by_size(const graph::KernelArgs& a) {
  switch (dtype_size(a.out_dtype)) {
    case 1:
      return Fn<uint8_t>::run(a);
    case 2:
      return Fn<uint16_t>::run(a);
    case 4:
      return Fn<uint32_t>::run(a);
    default:
      return Fn<uint64_t>::run(a);
  }
}

}  // namespace tk::cpu
