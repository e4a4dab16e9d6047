// Models nested in a Functional model's config (Keras' fine-tuning pattern: `x = base_model(inputs, training=False)`):
// the nested model is built from its own config and called on the outer tensors with tk::call_model, so the outer
// graph holds its layers (trained, planned and fused with the rest), and the nodes remember the call for saving.
#include <string>
#include <vector>

#include "io/keras_internal.h"
#include "trainkit/core/error.h"

namespace tk::io::keras {

bool is_nested_model(const json& layer) {
  if (!layer.is_object() || !layer.contains("class_name") || !layer["class_name"].is_string()) return false;
  const std::string cls = layer["class_name"].get<std::string>();
  return cls == "Functional" || cls == "Sequential" || cls == "Model";
}

std::shared_ptr<const Model> nested_model_from_json(const json& obj, const std::string& label) {
  const std::string name = obj.contains("config") && obj["config"].is_object() && obj["config"].contains("name") &&
                                   obj["config"]["name"].is_string()
                               ? obj["config"]["name"].get<std::string>()
                               : std::string("?");
  std::shared_ptr<Model> model = model_from_json(obj, label + ": nested model '" + name + "'");
  // Keras: a model's trainable=False freezes every layer in it, whatever each layer's own flag says.
  if (obj["config"].contains("trainable") && obj["config"]["trainable"].is_boolean() &&
      !obj["config"]["trainable"].get<bool>())
    for (const LayerPtr& l : model->layers()) l->trainable = false;
  return model;
}

std::vector<KerasTensor> call_nested_model(const std::shared_ptr<const Model>& model, const json* inbound,
                                           const std::string& label,
                                           const std::function<KerasTensor(const json&, const std::string&)>& resolve) {
  const std::string who = label + ": nested model '" + model->name() + "'";
  if (!inbound || !inbound->is_array() || inbound->empty())
    throw FormatError(who + " has no inbound_nodes (it is never called)");
  if (model->outputs().size() != 1)
    throw Unsupported(who + " has " + std::to_string(model->outputs().size()) +
                      " outputs; trainkit reads nested models with one output");
  std::vector<KerasTensor> out;  // one per call
  for (const json& node : *inbound) {
    std::vector<KerasTensor> xs;
    std::optional<bool> training;
    if (node.is_array()) {  // Keras 2: [[layer, node, tensor, kwargs], ...]
      for (const json& t : node) xs.push_back(resolve(t, model->name()));
    } else {
      if (!node.is_object() || !node.contains("args") || !node["args"].is_array() || node["args"].empty())
        throw FormatError(who + ": an inbound node has no args");
      const json& args = node["args"];
      if (args[0].is_array())
        for (const json& t : args[0]) xs.push_back(resolve(t, model->name()));
      else
        for (const json& t : args) xs.push_back(resolve(t, model->name()));
      if (node.contains("kwargs") && node["kwargs"].is_object()) {
        for (const auto& [key, v] : node["kwargs"].items()) {
          if (v.is_null()) continue;
          if (key == "training" && v.is_boolean()) {
            training = v.get<bool>();
            continue;
          }
          throw Unsupported(who + ": the call argument '" + key + "' = " + v.dump().substr(0, 120) +
                            " is not supported by trainkit");
        }
      }
    }
    try {
      out.push_back(call_model(model, xs, training).at(0));
    } catch (const InvalidArgument& e) {
      throw FormatError(who + ": " + e.what());
    }
  }
  return out;
}

}  // namespace tk::io::keras
