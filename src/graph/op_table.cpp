// The op table: per op its name, arity, shape rule, dtype rule and gradient rule. Kernels and their
// workspace needs live in backends/.
#include <array>

#include "graph/attention_rules.h"
#include "graph/bucket.h"
#include "graph/graph.h"
#include "graph/lstm_rules.h"
#include "graph/tensor_ops.h"
#include "graph/tensor_rules.h"
#include "graph/window.h"
#include "trainkit/core/dtype.h"

namespace tk::graph {
namespace {
using namespace rules;  // the general tensor ops' rules (graph/tensor_rules.h)

// ---------------------------------------------------------------- shape rules
Shape shape_source(const Graph& g, int node) { return g[node].attrs.shape; }
Shape shape_scalar(const Graph&, int) { return Shape{}; }

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

Shape shape_fused_matmul(const Graph& g, int node) {
  const Shape out = shape_matmul(g, node);
  const Shape& e = in_shape(g, node, 2);
  const Op epi = g[node].attrs.epilogue;
  if (epi == Op::ReluGrad) {
    if (e != out) shape_error(g, node, "the relu output must have the product's shape " + out.to_string());
  } else if (epi == Op::Relu || epi == Op::kCount) {
    if (e.rank() != 1 || e[0] != out[1]) shape_error(g, node, "bias length must equal the product's columns");
  } else {
    shape_error(g, node, "epilogue must be Relu, ReluGrad or none");
  }
  return out;
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

Shape shape_dy_x(const Graph& g, int node) {  // (dy, x) -> shape of x
  if (in_shape(g, node, 0) != in_shape(g, node, 1)) shape_error(g, node, "dy and x must have equal shapes");
  return in_shape(g, node, 1);
}

Shape shape_loss(const Graph& g, int node) {
  const Shape& p = in_shape(g, node, 0);
  const Shape& t = in_shape(g, node, 1);
  const Op op = g[node].op;
  if (p.rank() < 1) shape_error(g, node, "predictions need a batch dimension");
  if (is_sparse_target_op(op)) {
    bool ok = (t.rank() == p.rank() - 1 || (t.rank() == p.rank() && t[-1] == 1)) && t[0] == p[0];
    if (!ok)
      shape_error(g, node,
                  "sparse labels must have shape " + p.with_batch(p[0]).to_string() + " without its last axis");
  } else if (t != p) {
    shape_error(g, node, "targets must have the shape of the predictions");
  }
  return is_loss_grad_op(op) ? p : Shape{};
}

// ---------------------------------------------------------------- images (NHWC)
const Shape& rank4(const Graph& g, int node, int i, const char* what) {
  const Shape& s = in_shape(g, node, i);
  if (s.rank() != 4) shape_error(g, node, std::string(what) + " must be (batch, height, width, channels)");
  return s;
}

Shape shape_conv(const Graph& g, int node) {
  const Shape& x = rank4(g, node, 0, "input");
  const Shape& w = in_shape(g, node, 1);
  const Attrs& a = g[node].attrs;
  if (a.groups < 1 || x[3] % a.groups != 0)
    shape_error(g, node, "groups = " + std::to_string(a.groups) + " must divide the input channels");
  if (w.rank() != 4 || w[0] != a.kernel[0] || w[1] != a.kernel[1] || w[2] != x[3] / a.groups || w[3] % a.groups != 0)
    shape_error(g, node,
                "kernel must be (kh, kw, in_channels / groups, filters) with in_channels = " + std::to_string(x[3]) +
                    ", groups = " + std::to_string(a.groups) + " and filters a multiple of groups");
  Window win = Window::of(x, a);
  if (win.oh <= 0 || win.ow <= 0) shape_error(g, node, "the window does not fit in the padded input");
  return Shape{x[0], win.oh, win.ow, w[3]};
}

// (dy, w) -> attrs.shape (x): dy must be what Conv2D(x, w) over the window gives (Conv2DTranspose builds it directly).
Shape shape_conv_grad_input(const Graph& g, int node) {
  const Shape& dy = rank4(g, node, 0, "output gradient");
  const Shape& w = in_shape(g, node, 1);
  const Attrs& a = g[node].attrs;
  const Shape& x = a.shape;
  if (x.rank() != 4 || !x.fully_known()) shape_error(g, node, "needs the (N, H, W, C) shape to produce");
  if (a.groups < 1 || x[3] % a.groups != 0 || w.rank() != 4 || w[0] != a.kernel[0] || w[1] != a.kernel[1] ||
      w[2] != x[3] / a.groups || w[3] != dy[3])
    shape_error(g, node,
                "kernel must be (kh, kw, " + std::to_string(x[3]) + " / groups, " + std::to_string(dy[3]) + ")");
  const Window win = Window::of(x, a);
  if (win.oh != dy[1] || win.ow != dy[2] || dy[0] != x[0])
    shape_error(g, node, "the window over " + x.to_string() + " does not give the output gradient's " + dy.to_string());
  return x;
}

Shape shape_fused_conv(const Graph& g, int node) {
  const Shape out = shape_conv(g, node);
  const Shape& b = in_shape(g, node, 2);
  if (b.rank() != 1 || b[0] != out[3]) shape_error(g, node, "bias length must equal the filter count");
  const Op epi = g[node].attrs.epilogue;
  if (epi != Op::Relu && epi != Op::kCount) shape_error(g, node, "epilogue must be Relu or none");
  return out;
}

Shape shape_pool(const Graph& g, int node) {
  const Shape& x = rank4(g, node, 0, "input");
  Window win = Window::of(x, g[node].attrs);
  if (win.oh <= 0 || win.ow <= 0) shape_error(g, node, "the pooling window does not fit in the padded input");
  return Shape{x[0], win.oh, win.ow, x[3]};
}

Shape shape_attr(const Graph& g, int node) {  // gradient ops that restore a known shape
  if (!g[node].attrs.shape.fully_known()) shape_error(g, node, "needs the shape to produce");
  return g[node].attrs.shape;
}

Shape shape_attr_from_x(const Graph& g, int node) { return in_shape(g, node, 1); }  // (dy, x) -> x

Shape shape_pad(const Graph& g, int node) {
  Shape s = rank4(g, node, 0, "input");
  const int64_t* p = g[node].attrs.pad;
  const int64_t sign = g[node].op == Op::Pad2D ? 1 : -1;
  s[1] += sign * (p[0] + p[1]);
  s[2] += sign * (p[2] + p[3]);
  if (s[1] <= 0 || s[2] <= 0) shape_error(g, node, "cropping removes the whole image");
  return s;
}

Shape shape_upsample(const Graph& g, int node) {
  Shape s = rank4(g, node, 0, "input");
  s[1] *= g[node].attrs.kernel[0];
  s[2] *= g[node].attrs.kernel[1];
  return s;
}

Shape shape_resize(const Graph& g, int node) {  // Resize: (N, H, W, C) -> attrs.shape, the same N and C
  const Shape x = rank4(g, node, 0, "input");
  const Shape& out = g[node].attrs.shape;
  if (out.rank() != 4 || out[1] < 1 || out[2] < 1 || out[0] != x[0] || out[3] != x[3])
    shape_error(
        g, node,
        "the output " + out.to_string() + " must be (N, height >= 1, width >= 1, C) of the input " + x.to_string());
  return out;
}

Shape shape_affine(const Graph& g, int node) {  // (images (N, H, W, C), transforms (N, 8)) -> like the images
  const Shape x = rank4(g, node, 0, "images");
  const Shape& t = in_shape(g, node, 1);
  if (t.rank() != 2 || t[1] != 8 || t[0] != x[0])
    shape_error(g, node, "the transforms " + t.to_string() + " must be (N, 8) for the images " + x.to_string());
  if (g[node].attrs.fill_mode > 4) shape_error(g, node, "unknown fill mode " + std::to_string(g[node].attrs.fill_mode));
  return x;
}

Shape shape_bn_stats(const Graph& g, int node) {
  const Shape& x = in_shape(g, node, 0);
  if (x.rank() < 2) shape_error(g, node, "needs a batch and a channel axis");
  return Shape{2, x[-1]};
}

// Per-channel inputs are (C) vectors, or (2, C) when they come from BnStats; BnInputGrad/BnGammaGrad also
// take x, which must match dy.
Shape shape_bn(const Graph& g, int node) {
  const Node& n = g[node];
  const Shape& first = in_shape(g, node, 0);
  const int64_t c = first[-1];
  size_t per_channel_from = 1;
  if (n.op == Op::BnInputGrad || n.op == Op::BnGammaGrad || n.op == Op::BnInferenceGammaGrad) {
    if (in_shape(g, node, 1) != first) shape_error(g, node, "dy and x must have equal shapes");
    per_channel_from = 2;
  }
  for (size_t i = per_channel_from; i < n.inputs.size(); ++i) {
    const Shape& s = in_shape(g, node, static_cast<int>(i));
    const bool is_stats = g[n.inputs[i]].op == Op::BnStats;
    if (is_stats ? s != Shape{2, c} : s != Shape{c})
      shape_error(g, node, "per-channel inputs must have " + std::to_string(c) + " channels");
  }
  if (n.op == Op::BnGammaGrad || n.op == Op::BnInferenceGammaGrad) return Shape{c};
  if (n.op == Op::BnUpdateMoving) return Shape{};
  return first;
}

Shape shape_update(const Graph& g, int node) {
  if (!g[node].attrs.update) shape_error(g, node, "update op without optimizer config");
  const Shape& p = in_shape(g, node, 0);
  const bool gated = g[node].attrs.gated;
  const size_t n = g[node].inputs.size() - (gated ? 1 : 0);
  const int slots = update_slot_count(g[node].op, *g[node].attrs.update);  // only the slots its config uses
  if (n != static_cast<size_t>(2 + slots))
    shape_error(g, node,
                "takes (param, grad) and the " + std::to_string(slots) +
                    " slot(s) its config uses (update_slot_mask), got " + std::to_string(n) + " inputs");
  for (size_t i = 1; i < n; ++i)
    if (in_shape(g, node, static_cast<int>(i)) != p) shape_error(g, node, "gradient and slots must match the variable");
  if (gated && (g[g[node].inputs.back()].op != Op::StepControl || in_shape(g, node, static_cast<int>(n)) != Shape{2}))
    shape_error(g, node, "a gated update's last input must be the step's StepControl");
  return Shape{};
}

Shape shape_multi_update(const Graph& g, int node) {
  const Node& n = g[node];
  if (!n.attrs.update) shape_error(g, node, "update op without optimizer config");
  const Op rule = n.attrs.epilogue;
  const int64_t k = n.attrs.size;
  const int64_t slots = update_slot_count(rule, *n.attrs.update);  // only the slots the config uses
  if (slots < 0) shape_error(g, node, "the rule (attrs.epilogue) must be SgdUpdate, AdamUpdate or RmspropUpdate");
  const int64_t operands = static_cast<int64_t>(n.inputs.size()) - (n.attrs.gated ? 1 : 0);
  if (k < 1 || operands != k * (2 + slots))
    shape_error(g, node,
                "needs " + std::to_string(2 + slots) + " inputs per variable for " + std::to_string(k) + " variables");
  for (int64_t v = 0; v < k; ++v) {
    const Shape& p = in_shape(g, node, static_cast<int>(v));
    bool same = in_shape(g, node, static_cast<int>(k + v)) == p;
    for (int64_t j = 0; j < slots; ++j) same = same && in_shape(g, node, static_cast<int>(2 * k + v * slots + j)) == p;
    if (!same) shape_error(g, node, "gradient and slots of variable " + std::to_string(v) + " must match it");
  }
  if (n.attrs.gated && (g[n.inputs.back()].op != Op::StepControl || g[n.inputs.back()].shape != Shape{2}))
    shape_error(g, node, "a gated update's last input must be the step's StepControl");
  return Shape{};
}

Shape shape_step_control(const Graph& g, int node) {
  if (!g[node].attrs.update) shape_error(g, node, "needs the optimizer config");
  if (g[node].attrs.update->loss_scale_initial > 0.0f) {  // the last input is the loss-scale state
    const int n = static_cast<int>(g[node].inputs.size());
    if (n < 2 || in_shape(g, node, n - 1) != Shape{3} || g[g[node].inputs.back()].dtype != DType::f32 ||
        g[g[node].inputs.back()].op != Op::Variable)
      shape_error(g, node, "with loss scaling, the last input must be the float32 (3) loss-scale state variable");
  }
  return Shape{2};
}

Shape shape_all_reduce(const Graph& g, int node) {
  if (g[node].inputs.size() == 1) return in_shape(g, node, 0);
  return Shape{bucket_elements(g, node)};  // a bucket: flat, each gradient at its aligned offset
}

Shape shape_all_reduce_wait(const Graph& g, int node) {
  const Node& started = g[g[node].inputs[0]];
  if (started.op != Op::AllReduce || !started.attrs.overlap)
    shape_error(g, node, "its input must be an AllReduce that overlaps (attrs.overlap)");
  return started.shape;
}

Shape shape_view(const Graph& g, int node) {
  const Attrs& at = g[node].attrs;
  const int64_t size = at.shape.numel(), have = in_shape(g, node, 0).numel();
  if (at.begin < 0 || at.begin + size > have)
    shape_error(g, node,
                "elements [" + std::to_string(at.begin) + ", " + std::to_string(at.begin + size) + ") of " +
                    std::to_string(have) + " do not fit");
  if (at.begin % kBucketAlignElements != 0)
    shape_error(g, node,
                "starts at element " + std::to_string(at.begin) + ", not a multiple of " +
                    std::to_string(kBucketAlignElements) + " (kernels rely on aligned operands)");
  return at.shape;
}

// ---------------------------------------------------------------- dtype rules
// rules::dtype_error with the remedy for the ops here, which never mix dtypes.
[[noreturn]] void dtype_error(const Graph& g, int node, const std::string& why) {
  rules::dtype_error(g, node, why, "; insert a Cast where dtypes differ");
}

// Sources: the dtype the graph builder gave; Cast: its target.
DType dtype_source(const Graph& g, int node) { return g[node].attrs.dtype; }

// All inputs of one floating dtype, which is the output's (arithmetic, activations, windows, updates; a
// gated update's float32 StepControl input aside).
DType dtype_same_float(const Graph& g, int node) {
  const DType t = in_dtype(g, node, 0);
  if (!is_floating(t)) dtype_error(g, node, "needs floating-point inputs");
  const size_t n = g[node].inputs.size() - (g[node].attrs.gated ? 1 : 0);
  for (size_t i = 1; i < n; ++i)
    if (in_dtype(g, node, static_cast<int>(i)) != t) dtype_error(g, node, "inputs must have one dtype");
  return t;
}

// Any floating inputs (gradients of several dtypes may meet); a float32 result.
DType dtype_floats_to_f32(const Graph& g, int node) {
  for (size_t i = 0; i < g[node].inputs.size(); ++i)
    if (!is_floating(in_dtype(g, node, static_cast<int>(i)))) dtype_error(g, node, "needs floating-point inputs");
  return DType::f32;
}

// Data movement: any dtype, all inputs alike.
DType dtype_same_any(const Graph& g, int node) {
  const DType t = in_dtype(g, node, 0);
  for (size_t i = 1; i < g[node].inputs.size(); ++i)
    if (in_dtype(g, node, static_cast<int>(i)) != t) dtype_error(g, node, "inputs must have one dtype");
  return t;
}

// Losses and metrics: floating predictions; targets of the same dtype, or int32 class indices for the
// sparse ones; the gradient's dy is the float32 loss. Loss values and metrics are float32 whatever the
// predictions' dtype (Keras computes losses in float32); a loss gradient has the predictions' dtype.
DType dtype_loss(const Graph& g, int node) {
  const Op op = g[node].op;
  const DType p = in_dtype(g, node, 0), t = in_dtype(g, node, 1);
  if (!is_floating(p)) dtype_error(g, node, "predictions must be floating-point");
  if (is_sparse_target_op(op) ? t != DType::i32 : t != p)
    dtype_error(g, node,
                is_sparse_target_op(op) ? "sparse targets must be int32 class indices"
                                        : "targets must have the predictions' dtype");
  const bool is_grad = is_loss_grad_op(op);
  if (is_grad && in_dtype(g, node, 2) != DType::f32) dtype_error(g, node, "the loss gradient dy must be float32");
  return is_grad ? p : DType::f32;
}

// ---------------------------------------------------------------- gradient rules
// The gradient of a cast is dy cast back (nothing flows into integer inputs).
void grad_cast(GradBuilder& b, int node, int dy, const bool* need, int* dx) {
  const DType from = b.node(b.node(node).inputs[0]).dtype;
  if (need[0] && is_floating(from)) dx[0] = ops::cast(b, dy, from);
}

void grad_matmul(GradBuilder& b, int node, int dy, const bool* need, int* dx) {
  matmul_grads(b, Op::MatMul, node, dy, need, dx);
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

void grad_scale(GradBuilder& b, int node, int dy, const bool* need, int* dx) {
  if (need[0]) dx[0] = ops::mul_scalar(b, dy, b.node(node).attrs.scale);
}

void grad_reshape(GradBuilder& b, int node, int dy, const bool* need, int* dx) {
  Attrs at;
  at.shape = b.node(b.node(node).inputs[0]).shape;
  if (need[0]) dx[0] = b.add(Op::Reshape, {dy}, at);
}

// Activation (and Unary) gradient from the input x: GradOp(dy, x).
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

// Through the epilogue (relu: its gradient from the output; the relu_grad mask: the same mask), then the
// product's rule; the bias gets the column sums. The mask input y is not differentiated (piecewise constant).
void grad_fused_matmul(GradBuilder& b, int node, int dy, const bool* need, int* dx) {
  const Node n = b.node(node);
  int d = dy;
  if (n.attrs.epilogue == Op::Relu) d = b.add(Op::ReluGrad, {dy, node});
  if (n.attrs.epilogue == Op::ReluGrad) d = b.add(Op::ReluGrad, {dy, n.inputs[2]});
  matmul_grads(b, Op::MatMul, node, d, need, dx);
  if (need[2] && n.attrs.epilogue != Op::ReluGrad) dx[2] = b.add(Op::BiasGrad, {d});
}

void grad_conv(GradBuilder& b, int node, int dy, const bool* need, int* dx) {
  Node n = b.node(node);
  Attrs at = n.attrs;
  if (need[0]) {
    at.shape = b.node(n.inputs[0]).shape;
    dx[0] = b.add(Op::Conv2DGradInput, {dy, n.inputs[1]}, at);
  }
  if (need[1]) {
    at.shape = b.node(n.inputs[1]).shape;
    dx[1] = b.add(Op::Conv2DGradFilter, {n.inputs[0], dy}, at);
  }
}

// Conv2DGradInput as an op of its own (Conv2DTranspose's forward): y = convᵀ(u, w) is bilinear, and <convᵀ(u, w), g> =
// <u, conv(g, w)>, so du = Conv2D(dy, w) over the same window and dw = Conv2DGradFilter(dy, u) (dy in the place of
// the convolution's input, u in that of its output gradient).
void grad_conv_grad_input(GradBuilder& b, int node, int dy, const bool* need, int* dx) {
  Node n = b.node(node);
  Attrs at = n.attrs;
  if (need[0]) dx[0] = b.add(Op::Conv2D, {dy, n.inputs[1]}, at);
  if (need[1]) {
    at.shape = b.node(n.inputs[1]).shape;
    dx[1] = b.add(Op::Conv2DGradFilter, {dy, n.inputs[0]}, at);
  }
}

// Through the relu (from the output), then the convolution's rule; the bias gets the sums over N, H, W.
void grad_fused_conv(GradBuilder& b, int node, int dy, const bool* need, int* dx) {
  const int d = b.node(node).attrs.epilogue == Op::Relu ? b.add(Op::ReluGrad, {dy, node}) : dy;
  grad_conv(b, node, d, need, dx);
  if (need[2]) dx[2] = b.add(Op::BiasGrad, {d});
}

void grad_max_pool(GradBuilder& b, int node, int dy, const bool* need, int* dx) {
  Node n = b.node(node);
  if (need[0]) dx[0] = b.add(Op::MaxPool2DGrad, {dy, n.inputs[0], node}, n.attrs);
}

// Gradient ops that need only dy and the input's shape.
template <Op GradOp>
void grad_to_input_shape(GradBuilder& b, int node, int dy, const bool* need, int* dx) {
  Node n = b.node(node);
  Attrs at = n.attrs;
  at.shape = b.node(n.inputs[0]).shape;
  if (need[0]) dx[0] = b.add(GradOp, {dy}, at);
}

void grad_affine(GradBuilder& b, int node, int dy, const bool* need, int* dx) {  // the transforms: no gradient
  Node n = b.node(node);
  if (need[0]) dx[0] = b.add(Op::AffineTransformGrad, {dy, n.inputs[1]}, n.attrs);
}

// The inverse op on dy with the node's attrs (Pad2D and Crop2D; Reverse, its own inverse).
template <Op Inverse>
void grad_inverse(GradBuilder& b, int node, int dy, const bool* need, int* dx) {
  if (need[0]) dx[0] = b.add(Inverse, {dy}, b.node(node).attrs);
}

// y = BnApply(x, stats(x), gamma, beta): dx includes the path through the batch statistics, so the
// stats input itself gets no gradient.
void grad_bn_apply(GradBuilder& b, int node, int dy, const bool* need, int* dx) {
  Node n = b.node(node);
  if (need[0]) dx[0] = b.add(Op::BnInputGrad, {dy, n.inputs[0], n.inputs[1], n.inputs[2]}, n.attrs);
  if (need[2]) dx[2] = b.add(Op::BnGammaGrad, {dy, n.inputs[0], n.inputs[1]}, n.attrs);
  if (need[3]) dx[3] = b.add(Op::BiasGrad, {dy});
}

void grad_bn_inference(GradBuilder& b, int node, int dy, const bool* need, int* dx) {
  Node n = b.node(node);
  if (need[0]) dx[0] = b.add(Op::BnInferenceGrad, {dy, n.inputs[2], n.inputs[3]}, n.attrs);
  if (need[3]) dx[3] = b.add(Op::BnInferenceGammaGrad, {dy, n.inputs[0], n.inputs[1], n.inputs[2]}, n.attrs);
  if (need[4]) dx[4] = b.add(Op::BiasGrad, {dy});
}

template <Op GradOp>
void grad_loss(GradBuilder& b, int node, int dy, const bool* need, int* dx) {
  Node n = b.node(node);
  if (need[0]) dx[0] = b.add(GradOp, {n.inputs[0], n.inputs[1], dy}, n.attrs);
  // Targets are data: never differentiated.
}

// ---------------------------------------------------------------- the table
constexpr std::array<OpInfo, kOpCount> kTable{{
    {Op::Input, "Input", 0, true, shape_source, dtype_source, nullptr},
    {Op::Variable, "Variable", 0, true, shape_source, dtype_source, nullptr},
    {Op::Fill, "Fill", 0, true, shape_source, dtype_source, nullptr},
    {Op::Cast, "Cast", 1, true, shape_same_as_first, dtype_source, grad_cast},
    {Op::MatMul, "MatMul", 2, true, shape_matmul, dtype_same_float, grad_matmul},
    {Op::BiasAdd, "BiasAdd", 2, true, shape_bias_add, dtype_same_float, grad_bias_add},
    {Op::BiasGrad, "BiasGrad", 1, true, shape_bias_grad, dtype_same_float, nullptr},
    {Op::FusedMatMul, "FusedMatMul", 3, true, shape_fused_matmul, dtype_same_float, grad_fused_matmul},
    {Op::Add, "Add", -1, true, shape_same_as_first, dtype_same_float, grad_add},
    {Op::Mul, "Mul", 2, true, shape_same_as_first, dtype_same_float, grad_mul},
    {Op::Scale, "Scale", 1, true, shape_same_as_first, dtype_same_float, grad_scale},
    {Op::Reshape, "Reshape", 1, true, shape_reshape, dtype_same_any, grad_reshape},
    {Op::Concat, "Concat", -1, true, shape_concat, dtype_same_any, grad_concat},
    {Op::Slice, "Slice", 1, true, shape_slice, dtype_same_any, grad_slice},
    {Op::Relu, "Relu", 1, true, shape_same_as_first, dtype_same_float, grad_from_y<Op::ReluGrad>},
    {Op::ReluGrad, "ReluGrad", 2, true, shape_dy_x, dtype_same_float, nullptr},
    {Op::Sigmoid, "Sigmoid", 1, true, shape_same_as_first, dtype_same_float, grad_from_y<Op::SigmoidGrad>},
    {Op::SigmoidGrad, "SigmoidGrad", 2, true, shape_dy_x, dtype_same_float, nullptr},
    {Op::Tanh, "Tanh", 1, true, shape_same_as_first, dtype_same_float, grad_from_y<Op::TanhGrad>},
    {Op::TanhGrad, "TanhGrad", 2, true, shape_dy_x, dtype_same_float, nullptr},
    {Op::Gelu, "Gelu", 1, true, shape_same_as_first, dtype_same_float, grad_from_x<Op::GeluGrad>},
    {Op::GeluGrad, "GeluGrad", 2, true, shape_dy_x, dtype_same_float, nullptr},
    {Op::Elu, "Elu", 1, true, shape_same_as_first, dtype_same_float, grad_from_x<Op::EluGrad>},
    {Op::EluGrad, "EluGrad", 2, true, shape_dy_x, dtype_same_float, nullptr},
    {Op::LeakyRelu, "LeakyRelu", 1, true, shape_same_as_first, dtype_same_float, grad_from_x<Op::LeakyReluGrad>},
    {Op::LeakyReluGrad, "LeakyReluGrad", 2, true, shape_dy_x, dtype_same_float, nullptr},
    {Op::Softmax, "Softmax", 1, true, shape_same_as_first, dtype_same_float, grad_from_y<Op::SoftmaxGrad>},
    {Op::SoftmaxGrad, "SoftmaxGrad", 2, true, shape_dy_x, dtype_same_float, nullptr},
    {Op::DropoutMask, "DropoutMask", 0, true, shape_source, dtype_source, nullptr},
    {Op::Conv2D, "Conv2D", 2, true, shape_conv, dtype_same_float, grad_conv},
    {Op::Conv2DGradInput, "Conv2DGradInput", 2, true, shape_conv_grad_input, dtype_same_float, grad_conv_grad_input},
    {Op::Conv2DGradFilter, "Conv2DGradFilter", 2, true, shape_attr, dtype_same_float, nullptr},
    {Op::FusedConv2D, "FusedConv2D", 3, true, shape_fused_conv, dtype_same_float, grad_fused_conv},
    {Op::MaxPool2D, "MaxPool2D", 1, true, shape_pool, dtype_same_float, grad_max_pool},
    {Op::MaxPool2DGrad, "MaxPool2DGrad", 3, true, shape_attr_from_x, dtype_same_float, nullptr},
    {Op::AvgPool2D, "AvgPool2D", 1, true, shape_pool, dtype_same_float, grad_to_input_shape<Op::AvgPool2DGrad>},
    {Op::AvgPool2DGrad, "AvgPool2DGrad", 1, true, shape_attr, dtype_same_float, nullptr},
    {Op::Pad2D, "Pad2D", 1, true, shape_pad, dtype_same_any, grad_inverse<Op::Crop2D>},
    {Op::Crop2D, "Crop2D", 1, true, shape_pad, dtype_same_any, grad_inverse<Op::Pad2D>},
    {Op::Upsample2D, "Upsample2D", 1, true, shape_upsample, dtype_same_any, grad_to_input_shape<Op::Upsample2DGrad>},
    {Op::Upsample2DGrad, "Upsample2DGrad", 1, true, shape_attr, dtype_same_float, nullptr},
    {Op::BnStats, "BnStats", 1, true, shape_bn_stats, dtype_same_float, nullptr},
    {Op::BnApply, "BnApply", 4, true, shape_bn, dtype_same_float, grad_bn_apply},
    {Op::BnInputGrad, "BnInputGrad", 4, true, shape_bn, dtype_same_float, nullptr},
    {Op::BnGammaGrad, "BnGammaGrad", 3, true, shape_bn, dtype_same_float, nullptr},
    {Op::BnInference, "BnInference", 5, true, shape_bn, dtype_same_float, grad_bn_inference},
    {Op::BnInferenceGrad, "BnInferenceGrad", 3, true, shape_bn, dtype_same_float, nullptr},
    {Op::BnInferenceGammaGrad, "BnInferenceGammaGrad", 4, true, shape_bn, dtype_same_float, nullptr},
    {Op::BnUpdateMoving, "BnUpdateMoving", 3, false, shape_bn, dtype_same_float, nullptr},
    {Op::MseLoss, "MseLoss", 2, true, shape_loss, dtype_loss, grad_loss<Op::MseLossGrad>},
    {Op::MseLossGrad, "MseLossGrad", 3, true, shape_loss, dtype_loss, nullptr},
    {Op::BceLoss, "BceLoss", 2, true, shape_loss, dtype_loss, grad_loss<Op::BceLossGrad>},
    {Op::BceLossGrad, "BceLossGrad", 3, true, shape_loss, dtype_loss, nullptr},
    {Op::CceLoss, "CceLoss", 2, true, shape_loss, dtype_loss, grad_loss<Op::CceLossGrad>},
    {Op::CceLossGrad, "CceLossGrad", 3, true, shape_loss, dtype_loss, nullptr},
    {Op::SparseCceLoss, "SparseCceLoss", 2, true, shape_loss, dtype_loss, grad_loss<Op::SparseCceLossGrad>},
    {Op::SparseCceLossGrad, "SparseCceLossGrad", 3, true, shape_loss, dtype_loss, nullptr},
    {Op::BinaryAccuracy, "BinaryAccuracy", 2, true, shape_loss, dtype_loss, nullptr},
    {Op::CategoricalAccuracy, "CategoricalAccuracy", 2, true, shape_loss, dtype_loss, nullptr},
    {Op::SparseCategoricalAccuracy, "SparseCategoricalAccuracy", 2, true, shape_loss, dtype_loss, nullptr},
    {Op::SgdUpdate, "SgdUpdate", -1, false, shape_update, dtype_same_float, nullptr},
    {Op::AdamUpdate, "AdamUpdate", -1, false, shape_update, dtype_same_float, nullptr},
    {Op::RmspropUpdate, "RmspropUpdate", -1, false, shape_update, dtype_same_float, nullptr},
    {Op::StepControl, "StepControl", -1, true, shape_step_control, dtype_floats_to_f32, nullptr},
    {Op::AccumulateGrad, "AccumulateGrad", 2, false, shape_same_as_first, dtype_same_float, nullptr},
    {Op::MultiUpdate, "MultiUpdate", -1, false, shape_multi_update, dtype_same_float, nullptr},
    {Op::AllReduce, "AllReduce", -1, true, shape_all_reduce, dtype_same_float, nullptr},
    {Op::AllReduceWait, "AllReduceWait", 1, true, shape_all_reduce_wait, dtype_same_float, nullptr},
    {Op::View, "View", 1, true, shape_view, dtype_same_any, nullptr},
    {Op::Unary, "Unary", 1, true, shape_same_as_first, dtype_same_float, grad_from_x<Op::UnaryGrad>},
    {Op::UnaryGrad, "UnaryGrad", 2, true, shape_dy_x, dtype_same_float, nullptr},
    {Op::Binary, "Binary", 2, true, shape_broadcast, dtype_arithmetic, grad_binary},
    {Op::Compare, "Compare", 2, true, shape_broadcast, dtype_compare, nullptr},
    {Op::Where, "Where", 3, true, shape_broadcast, dtype_where, grad_where},
    {Op::Reduce, "Reduce", 1, true, shape_reduce, dtype_reduce, grad_reduce},
    {Op::ArgReduce, "ArgReduce", 1, true, shape_arg_reduce, dtype_arg_reduce, nullptr},
    {Op::BroadcastTo, "BroadcastTo", 1, true, shape_broadcast_to, dtype_same_any, grad_broadcast_to},
    {Op::Transpose, "Transpose", 1, true, shape_transpose, dtype_same_any, grad_transpose},
    {Op::Pad, "Pad", 1, true, shape_pad_nd, dtype_same_any, grad_pad},
    {Op::BatchMatMul, "BatchMatMul", 2, true, shape_batch_matmul, dtype_same_float, grad_batch_matmul},
    {Op::Gather, "Gather", 2, true, shape_gather, dtype_gather, grad_gather},
    {Op::GatherGrad, "GatherGrad", 2, true, shape_gather_grad, dtype_gather_grad, nullptr},
    {Op::OneHot, "OneHot", 1, true, shape_one_hot, dtype_one_hot, nullptr},
    {Op::StepValue, "StepValue", 0, true, shape_scalar, dtype_step_value, nullptr},
    {Op::Assign, "Assign", 2, false, shape_assign, dtype_assign, nullptr},
    {Op::LayerNormStats, "LayerNormStats", 1, true, shape_layer_norm, dtype_same_float, nullptr},
    {Op::LayerNormApply, "LayerNormApply", 4, true, shape_layer_norm, dtype_same_float, grad_layer_norm_apply},
    {Op::LayerNormInputGrad, "LayerNormInputGrad", 4, true, shape_layer_norm, dtype_same_float, nullptr},
    {Op::LayerNormGammaGrad, "LayerNormGammaGrad", 3, true, shape_layer_norm, dtype_same_float, nullptr},
    {Op::LstmSequence, "LstmSequence", 4, true, shape_lstm_sequence, dtype_same_float, grad_lstm_sequence},
    {Op::LstmSequenceGrad, "LstmSequenceGrad", 3, true, shape_lstm_sequence_grad, dtype_same_float, nullptr},
    {Op::Attention, "Attention", -1, true, shape_attention, dtype_same_float, grad_attention},
    {Op::AttentionGrad, "AttentionGrad", -1, true, shape_attention_grad, dtype_same_float, nullptr},
    {Op::LayerNormGrad, "LayerNormGrad", 4, true, shape_layer_norm, dtype_same_float, nullptr},
    {Op::LogSoftmax, "LogSoftmax", 1, true, shape_same_as_first, dtype_same_float, grad_log_softmax},
    {Op::RandomUniform, "RandomUniform", 0, true, shape_source, dtype_random, nullptr},
    {Op::RandomNormal, "RandomNormal", 0, true, shape_source, dtype_random, nullptr},
    {Op::Reverse, "Reverse", 1, true, shape_reverse, dtype_same_any, grad_inverse<Op::Reverse>},
    {Op::Constrain, "Constrain", 1, false, shape_constrain, dtype_constrain, nullptr},
    {Op::Resize, "Resize", 1, true, shape_resize, dtype_same_float, grad_to_input_shape<Op::ResizeGrad>},
    {Op::ResizeGrad, "ResizeGrad", 1, true, shape_attr, dtype_same_float, nullptr},
    {Op::AffineTransform, "AffineTransform", 2, true, shape_affine, dtype_same_float, grad_affine},
    {Op::AffineTransformGrad, "AffineTransformGrad", 2, true, shape_affine, dtype_same_float, nullptr},
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
