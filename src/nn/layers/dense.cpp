// Dense: activation(x @ kernel + bias) over the last axis. kernel (in, units), bias (units,).
#include "nn/layers/context.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layers.h"

namespace tk {
namespace {

class DenseLayer final : public Layer, public nn::MaskSupport {
 public:
  DenseLayer(int64_t units, std::string activation, layers::DenseOptions o)
      : Layer("dense", o.name), units_(units), activation_(std::move(activation)), options_(std::move(o)) {
    nn::check_positive(*this, "units", units);
    nn::check_activation(activation_);
    nn::check_initializer(options_.kernel_initializer);
    nn::check_initializer(options_.bias_initializer);
  }
  std::string class_name() const override { return "Dense"; }
  LayerConfig get_config() const override {
    return LayerConfig{}
        .set("units", units_)
        .set("activation", activation_)
        .set("use_bias", options_.use_bias)
        .set("kernel_initializer", options_.kernel_initializer)
        .set("bias_initializer", options_.bias_initializer);
  }

  Shape build(const std::vector<Shape>& in) override {
    const Shape& s = in[0];
    if (s.rank() < 2 || s[-1] <= 0)
      throw InvalidArgument("Dense '" + name + "': input shape " + s.to_string() +
                            " needs a known last dimension (add an Input layer or a Flatten)");
    if (!built_) {
      in_features_ = s[-1];
      add_weight("kernel", Shape{in_features_, units_}, options_.kernel_initializer);
      if (options_.use_bias) add_weight("bias", Shape{units_}, options_.bias_initializer);
    } else if (s[-1] != in_features_) {
      throw InvalidArgument("Dense '" + name + "' was built for " + std::to_string(in_features_) +
                            " input features but is called on shape " + s.to_string());
    }
    Shape out = s;
    out[-1] = units_;
    return out;
  }

  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    int x = in[0];
    const Shape xs = ctx.g[x].shape;
    if (xs.rank() != 2) {  // (b, ..., in) -> (b*..., in)
      graph::Attrs at;
      at.shape = Shape{xs.numel() / in_features_, in_features_};
      x = ctx.g.add(graph::Op::Reshape, {x}, at, name + "/flatten");
    }
    int y = ctx.g.add(graph::Op::MatMul, {x, ctx.variable(weights_[0])}, {}, name + "/matmul");
    if (options_.use_bias) y = ctx.g.add(graph::Op::BiasAdd, {y, ctx.variable(weights_[1])}, {}, name + "/bias_add");
    if (xs.rank() != 2) {
      graph::Attrs at;
      at.shape = xs;
      at.shape[-1] = units_;
      y = ctx.g.add(graph::Op::Reshape, {y}, at, name + "/unflatten");
    }
    return nn::apply_activation(ctx, activation_, y, name);
  }

 private:
  int64_t units_, in_features_ = 0;
  std::string activation_;
  layers::DenseOptions options_;
};

}  // namespace

LayerPtr layers::Dense(int64_t units, std::string activation, DenseOptions options) {
  return nn::make_with_dtype<DenseLayer>(std::move(options), units, std::move(activation));
}

}  // namespace tk
