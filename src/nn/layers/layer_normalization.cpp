// LayerNormalization (Keras 3), a composite layer: its forward is built from the general tensor ops
// (graph/tensor_ops.h) and its gradient comes from autodiff. Its common case (the trailing axes with gamma and beta)
// runs as four fused ops instead, measured several times faster (fused() below).
// Keras 3.15.1's math (keras/src/ops/nn.py, _layer_normalization), in float32 whatever the policy:
//   mean, var = moments(x, axes)                     (biased variance)
//   inv = rsqrt(var + epsilon) [* gamma];  y = x * inv + (beta - mean * inv)
// rms_scaling=True (deprecated in Keras; kept for its files): y = x * rsqrt(var + epsilon) * gamma, no centering
// and no beta — the variance, not the mean of squares, as Keras computes it.
#include <algorithm>

#include "graph/fuse.h"
#include "graph/tensor_ops.h"
#include "nn/layers/context.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layers.h"

namespace tk {
namespace {
using graph::BinaryFn;
using graph::ReduceFn;
using graph::UnaryFn;
namespace ops = graph::ops;

class LayerNormLayer final : public Layer, public nn::MaskSupport {
 public:
  explicit LayerNormLayer(layers::LayerNormalizationOptions o)
      : Layer("layer_normalization", o.name), o_(std::move(o)) {
    if (o_.axis.empty()) throw InvalidArgument("LayerNormalization '" + name + "': axis must name at least one axis");
    if (!(o_.epsilon > 0.0f))
      throw InvalidArgument("LayerNormalization '" + name + "': epsilon must be > 0, got " +
                            std::to_string(o_.epsilon));
    nn::check_initializer(o_.gamma_initializer);
    nn::check_initializer(o_.beta_initializer);
  }
  std::string class_name() const override { return "LayerNormalization"; }
  LayerConfig get_config() const override {
    std::vector<int64_t> axis(o_.axis.begin(), o_.axis.end());
    return LayerConfig{}
        .set("axis", axis)
        .set_float("epsilon", o_.epsilon)
        .set("center", o_.center)
        .set("scale", o_.scale)
        .set("rms_scaling", o_.rms_scaling)
        .set("beta_initializer", o_.beta_initializer)
        .set("gamma_initializer", o_.gamma_initializer);
  }
  bool computes_in_float32() const override { return true; }  // Keras: at least float32, cast back after

  Shape build(const std::vector<Shape>& in) override {
    const Shape& x = in[0];
    axes_.clear();
    for (int a : o_.axis) {
      const int n = a < 0 ? a + x.rank() : a;
      if (n <= 0 || n >= x.rank())
        throw InvalidArgument("LayerNormalization '" + name + "': axis " + std::to_string(a) +
                              " is not a feature axis of input " + x.to_string() + " (valid: 1 to " +
                              std::to_string(x.rank() - 1) + ", or negative from the end)");
      if (x[n] <= 0)
        throw InvalidArgument("LayerNormalization '" + name + "': axis " + std::to_string(a) + " of " + x.to_string() +
                              " must have a known size");
      axes_.push_back(n);
    }
    std::sort(axes_.begin(), axes_.end());
    axes_.erase(std::unique(axes_.begin(), axes_.end()), axes_.end());
    std::vector<int64_t> param;  // the normalized axes' sizes, in axis order (Keras' gamma/beta shape)
    for (int a : axes_) param.push_back(x[a]);
    if (!built_) {
      if (has_gamma()) add_weight("gamma", Shape(param), o_.gamma_initializer);
      if (has_beta()) add_weight("beta", Shape(param), o_.beta_initializer);
    } else if (!weights_.empty() && weights_[0].value.shape() != Shape(param)) {
      throw InvalidArgument("LayerNormalization '" + name + "' was built for normalized axes of shape " +
                            weights_[0].value.shape().to_string() + ", called on " + x.to_string());
    }
    return x;
  }

  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    graph::OpBuilder b{ctx.g, nullptr, name};
    const int x = in[0];
    const Shape xs = ctx.g[x].shape;
    std::vector<int> axes(axes_.begin(), axes_.end());
    // gamma and beta broadcast against x: their sizes on the normalized axes, 1 elsewhere (not needed when the axes
    // are the last ones: NumPy broadcasting aligns from the end).
    std::vector<int64_t> bshape(static_cast<size_t>(xs.rank()), 1);
    for (int a : axes_) bshape[static_cast<size_t>(a)] = xs[a];
    const bool trailing = axes_.back() == xs.rank() - 1 && axes_.front() == xs.rank() - static_cast<int>(axes_.size());
    auto param = [&](const Weight& w) {
      const int v = ctx.variable(w);
      return trailing ? v : ops::reshape(b, v, Shape(bshape));
    };
    if (trailing && !o_.rms_scaling && has_gamma() && has_beta() && graph::fusion_enabled())
      return fused(ctx, b, x, xs);
    const int mean = ops::reduce(b, ReduceFn::mean, x, axes, true);
    const int var = ops::reduce(b, ReduceFn::mean, ops::binary(b, BinaryFn::squared_difference, x, mean), axes, true);
    int inv = ops::unary(b, UnaryFn::rsqrt, ops::add_scalar(b, var, o_.epsilon));
    if (o_.rms_scaling) {
      const int y = ops::binary(b, BinaryFn::multiply, x, inv);
      return ops::binary(b, BinaryFn::multiply, y, param(weights_[0]));
    }
    if (has_gamma()) inv = ops::binary(b, BinaryFn::multiply, inv, param(weights_[0]));
    int res = ops::unary(b, UnaryFn::negative, ops::binary(b, BinaryFn::multiply, mean, inv));
    if (has_beta()) res = ops::binary(b, BinaryFn::add, res, param(weights_[has_gamma() ? 1 : 0]));
    return ops::binary(b, BinaryFn::add, ops::binary(b, BinaryFn::multiply, x, inv), res);
  }

 private:
  // The common case (the trailing axes, gamma and beta) as the fused LayerNorm* ops (graph/op.h): one pass for the
  // statistics, one for y, and in the gradient one per dx, dgamma and dbeta, where the composite makes about thirty
  // (docs/benchmarks.md). Same math and order of operations as the composite; TK_FUSE=0 runs the composite.
  int fused(nn::CallContext& ctx, graph::OpBuilder& b, int x, const Shape& xs) const {
    int64_t n = 1;
    for (int a : axes_) n *= xs[a];
    std::vector<int64_t> flat(xs.dims().begin(), xs.dims().end() - static_cast<int64_t>(axes_.size()));
    flat.push_back(n);
    const int xf = ops::reshape(b, x, Shape(flat));
    const int gamma = ops::reshape(b, ctx.variable(weights_[0]), Shape{n});
    const int beta = ops::reshape(b, ctx.variable(weights_[1]), Shape{n});
    graph::Attrs at;
    at.epsilon = o_.epsilon;
    const int stats = b.add(graph::Op::LayerNormStats, {xf}, at);
    return ops::reshape(b, b.add(graph::Op::LayerNormApply, {xf, stats, gamma, beta}, at), xs);
  }

  // Keras 3: gamma exists with scale or rms_scaling; beta with center, and never with rms_scaling.
  bool has_gamma() const { return o_.scale || o_.rms_scaling; }
  bool has_beta() const { return o_.center && !o_.rms_scaling; }

  layers::LayerNormalizationOptions o_;
  std::vector<int> axes_;  // normalized, sorted
};

}  // namespace

namespace layers {
LayerPtr LayerNormalization(LayerNormalizationOptions o) { return std::make_shared<LayerNormLayer>(std::move(o)); }
}  // namespace layers

}  // namespace tk
