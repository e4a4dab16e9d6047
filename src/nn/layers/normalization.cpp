// keras.layers.Normalization (Keras 3.15.1, keras/src/layers/preprocessing/normalization.py), a composite layer:
//   y = (x - mean) / maximum(sqrt(variance), 1e-7)            (invert=False)
//   y = mean + x * maximum(sqrt(variance), 1e-7)              (invert=True)
// mean and variance have the kept axes' sizes (`axis`, default the last) and broadcast over the others. They are
// either the layer's non-trainable weights mean, variance and count (Keras' names and order; count is int32 in
// Keras' files and unused in the math) set by adapt() or read from a file — what EfficientNet saves — or constants
// given in the config (Keras then creates no weights).
#include <algorithm>
#include <cmath>

#include "graph/tensor_ops.h"
#include "nn/layers/context.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layers.h"

namespace tk {
namespace {
using graph::BinaryFn;
using graph::UnaryFn;
namespace ops = graph::ops;

constexpr float kEpsilon = 1e-7f;  // keras.backend.epsilon()

class NormalizationLayer final : public Layer, public nn::MaskSupport {
 public:
  explicit NormalizationLayer(layers::NormalizationOptions o) : Layer("normalization", o.name), o_(std::move(o)) {
    if (o_.mean.has_value() != o_.variance.has_value())
      throw InvalidArgument("Normalization '" + name + "': give both mean and variance, or neither (then adapt())");
    if (o_.mean && o_.mean->size() != o_.variance->size())
      throw InvalidArgument("Normalization '" + name + "': mean has " + std::to_string(o_.mean->size()) +
                            " values, variance " + std::to_string(o_.variance->size()));
  }
  std::string class_name() const override { return "Normalization"; }
  LayerConfig get_config() const override {
    LayerConfig c;
    c.set("axis", std::vector<int64_t>(o_.axis.begin(), o_.axis.end())).set("invert", o_.invert);
    if (o_.mean && o_.mean->size() == 1) {  // a scalar, as Keras writes one given as a number
      c.set_float("mean", (*o_.mean)[0]).set_float("variance", (*o_.variance)[0]);
    } else if (o_.mean) {
      c.set_floats("mean", *o_.mean).set_floats("variance", *o_.variance);
    }  // absent: Keras' None
    return c;
  }
  Shape build(const std::vector<Shape>& in) override {
    const Shape& x = in[0];
    keep_.clear();
    for (int a : o_.axis) {
      const int n = a < 0 ? a + x.rank() : a;
      if (n < 0 || n >= x.rank())
        throw InvalidArgument("Normalization '" + name + "': axis " + std::to_string(a) +
                              " is out of range for input " + x.to_string());
      if (n == 0 || x[n] <= 0)
        throw InvalidArgument("Normalization '" + name + "': axis " + std::to_string(a) + " of input " + x.to_string() +
                              " must have a known size (not the batch axis)");
      keep_.push_back(n);
    }
    std::sort(keep_.begin(), keep_.end());
    keep_.erase(std::unique(keep_.begin(), keep_.end()), keep_.end());
    std::vector<int64_t> stats;  // the kept axes' sizes (Keras' mean/variance shape)
    bshape_.assign(static_cast<size_t>(x.rank()), 1);
    for (int a : keep_) stats.push_back(x[a]), bshape_[static_cast<size_t>(a)] = x[a];
    if (o_.mean) {
      // Keras broadcasts a scalar, or aligns the values with the kept axes; trainkit takes a scalar or one value per
      // element of the kept axes.
      const size_t n = static_cast<size_t>(Shape(stats).numel());
      if (o_.mean->size() != 1 && o_.mean->size() != n)
        throw InvalidArgument("Normalization '" + name + "': mean/variance have " + std::to_string(o_.mean->size()) +
                              " values; the kept axes " + Shape(stats).to_string() + " of input " + x.to_string() +
                              " need 1 or " + std::to_string(n));
      return x;
    }
    if (!built_) {
      add_weight("mean", Shape(stats), "zeros", false);
      add_weight("variance", Shape(stats), "ones", false);
      add_weight("count", Shape{}, "zeros", false).file_dtype = DType::i32;
    } else if (weights_[0].value.shape() != Shape(stats)) {
      throw InvalidArgument("Normalization '" + name + "' was built for statistics of shape " +
                            weights_[0].value.shape().to_string() + ", called on " + x.to_string());
    }
    return x;
  }
  int call(nn::CallContext& ctx, const std::vector<int>& in) const override {
    graph::OpBuilder b{ctx.g, nullptr, name};
    const int x = in[0];
    int mean, var;
    if (o_.mean) {
      mean = constant(b, *o_.mean, x);
      var = constant(b, *o_.variance, x);
    } else {
      mean = ops::reshape(b, ctx.variable(weights_[0]), Shape(bshape_));
      var = ops::reshape(b, ctx.variable(weights_[1]), Shape(bshape_));
    }
    const int scale =
        ops::binary(b, BinaryFn::maximum, ops::unary(b, UnaryFn::sqrt, var), ops::scalar(b, kEpsilon, var));
    if (o_.invert) return ops::binary(b, BinaryFn::add, mean, ops::binary(b, BinaryFn::multiply, x, scale));
    return ops::binary(b, BinaryFn::divide, ops::binary(b, BinaryFn::subtract, x, mean), scale);
  }

  // Given statistics as graph constants (Fill nodes, so that any backend holds them; one per value: a few channels'
  // worth, as Normalization(mean=[...]) is used), in (bshape_) and x's dtype.
  int constant(graph::OpBuilder& b, const std::vector<float>& v, int like) const {
    if (v.size() == 1) return ops::scalar(b, v[0], like);
    std::vector<int> parts;
    for (float f : v) parts.push_back(ops::scalar(b, f, like));
    return ops::reshape(b, ops::stack(b, parts, 0), Shape(bshape_));
  }

  // Keras' adapt() of one array: the mean and the biased variance over every axis but the kept ones; count stays
  // as it is (Keras updates it only when adapting a dataset batch by batch).
  void adapt(const Tensor& data) {
    if (o_.mean)
      throw InvalidArgument("Normalization '" + name + "': adapt() needs a layer without a given mean and variance");
    std::vector<int64_t> batch_shape(data.shape().dims().begin(), data.shape().dims().end());
    if (!built_) {
      Shape s(batch_shape);
      s[0] = -1;
      build({s});
      built_ = true;
    }
    if (data.shape().rank() != static_cast<int>(bshape_.size()))
      throw InvalidArgument("Normalization '" + name + "': adapt() data " + data.shape().to_string() +
                            " has another rank than the layer's input");
    for (int a : keep_)
      if (data.shape()[a] != bshape_[static_cast<size_t>(a)])
        throw InvalidArgument("Normalization '" + name + "': adapt() data " + data.shape().to_string() +
                              " does not match the layer's kept axes");
    if (data.dtype() != DType::f32) throw InvalidArgument("Normalization '" + name + "': adapt() takes float32 data");
    const Tensor host = data.on_host() ? data : data.to_device(Device::cpu());
    const int64_t n = Shape(bshape_).numel(), total = host.numel(), per = total / n;
    // Two passes in double: the means, then the mean squared deviations (no cancellation).
    std::vector<double> mean(static_cast<size_t>(n), 0.0), var(static_cast<size_t>(n), 0.0);
    const Shape& s = host.shape();
    auto kept_index = [&](int64_t i) {  // the element's index over the kept axes
      int64_t k = 0, stride = 1;
      for (int a = s.rank() - 1; a >= 0; --a) {
        const int64_t c = i % s[a];
        i /= s[a];
        if (bshape_[static_cast<size_t>(a)] != 1) k += c * stride, stride *= s[a];
      }
      return static_cast<size_t>(k);
    };
    const float* v = host.data<float>();
    for (int64_t i = 0; i < total; ++i) mean[kept_index(i)] += v[i];
    for (double& m : mean) m /= static_cast<double>(per);
    for (int64_t i = 0; i < total; ++i) {
      const double d = v[i] - mean[kept_index(i)];
      var[kept_index(i)] += d * d;
    }
    for (size_t k = 0; k < static_cast<size_t>(n); ++k) {
      weights_[0].value.data<float>()[k] = static_cast<float>(mean[k]);
      weights_[1].value.data<float>()[k] = static_cast<float>(var[k] / static_cast<double>(per));
    }
  }

 private:
  layers::NormalizationOptions o_;
  std::vector<int> keep_;        // the kept axes, sorted
  std::vector<int64_t> bshape_;  // the statistics' broadcast shape: kept axes' sizes, 1 elsewhere
  mutable Tensor mean_, var_;    // given in the config: (bshape_) constants
};

}  // namespace

namespace layers {
LayerPtr Normalization(NormalizationOptions options) {
  return std::make_shared<NormalizationLayer>(std::move(options));
}
void adapt(const LayerPtr& layer, const Tensor& data) {
  auto* n = dynamic_cast<NormalizationLayer*>(layer.get());
  if (!n)
    throw InvalidArgument("adapt: layer '" + layer->name + "' (" + layer->class_name() + ") is not a Normalization");
  n->adapt(data);
}
}  // namespace layers

}  // namespace tk
