// What fit() over arrays and fit() over a Dataset share: the execution context, averaging logs, callbacks.
#pragma once
#include <string>
#include <vector>

#include "nn/compiler/programs.h"
#include "trainkit/nn/callbacks.h"
#include "trainkit/nn/model.h"

namespace tk::nn {

// The context a model's programs run with: its device (no stream or handles on the CPU) and the step's
// scalars (the optimizer's learning rate and iteration count as of now).
inline graph::ExecContext exec_context(Device device, uint64_t step, bool training, const Optimizer* opt) {
  graph::ExecContext ctx;
  ctx.device = device;
  ctx.training = training;
  ctx.scalars.step = step;
  if (opt) {
    ctx.scalars.learning_rate = opt->learning_rate();
    ctx.scalars.iterations = opt->iterations();
  }
  return ctx;
}

// Sample-weighted running means of the logs over an epoch (Keras weights each batch by its size).
// (Log names are copied once: a program may be evicted from the cache while the epoch goes on.)
struct Accumulator {
  std::vector<std::string> names;
  std::vector<double> sum;
  double count = 0;
  void add(Compiled& c, int64_t n) {
    if (names.size() != c.logs.size()) {
      names.clear();
      for (const auto& [name, id] : c.logs) names.push_back(name);
      sum.assign(c.logs.size(), 0.0);
    }
    for (size_t k = 0; k < c.logs.size(); ++k) sum[k] += double(c.program->output_scalar(c.logs[k].second)) * double(n);
    count += double(n);
  }
  void merge(const Accumulator& other) {  // another's batches (a data-parallel replica's), in order
    if (other.names.empty()) return;
    if (names.empty()) {
      names = other.names;
      sum.assign(names.size(), 0.0);
    }
    for (size_t k = 0; k < sum.size() && k < other.sum.size(); ++k) sum[k] += other.sum[k];
    count += other.count;
  }
  void write(Logs& logs) const {
    for (size_t k = 0; k < names.size(); ++k) logs.set(names[k], count > 0 ? sum[k] / count : 0.0);
  }
};

// History, the progress display (when verbose) and the user's callbacks, bound to the model and fit's
// parameters (fit.cpp).
std::vector<CallbackPtr> fit_callbacks(Model* model, const FitOptions& o, int64_t steps,
                                       const std::shared_ptr<History>& history);
// evaluate(verbose): "loss: 0.31 - accuracy: 0.89".
void print_logs(const Logs& logs);

}  // namespace tk::nn
