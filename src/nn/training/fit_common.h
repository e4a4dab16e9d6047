// What fit() over arrays and fit() over a Dataset share: the execution context, averaging logs, callbacks.
#pragma once
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "nn/compiler/programs.h"
#include "nn/training/lagged_logs.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/callbacks.h"
#include "trainkit/nn/model.h"

namespace tk::nn {

// InvalidArgument(message) unless ok: the passes' argument checks.
inline void require(bool ok, const std::string& message) {
  if (!ok) throw InvalidArgument(message);
}

// The options every fit checks, over arrays or a Dataset (each also checks its own).
inline void check_fit_options(const FitOptions& o) {
  require(o.epochs >= 0, "fit: epochs must be >= 0, got " + std::to_string(o.epochs));
  require(o.initial_epoch >= 0 && o.initial_epoch <= o.epochs,
          "fit: initial_epoch must be in [0, epochs], got " + std::to_string(o.initial_epoch));
  require(o.steps_per_epoch >= 0 && o.validation_steps >= 0, "fit: steps_per_epoch and validation_steps must be >= 0");
  require(o.verbose >= -1 && o.verbose <= 2,
          "fit: verbose must be -1 (auto), 0, 1 or 2, got " + std::to_string(o.verbose));
}

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

// The logs over an epoch: sample-weighted running means (Keras weights each batch by its size), and for Keras'
// stateful metrics (Precision, AUC, MeanIoU: nn/compiler/log_stats.h) the counts summed, the value computed from them
// when written. `sum` is flat: each log's `stats[k].width` values in turn.
// (Log names are copied once: a program may be evicted from the cache while the epoch goes on.)
// With `lagged` set (fit on a GPU, lagged_logs.h), add() only queues the program's log values; LaggedLogs::deliver
// adds them (add_values) one step later.
struct Accumulator {
  std::vector<std::string> names;
  std::vector<LogStat> stats;  // per name
  std::vector<double> sum;     // flat: per name, its width
  double count = 0;
  LaggedLogs* lagged = nullptr;
  // Names, stats and zero sums for the logs of `c` (which may have no log_stats: all means).
  void reset(const Compiled& c) {
    std::vector<std::string> n;
    for (const auto& [name, id] : c.logs) n.push_back(name);
    start(std::move(n), c.log_stats);
  }
  static size_t width(const std::vector<LogStat>& s) {
    size_t w = 0;
    for (const LogStat& st : s) w += static_cast<size_t>(st.width);
    return w;
  }
  void add(Compiled& c, int64_t n) {
    if (lagged) return lagged->add(c, n);
    if (names.size() != c.logs.size()) reset(c);
    thread_local std::vector<float> values;
    values.resize(sum.size());
    size_t at = 0;
    for (size_t k = 0; k < c.logs.size(); ++k) {
      const int w = stats[k].width;
      if (w == 1 && !stats[k].summed())
        values[at] = c.program->output_scalar(c.logs[k].second);
      else
        c.program->read_output(c.logs[k].second, values.data() + at, sizeof(float) * static_cast<size_t>(w));
      at += static_cast<size_t>(w);
    }
    add_values(names, stats, values.data(), n);
  }
  // One program's log values (as add() reads them, flat), read elsewhere.
  void add_values(const std::vector<std::string>& value_names, const std::vector<LogStat>& value_stats,
                  const float* values, int64_t n) {
    if (names.size() != value_names.size()) start(value_names, value_stats);
    size_t at = 0;
    for (size_t k = 0; k < names.size(); ++k) {
      const LogStat& st = stats[k];
      for (int i = 0; i < st.width; ++i, ++at)
        sum[at] += st.summed() ? double(values[at]) : double(values[at]) * double(n);
    }
    count += double(n);
  }
  void merge(const Accumulator& other) {  // another's batches (a data-parallel replica's), in order: counts sum
    if (other.names.empty()) return;
    if (names.empty()) start(other.names, other.stats);  // other.sum has width(other.stats) values
    for (size_t k = 0; k < sum.size() && k < other.sum.size(); ++k) sum[k] += other.sum[k];
    count += other.count;
  }
  void write(Logs& logs) const {
    size_t at = 0;
    for (size_t k = 0; k < names.size(); ++k) {
      const LogStat& st = k < stats.size() ? stats[k] : LogStat{};
      if (at + static_cast<size_t>(st.width) > sum.size()) break;
      if (st.summed())
        logs.set(names[k], finish_log(st, sum.data() + at));
      else
        logs.set(names[k], count > 0 ? sum[at] / count : 0.0);
      at += static_cast<size_t>(st.width);
    }
  }

 private:
  // Logs `n`, their stats `s` (a mean for each name past its end) and zero sums.
  void start(std::vector<std::string> n, const std::vector<LogStat>& s) {
    names = std::move(n);
    stats = s;
    stats.resize(names.size());
    sum.assign(width(stats), 0.0);
  }
};

// Rows of a pass's arrays: x[0]'s first dimension (0 without inputs or for a scalar).
inline int64_t rows_of(const std::vector<Tensor>& x) { return x.empty() || x[0].shape().rank() == 0 ? 0 : x[0].dim(0); }

// fit's lagged logs (lagged_logs.h) for a model whose programs `pc` are: null when the lag is 0 (the CPU: the loop
// reads each step's logs right after it, as it always did).
inline std::unique_ptr<LaggedLogs> make_lagged_logs(Device device, const ProgramCache& pc, bool replicated) {
  const int lag = log_lag(device, pc.scales_loss(), replicated);
  if (lag == 0) return nullptr;
  return std::make_unique<LaggedLogs>(lag, LaggedLogs::store_for(device, lag + 1));
}

// Delivers lagged batches: those a step behind (all false), or every pending one (the end of an epoch, a stop).
// For each, its logs go into acc, then `end_batch(batch)` (writes the logs, calls on_train_batch_end).
template <typename EndBatch>
void deliver_lagged(LaggedLogs* lagged, Accumulator& acc, bool all, EndBatch&& end_batch) {
  if (!lagged) return;
  while (all ? lagged->pending() : lagged->ready()) {
    end_batch(lagged->deliver(acc));
    lagged->delivered();
  }
}

// Declared in fit's epoch loop after end_batch: when an exception leaves the loop (a callback, the dataset or the
// staging, train_step), the batches that trained and whose logs were not read yet get their on_train_batch_end before
// it propagates, as with lag 0, where each was delivered right after its step. Not when the exception came from a
// delivery (a wait for a step's logs: the device failed; or on_train_batch_end itself: the callbacks are not called
// again after one threw). The step being queued when it was thrown is never delivered (its logs may be partial); a
// batch is delivered only after its own copies' event completed, so a step that failed on the device makes the waits
// fail, and a failure while delivering here ends the delivery quietly: the first exception is the one that
// propagates. The host store (lag forced on the CPU) never fails a wait.
template <typename EndBatch>
class DeliverOnUnwind {
 public:
  DeliverOnUnwind(LaggedLogs* lagged, Accumulator& acc, EndBatch& end_batch)
      : lagged_(lagged), acc_(acc), end_batch_(end_batch), exceptions_(std::uncaught_exceptions()) {}
  DeliverOnUnwind(const DeliverOnUnwind&) = delete;
  DeliverOnUnwind& operator=(const DeliverOnUnwind&) = delete;
  ~DeliverOnUnwind() {
    if (!lagged_ || std::uncaught_exceptions() <= exceptions_) return;  // the epoch ended normally: nothing pending
    lagged_->abandon_open();
    try {
      if (!lagged_->delivery_failed()) deliver_lagged(lagged_, acc_, true, end_batch_);
    } catch (...) {  // the exception already unwinding is the one the caller sees
    }
    lagged_->discard();
  }

 private:
  LaggedLogs* lagged_;
  Accumulator& acc_;
  EndBatch& end_batch_;
  int exceptions_;
};

// History, the progress display (when verbose) and the user's callbacks, bound to the model and fit's
// parameters (fit.cpp).
std::vector<CallbackPtr> fit_callbacks(Model* model, const FitOptions& o, int64_t steps,
                                       const std::shared_ptr<History>& history);
// evaluate(verbose): "loss: 0.31 - accuracy: 0.89".
void print_logs(const Logs& logs);

}  // namespace tk::nn
