// SeparableConv2D (channels_last, Keras 3): a depthwise convolution (depthwise.h) then a 1x1 convolution, the bias and
// the activation. Weights in Keras' order: depthwise_kernel (kh, kw, in, depth_multiplier), pointwise_kernel
// (1, 1, in * depth_multiplier, filters), bias (filters,).
#include "nn/layers/context.h"
#include "nn/layers/depthwise.h"
#include "nn/layers/image_layer_util.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layers.h"

namespace tk {
namespace {
using graph::Attrs;
using graph::Op;

class SeparableConv2DLayer final : public Layer {
 public:
  SeparableConv2DLayer(int64_t filters, layers::Size2 k, std::string activation, layers::SeparableConv2DOptions o)
      : Layer("separable_conv2d", o.name),
        filters_(filters),
        k_(k),
        activation_(std::move(activation)),
        o_(std::move(o)) {
    nn::check_positive(*this, "filters", filters);
    nn::check_positive(*this, "depth_multiplier", o_.depth_multiplier);
    nn::check_conv_window(*this, k, o_.strides, o_.dilation_rate);
    same_ = nn::parse_padding(*this, o_.padding);
    nn::check_activation(activation_);
    nn::check_initializer(o_.depthwise_initializer);
    nn::check_initializer(o_.pointwise_initializer);
    nn::check_initializer(o_.bias_initializer);
  }
  std::string class_name() const override { return "SeparableConv2D"; }
  LayerConfig get_config() const override {
    return LayerConfig{}
        .set("filters", filters_)
        .set("kernel_size", std::vector<int64_t>{k_.h, k_.w})
        .set("strides", std::vector<int64_t>{o_.strides.h, o_.strides.w})
        .set("padding", std::string(same_ ? "same" : "valid"))
        .set("data_format", std::string("channels_last"))
        .set("dilation_rate", std::vector<int64_t>{o_.dilation_rate.h, o_.dilation_rate.w})
        .set("depth_multiplier", o_.depth_multiplier)
        .set("activation", activation_)
        .set("use_bias", o_.use_bias)
        .set("depthwise_initializer", o_.depthwise_initializer)
        .set("pointwise_initializer", o_.pointwise_initializer)
        .set("bias_initializer", o_.bias_initializer);
  }
  Shape build(const std::vector<Shape>& in) override {
    const Shape& x = nn::image_input(*this, in);
    if (nn::first_build(*this, built_, in_channels_, x)) {
      add_weight("depthwise_kernel", Shape{k_.h, k_.w, in_channels_, o_.depth_multiplier}, o_.depthwise_initializer);
      add_weight("pointwise_kernel", Shape{1, 1, in_channels_ * o_.depth_multiplier, filters_},
                 o_.pointwise_initializer);
      if (o_.use_bias) add_weight("bias", Shape{filters_}, o_.bias_initializer);
    }
    return nn::window_output(*this, x, attrs(x), filters_);
  }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    const int d = nn::depthwise_conv(ctx, in[0], ctx.variable(weights_[0]), attrs(ctx.g[in[0]].shape), name);
    Attrs pointwise;  // 1x1, stride 1, no padding
    int y = ctx.g.add(Op::Conv2D, {d, ctx.variable(weights_[1])}, pointwise, name + "/pointwise");
    if (o_.use_bias) y = ctx.g.add(Op::BiasAdd, {y, ctx.variable(weights_[2])}, {}, name + "/bias_add");
    return nn::apply_activation(ctx, activation_, y, name);
  }

 private:
  Attrs attrs(const Shape& x) const { return nn::window_attrs(x, k_, o_.strides, o_.dilation_rate, same_); }
  int64_t filters_, in_channels_ = 0;
  layers::Size2 k_;
  std::string activation_;
  layers::SeparableConv2DOptions o_;
  bool same_ = false;
};

}  // namespace

namespace layers {
LayerPtr SeparableConv2D(int64_t filters, Size2 kernel_size, std::string activation, SeparableConv2DOptions options) {
  return nn::make_with_dtype<SeparableConv2DLayer>(std::move(options), filters, kernel_size, std::move(activation));
}
}  // namespace layers

}  // namespace tk
