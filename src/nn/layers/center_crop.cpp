// keras.layers.CenterCrop(height, width) on (N, H, W, C): the central window, its start (H - height) // 2 as Keras,
// two Slices; an input smaller than the crop on either axis is resized as Keras' smart_resize does (its largest central
// window of the crop's aspect ratio, bilinearly resized). Applied in training and inference alike (a preprocessing
// layer, not an augmentation).
#include "graph/tensor_ops.h"
#include "nn/layers/random_values.h"
#include "nn/layers/resize_images.h"
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
    const Shape& x = nn::check_images(*this, in[0]);
    return Shape{-1, height_, width_, x[3]};
  }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    int x = nn::image_input(ctx, in[0], name);
    const Shape xs = ctx.g[x].shape;
    if (xs[1] < height_ || xs[2] < width_) {  // Keras: image_utils.smart_resize
      nn::ResizeImages r;
      r.height = height_;
      r.width = width_;
      r.crop_to_aspect_ratio = true;
      return nn::resize_images(ctx, x, r, name);
    }
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
