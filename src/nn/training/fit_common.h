// What fit() over arrays and fit() over a Dataset share: binding a batch to a program, averaging logs.
#pragma once
#include <string>
#include <vector>

#include "nn/training/batching.h"
#include "nn/compiler/programs.h"
#include "trainkit/nn/callbacks.h"
#include "trainkit/nn/model.h"

namespace tk::nn {

// Binds one batch (rows idx[0..n) or [begin, begin+n)) to a program's inputs.
inline void bind_batch(Compiled& c, const std::vector<Tensor>& x, const std::vector<Tensor>* y, const int64_t* idx,
                       int64_t begin, int64_t n) {
  graph::Program& p = *c.program;
  for (size_t i = 0; i < c.x.size(); ++i)
    if (p.plan().offset[static_cast<size_t>(c.x[i])] >= 0) gather_rows(x[i], idx, begin, n, p.data(c.x[i]), DType::f32);
  if (y)
    for (size_t j = 0; j < c.y.size(); ++j) gather_rows((*y)[j], idx, begin, n, p.data(c.y[j]), c.y_dtype[j]);
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
    for (size_t k = 0; k < c.logs.size(); ++k) sum[k] += double(*c.program->data_f(c.logs[k].second)) * double(n);
    count += double(n);
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
