// ZeroPadding2D (channels_last).
#include "nn/layers/context.h"
#include "nn/layers/image_layer_util.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layers.h"

namespace tk {
namespace {
using graph::Attrs;
using graph::Op;

class ZeroPaddingLayer final : public Layer {
 public:
  ZeroPaddingLayer(int64_t t, int64_t b, int64_t l, int64_t r, std::string n) : Layer("zero_padding2d", std::move(n)) {
    a_.pad[0] = t, a_.pad[1] = b, a_.pad[2] = l, a_.pad[3] = r;
    if (t < 0 || b < 0 || l < 0 || r < 0) throw InvalidArgument("ZeroPadding2D '" + name + "': padding must be >= 0");
  }
  std::string class_name() const override { return "ZeroPadding2D"; }
  // Keras nests the padding as ((top, bottom), (left, right)); the .keras writer nests these four.
  LayerConfig get_config() const override {
    return LayerConfig{}
        .set("padding", std::vector<int64_t>{a_.pad[0], a_.pad[1], a_.pad[2], a_.pad[3]})
        .set("data_format", std::string("channels_last"));
  }
  Shape build(const std::vector<Shape>& in) override {
    Shape s = nn::image_input(*this, in);
    s[1] += a_.pad[0] + a_.pad[1];
    s[2] += a_.pad[2] + a_.pad[3];
    return s;
  }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    return ctx.g.add(Op::Pad2D, {in[0]}, a_, name);
  }

 private:
  Attrs a_;
};

}  // namespace

namespace layers {
LayerPtr ZeroPadding2D(Size2 p, std::string name) { return ZeroPadding2D(p.h, p.h, p.w, p.w, std::move(name)); }
LayerPtr ZeroPadding2D(int64_t top, int64_t bottom, int64_t left, int64_t right, std::string name) {
  return std::make_shared<ZeroPaddingLayer>(top, bottom, left, right, std::move(name));
}
}  // namespace layers

}  // namespace tk
