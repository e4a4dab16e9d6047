#include "graph/tensor_rules.h"

#include "graph/bucket.h"
#include "graph/tensor_ops.h"
#include "trainkit/core/error.h"

namespace tk::graph::rules {
namespace {
std::string what(const Graph& g, int node) { return std::string(op_name(g[node].op)) + " '" + g[node].name + "'"; }
}  // namespace

const Shape& in_shape(const Graph& g, int node, int i) { return g[g[node].inputs[static_cast<size_t>(i)]].shape; }

void shape_error(const Graph& g, int node, const std::string& why, const std::string& extra) {
  std::string shapes;
  for (int in : g[node].inputs) shapes += (shapes.empty() ? "" : ", ") + g[in].shape.to_string();
  throw InvalidArgument(what(g, node) + ": " + why + " (input shapes " + shapes + extra + ")");
}

DType in_dtype(const Graph& g, int node, int i) { return g[g[node].inputs[static_cast<size_t>(i)]].dtype; }

void dtype_error(const Graph& g, int node, const std::string& why, const std::string& extra) {
  std::string s;
  for (int in : g[node].inputs) s += (s.empty() ? "" : ", ") + std::string(dtype_name(g[in].dtype));
  throw InvalidArgument(what(g, node) + ": " + why + " (input dtypes " + s + extra + ")");
}

namespace {

// s, once checked against kMaxRank.
const Shape& check_rank(const Graph& g, int node, const Shape& s) {
  if (s.rank() > kMaxRank) shape_error(g, node, "rank above " + std::to_string(kMaxRank) + " is not supported");
  return s;
}

int axis_of(const Graph& g, int node, int rank) {
  const int a = g[node].attrs.axis;
  if (a < -rank || a >= std::max(rank, 1))
    shape_error(g, node, "axis " + std::to_string(a) + " is out of range for rank " + std::to_string(rank));
  return a < 0 ? a + rank : a;
}

bool is_index(DType t) { return t == DType::i32 || t == DType::i64; }

std::vector<int> axes_of(uint32_t mask, int rank) {
  std::vector<int> axes;
  for (int i = 0; i < rank; ++i)
    if (mask & (1u << i)) axes.push_back(i);
  return axes;
}

}  // namespace

// ---------------------------------------------------------------- shapes
Shape shape_broadcast(const Graph& g, int node) {
  Shape s = in_shape(g, node, 0);
  for (size_t i = 1; i < g[node].inputs.size(); ++i) {
    try {
      s = ops::broadcast_shapes(s, in_shape(g, node, static_cast<int>(i)), what(g, node));
    } catch (const InvalidArgument&) {
      shape_error(g, node, "operands do not broadcast (each dimension, aligned from the last, must be equal or 1)");
    }
  }
  return check_rank(g, node, s);
}

Shape shape_reduce(const Graph& g, int node) {
  const Shape& x = in_shape(g, node, 0);
  const Attrs& a = g[node].attrs;
  check_rank(g, node, x);
  if (a.reduce == ReduceFn::kCount) shape_error(g, node, "needs a reduction (attrs.reduce)");
  if (x.rank() < 32 && (a.axes >> x.rank()) != 0) shape_error(g, node, "reduces an axis beyond the input's rank");
  std::vector<int64_t> out;
  for (int i = 0; i < x.rank(); ++i) {
    const bool reduced = a.axes & (1u << i);
    if (reduced && x[i] == 0 && (a.reduce == ReduceFn::max || a.reduce == ReduceFn::min))
      shape_error(g, node, "max/min over an empty axis " + std::to_string(i));
    if (!reduced)
      out.push_back(x[i]);
    else if (a.keepdims)
      out.push_back(1);
  }
  return Shape(std::move(out));
}

Shape shape_arg_reduce(const Graph& g, int node) {
  const Shape& x = in_shape(g, node, 0);
  check_rank(g, node, x);
  const ReduceFn f = g[node].attrs.reduce;
  if (f != ReduceFn::max && f != ReduceFn::min) shape_error(g, node, "attrs.reduce must be max or min");
  const int a = axis_of(g, node, x.rank());
  if (x[a] == 0) shape_error(g, node, "an index of nothing: axis " + std::to_string(a) + " is empty");
  std::vector<int64_t> out = x.dims();
  if (g[node].attrs.keepdims)
    out[static_cast<size_t>(a)] = 1;
  else
    out.erase(out.begin() + a);
  return Shape(std::move(out));
}

Shape shape_broadcast_to(const Graph& g, int node) {
  const Shape& x = in_shape(g, node, 0);
  const Shape& to = g[node].attrs.shape;
  check_rank(g, node, to);
  bool ok = to.rank() >= x.rank();
  for (int i = 0; ok && i < x.rank(); ++i) {
    const int64_t d = x[x.rank() - 1 - i], t = to[to.rank() - 1 - i];
    ok = d == t || d == 1;
  }
  if (!ok) shape_error(g, node, "cannot broadcast to " + to.to_string());
  return to;
}

Shape shape_transpose(const Graph& g, int node) {
  const Shape& x = in_shape(g, node, 0);
  check_rank(g, node, x);
  const int8_t* p = g[node].attrs.perm;
  uint32_t seen = 0;
  std::vector<int64_t> out;
  for (int i = 0; i < x.rank(); ++i) {
    if (p[i] < 0 || p[i] >= x.rank() || (seen & (1u << p[i])))
      shape_error(g, node, "attrs.perm is not a permutation of the " + std::to_string(x.rank()) + " axes");
    seen |= 1u << p[i];
    out.push_back(x[p[i]]);
  }
  return Shape(std::move(out));
}

Shape shape_pad_nd(const Graph& g, int node) {
  Shape s = in_shape(g, node, 0);
  check_rank(g, node, s);
  const Attrs& a = g[node].attrs;
  for (int i = 0; i < kMaxRank; ++i) {
    if (a.pad_before[i] < 0 || a.pad_after[i] < 0) shape_error(g, node, "negative padding");
    if (i >= s.rank() && (a.pad_before[i] || a.pad_after[i])) shape_error(g, node, "pads an axis beyond its rank");
    if (i < s.rank()) s[i] += a.pad_before[i] + a.pad_after[i];
  }
  return s;
}

Shape shape_batch_matmul(const Graph& g, int node) {
  const Shape& a = in_shape(g, node, 0);
  const Shape& b = in_shape(g, node, 1);
  if (a.rank() < 2 || b.rank() < 2) shape_error(g, node, "operands must have rank >= 2 (..., rows, columns)");
  const Attrs& at = g[node].attrs;
  const int64_t m = at.trans_a ? a[-1] : a[-2], k = at.trans_a ? a[-2] : a[-1];
  const int64_t k2 = at.trans_b ? b[-1] : b[-2], n = at.trans_b ? b[-2] : b[-1];
  if (k != k2) shape_error(g, node, "inner dimensions differ: " + std::to_string(k) + " vs " + std::to_string(k2));
  std::vector<int64_t> ab(a.dims().begin(), a.dims().end() - 2), bb(b.dims().begin(), b.dims().end() - 2);
  Shape batch;
  try {
    batch = ops::broadcast_shapes(Shape(ab), Shape(bb), what(g, node));
  } catch (const InvalidArgument&) {
    shape_error(g, node, "batch axes do not broadcast");
  }
  std::vector<int64_t> out = batch.dims();
  out.push_back(m);
  out.push_back(n);
  return check_rank(g, node, Shape(std::move(out)));
}

namespace {
Shape gathered(const Graph& g, int node, const Shape& params, const Shape& indices) {
  const int a = axis_of(g, node, params.rank());
  std::vector<int64_t> out(params.dims().begin(), params.dims().begin() + a);
  out.insert(out.end(), indices.dims().begin(), indices.dims().end());
  out.insert(out.end(), params.dims().begin() + a + 1, params.dims().end());
  return check_rank(g, node, Shape(std::move(out)));
}
}  // namespace

Shape shape_gather(const Graph& g, int node) {
  const Shape& p = in_shape(g, node, 0);
  if (p.rank() < 1) shape_error(g, node, "params must have rank >= 1");
  return gathered(g, node, p, in_shape(g, node, 1));
}

Shape shape_gather_grad(const Graph& g, int node) {
  const Shape& to = g[node].attrs.shape;
  if (to.rank() < 1 || !to.fully_known()) shape_error(g, node, "needs the params' shape (attrs.shape)");
  if (gathered(g, node, to, in_shape(g, node, 1)) != in_shape(g, node, 0))
    shape_error(g, node, "dy must have the shape the gather produced");
  return to;
}

Shape shape_one_hot(const Graph& g, int node) {
  if (g[node].attrs.depth <= 0) shape_error(g, node, "depth must be positive");
  std::vector<int64_t> out = in_shape(g, node, 0).dims();
  out.push_back(g[node].attrs.depth);
  return check_rank(g, node, Shape(std::move(out)));
}

Shape shape_concat(const Graph& g, int node) {
  Shape s = in_shape(g, node, 0);
  if (s.rank() < 1) shape_error(g, node, "inputs must have rank >= 1");
  const int a = axis_of(g, node, s.rank());
  int64_t total = 0;
  for (size_t i = 0; i < g[node].inputs.size(); ++i) {
    Shape si = in_shape(g, node, static_cast<int>(i)), ref = s;
    if (si.rank() != ref.rank()) shape_error(g, node, "inputs must have equal rank");
    total += si[a];
    si[a] = 0;
    ref[a] = 0;
    if (si != ref) shape_error(g, node, "inputs must match in all but axis " + std::to_string(a));
  }
  s[a] = total;
  return s;
}

Shape shape_assign(const Graph& g, int node) {
  if (g[g[node].inputs[0]].op != Op::Variable) shape_error(g, node, "the destination must be a Variable");
  if (in_shape(g, node, 0) != in_shape(g, node, 1)) shape_error(g, node, "the value must have the variable's shape");
  return Shape{};
}

// x (..., n); stats (rows, 2) from a LayerNormStats of x; gamma/beta (n); dy like x.
Shape shape_layer_norm(const Graph& g, int node) {
  const Node& nd = g[node];
  const bool grad = nd.op == Op::LayerNormInputGrad || nd.op == Op::LayerNormGammaGrad || nd.op == Op::LayerNormGrad;
  const int xi = grad ? 1 : 0;
  const Shape& x = in_shape(g, node, xi);
  if (x.rank() < 1 || x[-1] <= 0) shape_error(g, node, "x needs a known last (feature) axis");
  const int64_t n = x[-1], rows = x.numel() / n;
  if (xi == 1 && in_shape(g, node, 0) != x) shape_error(g, node, "dy and x must have equal shapes");
  if (nd.op == Op::LayerNormStats) return Shape{rows, 2};
  if (in_shape(g, node, xi + 1) != Shape{rows, 2}) shape_error(g, node, "stats must be (rows, 2) of x");
  for (size_t i = static_cast<size_t>(xi) + 2; i < nd.inputs.size(); ++i)
    if (in_shape(g, node, static_cast<int>(i)) != Shape{n}) shape_error(g, node, "gamma and beta must be (features)");
  if (nd.op == Op::LayerNormGrad) return Shape{rows + 2, n};
  return nd.op == Op::LayerNormGammaGrad ? Shape{2, n} : x;
}

Shape shape_slice(const Graph& g, int node) {
  Shape s = in_shape(g, node, 0);
  if (s.rank() < 1) shape_error(g, node, "input must have rank >= 1");
  const int ax = axis_of(g, node, s.rank());
  const Attrs& a = g[node].attrs;
  if (a.begin < 0 || a.size < 0 || a.begin + a.size > s[ax])
    shape_error(g, node,
                "slice [" + std::to_string(a.begin) + ", +" + std::to_string(a.size) + ") of axis " +
                    std::to_string(ax) + " out of range");
  s[ax] = a.size;
  return s;
}

Shape shape_reverse(const Graph& g, int node) {
  const Shape& s = in_shape(g, node, 0);
  if (s.rank() < 1) shape_error(g, node, "input must have rank >= 1");
  axis_of(g, node, s.rank());  // checks the axis
  return s;
}

Shape shape_constrain(const Graph& g, int node) {
  if (g[g[node].inputs[0]].op != Op::Variable) shape_error(g, node, "the constrained value must be a Variable");
  const Attrs& at = g[node].attrs;
  if (at.constraint > 3) shape_error(g, node, "unknown constraint " + std::to_string(at.constraint));
  const int rank = in_shape(g, node, 0).rank();
  if (rank < 32 && (at.axes >> rank) != 0)
    shape_error(g, node, "a norm axis is beyond the variable's rank " + std::to_string(rank));
  return Shape{};
}

// ---------------------------------------------------------------- dtypes
namespace {
// Numbers the general ops compute on: the floating dtypes and int32/int64 (uint8 and bool only move: Cast first).
bool is_numeric(DType t) { return is_floating(t) || is_index(t); }
}  // namespace

// Binary: two operands of one dtype, floating or int32/int64; integers take every function but divide.
DType dtype_arithmetic(const Graph& g, int node) {
  const DType t = in_dtype(g, node, 0);
  if (in_dtype(g, node, 1) != t) dtype_error(g, node, "operands must have one dtype");
  if (!is_numeric(t)) dtype_error(g, node, "needs floating-point or int32/int64 operands");
  if (is_comparison(g[node].attrs.binary)) dtype_error(g, node, "attrs.binary must be an arithmetic function");
  if (is_index(t) && g[node].attrs.binary == BinaryFn::divide)
    dtype_error(g, node,
                "divide is true division, whose result on integers is a float (as Keras' ops.divide): Cast the "
                "operands to a float dtype first, or use floor_divide for Python's //");
  return t;
}

DType dtype_compare(const Graph& g, int node) {
  if (in_dtype(g, node, 0) != in_dtype(g, node, 1)) dtype_error(g, node, "operands must have one dtype");
  if (!is_numeric(in_dtype(g, node, 0))) dtype_error(g, node, "needs floating-point or int32/int64 operands");
  if (!is_comparison(g[node].attrs.binary)) dtype_error(g, node, "attrs.binary must be a comparison");
  return DType::boolean;
}

// Reduce: floating inputs, or int32/int64 for sum, max, min and prod (exact, wrapping as the elementwise ops).
DType dtype_reduce(const Graph& g, int node) {
  const DType t = in_dtype(g, node, 0);
  if (!is_numeric(t)) dtype_error(g, node, "needs a floating-point or int32/int64 input");
  const ReduceFn f = g[node].attrs.reduce;
  if (is_index(t) && (f == ReduceFn::mean || f == ReduceFn::logsumexp))
    dtype_error(g, node, "mean and logsumexp of integers are not integers: Cast the input to a float dtype first");
  return t;
}

DType dtype_where(const Graph& g, int node) {
  if (in_dtype(g, node, 0) != DType::boolean) dtype_error(g, node, "the condition must be bool");
  if (in_dtype(g, node, 1) != in_dtype(g, node, 2)) dtype_error(g, node, "both branches must have one dtype");
  return in_dtype(g, node, 1);
}

DType dtype_arg_reduce(const Graph& g, int node) {
  if (!is_numeric(in_dtype(g, node, 0))) dtype_error(g, node, "needs a floating-point or int32/int64 input");
  return DType::i32;
}

DType dtype_gather(const Graph& g, int node) {
  if (!is_index(in_dtype(g, node, 1))) dtype_error(g, node, "indices must be int32 or int64");
  return in_dtype(g, node, 0);
}

DType dtype_gather_grad(const Graph& g, int node) {
  if (!is_floating(in_dtype(g, node, 0))) dtype_error(g, node, "dy must be floating-point");
  if (!is_index(in_dtype(g, node, 1))) dtype_error(g, node, "indices must be int32 or int64");
  return in_dtype(g, node, 0);
}

DType dtype_one_hot(const Graph& g, int node) {
  if (!is_index(in_dtype(g, node, 0))) dtype_error(g, node, "indices must be int32 or int64");
  return g[node].attrs.dtype;
}

DType dtype_step_value(const Graph& g, int node) {
  if (g[node].attrs.step_value > 1) dtype_error(g, node, "attrs.step_value must be 0 (learning rate) or 1 (step)");
  return DType::f32;
}

DType dtype_assign(const Graph& g, int node) {
  if (in_dtype(g, node, 0) != in_dtype(g, node, 1)) dtype_error(g, node, "the value must have the variable's dtype");
  return in_dtype(g, node, 0);
}

DType dtype_constrain(const Graph& g, int node) {
  if (!is_floating(in_dtype(g, node, 0))) dtype_error(g, node, "constrains floating-point variables");
  return in_dtype(g, node, 0);  // kernels: float32 (weights stay float32)
}

DType dtype_random(const Graph& g, int node) {
  if (g[node].attrs.dtype != DType::f32) dtype_error(g, node, "draws float32 values (cast them after)");
  return DType::f32;
}

// ---------------------------------------------------------------- gradients
void grad_binary(GradBuilder& b, int node, int dy, const bool* need, int* dx) {
  const Node n = b.node(node);
  if (!is_floating(n.dtype)) return;  // integers carry no gradient (TensorFlow's None)
  const int x = n.inputs[0], y = n.inputs[1];
  const Shape sx = b.node(x).shape, sy = b.node(y).shape;
  using ops::binary;
  int gx = -1, gy = -1;
  switch (n.attrs.binary) {
    case BinaryFn::add:
      gx = dy, gy = dy;
      break;
    case BinaryFn::subtract:
      gx = dy;
      if (need[1]) gy = ops::unary(b, UnaryFn::negative, dy);
      break;
    case BinaryFn::multiply:
      if (need[0]) gx = binary(b, BinaryFn::multiply, dy, y);
      if (need[1]) gy = binary(b, BinaryFn::multiply, dy, x);
      break;
    case BinaryFn::divide:  // d(x/y)/dy = -x/y^2 = -out/y
      if (need[0]) gx = binary(b, BinaryFn::divide, dy, y);
      if (need[1])
        gy = ops::unary(b, UnaryFn::negative, binary(b, BinaryFn::divide, binary(b, BinaryFn::multiply, dy, node), y));
      break;
    case BinaryFn::maximum:
    case BinaryFn::minimum: {  // ties go to x (TensorFlow's rule)
      const BinaryFn cmp = n.attrs.binary == BinaryFn::maximum ? BinaryFn::greater_equal : BinaryFn::less_equal;
      const int mask = ops::compare(b, cmp, x, y), zero = ops::scalar(b, 0.0f, dy);
      if (need[0]) gx = ops::where(b, mask, dy, zero);
      if (need[1]) gy = ops::where(b, mask, zero, dy);
      break;
    }
    case BinaryFn::power: {  // TensorFlow's: dx = dy y x^(y-1); dy = dy out log(x) where x > 0, else 0
      if (need[0])
        gx = binary(b, BinaryFn::multiply, binary(b, BinaryFn::multiply, dy, y),
                    binary(b, BinaryFn::power, x, ops::add_scalar(b, y, -1.0f)));
      if (need[1]) {
        const int positive = ops::compare(b, BinaryFn::greater, x, ops::scalar(b, 0.0f, x));
        const int safe = ops::where(b, positive, x, ops::scalar(b, 1.0f, x));
        gy = binary(b, BinaryFn::multiply, binary(b, BinaryFn::multiply, dy, node), ops::unary(b, UnaryFn::log, safe));
      }
      break;
    }
    case BinaryFn::squared_difference: {
      const int t = ops::mul_scalar(b, binary(b, BinaryFn::multiply, dy, binary(b, BinaryFn::subtract, x, y)), 2.0f);
      gx = t;
      if (need[1]) gy = ops::unary(b, UnaryFn::negative, t);
      break;
    }
    case BinaryFn::floor_divide: {  // piecewise constant: zeros (JAX's; TensorFlow's None), whatever dy holds
      const int zero = ops::scalar(b, 0.0f, dy);
      if (need[0]) dx[0] = ops::broadcast_to(b, zero, sx);
      if (need[1]) dx[1] = ops::broadcast_to(b, zero, sy);
      return;
    }
    case BinaryFn::mod:  // TensorFlow's FloorMod: d/dx = 1, d/dy = -floor(x / y)
      gx = dy;
      if (need[1])
        gy = ops::unary(b, UnaryFn::negative,
                        binary(b, BinaryFn::multiply, dy, binary(b, BinaryFn::floor_divide, x, y)));
      break;
    default:
      throw Unsupported(std::string(op_name(n.op)) + " '" + n.name + "': no gradient for this function");
  }
  if (need[0]) dx[0] = ops::sum_to(b, gx, sx);
  if (need[1]) dx[1] = ops::sum_to(b, gy, sy);
}

void grad_where(GradBuilder& b, int node, int dy, const bool* need, int* dx) {
  const Node n = b.node(node);
  const int zero = ops::scalar(b, 0.0f, dy);
  if (need[1]) dx[1] = ops::sum_to(b, ops::where(b, n.inputs[0], dy, zero), b.node(n.inputs[1]).shape);
  if (need[2]) dx[2] = ops::sum_to(b, ops::where(b, n.inputs[0], zero, dy), b.node(n.inputs[2]).shape);
}

void grad_reduce(GradBuilder& b, int node, int dy, const bool* need, int* dx) {
  if (!need[0]) return;
  const Node n = b.node(node);
  if (!is_floating(n.dtype)) return;  // integers carry no gradient
  const int x = n.inputs[0];
  const Shape xs = b.node(x).shape;
  std::vector<int64_t> kd = xs.dims();
  int64_t count = 1;
  for (int i = 0; i < xs.rank(); ++i)
    if (n.attrs.axes & (1u << i)) count *= xs[i], kd[static_cast<size_t>(i)] = 1;
  const Shape keep(kd);
  const int dyk = ops::reshape(b, dy, keep);
  using ops::binary;
  switch (n.attrs.reduce) {
    case ReduceFn::sum:
      dx[0] = ops::broadcast_to(b, dyk, xs);
      break;
    case ReduceFn::mean:
      dx[0] = ops::broadcast_to(b, ops::mul_scalar(b, dyk, count ? 1.0f / static_cast<float>(count) : 0.0f), xs);
      break;
    case ReduceFn::max:
    case ReduceFn::min: {  // shared among tied extrema (TensorFlow's rule)
      const int yk = ops::reshape(b, node, keep);
      const int hit = ops::cast(b, ops::compare(b, BinaryFn::equal, x, yk), b.node(x).dtype);
      const int ties = ops::reduce(b, ReduceFn::sum, hit, axes_of(n.attrs.axes, xs.rank()), true);
      dx[0] = binary(b, BinaryFn::multiply, hit, binary(b, BinaryFn::divide, dyk, ties));
      break;
    }
    case ReduceFn::prod:  // out / x: undefined where x is 0 (NaN there)
      dx[0] = binary(b, BinaryFn::multiply, dyk, binary(b, BinaryFn::divide, ops::reshape(b, node, keep), x));
      break;
    case ReduceFn::logsumexp:
      dx[0] = binary(b, BinaryFn::multiply, dyk,
                     ops::unary(b, UnaryFn::exp, binary(b, BinaryFn::subtract, x, ops::reshape(b, node, keep))));
      break;
    default:
      throw Unsupported("Reduce '" + n.name + "': no gradient for this reduction");
  }
}

void grad_broadcast_to(GradBuilder& b, int node, int dy, const bool* need, int* dx) {
  if (need[0]) dx[0] = ops::sum_to(b, dy, b.node(b.node(node).inputs[0]).shape);
}

void grad_transpose(GradBuilder& b, int node, int dy, const bool* need, int* dx) {
  if (!need[0]) return;
  const Node n = b.node(node);
  std::vector<int> inverse(static_cast<size_t>(n.shape.rank()));
  for (int i = 0; i < n.shape.rank(); ++i) inverse[static_cast<size_t>(n.attrs.perm[i])] = i;
  dx[0] = ops::transpose(b, dy, inverse);
}

void grad_pad(GradBuilder& b, int node, int dy, const bool* need, int* dx) {
  if (!need[0]) return;
  const Node n = b.node(node);
  const Shape xs = b.node(n.inputs[0]).shape;
  int v = dy;
  for (int i = 0; i < xs.rank(); ++i)
    if (n.attrs.pad_before[i] || n.attrs.pad_after[i]) v = ops::slice(b, v, i, n.attrs.pad_before[i], xs[i]);
  dx[0] = v;
}

void matmul_grads(GradBuilder& b, Op op, int node, int dy, const bool* need, int* g) {
  const Node n = b.node(node);
  const int A = n.inputs[0], B = n.inputs[1];
  const bool ta = n.attrs.trans_a, tb = n.attrs.trans_b;
  auto mm = [&](int x, int y, bool tx, bool ty) {
    Attrs at;
    at.trans_a = tx;
    at.trans_b = ty;
    return b.add(op, {x, y}, at);
  };
  if (need[0]) g[0] = ta ? mm(B, dy, tb, true) : mm(dy, B, false, !tb);
  if (need[1]) g[1] = tb ? mm(dy, A, true, ta) : mm(A, dy, !ta, false);
}

void grad_batch_matmul(GradBuilder& b, int node, int dy, const bool* need, int* dx) {
  const Node n = b.node(node);
  const Shape sa = b.node(n.inputs[0]).shape, sb = b.node(n.inputs[1]).shape;
  int g[2] = {-1, -1};
  matmul_grads(b, Op::BatchMatMul, node, dy, need, g);
  if (need[0]) dx[0] = ops::sum_to(b, g[0], sa);
  if (need[1]) dx[1] = ops::sum_to(b, g[1], sb);
}

void grad_gather(GradBuilder& b, int node, int dy, const bool* need, int* dx) {
  if (!need[0]) return;  // indices are integers: no gradient
  const Node n = b.node(node);
  Attrs at;
  at.shape = b.node(n.inputs[0]).shape;
  at.axis = n.attrs.axis < 0 ? n.attrs.axis + at.shape.rank() : n.attrs.axis;
  dx[0] = b.add(Op::GatherGrad, {dy, n.inputs[1]}, at);
}

void grad_concat(GradBuilder& b, int node, int dy, const bool* need, int* dx) {
  const Node n = b.node(node);
  const int a = n.attrs.axis < 0 ? n.attrs.axis + n.shape.rank() : n.attrs.axis;
  int64_t begin = 0;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    const int64_t size = b.node(n.inputs[i]).shape[a];
    if (need[i]) dx[i] = ops::slice(b, dy, a, begin, size);
    begin += size;
  }
}

// y = LayerNormApply(x, LayerNormStats(x), gamma, beta): dx includes the path through the statistics (the stats input
// itself gets none); dgamma and dbeta (the sums of dy * xhat and of dy) come from one LayerNormGammaGrad. When dx and
// a parameter's gradient are both needed, one LayerNormGrad computes all three in one sweep (its parts read as Views).
void grad_layer_norm_apply(GradBuilder& b, int node, int dy, const bool* need, int* dx) {
  const Node n = b.node(node);
  if (need[0] && (need[2] || need[3])) {
    const int all = b.add(Op::LayerNormGrad, {dy, n.inputs[0], n.inputs[1], n.inputs[2]}, n.attrs);
    const Shape xs = b.node(n.inputs[0]).shape, param = b.node(n.inputs[2]).shape;
    const int64_t size = xs.numel(), features = xs[-1];
    dx[0] = ops::part(b, all, 0, xs);
    if (need[2]) dx[2] = ops::part(b, all, size, param);
    if (need[3]) dx[3] = ops::part(b, all, size + features, param);
    return;
  }
  if (need[0]) dx[0] = b.add(Op::LayerNormInputGrad, {dy, n.inputs[0], n.inputs[1], n.inputs[2]}, n.attrs);
  if (need[2] || need[3]) {  // both parameter gradients in one pass over dy and x
    const int sums = b.add(Op::LayerNormGammaGrad, {dy, n.inputs[0], n.inputs[1]}, n.attrs);
    const Shape param = b.node(n.inputs[2]).shape;
    if (need[2]) dx[2] = ops::reshape(b, ops::slice(b, sums, 0, 0, 1), param);
    if (need[3]) dx[3] = ops::reshape(b, ops::slice(b, sums, 0, 1, 1), param);
  }
}

// y = LogSoftmax(x) over the last axis: dx = dy - exp(y) * sum(dy) (each row's sum of dy, kept as an axis).
void grad_log_softmax(GradBuilder& b, int node, int dy, const bool* need, int* dx) {
  if (!need[0]) return;
  const int sums = ops::reduce(b, ReduceFn::sum, dy, {-1}, true);
  dx[0] = ops::binary(b, BinaryFn::subtract, dy,
                      ops::binary(b, BinaryFn::multiply, ops::unary(b, UnaryFn::exp, node), sums));
}

void grad_slice(GradBuilder& b, int node, int dy, const bool* need, int* dx) {
  if (!need[0]) return;
  const Node n = b.node(node);
  const Shape xs = b.node(n.inputs[0]).shape;
  const int a = n.attrs.axis < 0 ? n.attrs.axis + xs.rank() : n.attrs.axis;
  std::vector<int64_t> before(static_cast<size_t>(xs.rank())), after(static_cast<size_t>(xs.rank()));
  before[static_cast<size_t>(a)] = n.attrs.begin;
  after[static_cast<size_t>(a)] = xs[a] - n.attrs.begin - n.attrs.size;
  dx[0] = ops::pad(b, dy, before, after);
}

}  // namespace tk::graph::rules
