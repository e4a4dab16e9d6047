#include "bridge.h"

#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>

#include <sstream>

#include "callbacks.h"
#include "errors.h"
#include "io/keras_internal.h"
#include "runtime.h"
#include "trainkit/io/keras.h"
#include "trainkit/io/tensorboard.h"
#include "trainkit/nn/keras_callbacks.h"

namespace tkpy {

namespace {

// Checks for Ctrl-C at each step boundary (the GIL is taken for the check alone). A pending signal ends fit there,
// as a KeyboardInterrupt ends Keras' fit: no validation, no further callback (BackupAndRestore keeps its last backup
// instead of deleting it at on_train_end); the model holds the weights of the steps that finished. It is the first
// callback, so it runs before the Keras callbacks' batch hooks.
class SignalCheck : public tk::Callback {
 public:
  void on_train_batch_end(int64_t, const tk::Logs&) override {
    nb::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) throw Interrupted();  // the KeyboardInterrupt is set: the translator raises it
  }
};

}  // namespace

Bridge::Bridge(const std::string& config_json, const std::string& label, bool compile) {
  using namespace tk::io::keras;
  const json config = parse_json(config_json, label);
  model_ = model_from_json(config, label);
  if (!compile) return;
  // An uncompiled Keras model's config has an empty compile_config.
  const auto cc = config.find("compile_config");
  if (cc == config.end() || cc->is_null() || cc->empty())
    throw tk::InvalidArgument(label + " is not compiled: call model.compile(optimizer=..., loss=...) first");
  compile_from_json(*model_, *cc, label);
}

std::unique_ptr<Bridge> Bridge::load(const std::string& path, bool compile) {
  return std::unique_ptr<Bridge>(new Bridge(tk::models::load_model(path, compile)));
}

void Bridge::compile(const std::string& compile_config_json, const std::string& label) {
  using namespace tk::io::keras;
  compile_from_json(*model_, parse_json(compile_config_json, label), label);
}

std::string Bridge::to_json() const { return tk::io::keras::model_to_json(*model_).dump(); }

void Bridge::set_device(const std::string& device) { model_->set_device(parse_device(device)); }

nb::list Bridge::weight_layout() const {
  nb::list out;
  for (const tk::LayerPtr& layer : model_->layers()) {
    if (layer->weights().empty()) continue;
    nb::list shapes;
    for (const tk::Weight& w : layer->weights()) {
      nb::list dims;
      for (int64_t d : w.value.shape().dims()) dims.append(d);
      shapes.append(nb::tuple(dims));
    }
    out.append(nb::make_tuple(layer->name, shapes));
  }
  return out;
}

std::vector<nb::object> Bridge::get_weights() const {
  std::vector<nb::object> out;
  for (const tk::Tensor& t : model_->get_weights()) out.push_back(to_numpy(t));
  return out;
}

void Bridge::set_weights(const std::vector<HostArray>& weights) {
  model_->set_weights(tensor_views(weights, "set_weights"));
}

nb::object Bridge::optimizer_variables() const {
  if (!model_->optimizer()) return nb::none();
  // The same tree a .keras file's model.weights.h5 is written from: optimizer/vars/<i> in Keras' order.
  const tk::io::H5Tree tree = tk::io::keras::weights_to_tree(*model_);
  if (tree.groups.count("optimizer/inner_optimizer/vars")) return nb::none();
  nb::list out;
  for (size_t i = 0;; ++i) {
    const std::string path = "optimizer/vars/" + std::to_string(i);
    if (const tk::Tensor* t = tree.dataset(path)) {
      out.append(to_numpy(t->clone()));
    } else if (auto it = tree.filled.find(path); it != tree.filled.end()) {
      out.append(to_numpy(tk::Tensor::full(it->second.first, it->second.second)));
    } else {
      break;
    }
  }
  return out;
}

void Bridge::set_optimizer_variables(const std::vector<HostArray>& values) {
  // A .keras file's weights tree for this model, its optimizer/vars replaced by `values`, read back by the code that
  // loads a .keras file: every count, shape and dtype is checked before anything is assigned.
  tk::io::H5Tree tree = tk::io::keras::weights_to_tree(*model_);
  for (auto it = tree.datasets.begin(); it != tree.datasets.end();) {
    if (it->first.rfind("optimizer/", 0) == 0) {
      it = tree.datasets.erase(it);
    } else {
      it->second = it->second.clone();  // the tree shares the weights' memory: read back from a copy
      ++it;
    }
  }
  tree.filled.clear();
  for (size_t i = 0; i < values.size(); ++i)
    tree.datasets["optimizer/vars/" + std::to_string(i)] = tensor_view(values[i], "optimizer variables");
  tk::io::keras::weights_from_tree(*model_, tree, "the Keras optimizer's variables");
}

tk::FitOptions Bridge::fit_options(const FitArgs& args, nb::object callbacks,
                                   std::shared_ptr<PyCallbacks>& keras_callbacks,
                                   std::shared_ptr<tk::Callback>& signals) const {
  tk::FitOptions o;
  o.batch_size = args.batch_size;
  o.epochs = args.epochs;
  o.verbose = args.verbose;
  o.validation_split = args.validation_split;
  o.shuffle = args.shuffle;
  o.initial_epoch = args.initial_epoch;
  o.steps_per_epoch = args.steps_per_epoch;
  o.validation_steps = args.validation_steps;
  o.seed = args.seed;
  o.class_weight = args.class_weight;
  signals = std::make_shared<SignalCheck>();
  o.callbacks.push_back(signals);
  // A backup is saved before the Keras callbacks see the epoch: one of them raising leaves that epoch's backup.
  if (!args.backup_dir.empty()) {
    if (args.backup_save_freq < 0)
      throw tk::InvalidArgument("backup_save_freq must be \"epoch\" or a positive number of steps, got " +
                                std::to_string(args.backup_save_freq));
    o.callbacks.push_back(std::make_shared<tk::callbacks::BackupAndRestore>(
        args.backup_dir, tk::callbacks::BackupAndRestoreOptions{.save_freq = args.backup_save_freq,
                                                                .delete_checkpoint = !args.keep_backup}));
  }
  if (!callbacks.is_none()) {
    keras_callbacks = std::make_shared<PyCallbacks>(callbacks, nb::cast<bool>(callbacks.attr("batch_begin")),
                                                    nb::cast<bool>(callbacks.attr("batch_end")));
    o.callbacks.push_back(keras_callbacks);
  }
  if (!args.tensorboard_dir.empty())
    o.callbacks.push_back(std::make_shared<tk::callbacks::TensorBoard>(
        args.tensorboard_dir, tk::callbacks::TensorBoardOptions{.histogram_freq = args.tensorboard_histogram_freq,
                                                                .update_freq = args.tensorboard_update_freq}));
  return o;
}

nb::tuple Bridge::history_tuple(const tk::History& h, const FitArgs& args, const tk::Callback& signals) const {
  nb::dict history;
  for (const auto& [k, v] : h.history) history[k.c_str()] = nb::cast(v);
  nb::dict params;
  params["verbose"] = args.verbose;
  params["epochs"] = args.epochs;
  params["steps"] = signals.params.steps;
  return nb::make_tuple(nb::cast(h.epoch), history, params);
}

nb::tuple Bridge::fit(const std::vector<HostArray>& x, const std::vector<HostArray>& y, const FitArgs& args,
                      const std::optional<std::pair<std::vector<HostArray>, std::vector<HostArray>>>& validation_data,
                      nb::object callbacks, const std::optional<HostArray>& sample_weight,
                      const std::optional<HostArray>& validation_sample_weight) {
  // Kept here as well as in the options: the dispatcher is released with the GIL held, when this function returns.
  std::shared_ptr<PyCallbacks> keras_callbacks;
  std::shared_ptr<tk::Callback> signals;
  tk::FitOptions o = fit_options(args, std::move(callbacks), keras_callbacks, signals);
  if (validation_data)
    o.validation_data.emplace(tensor_views(validation_data->first, "validation_data"),
                              tensor_views(validation_data->second, "validation_data"));
  if (sample_weight) o.sample_weight = tensor_view(*sample_weight, "fit: sample_weight");
  if (validation_sample_weight)
    o.validation_sample_weight = tensor_view(*validation_sample_weight, "fit: validation_data sample_weight");
  const std::vector<tk::Tensor> xs = tensor_views(x, "fit: x"), ys = tensor_views(y, "fit: y");
  tk::History h;
  {
    nb::gil_scoped_release release;
    h = model_->fit(xs, ys, o);
  }
  return history_tuple(h, args, *signals);
}

nb::tuple Bridge::fit_dataset(const tk::data::Dataset& dataset, const FitArgs& args,
                              const std::optional<tk::data::Dataset>& validation, nb::object callbacks) {
  std::shared_ptr<PyCallbacks> keras_callbacks;
  std::shared_ptr<tk::Callback> signals;
  tk::FitOptions o = fit_options(args, std::move(callbacks), keras_callbacks, signals);
  o.validation_dataset = validation;
  tk::History h;
  {
    nb::gil_scoped_release release;
    h = model_->fit(dataset, o);
  }
  return history_tuple(h, args, *signals);
}

nb::dict Bridge::evaluate_dataset(const tk::data::Dataset& dataset) {
  tk::Logs logs;
  {
    nb::gil_scoped_release release;
    logs = model_->evaluate(dataset);
  }
  return logs_dict(logs);
}

std::vector<nb::object> Bridge::predict_dataset(const tk::data::Dataset& dataset) {
  std::vector<tk::Tensor> outs;
  {
    nb::gil_scoped_release release;
    outs = model_->predict(dataset);
  }
  std::vector<nb::object> out;
  for (const tk::Tensor& t : outs) out.push_back(to_numpy(t));
  return out;
}

nb::dict Bridge::evaluate(const std::vector<HostArray>& x, const std::vector<HostArray>& y, int64_t batch_size,
                          const std::optional<HostArray>& sample_weight) {
  const std::vector<tk::Tensor> xs = tensor_views(x, "evaluate: x"), ys = tensor_views(y, "evaluate: y");
  tk::EvaluateOptions o{.batch_size = batch_size};
  if (sample_weight) o.sample_weight = tensor_view(*sample_weight, "evaluate: sample_weight");
  tk::Logs logs;
  {
    nb::gil_scoped_release release;
    logs = model_->evaluate(xs, ys, o);
  }
  return logs_dict(logs);
}

std::vector<nb::object> Bridge::predict(const std::vector<HostArray>& x, int64_t batch_size) {
  const std::vector<tk::Tensor> xs = tensor_views(x, "predict: x");
  std::vector<tk::Tensor> outs;
  {
    nb::gil_scoped_release release;
    outs = model_->predict(xs, batch_size);
  }
  std::vector<nb::object> out;
  for (const tk::Tensor& t : outs) out.push_back(to_numpy(t));
  return out;
}

float Bridge::learning_rate() const {
  if (!model_->optimizer()) throw tk::InvalidArgument("learning_rate: the model is not compiled");
  return model_->optimizer()->learning_rate();
}

void Bridge::set_learning_rate(float lr) {
  if (!model_->optimizer()) throw tk::InvalidArgument("set_learning_rate: the model is not compiled");
  model_->optimizer()->set_learning_rate(lr);
}

bool Bridge::has_learning_rate_schedule() const {
  return model_->optimizer() && model_->optimizer()->learning_rate_schedule() != nullptr;
}

std::string Bridge::summary() const {
  std::ostringstream os;
  model_->summary(os);
  return os.str();
}

}  // namespace tkpy
