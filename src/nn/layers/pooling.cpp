// MaxPooling2D, AveragePooling2D, GlobalMaxPooling2D, GlobalAveragePooling2D (channels_last, TensorFlow's
// padding rules).
#include "nn/layers/context.h"
#include "nn/layers/image_layer_util.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layers.h"

namespace tk {
namespace {
using graph::Attrs;
using graph::Op;

class PoolLayer final : public Layer {
 public:
  PoolLayer(bool max, bool global, layers::Size2 pool, layers::PoolOptions o)
      : Layer(global ? (max ? "global_max_pooling2d" : "global_average_pooling2d")
                     : (max ? "max_pooling2d" : "average_pooling2d"),
              o.name),
        max_(max),
        global_(global),
        pool_(pool),
        strides_(o.strides.value_or(pool)) {
    nn::check_positive(*this, "pool_size", pool_);
    nn::check_positive(*this, "strides", strides_);
    same_ = nn::parse_padding(*this, o.padding);
  }
  std::string class_name() const override {
    return global_ ? (max_ ? "GlobalMaxPooling2D" : "GlobalAveragePooling2D")
                   : (max_ ? "MaxPooling2D" : "AveragePooling2D");
  }
  LayerConfig get_config() const override {
    if (global_) return LayerConfig{}.set("data_format", std::string("channels_last")).set("keepdims", false);
    return LayerConfig{}
        .set("pool_size", std::vector<int64_t>{pool_.h, pool_.w})
        .set("padding", std::string(same_ ? "same" : "valid"))
        .set("strides", std::vector<int64_t>{strides_.h, strides_.w})
        .set("data_format", std::string("channels_last"));
  }
  Shape build(const std::vector<Shape>& in) override {
    const Shape& x = nn::image_input(*this, in);
    if (global_) return Shape{-1, x[3]};
    return nn::window_output(*this, x, attrs(x), x[3]);
  }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    const Shape x = ctx.g[in[0]].shape;
    Attrs a = attrs(x);
    a.split_ties = global_;  // reduce_max's gradient shares ties; MaxPool2D's picks the first
    int y = ctx.g.add(max_ ? Op::MaxPool2D : Op::AvgPool2D, {in[0]}, a, name);
    if (!global_) return y;
    Attrs flat;
    flat.shape = Shape{x[0], x[3]};
    return ctx.g.add(Op::Reshape, {y}, flat, name + "/flatten");
  }

 private:
  Attrs attrs(const Shape& x) const {
    if (global_) return nn::window_attrs(x, {x[1], x[2]}, {x[1], x[2]}, 1, false);
    return nn::window_attrs(x, pool_, strides_, 1, same_);
  }
  bool max_, global_, same_ = false;
  layers::Size2 pool_, strides_;
};

}  // namespace

namespace layers {
LayerPtr MaxPooling2D(Size2 pool_size, PoolOptions o) {
  return std::make_shared<PoolLayer>(true, false, pool_size, std::move(o));
}
LayerPtr AveragePooling2D(Size2 pool_size, PoolOptions o) {
  return std::make_shared<PoolLayer>(false, false, pool_size, std::move(o));
}
LayerPtr GlobalAveragePooling2D(std::string name) {
  return std::make_shared<PoolLayer>(false, true, 1, PoolOptions{.name = std::move(name)});
}
LayerPtr GlobalMaxPooling2D(std::string name) {
  return std::make_shared<PoolLayer>(true, true, 1, PoolOptions{.name = std::move(name)});
}
}  // namespace layers

}  // namespace tk
