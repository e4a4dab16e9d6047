#include "trainkit/nn/layer.h"

#include <atomic>
#include <charconv>

#include "nn/layers/context.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/mixed_precision.h"

namespace tk {

LayerConfig& LayerConfig::set(const std::string& key, bool v) {
  Value x;
  x.kind = Value::boolean, x.b = v;
  items.emplace_back(key, std::move(x));
  return *this;
}
LayerConfig& LayerConfig::set(const std::string& key, int64_t v) {
  Value x;
  x.kind = Value::integer, x.i = v;
  items.emplace_back(key, std::move(x));
  return *this;
}
LayerConfig& LayerConfig::set(const std::string& key, std::string v) {
  Value x;
  x.kind = Value::string, x.s = std::move(v);
  items.emplace_back(key, std::move(x));
  return *this;
}
LayerConfig& LayerConfig::set(const std::string& key, std::vector<int64_t> v) {
  Value x;
  x.kind = Value::integers, x.ints = std::move(v);
  items.emplace_back(key, std::move(x));
  return *this;
}
namespace {
double shortest_decimal(float v) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);  // the shortest decimal that reads back as v
  double d = v;
  if (ec == std::errc()) std::from_chars(buf, end, d);
  return d;
}
}  // namespace

LayerConfig& LayerConfig::set_float(const std::string& key, float v) {
  Value x;
  x.kind = Value::number, x.d = shortest_decimal(v);
  items.emplace_back(key, std::move(x));
  return *this;
}
LayerConfig& LayerConfig::set_floats(const std::string& key, const std::vector<float>& v) {
  Value x;
  x.kind = Value::numbers;
  for (float f : v) x.floats.push_back(shortest_decimal(f));
  items.emplace_back(key, std::move(x));
  return *this;
}

Layer::Layer(std::string name_prefix, std::string given)
    : name(given.empty() ? nn::unique_name(name_prefix) : given), dtype_policy_(mixed_precision::global_policy()) {}

void Layer::set_dtype_policy(const std::string& policy) {
  try {
    mixed_precision::check_policy(policy);
  } catch (const Error& e) {
    throw InvalidArgument("layer '" + name + "' (" + class_name() + "): " + e.what());
  }
  dtype_policy_ = policy;
  own_dtype_policy_ = true;
}

LayerPtr with_dtype(LayerPtr layer, const std::string& policy) {
  if (!layer) throw InvalidArgument("with_dtype: the layer is null");
  if (!policy.empty()) layer->set_dtype_policy(policy);
  return layer;
}

KerasTensor Layer::operator()(const KerasTensor& x) { return (*this)(std::vector<KerasTensor>{x}); }

KerasTensor Layer::operator()(const std::vector<KerasTensor>& xs) { return (*this)(xs, LayerConfig{}); }

void Layer::check_call_options(const LayerConfig& options) const {
  if (!options.items.empty())
    throw InvalidArgument("layer '" + name + "' (" + class_name() + ") takes no call option '" +
                          options.items.front().first + "'");
}

KerasTensor Layer::operator()(const std::vector<KerasTensor>& xs, const LayerConfig& call_options) {
  std::vector<KerasTensor> outs = call_all(xs, call_options);
  if (outs.size() != 1)
    throw InvalidArgument("layer '" + name + "' (" + class_name() + ") returns " + std::to_string(outs.size()) +
                          " tensors: take them all with call_all(...)");
  return outs[0];
}

std::vector<KerasTensor> Layer::call_all(const std::vector<KerasTensor>& xs, const LayerConfig& call_options) {
  check_call_options(call_options);
  const int n = static_cast<int>(xs.size());
  // A layer with a state argument takes the inputs after its first as that list (its build checks their number).
  const bool states = !state_argument().empty() && arity() >= 0 && n > arity();
  if (!states && ((arity() >= 0 && n != arity()) || (arity() < 0 && n < 2)))
    throw InvalidArgument("layer '" + name + "' (" + class_name() + ") expects " +
                          (arity() < 0 ? std::string("at least 2") : std::to_string(arity())) + " input(s), got " +
                          std::to_string(n));
  std::vector<Shape> shapes;
  for (const KerasTensor& x : xs) {
    if (!x.node) throw InvalidArgument("layer '" + name + "' called on an empty KerasTensor");
    shapes.push_back(x.shape());
  }
  std::vector<Shape> out = build_outputs(shapes);
  built_ = true;
  auto node = std::make_shared<KerasTensor::NodeData>();
  node->layer = shared_from_this();
  node->inputs = xs;
  node->shapes = std::move(out);
  node->call_options = call_options;
  std::vector<KerasTensor> outs;
  for (size_t i = 0; i < node->shapes.size(); ++i) outs.push_back(KerasTensor{node, static_cast<int>(i)});
  return outs;
}

int64_t Layer::count_params() const {
  int64_t n = 0;
  for (const Weight& w : weights_) n += w.value.numel();
  return n;
}

Weight& Layer::add_weight(const std::string& what, Shape shape, const std::string& initializer, bool weight_trainable) {
  Tensor t(shape, DType::f32, Device::cpu(), name + "/" + what);
  // Keras' compute_fans: kernels (..., in, out) scale by the receptive field (kh * kw for Conv2D).
  int64_t fan_in = shape.rank() >= 1 ? shape[-1] : 1, fan_out = fan_in;
  if (shape.rank() >= 2) {
    const int64_t receptive = shape.numel() / (shape[-1] * shape[-2]);
    fan_in = shape[-2] * receptive;
    fan_out = shape[-1] * receptive;
  }
  nn::initialize(t, initializer, fan_in, fan_out, nn::next_seed());
  static std::atomic<uint64_t> next_id{1};
  weights_.push_back(Weight{name + "/" + what, std::move(t), weight_trainable, next_id++});
  return weights_.back();
}

}  // namespace tk
