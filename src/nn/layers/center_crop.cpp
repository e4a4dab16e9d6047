// keras.layers.CenterCrop(height, width) on (N, H, W, C): the central window, its start (H - height) // 2 as Keras,
// two Slices; applied in training and inference alike (a preprocessing layer, not an augmentation).
#include "graph/tensor_ops.h"
#include "nn/layers/random_values.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layers.h"

namespace tk {
namespace {
namespace ops = graph::ops;

class CenterCropLayer final : public Layer {
 public:
  CenterCropLayer(int64_t height, int64_t width, std::string n)
      : Layer("center_crop", std::move(n)), height_(height), width_(width) {
    if (height_ < 1 || width_ < 1)
      throw InvalidArgument("CenterCrop '" + name + "': height and width must be >= 1, got " + std::to_string(height_) +
                            ", " + std::to_string(width_));
  }
  std::string class_name() const override { return "CenterCrop"; }
  LayerConfig get_config() const override {
    return LayerConfig{}.set("height", height_).set("width", width_).set("data_format", "channels_last");
  }
  Shape build(const std::vector<Shape>& in) override {
    const Shape& x = in[0];
    nn::check_images(*this, x);
    if (x[1] < height_ || x[2] < width_)
      throw InvalidArgument("CenterCrop '" + name + "': the images " + x.to_string() + " are smaller than the crop (" +
                            std::to_string(height_) + ", " + std::to_string(width_) +
                            "); Keras resizes them instead, which trainkit does not (yet): crop to at most the input");
    return Shape{-1, height_, width_, x[3]};
  }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    int x = nn::image_input(ctx, in[0], name);
    const Shape xs = ctx.g[x].shape;
    graph::OpBuilder b{ctx.g, nullptr, name};
    x = ops::slice(b, x, 1, (xs[1] - height_) / 2, height_);  // Keras: the start is (H - height) // 2
    return ops::slice(b, x, 2, (xs[2] - width_) / 2, width_);
  }

 private:
  int64_t height_, width_;
};

}  // namespace

LayerPtr layers::CenterCrop(int64_t height, int64_t width, std::string name) {
  return std::make_shared<CenterCropLayer>(height, width, std::move(name));
}

}  // namespace tk
