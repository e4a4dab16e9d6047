// Dropout and SpatialDropout2D (whole channels): counter-based masks, active in training programs only.
#include "nn/layers/context.h"
#include "nn/layers/image_layer_util.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layers.h"

namespace tk {
namespace {

class DropoutLayer final : public Layer {
 public:
  DropoutLayer(float rate, uint64_t seed, std::string n) : Layer("dropout", std::move(n)), rate_(rate), seed_(seed) {
    if (!(rate >= 0.0f && rate < 1.0f))
      throw InvalidArgument("Dropout '" + name + "': rate must be in [0, 1), got " + std::to_string(rate));
    if (seed_ == 0) seed_ = nn::next_seed();
  }
  std::string class_name() const override { return "Dropout"; }
  LayerConfig get_config() const override {
    return LayerConfig{}.set_float("rate", rate_).set("seed", static_cast<int64_t>(seed_));
  }
  Shape build(const std::vector<Shape>& in) override { return in[0]; }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    if (!ctx.training || rate_ == 0.0f) return in[0];
    graph::Attrs at;
    at.rate = rate_;
    at.seed = seed_;
    at.shape = ctx.g[in[0]].shape;
    at.dtype = ctx.g[in[0]].dtype;  // the compute dtype
    int mask = ctx.g.add(graph::Op::DropoutMask, {}, at, name + "/mask");
    return ctx.g.add(graph::Op::Mul, {in[0], mask}, {}, name + "/apply");
  }

 private:
  float rate_;
  uint64_t seed_;
};

class SpatialDropoutLayer final : public Layer {
 public:
  SpatialDropoutLayer(float rate, uint64_t seed, std::string n)
      : Layer("spatial_dropout2d", std::move(n)), rate_(rate), seed_(seed) {
    if (!(rate >= 0.0f && rate < 1.0f))
      throw InvalidArgument("SpatialDropout2D '" + name + "': rate must be in [0, 1), got " + std::to_string(rate));
    if (seed_ == 0) seed_ = nn::next_seed();
  }
  std::string class_name() const override { return "SpatialDropout2D"; }
  LayerConfig get_config() const override {
    return LayerConfig{}
        .set_float("rate", rate_)
        .set("seed", static_cast<int64_t>(seed_))
        .set("data_format", std::string("channels_last"));
  }
  Shape build(const std::vector<Shape>& in) override { return nn::image_input(*this, in); }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    if (!ctx.training || rate_ == 0.0f) return in[0];
    graph::Attrs a;
    a.rate = rate_;
    a.seed = seed_;
    a.spatial = true;
    a.shape = ctx.g[in[0]].shape;
    a.dtype = ctx.g[in[0]].dtype;  // the compute dtype
    const int mask = ctx.g.add(graph::Op::DropoutMask, {}, a, name + "/mask");
    return ctx.g.add(graph::Op::Mul, {in[0], mask}, {}, name + "/apply");
  }

 private:
  float rate_;
  uint64_t seed_;
};

}  // namespace

namespace layers {
LayerPtr Dropout(float rate, uint64_t seed, std::string name) {
  return std::make_shared<DropoutLayer>(rate, seed, std::move(name));
}
LayerPtr SpatialDropout2D(float rate, uint64_t seed, std::string name) {
  return std::make_shared<SpatialDropoutLayer>(rate, seed, std::move(name));
}
}  // namespace layers

}  // namespace tk
