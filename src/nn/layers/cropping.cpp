// Cropping2D (channels_last): two slices of the general ops, (N, H, W, C) -> (N, H - top - bottom, W - left - right,
// C).
#include "graph/tensor_ops.h"
#include "nn/layers/context.h"
#include "nn/layers/image_layer_util.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layers.h"

namespace tk {
namespace {

class Cropping2DLayer final : public Layer {
 public:
  Cropping2DLayer(int64_t t, int64_t b, int64_t l, int64_t r, std::string n)
      : Layer("cropping2d", std::move(n)), c_{t, b, l, r} {
    if (t < 0 || b < 0 || l < 0 || r < 0) throw InvalidArgument("Cropping2D '" + name + "': cropping must be >= 0");
  }
  std::string class_name() const override { return "Cropping2D"; }
  // Keras nests the cropping as ((top, bottom), (left, right)); the .keras writer nests these four.
  LayerConfig get_config() const override {
    return LayerConfig{}
        .set("cropping", std::vector<int64_t>{c_[0], c_[1], c_[2], c_[3]})
        .set("data_format", std::string("channels_last"));
  }
  Shape build(const std::vector<Shape>& in) override {
    Shape s = nn::image_input(*this, in);
    if (s[1] - c_[0] - c_[1] <= 0 || s[2] - c_[2] - c_[3] <= 0)
      throw InvalidArgument("Cropping2D '" + name + "': cropping ((" + std::to_string(c_[0]) + ", " +
                            std::to_string(c_[1]) + "), (" + std::to_string(c_[2]) + ", " + std::to_string(c_[3]) +
                            ")) leaves nothing of input " + s.to_string());
    s[1] -= c_[0] + c_[1];
    s[2] -= c_[2] + c_[3];
    return s;
  }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    graph::OpBuilder b{ctx.g, nullptr, name};
    const Shape x = ctx.g[in[0]].shape;  // (N, H, W, C); a copy: adding nodes may move the graph's storage
    int y = in[0];
    if (c_[0] || c_[1]) y = graph::ops::slice(b, y, 1, c_[0], x[1] - c_[0] - c_[1]);
    if (c_[2] || c_[3]) y = graph::ops::slice(b, y, 2, c_[2], x[2] - c_[2] - c_[3]);
    return y;
  }

 private:
  int64_t c_[4];  // top, bottom, left, right
};

}  // namespace

namespace layers {
LayerPtr Cropping2D(Size2 c, std::string name) { return Cropping2D(c.h, c.h, c.w, c.w, std::move(name)); }
LayerPtr Cropping2D(int64_t top, int64_t bottom, int64_t left, int64_t right, std::string name) {
  return std::make_shared<Cropping2DLayer>(top, bottom, left, right, std::move(name));
}
}  // namespace layers

}  // namespace tk
