// fit / evaluate / predict / train_on_batch: the loops around compiled programs.
#include <unistd.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "nn/compiler/programs.h"
#include "nn/distribute/mpi_collective.h"
#include "nn/distribute/replicated_eval.h"
#include "nn/distribute/strategy_state.h"
#include "nn/layers/context.h"
#include "nn/training/batching.h"
#include "nn/training/fit_common.h"
#include "nn/training/staging.h"
#include "trainkit/core/error.h"
#include "trainkit/runtime/memory.h"

namespace tk {
namespace {

void require(bool ok, const std::string& message) {
  if (!ok) throw InvalidArgument(message);
}

int64_t rows_of(const std::vector<Tensor>& x) { return x.empty() || x[0].shape().rank() == 0 ? 0 : x[0].dim(0); }

}  // namespace

History Model::fit(const Tensor& x, const Tensor& y, FitOptions options) {
  return fit(std::vector<Tensor>{x}, std::vector<Tensor>{y}, std::move(options));
}

History Model::fit(const std::vector<Tensor>& x_all, const std::vector<Tensor>& y_all, FitOptions o) {
  check_compiled("fit");
  require(o.batch_size > 0 || o.batch_size == kAutoBatchSize,
          "fit: batch_size must be a positive integer or tk::kAutoBatchSize, got " + std::to_string(o.batch_size));
  require(
      o.micro_batch_size >= 0 || o.micro_batch_size == kAutoBatchSize,
      "fit: micro_batch_size must be >= 0 (0: off) or tk::kAutoBatchSize, got " + std::to_string(o.micro_batch_size));
  require(o.auto_batch_cap > 0, "fit: auto_batch_cap must be positive");
  require(o.epochs >= 0, "fit: epochs must be >= 0, got " + std::to_string(o.epochs));
  require(o.initial_epoch >= 0 && o.initial_epoch <= o.epochs,
          "fit: initial_epoch must be in [0, epochs], got " + std::to_string(o.initial_epoch));
  require(o.validation_split >= 0.0f && o.validation_split < 1.0f,
          "fit: validation_split must be in [0, 1), got " + std::to_string(o.validation_split));
  require(o.steps_per_epoch >= 0 && o.validation_steps >= 0, "fit: steps_per_epoch and validation_steps must be >= 0");
  require(o.verbose >= -1 && o.verbose <= 2,
          "fit: verbose must be -1 (auto), 0, 1 or 2, got " + std::to_string(o.verbose));
  ensure_built(x_all);
  check_data(x_all, &y_all, "fit");

  // Validation data: given, or the last fraction of the arrays before shuffling (Keras' rule).
  std::vector<Tensor> x = x_all, y = y_all, vx, vy;
  const int64_t n_all = rows_of(x_all);
  if (o.validation_data) {
    vx = o.validation_data->first;
    vy = o.validation_data->second;
    check_data(vx, &vy, "fit (validation_data)");
  } else if (o.validation_split > 0.0f) {
    const auto split = static_cast<int64_t>(std::ceil(static_cast<double>(n_all) * (1.0 - o.validation_split)));
    require(split > 0 && split < n_all, "fit: validation_split " + std::to_string(o.validation_split) + " of " +
                                            std::to_string(n_all) +
                                            " samples leaves an empty training or validation set");
    for (size_t i = 0; i < x.size(); ++i) {
      vx.push_back(x_all[i].slice_rows(split, n_all));
      x[i] = x_all[i].slice_rows(0, split);
    }
    for (size_t j = 0; j < y.size(); ++j) {
      vy.push_back(y_all[j].slice_rows(split, n_all));
      y[j] = y_all[j].slice_rows(0, split);
    }
  }
  const int64_t n = rows_of(x);
  require(n > 0, "fit: no training samples");
  if (!programs_) programs_ = std::make_unique<nn::ProgramCache>(*this);
  int64_t batch = std::min(o.batch_size, n);
  // The largest that fits; under a strategy, per replica on each one's own budget (nn/distribute/auto_batch.cpp).
  if (o.batch_size == kAutoBatchSize) batch = auto_batch_size(std::min(o.auto_batch_cap, n), o.verbose != 0);
  const int64_t steps = o.steps_per_epoch > 0 ? o.steps_per_epoch : (n + batch - 1) / batch;
  int64_t micro = o.micro_batch_size;
  if (micro == kAutoBatchSize) micro = auto_micro_batch_size(batch, o.verbose != 0);
  if (micro >= batch) micro = 0;  // a micro-batch as large as the batch is a plain step

  if (!programs_) programs_ = std::make_unique<nn::ProgramCache>(*this);
  replicas_synced_ = false;     // data parallel: weights may have been set since the last fit
  programs_->upload_weights();  // a device the host cannot address: the same
  auto history = std::make_shared<History>();
  const std::vector<CallbackPtr> callbacks = nn::fit_callbacks(this, o, steps, history);

  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  uint64_t seed = o.seed ? o.seed : nn::next_seed();
  if (strategy_ && strategy_->mpi) seed = strategy_->mpi->broadcast(seed, "shuffle seed");  // one shuffle everywhere
  std::mt19937_64 rng(seed);
  position_ = FitPosition{.epoch = o.initial_epoch, .shuffle_seed = seed};
  Logs logs;
  stop_training = false;
  for (const CallbackPtr& cb : callbacks) cb->on_train_begin(logs);
  int first_epoch = o.initial_epoch;
  int64_t first_step = 0;
  if (resume_) {  // restore_training_state (before fit, or BackupAndRestore in on_train_begin): continue there
    const FitPosition r = *resume_;
    resume_.reset();
    require(!r.dataset, "fit: the restored state was saved by fit over a Dataset; resume it with the same Dataset");
    rng.seed(r.shuffle_seed);
    if (o.shuffle)  // the same permutations: replay the shuffles made before the save
      for (int64_t k = 0; k < r.shuffles; ++k) std::shuffle(perm.begin(), perm.end(), rng);
    first_epoch = r.epoch;
    first_step = r.batch;
    position_ = r;
  }
  // On a GPU batch k's logs are read after batch k+1 was queued (nn/training/lagged_logs.h: what that means for
  // callbacks and stop_training); on the CPU right after each step.
  const std::unique_ptr<nn::LaggedLogs> lagged =
      nn::make_lagged_logs(device_, *programs_, strategy_ && strategy_->replicated());
  for (int epoch = first_epoch; epoch < o.epochs && !stop_training; ++epoch) {
    const int64_t start = epoch == first_epoch ? first_step : 0;
    if (start == 0 && o.shuffle) {  // a resumed epoch keeps the permutation it started with
      std::shuffle(perm.begin(), perm.end(), rng);
      ++position_.shuffles;
    }
    position_.epoch = epoch;
    position_.batch = start;
    logs.clear();
    for (const CallbackPtr& cb : callbacks) cb->on_epoch_begin(epoch, logs);
    const distribute::StepClock clock = strategy_ ? strategy_->clock() : distribute::StepClock{};
    nn::Accumulator acc;
    acc.lagged = lagged.get();
    auto end_batch = [&](int64_t b) {
      acc.write(logs);
      add_loss_scale_logs(logs);
      for (const CallbackPtr& cb : callbacks) cb->on_train_batch_end(b, logs);
    };
    const nn::DeliverOnUnwind deliver_on_unwind(lagged.get(), acc, end_batch);  // an exception: trained batches first
    int64_t cursor = 0;
    for (int64_t s = 0; s < start; ++s) {  // the batches trained on before the save
      if (cursor >= n) cursor = 0;
      cursor += std::min(batch, n - cursor);
    }
    for (int64_t s = start; s < steps; ++s) {
      if (cursor >= n) cursor = 0;  // steps_per_epoch beyond one pass wraps around
      const int64_t bs = std::min(batch, n - cursor);
      for (const CallbackPtr& cb : callbacks) cb->on_train_batch_begin(s, logs);
      if (lagged) lagged->begin(s);
      train_step(x, y, perm.data() + cursor, bs, micro, acc);
      if (lagged) lagged->end();
      cursor += bs;
      position_.batch = s + 1;  // with lagged logs: the batches queued (what the model's weights include)
      if (lagged)
        nn::deliver_lagged(lagged.get(), acc, false, end_batch);  // batch s - 1's
      else
        end_batch(s);
      if (stop_training) break;  // a callback stopped training mid-epoch (TerminateOnNaN); Keras 3 does the same
    }
    nn::deliver_lagged(lagged.get(), acc, true, end_batch);  // the epoch's last (after a stop: the one queued since)
    distribute::add_allreduce_logs(strategy_.get(), clock, logs);
    if (!vx.empty()) {
      Logs val = run_evaluation(vx, vy, micro > 0 ? micro : batch, o.validation_steps);
      for (const auto& [k, v] : val.items()) logs.set("val_" + k, v);
    }
    position_.epoch = epoch + 1;  // a state saved now resumes with the next epoch
    position_.batch = 0;
    programs_->download_weights();  // callbacks (checkpoints, early stopping) read the model's weights
    for (const CallbackPtr& cb : callbacks) cb->on_epoch_end(epoch, logs);
  }
  programs_->download_weights();
  for (const CallbackPtr& cb : callbacks) cb->on_train_end(logs);
  return *history;
}

void Model::train_step(const std::vector<Tensor>& x, const std::vector<Tensor>& y, const int64_t* idx, int64_t bs,
                       int64_t micro, nn::Accumulator& acc, bool own_rows) {
  if (strategy_ && strategy_->replicated()) {
    train_step_replicated(x, y, idx, bs, micro, acc, own_rows);
    programs_->mark_trained();  // replica 0 on a GPU: its copies are now ahead of the model's weights
    return;
  }
  graph::ExecContext ctx = nn::exec_context(device_, step_, true, optimizer_.get());
  if (micro == 0 || micro >= bs) {
    nn::Compiled& c = programs_->get(nn::ProgramKind::train, bs);
    nn::HostStager::bind_rows(c, x, &y, idx, 0, bs);
    c.program->run(ctx);
    acc.add(c, bs);
  } else {  // gradient accumulation over micro-batches, then one update
    for (int64_t r = 0; r < bs; r += micro) {
      const int64_t mb = std::min(micro, bs - r);
      nn::Compiled& c = programs_->get(nn::ProgramKind::accumulate, mb);
      nn::HostStager::bind_rows(c, x, &y, idx ? idx + r : nullptr, idx ? 0 : r, mb);
      ctx.scalars.step = (step_ << 20) + static_cast<uint64_t>(r);  // distinct dropout draws per micro-batch
      ctx.scalars.grad_scale = static_cast<float>(mb) / static_cast<float>(bs);
      c.program->run(ctx);
      acc.add(c, mb);
    }
    programs_->get(nn::ProgramKind::apply, 0).program->run(ctx);
  }
  ++step_;
  programs_->mark_trained();
  if (!programs_->step_was_skipped()) ++optimizer_->config().iterations;  // Keras: a skipped step is no iteration
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

const Logs& Model::train_on_batch(const std::vector<Tensor>& x, const std::vector<Tensor>& y) {
  check_compiled("train_on_batch");
  ensure_built(x);
  check_data(x, &y, "train_on_batch");
  const int64_t n = rows_of(x);
  if (n <= 0) throw InvalidArgument("train_on_batch: empty batch");
  if (!programs_) programs_ = std::make_unique<nn::ProgramCache>(*this);
  if (strategy_ && strategy_->replicated()) {  // data parallel: the replicas' weights may have been set since
    replicas_synced_ = false;
    programs_->upload_weights();  // replica 0 on a GPU: weights set on the host since reach its copies
    nn::Accumulator acc;
    train_step_replicated(x, y, nullptr, n, 0, acc);
    programs_->mark_trained();
    programs_->download_weights();
    Logs logs;
    acc.write(logs);
    for (const auto& [name, v] : logs.items()) batch_logs_.set(name, v);
    add_loss_scale_logs(batch_logs_);
    return batch_logs_;
  }
  programs_->upload_weights();
  nn::Compiled& c = programs_->get(nn::ProgramKind::train, n);
  nn::HostStager::bind_rows(c, x, &y, nullptr, 0, n);
  graph::ExecContext ctx = nn::exec_context(device_, step_++, true, optimizer_.get());
  c.program->run(ctx);
  programs_->mark_trained();
  programs_->download_weights();
  if (!programs_->step_was_skipped()) ++optimizer_->config().iterations;
  for (auto& [name, id] : c.logs) batch_logs_.set(name, c.program->output_scalar(id));
  add_loss_scale_logs(batch_logs_);
  return batch_logs_;
}

Logs Model::evaluate(const Tensor& x, const Tensor& y, EvaluateOptions options) {
  return evaluate(std::vector<Tensor>{x}, std::vector<Tensor>{y}, options);
}

Logs Model::evaluate(const std::vector<Tensor>& x, const std::vector<Tensor>& y, EvaluateOptions o) {
  check_compiled("evaluate");
  require(o.batch_size > 0, "evaluate: batch_size must be a positive integer, got " + std::to_string(o.batch_size));
  ensure_built(x);
  check_data(x, &y, "evaluate");
  if (!programs_) programs_ = std::make_unique<nn::ProgramCache>(*this);
  programs_->upload_weights();
  Logs logs = run_evaluation(x, y, o.batch_size, o.steps);
  if (o.verbose > 0 && is_chief()) nn::print_logs(logs);  // MPI: rank 0 alone prints
  return logs;
}

Logs Model::run_evaluation(const std::vector<Tensor>& x, const std::vector<Tensor>& y, int64_t batch_size,
                           int64_t steps) {
  if (!programs_) programs_ = std::make_unique<nn::ProgramCache>(*this);
  const int64_t n = rows_of(x);
  int64_t batch = std::min(batch_size, std::max<int64_t>(n, 1));
  // MultiWorkerMirroredStrategy: batch k on rank k % ranks, the logs summed over the ranks at the end; rank 0's batch
  // size (an automatic one follows each rank's free memory).
  nn::distribute::MpiCollective* world = evaluation_group(
      "evaluate arrays of " + std::to_string(n) + " rows" + (steps > 0 ? ", " + std::to_string(steps) + " steps" : ""),
      {&x, &y});
  if (world) batch = static_cast<int64_t>(world->broadcast(static_cast<uint64_t>(batch), "evaluation batch size"));
  int64_t batches = (n + batch - 1) / batch;
  if (steps > 0) batches = std::min(batches, steps);
  auto rows_in = [&](int64_t k) { return std::min(batch, n - k * batch); };
  nn::Accumulator acc;
  graph::ExecContext ctx = nn::exec_context(device_, step_, false, optimizer_.get());
  if (nn::distribute::replicated_in_process(strategy_.get()) && batches > 0) {
    // MirroredStrategy: batch k on replica k % replicas, on its own thread with its own programs; the replicas'
    // row-weighted sums are added in replica order.
    const std::vector<nn::ProgramCache*> replicas = nn::distribute::synced_replicas(
        strategy_->replicas(), [&](int r) -> nn::ProgramCache& { return replica_programs(r); });
    replicas_synced_ = true;
    std::vector<nn::Accumulator> sums(replicas.size());
    nn::distribute::run_on_replicas(
        *strategy_, replicas, 0, batches, ctx,
        [&](int r, int64_t k) { replicas[static_cast<size_t>(r)]->get(nn::ProgramKind::eval, rows_in(k)); },
        [&](int r, int64_t k, const graph::ExecContext& c) {
          nn::Compiled& p = replicas[static_cast<size_t>(r)]->get(nn::ProgramKind::eval, rows_in(k));
          nn::HostStager::bind_rows(p, x, &y, nullptr, k * batch, rows_in(k));
          p.program->run(c);
          sums[static_cast<size_t>(r)].add(p, rows_in(k));
        });
    for (const nn::Accumulator& a : sums) acc.merge(a);
    Logs logs;
    acc.write(logs);
    return logs;
  }
  for (int64_t k = 0; k < batches; ++k) {
    if (world && k % world->size() != world->rank()) continue;
    try {  // a failure on one rank ends the job at once, not after the others' collective timeout
      nn::Compiled& c = programs_->get(nn::ProgramKind::eval, rows_in(k));
      nn::HostStager::bind_rows(c, x, &y, nullptr, k * batch, rows_in(k));
      c.program->run(ctx);
      acc.add(c, rows_in(k));
      if (world) nn::distribute::count_rank_batch(*strategy_);
    } catch (const std::exception& e) {
      if (!world) throw;
      world->abort(std::string("evaluation: ") + e.what());
    }
  }
  if (world && n > 0) all_reduce_logs(*world, acc);
  Logs logs;
  acc.write(logs);
  return logs;
}

Tensor Model::predict(const Tensor& x, int64_t batch_size) { return predict(std::vector<Tensor>{x}, batch_size)[0]; }

std::vector<Tensor> Model::predict(const std::vector<Tensor>& x, int64_t batch_size) {
  require(batch_size > 0, "predict: batch_size must be a positive integer, got " + std::to_string(batch_size));
  check_policies("predict");
  ensure_built(x);
  check_data(x, nullptr, "predict");
  if (!programs_) programs_ = std::make_unique<nn::ProgramCache>(*this);
  programs_->upload_weights();
  const int64_t n = rows_of(x);
  // MultiWorkerMirroredStrategy: batch k on rank k % ranks (rank 0's batch size), then every rank gets every row.
  nn::distribute::MpiCollective* world = evaluation_group("predict arrays of " + std::to_string(n) + " rows", {&x});
  int64_t batch = batch_size;
  if (world) batch = static_cast<int64_t>(world->broadcast(static_cast<uint64_t>(batch), "predict batch size"));
  const int64_t batches = (n + batch - 1) / batch;
  auto rows_in = [&](int64_t k) { return std::min(batch, n - k * batch); };
  std::vector<Tensor> out;
  try {  // MPI: out of memory here on one rank ends the job at once, not after the others' collective timeout
    for (const KerasTensor& o : outputs_) out.emplace_back(o.shape().with_batch(n), DType::f32);
  } catch (const std::exception& e) {
    if (!world) throw;
    world->abort(std::string("predict: ") + e.what());
  }
  // Batch k's predictions straight into its rows of the outputs.
  auto read = [&](nn::Compiled& c, int64_t k) {
    for (size_t j = 0; j < out.size(); ++j) {
      const size_t row = out[j].nbytes() / static_cast<size_t>(n);
      c.program->read_output(c.outputs[j], static_cast<char*>(out[j].raw()) + static_cast<size_t>(k * batch) * row,
                             static_cast<size_t>(rows_in(k)) * row);
    }
  };
  graph::ExecContext ctx = nn::exec_context(device_, step_, false, optimizer_.get());
  // MirroredStrategy: batch k on replica k % replicas, each writing its own rows.
  if (nn::distribute::replicated_in_process(strategy_.get()) && batches > 0) {
    const std::vector<nn::ProgramCache*> replicas = nn::distribute::synced_replicas(
        strategy_->replicas(), [&](int r) -> nn::ProgramCache& { return replica_programs(r); });
    replicas_synced_ = true;
    nn::distribute::run_on_replicas(
        *strategy_, replicas, 0, batches, ctx,
        [&](int r, int64_t k) { replicas[static_cast<size_t>(r)]->get(nn::ProgramKind::predict, rows_in(k)); },
        [&](int r, int64_t k, const graph::ExecContext& c) {
          nn::Compiled& p = replicas[static_cast<size_t>(r)]->get(nn::ProgramKind::predict, rows_in(k));
          nn::HostStager::bind_rows(p, x, nullptr, nullptr, k * batch, rows_in(k));
          p.program->run(c);
          read(p, k);
        });
    return out;
  }
  for (int64_t k = 0; k < batches; ++k) {
    if (world && k % world->size() != world->rank()) continue;
    try {  // a failure on one rank ends the job at once, not after the others' collective timeout
      nn::Compiled& c = programs_->get(nn::ProgramKind::predict, rows_in(k));
      nn::HostStager::bind_rows(c, x, nullptr, nullptr, k * batch, rows_in(k));
      c.program->run(ctx);
      read(c, k);
      if (world) nn::distribute::count_rank_batch(*strategy_);
    } catch (const std::exception& e) {
      if (!world) throw;
      world->abort(std::string("predict: ") + e.what());
    }
  }
  if (world) {
    std::vector<int64_t> rows;
    for (int64_t k = 0; k < batches; ++k) rows.push_back(rows_in(k));
    nn::distribute::gather_batches(*world, out, rows, "predict outputs");
  }
  return out;
}

}  // namespace tk
