// DepthwiseConv2D (channels_last, Keras 3): kernel (kh, kw, in_channels, depth_multiplier), bias
// (in_channels * depth_multiplier,); one grouped Conv2D (depthwise.h).
#include "nn/layers/context.h"
#include "nn/layers/depthwise.h"
#include "nn/layers/image_layer_util.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layers.h"

namespace tk {
namespace {
using graph::Attrs;
using graph::Op;

class DepthwiseConv2DLayer final : public Layer {
 public:
  DepthwiseConv2DLayer(layers::Size2 k, std::string activation, layers::DepthwiseConv2DOptions o)
      : Layer("depthwise_conv2d", o.name), k_(k), activation_(std::move(activation)), o_(std::move(o)) {
    nn::check_positive(*this, "depth_multiplier", o_.depth_multiplier);
    nn::check_conv_window(*this, k, o_.strides, o_.dilation_rate);
    same_ = nn::parse_padding(*this, o_.padding);
    nn::check_activation(activation_);
    nn::check_initializer(o_.depthwise_initializer);
    nn::check_initializer(o_.bias_initializer);
  }
  std::string class_name() const override { return "DepthwiseConv2D"; }
  LayerConfig get_config() const override {
    return LayerConfig{}
        .set("kernel_size", std::vector<int64_t>{k_.h, k_.w})
        .set("strides", std::vector<int64_t>{o_.strides.h, o_.strides.w})
        .set("padding", std::string(same_ ? "same" : "valid"))
        .set("depth_multiplier", o_.depth_multiplier)
        .set("data_format", std::string("channels_last"))
        .set("dilation_rate", std::vector<int64_t>{o_.dilation_rate.h, o_.dilation_rate.w})
        .set("activation", activation_)
        .set("use_bias", o_.use_bias)
        .set("depthwise_initializer", o_.depthwise_initializer)
        .set("bias_initializer", o_.bias_initializer);
  }
  Shape build(const std::vector<Shape>& in) override {
    const Shape& x = nn::image_input(*this, in);
    if (nn::first_build(*this, built_, in_channels_, x)) {
      add_weight("kernel", Shape{k_.h, k_.w, in_channels_, o_.depth_multiplier}, o_.depthwise_initializer);
      if (o_.use_bias) add_weight("bias", Shape{in_channels_ * o_.depth_multiplier}, o_.bias_initializer);
    }
    return nn::window_output(*this, x, attrs(x), in_channels_ * o_.depth_multiplier);
  }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    int y = nn::depthwise_conv(ctx, in[0], ctx.variable(weights_[0]), attrs(ctx.g[in[0]].shape), name);
    if (o_.use_bias) y = ctx.g.add(Op::BiasAdd, {y, ctx.variable(weights_[1])}, {}, name + "/bias_add");
    return nn::apply_activation(ctx, activation_, y, name);
  }

 private:
  Attrs attrs(const Shape& x) const { return nn::window_attrs(x, k_, o_.strides, o_.dilation_rate, same_); }
  layers::Size2 k_;
  int64_t in_channels_ = 0;
  std::string activation_;
  layers::DepthwiseConv2DOptions o_;
  bool same_ = false;
};

}  // namespace

namespace layers {
LayerPtr DepthwiseConv2D(Size2 kernel_size, std::string activation, DepthwiseConv2DOptions options) {
  return nn::make_with_dtype<DepthwiseConv2DLayer>(std::move(options), kernel_size, std::move(activation));
}
}  // namespace layers

}  // namespace tk
