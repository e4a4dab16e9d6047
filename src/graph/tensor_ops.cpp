#include "graph/tensor_ops.h"

#include <algorithm>
#include <numeric>

#include "graph/bucket.h"
#include "trainkit/core/error.h"

namespace tk::graph::ops {
namespace {

// A copy: adding nodes may move the graph's storage.
Shape shape_of(OpBuilder& b, int x) { return b.node(x).shape; }

int binary_op(OpBuilder& b, Op op, BinaryFn f, int x, int y) {  // Binary or Compare
  Attrs at;
  at.binary = f;
  return b.add(op, {x, y}, at);
}

// x itself when it already has `shape`, else `op` (Reshape or BroadcastTo) to it.
int to_shape(OpBuilder& b, Op op, int x, Shape shape) {
  if (shape_of(b, x) == shape) return x;
  Attrs at;
  at.shape = std::move(shape);
  return b.add(op, {x}, at);
}

}  // namespace

Shape broadcast_shapes(const Shape& a, const Shape& b, const std::string& what) {
  const int r = std::max(a.rank(), b.rank());
  std::vector<int64_t> out(static_cast<size_t>(r));
  for (int i = 0; i < r; ++i) {
    const int ia = a.rank() - r + i, ib = b.rank() - r + i;
    const int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    if (da != db && da != 1 && db != 1)
      throw InvalidArgument(what + ": shapes " + a.to_string() + " and " + b.to_string() + " do not broadcast (axis " +
                            std::to_string(i - r) + ": " + std::to_string(da) + " vs " + std::to_string(db) +
                            "; each dimension must be equal or 1)");
    out[static_cast<size_t>(i)] = da == 1 ? db : da;
  }
  return Shape(std::move(out));
}

int normalize_axis(int axis, int rank, const std::string& what) {
  if (axis < -rank || axis >= std::max(rank, 1))
    throw InvalidArgument(what + ": axis " + std::to_string(axis) + " is out of range for rank " +
                          std::to_string(rank) + " (valid: " + std::to_string(-rank) + " to " +
                          std::to_string(rank - 1) + ")");
  return axis < 0 ? axis + rank : axis;
}

int unary(OpBuilder& b, UnaryFn f, int x, float p0, float p1) {
  Attrs at;
  at.unary = f;
  at.fn_param[0] = p0;
  at.fn_param[1] = p1;
  return b.add(Op::Unary, {x}, at);
}

int binary(OpBuilder& b, BinaryFn f, int x, int y) { return binary_op(b, Op::Binary, f, x, y); }

int compare(OpBuilder& b, BinaryFn f, int x, int y) { return binary_op(b, Op::Compare, f, x, y); }

int where(OpBuilder& b, int cond, int x, int y) { return b.add(Op::Where, {cond, x, y}); }

int scalar(OpBuilder& b, float value, int like) {
  Attrs at;
  at.value = value;
  at.shape = Shape{};
  at.dtype = b.node(like).dtype;
  return b.add(Op::Fill, {}, at);
}

int add_scalar(OpBuilder& b, int x, float value) {
  Attrs at;
  at.offset = value;
  return b.add(Op::Scale, {x}, at);
}

int mul_scalar(OpBuilder& b, int x, float value) {
  Attrs at;
  at.scale = value;
  return b.add(Op::Scale, {x}, at);
}

int cast(OpBuilder& b, int x, DType dtype) {
  if (b.node(x).dtype == dtype) return x;
  Attrs at;
  at.dtype = dtype;
  return b.add(Op::Cast, {x}, at);
}

int reduce(OpBuilder& b, ReduceFn f, int x, std::vector<int> axes, bool keepdims) {
  const int r = shape_of(b, x).rank();
  Attrs at;
  at.reduce = f;
  at.keepdims = keepdims;
  for (int a : axes) at.axes |= 1u << normalize_axis(a, r, "reduce over " + shape_of(b, x).to_string());
  return b.add(Op::Reduce, {x}, at);
}

int variance(OpBuilder& b, int x, const std::vector<int>& axes, bool keepdims) {
  const int mean = reduce(b, ReduceFn::mean, x, axes, true);
  const int sq = binary(b, BinaryFn::squared_difference, x, mean);
  return reduce(b, ReduceFn::mean, sq, axes, keepdims);
}

int arg_reduce(OpBuilder& b, ReduceFn f, int x, int axis, bool keepdims) {
  Attrs at;
  at.reduce = f;
  at.axis = axis;
  at.keepdims = keepdims;
  return b.add(Op::ArgReduce, {x}, at);
}

int sum_to(OpBuilder& b, int v, Shape shape) {
  const Shape& s = shape_of(b, v);
  if (s == shape) return v;
  const int lead = s.rank() - shape.rank();
  if (lead < 0) throw InvalidArgument("sum_to: " + s.to_string() + " cannot be summed to " + shape.to_string());
  std::vector<int> axes;
  for (int i = 0; i < s.rank(); ++i)
    if (i < lead || (shape[i - lead] == 1 && s[i] != 1)) axes.push_back(i);
  const int summed = axes.empty() ? v : reduce(b, ReduceFn::sum, v, axes, true);
  return shape_of(b, summed) == shape ? summed : reshape(b, summed, shape);
}

int broadcast_to(OpBuilder& b, int x, Shape shape) { return to_shape(b, Op::BroadcastTo, x, std::move(shape)); }

int part(OpBuilder& b, int v, int64_t begin, Shape shape) {
  if (begin % kBucketAlignElements == 0) {
    Attrs at;
    at.begin = begin;
    at.shape = std::move(shape);
    return b.add(Op::View, {v}, at);
  }
  const int flat = reshape(b, v, Shape{shape_of(b, v).numel()});
  const int64_t n = shape.numel();
  return reshape(b, slice(b, flat, 0, begin, n), std::move(shape));
}

int reshape(OpBuilder& b, int x, Shape shape) { return to_shape(b, Op::Reshape, x, std::move(shape)); }

int expand_dims(OpBuilder& b, int x, int axis) {
  std::vector<int64_t> d = shape_of(b, x).dims();
  const int a = normalize_axis(axis, static_cast<int>(d.size()) + 1, "expand_dims");
  d.insert(d.begin() + a, 1);
  return reshape(b, x, Shape(std::move(d)));
}

int squeeze(OpBuilder& b, int x, int axis) {
  std::vector<int64_t> d = shape_of(b, x).dims();
  const int a = normalize_axis(axis, static_cast<int>(d.size()), "squeeze");
  if (d[static_cast<size_t>(a)] != 1)
    throw InvalidArgument("squeeze: axis " + std::to_string(axis) + " of " + shape_of(b, x).to_string() + " is not 1");
  d.erase(d.begin() + a);
  return reshape(b, x, Shape(std::move(d)));
}

int transpose(OpBuilder& b, int x, const std::vector<int>& perm) {
  const int r = shape_of(b, x).rank();
  if (static_cast<int>(perm.size()) != r)
    throw InvalidArgument("transpose: a permutation of " + std::to_string(perm.size()) + " axes for " +
                          shape_of(b, x).to_string());
  bool identity = true;
  Attrs at;
  for (int i = 0; i < r; ++i) {
    const int p = normalize_axis(perm[static_cast<size_t>(i)], r, "transpose");
    identity = identity && p == i;
    at.perm[i] = static_cast<int8_t>(p);
  }
  if (identity) return x;
  return b.add(Op::Transpose, {x}, at);
}

int concat(OpBuilder& b, const std::vector<int>& xs, int axis) {
  if (xs.size() == 1) return xs[0];
  Attrs at;
  at.axis = axis;
  return b.add(Op::Concat, xs, at);
}

int slice(OpBuilder& b, int x, int axis, int64_t begin, int64_t size) {
  const Shape& s = shape_of(b, x);
  const int a = normalize_axis(axis, s.rank(), "slice");
  if (begin == 0 && size == s[a]) return x;
  Attrs at;
  at.axis = a;
  at.begin = begin;
  at.size = size;
  return b.add(Op::Slice, {x}, at);
}

int reverse(OpBuilder& b, int x, int axis) {
  Attrs at;
  at.axis = normalize_axis(axis, shape_of(b, x).rank(), "reverse");
  return b.add(Op::Reverse, {x}, at);
}

std::vector<int> split(OpBuilder& b, int x, int axis, const std::vector<int64_t>& sizes) {
  std::vector<int> out;
  int64_t begin = 0;
  for (int64_t n : sizes) {
    out.push_back(slice(b, x, axis, begin, n));
    begin += n;
  }
  return out;
}

int stack(OpBuilder& b, const std::vector<int>& xs, int axis) {
  if (xs.empty()) throw InvalidArgument("stack: no tensors");
  const int r = shape_of(b, xs[0]).rank();
  const int a = normalize_axis(axis, r + 1, "stack");
  std::vector<int> expanded;
  for (int x : xs) expanded.push_back(expand_dims(b, x, a));
  return concat(b, expanded, a);
}

int tile(OpBuilder& b, int x, const std::vector<int64_t>& reps) {
  const Shape s = shape_of(b, x);
  if (static_cast<int>(reps.size()) != s.rank())
    throw InvalidArgument("tile: " + std::to_string(reps.size()) + " repetitions for " + s.to_string());
  // x (d0, d1, ...) -> (1, d0, 1, d1, ...) broadcast to (r0, d0, r1, d1, ...) -> (r0 d0, r1 d1, ...)
  std::vector<int64_t> split_dims, big, out;
  for (int i = 0; i < s.rank(); ++i) {
    split_dims.insert(split_dims.end(), {1, s[i]});
    big.insert(big.end(), {reps[static_cast<size_t>(i)], s[i]});
    out.push_back(reps[static_cast<size_t>(i)] * s[i]);
  }
  const int wide = broadcast_to(b, reshape(b, x, Shape(split_dims)), Shape(big));
  return reshape(b, wide, Shape(out));
}

int pad(OpBuilder& b, int x, const std::vector<int64_t>& before, const std::vector<int64_t>& after, float value) {
  const int r = shape_of(b, x).rank();
  if (static_cast<int>(std::max(before.size(), after.size())) > r)
    throw InvalidArgument("pad: more padding entries than axes of " + shape_of(b, x).to_string());
  Attrs at;
  at.value = value;
  bool any = false;
  for (size_t i = 0; i < before.size(); ++i) any |= (at.pad_before[i] = before[i]) != 0;
  for (size_t i = 0; i < after.size(); ++i) any |= (at.pad_after[i] = after[i]) != 0;
  return any ? b.add(Op::Pad, {x}, at) : x;
}

int batch_matmul(OpBuilder& b, int x, int y, bool trans_a, bool trans_b) {
  Attrs at;
  at.trans_a = trans_a;
  at.trans_b = trans_b;
  return b.add(Op::BatchMatMul, {x, y}, at);
}

int gather(OpBuilder& b, int params, int indices, int axis) {
  Attrs at;
  at.axis = axis;
  return b.add(Op::Gather, {params, indices}, at);
}

int one_hot(OpBuilder& b, int indices, int64_t depth, DType dtype) {
  Attrs at;
  at.depth = depth;
  at.dtype = dtype;
  return b.add(Op::OneHot, {indices}, at);
}

int softmax(OpBuilder& b, int x, int axis) {
  const int r = shape_of(b, x).rank();
  const int a = normalize_axis(axis, r, "softmax");
  if (a == r - 1) return b.add(Op::Softmax, {x});
  std::vector<int> perm(static_cast<size_t>(r));
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[static_cast<size_t>(a)], perm.back());  // its own inverse
  return transpose(b, b.add(Op::Softmax, {transpose(b, x, perm)}), perm);
}

int log_softmax(OpBuilder& b, int x, int axis) {
  const int r = shape_of(b, x).rank();
  if (normalize_axis(axis, r, "log_softmax") == r - 1) return b.add(Op::LogSoftmax, {x});
  return binary(b, BinaryFn::subtract, x, reduce(b, ReduceFn::logsumexp, x, {axis}, true));
}

}  // namespace tk::graph::ops
