// BatchMatMul's shapes on every backend: the per-matrix GEMM (m, n, k and the transposes) and the batch as strided
// batches of GEMMs. The output's batch axes, with each operand's broadcast into them (backends/strided.h, merged), end
// in one axis that a strided-batched GEMM covers (cuBLASLt's batch count and strides; a stride of 0 repeats a
// broadcast operand's matrix); the merged axes before it, if any, are a loop of such calls.
//
//   const cpu::GemmShape s = backends::batch_gemm_shape(g, node);
//   const backends::GemmBatches b = backends::gemm_batches(a_shape, b_shape, y_shape, s);
//   for (int64_t o = 0; o < b.calls; ++o)   // call o: b.count products, matrix j of operand k at
//     ... a + b.offset(0, o) + j * b.stride[0], w + b.offset(1, o) + j * b.stride[1], y + b.offset(2, o) + j *
//     b.stride[2]
#pragma once
#include <vector>

#include "backends/cpu/gemm.h"
#include "backends/strided.h"
#include "graph/graph.h"

namespace tk::backends {

// The GEMM of one batch element: y (m, n) = op(a) op(b), a (m, k) or (k, m) when trans_a, b (k, n) or (n, k).
inline cpu::GemmShape batch_gemm_shape(const graph::Graph& g, const graph::Node& n) {
  const Shape& a = g[n.inputs[0]].shape;
  cpu::GemmShape s;
  s.m = n.shape[-2];
  s.n = n.shape[-1];
  s.k = n.attrs.trans_a ? a[-2] : a[-1];
  s.ta = n.attrs.trans_a;
  s.tb = n.attrs.trans_b;
  return s;
}

// A shape's batch axes (all but the last two).
inline Shape batch_part(const Shape& s) { return Shape(std::vector<int64_t>(s.dims().begin(), s.dims().end() - 2)); }

struct GemmBatches {
  int64_t calls = 1;  // strided-batched GEMMs
  int64_t count = 1;  // products per call
  // Elements from one matrix to the next within a call, per operand (0: a, 1: b, 2: y); 0 repeats a broadcast one.
  int64_t stride[3] = {0, 0, 0};
  math::Strided outer;  // the calls' layout over the leading merged batch axes, in matrices (operand 0: a, 1: b)
  int64_t matrix[3] = {0, 0, 0};  // elements per matrix: a (m k), b (k n), y (m n)

  // The element offset where call o's first matrix of operand k (0: a, 1: b, 2: y) starts.
  int64_t offset(int k, int64_t o) const {
    return k == 2 ? o * count * matrix[2] : math::strided_offset(outer, k, o) * matrix[k];
  }
};

inline GemmBatches gemm_batches(const Shape& a, const Shape& b, const Shape& y, const cpu::GemmShape& s) {
  const Shape ab = batch_part(a), bb = batch_part(b), yb = batch_part(y);
  const math::Strided l = broadcast_layout(yb, {&ab, &bb});  // rank >= 1 (a scalar batch is one axis of 1)
  GemmBatches g;
  g.matrix[0] = s.m * s.k;
  g.matrix[1] = s.k * s.n;
  g.matrix[2] = s.m * s.n;
  const int last = l.rank - 1;
  g.count = l.dims[last];
  g.stride[0] = l.stride[0][last] * g.matrix[0];
  g.stride[1] = l.stride[1][last] * g.matrix[1];
  g.stride[2] = g.matrix[2];
  g.outer.rank = last > 0 ? last : 1;
  g.outer.dims[0] = 1;
  for (int d = 0; d < last; ++d) {
    g.outer.dims[d] = l.dims[d];
    for (int k = 0; k < 2; ++k) g.outer.stride[k][d] = l.stride[k][d];
    g.calls *= l.dims[d];
  }
  return g;
}

}  // namespace tk::backends
