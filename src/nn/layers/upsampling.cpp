// UpSampling2D (channels_last): nearest-neighbour repetition of rows and columns.
#include "nn/layers/context.h"
#include "nn/layers/image_layer_util.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layers.h"

namespace tk {
namespace {
using graph::Attrs;
using graph::Op;

class UpSamplingLayer final : public Layer {
 public:
  UpSamplingLayer(layers::Size2 size, std::string n) : Layer("up_sampling2d", std::move(n)) {
    nn::check_positive(*this, "size", size);
    a_.kernel[0] = size.h, a_.kernel[1] = size.w;
  }
  std::string class_name() const override { return "UpSampling2D"; }
  LayerConfig get_config() const override {
    return LayerConfig{}
        .set("size", std::vector<int64_t>{a_.kernel[0], a_.kernel[1]})
        .set("data_format", std::string("channels_last"))
        .set("interpolation", std::string("nearest"));
  }
  Shape build(const std::vector<Shape>& in) override {
    Shape s = nn::image_input(*this, in);
    s[1] *= a_.kernel[0];
    s[2] *= a_.kernel[1];
    return s;
  }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    return ctx.g.add(Op::Upsample2D, {in[0]}, a_, name);
  }

 private:
  Attrs a_;
};

}  // namespace

namespace layers {
LayerPtr UpSampling2D(Size2 size, std::string name) { return std::make_shared<UpSamplingLayer>(size, std::move(name)); }
}  // namespace layers

}  // namespace tk
