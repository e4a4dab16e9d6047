// Keras callbacks in tk.fit: trainkit's callback interface calling a Python dispatcher (trainkit/_callbacks.py's
// KerasCallbacks), which calls the Keras callbacks' methods with Keras-shaped logs and keeps the Keras model in step
// with the trainkit model where they need it (weights, learning rate, stop_training).
//
// Each call re-acquires the GIL (fit runs with it released) for that call alone. The batch hooks are called only when
// a callback has one (flags below), so a fit whose callbacks read epoch logs pays nothing per step. A Python exception
// raised by a callback leaves fit at once as that exception (nb::python_error: trainkit's loop unwinds, delivering
// the batches that trained first), as it leaves Keras' fit.
#pragma once
#include <nanobind/nanobind.h>

#include <cstdint>

#include "trainkit/nn/callbacks.h"

namespace tkpy {

namespace nb = nanobind;

class PyCallbacks : public tk::Callback {
 public:
  // `dispatcher` has on_train_begin(params, logs), on_epoch_begin(epoch, logs), on_train_batch_begin(batch, logs),
  // on_train_batch_end(batch, logs), on_epoch_end(epoch, logs) and on_train_end(logs), each returning True when the
  // Keras model asked training to stop (model.stop_training = True).
  PyCallbacks(nb::object dispatcher, bool batch_begin, bool batch_end);
  // Destroyed with the GIL held (Bridge::fit keeps a reference until it returns).
  ~PyCallbacks() override;

  void on_train_begin(const tk::Logs& logs) override;
  void on_train_end(const tk::Logs& logs) override;
  void on_epoch_begin(int epoch, const tk::Logs& logs) override;
  void on_epoch_end(int epoch, const tk::Logs& logs) override;
  void on_train_batch_begin(int64_t batch, const tk::Logs& logs) override;
  void on_train_batch_end(int64_t batch, const tk::Logs& logs) override;

 private:
  void stop_if(const nb::object& result);
  nb::object dispatcher_;
  bool batch_begin_, batch_end_;
};

// Keras' logs: a dict of Python floats, in trainkit's order (loss, metrics, then val_*).
nb::dict logs_dict(const tk::Logs& logs);

}  // namespace tkpy
