// tk::call_model: a model called like a layer (Keras' `base_model(x, training=False)`). The model's layer calls are
// replayed on the caller's tensors, each new node pointing at one shared NestedCall record (trainkit/nn/layer.h).
#include <functional>
#include <map>

#include "nn/layers/input_layer.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/model.h"

namespace tk {

std::vector<KerasTensor> call_model(const std::shared_ptr<const Model>& model, const std::vector<KerasTensor>& inputs,
                                    std::optional<bool> training) {
  if (!model) throw InvalidArgument("call_model: the model is null");
  const std::string who = "model '" + model->name() + "'";
  if (model->inputs().empty()) throw InvalidArgument(who + " is not built (it has no Inputs), so it cannot be called");
  if (inputs.size() != model->inputs().size())
    throw InvalidArgument(who + " takes " + std::to_string(model->inputs().size()) + " input(s), called with " +
                          std::to_string(inputs.size()));
  auto call = std::make_shared<NestedCall>();
  call->model = model;
  call->inputs = inputs;
  call->training = training;
  std::map<const KerasTensor::NodeData*, std::vector<KerasTensor>> made;  // per node of the model: its outputs here
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Shape& want = model->inputs()[i].shape();
    if (!inputs[i].node) throw InvalidArgument(who + ": input " + std::to_string(i) + " is an empty KerasTensor");
    if (inputs[i].shape().sample_shape() != want.sample_shape())
      throw InvalidArgument(who + ": input " + std::to_string(i) + " has shape " + inputs[i].shape().to_string() +
                            ", the model's Input is " + want.to_string());
    made[model->inputs()[i].node.get()] = {inputs[i]};
  }
  std::function<KerasTensor(const KerasTensor&)> replay = [&](const KerasTensor& t) -> KerasTensor {
    auto found = made.find(t.node.get());
    if (found != made.end()) return found->second.at(static_cast<size_t>(t.index));
    if (t.node->nested)
      throw Unsupported(who + " calls model '" + t.node->nested->model->name() +
                        "' like a layer: trainkit calls models nested one level deep, not models that nest others");
    if (t.node->inputs.empty())
      throw InvalidArgument(who + ": layer '" + t.node->layer->name + "' is an Input the model does not list");
    std::vector<KerasTensor> xs;
    for (const KerasTensor& x : t.node->inputs) xs.push_back(replay(x));
    std::vector<KerasTensor> outs = t.node->layer->call_all(xs, t.node->call_options);
    outs[0].node->nested = call;
    made[t.node.get()] = outs;
    return outs.at(static_cast<size_t>(t.index));
  };
  std::vector<KerasTensor> outs;
  for (const KerasTensor& o : model->outputs()) {
    outs.push_back(replay(o));
    if (!outs.back().node->nested)  // an output that is an input passed through: no layer to record it on
      throw Unsupported(who + ": output '" + o.node->layer->name + "' is one of its inputs; nothing to call");
    call->outputs.emplace_back(outs.back().node.get(), outs.back().index);
  }
  return outs;
}

KerasTensor call_model(const std::shared_ptr<const Model>& model, const KerasTensor& input,
                       std::optional<bool> training) {
  std::vector<KerasTensor> outs = call_model(model, std::vector<KerasTensor>{input}, training);
  if (outs.size() != 1)
    throw InvalidArgument("model '" + model->name() + "' has " + std::to_string(outs.size()) +
                          " outputs: call it with a list of inputs to get them all");
  return outs[0];
}

}  // namespace tk
