// MultiHeadAttention (Keras 3), a composite layer: projections are GEMMs, attention is BatchMatMul, Softmax and
// BatchMatMul over (batch, heads, ...) (graph/tensor_ops.h); the gradient is autodiff's.
// Keras 3.15.1's math (keras/src/layers/attention/multi_head_attention.py), inputs (B, T, d) / (B, S, d):
//   q = query @ Wq + bq  (B, T, H, key_dim);  k = key @ Wk + bk  (B, S, H, key_dim);  v = value @ Wv + bv
//   scores = (q * 1/sqrt(key_dim)) . k^T  (B, H, T, S);  masked (causal: key j > query i) to -1e9
//   probs = softmax(scores, over S) [dropout in training];  out = (probs . v) @ Wo + bo  (B, T, *output_shape)
// Weights, in Keras' order and layout (EinsumDense kernels): query/kernel (d, H, key_dim), query/bias (H, key_dim),
// key/..., value/kernel (d, H, value_dim), value/bias, attention_output/kernel (H, value_dim, *output_shape),
// attention_output/bias (output_shape). In Keras files each pair lives in its sub-layer's group (query_dense/vars,
// ...), and the empty _softmax/vars and _dropout_layer/vars groups are written too.
// Keras masks: the query's, value's and key's (N, steps) masks and the causal mask are ANDed into the score mask as
// Keras' _compute_attention_mask; the output carries the query's mask.
// Training programs without attention dropout run the scores, softmax and value product as one fused op
// (graph/attention_rules.h: flash-attention style, the (T, S) scores never stored; the projections feed it as the
// GEMMs write them, with no transposes); evaluate and predict programs, which Model::export_onnx writes, keep the
// composite (the fused op has no ONNX mapping), as do dropout > 0 in training (a dropped probability needs the
// scores).
// Not built: attention_mask, return_attention_scores, attention_axes other than the sequence axis,
// use_gate, sliding_window (InvalidArgument here, Unsupported from a file).
#include <cmath>

#include "graph/attention_rules.h"
#include "graph/tensor_ops.h"
#include "nn/layers/context.h"
#include "nn/layers/masks.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layers.h"

namespace tk {
namespace {
using graph::BinaryFn;
namespace ops = graph::ops;

class MultiHeadAttentionLayer final : public Layer, public nn::MaskSupport {
 public:
  MultiHeadAttentionLayer(int64_t heads, int64_t key_dim, layers::MultiHeadAttentionOptions o)
      : Layer("multi_head_attention", o.name), heads_(heads), key_dim_(key_dim), o_(std::move(o)) {
    if (heads_ <= 0 || key_dim_ <= 0)
      throw InvalidArgument("MultiHeadAttention '" + name + "': num_heads and key_dim must be positive, got " +
                            std::to_string(heads_) + " and " + std::to_string(key_dim_));
    if (o_.value_dim < 0)
      throw InvalidArgument("MultiHeadAttention '" + name + "': value_dim must be positive (or 0 for key_dim), got " +
                            std::to_string(o_.value_dim));
    if (o_.value_dim == 0) o_.value_dim = key_dim_;
    nn::check_rate(*this, "dropout", o_.dropout);
    for (int64_t d : o_.output_shape)
      if (d <= 0) throw InvalidArgument("MultiHeadAttention '" + name + "': output_shape dimensions must be positive");
    nn::check_initializer(o_.kernel_initializer);
    nn::check_initializer(o_.bias_initializer);
    if (o_.seed == 0) o_.seed = nn::next_seed();
  }
  std::string class_name() const override { return "MultiHeadAttention"; }
  LayerConfig get_config() const override {
    LayerConfig c;
    c.set("num_heads", heads_).set("key_dim", key_dim_).set("value_dim", o_.value_dim);
    c.set_float("dropout", o_.dropout).set("use_bias", o_.use_bias).set("use_gate", false);
    if (!o_.output_shape.empty()) c.set("output_shape", o_.output_shape);
    c.set("attention_axes", std::vector<int64_t>{1});
    c.set("kernel_initializer", o_.kernel_initializer).set("bias_initializer", o_.bias_initializer);
    c.set("seed", static_cast<int64_t>(o_.seed));
    return c;
  }
  std::vector<KerasGroup> keras_groups() const override {
    return {{"vars", name},
            {"query_dense/vars", "query"},
            {"key_dense/vars", "key"},
            {"value_dense/vars", "value"},
            {"output_dense/vars", "attention_output"},
            {"_softmax/vars", "softmax"},
            {"_dropout_layer/vars", "dropout"}};
  }
  int arity() const override { return -1; }
  std::vector<std::string> call_arguments() const override { return {"query", "value", "key"}; }
  void check_call_options(const LayerConfig& options) const override {
    nn::check_attention_call_options(*this, options, "attention_mask and return_attention_scores=True are not built");
  }

  Shape build(const std::vector<Shape>& in) override {
    if (in.size() > 3)
      throw InvalidArgument("MultiHeadAttention '" + name + "' takes query, value and optionally key, got " +
                            std::to_string(in.size()) + " inputs");
    for (const Shape& s : in)
      if (s.rank() != 3 || !s.sample_shape().fully_known())
        throw InvalidArgument("MultiHeadAttention '" + name +
                              "': inputs must be (batch, steps, features) with known "
                              "steps and features, got " +
                              s.to_string() + " (attention over other axes is not supported)");
    const Shape& q = in[0];
    const Shape& v = in[1];
    const Shape& k = in.size() > 2 ? in[2] : in[1];
    if (k[1] != v[1])
      throw InvalidArgument("MultiHeadAttention '" + name + "': key " + k.to_string() + " and value " + v.to_string() +
                            " must have the same number of steps");
    const std::vector<int64_t> out = o_.output_shape.empty() ? std::vector<int64_t>{q[2]} : o_.output_shape;
    if (!built_) {
      dims_ = {q[2], k[2], v[2]};
      auto add = [&](const std::string& sub, const std::string& group, Shape kernel, Shape bias) {
        add_weight(sub + "/kernel", std::move(kernel), o_.kernel_initializer).keras_vars = group;
        if (o_.use_bias) add_weight(sub + "/bias", std::move(bias), o_.bias_initializer).keras_vars = group;
      };
      add("query", "query_dense/vars", Shape{q[2], heads_, key_dim_}, Shape{heads_, key_dim_});
      add("key", "key_dense/vars", Shape{k[2], heads_, key_dim_}, Shape{heads_, key_dim_});
      add("value", "value_dense/vars", Shape{v[2], heads_, o_.value_dim}, Shape{heads_, o_.value_dim});
      std::vector<int64_t> okernel = {heads_, o_.value_dim};
      okernel.insert(okernel.end(), out.begin(), out.end());
      add("attention_output", "output_dense/vars", Shape(okernel), Shape(out));
      out_ = out;
    } else if (dims_[0] != q[2] || dims_[1] != k[2] || dims_[2] != v[2]) {
      throw InvalidArgument("MultiHeadAttention '" + name + "' was built for query/key/value features " +
                            std::to_string(dims_[0]) + "/" + std::to_string(dims_[1]) + "/" + std::to_string(dims_[2]) +
                            ", called on " + q.to_string() + ", " + k.to_string() + ", " + v.to_string());
    }
    std::vector<int64_t> shape = {q[0], q[1]};
    shape.insert(shape.end(), out_.begin(), out_.end());
    return Shape(shape);
  }

  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    graph::OpBuilder b{ctx.g, nullptr, name};
    bool causal = false;
    if (ctx.call_options)
      if (const LayerConfig::Value* c = ctx.call_options->find("use_causal_mask")) causal = c->b;
    const int query = in[0], value = in[1], key = in.size() > 2 ? in[2] : in[1];
    const int64_t n = ctx.g[query].shape[0], t = ctx.g[query].shape[1], s = ctx.g[value].shape[1];
    const size_t per = o_.use_bias ? 2 : 1;  // weights per projection
    if (ctx.training && o_.dropout == 0.0f) return output(ctx, b, fused(ctx, b, query, key, value, causal), n, t);
    const int q = project(ctx, b, query, 0 * per, key_dim_);      // (N, H, T, key_dim)
    const int k = project(ctx, b, key, 1 * per, key_dim_);        // (N, H, S, key_dim)
    const int v = project(ctx, b, value, 2 * per, o_.value_dim);  // (N, H, S, value_dim)
    const int qs = ops::mul_scalar(b, q, static_cast<float>(1.0 / std::sqrt(static_cast<double>(key_dim_))));
    int scores = ops::batch_matmul(b, qs, k, false, true);  // (N, H, T, S)
    // Keras' _compute_attention_mask: the query's Keras mask (N, T, 1) & the value's (N, 1, S) & the key's & causal.
    const int mask = attention_mask(ctx, b, n, t, s, causal);  // (N, 1, T, S) / (T, S) bool, or -1
    if (mask >= 0) {
      // Keras' Softmax mask: masked scores become its large negative number (-1e9; -3e4 in float16).
      const float neg = ctx.g[scores].dtype == DType::f16 ? -3e4f : -1e9f;
      scores = ops::where(b, mask, scores, ops::scalar(b, neg, scores));
    }
    int probs = ops::softmax(b, scores, -1);
    // With the inputs' Keras masks, Keras' masked Softmax then zeroes the masked entries (a query step masked whole
    // attends to nothing); the causal mask alone never masks a whole row, and its -1e9 scores are already 0 here.
    if (!ctx.input_masks.empty()) probs = ops::where(b, mask, probs, ops::scalar(b, 0.0f, probs));
    if (ctx.training && o_.dropout > 0.0f) {
      graph::Attrs at;
      at.rate = o_.dropout;
      at.seed = o_.seed;
      at.shape = ctx.g[probs].shape;
      at.dtype = ctx.g[probs].dtype;
      probs = ctx.g.add(graph::Op::Mul, {probs, b.add(graph::Op::DropoutMask, {}, at)}, {}, name + "/dropout");
    }
    int o = ops::batch_matmul(b, probs, v);  // (N, H, T, value_dim)
    o = ops::transpose(b, o, {0, 2, 1, 3});  // (N, T, H, value_dim)
    return output(ctx, b, ops::reshape(b, o, Shape{n * t, heads_ * o_.value_dim}), n, t);
  }

 private:
  // The fused attention (graph/attention_rules.h) over the projections as their GEMMs write them: (N*T, H*D) each.
  int fused(nn::CallContext& ctx, graph::OpBuilder& b, int query, int key, int value, bool causal) const {
    const int64_t n = ctx.g[query].shape[0], t = ctx.g[query].shape[1], s = ctx.g[value].shape[1];
    const size_t per = o_.use_bias ? 2 : 1;
    // (N*L, d) rows of each input, one copy for inputs that are one value (self-attention: Reshape copies).
    const int q2 = rows(b, query), k2 = key == query ? q2 : rows(b, key);
    const int v2 = value == query ? q2 : value == key ? k2 : rows(b, value);
    std::vector<int> in = {project_rows(ctx, b, q2, 0 * per, key_dim_), project_rows(ctx, b, k2, 1 * per, key_dim_),
                           project_rows(ctx, b, v2, 2 * per, o_.value_dim)};
    const int mask = input_masks(ctx, b, n, t, s);  // (N, T, S) 0/1 or -1; causal is the op's own flag
    if (mask >= 0) in.push_back(nn::masks::as(b, mask, ctx.g[in[0]].dtype));
    graph::Attrs at;
    at.heads = heads_;
    at.batch = n;
    at.causal = causal;
    at.score_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(key_dim_)));
    return b.add(graph::Op::Attention, std::move(in), at);  // (N*T, H*value_dim)
  }

  // The output projection of o (N*T, H*value_dim): (N, T, *output_shape).
  int output(nn::CallContext& ctx, graph::OpBuilder& b, int o, int64_t n, int64_t t) const {
    const size_t per = o_.use_bias ? 2 : 1;
    int64_t width = 1;
    for (int64_t d : out_) width *= d;
    const Weight& wk = weights_[3 * per];
    int y = ctx.g.add(graph::Op::MatMul, {o, ops::reshape(b, ctx.variable(wk), Shape{heads_ * o_.value_dim, width})},
                      {}, name + "/attention_output");
    if (o_.use_bias)
      y = ctx.g.add(graph::Op::BiasAdd, {y, ops::reshape(b, ctx.variable(weights_[3 * per + 1]), Shape{width})}, {},
                    name + "/attention_output_bias");
    std::vector<int64_t> shape = {n, t};
    shape.insert(shape.end(), out_.begin(), out_.end());
    return ops::reshape(b, y, Shape(shape));
  }

  // x (N, L, d) through the EinsumDense "abc,cde->abde" whose kernel is weights_[w] (d, H, dim), bias weights_[w+1]
  // (H, dim): one GEMM (N*L, d) x (d, H*dim), then heads to the front: (N, H, L, dim).
  int project(nn::CallContext& ctx, graph::OpBuilder& b, int x, size_t w, int64_t dim) const {
    const Shape xs = ctx.g[x].shape;
    const int y = project_rows(ctx, b, rows(b, x), w, dim);
    return ops::transpose(b, ops::reshape(b, y, Shape{xs[0], xs[1], heads_, dim}), {0, 2, 1, 3});
  }
  static int rows(graph::OpBuilder& b, int x) {
    const Shape xs = b.g[x].shape;
    return ops::reshape(b, x, Shape{xs[0] * xs[1], xs[2]});
  }
  // The GEMM of x2 (N*L, d) as it is: (N*L, H*dim), row n*L + l holding step l of sample n, head h at columns h*dim.
  int project_rows(nn::CallContext& ctx, graph::OpBuilder& b, int x2, size_t w, int64_t dim) const {
    const Shape xs = ctx.g[x2].shape;
    const int kernel = ops::reshape(b, ctx.variable(weights_[w]), Shape{xs[1], heads_ * dim});
    int y = ctx.g.add(graph::Op::MatMul, {x2, kernel}, {}, name + "/projection");
    if (o_.use_bias)
      y = ctx.g.add(graph::Op::BiasAdd, {y, ops::reshape(b, ctx.variable(weights_[w + 1]), Shape{heads_ * dim})}, {},
                    name + "/projection_bias");
    return y;
  }

  // The inputs' Keras masks ANDed as Keras' _compute_attention_mask, without the causal one: float32 (N, T, S) 0/1,
  // or -1 when no input has a mask.
  int input_masks(nn::CallContext& ctx, graph::OpBuilder& b, int64_t n, int64_t t, int64_t s) const {
    const int mask = anded_input_masks(ctx, b, n, t, s);
    return mask < 0 ? -1 : ops::broadcast_to(b, mask, Shape{n, t, s});
  }
  // query (N, T) -> (N, T, 1), value and key (N, S) -> (N, 1, S), ANDed: float32 0/1 broadcastable to (N, T, S), or -1.
  static int anded_input_masks(nn::CallContext& ctx, graph::OpBuilder& b, int64_t n, int64_t t, int64_t s) {
    int mask = -1;
    auto and_in = [&](int m, Shape shape) {
      if (m < 0) return;
      m = ops::reshape(b, m, std::move(shape));
      mask = mask < 0 ? m : nn::masks::logical_and(b, mask, m);
    };
    and_in(ctx.input_mask(0), Shape{n, t, 1});
    and_in(ctx.input_mask(1), Shape{n, 1, s});
    and_in(ctx.input_mask(2), Shape{n, 1, s});
    return mask;
  }

  // The attention mask from the inputs' Keras masks (query (N, T) -> (N, T, 1), value and key (N, S) -> (N, 1, S))
  // and the causal one, ANDed as Keras' _compute_attention_mask: a bool (N, 1, T, S) over the heads, the causal-only
  // (T, S), or -1 for none. The output's mask is the query's (MaskSupport::compute_mask's default).
  int attention_mask(nn::CallContext& ctx, graph::OpBuilder& b, int64_t n, int64_t t, int64_t s, bool causal) const {
    int mask = anded_input_masks(ctx, b, n, t, s);  // float32 0/1 (nn/layers/masks.h)
    if (mask < 0) return causal ? nn::masks::causal(b, t, s) : -1;
    if (causal) mask = nn::masks::logical_and(b, mask, nn::masks::as(b, nn::masks::causal(b, t, s), DType::f32));
    mask = ops::broadcast_to(b, mask, Shape{n, t, s});
    return nn::masks::condition(b, ops::reshape(b, mask, Shape{n, 1, t, s}));
  }

  int64_t heads_, key_dim_;
  layers::MultiHeadAttentionOptions o_;
  std::vector<int64_t> dims_;  // query, key, value features
  std::vector<int64_t> out_;   // the output's trailing shape
};

}  // namespace

namespace layers {
LayerPtr MultiHeadAttention(int64_t num_heads, int64_t key_dim, MultiHeadAttentionOptions options) {
  return std::make_shared<MultiHeadAttentionLayer>(num_heads, key_dim, std::move(options));
}
}  // namespace layers

}  // namespace tk
