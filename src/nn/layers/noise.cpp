// GaussianNoise and GaussianDropout (Keras 3's keras.layers.*): per-element normal noise, added or multiplied, in
// training programs only (evaluate and predict pass the input on).
#include <cmath>

#include "graph/tensor_ops.h"
#include "nn/layers/random_values.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layers.h"

namespace tk {
namespace {
namespace ops = graph::ops;

class NoiseLayer final : public Layer, public nn::MaskSupport {
 public:
  // multiply: GaussianDropout (x * N(1, rate / (1 - rate))); else GaussianNoise (x + N(0, stddev^2)).
  NoiseLayer(bool multiply, float value, uint64_t seed, std::string n)
      : Layer(multiply ? "gaussian_dropout" : "gaussian_noise", std::move(n)),
        multiply_(multiply),
        value_(value),
        seed_(seed) {
    const bool ok = multiply ? value >= 0.0f && value < 1.0f : value >= 0.0f && value <= 1.0f;
    if (!ok)
      throw InvalidArgument(class_name() + " '" + name + "': " + (multiply ? "rate" : "stddev") + " must be in " +
                            (multiply ? "[0, 1)" : "[0, 1]") + " (as Keras), got " + std::to_string(value));
    if (seed_ == 0) seed_ = nn::next_seed();
  }
  std::string class_name() const override { return multiply_ ? "GaussianDropout" : "GaussianNoise"; }
  LayerConfig get_config() const override {
    return LayerConfig{}.set_float(multiply_ ? "rate" : "stddev", value_).set("seed", static_cast<int64_t>(seed_));
  }
  Shape build(const std::vector<Shape>& in) override { return in[0]; }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    if (!ctx.training || value_ == 0.0f) return in[0];
    const Shape xs = ctx.g[in[0]].shape;
    const int z = nn::random_values(ctx, graph::Op::RandomNormal, xs, seed_, name + "/normal");  // float32
    graph::OpBuilder b{ctx.g, nullptr, name};
    const float stddev = multiply_ ? std::sqrt(value_ / (1.0f - value_)) : value_;
    int noise = ops::mul_scalar(b, z, stddev);
    if (multiply_) noise = ops::add_scalar(b, noise, 1.0f);  // N(1, stddev^2)
    noise = ctx.cast(noise, ctx.g[in[0]].dtype, name + "/cast");
    return ops::binary(b, multiply_ ? graph::BinaryFn::multiply : graph::BinaryFn::add, in[0], noise);
  }

 private:
  bool multiply_;
  float value_;
  uint64_t seed_;
};

}  // namespace

LayerPtr layers::GaussianNoise(float stddev, uint64_t seed, std::string name) {
  return std::make_shared<NoiseLayer>(false, stddev, seed, std::move(name));
}
LayerPtr layers::GaussianDropout(float rate, uint64_t seed, std::string name) {
  return std::make_shared<NoiseLayer>(true, rate, seed, std::move(name));
}

}  // namespace tk
