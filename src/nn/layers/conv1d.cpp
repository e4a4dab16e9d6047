// Conv1D (channels_last, Keras 3 semantics), a composite over the Conv2D op: (N, steps, C) is (N, 1, steps, C) and the
// kernel (kernel_size, C / groups, filters) is (1, kernel_size, C / groups, filters), so the 2D kernels (oneDNN,
// cuDNN) and their gradients run it. padding: "valid", "same" (Keras' split: the odd step after), "causal" (all
// (kernel_size - 1) * dilation_rate steps before, so step t sees only steps <= t). groups > 1: the channels and the
// filters split into groups, one convolution per group, concatenated (Keras' feature_group_count).
#include <tuple>

#include "graph/tensor_ops.h"
#include "graph/window.h"
#include "nn/layers/context.h"
#include "nn/layers/image_layer_util.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layers.h"

namespace tk {
namespace {
using graph::Attrs;
using graph::Op;
namespace ops = graph::ops;

class Conv1DLayer final : public Layer {
 public:
  Conv1DLayer(int64_t filters, int64_t k, std::string activation, layers::Conv1DOptions o)
      : Layer("conv1d", o.name), filters_(filters), k_(k), activation_(std::move(activation)), o_(std::move(o)) {
    nn::check_positive(*this, "filters", filters_);
    nn::check_positive(*this, "kernel_size", k_);
    nn::check_positive(*this, "strides", o_.strides);
    nn::check_positive(*this, "dilation_rate", o_.dilation_rate);
    nn::check_positive(*this, "groups", o_.groups);
    if (o_.strides > 1 && o_.dilation_rate > 1)
      throw InvalidArgument("Conv1D '" + name +
                            "': strides > 1 together with dilation_rate > 1 is not supported (as "
                            "Keras)");
    if (filters_ % o_.groups != 0)
      throw InvalidArgument("Conv1D '" + name + "': filters (" + std::to_string(filters_) +
                            ") must be a multiple of groups (" + std::to_string(o_.groups) + ")");
    if (o_.padding != "valid" && o_.padding != "same" && o_.padding != "causal")
      throw InvalidArgument("Conv1D '" + name + "': padding must be \"valid\", \"same\" or \"causal\", got \"" +
                            o_.padding + "\"");
    nn::check_activation(activation_);
    nn::check_initializer(o_.kernel_initializer);
    nn::check_initializer(o_.bias_initializer);
  }
  std::string class_name() const override { return "Conv1D"; }
  LayerConfig get_config() const override {
    return LayerConfig{}
        .set("filters", filters_)
        .set("kernel_size", std::vector<int64_t>{k_})
        .set("strides", std::vector<int64_t>{o_.strides})
        .set("padding", o_.padding)
        .set("data_format", std::string("channels_last"))
        .set("dilation_rate", std::vector<int64_t>{o_.dilation_rate})
        .set("groups", o_.groups)
        .set("activation", activation_)
        .set("use_bias", o_.use_bias)
        .set("kernel_initializer", o_.kernel_initializer)
        .set("bias_initializer", o_.bias_initializer);
  }
  Shape build(const std::vector<Shape>& in) override {
    const Shape& x = in[0];
    if (x.rank() != 3 || !x.sample_shape().fully_known())
      throw InvalidArgument("Conv1D '" + name + "': expects (batch, steps, channels), got " + x.to_string() +
                            " (add a Reshape, e.g. Reshape({steps, 1}) for one feature per step)");
    if (x[2] % o_.groups != 0)
      throw InvalidArgument("Conv1D '" + name + "': input channels (" + std::to_string(x[2]) +
                            ") must be a multiple of groups (" + std::to_string(o_.groups) + ")");
    if (nn::first_build(*this, built_, in_channels_, x)) {
      add_weight("kernel", Shape{k_, in_channels_ / o_.groups, filters_}, o_.kernel_initializer);
      if (o_.use_bias) add_weight("bias", Shape{filters_}, o_.bias_initializer);
    }
    const graph::Window w = graph::Window::of(Shape{1, 1, x[1], x[2]}, attrs(x[1]));
    if (w.ow <= 0)
      throw InvalidArgument("Conv1D '" + name + "': kernel_size " + std::to_string(k_) + " (dilation " +
                            std::to_string(o_.dilation_rate) + ") does not fit input " + x.to_string() +
                            " (use padding=\"same\" or \"causal\")");
    return Shape{-1, w.ow, filters_};
  }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    graph::OpBuilder b{ctx.g, nullptr, name};
    const Shape xs = ctx.g[in[0]].shape;                                  // (N, T, C)
    const int x = ops::reshape(b, in[0], Shape{xs[0], 1, xs[1], xs[2]});  // (N, 1, T, C)
    const int64_t cg = in_channels_ / o_.groups, fg = filters_ / o_.groups;
    const int kernel = ops::reshape(b, ctx.variable(weights_[0]), Shape{1, k_, cg, filters_});  // (1, K, C/g, F)
    const Attrs a = attrs(xs[1]);
    std::vector<int> parts;
    for (int64_t g = 0; g < o_.groups; ++g) {
      const int xg = o_.groups == 1 ? x : ops::slice(b, x, 3, g * cg, cg);
      const int kg = o_.groups == 1 ? kernel : ops::slice(b, kernel, 3, g * fg, fg);
      parts.push_back(ctx.g.add(Op::Conv2D, {xg, kg}, a, name + "/conv"));  // (N, 1, T', F/g)
    }
    int y = parts.size() == 1 ? parts[0] : ops::concat(b, parts, 3);
    const Shape ys = ctx.g[y].shape;
    y = ops::reshape(b, y, Shape{ys[0], ys[2], ys[3]});  // (N, T', F)
    if (o_.use_bias) y = ctx.g.add(Op::BiasAdd, {y, ctx.variable(weights_[1])}, {}, name + "/bias_add");
    return nn::apply_activation(ctx, activation_, y, name);
  }

 private:
  Attrs attrs(int64_t steps) const {
    Attrs a;
    a.kernel[0] = 1, a.kernel[1] = k_;
    a.stride[0] = 1, a.stride[1] = o_.strides;
    a.dilation[0] = 1, a.dilation[1] = o_.dilation_rate;
    if (o_.padding == "same")
      std::tie(a.pad[2], a.pad[3]) = graph::same_padding(steps, k_, o_.strides, o_.dilation_rate);
    if (o_.padding == "causal") a.pad[2] = (k_ - 1) * o_.dilation_rate;
    return a;
  }
  int64_t filters_, k_, in_channels_ = 0;
  std::string activation_;
  layers::Conv1DOptions o_;
};

}  // namespace

namespace layers {
LayerPtr Conv1D(int64_t filters, int64_t kernel_size, std::string activation, Conv1DOptions options) {
  return nn::make_with_dtype<Conv1DLayer>(std::move(options), filters, kernel_size, std::move(activation));
}
}  // namespace layers

}  // namespace tk
