// fit / evaluate / predict / train_on_batch: the loops around compiled programs.
#include <unistd.h>

#include <algorithm>
#include <functional>

#include "nn/compiler/programs.h"
#include "nn/distribute/mpi_collective.h"
#include "nn/distribute/replicated_eval.h"
#include "nn/distribute/strategy_state.h"
#include "nn/layers/context.h"
#include "nn/training/array_batches.h"
#include "nn/training/batching.h"
#include "nn/training/fit_common.h"
#include "nn/training/sample_weights.h"
#include "nn/training/staging.h"
#include "trainkit/core/error.h"
#include "trainkit/runtime/memory.h"

namespace tk {

using nn::require;

History nn::Trainer::fit(const std::vector<Tensor>& x_all, const std::vector<Tensor>& y_all, FitOptions o) {
  check_compiled("fit");
  nn::check_fit_options(o);
  require(o.batch_size > 0 || o.batch_size == kAutoBatchSize,
          "fit: batch_size must be a positive integer or tk::kAutoBatchSize, got " + std::to_string(o.batch_size));
  require(
      o.micro_batch_size >= 0 || o.micro_batch_size == kAutoBatchSize,
      "fit: micro_batch_size must be >= 0 (0: off) or tk::kAutoBatchSize, got " + std::to_string(o.micro_batch_size));
  require(o.auto_batch_cap > 0, "fit: auto_batch_cap must be positive");
  require(o.validation_split >= 0.0f && o.validation_split < 1.0f,
          "fit: validation_split must be in [0, 1), got " + std::to_string(o.validation_split));
  model_.ensure_built(x_all);
  check_data(x_all, &y_all, "fit");
  // Keras' sample_weight / class_weight: per-row weights, carried after the targets (nn/training/sample_weights.h).
  require(
      !o.sample_weight || o.class_weight.empty(),
      "fit: give class_weight or sample_weight, not both (Keras: \"You cannot `class_weight` and `sample_weight` at "
      "the same time\")");
  std::vector<Tensor> y_weighted = y_all;
  const int64_t n_all = rows_of(x_all);
  if (o.sample_weight) {
    nn::check_sample_weight(model_, *o.sample_weight, n_all, "fit");
    y_weighted.push_back(*o.sample_weight);
  } else if (!o.class_weight.empty()) {
    y_weighted.push_back(nn::class_weight_to_sample_weights(model_, y_all[0], o.class_weight, "fit"));
  }
  const bool weighted = y_weighted.size() > y_all.size();
  require(!o.validation_sample_weight || o.validation_data,
          "fit: validation_sample_weight weights validation_data's rows: give validation_data too");

  // Validation data: given, or the last fraction of the arrays before shuffling (Keras' rule).
  std::vector<Tensor> x = x_all, y = y_weighted, vx, vy;
  if (o.validation_data) {
    vx = o.validation_data->first;
    vy = o.validation_data->second;
    check_data(vx, &vy, "fit (validation_data)");
    if (o.validation_sample_weight) {
      nn::check_sample_weight(model_, *o.validation_sample_weight, rows_of(vx), "fit (validation_data)");
      vy.push_back(*o.validation_sample_weight);
    }
  } else if (o.validation_split > 0.0f) {
    const auto split = static_cast<int64_t>(std::ceil(static_cast<double>(n_all) * (1.0 - o.validation_split)));
    require(split > 0 && split < n_all, "fit: validation_split " + std::to_string(o.validation_split) + " of " +
                                            std::to_string(n_all) +
                                            " samples leaves an empty training or validation set");
    for (size_t i = 0; i < x.size(); ++i) {
      vx.push_back(x_all[i].slice_rows(split, n_all));
      x[i] = x_all[i].slice_rows(0, split);
    }
    for (size_t j = 0; j < y.size(); ++j) {  // the weights too: Keras splits every array (class weights: fit only)
      if (j < y_all.size() || o.sample_weight) vy.push_back(y_weighted[j].slice_rows(split, n_all));
      y[j] = y_weighted[j].slice_rows(0, split);
    }
  }
  const int64_t n = rows_of(x);
  require(n > 0, "fit: no training samples");
  int64_t batch = std::min(o.batch_size, n);
  // The largest that fits; under a strategy, per replica on each one's own budget (nn/distribute/auto_batch.cpp).
  if (o.batch_size == kAutoBatchSize) batch = auto_batch_size(std::min(o.auto_batch_cap, n), o.verbose != 0);
  const int64_t steps = o.steps_per_epoch > 0 ? o.steps_per_epoch : (n + batch - 1) / batch;
  int64_t micro = o.micro_batch_size;
  if (micro == kAutoBatchSize) micro = auto_micro_batch_size(batch, o.verbose != 0);
  if (micro >= batch) micro = 0;  // a micro-batch as large as the batch is a plain step

  uint64_t seed = o.seed ? o.seed : nn::next_seed();
  if (strategy_ && strategy_->mpi) seed = strategy_->mpi->broadcast(seed, "shuffle seed");  // one shuffle everywhere
  nn::ArrayBatches source(x, &y, batch, steps, o.shuffle, seed);
  std::function<Logs()> validate;
  if (!vx.empty())
    validate = [&] {
      const nn::SampleWeightScope val_weights(*this, vy.size() > y_all.size() ? &vy.back() : nullptr);
      return run_evaluation(vx, vy, micro > 0 ? micro : batch, o.validation_steps);
    };
  const nn::SampleWeightScope weights(*this, weighted ? &y.back() : nullptr);
  return fit_loop(source, o, micro, validate);
}

void nn::Trainer::train_step(const std::vector<Tensor>& x, const std::vector<Tensor>& y, const int64_t* idx, int64_t bs,
                             int64_t micro, nn::Accumulator& acc, bool own_rows) {
  if (replicated()) {
    train_step_replicated(x, y, idx, bs, micro, acc, own_rows);
    programs().mirrors().mark_trained();  // replica 0 on a GPU: its copies are now ahead of the model's weights
    return;
  }
  graph::ExecContext ctx = nn::exec_context(model_.device(), step, true, model_.optimizer().get());
  if (micro == 0 || micro >= bs) {
    nn::Compiled& c = programs().get(nn::ProgramKind::train, bs);
    nn::BatchStager::bind_rows(c, x, &y, idx, 0, bs);
    c.program->run(ctx);
    acc.add(c, bs);
  } else {  // gradient accumulation over micro-batches, then one update
    for (int64_t r = 0; r < bs; r += micro) {
      const int64_t mb = std::min(micro, bs - r);
      nn::Compiled& c = programs().get(nn::ProgramKind::accumulate, mb);
      nn::BatchStager::bind_rows(c, x, &y, idx ? idx + r : nullptr, idx ? 0 : r, mb);
      ctx.scalars.step = (step << 20) + static_cast<uint64_t>(r);  // distinct dropout draws per micro-batch
      ctx.scalars.grad_scale = static_cast<float>(mb) / static_cast<float>(bs);
      c.program->run(ctx);
      acc.add(c, mb);
    }
    programs().get(nn::ProgramKind::apply, 0).program->run(ctx);
  }
  ++step;
  programs().mirrors().mark_trained();
  if (!programs().optimizer_state().step_was_skipped())
    ++model_.optimizer()->config().iterations;  // Keras: a skipped step is no iteration
}

namespace nn {
std::vector<CallbackPtr> fit_callbacks(Model* model, const FitOptions& o, int64_t steps,
                                       const std::shared_ptr<History>& history) {
  std::vector<CallbackPtr> callbacks{history};
  const int verbose = !model->is_chief() ? 0 : o.verbose == -1 ? 1 : o.verbose;  // MPI: rank 0 alone shows progress
  const bool terminal = isatty(STDOUT_FILENO) != 0;
  if (verbose > 0)
    callbacks.push_back(std::make_shared<ProgbarLogger>(o.verbose == -1 && !terminal ? 2 : verbose, terminal));
  callbacks.insert(callbacks.end(), o.callbacks.begin(), o.callbacks.end());
  for (const CallbackPtr& cb : callbacks) {
    cb->model = model;
    cb->params = {o.epochs, steps, verbose};
  }
  return callbacks;
}

void print_logs(const Logs& logs) {
  std::string line;
  for (const auto& [k, v] : logs.items()) line += (line.empty() ? "" : " - ") + k + ": " + std::to_string(v);
  std::printf("%s\n", line.c_str());
}
}  // namespace nn

const Logs& nn::Trainer::train_on_batch(const std::vector<Tensor>& x, const std::vector<Tensor>& y_in,
                                        const Tensor* sample_weight) {
  check_compiled("train_on_batch");
  model_.ensure_built(x);
  check_data(x, &y_in, "train_on_batch");
  // Keras' sample_weight: staged after the targets. No allocation per step: the tensors are assigned into the
  // vector's elements (a Tensor copy-constructed would allocate its Shape), which keep their size.
  if (sample_weight) {
    nn::check_sample_weight(model_, *sample_weight, rows_of(x), "train_on_batch");
    weighted_y_.resize(y_in.size() + 1);
    std::copy(y_in.begin(), y_in.end(), weighted_y_.begin());
    weighted_y_.back() = *sample_weight;
  }
  const std::vector<Tensor>& y = sample_weight ? weighted_y_ : y_in;
  const nn::SampleWeightScope weights(*this, sample_weight);
  const int64_t n = rows_of(x);
  if (n <= 0) throw InvalidArgument("train_on_batch: empty batch");
  if (replicated()) {  // data parallel: the replicas' weights may have been set since
    replicas_synced = false;
    programs().mirrors().upload();  // replica 0 on a GPU: weights set on the host since reach its copies
    nn::Accumulator acc;
    train_step(x, y, nullptr, n, 0, acc);  // the replicated step
    programs().mirrors().download();
    Logs logs;
    acc.write(logs);
    for (const auto& [name, v] : logs.items()) batch_logs_.set(name, v);
    add_loss_scale_logs(batch_logs_);
    return batch_logs_;
  }
  programs().mirrors().upload();
  nn::Compiled& c = programs().get(nn::ProgramKind::train, n);
  nn::BatchStager::bind_rows(c, x, &y, nullptr, 0, n);
  graph::ExecContext ctx = nn::exec_context(model_.device(), step++, true, model_.optimizer().get());
  c.program->run(ctx);
  programs().mirrors().mark_trained();
  programs().mirrors().download();
  if (!programs().optimizer_state().step_was_skipped()) ++model_.optimizer()->config().iterations;
  bool means_only = true;  // no stateful metric: the logs are the program's scalars (nothing allocated per step)
  for (const nn::LogStat& st : c.log_stats) means_only = means_only && st.width == 1 && !st.summed();
  if (means_only) {
    for (auto& [name, id] : c.logs) batch_logs_.set(name, c.program->output_scalar(id));
  } else {
    nn::Accumulator batch;  // this batch's logs (a stateful metric's value from this batch's counts)
    batch.add(c, n);
    batch.write(batch_logs_);
  }
  add_loss_scale_logs(batch_logs_);
  return batch_logs_;
}

}  // namespace tk
