// Conv2DTranspose (channels_last, Keras 3): the input gradient of a convolution (Conv2DGradInput) whose input is this
// layer's output. Keras' kernel (kh, kw, filters, in_channels) is that convolution's (KH, KW, C, F) kernel with C =
// filters and F = in_channels, used as stored. The output size and the convolution's padding follow Keras' JAX
// backend (keras/src/backend/common/backend_utils.py): it pads the stride-dilated input by (left, right) per axis;
// the convolution seen from the output pads by extent - 1 - left at the top, and at the bottom by what makes its
// output the input's size again (rows the output padding adds are read by no window: their gradient, this layer's
// output there, is the bias alone).
#include <algorithm>

#include "nn/layers/context.h"
#include "nn/layers/image_layer_util.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layers.h"

namespace tk {
namespace {
using graph::Attrs;
using graph::Op;

struct AxisGeometry {
  int64_t out, pad_before, pad_after;
};

// One spatial axis: input length `in`, kernel k, stride s, dilation d, output_padding op (-1: Keras' None).
AxisGeometry axis_geometry(int64_t in, int64_t k, int64_t s, int64_t d, bool same, int64_t op) {
  const int64_t ext = (k - 1) * d + 1;
  int64_t left = 0, right = 0;
  if (!same) {
    const int64_t pad = op < 0 ? std::max(ext, s) - ext : op;
    left = ext - 1, right = ext - 1 + pad;
  } else {
    const int64_t len = op < 0 ? s + ext - 2 : ext + ext % 2 - 2 + op;
    left = std::min(len / 2 + len % 2, ext - 1), right = len - left;
  }
  AxisGeometry g;
  g.out = (in - 1) * s + left + right - ext + 2;
  g.pad_before = ext - 1 - left;
  g.pad_after = std::max<int64_t>(0, (in - 1) * s + ext - g.out - g.pad_before);
  return g;
}

class Conv2DTransposeLayer final : public Layer {
 public:
  Conv2DTransposeLayer(int64_t filters, layers::Size2 k, std::string activation, layers::Conv2DTransposeOptions o)
      : Layer("conv2d_transpose", o.name),
        filters_(filters),
        k_(k),
        activation_(std::move(activation)),
        o_(std::move(o)) {
    nn::check_positive(*this, "filters", filters);
    nn::check_positive(*this, "kernel_size", k);
    nn::check_positive(*this, "strides", o_.strides);
    nn::check_positive(*this, "dilation_rate", o_.dilation_rate);
    if (o_.output_padding) {
      const layers::Size2 p = *o_.output_padding;
      if (p.h < 0 || p.w < 0 || p.h >= o_.strides.h || p.w >= o_.strides.w)
        throw InvalidArgument("Conv2DTranspose '" + name + "': output_padding (" + std::to_string(p.h) + ", " +
                              std::to_string(p.w) + ") must be >= 0 and smaller than strides (" +
                              std::to_string(o_.strides.h) + ", " + std::to_string(o_.strides.w) + ") (as Keras)");
    }
    same_ = nn::parse_padding(*this, o_.padding);
    nn::check_activation(activation_);
    nn::check_initializer(o_.kernel_initializer);
    nn::check_initializer(o_.bias_initializer);
  }
  std::string class_name() const override { return "Conv2DTranspose"; }
  LayerConfig get_config() const override {
    LayerConfig c;
    c.set("filters", filters_)
        .set("kernel_size", std::vector<int64_t>{k_.h, k_.w})
        .set("strides", std::vector<int64_t>{o_.strides.h, o_.strides.w})
        .set("padding", std::string(same_ ? "same" : "valid"));
    if (o_.output_padding) c.set("output_padding", std::vector<int64_t>{o_.output_padding->h, o_.output_padding->w});
    return c.set("data_format", std::string("channels_last"))
        .set("dilation_rate", std::vector<int64_t>{o_.dilation_rate.h, o_.dilation_rate.w})
        .set("activation", activation_)
        .set("use_bias", o_.use_bias)
        .set("kernel_initializer", o_.kernel_initializer)
        .set("bias_initializer", o_.bias_initializer);
  }
  Shape build(const std::vector<Shape>& in) override {
    const Shape& x = nn::image_input(*this, in);
    if (nn::first_build(*this, built_, in_channels_, x)) {
      add_weight("kernel", Shape{k_.h, k_.w, filters_, in_channels_}, o_.kernel_initializer);
      if (o_.use_bias) add_weight("bias", Shape{filters_}, o_.bias_initializer);
    }
    const Attrs a = attrs(x);
    return Shape{-1, a.shape[1], a.shape[2], filters_};
  }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    int y = ctx.g.add(Op::Conv2DGradInput, {in[0], ctx.variable(weights_[0])}, attrs(ctx.g[in[0]].shape),
                      name + "/conv_transpose");
    if (o_.use_bias) y = ctx.g.add(Op::BiasAdd, {y, ctx.variable(weights_[1])}, {}, name + "/bias_add");
    return nn::apply_activation(ctx, activation_, y, name);
  }

 private:
  // The convolution this layer transposes: its window and its input's shape (attrs.shape, this layer's output).
  Attrs attrs(const Shape& x) const {
    const int64_t oph = o_.output_padding ? o_.output_padding->h : -1;
    const int64_t opw = o_.output_padding ? o_.output_padding->w : -1;
    const AxisGeometry h = axis_geometry(x[1], k_.h, o_.strides.h, o_.dilation_rate.h, same_, oph);
    const AxisGeometry w = axis_geometry(x[2], k_.w, o_.strides.w, o_.dilation_rate.w, same_, opw);
    Attrs a;
    a.kernel[0] = k_.h, a.kernel[1] = k_.w, a.stride[0] = o_.strides.h, a.stride[1] = o_.strides.w;
    a.dilation[0] = o_.dilation_rate.h, a.dilation[1] = o_.dilation_rate.w;
    a.pad[0] = h.pad_before, a.pad[1] = h.pad_after, a.pad[2] = w.pad_before, a.pad[3] = w.pad_after;
    a.shape = Shape{x[0], h.out, w.out, filters_};
    const graph::Window g = graph::Window::of(a.shape.with_batch(1), a);
    if (h.out <= 0 || w.out <= 0 || g.oh != x[1] || g.ow != x[2])
      throw Unsupported("Conv2DTranspose '" + name + "': input " + x.to_string() + " with kernel " +
                        std::to_string(k_.h) + "x" + std::to_string(k_.w) + ", strides and padding \"" +
                        (same_ ? "same" : "valid") +
                        "\" gives an output trainkit cannot express as a convolution's gradient (change "
                        "output_padding or padding)");
    return a;
  }
  int64_t filters_, in_channels_ = 0;
  layers::Size2 k_;
  std::string activation_;
  layers::Conv2DTransposeOptions o_;
  bool same_ = false;
};

}  // namespace

namespace layers {
LayerPtr Conv2DTranspose(int64_t filters, Size2 kernel_size, std::string activation, Conv2DTransposeOptions options) {
  return nn::make_with_dtype<Conv2DTransposeLayer>(std::move(options), filters, kernel_size, std::move(activation));
}
}  // namespace layers

}  // namespace tk
