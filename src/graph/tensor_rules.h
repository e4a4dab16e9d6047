// The op table's rules (shape, dtype, gradient) for the general tensor ops (graph/op.h, from Unary on; the few they
// share with the other ops are op_table.cpp's), and the axis-aware rules of Concat and Slice. Internal to graph/:
// op_table.cpp lists them in its rows.
#pragma once
#include "graph/graph.h"

namespace tk::graph::rules {

const Shape& in_shape(const Graph& g, int node, int i);  // the node's i-th input's shape
// Throws InvalidArgument "<op> '<name>': <why> (input shapes <shapes><extra>)".
[[noreturn]] void shape_error(const Graph& g, int node, const std::string& why, const std::string& extra = {});
DType in_dtype(const Graph& g, int node, int i);  // the node's i-th input's dtype
// Throws InvalidArgument "<op> '<name>': <why> (input dtypes <dtypes><extra>)".
[[noreturn]] void dtype_error(const Graph& g, int node, const std::string& why, const std::string& extra = {});

Shape shape_broadcast(const Graph& g, int node);  // Binary, Compare, Where
Shape shape_reduce(const Graph& g, int node);
Shape shape_arg_reduce(const Graph& g, int node);
Shape shape_broadcast_to(const Graph& g, int node);
Shape shape_transpose(const Graph& g, int node);
Shape shape_pad_nd(const Graph& g, int node);
Shape shape_batch_matmul(const Graph& g, int node);
Shape shape_gather(const Graph& g, int node);
Shape shape_gather_grad(const Graph& g, int node);
Shape shape_one_hot(const Graph& g, int node);
Shape shape_concat(const Graph& g, int node);
Shape shape_assign(const Graph& g, int node);
Shape shape_layer_norm(const Graph& g, int node);  // the four LayerNorm* ops
Shape shape_slice(const Graph& g, int node);
Shape shape_reverse(const Graph& g, int node);
Shape shape_constrain(const Graph& g, int node);  // (Variable f32) -> no output

DType dtype_arithmetic(const Graph& g, int node);  // Binary
DType dtype_compare(const Graph& g, int node);
DType dtype_reduce(const Graph& g, int node);
DType dtype_where(const Graph& g, int node);
DType dtype_arg_reduce(const Graph& g, int node);
DType dtype_gather(const Graph& g, int node);
DType dtype_gather_grad(const Graph& g, int node);
DType dtype_one_hot(const Graph& g, int node);
DType dtype_step_value(const Graph& g, int node);
DType dtype_assign(const Graph& g, int node);
DType dtype_random(const Graph& g, int node);  // RandomUniform, RandomNormal: float32
DType dtype_constrain(const Graph& g, int node);

void grad_binary(GradBuilder& b, int node, int dy, const bool* need, int* dx);
void grad_where(GradBuilder& b, int node, int dy, const bool* need, int* dx);
void grad_reduce(GradBuilder& b, int node, int dy, const bool* need, int* dx);
void grad_broadcast_to(GradBuilder& b, int node, int dy, const bool* need, int* dx);
void grad_transpose(GradBuilder& b, int node, int dy, const bool* need, int* dx);
void grad_pad(GradBuilder& b, int node, int dy, const bool* need, int* dx);
void grad_batch_matmul(GradBuilder& b, int node, int dy, const bool* need, int* dx);
// The products giving op(a)' and op(b)' of node = op(a) . op(b) (its trans_a / trans_b) from dy, as `op` nodes (MatMul
// or BatchMatMul): g[i] for each input with need[i], a before b (before any sum over broadcast batch axes).
void matmul_grads(GradBuilder& b, Op op, int node, int dy, const bool* need, int* g);
void grad_gather(GradBuilder& b, int node, int dy, const bool* need, int* dx);
void grad_concat(GradBuilder& b, int node, int dy, const bool* need, int* dx);
void grad_slice(GradBuilder& b, int node, int dy, const bool* need, int* dx);
void grad_layer_norm_apply(GradBuilder& b, int node, int dy, const bool* need, int* dx);
void grad_log_softmax(GradBuilder& b, int node, int dy, const bool* need, int* dx);

}  // namespace tk::graph::rules
