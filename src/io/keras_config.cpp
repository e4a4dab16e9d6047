// Models and compile configs <-> Keras 3 config.json objects (Sequential, Functional; optimizer, loss,
// metrics).
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "graph/op.h"
#include "io/keras_internal.h"
#include "nn/compiler/losses.h"
#include "nn/compiler/metrics.h"
#include "nn/layers/input_layer.h"
#include "nn/optimizer_rule.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/mixed_precision.h"

namespace tk::io::keras {

json float_json(float v) {
  LayerConfig c;
  c.set_float("v", v);
  return c.items[0].second.d;
}

namespace {

json optional_float(float v) { return v > 0.0f ? float_json(v) : json(nullptr); }

// keras_wraps_it: Keras' compile adds this loss scaling by itself (mixed_float16 with LossScaleOptimizer's
// defaults), so the file names the inner optimizer alone, as Keras writes it. Other loss scaling is written as
// Keras' LossScaleOptimizer around the inner optimizer.
json optimizer_to_json(const Optimizer& opt, bool keras_wraps_it) {
  const graph::UpdateConfig& c = opt.config();
  const std::string cls = opt.name();
  json config = {
      {"name", ascii_lower(cls)},
      {"learning_rate", opt.learning_rate_schedule() ? schedule_to_json(*opt.learning_rate_schedule(), "save: " + cls)
                                                     : float_json(c.learning_rate)},
      // null (off) unless the class decays by default (AdamW), where Keras needs a number
      {"weight_decay",
       nn::rule_state(opt).rule->weight_decay > 0.0f ? float_json(c.weight_decay) : optional_float(c.weight_decay)},
      {"clipnorm", optional_float(c.clipnorm)},
      {"global_clipnorm", optional_float(c.global_clipnorm)},
      {"clipvalue", optional_float(c.clipvalue)},
      {"use_ema", false},
      {"ema_momentum", 0.99},
      {"ema_overwrite_frequency", nullptr},
      {"loss_scale_factor", nullptr},
      {"gradient_accumulation_steps", nullptr}};
  const nn::RuleState& st = nn::rule_state(opt);  // its hyperparameters by Keras name, in Keras' order
  for (const nn::Hyper& h : st.rule->hyper)
    config[h.key] = h.boolean ? json(st.hyper.at(h.key) != 0.0f) : float_json(st.hyper.at(h.key));
  json inner = keras_object_json("keras.optimizers", cls, config);
  if (c.loss_scale_initial <= 0.0f || keras_wraps_it) return inner;
  return keras_object_json("keras.optimizers", "LossScaleOptimizer",
                           {{"name", "loss_scale_optimizer"},
                            {"inner_optimizer", inner},
                            {"initial_scale", float_json(c.loss_scale_initial)},
                            {"dynamic_growth_steps", c.loss_scale_growth_steps}});
}

}  // namespace

// Keras loss objects <-> trainkit Losses (nn/compiler/losses.h names them): each class's config keys as Keras'
// get_config writes them, so Keras loads the file trainkit writes, and every key Keras writes is read or checked.
json loss_to_json(const Loss& l) {
  const nn::LossClass& lc = nn::loss_class(l);
  const std::string cls = lc.keras_class;
  json config = {{"name", lc.config_name}, {"reduction", "sum_over_batch_size"}};
  if (cls == "BinaryCrossentropy" || cls == "CategoricalCrossentropy" || cls == "BinaryFocalCrossentropy" ||
      cls == "SparseCategoricalCrossentropy")
    config["from_logits"] = l.from_logits;
  if (cls == "SparseCategoricalCrossentropy") config["ignore_class"] = l.ignore_class ? json(*l.ignore_class) : json();
  if (cls == "BinaryCrossentropy" || cls == "CategoricalCrossentropy" || cls == "BinaryFocalCrossentropy") {
    config["label_smoothing"] = float_json(l.label_smoothing);
    config["axis"] = -1;
  }
  if (cls == "BinaryFocalCrossentropy") {
    config["apply_class_balancing"] = l.apply_class_balancing;
    config["alpha"] = float_json(l.alpha);
    config["gamma"] = float_json(l.gamma);
  }
  // Keras 3's Huber.get_config leaves delta out (a Huber(delta=2) file reloads in Keras with delta 1); its constructor
  // takes it, so trainkit writes it when it is not the default and Keras then loads the same loss.
  if (cls == "Huber" && l.delta != 1.0f) config["delta"] = float_json(l.delta);
  return keras_object_json("keras.losses", cls, config);
}

Loss loss_from_json(const json& j, const std::string& label) {
  try {
    if (j.is_string()) return Loss(nn::canonical_loss_name(j.get<std::string>()));
  } catch (const InvalidArgument& e) {
    throw Unsupported(label + ": compile_config: " + e.what());
  }
  if (!j.is_object() || !j.contains("class_name") || !j["class_name"].is_string())
    throw FormatError(label + ": compile_config: 'loss' must be a name or a loss object, got " + j.dump());
  const std::string cls = j["class_name"].get<std::string>();
  const nn::LossClass* lc = nullptr;
  for (const nn::LossClass& c : nn::loss_classes())
    if (cls == c.keras_class) lc = &c;
  if (!lc) {
    std::string known;
    for (const nn::LossClass& c : nn::loss_classes()) known += (known.empty() ? "" : ", ") + std::string(c.keras_class);
    throw Unsupported(label + ": compile_config: loss class '" + cls + "' is not one trainkit has (" + known + ")");
  }
  const json config = j.value("config", json::object());
  Loss loss(lc->name);
  auto option = [&](const char* key, auto& out) {  // a bool or float option, kept when absent or null
    using T = std::remove_reference_t<decltype(out)>;
    constexpr bool kBool = std::is_same_v<T, bool>;
    if (!config.contains(key) || config[key].is_null()) return;
    if (kBool ? !config[key].is_boolean() : !config[key].is_number())
      throw FormatError(label + ": compile_config: " + cls + "'s " + key + " must be " +
                        (kBool ? "true or false" : "a number") + ", got " + config[key].dump());
    out = config[key].get<T>();
  };
  option("from_logits", loss.from_logits);
  option("label_smoothing", loss.label_smoothing);
  option("delta", loss.delta);
  option("gamma", loss.gamma);
  option("alpha", loss.alpha);
  option("apply_class_balancing", loss.apply_class_balancing);
  if (config.contains("ignore_class") && !config["ignore_class"].is_null()) {
    if (!config["ignore_class"].is_number_integer())
      throw FormatError(label + ": compile_config: ignore_class must be an integer, got " +
                        config["ignore_class"].dump());
    loss.ignore_class = config["ignore_class"].get<int>();
  }
  if (config.contains("axis") && config["axis"] != -1)
    throw Unsupported(label + ": compile_config: " + cls + " axis " + config["axis"].dump() +
                      " is not supported (only -1, the last axis)");
  if (config.contains("reduction") && config["reduction"] != "sum_over_batch_size")
    throw Unsupported(label + ": compile_config: loss reduction " + config["reduction"].dump() +
                      " is not supported (only sum_over_batch_size)");
  try {
    nn::validate_loss(loss);
  } catch (const InvalidArgument& e) {
    throw FormatError(label + ": compile_config: " + e.what());
  }
  return loss;
}

// Keras metric objects <-> trainkit Metrics: a string stays a string (Keras logs it under that string); an object is
// its class and config, with the keys Keras' get_config writes. Options trainkit does not run (Precision's top_k and
// class_id, AUC's multi_label, several thresholds) are Unsupported, named.
json metric_to_json(const Metric& m) {
  if (m.cls.empty()) return m.name;
  const std::string kind = nn::metric_kind(m);
  const std::string cls = nn::metric_class(kind);
  json config = {{"name", m.name}, {"dtype", "float32"}};
  if (kind == "top_k_categorical_accuracy" || kind == "sparse_top_k_categorical_accuracy") config["k"] = m.k;
  if (kind == "binary_accuracy") config["threshold"] = 0.5;
  if (kind == "precision" || kind == "recall") {
    config["thresholds"] = m.threshold == 0.5f ? json(nullptr) : float_json(m.threshold);
    config["top_k"] = nullptr;
    config["class_id"] = nullptr;
  }
  if (kind == "auc") {
    config["num_thresholds"] = m.num_thresholds;
    config["curve"] = m.curve;
    config["summation_method"] = m.summation_method;
    config["multi_label"] = false;
    config["num_labels"] = nullptr;
    config["label_weights"] = nullptr;
    config["from_logits"] = m.from_logits;
  }
  if (kind == "mean_io_u") {
    config["dtype"] = "int32";
    config["num_classes"] = m.num_classes;
    config["ignore_class"] = m.ignore_class ? json(*m.ignore_class) : json(nullptr);
    config["sparse_y_true"] = m.sparse_y_true;
    config["sparse_y_pred"] = m.sparse_y_pred;
    config["axis"] = -1;
  }
  return keras_object_json("keras.metrics", cls, config);
}

Metric metric_from_json(const json& j, const std::string& label) {
  const std::string where = label + ": compile_config: ";
  try {
    if (j.is_string()) {
      Metric m(j.get<std::string>());
      nn::validate_metric(m);
      return m;
    }
    if (!j.is_object() || !j.contains("class_name") || !j["class_name"].is_string())
      throw FormatError(where + "a metric must be a name or a metric object, got " + j.dump());
    const json config = j.value("config", json::object());
    const std::string cls = j["class_name"].get<std::string>();
    Metric m(config.contains("name") && config["name"].is_string() ? config["name"].get<std::string>() : cls, cls);
    const std::string kind = nn::metric_kind(m);
    auto unsupported_unless_null = [&](const char* key) {
      if (config.contains(key) && !config[key].is_null())
        throw Unsupported(where + cls + " option " + key + " = " + config[key].dump() +
                          " is not supported (trainkit runs it at Keras' default, null)");
    };
    if (config.contains("k")) m.k = config["k"].get<int>();
    if (kind == "precision" || kind == "recall") {
      unsupported_unless_null("top_k");
      unsupported_unless_null("class_id");
      if (config.contains("thresholds") && !config["thresholds"].is_null()) {
        if (!config["thresholds"].is_number())
          throw Unsupported(where + cls + " thresholds " + config["thresholds"].dump() +
                            " is not supported (one threshold only)");
        m.threshold = config["thresholds"].get<float>();
      }
    }
    if (kind == "auc") {
      if (config.contains("num_thresholds")) m.num_thresholds = config["num_thresholds"].get<int>();
      if (config.contains("curve")) m.curve = config["curve"].get<std::string>();
      if (config.contains("summation_method")) m.summation_method = config["summation_method"].get<std::string>();
      if (config.contains("from_logits")) m.from_logits = config["from_logits"].get<bool>();
      if (config.value("multi_label", false))
        throw Unsupported(where + "AUC multi_label = true is not supported (the labels are flattened into one curve)");
      unsupported_unless_null("num_labels");
      unsupported_unless_null("label_weights");
      if (config.contains("thresholds") && !config["thresholds"].is_null())
        throw Unsupported(where + "AUC thresholds are not supported (num_thresholds, evenly spaced, are)");
    }
    if (kind == "mean_io_u") {
      if (config.contains("num_classes") && !config["num_classes"].is_null())
        m.num_classes = config["num_classes"].get<int>();
      if (config.contains("sparse_y_true")) m.sparse_y_true = config["sparse_y_true"].get<bool>();
      if (config.contains("sparse_y_pred")) m.sparse_y_pred = config["sparse_y_pred"].get<bool>();
      if (config.contains("ignore_class") && !config["ignore_class"].is_null())
        m.ignore_class = config["ignore_class"].get<int>();
      if (config.contains("axis") && config["axis"] != -1)
        throw Unsupported(where + "MeanIoU axis " + config["axis"].dump() + " is not supported (only -1)");
    }
    nn::validate_metric(m);
    return m;
  } catch (const InvalidArgument& e) {
    throw Unsupported(where + e.what());
  }
}

namespace {

float number_or(const json& config, const char* key, float def, const std::string& label) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return def;
  if (!it->is_number())
    throw Unsupported(label + ": compile_config: optimizer option '" + key + "' = " + it->dump() +
                      " is not supported (a number)");
  return it->get<float>();
}

OptimizerPtr optimizer_from_json(const json& j, const std::string& label) {
  if (j.is_string()) return optimizers::get(j.get<std::string>());
  if (!j.is_object() || !j.contains("class_name") || !j["class_name"].is_string())
    throw FormatError(label + ": compile_config: 'optimizer' must be a name or an optimizer object");
  const std::string cls = j["class_name"].get<std::string>();
  const json config = j.value("config", json::object());
  if (cls == "LossScaleOptimizer") {
    if (!config.contains("inner_optimizer"))
      throw FormatError(label + ": compile_config: LossScaleOptimizer without an 'inner_optimizer'");
    optimizers::LossScaleOptions o;
    o.initial_scale = number_or(config, "initial_scale", o.initial_scale, label);
    const json growth = config.value("dynamic_growth_steps", json(o.dynamic_growth_steps));
    if (!growth.is_number_integer() || growth.get<int64_t>() < 1)
      throw FormatError(label +
                        ": compile_config: LossScaleOptimizer's dynamic_growth_steps must be an integer >= 1, "
                        "got " +
                        growth.dump());
    o.dynamic_growth_steps = growth.get<int64_t>();
    if (!(o.initial_scale > 0.0f) || !std::isfinite(o.initial_scale))
      throw FormatError(label + ": compile_config: LossScaleOptimizer's initial_scale must be positive, got " +
                        std::to_string(o.initial_scale));
    return optimizers::LossScaleOptimizer(optimizer_from_json(config["inner_optimizer"], label + " (inner_optimizer)"),
                                          o);
  }
  for (const char* key : {"use_ema"})
    if (config.contains(key) && config[key].is_boolean() && config[key].get<bool>())
      throw Unsupported(label + ": compile_config: optimizer option '" + std::string(key) + "' is not supported");
  for (const char* key : {"loss_scale_factor", "gradient_accumulation_steps"})
    if (config.contains(key) && !config[key].is_null())
      throw Unsupported(label + ": compile_config: optimizer option '" + std::string(key) + "' is not supported");
  optimizers::Common common;
  common.weight_decay = number_or(config, "weight_decay", 0.0f, label);
  common.clipnorm = number_or(config, "clipnorm", 0.0f, label);
  common.global_clipnorm = number_or(config, "global_clipnorm", 0.0f, label);
  common.clipvalue = number_or(config, "clipvalue", 0.0f, label);
  // Every class is an optimizer rule (nn/optimizer_rule.h): its hyperparameters by Keras name, Keras' defaults.
  const nn::OptimizerRule* rule = nn::find_rule(cls);
  if (!rule) {
    std::string known;
    for (const std::string& n : nn::rule_names()) known += (known.empty() ? "" : ", ") + n;
    throw Unsupported(label + ": compile_config: optimizer class '" + cls + "' is not one trainkit has (" + known +
                      ")");
  }
  if (!config.contains("weight_decay") || config["weight_decay"].is_null()) common.weight_decay = rule->weight_decay;
  nn::Hypers hyper;
  for (const nn::Hyper& h : rule->hyper) {
    float v = h.value;
    if (config.contains(h.key) && config[h.key].is_boolean())
      v = config[h.key].get<bool>() ? 1.0f : 0.0f;
    else
      v = number_or(config, h.key.c_str(), h.value, label);
    if (h.fixed && v != h.value)
      throw Unsupported(label + ": compile_config: optimizer option '" + h.key + "' = " + config[h.key].dump() +
                        " is not supported");
    hyper[h.key] = v;
  }
  // learning_rate: a number, or a schedule (Keras then keeps no learning_rate variable: keras_weights.cpp).
  const auto lr = config.find("learning_rate");
  if (lr != config.end() && lr->is_object()) {
    optimizers::schedules::LearningRateSchedulePtr schedule = schedule_from_json(*lr, label);
    OptimizerPtr opt = nn::make_rule_optimizer(*rule, hyper, (*schedule)(0), common);
    opt->set_learning_rate_schedule(std::move(schedule));
    return opt;
  }
  return nn::make_rule_optimizer(*rule, hyper, number_or(config, "learning_rate", rule->learning_rate, label), common);
}

json tensor_ref(const std::string& layer, int node, const Shape& shape, int index = 0) {
  json s = json::array();
  for (int i = 0; i < shape.rank(); ++i) s.push_back(i == 0 ? json(nullptr) : json(shape[i]));
  return {{"class_name", "__keras_tensor__"},
          {"config", {{"shape", s}, {"dtype", "float32"}, {"keras_history", json::array({layer, node, index})}}}};
}

std::string layer_label(const std::string& label, const std::string& name) { return label + ": layer '" + name + "'"; }

// The policy a layer is written with: the one it runs under in `model`, except that a model output which computes
// in float32 under a mixed policy only because it is an output (Model::layer_compute_dtype) is written as
// "float32", what Keras' guide asks for there, so that Keras and a reload compute it the same way.
std::string written_policy(const Model& model, const Layer& layer) {
  const std::string policy = model.layer_dtype_policy(layer);
  if (policy != "float32" && !layer.has_own_dtype_policy() && !layer.computes_in_float32() &&
      model.layer_compute_dtype(layer) == DType::f32)
    return "float32";
  return policy;
}

}  // namespace

json model_to_json(const Model& model) {
  const auto* seq = dynamic_cast<const Sequential*>(&model);
  if (model.layers().empty())
    throw InvalidArgument("save: model '" + model.name() +
                          "' is not built yet (start it with an Input layer, or fit it once, before saving)");
  json layers = json::array();
  json out;
  if (seq) {
    for (const LayerPtr& l : model.layers()) layers.push_back(layer_to_json(*l, written_policy(model, *l)));
    json shape = json::array({nullptr});
    const Shape& in = model.inputs().at(0).shape();
    for (int i = 1; i < in.rank(); ++i) shape.push_back(in[i]);
    out = keras_object_json("keras", "Sequential",
                            {{"name", model.name()},
                             {"trainable", true},
                             {"dtype", dtype_policy_json(model.dtype_policy())},
                             {"layers", layers},
                             {"build_input_shape", shape}});
    out["build_config"] = {{"input_shape", shape}};
  } else {
    // Inbound nodes: each layer's calls in the order they appear walking from the outputs (call order).
    std::map<const Layer*, std::vector<const KerasTensor::NodeData*>> calls;
    std::set<const KerasTensor::NodeData*> seen;
    // A nested model's calls (tk::call_model), per model, in call order: written as the model's inbound nodes.
    std::map<const Model*, std::vector<const NestedCall*>> nested_calls;
    std::function<void(const KerasTensor&)> visit = [&](const KerasTensor& t) {
      if (!seen.insert(t.node.get()).second) return;
      for (const KerasTensor& x : t.node->inputs) visit(x);
      if (const NestedCall* call = t.node->nested.get()) {
        auto& list = nested_calls[call->model.get()];
        if (std::find(list.begin(), list.end(), call) == list.end()) list.push_back(call);
        return;
      }
      calls[t.node->layer.get()].push_back(t.node.get());
    };
    for (const KerasTensor& t : model.inputs()) visit(t);
    for (const KerasTensor& t : model.outputs()) visit(t);
    auto ref = [&](const KerasTensor& t) {
      if (const NestedCall* call = t.node->nested.get()) {  // an output of a nested model's call
        const auto& list = nested_calls[call->model.get()];
        const auto& outs = call->outputs;
        const std::pair<const KerasTensor::NodeData*, int> which{t.node.get(), t.index};
        return tensor_ref(call->model->name(),
                          static_cast<int>(std::find(list.begin(), list.end(), call) - list.begin()), t.shape(),
                          static_cast<int>(std::find(outs.begin(), outs.end(), which) - outs.begin()));
      }
      const auto& nodes = calls[t.node->layer.get()];
      const int index = static_cast<int>(std::find(nodes.begin(), nodes.end(), t.node.get()) - nodes.begin());
      return tensor_ref(t.node->layer->name, index, t.shape(), t.index);
    };
    auto refs = [&](const std::vector<KerasTensor>& xs, size_t from = 0) {  // a list of xs[from:]'s refs
      json list = json::array();
      for (size_t i = from; i < xs.size(); ++i) list.push_back(ref(xs[i]));
      return list;
    };
    std::set<const Model*> written;
    for (const LayerPtr& l : model.layers()) {
      if (const Model* inner = model.nested_model_of(*l)) {
        if (!written.insert(inner).second) continue;
        json j = model_to_json(*inner);
        j.erase("compile_config");
        bool trainable = false;
        for (const LayerPtr& m : inner->layers()) trainable = trainable || m->trainable;
        j["config"]["trainable"] = trainable;
        j["name"] = inner->name();
        json inbound = json::array();
        for (const NestedCall* call : nested_calls[inner]) {
          const json args = json::array({call->inputs.size() == 1 ? ref(call->inputs[0]) : refs(call->inputs)});
          json kwargs = {{"mask", nullptr}};
          if (call->training) kwargs["training"] = *call->training;
          inbound.push_back({{"args", args}, {"kwargs", kwargs}});
        }
        j["inbound_nodes"] = inbound;
        layers.push_back(j);
        continue;
      }
      json j = layer_to_json(*l, written_policy(model, *l));
      j["name"] = l->name;
      json inbound = json::array();
      for (const KerasTensor::NodeData* n : calls[l.get()]) {
        if (n->inputs.empty()) continue;  // an Input
        json args = json::array();
        json kwargs = json::object();  // the call's options (use_causal_mask)
        const std::string state = l->state_argument();
        if (!state.empty()) {  // the sequence, then Keras' initial_state=[...] (as Keras writes it: a kwarg)
          args.push_back(ref(n->inputs[0]));
          if (n->inputs.size() > 1) kwargs[state] = refs(n->inputs, 1);
        } else if (n->inputs.size() == 1 || !l->call_arguments().empty()) {  // named tensors: positional, in order
          args = refs(n->inputs);
        } else {
          args.push_back(refs(n->inputs));
        }
        for (const auto& [key, v] : n->call_options.items) kwargs[key] = config_value_json(v);
        inbound.push_back({{"args", args}, {"kwargs", kwargs}});
      }
      j["inbound_nodes"] = inbound;
      layers.push_back(j);
    }
    json ins = json::array(), outs = json::array();
    for (const KerasTensor& t : model.inputs()) ins.push_back(json::array({t.node->layer->name, 0, 0}));
    for (const KerasTensor& t : model.outputs()) outs.push_back(ref(t)["config"]["keras_history"]);
    out = {{"module", "keras.src.models.functional"},
           {"class_name", "Functional"},
           {"config",
            {{"name", model.name()},
             {"trainable", true},
             {"layers", layers},
             {"input_layers", ins.size() == 1 ? ins[0] : ins},
             {"output_layers", outs.size() == 1 ? outs[0] : outs}}},
           {"registered_name", "Functional"},
           {"build_config", {{"input_shape", nullptr}}}};
  }
  if (model.optimizer()) {
    json loss = model.losses().size() == 1 ? loss_to_json(model.losses()[0]) : json::array();
    if (model.losses().size() > 1)
      for (const Loss& l : model.losses()) loss.push_back(loss_to_json(l));
    const graph::UpdateConfig& c = model.optimizer()->config();
    const bool keras_wraps_it = model.auto_scale_loss && model.dtype_policy() == "mixed_float16" &&
                                c.loss_scale_initial == 32768.0f && c.loss_scale_growth_steps == 2000;
    json metrics_json = model.metrics().empty() ? json(nullptr) : json::array();
    for (const Metric& m : model.metrics()) metrics_json.push_back(metric_to_json(m));
    out["compile_config"] = {{"optimizer", optimizer_to_json(*model.optimizer(), keras_wraps_it)},
                             {"loss", loss},
                             {"loss_weights", nullptr},
                             {"metrics", metrics_json},
                             {"weighted_metrics", nullptr},
                             {"run_eagerly", false},
                             {"steps_per_execution", 1},
                             {"jit_compile", false}};
  }
  return out;
}

namespace {

std::unique_ptr<Model> sequential_from_json(const json& config, const std::string& label) {
  if (!config.contains("layers") || !config["layers"].is_array())
    throw FormatError(label + ": Sequential config has no 'layers' list");
  std::vector<LayerPtr> layers;
  const json* shape = nullptr;  // Keras 2: the first layer's batch_input_shape instead of an InputLayer
  json first_layer;
  for (const json& l : config["layers"]) {
    if (layers.empty() && l.is_object() && l.contains("config") && l["config"].is_object() &&
        l["config"].contains("batch_input_shape") && l.value("class_name", "") != "InputLayer") {
      first_layer = l;
      shape = &l["config"]["batch_input_shape"];
      first_layer["config"].erase("batch_input_shape");
      layers.push_back(layer_from_json(first_layer, label));
      continue;
    }
    layers.push_back(layer_from_json(l, label));
  }
  if (layers.empty() || !dynamic_cast<nn::InputLayer*>(layers[0].get())) {
    // Keras 2 and some Keras 3 files give the input shape as build_input_shape instead of an InputLayer.
    if (!shape && config.contains("build_input_shape") && config["build_input_shape"].is_array())
      shape = &config["build_input_shape"];
    if (!shape) throw FormatError(label + ": Sequential model has neither an InputLayer nor a build_input_shape");
    if (!shape->is_array()) throw FormatError(label + ": the Sequential input shape is not a list");
    std::vector<int64_t> dims;
    for (size_t i = 1; i < shape->size(); ++i) {
      if (!(*shape)[i].is_number_integer()) throw FormatError(label + ": build_input_shape has unknown dimensions");
      dims.push_back((*shape)[i].get<int64_t>());
    }
    layers.insert(layers.begin(), layers::Input(Shape(dims)));
  }
  std::string name = config.value("name", std::string());
  try {
    return std::make_unique<Sequential>(layers, name);
  } catch (const InvalidArgument& e) {
    throw FormatError(label + ": the layers do not fit together: " + e.what());
  }
}

bool is_keras_tensor(const json& t) { return t.is_object() && t.value("class_name", "") == "__keras_tensor__"; }

// The tensors of a call whose arguments are named (Layer::call_arguments: MultiHeadAttention's query, value, key), from
// the node's positional args and kwargs; they must be a prefix of the names (key only after value).
std::vector<KerasTensor> named_call_tensors(
    const Layer& layer, const std::vector<std::string>& named, const json& args, const json& kwargs,
    const std::string& label, const std::function<KerasTensor(const json&, const std::string&)>& resolve) {
  const std::string who = layer_label(label, layer.name);
  if (args.size() > named.size())
    throw FormatError(who + ": an inbound node passes " + std::to_string(args.size()) + " positional arguments, " +
                      layer.class_name() + " takes " + std::to_string(named.size()) + " tensors");
  std::vector<const json*> given(named.size(), nullptr);
  for (size_t i = 0; i < args.size(); ++i) given[i] = &args[i];
  for (size_t i = 0; i < named.size(); ++i) {
    auto it = kwargs.find(named[i]);
    if (it == kwargs.end() || it->is_null()) continue;
    if (given[i]) throw FormatError(who + ": an inbound node passes '" + named[i] + "' twice");
    given[i] = &*it;
  }
  std::vector<KerasTensor> xs;
  for (size_t i = 0; i < named.size(); ++i) {
    if (!given[i] || given[i]->is_null()) {
      for (size_t j = i + 1; j < named.size(); ++j)
        if (given[j] && !given[j]->is_null())
          throw FormatError(who + ": an inbound node passes '" + named[j] + "' without '" + named[i] + "'");
      break;
    }
    xs.push_back(resolve(*given[i], layer.name));
  }
  if (xs.empty()) throw FormatError(who + ": an inbound node passes no '" + named[0] + "'");
  return xs;
}

// A call's keyword options that are not its named tensors: null ones are Keras' defaults (mask: None) and skipped;
// `training` too: Keras records the call's default (Dropout's training=False, as keras.applications' EfficientNet
// nodes hold) and overrides it with the model call's mode when it runs the graph, as trainkit's fit/predict do.
// Another tensor (attention_mask, a mask) or an option the layer does not take is Unsupported naming it.
// Keras masks: Keras 3 writes the masks it propagated as the calls' `mask` (MultiHeadAttention: query_mask,
// value_mask, key_mask) kwargs, computed by operation nodes (keras.src.ops: not_equal, logical_or, ...) from the
// model's inputs; trainkit propagates the same masks itself (nn::MaskSupport), so such a kwarg is skipped when its
// tensor comes from one of those operation nodes (`mask_ops`).
bool is_propagated_mask(const std::string& key, const json& v, const std::set<std::string>& mask_ops) {
  if (key != "mask" && key != "query_mask" && key != "value_mask" && key != "key_mask") return false;
  if (!is_keras_tensor(v) || !v.contains("config") || !v["config"].is_object() ||
      !v["config"].contains("keras_history"))
    return false;
  const json& hist = v["config"]["keras_history"];
  return hist.is_array() && !hist.empty() && hist[0].is_string() && mask_ops.count(hist[0].get<std::string>()) > 0;
}

LayerConfig call_options_from_json(const Layer& layer, const std::vector<std::string>& named, const json& kwargs,
                                   const std::string& label, const std::set<std::string>& mask_ops) {
  const std::string who = layer_label(label, layer.name);
  LayerConfig options;
  for (const auto& [key, v] : kwargs.items()) {
    if (v.is_null() || key == "training" || std::find(named.begin(), named.end(), key) != named.end()) continue;
    if (is_propagated_mask(key, v, mask_ops)) continue;
    if (is_keras_tensor(v) || v.is_array() || v.is_object())
      throw Unsupported(who + ": the call argument '" + key + "' = " + v.dump().substr(0, 120) +
                        " is not supported by trainkit");
    if (v.is_boolean())
      options.set(key, v.get<bool>());
    else if (v.is_number_integer())
      options.set(key, v.get<int64_t>());
    else if (v.is_number())
      options.set_float(key, v.get<float>());
    else
      options.set(key, v.get<std::string>());
  }
  try {
    layer.check_call_options(options);
  } catch (const InvalidArgument& e) {
    throw Unsupported(who + ": " + e.what());
  }
  return options;
}

std::unique_ptr<Model> functional_from_json(const json& config, const std::string& label) {
  if (!config.contains("layers") || !config["layers"].is_array())
    throw FormatError(label + ": Functional config has no 'layers' list");
  std::set<std::string> names;
  std::map<std::string, std::vector<std::vector<KerasTensor>>> outputs;  // per layer, per call (node): its outputs
  struct Entry {
    LayerPtr layer;                      // a layer, or
    std::shared_ptr<const Model> model;  // a model called like a layer (the fine-tuning base)
    std::string name;
    const json* inbound;
  };
  std::vector<Entry> order;
  std::set<std::string> mask_ops;  // operation nodes (keras.src.ops.*): only read as masks (is_propagated_mask)
  for (const json& l : config["layers"]) {
    if (l.is_object() && l.contains("module") && l["module"].is_string() &&
        l["module"].get<std::string>().rfind("keras.src.ops.", 0) == 0) {
      const json& c = l.contains("config") && l["config"].is_object() ? l["config"] : l;
      mask_ops.insert(l.contains("name") && l["name"].is_string() ? l["name"].get<std::string>()
                                                                  : c.value("name", std::string()));
      continue;
    }
    Entry e;
    if (is_nested_model(l)) {
      e.model = nested_model_from_json(l, label);
      e.name = e.model->name();
    } else {
      e.layer = layer_from_json(l, label);
      e.name = e.layer->name;
    }
    if (!names.insert(e.name).second) throw FormatError(layer_label(label, e.name) + " appears twice");
    auto it = l.find("inbound_nodes");
    e.inbound = it == l.end() ? nullptr : &*it;
    order.push_back(std::move(e));
  }
  auto resolve = [&](const json& t, const std::string& who) -> KerasTensor {
    const json* hist = nullptr;
    if (t.is_object() && t.contains("config") && t["config"].is_object() && t["config"].contains("keras_history"))
      hist = &t["config"]["keras_history"];
    else if (t.is_array())
      hist = &t;  // [layer, node, tensor] leaves of input_layers/output_layers
    if (!hist || !hist->is_array() || hist->size() < 2 || !(*hist)[0].is_string() || !(*hist)[1].is_number_integer())
      throw FormatError(layer_label(label, who) + ": an inbound tensor is not a keras tensor: " + t.dump());
    const std::string src = (*hist)[0].get<std::string>();
    const int64_t node = (*hist)[1].get<int64_t>();
    if (mask_ops.count(src))
      throw Unsupported(layer_label(label, who) + ": reads the operation '" + src +
                        "' (keras.src.ops): trainkit reads operation nodes only as the Keras masks of calls");
    if (hist->size() > 2 && !(*hist)[2].is_number_integer())
      throw FormatError(layer_label(label, who) + ": an inbound tensor's index is not an integer: " + t.dump());
    const int64_t index = hist->size() > 2 ? (*hist)[2].get<int64_t>() : 0;
    auto it = outputs.find(src);
    if (it == outputs.end() || node < 0 || node >= static_cast<int64_t>(it->second.size()))
      throw FormatError(layer_label(label, who) + ": reads layer '" + src + "' node " + std::to_string(node) +
                        ", which does not exist before it in the config");
    const std::vector<KerasTensor>& outs = it->second[static_cast<size_t>(node)];
    if (index < 0 || index >= static_cast<int64_t>(outs.size()))
      throw FormatError(layer_label(label, who) + ": reads output " + std::to_string(index) + " of layer '" + src +
                        "' node " + std::to_string(node) + ", which has " + std::to_string(outs.size()) +
                        " output(s) (an LSTM has [output, h, c] only with return_state=True)");
    return outs[static_cast<size_t>(index)];
  };
  for (const Entry& entry : order) {
    if (entry.model) {
      for (const KerasTensor& t : call_nested_model(entry.model, entry.inbound, label, resolve))
        outputs[entry.name].push_back({t});
      continue;
    }
    const LayerPtr& layer = entry.layer;
    const json* inbound = entry.inbound;
    if (auto il = std::dynamic_pointer_cast<nn::InputLayer>(static_cast<const std::shared_ptr<Layer>&>(layer))) {
      outputs[layer->name].push_back({nn::input_tensor(il)});
      continue;
    }
    if (!inbound || !inbound->is_array() || inbound->empty())
      throw FormatError(layer_label(label, layer->name) + " has no inbound_nodes (it is never called)");
    for (const json& node : *inbound) {
      if (node.is_array()) {  // Keras 2: [[layer, node, tensor, kwargs], ...]
        std::vector<KerasTensor> xs;
        for (const json& t : node) xs.push_back(resolve(t, layer->name));
        if (xs.empty()) throw FormatError(layer_label(label, layer->name) + ": an inbound node is empty");
        try {
          outputs[layer->name].push_back(layer->call_all(xs));
        } catch (const InvalidArgument& e) {
          throw FormatError(layer_label(label, layer->name) + ": " + e.what());
        }
        continue;
      }
      const json* args = node.is_object() && node.contains("args") ? &node["args"] : nullptr;
      const std::vector<std::string> named = layer->call_arguments();
      if (!args || !args->is_array() || (args->empty() && named.empty()))
        throw FormatError(layer_label(label, layer->name) + ": an inbound node has no args");
      const json no_kwargs = json::object();
      const json& kwargs = node.contains("kwargs") && node["kwargs"].is_object() ? node["kwargs"] : no_kwargs;
      std::vector<KerasTensor> xs;
      std::vector<std::string> skipped = named;  // kwargs read as tensors, not options
      const std::string state = layer->state_argument();
      if (!state.empty()) {  // (sequences, initial_state=[...]): the states positional or a kwarg, as Keras allows
        skipped.push_back(state);
        xs.push_back(resolve((*args)[0], layer->name));
        const json* states = args->size() > 1 ? &(*args)[1] : nullptr;
        if (args->size() > 2)
          throw Unsupported(layer_label(label, layer->name) + ": an inbound node passes " +
                            std::to_string(args->size()) + " positional arguments (trainkit reads the sequence and '" +
                            state + "')");
        if (auto it = kwargs.find(state); it != kwargs.end() && !it->is_null()) {
          if (states && !states->is_null())
            throw FormatError(layer_label(label, layer->name) + ": an inbound node passes '" + state + "' twice");
          states = &*it;
        }
        if (states && !states->is_null()) {
          if (states->is_array())
            for (const json& t : *states) xs.push_back(resolve(t, layer->name));
          else
            xs.push_back(resolve(*states, layer->name));
        }
      } else if (named.empty()) {
        const json& first = (*args)[0];
        if (first.is_array())
          for (const json& t : first) xs.push_back(resolve(t, layer->name));
        else
          for (const json& t : *args) xs.push_back(resolve(t, layer->name));
      } else {
        xs = named_call_tensors(*layer, named, *args, kwargs, label, resolve);
      }
      const LayerConfig options = call_options_from_json(*layer, skipped, kwargs, label, mask_ops);
      try {
        outputs[layer->name].push_back(layer->call_all(xs, options));
      } catch (const InvalidArgument& e) {
        throw FormatError(layer_label(label, layer->name) + ": " + e.what());
      }
    }
  }
  auto leaves = [&](const char* key) {
    std::vector<KerasTensor> out;
    if (!config.contains(key) || !config[key].is_array() || config[key].empty())
      throw FormatError(label + ": Functional config has no '" + key + "'");
    const json& v = config[key];
    if (v[0].is_string()) {
      out.push_back(resolve(v, key));
    } else {
      for (const json& leaf : v) out.push_back(resolve(leaf, key));
    }
    return out;
  };
  std::vector<KerasTensor> ins = leaves("input_layers"), outs = leaves("output_layers");
  try {
    return std::make_unique<Model>(ins, outs, config.value("name", std::string()));
  } catch (const InvalidArgument& e) {
    throw FormatError(label + ": the graph does not fit together: " + e.what());
  }
}

}  // namespace

std::unique_ptr<Model> model_from_json(const json& obj, const std::string& label) {
  if (!obj.is_object() || !obj.contains("class_name") || !obj["class_name"].is_string() || !obj.contains("config") ||
      !obj["config"].is_object())
    throw FormatError(label + ": the model config has no class_name/config (not a Keras model config)");
  const std::string cls = obj["class_name"].get<std::string>();
  // The model's own policy (Keras writes the global policy it was built under) is the global one while its layers
  // are made: a layer that names the same policy inherits it from the model, so a later Model::set_dtype_policy
  // (`--dtype-policy`) changes it, and only a layer that names another one (a float32 output under a mixed policy)
  // keeps its own, as Keras' dtype= argument.
  struct GlobalPolicy {
    std::string before = mixed_precision::global_policy();
    ~GlobalPolicy() { mixed_precision::set_global_policy(before); }
  } restore;
  const std::string policy = policy_in_config(obj["config"], label + ": the model's config");
  if (!policy.empty()) mixed_precision::set_global_policy(policy);
  try {
    if (cls == "Sequential") return sequential_from_json(obj["config"], label);
    if (cls == "Functional" || cls == "Model") return functional_from_json(obj["config"], label);
  } catch (const json::exception& e) {
    throw FormatError(label + ": " + e.what());
  }
  throw Unsupported(label + ": model class '" + cls +
                    "' cannot be loaded (trainkit loads Sequential and Functional models; subclassed models have no "
                    "config to rebuild from)");
}

void compile_from_json(Model& model, const json& cc, const std::string& label) {
  try {
    if (!cc.is_object()) throw FormatError(label + ": compile_config is not an object");
    if (!cc.contains("optimizer") || !cc.contains("loss") || cc["loss"].is_null())
      throw FormatError(label + ": compile_config has no optimizer or loss");
    OptimizerPtr opt = optimizer_from_json(cc["optimizer"], label);
    std::vector<Loss> losses;
    if (cc["loss"].is_array()) {
      for (const json& l : cc["loss"]) losses.push_back(loss_from_json(l, label));
    } else if (cc["loss"].is_object() && !cc["loss"].contains("class_name")) {
      for (const auto& [k, l] : cc["loss"].items()) losses.push_back(loss_from_json(l, label));  // per output name
    } else {
      losses.push_back(loss_from_json(cc["loss"], label));
    }
    if (cc.contains("loss_weights") && !cc["loss_weights"].is_null())
      throw Unsupported(label + ": compile_config: loss_weights are not supported");
    std::vector<Metric> metrics;
    if (cc.contains("metrics") && cc["metrics"].is_array())
      for (const json& m : cc["metrics"]) metrics.push_back(metric_from_json(m, label));
    model.compile(opt, losses, metrics);
  } catch (const json::exception& e) {
    throw FormatError(label + ": compile_config: " + e.what());
  } catch (const InvalidArgument& e) {
    throw Unsupported(label + ": compile_config: " + e.what());
  }
}

}  // namespace tk::io::keras
