// keras.layers.RandomFlip (Keras 3): in training programs each image of an (N, H, W, C) batch is flipped with
// probability 1/2 (one uniform draw per image, flipped when <= 0.5, as Keras); "horizontal" reverses W,
// "vertical" H, "horizontal_and_vertical" both under the same draw (Keras' one `flips`). evaluate and predict pass the
// images on. A non-float input is cast to the compute dtype first, as Keras' image layers do.
#include "graph/tensor_ops.h"
#include "nn/layers/random_values.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layers.h"

namespace tk {
namespace {
namespace ops = graph::ops;

class RandomFlipLayer final : public Layer {
 public:
  RandomFlipLayer(std::string mode, uint64_t seed, std::string n)
      : Layer("random_flip", std::move(n)), mode_(std::move(mode)), seed_(seed) {
    if (mode_ != "horizontal" && mode_ != "vertical" && mode_ != "horizontal_and_vertical")
      throw InvalidArgument("RandomFlip '" + name + "': mode must be \"horizontal\", \"vertical\" or " +
                            "\"horizontal_and_vertical\", got \"" + mode_ + "\"");
    if (seed_ == 0) seed_ = nn::next_seed();
  }
  std::string class_name() const override { return "RandomFlip"; }
  LayerConfig get_config() const override {
    return LayerConfig{}
        .set("seed", static_cast<int64_t>(seed_))
        .set("mode", mode_)
        .set("data_format", "channels_last");
  }
  Shape build(const std::vector<Shape>& in) override { return nn::check_images(*this, in[0]); }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    int x = nn::image_input(ctx, in[0], name);
    if (!ctx.training) return x;
    graph::OpBuilder b{ctx.g, nullptr, name};
    const int u = nn::per_image_uniform(ctx, x, seed_, name + "/draw");
    const int flips = ops::compare(b, graph::BinaryFn::less_equal, u, ops::scalar(b, 0.5f, u));  // (N, 1, 1, 1)
    if (mode_ != "vertical") x = ops::where(b, flips, ops::reverse(b, x, 2), x);
    if (mode_ != "horizontal") x = ops::where(b, flips, ops::reverse(b, x, 1), x);
    return x;
  }

 private:
  std::string mode_;
  uint64_t seed_;
};

}  // namespace

LayerPtr layers::RandomFlip(std::string mode, uint64_t seed, std::string name) {
  return std::make_shared<RandomFlipLayer>(std::move(mode), seed, std::move(name));
}

}  // namespace tk
