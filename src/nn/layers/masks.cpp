#include "nn/layers/masks.h"

#include "graph/tensor_ops.h"

namespace tk::nn::masks {
namespace ops = graph::ops;
using graph::BinaryFn;

int not_equal(graph::OpBuilder& b, int x, float value) {
  const int xf = ops::cast(b, x, DType::f32);  // the Compare kernels are float32's
  return ops::cast(b, ops::compare(b, BinaryFn::not_equal, xf, ops::scalar(b, value, xf)), DType::f32);
}

int as(graph::OpBuilder& b, int mask, DType dtype) { return ops::cast(b, mask, dtype); }

int condition(graph::OpBuilder& b, int mask) {
  return ops::compare(b, BinaryFn::greater, mask, ops::scalar(b, 0.5f, mask));
}

int logical_and(graph::OpBuilder& b, int a, int c) { return ops::binary(b, BinaryFn::multiply, a, c); }

int logical_or(graph::OpBuilder& b, int a, int c) { return ops::binary(b, BinaryFn::maximum, a, c); }

int any_last(graph::OpBuilder& b, int mask) { return ops::reduce(b, graph::ReduceFn::max, mask, {-1}, false); }

int select(graph::OpBuilder& b, int mask, int x, float fill) {
  int m = mask;
  while (b.node(m).shape.rank() < b.node(x).shape.rank()) m = ops::expand_dims(b, m, -1);
  return ops::where(b, condition(b, m), x, ops::scalar(b, fill, x));
}

// Built from constants without an iota op: a row w = [1, 0 x S, 1 x (T-1)] (length L = T + S) tiled T times and read
// as (T, L - 1) shifts row i by i, so element (i, j) is w[(j - i) mod L], which is 1 exactly when j - i is in
// [-(T-1), 0]; columns [0, S) are the mask.
int causal(graph::OpBuilder& b, int64_t t, int64_t s) {
  std::vector<int> parts = {b.g.fill(1.0f, Shape{1}), b.g.fill(0.0f, Shape{s})};
  if (t > 1) parts.push_back(b.g.fill(1.0f, Shape{t - 1}));
  const int w = ops::concat(b, parts, 0);  // (T + S)
  const int64_t l = t + s;
  const int tiled = ops::slice(b, ops::tile(b, w, {t}), 0, 0, t * (l - 1));
  const int rows = ops::slice(b, ops::reshape(b, tiled, Shape{t, l - 1}), 1, 0, s);  // (T, S)
  return ops::compare(b, BinaryFn::greater, rows, ops::scalar(b, 0.5f, rows));
}

}  // namespace tk::nn::masks
