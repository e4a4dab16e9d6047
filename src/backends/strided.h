// Host-side builders of math::Strided (backends/math/strided.h) for the general tensor ops' kernels on every backend:
// broadcasting operands and transposes, with adjacent axes merged where every operand stays contiguous across them
// (fewer, longer inner loops).
//
//   math::Strided s = backends::broadcast_layout(y_shape, {&a_shape, &b_shape});
//   math::Strided t = backends::transpose_layout(x_shape, perm);   // operand 0: x read in y's order
#pragma once
#include <initializer_list>

#include "backends/math/strided.h"
#include "trainkit/core/shape.h"

namespace tk::backends {

inline void merge_axes(math::Strided& s, int operands) {
  int out = 0;
  for (int d = 0; d < s.rank; ++d) {
    if (s.dims[d] == 1 && s.rank > 1) continue;  // a size-1 axis moves nothing
    bool merge = out > 0;
    for (int k = 0; merge && k < operands; ++k) merge = s.stride[k][out - 1] == s.stride[k][d] * s.dims[d];
    if (merge) {
      s.dims[out - 1] *= s.dims[d];
      for (int k = 0; k < operands; ++k) s.stride[k][out - 1] = s.stride[k][d];
    } else {
      s.dims[out] = s.dims[d];
      for (int k = 0; k < operands; ++k) s.stride[k][out] = s.stride[k][d];
      ++out;
    }
  }
  if (out == 0) {  // every axis was 1: one element
    s.dims[0] = 1;
    for (int k = 0; k < operands; ++k) s.stride[k][0] = 0;
    out = 1;
  }
  s.rank = out;
}

// Operands broadcast (NumPy rules, aligned from the last axis) to `out`.
inline math::Strided broadcast_layout(const Shape& out, std::initializer_list<const Shape*> operands) {
  math::Strided s;
  s.rank = out.rank();
  for (int d = 0; d < s.rank; ++d) s.dims[d] = out[d];
  int k = 0;
  for (const Shape* in : operands) {
    int64_t stride = 1;
    for (int d = s.rank - 1; d >= 0; --d) {
      const int id = in->rank() - (s.rank - d);
      const int64_t dim = id >= 0 ? (*in)[id] : 1;
      s.stride[k][d] = dim == 1 ? 0 : stride;
      stride *= dim;
    }
    ++k;
  }
  merge_axes(s, k);
  return s;
}

// y = transpose(x, perm): operand 0 is x, read in y's element order (y axis i is x axis perm[i]).
inline math::Strided transpose_layout(const Shape& x, const int8_t* perm) {
  math::Strided s;
  s.rank = x.rank();
  int64_t xstride[graph::kMaxRank];
  int64_t st = 1;
  for (int d = x.rank() - 1; d >= 0; --d) xstride[d] = st, st *= x[d];
  for (int i = 0; i < s.rank; ++i) {
    s.dims[i] = x[perm[i]];
    s.stride[0][i] = xstride[perm[i]];
  }
  merge_axes(s, 1);
  return s;
}

}  // namespace tk::backends
