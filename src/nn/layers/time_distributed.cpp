#include "nn/layers/time_distributed.h"

#include <algorithm>
#include <array>

#include "graph/tensor_ops.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layers.h"

namespace tk::nn {
namespace {

// Layers whose output for one row depends on other rows of the batch, or that read the step mask Keras hands them per
// step: folding the steps into the batch would change their math.
constexpr std::array<const char*, 10> kRefused = {"BatchNormalization",
                                                  "SimpleRNN",
                                                  "LSTM",
                                                  "GRU",
                                                  "Bidirectional",
                                                  "MultiHeadAttention",
                                                  "GlobalAveragePooling1D",
                                                  "GlobalMaxPooling1D",
                                                  "TimeDistributed",
                                                  "Masking"};

}  // namespace

TimeDistributedLayer::TimeDistributedLayer(LayerPtr layer, std::string given_name)
    : Layer("time_distributed", std::move(given_name)), layer_(std::move(layer)) {
  if (!layer_) throw InvalidArgument("TimeDistributed '" + name + "': wraps a layer, got nothing");
  const std::string cls = layer_->class_name();
  if (std::find(kRefused.begin(), kRefused.end(), cls) != kRefused.end())
    throw InvalidArgument("TimeDistributed '" + name + "': wrapping " + cls + " '" + layer_->name +
                          "' is not supported (trainkit folds the steps into the batch, which changes a layer that "
                          "mixes rows or reads the step mask); wrap a Dense, Conv2D, pooling, Flatten, Dropout or "
                          "activation layer");
  if (layer_->arity() != 1)
    throw InvalidArgument("TimeDistributed '" + name + "': the wrapped layer " + cls + " '" + layer_->name +
                          "' takes several inputs; TimeDistributed takes one");
}

std::vector<KerasGroup> TimeDistributedLayer::keras_groups() const {
  std::vector<KerasGroup> groups = {{"vars", name}};
  for (const KerasGroup& g : layer_->keras_groups()) groups.push_back({"layer/" + g.path, g.name});
  return groups;
}

Shape TimeDistributedLayer::build(const std::vector<Shape>& in) {
  const Shape& s = in[0];  // (None, T, ...)
  if (s.rank() < 3 || s[1] <= 0)
    throw InvalidArgument("TimeDistributed '" + name + "': needs an input of (batch, steps, ...) with a known number " +
                          "of steps, got " + s.to_string());
  std::vector<int64_t> inner(s.dims().begin() + 2, s.dims().end());
  inner.insert(inner.begin(), -1);
  // Built through a call on a placeholder tensor of one step's shape (None, ...), as Keras builds the wrapped layer
  // with the child input shape: the layer marks itself built, so calling this wrapper again does not add weights.
  auto probe = std::make_shared<KerasTensor::NodeData>();
  probe->shapes = {Shape(inner)};
  const Shape step = (*layer_)(KerasTensor{probe}).shape();
  if (step.rank() < 1)
    throw InvalidArgument("TimeDistributed '" + name + "': the wrapped layer's output " + step.to_string() +
                          " has no batch axis");
  if (!built_)  // the wrapped layer's weights as this layer's (shared storage and ids): the model trains and saves them
    for (const Weight& w : layer_->weights()) {
      Weight mine = w;
      mine.keras_vars = "layer/" + w.keras_vars;
      weights_.push_back(std::move(mine));
    }
  std::vector<int64_t> out(step.dims().begin() + 1, step.dims().end());
  out.insert(out.begin(), {-1, s[1]});
  return Shape(out);
}

int TimeDistributedLayer::call(CallContext& ctx, const std::vector<int>& in) const {
  graph::OpBuilder b{ctx.g, nullptr, name};
  const Shape xs = ctx.g[in[0]].shape;  // (N, T, ...)
  std::vector<int64_t> folded(xs.dims().begin() + 1, xs.dims().end());
  folded[0] = xs[0] * xs[1];
  const int x = graph::ops::reshape(b, in[0], Shape(folded));  // (N*T, ...)
  // Keras passes the wrapped layer a mask per step only when its call takes one; the layers wrapped here take none.
  const std::vector<int> masks = std::move(ctx.input_masks);
  ctx.input_masks.clear();
  const int y = layer_->call(ctx, {x});  // (N*T, ...)
  ctx.input_masks = masks;
  const Shape ys = ctx.g[y].shape;
  std::vector<int64_t> unfolded(ys.dims().begin() + 1, ys.dims().end());
  unfolded.insert(unfolded.begin(), {xs[0], xs[1]});
  return graph::ops::reshape(b, y, Shape(unfolded));  // (N, T, ...)
}

}  // namespace tk::nn

namespace tk::layers {
LayerPtr TimeDistributed(LayerPtr layer, std::string name) {
  auto l = std::make_shared<nn::TimeDistributedLayer>(layer, std::move(name));
  if (layer && layer->has_own_dtype_policy()) l->set_dtype_policy(layer->dtype_policy());
  return l;
}
}  // namespace tk::layers
