// The activation layer classes of Keras 3 (keras/src/layers/activations/): ReLU, LeakyReLU, PReLU, ELU and Softmax,
// composites of the general ops (graph/tensor_ops.h) following Keras 3.15.1's own math, so that NaN and the edge
// cases come out as Keras' do (e.g. ReLU(threshold=t) maps NaN to 0 — Keras' where(x > t, x, 0) — while plain ReLU
// keeps it).
#include <cmath>

#include "graph/tensor_ops.h"
#include "nn/layers/context.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layers.h"

namespace tk {
namespace {
using graph::BinaryFn;
using graph::UnaryFn;
namespace ops = graph::ops;

void check_non_negative(const std::string& cls, const std::string& name, const char* what, float v) {
  if (!(v >= 0.0f))
    throw InvalidArgument(cls + " '" + name + "': " + what + " must be >= 0 (as in Keras), got " + std::to_string(v));
}

// keras.layers.ReLU: Keras 3's activations.relu(x, negative_slope, max_value, threshold), step by step:
//   slope != 0, no max_value, threshold 0:  leaky_relu(x, slope)
//   neg = relu(threshold - x)                (only with a slope)
//   x = threshold != 0 ? where(x > threshold, x, 0) : max_value == 6 ? relu6(x) : relu(x)
//   x = clip(x, 0, max_value)                 (with a max_value other than the relu6 case)
//   y = x - slope * neg
class ReLULayer final : public Layer, public nn::MaskSupport {
 public:
  ReLULayer(layers::ReLUOptions o) : Layer("re_lu", o.name), o_(std::move(o)) {
    if (o_.max_value) check_non_negative("ReLU", name, "max_value", *o_.max_value);
    check_non_negative("ReLU", name, "negative_slope", o_.negative_slope);
    check_non_negative("ReLU", name, "threshold", o_.threshold);
  }
  std::string class_name() const override { return "ReLU"; }
  LayerConfig get_config() const override {
    LayerConfig c;
    if (o_.max_value) c.set_float("max_value", *o_.max_value);  // absent: Keras' None
    return c.set_float("negative_slope", o_.negative_slope).set_float("threshold", o_.threshold);
  }
  Shape build(const std::vector<Shape>& in) override { return in[0]; }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    int x = in[0];
    const float slope = o_.negative_slope, t = o_.threshold;
    if (slope == 0.0f && t == 0.0f && !o_.max_value) return nn::apply_activation(ctx, "relu", x, name);
    graph::OpBuilder b{ctx.g, nullptr, name};
    if (slope != 0.0f && !o_.max_value && t == 0.0f) return ops::unary(b, UnaryFn::leaky_relu, x, slope);
    int neg = -1;
    if (slope != 0.0f) neg = ops::unary(b, UnaryFn::relu, ops::add_scalar(b, ops::unary(b, UnaryFn::negative, x), t));
    bool clip_max = o_.max_value.has_value();
    int y;
    if (t != 0.0f) {
      y = ops::where(b, ops::compare(b, BinaryFn::greater, x, ops::scalar(b, t, x)), x, ops::scalar(b, 0.0f, x));
    } else if (o_.max_value && *o_.max_value == 6.0f) {
      y = ops::unary(b, UnaryFn::relu6, x);
      clip_max = false;
    } else {
      y = ops::unary(b, UnaryFn::relu, x);
    }
    if (clip_max) y = ops::unary(b, UnaryFn::clip, y, 0.0f, *o_.max_value);
    if (slope != 0.0f) y = ops::binary(b, BinaryFn::subtract, y, ops::mul_scalar(b, neg, slope));
    return y;
  }

 private:
  layers::ReLUOptions o_;
};

// keras.layers.LeakyReLU: x >= 0 ? x : negative_slope * x (Keras 3's key; its default 0.3, not leaky_relu's 0.2), and
// keras.layers.ELU (elu): x > 0 ? x : alpha * (exp(x) - 1); each one op with `alpha` as its attribute.
class AlphaActivationLayer final : public Layer, public nn::MaskSupport {
 public:
  AlphaActivationLayer(bool elu, float alpha, std::string n)
      : Layer(elu ? "elu" : "leaky_re_lu", std::move(n)), elu_(elu), alpha_(alpha) {
    if (!elu_) check_non_negative("LeakyReLU", name, "negative_slope", alpha_);
  }
  std::string class_name() const override { return elu_ ? "ELU" : "LeakyReLU"; }
  LayerConfig get_config() const override { return LayerConfig{}.set_float(elu_ ? "alpha" : "negative_slope", alpha_); }
  Shape build(const std::vector<Shape>& in) override { return in[0]; }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    graph::Attrs at;
    at.alpha = alpha_;
    return ctx.g.add(elu_ ? graph::Op::Elu : graph::Op::LeakyRelu, {in[0]}, at, name);
  }

 private:
  bool elu_;
  float alpha_;
};

// keras.layers.PReLU: relu(x) - alpha * relu(-x) (Keras' formula, so NaN stays NaN), alpha a trainable weight of
// the sample shape with 1 on the shared axes (1-based, as Keras counts them).
class PReLULayer final : public Layer, public nn::MaskSupport {
 public:
  PReLULayer(layers::PReLUOptions o) : Layer("p_re_lu", o.name), o_(std::move(o)) {
    nn::check_initializer(o_.alpha_initializer);
  }
  std::string class_name() const override { return "PReLU"; }
  LayerConfig get_config() const override {
    LayerConfig c;
    c.set("alpha_initializer", o_.alpha_initializer);
    if (!o_.shared_axes.empty()) c.set("shared_axes", o_.shared_axes);  // absent: Keras' None
    return c;
  }
  Shape build(const std::vector<Shape>& in) override {
    const Shape& x = in[0];
    std::vector<int64_t> param(x.dims().begin() + 1, x.dims().end());
    for (int64_t a : o_.shared_axes) {
      if (a < 1 || a >= x.rank())
        throw InvalidArgument("PReLU '" + name + "': shared_axes entry " + std::to_string(a) +
                              " is not a feature axis of " + x.to_string() + " (1 to " + std::to_string(x.rank() - 1) +
                              ")");
      param[static_cast<size_t>(a - 1)] = 1;
    }
    for (int64_t d : param)
      if (d <= 0)
        throw InvalidArgument("PReLU '" + name + "': input " + x.to_string() +
                              " has an unknown size on an axis that is not shared");
    if (!built_) {
      add_weight("alpha", Shape(param), o_.alpha_initializer);
    } else if (weights_[0].value.shape() != Shape(param)) {
      throw InvalidArgument("PReLU '" + name + "' was built for alpha of shape " +
                            weights_[0].value.shape().to_string() + ", called on " + x.to_string());
    }
    return x;
  }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    graph::OpBuilder b{ctx.g, nullptr, name};
    const int x = in[0];
    const int pos = ops::unary(b, UnaryFn::relu, x);
    const int neg = ops::unary(b, UnaryFn::relu, ops::unary(b, UnaryFn::negative, x));
    const int alpha = ctx.variable(weights_[0]);  // (sample shape), broadcasts against (N, ...)
    return ops::binary(b, BinaryFn::subtract, pos, ops::binary(b, BinaryFn::multiply, alpha, neg));
  }

 private:
  layers::PReLUOptions o_;
};

// keras.layers.Softmax: over one axis (any), or exp(x - logsumexp(x, axes)) over several, as Keras.
class SoftmaxLayer final : public Layer, public nn::MaskSupport {
 public:
  SoftmaxLayer(std::vector<int> axis, bool list, std::string n)
      : Layer("softmax", std::move(n)), axis_(std::move(axis)), list_(list) {
    if (axis_.empty()) throw InvalidArgument("Softmax '" + name + "': axis must name at least one axis");
    if (!list_ && axis_.size() != 1) throw InvalidArgument("Softmax '" + name + "': one axis unless given a list");
  }
  std::string class_name() const override { return "Softmax"; }
  // Keras' Softmax applies an input's mask inside the softmax (masked entries to -1e9, then to 0): not built here, so a
  // masked input is refused rather than the mask dropped.
  LayerConfig get_config() const override {
    if (!list_) return LayerConfig{}.set("axis", static_cast<int64_t>(axis_[0]));
    return LayerConfig{}.set("axis", std::vector<int64_t>(axis_.begin(), axis_.end()));
  }
  Shape build(const std::vector<Shape>& in) override {
    for (int a : axis_) {
      const int n = a < 0 ? a + in[0].rank() : a;
      if (n <= 0 || n >= in[0].rank())
        throw InvalidArgument("Softmax '" + name + "': axis " + std::to_string(a) + " is not a feature axis of " +
                              in[0].to_string());
    }
    return in[0];
  }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    if (ctx.input_mask(0) >= 0)
      throw Unsupported("Softmax '" + name +
                        "': an input with a Keras mask (Keras masks the softmax with it) is not "
                        "supported; use Activation('softmax'), which passes the mask on unchanged");
    graph::OpBuilder b{ctx.g, nullptr, name};
    if (axis_.size() == 1) return ops::softmax(b, in[0], axis_[0]);
    const int lse = ops::reduce(b, graph::ReduceFn::logsumexp, in[0], axis_, true);
    return ops::unary(b, UnaryFn::exp, ops::binary(b, BinaryFn::subtract, in[0], lse));
  }

 private:
  std::vector<int> axis_;
  bool list_;  // Keras' config held a list (written back as one)
};

}  // namespace

namespace layers {
LayerPtr ReLU(ReLUOptions options) { return std::make_shared<ReLULayer>(std::move(options)); }
LayerPtr LeakyReLU(float negative_slope, std::string name) {
  return std::make_shared<AlphaActivationLayer>(false, negative_slope, std::move(name));
}
LayerPtr PReLU(PReLUOptions options) { return std::make_shared<PReLULayer>(std::move(options)); }
LayerPtr ELU(float alpha, std::string name) {
  return std::make_shared<AlphaActivationLayer>(true, alpha, std::move(name));
}
LayerPtr Softmax(int axis, std::string name) {
  return std::make_shared<SoftmaxLayer>(std::vector<int>{axis}, false, std::move(name));
}
LayerPtr Softmax(std::vector<int> axes, std::string name) {
  return std::make_shared<SoftmaxLayer>(std::move(axes), true, std::move(name));
}
}  // namespace layers

}  // namespace tk
