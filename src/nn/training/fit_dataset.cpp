// fit / evaluate / predict over a tk::data::Dataset of batches, with stall accounting per epoch.

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <set>

#include "data/node.h"
#include "nn/compiler/programs.h"
#include "nn/distribute/mpi_collective.h"
#include "nn/distribute/replicated_eval.h"
#include "nn/distribute/strategy_state.h"
#include "nn/distribute/worker_input.h"
#include "nn/training/device_dataset.h"
#include "nn/training/fit_common.h"
#include "nn/training/staging.h"
#include "trainkit/core/error.h"
#include "trainkit/data/stall.h"
#include "trainkit/nn/model.h"

namespace tk {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

void require(bool ok, const std::string& message) {
  if (!ok) throw InvalidArgument(message);
}

using nn::staged;

// A model replicated by a distribution strategy (in process or over MPI).
bool distributed(const distribute::StrategyState* s) { return s && s->replicated(); }

}  // namespace

void Model::split_element(data::Element& e, std::vector<Tensor>& x, std::vector<Tensor>& y, bool need_y,
                          const char* what) const {
  const size_t nx = inputs_.size(), ny = outputs_.size();
  if (e.size() < nx || (need_y && e.size() != nx + ny))
    throw InvalidArgument(std::string(what) + ": the dataset's elements have " + std::to_string(e.size()) +
                          " component(s) " + data::shapes_of(e) + " but model '" + name_ + "' takes " +
                          std::to_string(nx) + " input(s)" +
                          (need_y ? " and " + std::to_string(ny) + " target(s): elements must be (x..., y...)" : "") +
                          " (batch the dataset, and map it to that tuple)");
  for (const Tensor& t : e)
    if (t.shape().rank() == 0)
      throw InvalidArgument(std::string(what) + ": the dataset's elements " + data::shapes_of(e) +
                            " have a scalar component: fit takes batches (add .batch(n) to the pipeline)");
  x.assign(e.begin(), e.begin() + static_cast<std::ptrdiff_t>(nx));
  y.assign(e.begin() + static_cast<std::ptrdiff_t>(nx), e.end());
}

History Model::fit(const data::Dataset& dataset, FitOptions o) {
  check_compiled("fit");
  require(o.epochs >= 0, "fit: epochs must be >= 0, got " + std::to_string(o.epochs));
  require(o.initial_epoch >= 0 && o.initial_epoch <= o.epochs,
          "fit: initial_epoch must be in [0, epochs], got " + std::to_string(o.initial_epoch));
  require(o.validation_split == 0.0f,
          "fit: validation_split is not supported with a Dataset (the dataset is not indexable): pass "
          "validation_dataset, or split before building the pipeline (take / skip)");
  require(!o.validation_data, "fit: with a Dataset, give validation as validation_dataset");
  require(o.steps_per_epoch >= 0 && o.validation_steps >= 0, "fit: steps_per_epoch and validation_steps must be >= 0");
  require(o.micro_batch_size >= 0, "fit: with a Dataset, micro_batch_size must be >= 0 (the dataset sets the batch)");
  require(o.verbose >= -1 && o.verbose <= 2,
          "fit: verbose must be -1 (auto), 0, 1 or 2, got " + std::to_string(o.verbose));
  const int64_t card = dataset.cardinality();
  require(card != data::kInfiniteCardinality || o.steps_per_epoch > 0,
          "fit: the dataset is infinite (repeat() without a count): give steps_per_epoch");
  require(card != 0, "fit: the dataset is empty (" + dataset.describe() + ")");

  require(!o.validation_dataset || o.validation_dataset->cardinality() != data::kInfiniteCardinality ||
              o.validation_steps > 0,
          "fit: validation_dataset is infinite (repeat() without a count): give validation_steps");
  // MultiWorkerMirroredStrategy: each rank reads its rows of every global batch (worker_input.h); `global` then gives
  // the size of the global batch each of its batches belongs to.
  // Dataset::on_device(arrays, cuda:N): the pipeline runs on row numbers, each batch gathered on the GPU
  // (nn/training/device_dataset.h); `rows` then points at the batch's rows and x, y are the whole arrays.
  const std::unique_ptr<nn::DeviceDataset> on_device =
      nn::DeviceDataset::of(dataset, device_, distributed(strategy_.get()), "fit");
  const int64_t* rows = nullptr;
  std::optional<data::WorkerShare> share;
  if (strategy_ && strategy_->mpi && strategy_->mpi->size() > 1)
    share = nn::distribute::worker_input(dataset, *strategy_->mpi);
  const std::shared_ptr<data::GlobalBatchSizes> global = share ? share->global_batches : nullptr;
  const data::Dataset pipeline = staged(on_device ? on_device->indices() : share ? share->dataset : dataset);
  // The next batch of the pass, and the rows of the global batch it is (a part of).
  int64_t global_rows = 0;
  auto next_batch = [&](data::Iterator& from, data::Element& out) {
    if (!from.next(out)) return false;
    global_rows = global ? global->pop() : 0;
    return true;
  };
  auto new_pass = [&](uint64_t number) {
    if (global) global->clear();  // the last pass's threads are gone: nothing pushes now
    return data::make_iterator(pipeline, number);
  };
  // A fixed number of steps keeps one pass going across epochs (Keras' behaviour with steps_per_epoch).
  const bool persistent = o.steps_per_epoch > 0;
  int64_t steps = o.steps_per_epoch > 0 ? o.steps_per_epoch : (card >= 0 ? card : 0);  // 0: unknown yet

  // Passes are numbered by the user's dataset (reshuffling continues across fit calls), not by the wrapper.
  std::atomic<uint64_t>& passes = dataset.node()->passes;
  uint64_t pass = passes.fetch_add(1);
  int64_t consumed = 0;  // batches taken from this pass
  data::Iterator it = new_pass(pass);
  data::Element element;
  std::vector<Tensor> x, y;
  auto first_wait = Clock::now();
  bool pending = next_batch(it, element);  // the first batch builds the model
  const double first_wait_s = since(first_wait);
  require(pending, "fit: the dataset yielded no batch (" + dataset.describe() + ")");
  consumed = 1;
  if (on_device)
    on_device->stand_ins(inputs_.size(), outputs_.size(), true, x, y, "fit");
  else
    split_element(element, x, y, true, "fit");
  ensure_built(x);
  check_data(x, &y, "fit");
  if (!programs_) programs_ = std::make_unique<nn::ProgramCache>(*this);
  replicas_synced_ = false;     // data parallel: weights may have been set since the last fit
  programs_->upload_weights();  // a device the host cannot address: the same

  auto history = std::make_shared<History>();
  const int verbose = !is_chief() ? 0 : o.verbose == -1 ? 1 : o.verbose;  // MPI: rank 0 alone prints
  const std::vector<CallbackPtr> callbacks = nn::fit_callbacks(this, o, steps, history);

  nn::HostStager stager;
  data::StallMeter meter;
  std::set<std::string> advised;
  Logs logs;
  stop_training = false;
  position_ = FitPosition{.epoch = o.initial_epoch, .data_pass = pass, .dataset = true};
  for (const CallbackPtr& cb : callbacks) cb->on_train_begin(logs);
  int first_epoch = o.initial_epoch;
  int64_t first_step = 0;
  bool next_pass = false;  // each epoch after the first reads a new pass (unless steps_per_epoch is given)
  if (resume_) {           // restore_training_state (before fit, or BackupAndRestore in on_train_begin): continue there
    const FitPosition r = *resume_;
    resume_.reset();
    require(r.dataset, "fit: the restored state was saved by fit over arrays; resume it with the same arrays");
    it = data::Iterator();  // the same pass as when the state was saved, at the same batch
    pass = r.data_pass;
    for (uint64_t seen = passes.load(); seen <= pass && !passes.compare_exchange_weak(seen, pass + 1);) {
    }
    it = new_pass(pass);
    pending = false;
    for (consumed = 0; consumed < r.pass_offset; ++consumed)
      if (!next_batch(it, element))
        throw InvalidArgument("fit: resuming needs batch " + std::to_string(r.pass_offset) + " of pass " +
                              std::to_string(pass) + " but the dataset ends after " + std::to_string(consumed) +
                              " (resume with the dataset the state was saved with: " + dataset.describe() + ")");
    first_epoch = r.epoch;
    first_step = r.batch;
    position_ = r;
  }
  // On a GPU batch k's logs are read after batch k+1 was gathered, staged and queued (nn/training/lagged_logs.h: what
  // that means for callbacks and stop_training); on the CPU right after each step.
  const std::unique_ptr<nn::LaggedLogs> lagged =
      nn::make_lagged_logs(device_, *programs_, strategy_ && strategy_->replicated());
  for (int epoch = first_epoch; epoch < o.epochs && !stop_training; ++epoch) {
    if (next_pass) {
      it = data::Iterator();  // stop the last pass's threads before starting the next
      pass = passes.fetch_add(1);
      it = new_pass(pass);
      consumed = 0;
      pending = false;
    }
    next_pass = !persistent;
    const int64_t start = epoch == first_epoch ? first_step : 0;
    position_.epoch = epoch;
    position_.batch = start;
    logs.clear();
    meter.reset();
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
    int64_t s = start;
    for (; steps == 0 || s < steps; ++s) {
      const auto t0 = Clock::now();
      if (!pending && !next_batch(it, element)) {
        if (persistent) {
          if (is_chief())
            std::printf(
                "WARNING: Your input ran out of data; interrupting training. Make sure that your dataset can "
                "generate at least steps_per_epoch * epochs batches (%lld); you may need to use repeat().\n",
                static_cast<long long>(o.steps_per_epoch * o.epochs));
          stop_training = true;
        }
        break;
      }
      meter.add_wait(pending && epoch == o.initial_epoch && s == 0 ? first_wait_s : since(t0));
      if (!pending) ++consumed;
      pending = false;
      const auto t1 = Clock::now();
      stager.recycle(x, y);
      int64_t n = 0;
      if (on_device) {
        n = on_device->split(element, inputs_.size(), x, y, true, rows);
      } else {
        split_element(element, x, y, true, "fit");
        check_data(x, &y, "fit");
        n = x[0].dim(0);
      }
      stager.stage(std::move(x), std::move(y));
      for (const CallbackPtr& cb : callbacks) cb->on_train_batch_begin(s, logs);
      if (lagged) lagged->begin(s);
      train_step(stager.x(), stager.y(), rows, global ? global_rows : n, o.micro_batch_size, acc, global != nullptr);
      if (lagged) lagged->end();
      if (!lagged) {
        acc.write(logs);
        add_loss_scale_logs(logs);
      }
      meter.add_compute(since(t1));  // with lagged logs: the host's part (gather, staging, queuing)
      position_.batch = s + 1;       // with lagged logs: the batches queued (what the model's weights include)
      position_.data_pass = pass;
      position_.pass_offset = consumed;
      if (lagged)
        nn::deliver_lagged(lagged.get(), acc, false, end_batch);  // batch s - 1's
      else
        for (const CallbackPtr& cb : callbacks) cb->on_train_batch_end(s, logs);
      if (stop_training) {  // a callback stopped training mid-epoch (TerminateOnNaN); Keras 3 does the same
        ++s;
        break;
      }
    }
    nn::deliver_lagged(lagged.get(), acc, true, end_batch);  // the epoch's last (after a stop: the one queued since)
    if (steps == 0) {  // the first pass counted the steps: later progress bars know their length
      steps = s;
      for (const CallbackPtr& cb : callbacks) cb->params.steps = steps;
    }
    const data::StallReport r = meter.report(it.stats());
    distribute::add_allreduce_logs(strategy_.get(), clock, logs);
    logs.set("input_wait_fraction", r.wait_fraction);
    logs.set("input_wait_p50_ms", r.p50_wait_ms);
    logs.set("input_wait_p99_ms", r.p99_wait_ms);
    if (o.validation_dataset) {
      Logs val = run_evaluation(*o.validation_dataset, o.validation_steps);
      for (const auto& [k, v] : val.items()) logs.set("val_" + k, v);
    }
    position_.epoch = epoch + 1;  // a state saved now resumes with the next epoch: a new pass, or this one
    position_.batch = 0;
    position_.data_pass = persistent ? pass : passes.load();
    position_.pass_offset = persistent ? consumed : 0;
    programs_->download_weights();  // callbacks (checkpoints, early stopping) read the model's weights
    for (const CallbackPtr& cb : callbacks) cb->on_epoch_end(epoch, logs);
    if (verbose > 0 && !r.advice.empty() && advised.insert(r.verdict + r.slowest_stage).second)
      std::printf("Input pipeline: %s. %s\n", r.summary().c_str(), r.advice.c_str());
  }
  programs_->download_weights();
  for (const CallbackPtr& cb : callbacks) cb->on_train_end(logs);
  return *history;
}

Logs Model::run_evaluation(const data::Dataset& dataset, int64_t steps) {
  if (!programs_) programs_ = std::make_unique<nn::ProgramCache>(*this);
  const std::unique_ptr<nn::DeviceDataset> on_device =
      nn::DeviceDataset::of(dataset, device_, distributed(strategy_.get()), "evaluate");
  data::Iterator it = nn::evaluation_pass(dataset, staged(on_device ? on_device->indices() : dataset));
  data::Element e;
  std::vector<Tensor> x, y;
  nn::Accumulator acc;
  graph::ExecContext ctx = nn::exec_context(device_, step_, false, optimizer_.get());
  if (nn::distribute::replicated_in_process(strategy_.get())) {
    // MirroredStrategy: the batches read in rounds of one per replica, batch k on replica k % replicas.
    const int replicas = strategy_->replicas();
    std::vector<nn::ProgramCache*> caches;
    std::vector<nn::Accumulator> sums(static_cast<size_t>(replicas));
    std::vector<data::Element> round(static_cast<size_t>(replicas));
    std::vector<std::vector<Tensor>> rx(round.size()), ry(round.size());
    for (int64_t s = 0;;) {
      int64_t got = 0;
      for (; got < replicas && (steps == 0 || s + got < steps) && it.next(round[static_cast<size_t>(got)]); ++got) {
        const auto g = static_cast<size_t>(got);
        split_element(round[g], rx[g], ry[g], true, "evaluate");
        ensure_built(rx[g]);
        check_data(rx[g], &ry[g], "evaluate");
      }
      if (got == 0) break;
      if (caches.empty()) {  // the model is built now (by the first batch)
        caches =
            nn::distribute::synced_replicas(replicas, [&](int r) -> nn::ProgramCache& { return replica_programs(r); });
        replicas_synced_ = true;
      }
      auto rows_in = [&](int64_t k) { return rx[static_cast<size_t>(k - s)][0].dim(0); };
      nn::distribute::run_on_replicas(
          *strategy_, caches, s, got, ctx,
          [&](int r, int64_t k) { caches[static_cast<size_t>(r)]->get(nn::ProgramKind::eval, rows_in(k)); },
          [&](int r, int64_t k, const graph::ExecContext& c) {
            nn::Compiled& p = caches[static_cast<size_t>(r)]->get(nn::ProgramKind::eval, rows_in(k));
            nn::HostStager::bind_rows(p, rx[static_cast<size_t>(k - s)], &ry[static_cast<size_t>(k - s)], nullptr, 0,
                                      rows_in(k));
            p.program->run(c);
            sums[static_cast<size_t>(r)].add(p, rows_in(k));
          });
      s += got;
      if (got < replicas) break;
    }
    for (const nn::Accumulator& a : sums) acc.merge(a);
    Logs logs;
    acc.write(logs);
    return logs;
  }
  // MultiWorkerMirroredStrategy: every rank reads the dataset (the same batches, as for training) and runs batch k
  // when k % ranks is its rank; the logs are summed over the ranks at the end. Built on the first batch.
  nn::distribute::MpiCollective* world = nullptr;
  bool asked = false;
  const int64_t* rows = nullptr;  // on_device: the batch's rows of the arrays x, y
  for (int64_t s = 0; (steps == 0 || s < steps) && it.next(e); ++s) {
    int64_t bs = 0;
    if (on_device) {
      if (s == 0) {
        on_device->stand_ins(inputs_.size(), outputs_.size(), true, x, y, "evaluate");
        ensure_built(x);
        check_data(x, &y, "evaluate");
      }
      bs = on_device->split(e, inputs_.size(), x, y, true, rows);
    } else {
      split_element(e, x, y, true, "evaluate");
      ensure_built(x);
      check_data(x, &y, "evaluate");
      bs = x[0].dim(0);
    }
    if (!asked) {
      world = evaluation_group("evaluate the dataset " + dataset.describe() +
                               (steps > 0 ? ", " + std::to_string(steps) + " steps" : std::string()));
      asked = true;
    }
    if (world && s % world->size() != world->rank()) continue;
    try {
      nn::Compiled& c = programs_->get(nn::ProgramKind::eval, bs);
      nn::HostStager::bind_rows(c, x, &y, rows, 0, bs);
      c.program->run(ctx);
      acc.add(c, bs);
      if (world) nn::distribute::count_rank_batch(*strategy_);
    } catch (const std::exception& ex) {
      if (!world) throw;
      world->abort(std::string("evaluation: ") + ex.what());  // at once, not after the others' collective timeout
    }
  }
  if (world) all_reduce_logs(*world, acc);
  Logs logs;
  acc.write(logs);
  return logs;
}

Logs Model::evaluate(const data::Dataset& dataset, EvaluateOptions o) {
  check_compiled("evaluate");
  require(dataset.cardinality() != data::kInfiniteCardinality || o.steps > 0,
          "evaluate: the dataset is infinite (repeat() without a count): give steps");
  if (programs_) programs_->upload_weights();  // else the programs are built with the model's weights
  Logs logs = run_evaluation(dataset, o.steps);
  if (o.verbose > 0 && is_chief()) nn::print_logs(logs);
  return logs;
}

std::vector<Tensor> Model::predict(const data::Dataset& dataset) {
  require(dataset.cardinality() != data::kInfiniteCardinality,
          "predict: the dataset is infinite (repeat() without a count): add take(n)");
  check_policies("predict");
  if (!programs_) programs_ = std::make_unique<nn::ProgramCache>(*this);
  programs_->upload_weights();
  const std::unique_ptr<nn::DeviceDataset> on_device =
      nn::DeviceDataset::of(dataset, device_, distributed(strategy_.get()), "predict");
  data::Iterator it = nn::evaluation_pass(dataset, staged(on_device ? on_device->indices() : dataset));
  const int64_t* batch_rows = nullptr;  // on_device: the batch's rows of the arrays rx[0]
  // Batch k's predictions (parts[k][j]: output j), and its rows. Under MultiWorkerMirroredStrategy every rank reads
  // every batch and runs batch k when k % ranks is its rank (the others' parts stay undefined until the gather);
  // under MirroredStrategy the batches are read in rounds of one per replica, batch k on replica k % replicas.
  std::vector<std::vector<Tensor>> parts;
  std::vector<int64_t> rows;
  std::vector<data::Element> round(1);
  std::vector<std::vector<Tensor>> rx(1), ry(1);
  const bool replicated = nn::distribute::replicated_in_process(strategy_.get());
  const int per_round = replicated ? strategy_->replicas() : 1;
  round.resize(static_cast<size_t>(per_round));
  rx.resize(round.size());
  ry.resize(round.size());
  std::vector<nn::ProgramCache*> caches;
  nn::distribute::MpiCollective* world = nullptr;
  graph::ExecContext ctx = nn::exec_context(device_, step_, false, optimizer_.get());
  auto read = [&](nn::Compiled& c, int64_t k) {
    for (size_t j = 0; j < outputs_.size(); ++j) {
      Tensor& out = parts[static_cast<size_t>(k)][j];
      c.program->read_output(c.outputs[j], out.raw(), out.nbytes());
    }
  };
  for (int64_t s = 0;;) {
    int64_t got = 0;
    for (; got < per_round && it.next(round[static_cast<size_t>(got)]); ++got) {
      const auto g = static_cast<size_t>(got);
      if (on_device) {  // never replicated: one batch per round
        if (s == 0) {
          on_device->stand_ins(inputs_.size(), outputs_.size(), false, rx[g], ry[g], "predict");
          ensure_built(rx[g]);
          check_data(rx[g], nullptr, "predict");
        }
        rows.push_back(on_device->split(round[g], inputs_.size(), rx[g], ry[g], false, batch_rows));
      } else {
        split_element(round[g], rx[g], ry[g], false, "predict");
        ensure_built(rx[g]);
        check_data(rx[g], nullptr, "predict");
        rows.push_back(rx[g][0].dim(0));
      }
      parts.emplace_back();
    }
    if (got == 0) break;
    if (replicated) {
      if (caches.empty()) {  // the model is built now (by the first batch)
        caches =
            nn::distribute::synced_replicas(per_round, [&](int r) -> nn::ProgramCache& { return replica_programs(r); });
        replicas_synced_ = true;
      }
      nn::distribute::run_on_replicas(
          *strategy_, caches, s, got, ctx,
          [&](int r, int64_t k) {
            caches[static_cast<size_t>(r)]->get(nn::ProgramKind::predict, rows[static_cast<size_t>(k)]);
            for (const KerasTensor& o : outputs_)
              parts[static_cast<size_t>(k)].emplace_back(o.shape().with_batch(rows[static_cast<size_t>(k)]),
                                                         DType::f32);
          },
          [&](int r, int64_t k, const graph::ExecContext& c) {
            nn::Compiled& p =
                caches[static_cast<size_t>(r)]->get(nn::ProgramKind::predict, rows[static_cast<size_t>(k)]);
            nn::HostStager::bind_rows(p, rx[static_cast<size_t>(k - s)], nullptr, nullptr, 0,
                                      rows[static_cast<size_t>(k)]);
            p.program->run(c);
            read(p, k);
          });
      s += got;
      if (got < per_round) break;
      continue;
    }
    if (s == 0) world = evaluation_group("predict the dataset " + dataset.describe());
    if (!world || s % world->size() == world->rank()) {
      try {
        const int64_t bs = rows.back();
        nn::Compiled& c = programs_->get(nn::ProgramKind::predict, bs);
        nn::HostStager::bind_rows(c, rx[0], nullptr, batch_rows, 0, bs);
        c.program->run(ctx);
        for (const KerasTensor& o : outputs_) parts.back().emplace_back(o.shape().with_batch(bs), DType::f32);
        read(c, s);
        if (world) nn::distribute::count_rank_batch(*strategy_);
      } catch (const std::exception& ex) {
        if (!world) throw;
        world->abort(std::string("predict: ") + ex.what());  // at once, not after the others' collective timeout
      }
    }
    ++s;
  }
  int64_t total = 0;
  for (const int64_t r : rows) total += r;
  std::vector<Tensor> result;
  for (size_t j = 0; j < outputs_.size(); ++j) {
    Tensor all;
    try {  // MPI: out of memory here on one rank ends the job at once, not after the others' collective timeout
      all = Tensor(outputs_[j].shape().with_batch(total), DType::f32);
    } catch (const std::exception& ex) {
      if (!world) throw;
      world->abort(std::string("predict: ") + ex.what());
    }
    const size_t row = total > 0 ? all.nbytes() / static_cast<size_t>(total) : 0;
    size_t offset = 0;
    for (size_t k = 0; k < parts.size(); ++k) {
      if (!parts[k].empty())
        std::memcpy(static_cast<char*>(all.raw()) + offset, parts[k][j].raw(), parts[k][j].nbytes());
      offset += static_cast<size_t>(rows[k]) * row;
    }
    result.push_back(std::move(all));
  }
  if (world) nn::distribute::gather_batches(*world, result, rows, "predict outputs");
  return result;
}

}  // namespace tk
