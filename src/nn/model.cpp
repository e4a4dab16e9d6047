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
#include "trainkit/core/error.h"
#include "trainkit/nn/mixed_precision.h"
#include "trainkit/runtime/memory.h"

namespace tk {

Model::Model(std::vector<KerasTensor> inputs, std::vector<KerasTensor> outputs, std::string name)
    : name_(name.empty() ? nn::unique_name("functional") : std::move(name)),
      dtype_policy_(mixed_precision::global_policy()) {
  init_graph(std::move(inputs), std::move(outputs));
}

Model::Model(std::string name_prefix, std::string name)
    : name_(name.empty() ? nn::unique_name(name_prefix) : std::move(name)),
      dtype_policy_(mixed_precision::global_policy()) {}

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
  sync_host_weights();  // a model on a GPU: its trained weights are the device's copies, which go with the programs
  programs_.reset();    // a new compile (e.g. after freezing layers) rebuilds every program
  replica_programs_.clear();
  run_policies_.clear();
  // Keras: a model compiled inside a strategy's scope is replicated over its devices (replica 0 on the first).
  strategy_ = distribute::current_strategy();
  if (strategy_) device_ = strategy_->devices[0];
}

std::string Model::distribute_strategy() const { return strategy_ ? strategy_->description : std::string(); }
bool Model::is_chief() const { return !strategy_ || strategy_->chief(); }

void require_compute_device(Device device) {
  graph::backend(device.kind);  // Unsupported, naming the device kind, when there is no backend
  if (device.kind != DeviceKind::cpu || device.index != 0) config::get_memory_info(device);  // must exist
}

void Model::set_device(Device device) {
  if (device == device_) return;  // keeps what exists (e.g. optimizer state restored from a file)
  if (programs_ && programs_->persistent_bytes() > 0)
    throw InvalidArgument("set_device: model '" + name_ + "' already has programs on " + device_.to_string() +
                          "; set the device before the first fit/evaluate/predict (or compile() again)");
  require_compute_device(device);
  if (strategy_)
    throw InvalidArgument("set_device(" + device.to_string() + "): model '" + name_ + "' was compiled under " +
                          strategy_->description +
                          ", which places its replicas (compile it outside the scope "
                          "to run on one device)");
  device_ = device;
  absent_device_budget_ = 0;  // a real device from here on
  sync_host_weights();
  programs_.reset();
}

void require_dtype_policy(const std::string& policy) { mixed_precision::check_policy(policy); }

void Model::set_dtype_policy(const std::string& policy) {
  require_dtype_policy(policy);
  if (policy == dtype_policy_ && own_dtype_policy_) return;  // keeps what exists (e.g. a restored state)
  if (programs_ && !run_policies_.empty()) {
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
  const float* st = programs_ ? programs_->loss_scale_state() : nullptr;
  if (st) return st[0];
  if (!optimizer_) return 0.0f;
  if (optimizer_->config().loss_scale_initial > 0.0f) return optimizer_->config().loss_scale_initial;
  if (auto_scale_loss)  // switched on when the first training program is built (ProgramCache::enable_loss_scaling)
    for (const LayerPtr& l : layers_)
      if (layer_compute_dtype(*l) == DType::f16) return 32768.0f;
  return 0.0f;
}

int64_t Model::loss_scale_step_counter() const {
  const float* st = programs_ ? programs_->loss_scale_state() : nullptr;
  return st ? static_cast<int64_t>(st[1]) : 0;
}

void Model::set_loss_scale_state(float scale, int64_t step_counter) {
  check_compiled("set_loss_scale_state");
  if (loss_scale() <= 0.0f)
    throw InvalidArgument("set_loss_scale_state: model '" + name_ +
                          "' trains without loss scaling (compile with tk::optimizers::LossScaleOptimizer, or under "
                          "mixed_float16)");
  if (!(scale > 0.0f) || !std::isfinite(scale) || step_counter < 0)
    throw InvalidArgument("set_loss_scale_state: need a positive finite scale and a counter >= 0, got scale " +
                          std::to_string(scale) + ", counter " + std::to_string(step_counter));
  if (!programs_) programs_ = std::make_unique<nn::ProgramCache>(*this);
  programs_->set_loss_scale_state(scale, static_cast<float>(step_counter), static_cast<float>(skipped_steps()));
}

int64_t Model::skipped_steps() const {
  const float* st = programs_ ? programs_->loss_scale_state() : nullptr;
  return st ? static_cast<int64_t>(st[2]) : 0;
}

void Model::add_loss_scale_logs(Logs& logs) const {
  const float* st = programs_ ? programs_->loss_scale_state() : nullptr;
  if (!st) return;
  logs.set("loss_scale", st[0]);
  logs.set("skipped_steps", st[2]);
}

void Model::check_compiled(const char* what) const {
  if (!optimizer_)
    throw InvalidArgument(std::string(what) + ": model '" + name_ + "' must be compiled first (call compile())");
  check_policies(what);
}

void Model::check_policies(const char* what) const {
  if (!programs_ || run_policies_.empty()) return;
  for (size_t i = 0; i < layers_.size() && i < run_policies_.size(); ++i) {
    const Layer& l = *layers_[i];
    if (layer_dtype_policy(l) != run_policies_[i])
      throw InvalidArgument(std::string(what) + ": layer '" + l.name + "' of model '" + name_ +
                            "' was given dtype policy '" + layer_dtype_policy(l) +
                            "' after its programs were built under '" + run_policies_[i] +
                            "'; set policies before the first fit/evaluate/predict, or compile() again");
  }
}

namespace {
// a[1:] == b[1:] without building Shapes: check_data runs at every train_on_batch and must not allocate.
bool same_sample_shape(const Shape& a, const Shape& b) {
  if (a.rank() != b.rank()) return false;
  for (int i = 1; i < a.rank(); ++i)
    if (a[i] != b[i]) return false;
  return true;
}
int64_t sample_numel(const Shape& s) {
  int64_t n = 1;
  for (int i = 1; i < s.rank(); ++i) n *= s[i];
  return n;
}
}  // namespace

void Model::check_data(const std::vector<Tensor>& x, const std::vector<Tensor>* y, const char* what) const {
  if (x.size() != inputs_.size())
    throw InvalidArgument(std::string(what) + ": model '" + name_ + "' has " + std::to_string(inputs_.size()) +
                          " input(s) but " + std::to_string(x.size()) + " x array(s) were given");
  const int64_t n = x.empty() || !x[0].defined() || x[0].shape().rank() == 0 ? 0 : x[0].dim(0);
  for (size_t i = 0; i < x.size(); ++i) {
    const Shape& want = inputs_[i].shape();
    if (!x[i].defined() || !same_sample_shape(x[i].shape(), want))
      throw InvalidArgument(std::string(what) + ": input " + std::to_string(i) + " ('" + inputs_[i].node->layer->name +
                            "') of model '" + name_ + "' expects shape " + want.to_string() + " but x has shape " +
                            (x[i].defined() ? x[i].shape().to_string() : std::string("nothing")) +
                            " (reshape the data, or start the model with Input/Flatten for this shape)");
    if (x[i].dim(0) != n)
      throw InvalidArgument(std::string(what) + ": x arrays differ in sample count (" + std::to_string(n) + " vs " +
                            std::to_string(x[i].dim(0)) + ")");
    if (!x[i].on_host())
      throw InvalidArgument(std::string(what) + ": x array " + std::to_string(i) + " is in the memory of " +
                            x[i].device().to_string() + "; give host arrays (a Dataset's on_device() stages itself)");
  }
  if (!y) return;
  if (y->size() != outputs_.size())
    throw InvalidArgument(std::string(what) + ": model '" + name_ + "' has " + std::to_string(outputs_.size()) +
                          " output(s) but " + std::to_string(y->size()) + " y array(s) were given");
  if (losses_.size() != 1 && losses_.size() != outputs_.size())
    throw InvalidArgument(std::string(what) + ": " + std::to_string(losses_.size()) + " losses for " +
                          std::to_string(outputs_.size()) + " outputs (give one loss, or one per output)");
  for (size_t j = 0; j < y->size(); ++j) {
    const Tensor& t = (*y)[j];
    const Shape& out = outputs_[j].shape();
    const Loss& loss = losses_.size() == 1 ? losses_[0] : losses_[j];
    const bool sparse = nn::is_sparse(loss);
    bool ok = t.defined() && t.shape().rank() >= 1;
    if (ok && sparse) {
      // Integer class ids: the output's shape without its last axis, or with a last axis of 1.
      const Shape& s = t.shape();
      ok = (s.rank() == out.rank() - 1 && sample_numel(s) * out[-1] == sample_numel(out)) ||
           (s.rank() == out.rank() && s[-1] == 1 && sample_numel(s) * out[-1] == sample_numel(out));
    } else if (ok) {
      ok = same_sample_shape(t.shape(), out);
    }
    if (!ok) {
      std::string want = out.to_string();
      if (sparse)
        want = "(n" + (out.rank() > 2 ? ", " + out.sample_shape().to_string().substr(1) : std::string(")")) +
               " of class ids, without the last axis of " + out.to_string();
      throw InvalidArgument(std::string(what) + ": target " + std::to_string(j) + " for output '" +
                            outputs_[j].node->layer->name + "' (shape " + out.to_string() + ", loss " + loss.name +
                            ") must have shape " + want + ", got " + (t.defined() ? t.shape().to_string() : "nothing") +
                            (sparse ? "" : " (for integer labels use sparse_categorical_crossentropy)"));
    }
    if (t.dim(0) != n)
      throw InvalidArgument(std::string(what) + ": x has " + std::to_string(n) + " samples but y " + std::to_string(j) +
                            " has " + std::to_string(t.dim(0)));
  }
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

void Model::sync_host_weights() const {
  if (programs_) programs_->download_weights();
}
void Model::weights_changed_on_host() {
  if (programs_) programs_->upload_weights(/*force=*/true);
}

std::vector<Tensor> Model::get_weights() const {
  sync_host_weights();
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
  weights_changed_on_host();
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
  check_compiled("get_optimizer_slots");
  nn::ProgramCache fresh(const_cast<Model&>(*this));  // no state yet: zeros
  const nn::ProgramCache& cache = programs_ ? *programs_ : fresh;
  std::vector<std::vector<Tensor>> out;
  for (const Weight* w : trainable_weights()) out.push_back(cache.slots(*w));
  return out;
}

void Model::set_optimizer_slots(const std::vector<std::vector<Tensor>>& slots, int64_t iterations) {
  check_compiled("set_optimizer_slots");
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
  if (!programs_) programs_ = std::make_unique<nn::ProgramCache>(*this);
  for (size_t i = 0; i < ws.size(); ++i) programs_->set_slots(*ws[i], slots[i]);
  optimizer_->config().iterations = iterations;
}

std::vector<float> Model::get_optimizer_variables() const {
  check_compiled("get_optimizer_variables");
  return programs_ ? programs_->optimizer_variables() : nn::optimizer_variable_initial_values(*optimizer_);
}

void Model::set_optimizer_variables(const std::vector<float>& values) {
  check_compiled("set_optimizer_variables");
  const size_t want = nn::optimizer_variable_initial_values(*optimizer_).size();
  if (values.size() != want)
    throw InvalidArgument("set_optimizer_variables: " + optimizer_->name() + " keeps " + std::to_string(want) +
                          " optimizer variable(s), got " + std::to_string(values.size()));
  for (const float v : values)
    if (!std::isfinite(v)) throw InvalidArgument("set_optimizer_variables: a value is not finite");
  if (want == 0) return;
  if (!programs_) programs_ = std::make_unique<nn::ProgramCache>(*this);
  programs_->set_optimizer_variables(values);
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
