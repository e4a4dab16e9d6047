// Image layers (channels_last): Conv2D, pooling, BatchNormalization, SpatialDropout2D, ZeroPadding2D,
// UpSampling2D — Keras 3 semantics.
#include "graph/window.h"
#include "nn/layers/context.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layers.h"

namespace tk {
namespace {
using graph::Attrs;
using graph::Op;

const Shape& image_input(const Layer& l, const std::vector<Shape>& in) {
  if (in[0].rank() != 4 || !in[0].sample_shape().fully_known())
    throw InvalidArgument(l.class_name() + " '" + l.name + "': expects (batch, height, width, channels), got " +
                          in[0].to_string() + " (add a Reshape, e.g. Reshape({28, 28, 1}) for grayscale images)");
  return in[0];
}

void check_positive(const Layer& l, const char* what, layers::Size2 s) {
  if (s.h <= 0 || s.w <= 0)
    throw InvalidArgument(l.class_name() + " '" + l.name + "': " + what + " must be positive, got (" +
                          std::to_string(s.h) + ", " + std::to_string(s.w) + ")");
}

bool parse_padding(const Layer& l, const std::string& p) {
  if (p == "same") return true;
  if (p == "valid") return false;
  throw InvalidArgument(l.class_name() + " '" + l.name + "': padding must be \"valid\" or \"same\", got \"" + p + "\"");
}

// Window attributes for an input of shape x (batch None).
Attrs window_attrs(const Shape& x, layers::Size2 k, layers::Size2 s, layers::Size2 d, bool same) {
  Attrs a;
  a.kernel[0] = k.h, a.kernel[1] = k.w, a.stride[0] = s.h, a.stride[1] = s.w, a.dilation[0] = d.h, a.dilation[1] = d.w;
  if (same) {
    std::tie(a.pad[0], a.pad[1]) = graph::same_padding(x[1], k.h, s.h, d.h);
    std::tie(a.pad[2], a.pad[3]) = graph::same_padding(x[2], k.w, s.w, d.w);
  }
  return a;
}

Shape window_output(const Layer& l, const Shape& x, const Attrs& a, int64_t channels) {
  graph::Window w = graph::Window::of(x.with_batch(1), a);
  if (w.oh <= 0 || w.ow <= 0)
    throw InvalidArgument(l.class_name() + " '" + l.name + "': window " + std::to_string(a.kernel[0]) + "x" +
                          std::to_string(a.kernel[1]) + " does not fit input " + x.to_string() +
                          " (use padding=\"same\")");
  return Shape{-1, w.oh, w.ow, channels};
}

// ---------------------------------------------------------------- Conv2D
class Conv2DLayer final : public Layer {
 public:
  Conv2DLayer(int64_t filters, layers::Size2 k, std::string activation, layers::Conv2DOptions o)
      : Layer("conv2d", o.name), filters_(filters), k_(k), activation_(std::move(activation)), o_(std::move(o)) {
    if (filters <= 0)
      throw InvalidArgument("Conv2D '" + name + "': filters must be positive, got " + std::to_string(filters));
    check_positive(*this, "kernel_size", k);
    check_positive(*this, "strides", o_.strides);
    check_positive(*this, "dilation_rate", o_.dilation_rate);
    if ((o_.strides.h > 1 || o_.strides.w > 1) && (o_.dilation_rate.h > 1 || o_.dilation_rate.w > 1))
      throw InvalidArgument("Conv2D '" + name +
                            "': strides > 1 together with dilation_rate > 1 is not supported (as Keras)");
    same_ = parse_padding(*this, o_.padding);
    nn::check_activation(activation_);
    nn::check_initializer(o_.kernel_initializer);
    nn::check_initializer(o_.bias_initializer);
  }
  std::string class_name() const override { return "Conv2D"; }
  Shape build(const std::vector<Shape>& in) override {
    const Shape& x = image_input(*this, in);
    if (!built_) {
      in_channels_ = x[3];
      add_weight("kernel", Shape{k_.h, k_.w, in_channels_, filters_}, o_.kernel_initializer);
      if (o_.use_bias) add_weight("bias", Shape{filters_}, o_.bias_initializer);
    } else if (x[3] != in_channels_) {
      throw InvalidArgument("Conv2D '" + name + "' was built for " + std::to_string(in_channels_) +
                            " channels, called on " + x.to_string());
    }
    return window_output(*this, x, attrs(x), filters_);
  }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    int y = ctx.g.add(Op::Conv2D, {in[0], ctx.variable(weights_[0])}, attrs(ctx.g[in[0]].shape), name + "/conv");
    if (o_.use_bias) y = ctx.g.add(Op::BiasAdd, {y, ctx.variable(weights_[1])}, {}, name + "/bias_add");
    return nn::apply_activation(ctx, activation_, y, name);
  }

 private:
  Attrs attrs(const Shape& x) const { return window_attrs(x, k_, o_.strides, o_.dilation_rate, same_); }
  int64_t filters_, in_channels_ = 0;
  layers::Size2 k_;
  std::string activation_;
  layers::Conv2DOptions o_;
  bool same_ = false;
};

// ---------------------------------------------------------------- pooling
class PoolLayer final : public Layer {
 public:
  PoolLayer(bool max, bool global, layers::Size2 pool, layers::PoolOptions o)
      : Layer(global ? (max ? "global_max_pooling2d" : "global_average_pooling2d")
                     : (max ? "max_pooling2d" : "average_pooling2d"),
              o.name),
        max_(max),
        global_(global),
        pool_(pool),
        strides_(o.strides.value_or(pool)) {
    check_positive(*this, "pool_size", pool_);
    check_positive(*this, "strides", strides_);
    same_ = parse_padding(*this, o.padding);
  }
  std::string class_name() const override {
    return global_ ? (max_ ? "GlobalMaxPooling2D" : "GlobalAveragePooling2D")
                   : (max_ ? "MaxPooling2D" : "AveragePooling2D");
  }
  Shape build(const std::vector<Shape>& in) override {
    const Shape& x = image_input(*this, in);
    if (global_) return Shape{-1, x[3]};
    return window_output(*this, x, attrs(x), x[3]);
  }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    const Shape x = ctx.g[in[0]].shape;
    Attrs a = attrs(x);
    a.split_ties = global_;  // reduce_max's gradient shares ties; MaxPool2D's picks the first
    int y = ctx.g.add(max_ ? Op::MaxPool2D : Op::AvgPool2D, {in[0]}, a, name);
    if (!global_) return y;
    Attrs flat;
    flat.shape = Shape{x[0], x[3]};
    return ctx.g.add(Op::Reshape, {y}, flat, name + "/flatten");
  }

 private:
  Attrs attrs(const Shape& x) const {
    if (global_) return window_attrs(x, {x[1], x[2]}, {x[1], x[2]}, 1, false);
    return window_attrs(x, pool_, strides_, 1, same_);
  }
  bool max_, global_, same_ = false;
  layers::Size2 pool_, strides_;
};

// ---------------------------------------------------------------- BatchNormalization
class BatchNormLayer final : public Layer {
 public:
  explicit BatchNormLayer(layers::BatchNormalizationOptions o)
      : Layer("batch_normalization", o.name), o_(std::move(o)) {
    if (!(o_.momentum >= 0.0f && o_.momentum <= 1.0f))
      throw InvalidArgument("BatchNormalization '" + name + "': momentum must be in [0, 1], got " +
                            std::to_string(o_.momentum));
    if (!(o_.epsilon > 0.0f))
      throw InvalidArgument("BatchNormalization '" + name + "': epsilon must be > 0, got " +
                            std::to_string(o_.epsilon));
  }
  std::string class_name() const override { return "BatchNormalization"; }
  Shape build(const std::vector<Shape>& in) override {
    const Shape& x = in[0];
    if (x.rank() < 2 || x[-1] <= 0)
      throw InvalidArgument("BatchNormalization '" + name + "': needs a known last (channel) axis, got " +
                            x.to_string());
    if (!built_) {
      const Shape c{x[-1]};
      add_weight("gamma", c, "ones");
      add_weight("beta", c, "zeros");
      add_weight("moving_mean", c, "zeros", false);
      add_weight("moving_variance", c, "ones", false);
    } else if (weights_[0].value.dim(0) != x[-1]) {
      throw InvalidArgument("BatchNormalization '" + name + "' was built for " +
                            std::to_string(weights_[0].value.dim(0)) + " channels, called on " + x.to_string());
    }
    return x;
  }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    Attrs a;
    a.momentum = o_.momentum;
    a.epsilon = o_.epsilon;
    const int gamma = ctx.variable(weights_[0]), beta = ctx.variable(weights_[1]);
    const int mean = ctx.variable(weights_[2]), var = ctx.variable(weights_[3]);
    if (!ctx.training || !trainable)  // Keras 3: a frozen BatchNormalization runs in inference mode
      return ctx.g.add(Op::BnInference, {in[0], mean, var, gamma, beta}, a, name);
    const int stats = ctx.g.add(Op::BnStats, {in[0]}, a, name + "/moments");
    ctx.sinks.push_back(ctx.g.add(Op::BnUpdateMoving, {stats, mean, var}, a, name + "/update_moving"));
    return ctx.g.add(Op::BnApply, {in[0], stats, gamma, beta}, a, name);
  }

 private:
  layers::BatchNormalizationOptions o_;
};

// ---------------------------------------------------------------- SpatialDropout2D, ZeroPadding2D, UpSampling2D
class SpatialDropoutLayer final : public Layer {
 public:
  SpatialDropoutLayer(float rate, uint64_t seed, std::string n)
      : Layer("spatial_dropout2d", std::move(n)), rate_(rate), seed_(seed) {
    if (!(rate >= 0.0f && rate < 1.0f))
      throw InvalidArgument("SpatialDropout2D '" + name + "': rate must be in [0, 1), got " + std::to_string(rate));
    if (seed_ == 0) seed_ = nn::next_seed();
  }
  std::string class_name() const override { return "SpatialDropout2D"; }
  Shape build(const std::vector<Shape>& in) override { return image_input(*this, in); }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    if (!ctx.training || rate_ == 0.0f) return in[0];
    Attrs a;
    a.alpha = rate_;
    a.seed = seed_;
    a.spatial = true;
    a.shape = ctx.g[in[0]].shape;
    const int mask = ctx.g.add(Op::DropoutMask, {}, a, name + "/mask");
    return ctx.g.add(Op::Mul, {in[0], mask}, {}, name + "/apply");
  }

 private:
  float rate_;
  uint64_t seed_;
};

class ZeroPaddingLayer final : public Layer {
 public:
  ZeroPaddingLayer(int64_t t, int64_t b, int64_t l, int64_t r, std::string n) : Layer("zero_padding2d", std::move(n)) {
    a_.pad[0] = t, a_.pad[1] = b, a_.pad[2] = l, a_.pad[3] = r;
    if (t < 0 || b < 0 || l < 0 || r < 0) throw InvalidArgument("ZeroPadding2D '" + name + "': padding must be >= 0");
  }
  std::string class_name() const override { return "ZeroPadding2D"; }
  Shape build(const std::vector<Shape>& in) override {
    Shape s = image_input(*this, in);
    s[1] += a_.pad[0] + a_.pad[1];
    s[2] += a_.pad[2] + a_.pad[3];
    return s;
  }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    return ctx.g.add(Op::Pad2D, {in[0]}, a_, name);
  }

 private:
  Attrs a_;
};

class UpSamplingLayer final : public Layer {
 public:
  UpSamplingLayer(layers::Size2 size, std::string n) : Layer("up_sampling2d", std::move(n)) {
    check_positive(*this, "size", size);
    a_.kernel[0] = size.h, a_.kernel[1] = size.w;
  }
  std::string class_name() const override { return "UpSampling2D"; }
  Shape build(const std::vector<Shape>& in) override {
    Shape s = image_input(*this, in);
    s[1] *= a_.kernel[0];
    s[2] *= a_.kernel[1];
    return s;
  }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    return ctx.g.add(Op::Upsample2D, {in[0]}, a_, name);
  }

 private:
  Attrs a_;
};

}  // namespace

namespace layers {
LayerPtr Conv2D(int64_t filters, Size2 kernel_size, std::string activation, Conv2DOptions options) {
  return std::make_shared<Conv2DLayer>(filters, kernel_size, std::move(activation), std::move(options));
}
LayerPtr MaxPooling2D(Size2 pool_size, PoolOptions o) {
  return std::make_shared<PoolLayer>(true, false, pool_size, std::move(o));
}
LayerPtr AveragePooling2D(Size2 pool_size, PoolOptions o) {
  return std::make_shared<PoolLayer>(false, false, pool_size, std::move(o));
}
LayerPtr GlobalAveragePooling2D(std::string name) {
  return std::make_shared<PoolLayer>(false, true, 1, PoolOptions{.name = std::move(name)});
}
LayerPtr GlobalMaxPooling2D(std::string name) {
  return std::make_shared<PoolLayer>(true, true, 1, PoolOptions{.name = std::move(name)});
}
LayerPtr BatchNormalization(BatchNormalizationOptions o) { return std::make_shared<BatchNormLayer>(std::move(o)); }
LayerPtr SpatialDropout2D(float rate, uint64_t seed, std::string name) {
  return std::make_shared<SpatialDropoutLayer>(rate, seed, std::move(name));
}
LayerPtr ZeroPadding2D(Size2 p, std::string name) { return ZeroPadding2D(p.h, p.h, p.w, p.w, std::move(name)); }
LayerPtr ZeroPadding2D(int64_t top, int64_t bottom, int64_t left, int64_t right, std::string name) {
  return std::make_shared<ZeroPaddingLayer>(top, bottom, left, right, std::move(name));
}
LayerPtr UpSampling2D(Size2 size, std::string name) { return std::make_shared<UpSamplingLayer>(size, std::move(name)); }
}  // namespace layers

}  // namespace tk
