// Keras 3's weights layout (model.weights.h5 / .weights.h5) and Keras 2's (model_weights/...) <-> a Model.
//
// Keras 3: layers/<key>/vars/<i>, <key> = snake_case class name with a per-model counter (dense, dense_1);
// a Sequential's InputLayer is not in the walk, a Functional's is. optimizer/vars: 0 iterations, 1
// learning_rate, then the slots in Keras' order and the optimizer-level variables (Nadam's u_product), as the
// optimizer's rule says (nn/optimizer_rule.h: nn::keras_slot_order). Under loss scaling
// (Keras' LossScaleOptimizer, which Keras' compile adds under mixed_float16): optimizer/vars is the wrapper's, named
// "loss_scale_optimizer" (0 its own iterations, always 0; 1 its learning rate, 0.0; 2 step_counter; 3
// dynamic_scale; then the inner optimizer's list), and optimizer/inner_optimizer/vars the inner optimizer's list.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "core/device_bytes.h"
#include "graph/op.h"
#include "io/keras_internal.h"
#include "nn/compiler/programs.h"
#include "nn/layers/input_layer.h"
#include "nn/optimizer_rule.h"
#include "nn/training/trainer.h"
#include "trainkit/core/error.h"

namespace tk::io::keras {

namespace {

// The layers Keras walks, each with its group name. A nested model (tk::call_model) is one entry of the walk with
// layer null (its own empty "vars" group, named after the model), followed by its layers under "<key>/layers/".
struct WalkEntry {
  std::string key;
  Layer* layer;
  std::string model_name;  // layer null: the nested model's name
};
std::vector<WalkEntry> walk(const Model& model) {
  const bool sequential = dynamic_cast<const Sequential*>(&model) != nullptr;
  std::map<std::string, int> counters;
  auto next_key = [&](const std::string& class_name) {
    const std::string base = snake_case(class_name);
    const int k = counters[base]++;
    return k == 0 ? base : base + "_" + std::to_string(k);
  };
  std::vector<WalkEntry> out;
  std::set<const Model*> nested;
  for (const LayerPtr& l : model.layers()) {
    if (sequential && dynamic_cast<nn::InputLayer*>(l.get())) continue;
    if (const Model* inner = model.nested_model_of(*l)) {
      if (!nested.insert(inner).second) continue;
      const std::string key = next_key(dynamic_cast<const Sequential*>(inner) ? "Sequential" : "Functional");
      out.push_back({key, nullptr, inner->name()});
      for (const WalkEntry& e : walk(*inner)) out.push_back({key + "/layers/" + e.key, e.layer, e.model_name});
      continue;
    }
    out.push_back({next_key(l->class_name()), l.get(), {}});
  }
  return out;
}

// A slot as Keras stores it: float32, or the rule's dtype (Adafactor's int32 placeholders), converted.
Tensor to_keras_dtype(const Tensor& t, DType dtype) {
  if (dtype == DType::f32) return t;
  Tensor out(t.shape(), dtype);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float v = t.data<float>()[i];
    if (dtype == DType::i32)
      out.data<int32_t>()[i] = static_cast<int32_t>(v);
    else
      out.data<int64_t>()[i] = static_cast<int64_t>(v);
  }
  return out;
}

// A slot read from a Keras file as float32: an integer where the rule stores one (either integer width).
Tensor from_keras_dtype(const Tensor& t) {
  if (t.dtype() == DType::f32) return t.clone();
  Tensor out(t.shape(), DType::f32);
  for (int64_t i = 0; i < t.numel(); ++i)
    out.data<float>()[i] =
        t.dtype() == DType::i32 ? static_cast<float>(t.data<int32_t>()[i]) : static_cast<float>(t.data<int64_t>()[i]);
  return out;
}

// The group at `path` and those above it; `name`: its "name" attribute (a vars group's, as Keras writes them).
void add_groups(H5Tree& t, const std::string& path, const std::optional<std::string>& name = std::nullopt) {
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    t.groups.insert(path.substr(0, pos));
  }
  if (name) t.attrs[path]["name"] = {*name};
}

// A scalar for a file, in memory of its own (not the device budget's: a save allocates nothing there).
template <typename T>
Tensor file_scalar(T v) {
  return Tensor::from_blob(new T(v), Shape{}, dtype_of<T>(), Device::cpu(), [](void* p) { delete static_cast<T*>(p); });
}

}  // namespace

H5Tree weights_to_tree(const Model& model) {
  if (model.layers().empty())
    throw InvalidArgument("save_weights: model '" + model.name() + "' is not built yet (fit it once or give an Input)");
  H5Tree t;
  t.groups.insert("");
  add_groups(t, "vars", model.name());
  add_groups(t, "layers");
  for (const auto& [key, layer, model_name] : walk(model)) {
    if (!layer) {  // a nested model's own group
      add_groups(t, "layers/" + key + "/vars", model_name);
      continue;
    }
    for (const KerasGroup& g : layer->keras_groups()) add_groups(t, "layers/" + key + "/" + g.path, g.name);
    std::map<std::string, int> index;  // per group
    for (const Weight& w : layer->weights()) {
      const std::string vars = "layers/" + key + "/" + w.keras_vars;
      if (!t.groups.count(vars))
        throw Error("layer '" + layer->name + "': weight '" + w.name + "' is in group '" + w.keras_vars +
                    "', which keras_groups() does not list");
      t.datasets[vars + "/" + std::to_string(index[w.keras_vars]++)] =  // float32 shares its memory: no copy
          to_keras_dtype(w.value, w.file_dtype);
    }
  }
  if (model.optimizer()) {
    const Optimizer& opt = *model.optimizer();
    const std::vector<std::vector<SlotView>> slots = optimizer_slot_views(model);
    // iterations, then learning_rate: a variable only where the rate is a number (a schedule is a function of
    // iterations, and Keras then keeps no learning_rate variable)
    std::vector<SlotView> inner{{file_scalar<int64_t>(opt.iterations())}};
    if (!opt.learning_rate_schedule()) inner.push_back({file_scalar<float>(opt.learning_rate())});
    const std::vector<const Weight*> tw = model.trainable_weights();
    for (const auto& [k, s] : nn::keras_slot_order(opt, slots.size())) {
      const SlotView& view = slots[k][s];
      const DType dtype = nn::slot_keras_dtype(opt, static_cast<int>(s), tw[k]->value.shape());
      if (dtype == DType::f32) {
        inner.push_back(view);
        continue;
      }
      // Keras keeps this slot as an integer (Adafactor's placeholders): a small converted copy.
      Tensor value = view.value.defined() ? view.value.to_device(Device::cpu()) : Tensor::zeros(view.shape);
      if (!view.value.defined() && view.fill != 0.0f)
        std::fill(value.data<float>(), value.data<float>() + value.numel(), view.fill);
      inner.push_back({to_keras_dtype(value, dtype)});
    }
    for (const float v : model.get_optimizer_variables())  // after the slots, as Keras builds them (Nadam's u_product)
      inner.push_back({file_scalar<float>(v)});
    auto write = [&](const std::string& group, const std::string& name, const std::vector<SlotView>& vars) {
      add_groups(t, group, name);
      for (size_t i = 0; i < vars.size(); ++i) {
        const std::string path = group + "/" + std::to_string(i);
        if (vars[i].value.defined())
          t.datasets[path] = vars[i].value;
        else
          t.filled[path] = {vars[i].shape, vars[i].fill};
      }
    };
    if (model.loss_scale() > 0.0f) {
      std::vector<SlotView> outer{{file_scalar<int64_t>(0)},
                                  {file_scalar<float>(0.0f)},
                                  {file_scalar<int64_t>(model.loss_scale_step_counter())},
                                  {file_scalar<float>(model.loss_scale())}};
      outer.insert(outer.end(), inner.begin(), inner.end());
      write("optimizer/vars", "loss_scale_optimizer", outer);
      write("optimizer/inner_optimizer/vars", ascii_lower(opt.name()), inner);
    } else {
      write("optimizer/vars", ascii_lower(opt.name()), inner);
    }
  }
  return t;
}

void weights_from_tree(Model& model, const H5Tree& tree, const std::string& label) {
  if (model.layers().empty())
    throw InvalidArgument("load_weights: model '" + model.name() + "' is not built yet (fit it once or give an Input)");
  // Keras 2 files keep the weights under model_weights/<layer name>/ (or at the root for weights-only).
  const bool keras2 = tree.attr("", "layer_names") || tree.attr("model_weights", "layer_names");
  // Each weight and the dataset it is read from; checked (H5Tree::info) before anything is read or assigned.
  std::vector<std::pair<Weight*, std::string>> assign;
  if (keras2) {
    const std::string root = tree.attr("model_weights", "layer_names") ? "model_weights" : "";
    const auto& names = tree.attrs.at(root).at("layer_names");
    std::vector<std::string> with_weights;
    for (const std::string& n : names) {
      const std::string g = root.empty() ? n : root + "/" + n;
      auto a = tree.attrs.find(g);
      if (a != tree.attrs.end() && a->second.count("weight_names") && !a->second.at("weight_names").empty())
        with_weights.push_back(n);
    }
    std::vector<Layer*> mine;
    for (const LayerPtr& l : model.layers())
      if (!l->weights().empty()) mine.push_back(l.get());
    if (mine.size() != with_weights.size())
      throw FormatError(label + ": the Keras 2 file has " + std::to_string(with_weights.size()) +
                        " layers with weights, the model has " + std::to_string(mine.size()) +
                        " (Keras 2 files load by layer order into the same architecture)");
    for (size_t i = 0; i < mine.size(); ++i) {
      const std::string g = root.empty() ? with_weights[i] : root + "/" + with_weights[i];
      const auto& wn = tree.attrs.at(g).at("weight_names");
      if (wn.size() != mine[i]->weights().size())
        throw FormatError(label + ": layer '" + with_weights[i] + "' has " + std::to_string(wn.size()) +
                          " weights in the file, layer '" + mine[i]->name + "' (" + mine[i]->class_name() + ") has " +
                          std::to_string(mine[i]->weights().size()));
      for (size_t j = 0; j < wn.size(); ++j) {
        const std::string path = g + "/" + wn[j];
        if (!tree.info(path)) throw FormatError(label + ": weight '/" + path + "' named in weight_names is missing");
        assign.emplace_back(&mine[i]->weights()[j], path);
      }
    }
  } else {
    if (!tree.groups.count("layers")) throw FormatError(label + ": no 'layers' group (not a Keras 3 weights file)");
    for (const auto& [key, layer, model_name] : walk(model)) {
      if (!layer) continue;  // a nested model's own group holds nothing
      // Weights per Keras group, in order ("vars", or a sub-object's such as "cell/vars").
      std::vector<std::pair<std::string, std::vector<Weight*>>> groups;
      for (Weight& w : layer->weights()) {
        auto g = std::find_if(groups.begin(), groups.end(), [&](const auto& p) { return p.first == w.keras_vars; });
        if (g == groups.end()) g = groups.insert(groups.end(), {w.keras_vars, {}});
        g->second.push_back(&w);
      }
      if (groups.empty()) groups.push_back({"vars", {}});  // no weights: the file must hold none either
      for (const auto& [sub, ws] : groups) {
        if (ws.empty() && !tree.groups.count("layers/" + key + "/" + sub)) continue;
        const std::string vars = "layers/" + key + "/" + sub;
        const std::vector<std::string> have = tree.children(vars);
        if (!tree.groups.count(vars))
          throw FormatError(label + ": layer '" + layer->name + "' (" + layer->class_name() + ") has no group '/" +
                            vars + "' (the file is for another architecture, or damaged)");
        if (have.size() != ws.size())
          throw FormatError(label + ": '/" + vars + "' holds " + std::to_string(have.size()) + " variables, layer '" +
                            layer->name + "' (" + layer->class_name() + ") has " + std::to_string(ws.size()) +
                            (sub == "vars" ? "" : " there"));
        for (size_t i = 0; i < ws.size(); ++i) {
          const std::string path = vars + "/" + std::to_string(i);
          if (!tree.info(path))
            throw FormatError(label + ": variable '/" + path + "' of layer '" + layer->name + "' is missing");
          assign.emplace_back(ws[i], path);
        }
      }
    }
  }
  for (const auto& [w, path] : assign) {
    const H5DatasetInfo v = *tree.info(path);
    // float32, or an integer where Keras keeps one (Weight::file_dtype: Normalization's count), either width.
    const bool dtype_ok =
        w->file_dtype == DType::f32 ? v.dtype == DType::f32 : v.dtype == DType::i32 || v.dtype == DType::i64;
    if (v.shape != w->value.shape() || !dtype_ok)
      throw FormatError(label + ": weight '" + w->name + "' is " + w->value.shape().to_string() +
                        (w->file_dtype == DType::f32 ? " float32" : " integer") + " in the model but " +
                        v.shape.to_string() + (v.dtype == DType::f32 ? "" : " integer") + " in the file");
  }
  // Optimizer state: checked in full before anything is assigned.
  std::vector<std::vector<std::string>> slot_paths;  // per trainable weight and slot: its dataset ("": not in the file)
  std::vector<float> optimizer_vars;
  int64_t iterations = -1;
  float lr = 0.0f;
  // Keras 3: optimizer/vars/<i>; Keras 2 (.h5): optimizer_weights/<weight_names[i]>.
  std::vector<std::string> paths;
  // Keras' LossScaleOptimizer: the inner optimizer's list, and the wrapper's dynamic_scale and step_counter.
  const bool scaled = !keras2 && tree.groups.count("optimizer/inner_optimizer/vars");
  float scale = 0.0f;
  int64_t scale_counter = 0;
  if (scaled) {
    const std::optional<H5DatasetInfo> counter = tree.info("optimizer/vars/2");
    const std::optional<H5DatasetInfo> dynamic = tree.info("optimizer/vars/3");
    if (!counter || counter->shape.numel() != 1 || counter->dtype != DType::i64 || !dynamic ||
        dynamic->shape.numel() != 1 || dynamic->dtype != DType::f32)
      throw FormatError(label +
                        ": '/optimizer/vars/2' and '/optimizer/vars/3' must be LossScaleOptimizer's "
                        "step_counter (int64) and dynamic_scale (float32)");
    scale_counter = tree.load("optimizer/vars/2", label).data<int64_t>()[0];
    scale = tree.load("optimizer/vars/3", label).data<float>()[0];
    if (!(scale > 0.0f) || !std::isfinite(scale) || scale_counter < 0)
      throw FormatError(label + ": LossScaleOptimizer's dynamic_scale " + std::to_string(scale) + " / step_counter " +
                        std::to_string(scale_counter) + " are not a positive scale and a count");
  }
  if (!keras2 && tree.groups.count("optimizer/vars")) {
    const std::string group = scaled ? "optimizer/inner_optimizer/vars" : "optimizer/vars";
    const size_t n = tree.children(group).size();
    for (size_t i = 0; i < n; ++i) paths.push_back(group + "/" + std::to_string(i));
  } else if (keras2 && tree.attrs.count("optimizer_weights") &&
             tree.attrs.at("optimizer_weights").count("weight_names")) {
    for (const std::string& n : tree.attrs.at("optimizer_weights").at("weight_names"))
      paths.push_back("optimizer_weights/" + n);
  }
  if (model.optimizer() && !paths.empty()) {
    const Optimizer& opt = *model.optimizer();
    const size_t have = paths.size();
    std::vector<const Weight*> tw = model.trainable_weights();
    const auto order = nn::keras_slot_order(opt, tw.size());
    optimizer_vars = model.get_optimizer_variables();  // absent from the file: initial values
    // iterations and learning_rate (iterations alone under a learning-rate schedule), then the slots
    const bool scheduled = opt.learning_rate_schedule() != nullptr;
    const size_t lead = scheduled ? 1 : 2;
    const size_t full = lead + order.size() + optimizer_vars.size();
    if (have != lead && have != full)
      throw FormatError(label + ": the file holds " + std::to_string(have) + " optimizer variables; " + opt.name() +
                        (scheduled ? " with a learning-rate schedule" : " with a fixed learning rate") +
                        " over this model's " + std::to_string(tw.size()) + " trainable weights has " +
                        std::to_string(full) + " (compile with the optimizer the file was saved with)");
    const std::optional<H5DatasetInfo> it = tree.info(paths[0]);
    if (!it || it->shape.numel() != 1 || it->dtype != DType::i64)
      throw FormatError(label + ": '/" + paths[0] + "' must be the optimizer's iteration count (an int64 scalar)");
    iterations = tree.load(paths[0], label).data<int64_t>()[0];
    if (!scheduled) {
      const std::optional<H5DatasetInfo> lrt = tree.info(paths[1]);
      if (!lrt || lrt->shape.numel() != 1 || lrt->dtype != DType::f32)
        throw FormatError(label + ": '/" + paths[1] + "' must be the optimizer's learning rate (a float32 scalar)");
      lr = tree.load(paths[1], label).data<float>()[0];
    }
    if (iterations < 0) throw FormatError(label + ": the optimizer's iteration count is negative");
    slot_paths.assign(tw.size(), std::vector<std::string>(static_cast<size_t>(opt.slots_per_variable())));
    if (have > lead) {
      size_t i = lead;
      for (const auto& [k, s] : order) {
        const std::string& path = paths[i++];
        const std::optional<H5DatasetInfo> v = tree.info(path);
        const Shape want = nn::slot_shape(opt, static_cast<int>(s), tw[k]->value.shape());
        const DType dtype = nn::slot_keras_dtype(opt, static_cast<int>(s), tw[k]->value.shape());
        const bool integer = dtype != DType::f32 && v && (v->dtype == DType::i32 || v->dtype == DType::i64);
        if (!v || v->shape != want || (v->dtype != DType::f32 && !integer) || tw[k]->value.dtype() != DType::f32)
          throw FormatError(label + ": optimizer variable '/" + path + "' should be " + want.to_string() + " " +
                            std::string(dtype_name(dtype)) + " (" + opt.name() + "'s " +
                            nn::held_slot(opt, static_cast<int>(s)).name + " of '" + tw[k]->name + "'), got " +
                            (v ? v->shape.to_string() : std::string("nothing")));
        slot_paths[k][s] = path;  // read into the slot's own memory once everything is checked
      }
      for (size_t j = 0; j < optimizer_vars.size(); ++j) {
        const std::string& path = paths[i++];
        const std::optional<H5DatasetInfo> v = tree.info(path);
        const bool scalar = v && v->shape.numel() == 1 && v->dtype == DType::f32;
        const float value = scalar ? tree.load(path, label).data<float>()[0] : 0.0f;
        if (!scalar || !std::isfinite(value))
          throw FormatError(label + ": optimizer variable '/" + path + "' should be " + opt.name() + "'s " +
                            nn::rule_state(opt).rule->variables[j].name + " (a finite float32 scalar), got " +
                            (v ? v->shape.to_string() : std::string("nothing")));
        optimizer_vars[j] = value;
      }
    }
  }
  // Everything checked: each weight read straight into its own memory.
  for (const auto& [w, path] : assign) {
    if (w->file_dtype == DType::f32) {
      tree.read_into(path, w->value, label);
      continue;
    }
    const Tensor f = from_keras_dtype(tree.load(path, label));  // a small integer weight (Normalization's count)
    std::memcpy(w->value.raw(), f.raw(), f.nbytes());
  }
  if (iterations >= 0) {
    // Each slot read straight into the optimizer's own slot (made where it does not exist yet: ProgramCache), or,
    // when the file holds none, set to the optimizer's initial values.
    nn::ProgramCache& programs = model.trainer().programs();
    programs.synchronize();  // queued steps read and write the slots
    const Optimizer& opt = *model.optimizer();
    const std::vector<const Weight*> tw = model.trainable_weights();
    for (size_t k = 0; k < tw.size(); ++k) {
      std::vector<Tensor>& live = *programs.optimizer_state().slots_of(*tw[k], /*create=*/true);
      for (size_t s = 0; s < live.size(); ++s) {
        const std::string& path = slot_paths[k][s];
        if (path.empty()) {  // absent from the file
          Tensor init = Tensor::full(live[s].shape(), nn::slot_initial_value(opt, static_cast<int>(s)));
          device_copy(live[s].raw(), live[s].device(), init.raw(), Device::cpu(), init.nbytes());
        } else if (tree.info(path)->dtype == DType::f32) {
          tree.read_into(path, live[s], label);
        } else {  // Keras keeps this slot as an integer (Adafactor's placeholders): small, converted
          const Tensor f = from_keras_dtype(tree.load(path, label));
          device_copy(live[s].raw(), live[s].device(), f.raw(), Device::cpu(), f.nbytes());
        }
      }
    }
    model.optimizer()->config().iterations = iterations;
    model.set_optimizer_variables(optimizer_vars);
    if (!model.optimizer()->learning_rate_schedule()) model.optimizer()->set_learning_rate(lr);
    // A model that trains without loss scaling takes the inner optimizer's state alone.
    if (scaled && model.loss_scale() > 0.0f) model.set_loss_scale_state(scale, scale_counter);
  }
}

}  // namespace tk::io::keras
