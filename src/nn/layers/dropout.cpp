// Dropout (with Keras' noise_shape), SpatialDropout1D and SpatialDropout2D (whole channels): counter-based masks,
// active in training programs only.
#include "graph/tensor_ops.h"
#include "nn/layers/context.h"
#include "nn/layers/image_layer_util.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layers.h"

namespace tk {
namespace {

class DropoutLayer final : public Layer, public nn::MaskSupport {
 public:
  DropoutLayer(float rate, std::vector<int64_t> noise_shape, uint64_t seed, std::string n)
      : Layer("dropout", std::move(n)), rate_(rate), noise_shape_(std::move(noise_shape)), seed_(seed) {
    nn::check_rate(*this, "rate", rate);
    for (int64_t d : noise_shape_)
      if (d != -1 && d < 1)
        throw InvalidArgument("Dropout '" + name + "': noise_shape entries are None (-1) or positive, got " +
                              Shape(noise_shape_).to_string());
    if (seed_ == 0) seed_ = nn::next_seed();
  }
  std::string class_name() const override { return "Dropout"; }
  LayerConfig get_config() const override {
    LayerConfig c = LayerConfig{}.set_float("rate", rate_).set("seed", static_cast<int64_t>(seed_));
    if (!noise_shape_.empty()) c.set("noise_shape", noise_shape_);  // -1 is written as Keras' None
    return c;
  }
  // Keras broadcasts the mask of noise_shape over the input: each entry is None, 1, or the input's dimension. The
  // batch entry must be None or 1: a fixed batch count would not survive batches of another size (the last one).
  Shape build(const std::vector<Shape>& in) override {
    if (noise_shape_.empty()) return in[0];
    const Shape& x = in[0];
    bool ok = static_cast<int>(noise_shape_.size()) == x.rank();
    for (int i = 0; ok && i < x.rank(); ++i) {
      const int64_t d = noise_shape_[static_cast<size_t>(i)];
      ok = d == -1 || d == 1 || (i > 0 && d == x[i]);
    }
    if (!ok)
      throw InvalidArgument("Dropout '" + name + "': noise_shape " + Shape(noise_shape_).to_string() +
                            " does not broadcast to the input " + x.to_string() +
                            " (one entry per axis: None, 1, or the input's dimension; None or 1 for the batch)");
    return x;
  }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    if (!ctx.training || rate_ == 0.0f) return in[0];
    const Shape xs = ctx.g[in[0]].shape;
    graph::Attrs at;
    at.rate = rate_;
    at.seed = seed_;
    at.shape = xs;
    for (size_t i = 0; i < noise_shape_.size(); ++i)
      if (noise_shape_[i] != -1) at.shape[static_cast<int>(i)] = noise_shape_[i];
    at.dtype = ctx.g[in[0]].dtype;  // the compute dtype
    // A mask of noise_shape (N, 1, 1, 1) keys its draws by the global sample (DropoutLayout's rows), so replicas
    // splitting the batch draw what one device would.
    const bool full = at.shape == xs;
    const int mask = ctx.g.add(graph::Op::DropoutMask, {}, at, name + "/mask");
    if (full) return ctx.g.add(graph::Op::Mul, {in[0], mask}, {}, name + "/apply");
    graph::OpBuilder b{ctx.g, nullptr, name + "/apply"};
    return graph::ops::binary(b, graph::BinaryFn::multiply, in[0], mask);
  }

 private:
  float rate_;
  std::vector<int64_t> noise_shape_;  // empty: the input's shape
  uint64_t seed_;
};

// one_d: SpatialDropout1D on (N, steps, C), whose mask is the 2D one of (N, 1, steps, C) (one draw per sample and
// channel) reshaped back.
class SpatialDropoutLayer final : public Layer, public nn::MaskSupport {
 public:
  SpatialDropoutLayer(float rate, uint64_t seed, std::string n, bool one_d)
      : Layer(one_d ? "spatial_dropout1d" : "spatial_dropout2d", std::move(n)),
        rate_(rate),
        seed_(seed),
        one_d_(one_d) {
    nn::check_rate(*this, "rate", rate);
    if (seed_ == 0) seed_ = nn::next_seed();
  }
  std::string class_name() const override { return one_d_ ? "SpatialDropout1D" : "SpatialDropout2D"; }
  LayerConfig get_config() const override {
    LayerConfig c = LayerConfig{}.set_float("rate", rate_).set("seed", static_cast<int64_t>(seed_));
    if (!one_d_) c.set("data_format", std::string("channels_last"));
    return c;
  }
  Shape build(const std::vector<Shape>& in) override {
    return one_d_ ? nn::sequence_input(*this, in) : nn::image_input(*this, in);
  }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    if (!ctx.training || rate_ == 0.0f) return in[0];
    const Shape xs = ctx.g[in[0]].shape;
    graph::Attrs a;
    a.rate = rate_;
    a.seed = seed_;
    a.spatial = true;
    a.shape = one_d_ ? Shape{xs[0], 1, xs[1], xs[2]} : xs;
    a.dtype = ctx.g[in[0]].dtype;  // the compute dtype
    int mask = ctx.g.add(graph::Op::DropoutMask, {}, a, name + "/mask");
    if (one_d_) {
      graph::Attrs r;
      r.shape = xs;
      mask = ctx.g.add(graph::Op::Reshape, {mask}, r, name + "/mask_steps");
    }
    return ctx.g.add(graph::Op::Mul, {in[0], mask}, {}, name + "/apply");
  }

 private:
  float rate_;
  uint64_t seed_;
  bool one_d_;
};

}  // namespace

namespace layers {
LayerPtr Dropout(float rate, uint64_t seed, std::string name) {
  return std::make_shared<DropoutLayer>(rate, std::vector<int64_t>{}, seed, std::move(name));
}
LayerPtr Dropout(float rate, std::vector<int64_t> noise_shape, uint64_t seed, std::string name) {
  return std::make_shared<DropoutLayer>(rate, std::move(noise_shape), seed, std::move(name));
}
LayerPtr SpatialDropout2D(float rate, uint64_t seed, std::string name) {
  return std::make_shared<SpatialDropoutLayer>(rate, seed, std::move(name), false);
}
LayerPtr SpatialDropout1D(float rate, uint64_t seed, std::string name) {
  return std::make_shared<SpatialDropoutLayer>(rate, seed, std::move(name), true);
}
}  // namespace layers

}  // namespace tk
