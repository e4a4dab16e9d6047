// The general tensor vocabulary as functions that emit graph ops: what a composite layer's call builds its forward
// from (the gradient then comes from autodiff) and what the gradient rules of these ops are written in. NumPy's
// broadcasting and axis conventions (negative axes count from the end); every function checks its operands and
// throws InvalidArgument naming the op, the owner and the shapes.
//
//   tk::graph::OpBuilder b{g, nullptr, "layer_norm"};
//   namespace o = tk::graph::ops;
//   int mean = o::reduce(b, ReduceFn::mean, x, {-1}, /*keepdims=*/true);     // (rows, 1)
//   int centered = o::binary(b, BinaryFn::subtract, x, mean);                 // (rows, n), broadcast
//   int var = o::reduce(b, ReduceFn::mean, o::unary(b, UnaryFn::square, centered), {-1}, true);
//   int y = o::binary(b, BinaryFn::multiply, centered, o::unary(b, UnaryFn::rsqrt, o::add_scalar(b, var, 1e-3f)));
#pragma once
#include <vector>

#include "graph/graph.h"

namespace tk::graph::ops {

// The NumPy broadcast of two shapes; throws InvalidArgument naming `what` and both shapes when they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b, const std::string& what);
// axis in [-rank, rank) -> [0, rank); throws naming `what` otherwise.
int normalize_axis(int axis, int rank, const std::string& what);

int unary(OpBuilder& b, UnaryFn f, int x, float p0 = 0.0f, float p1 = 0.0f);
int binary(OpBuilder& b, BinaryFn f, int x, int y);
int compare(OpBuilder& b, BinaryFn f, int x, int y);  // bool
int where(OpBuilder& b, int cond, int x, int y);
// A scalar constant in `like`'s dtype (broadcasts against anything).
int scalar(OpBuilder& b, float value, int like);
int add_scalar(OpBuilder& b, int x, float value);  // x + value (Scale: one op, no broadcast)
int mul_scalar(OpBuilder& b, int x, float value);  // x * value
int cast(OpBuilder& b, int x, DType dtype);

int reduce(OpBuilder& b, ReduceFn f, int x, std::vector<int> axes, bool keepdims);
// The biased variance over `axes` (Keras' ops.var / ops.moments).
int variance(OpBuilder& b, int x, const std::vector<int>& axes, bool keepdims);
int arg_reduce(OpBuilder& b, ReduceFn f, int x, int axis, bool keepdims);  // f: max or min; int32
// v summed over the axes it was broadcast along, to `shape` (a broadcasting op's gradient).
int sum_to(OpBuilder& b, int v, Shape shape);  // shapes by value: adding nodes may move the graph's storage
int broadcast_to(OpBuilder& b, int x, Shape shape);

int reshape(OpBuilder& b, int x, Shape shape);
int expand_dims(OpBuilder& b, int x, int axis);
int squeeze(OpBuilder& b, int x, int axis);
int transpose(OpBuilder& b, int x, const std::vector<int>& perm);
int concat(OpBuilder& b, const std::vector<int>& xs, int axis);
int slice(OpBuilder& b, int x, int axis, int64_t begin, int64_t size);
int reverse(OpBuilder& b, int x, int axis);  // NumPy's flip along one axis
// Elements [begin, begin + shape.numel()) of v's data as `shape`: a View (the same memory, no copy) where begin is
// aligned as Views need (graph/bucket.h's kBucketAlignElements), else a Slice of v flattened. For gradient graphs
// reading the parts of a fused gradient op's one output (a View has no gradient of its own).
int part(OpBuilder& b, int v, int64_t begin, Shape shape);
std::vector<int> split(OpBuilder& b, int x, int axis, const std::vector<int64_t>& sizes);
int stack(OpBuilder& b, const std::vector<int>& xs, int axis);
int tile(OpBuilder& b, int x, const std::vector<int64_t>& reps);
// value around x: before[i] / after[i] elements on axis i (missing entries: 0).
int pad(OpBuilder& b, int x, const std::vector<int64_t>& before, const std::vector<int64_t>& after, float value = 0.0f);

int batch_matmul(OpBuilder& b, int x, int y, bool trans_a = false, bool trans_b = false);
int gather(OpBuilder& b, int params, int indices, int axis = 0);
int one_hot(OpBuilder& b, int indices, int64_t depth, DType dtype = DType::f32);

// Numerically stable (the max is subtracted): Softmax on the last axis, a transpose around it on another.
int softmax(OpBuilder& b, int x, int axis = -1);
int log_softmax(OpBuilder& b, int x, int axis = -1);  // x - logsumexp(x, axis); the last axis: one LogSoftmax op

}  // namespace tk::graph::ops
