// The layers that change a sequence's number of steps (channels_last (N, steps, C)), as composites of the general
// ops: ZeroPadding1D (pad), Cropping1D (slice), UpSampling1D (each step repeated: broadcast over a new axis, then
// merged into the steps). Their gradients are autodiff's.
#include "graph/tensor_ops.h"
#include "nn/layers/context.h"
#include "nn/layers/image_layer_util.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layers.h"

namespace tk {
namespace {
namespace ops = graph::ops;

enum class Kind { pad, crop, upsample };

class Steps1DLayer final : public Layer {
 public:
  Steps1DLayer(Kind kind, int64_t a, int64_t b, std::string n)
      : Layer(kind == Kind::pad    ? "zero_padding1d"
              : kind == Kind::crop ? "cropping1d"
                                   : "up_sampling1d",
              std::move(n)),
        kind_(kind),
        a_(a),
        b_(b) {
    if (kind_ == Kind::upsample ? a_ <= 0 : (a_ < 0 || b_ < 0))
      throw InvalidArgument(class_name() + " '" + name + "': " +
                            (kind_ == Kind::upsample ? "size must be positive, got " + std::to_string(a_)
                                                     : "the amounts must not be negative, got (" + std::to_string(a_) +
                                                           ", " + std::to_string(b_) + ")"));
  }
  std::string class_name() const override {
    return kind_ == Kind::pad ? "ZeroPadding1D" : kind_ == Kind::crop ? "Cropping1D" : "UpSampling1D";
  }
  LayerConfig get_config() const override {
    if (kind_ == Kind::upsample) return LayerConfig{}.set("size", a_);
    LayerConfig c = LayerConfig{}.set(kind_ == Kind::pad ? "padding" : "cropping", std::vector<int64_t>{a_, b_});
    if (kind_ == Kind::pad) c.set("data_format", std::string("channels_last"));
    return c;
  }
  Shape build(const std::vector<Shape>& in) override {
    const Shape& x = nn::sequence_input(*this, in);
    int64_t steps = x[1];
    if (kind_ == Kind::pad) steps += a_ + b_;
    if (kind_ == Kind::upsample) steps *= a_;
    if (kind_ == Kind::crop) {
      steps -= a_ + b_;
      if (steps <= 0)
        throw InvalidArgument("Cropping1D '" + name + "': cropping (" + std::to_string(a_) + ", " + std::to_string(b_) +
                              ") removes every step of input " + x.to_string());
    }
    return Shape{-1, steps, x[2]};
  }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    graph::OpBuilder b{ctx.g, nullptr, name};
    const Shape xs = ctx.g[in[0]].shape;  // (N, T, C)
    switch (kind_) {
      case Kind::pad:
        return ops::pad(b, in[0], {0, a_, 0}, {0, b_, 0});
      case Kind::crop:
        return ops::slice(b, in[0], 1, a_, xs[1] - a_ - b_);
      case Kind::upsample: {
        const int x = ops::reshape(b, in[0], Shape{xs[0], xs[1], 1, xs[2]});    // (N, T, 1, C)
        const int r = ops::broadcast_to(b, x, Shape{xs[0], xs[1], a_, xs[2]});  // (N, T, size, C)
        return ops::reshape(b, r, Shape{xs[0], xs[1] * a_, xs[2]});             // (N, T * size, C)
      }
    }
    return in[0];
  }

 private:
  Kind kind_;
  int64_t a_, b_;
};

}  // namespace

namespace layers {
LayerPtr ZeroPadding1D(int64_t before, int64_t after, std::string name) {
  return std::make_shared<Steps1DLayer>(Kind::pad, before, after, std::move(name));
}
LayerPtr Cropping1D(int64_t begin, int64_t end, std::string name) {
  return std::make_shared<Steps1DLayer>(Kind::crop, begin, end, std::move(name));
}
LayerPtr UpSampling1D(int64_t size, std::string name) {
  return std::make_shared<Steps1DLayer>(Kind::upsample, size, 0, std::move(name));
}
}  // namespace layers

}  // namespace tk
