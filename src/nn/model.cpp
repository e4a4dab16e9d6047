#include "trainkit/nn/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <set>

#include "graph/backend.h"
#include "graph/op.h"
#include "nn/compiler/losses.h"
#include "nn/compiler/metrics.h"
#include "nn/compiler/programs.h"
#include "nn/distribute/strategy_state.h"
#include "nn/layers/context.h"
#include "nn/layers/input_layer.h"
#include "nn/optimizer_rule.h"
#include "nn/training/trainer.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/mixed_precision.h"
#include "trainkit/runtime/memory.h"

namespace tk {

Model::Model(std::vector<KerasTensor> inputs, std::vector<KerasTensor> outputs, std::string name)
    : Model("functional", std::move(name)) {
  init_graph(std::move(inputs), std::move(outputs));
}

Model::Model(std::string name_prefix, std::string name)
    : name_(name.empty() ? nn::unique_name(name_prefix) : std::move(name)),
      dtype_policy_(mixed_precision::global_policy()),
      trainer_(std::make_unique<nn::Trainer>(*this)) {}

Model::~Model() = default;

void Model::init_graph(std::vector<KerasTensor> inputs, std::vector<KerasTensor> outputs) {
  if (inputs.empty() || outputs.empty())
    throw InvalidArgument("model '" + name_ + "' needs at least one input and one output");
  for (const KerasTensor& in : inputs)
    if (!in.node || !dynamic_cast<nn::InputLayer*>(in.node->layer.get()) || !in.node->inputs.empty())
      throw InvalidArgument("model '" + name_ + "': every input must come from tk::Input(...)");
  // Layers in Keras' order (keras/src/ops/function.py, map_graph): a DFS from each output numbers the layers as
  // first seen (pre-order) and lists the nodes in post-order; a node's depth is its longest path to an output, a
  // layer's the largest of its nodes'; layers are sorted by depth (deepest first), ties by DFS number. Keras walks
  // model.layers in this order for get_weights, the config's layer list, its weights file (conv2d, conv2d_1, ...
  // numbered in it) and summary, so a ResNet's shortcut convolution must land where Keras puts it.
  using Node = const KerasTensor::NodeData*;
  std::set<Node> declared, finished, in_progress;
  for (const KerasTensor& in : inputs) declared.insert(in.node.get());
  std::vector<Node> post_order;
  std::map<const Layer*, int> dfs_index;
  std::function<void(const KerasTensor&)> visit = [&](const KerasTensor& t) {
    if (!t.node) throw InvalidArgument("model '" + name_ + "': an output is an empty KerasTensor");
    const Node n = t.node.get();
    if (finished.count(n)) return;
    if (t.node->inputs.empty() && !declared.count(n))
      throw InvalidArgument("model '" + name_ + "': output depends on input '" + t.node->layer->name +
                            "', which is not among the model's inputs");
    if (in_progress.count(n))
      throw InvalidArgument("model '" + name_ + "': layer '" + t.node->layer->name + "' is part of a cycle");
    dfs_index.emplace(t.node->layer.get(), static_cast<int>(dfs_index.size()));
    in_progress.insert(n);
    for (const KerasTensor& x : t.node->inputs) visit(x);
    in_progress.erase(n);
    finished.insert(n);
    post_order.push_back(n);
  };
  for (const KerasTensor& out : outputs) visit(out);
  std::map<Node, int> node_depth;
  std::map<const Layer*, int> layer_depth;
  std::map<const Layer*, LayerPtr> owner;
  for (auto it = post_order.rbegin(); it != post_order.rend(); ++it) {
    const Node n = *it;
    int depth = std::max(node_depth[n], layer_depth[n->layer.get()]);  // node_depth[n] is 0 when unset
    layer_depth[n->layer.get()] = depth;
    node_depth[n] = depth;
    owner.emplace(n->layer.get(), n->layer);
    for (const KerasTensor& x : n->inputs)
      if (finished.count(x.node.get())) node_depth[x.node.get()] = std::max(node_depth[x.node.get()], depth + 1);
  }
  for (const KerasTensor& in : inputs)  // an input no output depends on: depth 0, first among them
    if (!layer_depth.count(in.node->layer.get())) {
      layer_depth[in.node->layer.get()] = 0;
      dfs_index[in.node->layer.get()] = -1;
      owner.emplace(in.node->layer.get(), in.node->layer);
    }
  // A model called like a layer (tk::call_model) is one layer to Keras: its depth is that of its output nodes, its
  // DFS number the first of theirs, and its layers follow in its own order where it sorts.
  std::map<const Model*, std::shared_ptr<const Model>> nested;
  std::map<const Model*, std::pair<int, int>> nested_key;  // (depth, dfs)
  for (const Node n : post_order) {
    if (!n->nested) continue;
    const Model* m = n->nested->model.get();
    nested.emplace(m, n->nested->model);
    nested_member_[n->layer.get()] = m;
    const auto& outs = n->nested->outputs;
    if (std::none_of(outs.begin(), outs.end(), [n](const auto& o) { return o.first == n; })) continue;
    auto [it, fresh] = nested_key.emplace(m, std::make_pair(node_depth[n], dfs_index[n->layer.get()]));
    if (!fresh)
      it->second = {std::max(it->second.first, node_depth[n]), std::min(it->second.second, dfs_index[n->layer.get()])};
  }
  struct Unit {
    const Layer* layer;  // or
    const Model* model;
    std::pair<int, int> key;
  };
  std::vector<Unit> units;
  for (const auto& [l, d] : layer_depth)
    if (!nested_member_.count(l)) units.push_back({l, nullptr, {d, dfs_index[l]}});
  for (const auto& [m, key] : nested_key) units.push_back({nullptr, m, key});
  std::sort(units.begin(), units.end(), [](const Unit& a, const Unit& b) {
    if (a.key.first != b.key.first) return a.key.first > b.key.first;
    return a.key.second < b.key.second;
  });
  for (const Unit& u : units) {
    if (u.layer) {
      layers_.push_back(owner[u.layer]);
      continue;
    }
    nested_models_.push_back(nested[u.model]);
    for (const LayerPtr& l : u.model->layers())  // its Inputs are not called here
      if (nested_member_.count(l.get())) layers_.push_back(l);
  }
  inputs_ = std::move(inputs);
  outputs_ = std::move(outputs);
  has_graph_ = true;
}

void Model::ensure_built(const std::vector<Tensor>&) {}

void Model::compile(OptimizerPtr optimizer, Loss loss, std::vector<Metric> metrics) {
  compile(std::move(optimizer), std::vector<Loss>{std::move(loss)}, std::move(metrics));
}

void Model::compile(OptimizerPtr optimizer, std::vector<Loss> losses, std::vector<Metric> metrics) {
  if (!optimizer) throw InvalidArgument("compile: optimizer is null (use tk::optimizers::Adam() or get(\"adam\"))");
  for (const Loss& l : losses) nn::validate_loss(l);       // the name and its options
  for (const Metric& m : metrics) nn::validate_metric(m);  // the name and its options
  if (losses.empty()) throw InvalidArgument("compile: at least one loss is required");
  optimizer_ = std::move(optimizer);
  losses_ = std::move(losses);
  metrics_ = std::move(metrics);
  // Keras: a model compiled inside a strategy's scope is replicated over its devices (replica 0 on the first).
  strategy_ = distribute::current_strategy();
  if (strategy_) device_ = strategy_->devices[0];
  // A new compile (e.g. after freezing layers) rebuilds every program; a device planned for (plan_for_absent_device)
  // stays planned for.
  trainer_->reset(strategy_, trainer_->absent_device_budget());
}

std::string Model::distribute_strategy() const { return strategy_ ? strategy_->description : std::string(); }
bool Model::is_chief() const { return !strategy_ || strategy_->chief(); }

void require_compute_device(Device device) {
  graph::backend(device.kind);  // Unsupported, naming the device kind, when there is no backend
  if (device.kind != DeviceKind::cpu || device.index != 0) config::get_memory_info(device);  // must exist
}

void Model::set_device(Device device) {
  if (device == device_) return;  // keeps what exists (e.g. optimizer state restored from a file)
  if (trainer_->programs().persistent_bytes() > 0)
    throw InvalidArgument("set_device: model '" + name_ + "' already has programs on " + device_.to_string() +
                          "; set the device before the first fit/evaluate/predict (or compile() again)");
  require_compute_device(device);
  if (strategy_)
    throw InvalidArgument("set_device(" + device.to_string() + "): model '" + name_ + "' was compiled under " +
                          strategy_->description +
                          ", which places its replicas (compile it outside the scope "
                          "to run on one device)");
  device_ = device;
  trainer_->reset(nullptr, 0);  // a real device from here on (the weights come back from the old one first)
}

void require_dtype_policy(const std::string& policy) { mixed_precision::check_policy(policy); }

void Model::set_dtype_policy(const std::string& policy) {
  require_dtype_policy(policy);
  if (policy == dtype_policy_ && own_dtype_policy_) return;  // keeps what exists (e.g. a restored state)
  if (!trainer_->run_policies().empty()) {
    bool changes = false;
    for (const LayerPtr& l : layers_) changes |= !l->has_own_dtype_policy() && l->dtype_policy() != policy;
    if (changes || policy != dtype_policy_)
      throw InvalidArgument("set_dtype_policy('" + policy + "'): model '" + name_ +
                            "' already has programs built under '" + dtype_policy_ +
                            "'; set the policy before the first fit/evaluate/predict, or compile() again");
  }
  dtype_policy_ = policy;
  own_dtype_policy_ = true;
}

std::string Model::layer_dtype_policy(const Layer& layer) const {
  if (!plan_policy_override_.empty() && !layer.has_own_dtype_policy()) return plan_policy_override_;
  return layer.has_own_dtype_policy() || !own_dtype_policy_ ? layer.dtype_policy() : dtype_policy_;
}

DType Model::layer_compute_dtype(const Layer& layer, std::string* why) const {
  if (why) why->clear();
  const std::string policy = layer_dtype_policy(layer);
  const DType t = mixed_precision::compute_dtype(policy);
  if (t == DType::f32) return t;
  if (layer.computes_in_float32()) {
    if (why) *why = "statistics in float32, as Keras";
    return DType::f32;  // its output is cast back to `t` (programs.cpp)
  }
  if (!layer.has_own_dtype_policy())
    for (const KerasTensor& o : outputs_)
      if (o.node->layer.get() == &layer) {
        if (why) *why = "model output: float32 for the loss and softmax (give it its own policy to change this)";
        return DType::f32;
      }
  return t;
}

float Model::loss_scale() const {
  if (const float* st = trainer_->programs().optimizer_state().loss_scale_state()) return st[0];
  if (!optimizer_) return 0.0f;
  if (optimizer_->config().loss_scale_initial > 0.0f) return optimizer_->config().loss_scale_initial;
  // Automatic: switched on when the first training program is built (ProgramCache::enable_loss_scaling).
  return trainer_->programs().scales_loss() ? 32768.0f : 0.0f;
}

int64_t Model::loss_scale_step_counter() const {
  const float* st = trainer_->programs().optimizer_state().loss_scale_state();
  return st ? static_cast<int64_t>(st[1]) : 0;
}

void Model::set_loss_scale_state(float scale, int64_t step_counter) {
  trainer_->check_compiled("set_loss_scale_state");
  if (loss_scale() <= 0.0f)
    throw InvalidArgument("set_loss_scale_state: model '" + name_ +
                          "' trains without loss scaling (compile with tk::optimizers::LossScaleOptimizer, or under "
                          "mixed_float16)");
  if (!(scale > 0.0f) || !std::isfinite(scale) || step_counter < 0)
    throw InvalidArgument("set_loss_scale_state: need a positive finite scale and a counter >= 0, got scale " +
                          std::to_string(scale) + ", counter " + std::to_string(step_counter));
  trainer_->programs().optimizer_state().set_loss_scale_state(scale, static_cast<float>(step_counter),
                                                              static_cast<float>(skipped_steps()));
}

int64_t Model::skipped_steps() const {
  const float* st = trainer_->programs().optimizer_state().loss_scale_state();
  return st ? static_cast<int64_t>(st[2]) : 0;
}

const Model* Model::nested_model_of(const Layer& layer) const {
  auto it = nested_member_.find(&layer);
  return it == nested_member_.end() ? nullptr : it->second;
}

LayerPtr Model::get_layer(const std::string& n) const {
  for (const LayerPtr& l : layers_)
    if (l->name == n) return l;
  std::string known;
  for (const LayerPtr& l : layers_) known += (known.empty() ? "" : ", ") + l->name;
  throw InvalidArgument("model '" + name_ + "' has no layer named '" + n + "' (layers: " + known + ")");
}

std::vector<Tensor> Model::get_weights() const {
  trainer_->sync_host_weights();
  std::vector<Tensor> out;
  for (const LayerPtr& l : layers_)
    for (const Weight& w : l->weights()) out.push_back(w.value.clone());
  return out;
}

void Model::set_weights(const std::vector<Tensor>& weights) {
  std::vector<Weight*> mine;
  for (const LayerPtr& l : layers_)
    for (Weight& w : l->weights()) mine.push_back(&w);
  if (mine.size() != weights.size())
    throw InvalidArgument("set_weights: model '" + name_ + "' has " + std::to_string(mine.size()) + " weights, got " +
                          std::to_string(weights.size()));
  for (size_t i = 0; i < mine.size(); ++i)
    if (weights[i].shape() != mine[i]->value.shape() || weights[i].dtype() != DType::f32)
      throw InvalidArgument("set_weights: weight " + std::to_string(i) + " ('" + mine[i]->name + "') has shape " +
                            mine[i]->value.shape().to_string() + " float32, got " + weights[i].shape().to_string() +
                            " " + std::string(dtype_name(weights[i].dtype())));
  // Copy into the existing storage: compiled programs hold pointers to it.
  for (size_t i = 0; i < mine.size(); ++i) std::memcpy(mine[i]->value.raw(), weights[i].raw(), weights[i].nbytes());
  trainer_->weights_changed_on_host();
}

std::vector<const Weight*> Model::trainable_weights() const {
  std::vector<const Weight*> out;
  for (const LayerPtr& l : layers_)
    if (l->trainable)
      for (const Weight& w : l->weights())
        if (w.trainable) out.push_back(&w);
  return out;
}

std::vector<std::vector<Tensor>> Model::get_optimizer_slots() const {
  trainer_->check_compiled("get_optimizer_slots");
  const nn::ProgramCache& cache = trainer_->programs();  // zeros for slots not made yet
  std::vector<std::vector<Tensor>> out;
  for (const Weight* w : trainable_weights()) out.push_back(cache.optimizer_state().slots(*w));
  return out;
}

void Model::set_optimizer_slots(const std::vector<std::vector<Tensor>>& slots, int64_t iterations) {
  trainer_->check_compiled("set_optimizer_slots");
  const std::vector<const Weight*> ws = trainable_weights();
  const size_t per = static_cast<size_t>(optimizer_->slots_per_variable());
  if (slots.size() != ws.size())
    throw InvalidArgument("set_optimizer_slots: model '" + name_ + "' has " + std::to_string(ws.size()) +
                          " trainable weights, got state for " + std::to_string(slots.size()));
  for (size_t i = 0; i < ws.size(); ++i) {
    if (slots[i].size() != per)
      throw InvalidArgument("set_optimizer_slots: " + optimizer_->name() + " keeps " + std::to_string(per) +
                            " slot(s) per weight, got " + std::to_string(slots[i].size()) + " for '" + ws[i]->name +
                            "'");
    for (size_t k = 0; k < per; ++k) {
      const Tensor& t = slots[i][k];
      const Shape want = nn::slot_shape(*optimizer_, static_cast<int>(k), ws[i]->value.shape());
      if (t.shape() != want || t.dtype() != ws[i]->value.dtype())
        throw InvalidArgument("set_optimizer_slots: state " + std::to_string(k) + " for '" + ws[i]->name +
                              "' has shape " + t.shape().to_string() + ", " + optimizer_->name() + " keeps " +
                              want.to_string() + " for the weight's " + ws[i]->value.shape().to_string());
    }
  }
  if (iterations < 0) throw InvalidArgument("set_optimizer_slots: iterations must be >= 0");
  for (size_t i = 0; i < ws.size(); ++i) trainer_->programs().optimizer_state().set_slots(*ws[i], slots[i]);
  optimizer_->config().iterations = iterations;
}

std::vector<float> Model::get_optimizer_variables() const {
  trainer_->check_compiled("get_optimizer_variables");
  return trainer_->programs().optimizer_state().variables();  // the initial values before the first step
}

void Model::set_optimizer_variables(const std::vector<float>& values) {
  trainer_->check_compiled("set_optimizer_variables");
  const size_t want = nn::optimizer_variable_initial_values(*optimizer_).size();
  if (values.size() != want)
    throw InvalidArgument("set_optimizer_variables: " + optimizer_->name() + " keeps " + std::to_string(want) +
                          " optimizer variable(s), got " + std::to_string(values.size()));
  for (const float v : values)
    if (!std::isfinite(v)) throw InvalidArgument("set_optimizer_variables: a value is not finite");
  if (want == 0) return;
  trainer_->programs().optimizer_state().set_variables(values);
}

DType Model::input_dtype(size_t i) const {
  const auto* in = i < inputs_.size() ? dynamic_cast<const nn::InputLayer*>(inputs_[i].node->layer.get()) : nullptr;
  return in ? in->dtype : DType::f32;
}

int64_t Model::count_params() const {
  int64_t n = 0;
  for (const LayerPtr& l : layers_) n += l->count_params();
  return n;
}

// ---------------------------------------------------------------- Sequential
Sequential::Sequential(std::vector<LayerPtr> layers, std::string name) : Model("sequential", std::move(name)) {
  for (LayerPtr& l : layers) add(std::move(l));
  // With an Input first, build now so that summary() and the weights exist before fit (as Keras).
  if (!pending_.empty() && dynamic_cast<nn::InputLayer*>(pending_.front().get())) ensure_built({});
}

void Sequential::add(LayerPtr layer) {
  if (!layer) throw InvalidArgument("Sequential::add: null layer");
  if (has_graph_)
    throw InvalidArgument("Sequential::add: model '" + name() + "' is already built; add layers before compile/fit");
  bool is_input = dynamic_cast<nn::InputLayer*>(layer.get()) != nullptr;
  if (is_input && !pending_.empty())
    throw InvalidArgument("Sequential: an Input layer must come first (model '" + name() + "')");
  if (!is_input && layer->arity() != 1)
    throw InvalidArgument("Sequential: layer '" + layer->name + "' (" + layer->class_name() +
                          ") takes several inputs; use the functional API");
  pending_.push_back(std::move(layer));
}

void Sequential::ensure_built(const std::vector<Tensor>& x) {
  if (has_graph_) return;
  if (pending_.empty()) throw InvalidArgument("Sequential model '" + name() + "' has no layers");
  KerasTensor in;
  size_t first = 0;
  if (auto il = std::dynamic_pointer_cast<nn::InputLayer>(pending_.front())) {
    in = nn::input_tensor(il);
    first = 1;
  } else {
    if (x.empty() || !x[0].defined() || x[0].shape().rank() < 2)
      throw InvalidArgument("Sequential model '" + name() +
                            "' has no Input layer and no data to infer its input shape from");
    in = tk::Input(x[0].shape().sample_shape());
  }
  KerasTensor h = in;
  for (size_t i = first; i < pending_.size(); ++i) h = (*pending_[i])(h);
  init_graph({in}, {h});
}

}  // namespace tk
