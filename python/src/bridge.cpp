#include "bridge.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>

#include <sstream>

#include "errors.h"
#include "io/keras_internal.h"

namespace tkpy {

namespace {

// Checks for Ctrl-C at each step boundary (the GIL is taken for the check alone). A pending signal stops training
// after this step, as a callback's stop_training does; fit then raises the KeyboardInterrupt.
class SignalCheck : public tk::Callback {
 public:
  bool interrupted = false;
  void on_train_batch_end(int64_t, const tk::Logs&) override {
    nb::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) {
      interrupted = true;
      model->stop_training = true;
    }
  }
};

tk::Device parse_device(const std::string& text) {
  const auto colon = text.find(':');
  const std::string kind = text.substr(0, colon);
  int index = 0;
  if (colon != std::string::npos) {
    try {
      index = std::stoi(text.substr(colon + 1));
    } catch (const std::exception&) {
      throw tk::InvalidArgument("device '" + text + "': the index after ':' is not a number (cpu, cuda, cuda:1)");
    }
  }
  if (kind == "cpu") return tk::Device::cpu(index);
  if (kind == "cuda" || kind == "gpu") return tk::Device::cuda(index);
  throw tk::InvalidArgument("device '" + text + "' is not one trainkit knows (cpu, cuda, cuda:N)");
}

nb::dict logs_dict(const tk::Logs& logs) {
  nb::dict d;
  for (const auto& [k, v] : logs.items()) d[k.c_str()] = v;
  return d;
}

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

nb::tuple Bridge::fit(const std::vector<HostArray>& x, const std::vector<HostArray>& y, const FitArgs& args,
                      const std::optional<std::pair<std::vector<HostArray>, std::vector<HostArray>>>& validation_data) {
  tk::FitOptions o;
  o.batch_size = args.batch_size;
  o.epochs = args.epochs;
  o.verbose = args.verbose;
  o.validation_split = args.validation_split;
  o.shuffle = args.shuffle;
  o.initial_epoch = args.initial_epoch;
  o.seed = args.seed;
  if (validation_data)
    o.validation_data.emplace(tensor_views(validation_data->first, "validation_data"),
                              tensor_views(validation_data->second, "validation_data"));
  auto signals = std::make_shared<SignalCheck>();
  o.callbacks.push_back(signals);
  const std::vector<tk::Tensor> xs = tensor_views(x, "fit: x"), ys = tensor_views(y, "fit: y");
  tk::History h;
  {
    nb::gil_scoped_release release;
    h = model_->fit(xs, ys, o);
  }
  if (signals->interrupted) throw Interrupted();
  nb::dict history;
  for (const auto& [k, v] : h.history) history[k.c_str()] = nb::cast(v);
  nb::dict params;
  params["verbose"] = args.verbose;
  params["epochs"] = args.epochs;
  params["steps"] = signals->params.steps;
  return nb::make_tuple(nb::cast(h.epoch), history, params);
}

nb::dict Bridge::evaluate(const std::vector<HostArray>& x, const std::vector<HostArray>& y, int64_t batch_size) {
  const std::vector<tk::Tensor> xs = tensor_views(x, "evaluate: x"), ys = tensor_views(y, "evaluate: y");
  tk::Logs logs;
  {
    nb::gil_scoped_release release;
    logs = model_->evaluate(xs, ys, {.batch_size = batch_size});
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

std::string Bridge::summary() const {
  std::ostringstream os;
  model_->summary(os);
  return os.str();
}

}  // namespace tkpy
