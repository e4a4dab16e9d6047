// keras.layers.Normalization (Keras 3.15.1, keras/src/layers/preprocessing/normalization.py), a composite layer:
//   y = (x - mean) / maximum(sqrt(variance), 1e-7)            (invert=False)
//   y = mean + x * maximum(sqrt(variance), 1e-7)              (invert=True)
// mean and variance have the kept axes' sizes (`axis`, default the last) and broadcast over the others. They are
// either the layer's non-trainable weights mean, variance and count (Keras' names and order; count is int32 in
// Keras' files and unused in the math) set by adapt() or read from a file — what EfficientNet saves — or constants
// given in the config (Keras then creates no weights).
#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "graph/tensor_ops.h"
#include "nn/layers/context.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/adapt.h"
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

  // Keras' adapt(): the mean and the biased variance over every axis but the kept ones, of one array or of a dataset's
  // batches; count stays as it is (Keras 3 never updates it). Keras takes an array's moments at once and merges a
  // dataset's batch by batch; here both are merged chunk by chunk in double (Chan's pairwise update, exact where
  // Keras' lack-of-fit update is), so an array and the same rows in batches give the same statistics.
  void adapt(const Tensor& data) {
    Moments m = begin_adapt(data.shape());
    add(m, data);
    finish(m);
  }
  void adapt(const data::Dataset& batches) {
    data::Iterator it = batches.iterator();
    data::Element e;
    std::optional<Moments> m;
    while (it.next(e)) {
      if (e.empty()) throw InvalidArgument("Normalization '" + name + "': adapt() got an element without components");
      if (!m) m = begin_adapt(e[0].shape());
      add(*m, e[0]);  // Keras adapts to the first component of (x, y) elements
    }
    if (!m)
      throw InvalidArgument("Normalization '" + name + "': adapt() got an empty dataset (it needs at least one batch)");
    finish(*m);
  }

 private:
  struct Moments {
    std::vector<double> mean, m2;  // (kept elements): running mean and sum of squared deviations
    double count = 0;              // values per kept element so far
  };

  Moments begin_adapt(const Shape& first) {
    if (o_.mean)
      throw InvalidArgument("Normalization '" + name + "': adapt() needs a layer without a given mean and variance");
    if (first.rank() < 1)
      throw InvalidArgument("Normalization '" + name + "': adapt() data " + first.to_string() +
                            " must have a batch axis");
    if (!built_) {
      Shape s = first;
      s[0] = -1;
      build({s});
      built_ = true;
    }
    const size_t n = static_cast<size_t>(Shape(kept_sizes()).numel());
    return Moments{std::vector<double>(n, 0.0), std::vector<double>(n, 0.0), 0};
  }

  std::vector<int64_t> kept_sizes() const {
    std::vector<int64_t> stats;
    for (int a : keep_) stats.push_back(bshape_[static_cast<size_t>(a)]);
    return stats;
  }

  // Merges one batch (batch first, the layer's rank, any dtype) into m, in chunks of rows converted to float32.
  void add(Moments& m, const Tensor& batch) {
    const Shape& s = batch.shape();
    if (s.rank() != static_cast<int>(bshape_.size()))
      throw InvalidArgument("Normalization '" + name + "': adapt() data " + s.to_string() +
                            " has another rank than the layer's input (" + std::to_string(bshape_.size()) + ")");
    for (int a : keep_)
      if (s[a] != bshape_[static_cast<size_t>(a)])
        throw InvalidArgument("Normalization '" + name + "': adapt() data " + s.to_string() +
                              " does not match the layer's kept axes (sizes " + Shape(kept_sizes()).to_string() + ")");
    if (s.numel() == 0) return;
    const Tensor host = batch.on_host() ? batch : batch.to_device(Device::cpu());
    const int64_t row = s.sample_shape().numel();
    const int64_t rows_per_chunk = std::max<int64_t>(1, (int64_t{1} << 20) / std::max<int64_t>(row, 1));
    for (int64_t r0 = 0; r0 < s[0]; r0 += rows_per_chunk) {
      const int64_t r1 = std::min(s[0], r0 + rows_per_chunk);
      Tensor converted;  // (r1 - r0, ...) float32, when the data is another dtype
      const float* v = nullptr;
      if (host.dtype() == DType::f32) {
        v = host.data<float>() + r0 * row;
      } else {
        converted = host.slice_rows(r0, r1).to(DType::f32);
        v = converted.data<float>();
      }
      merge(m, v, s.with_batch(r1 - r0));
    }
  }

  // Two passes over one chunk in double (its means, then its squared deviations), then Chan's merge into m.
  void merge(Moments& m, const float* v, const Shape& s) const {
    const size_t n = m.mean.size();
    const int64_t total = s.numel();
    const double per = static_cast<double>(total) / static_cast<double>(n);  // values per kept element
    std::vector<size_t> kept(static_cast<size_t>(total));                    // each value's kept element
    for (int64_t i = 0; i < total; ++i) {
      int64_t rest = i, k = 0, stride = 1;
      for (int a = s.rank() - 1; a >= 0; --a) {
        const int64_t c = rest % s[a];
        rest /= s[a];
        if (bshape_[static_cast<size_t>(a)] != 1) k += c * stride, stride *= s[a];
      }
      kept[static_cast<size_t>(i)] = static_cast<size_t>(k);
    }
    std::vector<double> mean(n, 0.0), m2(n, 0.0);
    for (int64_t i = 0; i < total; ++i) mean[kept[static_cast<size_t>(i)]] += v[i];
    for (double& x : mean) x /= per;
    for (int64_t i = 0; i < total; ++i) {
      const double d = v[i] - mean[kept[static_cast<size_t>(i)]];
      m2[kept[static_cast<size_t>(i)]] += d * d;
    }
    const double na = m.count, nb = per, nab = na + nb;
    for (size_t k = 0; k < n; ++k) {
      const double delta = mean[k] - m.mean[k];
      m.mean[k] += delta * nb / nab;
      m.m2[k] += m2[k] + delta * delta * na * nb / nab;
    }
    m.count = nab;
  }

  void finish(const Moments& m) {
    for (size_t k = 0; k < m.mean.size(); ++k) {
      weights_[0].value.data<float>()[k] = static_cast<float>(m.mean[k]);
      weights_[1].value.data<float>()[k] = m.count > 0 ? static_cast<float>(m.m2[k] / m.count) : 0.0f;
    }
  }

  layers::NormalizationOptions o_;
  std::vector<int> keep_;        // the kept axes, sorted
  std::vector<int64_t> bshape_;  // the statistics' broadcast shape: kept axes' sizes, 1 elsewhere
};

}  // namespace

namespace layers {
LayerPtr Normalization(NormalizationOptions options) {
  return std::make_shared<NormalizationLayer>(std::move(options));
}
namespace {
NormalizationLayer& as_normalization(const LayerPtr& layer) {
  auto* n = dynamic_cast<NormalizationLayer*>(layer.get());
  if (!n)
    throw InvalidArgument("adapt: layer '" + layer->name + "' (" + layer->class_name() + ") is not a Normalization");
  return *n;
}
}  // namespace
void adapt(const LayerPtr& layer, const Tensor& data) { as_normalization(layer).adapt(data); }
void adapt(const LayerPtr& layer, const data::Dataset& batches) { as_normalization(layer).adapt(batches); }
}  // namespace layers

}  // namespace tk
