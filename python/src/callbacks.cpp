#include "callbacks.h"

#include <utility>

#include "trainkit/nn/model.h"

namespace tkpy {

nb::dict logs_dict(const tk::Logs& logs) {
  nb::dict d;
  for (const auto& [k, v] : logs.items()) d[k.c_str()] = v;
  return d;
}

PyCallbacks::PyCallbacks(nb::object dispatcher, bool batch_begin, bool batch_end)
    : dispatcher_(std::move(dispatcher)), batch_begin_(batch_begin), batch_end_(batch_end) {}

PyCallbacks::~PyCallbacks() = default;

void PyCallbacks::stop_if(const nb::object& result) {
  if (nb::cast<bool>(result)) model->stop_training = true;
}

void PyCallbacks::on_train_begin(const tk::Logs& logs) {
  nb::gil_scoped_acquire gil;
  nb::dict p;  // Keras' params: what model.fit passes its callbacks (set_params)
  p["verbose"] = params.verbose;
  p["epochs"] = params.epochs;
  p["steps"] = params.steps;
  stop_if(dispatcher_.attr("on_train_begin")(p, logs_dict(logs)));
}

void PyCallbacks::on_train_end(const tk::Logs& logs) {
  nb::gil_scoped_acquire gil;
  stop_if(dispatcher_.attr("on_train_end")(logs_dict(logs)));
}

void PyCallbacks::on_epoch_begin(int epoch, const tk::Logs& logs) {
  nb::gil_scoped_acquire gil;
  stop_if(dispatcher_.attr("on_epoch_begin")(epoch, logs_dict(logs)));
}

void PyCallbacks::on_epoch_end(int epoch, const tk::Logs& logs) {
  nb::gil_scoped_acquire gil;
  stop_if(dispatcher_.attr("on_epoch_end")(epoch, logs_dict(logs)));
}

void PyCallbacks::on_train_batch_begin(int64_t batch, const tk::Logs& logs) {
  if (!batch_begin_) return;
  nb::gil_scoped_acquire gil;
  stop_if(dispatcher_.attr("on_train_batch_begin")(batch, logs_dict(logs)));
}

void PyCallbacks::on_train_batch_end(int64_t batch, const tk::Logs& logs) {
  if (!batch_end_) return;
  nb::gil_scoped_acquire gil;
  stop_if(dispatcher_.attr("on_train_batch_end")(batch, logs_dict(logs)));
}

}  // namespace tkpy
