// Rescaling (Keras' preprocessing layer): y = x * scale + offset. When it reads a model input directly it
// is folded into batch staging (nn/compiler/programs.cpp: fuse_input_scaling), so uint8 images stay uint8
// in memory and are scaled while each batch is copied in.
#include <cmath>

#include "nn/layers/context.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layers.h"

namespace tk {
namespace {

class RescalingLayer final : public Layer, public nn::MaskSupport {
 public:
  RescalingLayer(float scale, float offset, std::string n)
      : Layer("rescaling", std::move(n)), scale_(scale), offset_(offset) {
    if (!std::isfinite(scale_) || !std::isfinite(offset_))
      throw InvalidArgument("Rescaling '" + name + "': scale and offset must be finite, got scale " +
                            std::to_string(scale_) + ", offset " + std::to_string(offset_));
  }
  std::string class_name() const override { return "Rescaling"; }
  LayerConfig get_config() const override {
    return LayerConfig{}.set_float("scale", scale_).set_float("offset", offset_);
  }
  Shape build(const std::vector<Shape>& in) override { return in[0]; }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    graph::Attrs at;
    at.scale = scale_;
    at.offset = offset_;
    return ctx.g.add(graph::Op::Scale, {in[0]}, at, name + "/rescale");
  }

 private:
  float scale_, offset_;
};

}  // namespace

LayerPtr layers::Rescaling(float scale, float offset, std::string name) {
  return std::make_shared<RescalingLayer>(scale, offset, std::move(name));
}

}  // namespace tk
