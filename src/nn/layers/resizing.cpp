// keras.layers.Resizing(height, width, interpolation, crop_to_aspect_ratio, pad_to_aspect_ratio, fill_value) on
// (N, H, W, C), and the resize every image layer that changes a size shares (nn/layers/resize_images.h): optional
// central crop or padding to the target's aspect ratio (Keras' integer arithmetic), then one Resize op.
#include "graph/tensor_ops.h"
#include "nn/layers/random_values.h"
#include "nn/layers/resize_images.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layers.h"

namespace tk {
namespace nn {

int resize_images(CallContext& ctx, int x, const ResizeImages& r, const std::string& name) {
  namespace ops = graph::ops;
  graph::OpBuilder b{ctx.g, nullptr, name};
  Shape s = ctx.g[x].shape;
  const int64_t height = s[1], width = s[2];
  // keras/src/backend/*/image.py resize: int(float(a * b) / c) truncations, as there
  auto ratio = [](int64_t p, int64_t q, int64_t d) {
    return static_cast<int64_t>(static_cast<double>(p * q) / static_cast<double>(d));
  };
  auto half = [](int64_t d) { return static_cast<int64_t>(static_cast<double>(d) / 2); };
  if (r.crop_to_aspect_ratio) {
    const int64_t crop_h = std::max<int64_t>(std::min(height, ratio(width, r.height, r.width)), 1);
    const int64_t crop_w = std::max<int64_t>(std::min(width, ratio(height, r.width, r.height)), 1);
    x = ops::slice(b, x, 1, half(height - crop_h), crop_h);
    x = ops::slice(b, x, 2, half(width - crop_w), crop_w);
  } else if (r.pad_to_aspect_ratio) {
    const int64_t h0 = half(std::max(height, ratio(width, r.height, r.width)) - height);
    const int64_t w0 = half(std::max(width, ratio(height, r.width, r.height)) - width);
    if (h0 > 0)
      x = ops::pad(b, x, {0, h0, 0, 0}, {0, h0, 0, 0}, r.fill_value);
    else if (w0 > 0)
      x = ops::pad(b, x, {0, 0, w0, 0}, {0, 0, w0, 0}, r.fill_value);
  }
  s = ctx.g[x].shape;
  if (s[1] == r.height && s[2] == r.width) return x;  // the same size: the same pixels (every sample at its center)
  graph::Attrs at;
  at.shape = Shape{s[0], r.height, r.width, s[3]};
  at.bilinear = r.bilinear;
  return ctx.g.add(graph::Op::Resize, {x}, at, name + "/resize");
}

}  // namespace nn

namespace {

class ResizingLayer final : public Layer {
 public:
  ResizingLayer(int64_t height, int64_t width, const layers::ResizingOptions& o) : Layer("resizing", o.name), o_(o) {
    r_.height = height;
    r_.width = width;
    if (height < 1 || width < 1)
      throw InvalidArgument("Resizing '" + name + "': height and width must be >= 1, got " + std::to_string(height) +
                            ", " + std::to_string(width));
    if (o.interpolation != "bilinear" && o.interpolation != "nearest")
      throw InvalidArgument("Resizing '" + name + "': interpolation \"" + o.interpolation +
                            "\" is not one trainkit has (bilinear, nearest; Keras also has bicubic, lanczos3, "
                            "lanczos5, area)");
    if (o.crop_to_aspect_ratio && o.pad_to_aspect_ratio)
      throw InvalidArgument("Resizing '" + name +
                            "': only one of crop_to_aspect_ratio and pad_to_aspect_ratio can be "
                            "true (as Keras)");
    r_.bilinear = o.interpolation == "bilinear";
    r_.crop_to_aspect_ratio = o.crop_to_aspect_ratio;
    r_.pad_to_aspect_ratio = o.pad_to_aspect_ratio;
    r_.fill_value = o.fill_value;
  }
  std::string class_name() const override { return "Resizing"; }
  LayerConfig get_config() const override {
    return LayerConfig{}
        .set("height", r_.height)
        .set("width", r_.width)
        .set("interpolation", o_.interpolation)
        .set("crop_to_aspect_ratio", o_.crop_to_aspect_ratio)
        .set("pad_to_aspect_ratio", o_.pad_to_aspect_ratio)
        .set("fill_mode", std::string("constant"))
        .set_float("fill_value", o_.fill_value)
        .set("antialias", false)
        .set("data_format", std::string("channels_last"));
  }
  Shape build(const std::vector<Shape>& in) override {
    nn::check_images(*this, in[0]);
    return Shape{in[0][0], r_.height, r_.width, in[0][3]};
  }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    return nn::resize_images(ctx, nn::image_input(ctx, in[0], name), r_, name);
  }

 private:
  layers::ResizingOptions o_;
  nn::ResizeImages r_;
};

}  // namespace

LayerPtr layers::Resizing(int64_t height, int64_t width, const ResizingOptions& options) {
  return std::make_shared<ResizingLayer>(height, width, options);
}

}  // namespace tk
