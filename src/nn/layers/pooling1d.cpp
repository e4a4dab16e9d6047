// MaxPooling1D, AveragePooling1D (channels_last, Keras' "valid"/"same"; averages exclude the padding) as the 2D pooling
// ops on (N, 1, steps, C), and GlobalMaxPooling1D / GlobalAveragePooling1D as reductions over the steps (keepdims as
// Keras). With a Keras mask (N, steps), GlobalAveragePooling1D averages the unmasked steps (Keras' where(mask, x, 0)
// summed over the steps / the mask's sum) and ends the mask; GlobalMaxPooling1D does not support masking in Keras 3:
// it takes the max over every step and drops the mask, as Keras (which warns).
#include <tuple>

#include "graph/tensor_ops.h"
#include "graph/window.h"
#include "nn/layers/context.h"
#include "nn/layers/image_layer_util.h"
#include "nn/layers/masks.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layers.h"

namespace tk {
namespace {
using graph::Attrs;
using graph::Op;
namespace ops = graph::ops;

class Pool1DLayer final : public Layer {
 public:
  Pool1DLayer(bool max, int64_t pool, layers::Pool1DOptions o)
      : Layer(max ? "max_pooling1d" : "average_pooling1d", o.name),
        max_(max),
        pool_(pool),
        strides_(o.strides.value_or(pool)) {
    if (pool_ <= 0 || strides_ <= 0)
      throw InvalidArgument(class_name() + " '" + name + "': pool_size and strides must be positive, got " +
                            std::to_string(pool_) + " and " + std::to_string(strides_));
    same_ = nn::parse_padding(*this, o.padding);
  }
  std::string class_name() const override { return max_ ? "MaxPooling1D" : "AveragePooling1D"; }
  LayerConfig get_config() const override {
    return LayerConfig{}
        .set("pool_size", std::vector<int64_t>{pool_})
        .set("padding", std::string(same_ ? "same" : "valid"))
        .set("strides", std::vector<int64_t>{strides_})
        .set("data_format", std::string("channels_last"));
  }
  Shape build(const std::vector<Shape>& in) override {
    const Shape& x = nn::sequence_input(*this, in);
    const graph::Window w = graph::Window::of(Shape{1, 1, x[1], x[2]}, attrs(x[1]));
    if (w.ow <= 0)
      throw InvalidArgument(class_name() + " '" + name + "': pool_size " + std::to_string(pool_) +
                            " does not fit input " + x.to_string() + " (use padding=\"same\")");
    return Shape{-1, w.ow, x[2]};
  }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    graph::OpBuilder b{ctx.g, nullptr, name};
    const Shape xs = ctx.g[in[0]].shape;  // (N, T, C)
    const int x = ops::reshape(b, in[0], Shape{xs[0], 1, xs[1], xs[2]});
    const int y = ctx.g.add(max_ ? Op::MaxPool2D : Op::AvgPool2D, {x}, attrs(xs[1]), name + "/pool");  // (N,1,T',C)
    const Shape ys = ctx.g[y].shape;
    return ops::reshape(b, y, Shape{ys[0], ys[2], ys[3]});
  }

 private:
  Attrs attrs(int64_t steps) const {
    Attrs a;
    a.kernel[0] = 1, a.kernel[1] = pool_;
    a.stride[0] = 1, a.stride[1] = strides_;
    if (same_) std::tie(a.pad[2], a.pad[3]) = graph::same_padding(steps, pool_, strides_, 1);
    return a;
  }
  bool max_, same_ = false;
  int64_t pool_, strides_;
};

class GlobalPool1DLayer final : public Layer, public nn::MaskSupport {
 public:
  GlobalPool1DLayer(bool max, bool keepdims, std::string n)
      : Layer(max ? "global_max_pooling1d" : "global_average_pooling1d", std::move(n)),
        max_(max),
        keepdims_(keepdims) {}
  std::string class_name() const override { return max_ ? "GlobalMaxPooling1D" : "GlobalAveragePooling1D"; }
  LayerConfig get_config() const override {
    return LayerConfig{}.set("data_format", std::string("channels_last")).set("keepdims", keepdims_);
  }
  Shape build(const std::vector<Shape>& in) override {
    const int64_t channels = nn::sequence_input(*this, in)[2];
    return keepdims_ ? Shape{-1, 1, channels} : Shape{-1, channels};
  }
  int compute_mask(nn::CallContext&, const std::vector<int>&, int) const override { return -1; }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    graph::OpBuilder b{ctx.g, nullptr, name};
    const int mask = ctx.input_mask(0);  // (N, steps) or -1
    if (max_ || mask < 0)
      return ops::reduce(b, max_ ? graph::ReduceFn::max : graph::ReduceFn::mean, in[0], {1}, keepdims_);
    const int x = nn::masks::select(b, mask, in[0], 0.0f);                              // (N, steps, C)
    const int w = ops::expand_dims(b, nn::masks::as(b, mask, ctx.g[in[0]].dtype), -1);  // (N, steps, 1)
    const int sum = ops::reduce(b, graph::ReduceFn::sum, x, {1}, keepdims_);            // (N, [1,] C)
    const int count = ops::reduce(b, graph::ReduceFn::sum, w, {1}, keepdims_);          // (N, [1,] 1)
    return ops::binary(b, graph::BinaryFn::divide, sum, count);
  }

 private:
  bool max_, keepdims_;
};

}  // namespace

namespace layers {
LayerPtr MaxPooling1D(int64_t pool_size, Pool1DOptions o) {
  return std::make_shared<Pool1DLayer>(true, pool_size, std::move(o));
}
LayerPtr AveragePooling1D(int64_t pool_size, Pool1DOptions o) {
  return std::make_shared<Pool1DLayer>(false, pool_size, std::move(o));
}
LayerPtr GlobalAveragePooling1D(bool keepdims, std::string name) {
  return std::make_shared<GlobalPool1DLayer>(false, keepdims, std::move(name));
}
LayerPtr GlobalMaxPooling1D(bool keepdims, std::string name) {
  return std::make_shared<GlobalPool1DLayer>(true, keepdims, std::move(name));
}
}  // namespace layers

}  // namespace tk
