// The op table: per op its name, arity, shape rule and gradient rule. Kernels live in backends/.
#include <array>

#include "graph/graph.h"
#include "trainkit/core/error.h"

namespace tk::graph {
namespace {

// ---------------------------------------------------------------- helpers
const Shape& in_shape(const Graph& g, int node, int i) { return g[g[node].inputs[static_cast<size_t>(i)]].shape; }

[[noreturn]] void shape_error(const Graph& g, int node, const std::string& why) {
  std::string shapes;
  for (int in : g[node].inputs) shapes += (shapes.empty() ? "" : ", ") + g[in].shape.to_string();
  throw InvalidArgument(std::string(op_name(g[node].op)) + " '" + g[node].name + "': " + why + " (input shapes " +
                        shapes + ")");
}

// ---------------------------------------------------------------- shape rules
Shape shape_source(const Graph& g, int node) { return g[node].attrs.shape; }

Shape shape_same_as_first(const Graph& g, int node) {
  const Shape& s = in_shape(g, node, 0);
  for (size_t i = 1; i < g[node].inputs.size(); ++i)
    if (in_shape(g, node, static_cast<int>(i)) != s) shape_error(g, node, "inputs must have equal shapes");
  return s;
}

Shape shape_matmul(const Graph& g, int node) {
  const Shape& a = in_shape(g, node, 0);
  const Shape& b = in_shape(g, node, 1);
  if (a.rank() != 2 || b.rank() != 2) shape_error(g, node, "operands must be matrices");
  const Attrs& at = g[node].attrs;
  int64_t m = at.trans_a ? a[1] : a[0], k = at.trans_a ? a[0] : a[1];
  int64_t k2 = at.trans_b ? b[1] : b[0], n = at.trans_b ? b[0] : b[1];
  if (k != k2) shape_error(g, node, "inner dimensions differ: " + std::to_string(k) + " vs " + std::to_string(k2));
  return Shape{m, n};
}

Shape shape_bias_add(const Graph& g, int node) {
  const Shape& x = in_shape(g, node, 0);
  const Shape& b = in_shape(g, node, 1);
  if (b.rank() != 1 || x.rank() < 1 || x[-1] != b[0]) shape_error(g, node, "bias length must equal the last dimension");
  return x;
}

Shape shape_bias_grad(const Graph& g, int node) {
  const Shape& x = in_shape(g, node, 0);
  if (x.rank() < 1) shape_error(g, node, "needs rank >= 1");
  return Shape{x[-1]};
}

Shape shape_reshape(const Graph& g, int node) {
  const Shape& to = g[node].attrs.shape;
  if (to.numel() != in_shape(g, node, 0).numel()) shape_error(g, node, "cannot reshape to " + to.to_string());
  return to;
}

Shape shape_concat(const Graph& g, int node) {
  Shape s = in_shape(g, node, 0);
  int64_t last = 0;
  for (size_t i = 0; i < g[node].inputs.size(); ++i) {
    const Shape& si = in_shape(g, node, static_cast<int>(i));
    Shape a = si, b = s;
    if (a.rank() < 1 || a.rank() != b.rank()) shape_error(g, node, "inputs must have equal rank >= 1");
    a[-1] = 0;
    b[-1] = 0;
    if (a != b) shape_error(g, node, "inputs must match in all but the last dimension");
    last += si[-1];
  }
  s[-1] = last;
  return s;
}

Shape shape_slice(const Graph& g, int node) {
  Shape s = in_shape(g, node, 0);
  const Attrs& a = g[node].attrs;
  if (s.rank() < 1 || a.begin < 0 || a.size < 0 || a.begin + a.size > s[-1])
    shape_error(g, node, "slice [" + std::to_string(a.begin) + ", +" + std::to_string(a.size) + ") out of range");
  s[-1] = a.size;
  return s;
}

Shape shape_dy_x(const Graph& g, int node) {  // (dy, x) -> shape of x
  if (in_shape(g, node, 0) != in_shape(g, node, 1)) shape_error(g, node, "dy and x must have equal shapes");
  return in_shape(g, node, 1);
}

Shape shape_loss(const Graph& g, int node) {
  const Shape& p = in_shape(g, node, 0);
  const Shape& t = in_shape(g, node, 1);
  Op op = g[node].op;
  bool sparse = op == Op::SparseCceLoss || op == Op::SparseCceLossGrad || op == Op::SparseCategoricalAccuracy;
  if (p.rank() < 1) shape_error(g, node, "predictions need a batch dimension");
  if (sparse) {
    bool ok = (t.rank() == p.rank() - 1 || (t.rank() == p.rank() && t[-1] == 1)) && t[0] == p[0];
    if (!ok)
      shape_error(g, node,
                  "sparse labels must have shape " + p.with_batch(p[0]).to_string() + " without its last axis");
  } else if (t != p) {
    shape_error(g, node, "targets must have the shape of the predictions");
  }
  bool is_grad = op == Op::MseLossGrad || op == Op::BceLossGrad || op == Op::CceLossGrad || op == Op::SparseCceLossGrad;
  return is_grad ? p : Shape{};
}

Shape shape_update(const Graph& g, int node) {
  const Shape& p = in_shape(g, node, 0);
  for (size_t i = 1; i < g[node].inputs.size(); ++i)
    if (in_shape(g, node, static_cast<int>(i)) != p) shape_error(g, node, "gradient and slots must match the variable");
  if (!g[node].attrs.update) shape_error(g, node, "update op without optimizer config");
  return Shape{};
}

// ---------------------------------------------------------------- gradient rules
void grad_matmul(GradBuilder& b, int node, int dy, const bool* need, int* dx) {
  Node n = b.node(node);
  int A = n.inputs[0], B = n.inputs[1];
  bool ta = n.attrs.trans_a, tb = n.attrs.trans_b;
  auto mm = [&](int x, int y, bool tx, bool ty) {
    Attrs at;
    at.trans_a = tx;
    at.trans_b = ty;
    return b.add(Op::MatMul, {x, y}, at);
  };
  if (!ta && !tb) {
    if (need[0]) dx[0] = mm(dy, B, false, true);
    if (need[1]) dx[1] = mm(A, dy, true, false);
  } else if (!ta && tb) {
    if (need[0]) dx[0] = mm(dy, B, false, false);
    if (need[1]) dx[1] = mm(dy, A, true, false);
  } else if (ta && !tb) {
    if (need[0]) dx[0] = mm(B, dy, false, true);
    if (need[1]) dx[1] = mm(A, dy, false, false);
  } else {
    if (need[0]) dx[0] = mm(B, dy, true, true);
    if (need[1]) dx[1] = mm(dy, A, true, true);
  }
}

void grad_bias_add(GradBuilder& b, int, int dy, const bool* need, int* dx) {
  if (need[0]) dx[0] = dy;
  if (need[1]) dx[1] = b.add(Op::BiasGrad, {dy});
}

void grad_add(GradBuilder& b, int node, int dy, const bool* need, int* dx) {
  for (size_t i = 0; i < b.node(node).inputs.size(); ++i)
    if (need[i]) dx[i] = dy;
}

void grad_mul(GradBuilder& b, int node, int dy, const bool* need, int* dx) {
  Node n = b.node(node);
  if (need[0]) dx[0] = b.add(Op::Mul, {dy, n.inputs[1]});
  if (need[1]) dx[1] = b.add(Op::Mul, {dy, n.inputs[0]});
}

void grad_reshape(GradBuilder& b, int node, int dy, const bool* need, int* dx) {
  Attrs at;
  at.shape = b.node(b.node(node).inputs[0]).shape;
  if (need[0]) dx[0] = b.add(Op::Reshape, {dy}, at);
}

void grad_concat(GradBuilder& b, int node, int dy, const bool* need, int* dx) {
  Node n = b.node(node);
  int64_t begin = 0;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    int64_t size = b.node(n.inputs[i]).shape[-1];
    if (need[i]) {
      Attrs at;
      at.begin = begin;
      at.size = size;
      dx[i] = b.add(Op::Slice, {dy}, at);
    }
    begin += size;
  }
}

// Activation gradient from the input x: GradOp(dy, x).
template <Op GradOp>
void grad_from_x(GradBuilder& b, int node, int dy, const bool* need, int* dx) {
  Node n = b.node(node);
  if (need[0]) dx[0] = b.add(GradOp, {dy, n.inputs[0]}, n.attrs);
}
// Activation gradient from the output y: GradOp(dy, y).
template <Op GradOp>
void grad_from_y(GradBuilder& b, int node, int dy, const bool* need, int* dx) {
  Attrs at = b.node(node).attrs;
  if (need[0]) dx[0] = b.add(GradOp, {dy, node}, at);
}

template <Op GradOp>
void grad_loss(GradBuilder& b, int node, int dy, const bool* need, int* dx) {
  Node n = b.node(node);
  if (need[0]) dx[0] = b.add(GradOp, {n.inputs[0], n.inputs[1], dy}, n.attrs);
  // Targets are data: never differentiated.
}

// ---------------------------------------------------------------- the table
constexpr std::array<OpInfo, kOpCount> kTable{{
    {Op::Input, "Input", 0, true, shape_source, nullptr},
    {Op::Variable, "Variable", 0, true, shape_source, nullptr},
    {Op::Fill, "Fill", 0, true, shape_source, nullptr},
    {Op::MatMul, "MatMul", 2, true, shape_matmul, grad_matmul},
    {Op::BiasAdd, "BiasAdd", 2, true, shape_bias_add, grad_bias_add},
    {Op::BiasGrad, "BiasGrad", 1, true, shape_bias_grad, nullptr},
    {Op::Add, "Add", -1, true, shape_same_as_first, grad_add},
    {Op::Mul, "Mul", 2, true, shape_same_as_first, grad_mul},
    {Op::Reshape, "Reshape", 1, true, shape_reshape, grad_reshape},
    {Op::Concat, "Concat", -1, true, shape_concat, grad_concat},
    {Op::Slice, "Slice", 1, true, shape_slice, nullptr},
    {Op::Relu, "Relu", 1, true, shape_same_as_first, grad_from_y<Op::ReluGrad>},
    {Op::ReluGrad, "ReluGrad", 2, true, shape_dy_x, nullptr},
    {Op::Sigmoid, "Sigmoid", 1, true, shape_same_as_first, grad_from_y<Op::SigmoidGrad>},
    {Op::SigmoidGrad, "SigmoidGrad", 2, true, shape_dy_x, nullptr},
    {Op::Tanh, "Tanh", 1, true, shape_same_as_first, grad_from_y<Op::TanhGrad>},
    {Op::TanhGrad, "TanhGrad", 2, true, shape_dy_x, nullptr},
    {Op::Gelu, "Gelu", 1, true, shape_same_as_first, grad_from_x<Op::GeluGrad>},
    {Op::GeluGrad, "GeluGrad", 2, true, shape_dy_x, nullptr},
    {Op::Elu, "Elu", 1, true, shape_same_as_first, grad_from_x<Op::EluGrad>},
    {Op::EluGrad, "EluGrad", 2, true, shape_dy_x, nullptr},
    {Op::LeakyRelu, "LeakyRelu", 1, true, shape_same_as_first, grad_from_x<Op::LeakyReluGrad>},
    {Op::LeakyReluGrad, "LeakyReluGrad", 2, true, shape_dy_x, nullptr},
    {Op::Softmax, "Softmax", 1, true, shape_same_as_first, grad_from_y<Op::SoftmaxGrad>},
    {Op::SoftmaxGrad, "SoftmaxGrad", 2, true, shape_dy_x, nullptr},
    {Op::DropoutMask, "DropoutMask", 0, true, shape_source, nullptr},
    {Op::MseLoss, "MseLoss", 2, true, shape_loss, grad_loss<Op::MseLossGrad>},
    {Op::MseLossGrad, "MseLossGrad", 3, true, shape_loss, nullptr},
    {Op::BceLoss, "BceLoss", 2, true, shape_loss, grad_loss<Op::BceLossGrad>},
    {Op::BceLossGrad, "BceLossGrad", 3, true, shape_loss, nullptr},
    {Op::CceLoss, "CceLoss", 2, true, shape_loss, grad_loss<Op::CceLossGrad>},
    {Op::CceLossGrad, "CceLossGrad", 3, true, shape_loss, nullptr},
    {Op::SparseCceLoss, "SparseCceLoss", 2, true, shape_loss, grad_loss<Op::SparseCceLossGrad>},
    {Op::SparseCceLossGrad, "SparseCceLossGrad", 3, true, shape_loss, nullptr},
    {Op::BinaryAccuracy, "BinaryAccuracy", 2, true, shape_loss, nullptr},
    {Op::CategoricalAccuracy, "CategoricalAccuracy", 2, true, shape_loss, nullptr},
    {Op::SparseCategoricalAccuracy, "SparseCategoricalAccuracy", 2, true, shape_loss, nullptr},
    {Op::SgdUpdate, "SgdUpdate", 3, false, shape_update, nullptr},
    {Op::AdamUpdate, "AdamUpdate", 4, false, shape_update, nullptr},
    {Op::RmspropUpdate, "RmspropUpdate", 5, false, shape_update, nullptr},
}};

constexpr bool table_in_enum_order() {
  for (int i = 0; i < kOpCount; ++i)
    if (static_cast<int>(kTable[static_cast<size_t>(i)].op) != i) return false;
  return true;
}
static_assert(kTable.size() == static_cast<size_t>(kOpCount), "every Op needs a row in kTable");
static_assert(table_in_enum_order(), "kTable rows must follow the order of enum Op");

}  // namespace

const OpInfo& op_info(Op op) { return kTable[static_cast<size_t>(op)]; }

}  // namespace tk::graph
