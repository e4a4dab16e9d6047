// UpSampling2D (channels_last): nearest-neighbour repetition of rows and columns, or Keras' bilinear resize to size
// times the input (nn/layers/resize_images.h).
#include "nn/layers/context.h"
#include "nn/layers/image_layer_util.h"
#include "nn/layers/resize_images.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layers.h"

namespace tk {
namespace {
using graph::Attrs;
using graph::Op;

class UpSamplingLayer final : public Layer {
 public:
  UpSamplingLayer(layers::Size2 size, std::string n, std::string interpolation)
      : Layer("up_sampling2d", std::move(n)), interpolation_(std::move(interpolation)) {
    nn::check_positive(*this, "size", size);
    if (interpolation_ != "nearest" && interpolation_ != "bilinear")
      throw InvalidArgument(
          "UpSampling2D '" + name + "': interpolation \"" + interpolation_ +
          "\" is not one trainkit has (nearest, bilinear; Keras also has bicubic, lanczos3, lanczos5, "
          "area)");
    a_.kernel[0] = size.h, a_.kernel[1] = size.w;
  }
  std::string class_name() const override { return "UpSampling2D"; }
  LayerConfig get_config() const override {
    return LayerConfig{}
        .set("size", std::vector<int64_t>{a_.kernel[0], a_.kernel[1]})
        .set("data_format", std::string("channels_last"))
        .set("interpolation", interpolation_);
  }
  Shape build(const std::vector<Shape>& in) override {
    Shape s = nn::image_input(*this, in);
    s[1] *= a_.kernel[0];
    s[2] *= a_.kernel[1];
    return s;
  }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    if (interpolation_ == "nearest") return ctx.g.add(Op::Upsample2D, {in[0]}, a_, name);
    const Shape& x = ctx.g[in[0]].shape;
    nn::ResizeImages r;
    r.height = x[1] * a_.kernel[0];
    r.width = x[2] * a_.kernel[1];
    return nn::resize_images(ctx, in[0], r, name);
  }

 private:
  Attrs a_;
  std::string interpolation_;
};

}  // namespace

namespace layers {
LayerPtr UpSampling2D(Size2 size, std::string name, std::string interpolation) {
  return std::make_shared<UpSamplingLayer>(size, std::move(name), std::move(interpolation));
}
}  // namespace layers

}  // namespace tk
