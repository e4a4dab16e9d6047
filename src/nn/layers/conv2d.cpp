// Conv2D (channels_last, Keras 3 semantics): kernel (kh, kw, in / groups, filters), bias (filters,).
#include "nn/layers/context.h"
#include "nn/layers/image_layer_util.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layers.h"

namespace tk {
namespace {
using graph::Attrs;
using graph::Op;

class Conv2DLayer final : public Layer {
 public:
  Conv2DLayer(int64_t filters, layers::Size2 k, std::string activation, layers::Conv2DOptions o)
      : Layer("conv2d", o.name), filters_(filters), k_(k), activation_(std::move(activation)), o_(std::move(o)) {
    nn::check_positive(*this, "filters", filters);
    nn::check_conv_window(*this, k, o_.strides, o_.dilation_rate);
    if (o_.groups <= 0 || filters % o_.groups != 0)
      throw InvalidArgument("Conv2D '" + name + "': groups = " + std::to_string(o_.groups) +
                            " must be positive and divide filters = " + std::to_string(filters) + " (as Keras)");
    same_ = nn::parse_padding(*this, o_.padding);
    nn::check_activation(activation_);
    nn::check_initializer(o_.kernel_initializer);
    nn::check_initializer(o_.bias_initializer);
  }
  std::string class_name() const override { return "Conv2D"; }
  LayerConfig get_config() const override {
    return LayerConfig{}
        .set("filters", filters_)
        .set("kernel_size", std::vector<int64_t>{k_.h, k_.w})
        .set("strides", std::vector<int64_t>{o_.strides.h, o_.strides.w})
        .set("padding", std::string(same_ ? "same" : "valid"))
        .set("data_format", std::string("channels_last"))
        .set("dilation_rate", std::vector<int64_t>{o_.dilation_rate.h, o_.dilation_rate.w})
        .set("groups", o_.groups)
        .set("activation", activation_)
        .set("use_bias", o_.use_bias)
        .set("kernel_initializer", o_.kernel_initializer)
        .set("bias_initializer", o_.bias_initializer);
  }
  Shape build(const std::vector<Shape>& in) override {
    const Shape& x = nn::image_input(*this, in);
    if (nn::first_build(*this, built_, in_channels_, x)) {
      if (x[3] % o_.groups != 0)
        throw InvalidArgument("Conv2D '" + name + "': groups = " + std::to_string(o_.groups) +
                              " must divide the input channels of " + x.to_string() + " (as Keras)");
      add_weight("kernel", Shape{k_.h, k_.w, in_channels_ / o_.groups, filters_}, o_.kernel_initializer);
      if (o_.use_bias) add_weight("bias", Shape{filters_}, o_.bias_initializer);
    }
    return nn::window_output(*this, x, attrs(x), filters_);
  }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    int y = ctx.g.add(Op::Conv2D, {in[0], ctx.variable(weights_[0])}, attrs(ctx.g[in[0]].shape), name + "/conv");
    if (o_.use_bias) y = ctx.g.add(Op::BiasAdd, {y, ctx.variable(weights_[1])}, {}, name + "/bias_add");
    return nn::apply_activation(ctx, activation_, y, name);
  }

 private:
  Attrs attrs(const Shape& x) const {
    Attrs a = nn::window_attrs(x, k_, o_.strides, o_.dilation_rate, same_);
    a.groups = o_.groups;
    return a;
  }
  int64_t filters_, in_channels_ = 0;
  layers::Size2 k_;
  std::string activation_;
  layers::Conv2DOptions o_;
  bool same_ = false;
};

}  // namespace

namespace layers {
LayerPtr Conv2D(int64_t filters, Size2 kernel_size, std::string activation, Conv2DOptions options) {
  return nn::make_with_dtype<Conv2DLayer>(std::move(options), filters, kernel_size, std::move(activation));
}
}  // namespace layers

}  // namespace tk
