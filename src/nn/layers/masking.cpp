// Masking (Keras 3): masks the steps whose features all equal mask_value. Keras' call and compute_mask:
//   keep = any(x != mask_value, axis=-1)   (N, steps)
//   y = x * keep[..., None]                (the masked steps' features become 0)
// and y carries keep as its Keras mask (nn/layers/masks.h) for the following layers.
#include "graph/tensor_ops.h"
#include "nn/layers/context.h"
#include "nn/layers/masks.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layers.h"

namespace tk {
namespace {
namespace ops = graph::ops;

class MaskingLayer final : public Layer, public nn::MaskSupport {
 public:
  MaskingLayer(float mask_value, std::string n) : Layer("masking", std::move(n)), mask_value_(mask_value) {}
  std::string class_name() const override { return "Masking"; }
  LayerConfig get_config() const override { return LayerConfig{}.set_float("mask_value", mask_value_); }
  Shape build(const std::vector<Shape>& in) override {
    if (in[0].rank() < 3)
      throw InvalidArgument("Masking '" + name + "': expects (batch, steps, features...), got " + in[0].to_string());
    return in[0];
  }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    graph::OpBuilder b{ctx.g, nullptr, name};
    const int keep = ops::expand_dims(b, keep_mask(ctx, in[0]), -1);  // (N, steps, 1)
    return ops::binary(b, graph::BinaryFn::multiply, in[0], nn::masks::as(b, keep, ctx.g[in[0]].dtype));
  }
  int compute_mask(nn::CallContext& ctx, const std::vector<int>& in, int) const override {
    return keep_mask(ctx, in[0]);
  }

 private:
  // any(x != mask_value, axis=-1) (N, steps); call and compute_mask each emit these few small ops.
  int keep_mask(nn::CallContext& ctx, int x) const {
    graph::OpBuilder b{ctx.g, nullptr, name + "/mask"};
    int m = nn::masks::not_equal(b, x, mask_value_);  // (N, steps, features...)
    while (ctx.g[m].shape.rank() > 2) m = nn::masks::any_last(b, m);
    return m;  // (N, steps)
  }
  float mask_value_;
};

}  // namespace

namespace layers {
LayerPtr Masking(float mask_value, std::string name) {
  return std::make_shared<MaskingLayer>(mask_value, std::move(name));
}
}  // namespace layers

}  // namespace tk
