// keras.layers.RandomContrast (Keras 3): in training programs each image of an (N, H, W, C) batch gets one factor f
// uniform in [1 - lower, 1 + upper] and becomes (x - mean) * f + mean, mean per image and channel over H and W,
// clipped to value_range. Keras 3 turns a single number `factor` into (lower, upper) = (max(-factor, 0), factor): a
// RandomContrast(0.2) draws f in [1, 1.2] (it only raises contrast); trainkit keeps Keras' reading, so a file trains
// the same. evaluate and predict pass the images on (cast to the compute dtype, as Keras' image layers).
#include <array>

#include "graph/tensor_ops.h"
#include "nn/layers/random_values.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layers.h"

namespace tk {
namespace {
namespace ops = graph::ops;

class RandomContrastLayer final : public Layer {
 public:
  RandomContrastLayer(float lower, float upper, layers::RandomContrastOptions o)
      : Layer("random_contrast", std::move(o.name)),
        lower_(lower),
        upper_(upper),
        range_(o.value_range),
        seed_(o.seed) {
    if (!(lower_ >= 0.0f && lower_ <= 1.0f && upper_ >= 0.0f && upper_ <= 1.0f))
      throw InvalidArgument("RandomContrast '" + name + "': factor must be in [0, 1] (as Keras), got (" +
                            std::to_string(lower_) + ", " + std::to_string(upper_) + ")");
    if (!(range_[0] < range_[1]))
      throw InvalidArgument("RandomContrast '" + name + "': value_range must be (low, high) with low < high, got (" +
                            std::to_string(range_[0]) + ", " + std::to_string(range_[1]) + ")");
    if (seed_ == 0) seed_ = nn::next_seed();
  }
  std::string class_name() const override { return "RandomContrast"; }
  LayerConfig get_config() const override {
    return LayerConfig{}
        .set_floats("factor", {lower_, upper_})
        .set_floats("value_range", {range_[0], range_[1]})
        .set("seed", static_cast<int64_t>(seed_))
        .set("data_format", "channels_last");
  }
  Shape build(const std::vector<Shape>& in) override { return nn::check_images(*this, in[0]); }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    const int x = nn::image_input(ctx, in[0], name);
    if (!ctx.training) return x;
    graph::OpBuilder b{ctx.g, nullptr, name};
    const int u = nn::per_image_uniform(ctx, x, seed_, name + "/draw");
    int f = ops::add_scalar(b, ops::mul_scalar(b, u, lower_ + upper_), 1.0f - lower_);  // (N, 1, 1, 1)
    f = ctx.cast(f, ctx.g[x].dtype, name + "/cast_factor");
    const int mean = ops::reduce(b, graph::ReduceFn::mean, x, {1, 2}, true);  // (N, 1, 1, C)
    const int y = ops::binary(
        b, graph::BinaryFn::add,
        ops::binary(b, graph::BinaryFn::multiply, ops::binary(b, graph::BinaryFn::subtract, x, mean), f), mean);
    return ops::unary(b, graph::UnaryFn::clip, y, range_[0], range_[1]);
  }

 private:
  float lower_, upper_;
  std::array<float, 2> range_;
  uint64_t seed_;
};

}  // namespace

LayerPtr layers::RandomContrast(float factor, RandomContrastOptions options) {
  if (!(factor >= 0.0f && factor <= 1.0f))
    throw InvalidArgument("RandomContrast: factor must be in [0, 1] (as Keras), got " + std::to_string(factor));
  return std::make_shared<RandomContrastLayer>(0.0f, factor, std::move(options));  // Keras: (max(-f, 0), f)
}
LayerPtr layers::RandomContrast(float lower, float upper, RandomContrastOptions options) {
  return std::make_shared<RandomContrastLayer>(lower, upper, std::move(options));
}

}  // namespace tk
