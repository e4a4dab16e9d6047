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

}  // namespace tk::nn::masks
