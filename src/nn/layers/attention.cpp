// Keras 3's Attention (Luong) and AdditiveAttention (Bahdanau), composite layers from the general ops (the gradient
// is autodiff's). keras/src/layers/attention/attention.py, additive_attention.py, on [query (N, Tq, d), value
// (N, Tv, dv), key (N, Tv, d) = value]:
//   Attention, score_mode "dot":     scores = q . k^T  (N, Tq, Tv), times `scale` (a scalar, ones) when use_scale
//   Attention, score_mode "concat":  scores = concat_score_weight * sum_d tanh(scale * (q_i + k_j))  (scale: 1 unless
//                                    use_scale; both scalars)
//   AdditiveAttention:               scores = sum_d scale * tanh(q_i + k_j)  (scale (d,), glorot_uniform; 1 unless
//                                    use_scale)
//   scores where masked: scores - 1e9 (65504 in float16), the mask being the value's Keras mask (N, 1, Tv) AND the
//   causal one (Tq, Tv) when called with use_causal_mask=True; probs = softmax(scores) [dropout in training];
//   out = probs . v (N, Tq, dv), zero at the query's masked steps; the output carries the query's mask.
// Weights in Keras' order and names (scale, concat_score_weight) under the layer's own vars.
// Not built: return_attention_scores=True (InvalidArgument here, Unsupported from a file).
#include "graph/tensor_ops.h"
#include "nn/layers/context.h"
#include "nn/layers/masks.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layers.h"

namespace tk {
namespace {
using graph::BinaryFn;
namespace ops = graph::ops;

class AttentionLayer final : public Layer, public nn::MaskSupport {
 public:
  AttentionLayer(bool additive, bool use_scale, std::string score_mode, float dropout, uint64_t seed,
                 std::string given_name)
      : Layer(additive ? "additive_attention" : "attention", std::move(given_name)),
        additive_(additive),
        use_scale_(use_scale),
        score_mode_(std::move(score_mode)),
        dropout_(dropout),
        seed_(seed),
        dropout_seed_(seed != 0 ? seed : nn::next_seed()) {
    if (score_mode_ != "dot" && score_mode_ != "concat")
      throw InvalidArgument(class_name() + " '" + name + "': score_mode must be \"dot\" or \"concat\", got \"" +
                            score_mode_ + "\"");
    nn::check_rate(*this, "dropout", dropout_);
  }
  std::string class_name() const override { return additive_ ? "AdditiveAttention" : "Attention"; }
  LayerConfig get_config() const override {
    LayerConfig c;
    c.set("use_scale", use_scale_);
    if (!additive_) c.set("score_mode", score_mode_);  // AdditiveAttention's get_config drops it
    c.set_float("dropout", dropout_).set("seed", static_cast<int64_t>(seed_));
    return c;
  }
  int arity() const override { return -1; }
  void check_call_options(const LayerConfig& options) const override {
    nn::check_attention_call_options(*this, options, "return_attention_scores=True is not built");
  }
  Shape build(const std::vector<Shape>& in) override {
    const std::string who = class_name() + " '" + name + "'";
    if (in.size() < 2 || in.size() > 3)
      throw InvalidArgument(who + " takes [query, value] or [query, value, key], got " + std::to_string(in.size()) +
                            " inputs");
    for (const Shape& s : in)
      if (s.rank() != 3 || !s.sample_shape().fully_known())
        throw InvalidArgument(who + ": inputs must be (batch, steps, features) with known steps and features, got " +
                              s.to_string());
    const Shape& q = in[0];
    const Shape& v = in[1];
    const Shape& k = in.size() > 2 ? in[2] : in[1];
    if (k[1] != v[1])
      throw InvalidArgument(who + ": key " + k.to_string() + " and value " + v.to_string() +
                            " must have the same number of steps");
    if (k[2] != q[2])
      throw InvalidArgument(who + ": query " + q.to_string() + " and key " + k.to_string() +
                            " must have the same number of features");
    if (!built_) {
      dim_ = q[2];
      if (use_scale_) add_weight("scale", additive_ ? Shape{dim_} : Shape{}, additive_ ? "glorot_uniform" : "ones");
      if (!additive_ && score_mode_ == "concat") add_weight("concat_score_weight", Shape{}, "ones");
    } else if (q[2] != dim_) {
      throw InvalidArgument(who + " was built for " + std::to_string(dim_) + " query features, called on " +
                            q.to_string());
    }
    return Shape{q[0], q[1], v[2]};
  }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    graph::OpBuilder b{ctx.g, nullptr, name};
    bool causal = false;
    if (ctx.call_options)
      if (const LayerConfig::Value* c = ctx.call_options->find("use_causal_mask")) causal = c->b;
    const int q = in[0], v = in[1], k = in.size() > 2 ? in[2] : in[1];
    const int64_t n = ctx.g[q].shape[0], tq = ctx.g[q].shape[1], tv = ctx.g[v].shape[1];
    int scores;  // (N, Tq, Tv)
    if (!additive_ && score_mode_ == "dot") {
      scores = ops::batch_matmul(b, q, k, false, true);
      if (use_scale_) scores = ops::binary(b, BinaryFn::multiply, scores, ctx.variable(weights_[0]));
    } else {
      int sum = ops::binary(b, BinaryFn::add, ops::reshape(b, q, Shape{n, tq, 1, dim_}),
                            ops::reshape(b, k, Shape{n, 1, tv, dim_}));  // (N, Tq, Tv, d)
      if (!additive_ && use_scale_) sum = ops::binary(b, BinaryFn::multiply, ctx.variable(weights_[0]), sum);
      int t = ops::unary(b, graph::UnaryFn::tanh, sum);
      if (additive_ && use_scale_) t = ops::binary(b, BinaryFn::multiply, ctx.variable(weights_[0]), t);
      scores = ops::reduce(b, graph::ReduceFn::sum, t, {-1}, false);
      if (!additive_)  // concat_score_weight, after scale
        scores = ops::binary(b, BinaryFn::multiply, ctx.variable(weights_[use_scale_ ? 1 : 0]), scores);
    }
    // Keras' _calculate_score_mask: the value's mask (N, 1, Tv) AND the causal (Tq, Tv); masked scores lowered by
    // max_value (not replaced: a row masked whole keeps its softmax over its own scores, as in Keras).
    int mask = -1;  // float32 0/1
    if (ctx.input_mask(1) >= 0) mask = ops::reshape(b, ctx.input_mask(1), Shape{n, 1, tv});
    if (causal) {
      const int c = nn::masks::as(b, nn::masks::causal(b, tq, tv), DType::f32);  // (Tq, Tv)
      mask = mask < 0 ? c : nn::masks::logical_and(b, mask, c);
    }
    if (mask >= 0) {
      const float max_value = ctx.g[scores].dtype == DType::f16 ? 65504.0f : 1.0e9f;
      scores = ops::where(b, nn::masks::condition(b, mask), scores, ops::add_scalar(b, scores, -max_value));
    }
    int probs = ops::softmax(b, scores, -1);
    if (ctx.training && dropout_ > 0.0f) {
      graph::Attrs at;
      at.rate = dropout_;
      at.seed = dropout_seed_;
      at.shape = ctx.g[probs].shape;
      at.dtype = ctx.g[probs].dtype;
      probs = ctx.g.add(graph::Op::Mul, {probs, b.add(graph::Op::DropoutMask, {}, at)}, {}, name + "/dropout");
    }
    int out = ops::batch_matmul(b, probs, v);                                              // (N, Tq, dv)
    if (ctx.input_mask(0) >= 0) out = nn::masks::select(b, ctx.input_mask(0), out, 0.0f);  // the query's mask
    return out;
  }

 private:
  bool additive_, use_scale_;
  std::string score_mode_;
  float dropout_;
  uint64_t seed_, dropout_seed_;
  int64_t dim_ = 0;
};

}  // namespace

namespace layers {
LayerPtr Attention(AttentionOptions o) {
  return std::make_shared<AttentionLayer>(false, o.use_scale, o.score_mode, o.dropout, o.seed, o.name);
}
LayerPtr AdditiveAttention(AdditiveAttentionOptions o) {
  return std::make_shared<AttentionLayer>(true, o.use_scale, "dot", o.dropout, o.seed, o.name);
}
}  // namespace layers
}  // namespace tk
