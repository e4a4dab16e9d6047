// Every fit — over arrays, a Dataset, or a device-resident dataset; on one replica or many (the step splits the
// batch: train_step) — around the one batch loop (nn::for_each_batch, nn/training/batch_source.h), one batch per
// round. Its source says where batches come from and how a resume finds its place again; this driver owns the rest:
// epochs, callbacks, the resume position, lagged logs.
#include <memory>

#include "nn/compiler/programs.h"
#include "nn/distribute/strategy_state.h"
#include "nn/training/batch_source.h"
#include "nn/training/fit_common.h"
#include "nn/training/trainer.h"

namespace tk {

History nn::Trainer::fit_loop(nn::BatchSource& source, const FitOptions& o, int64_t micro,
                              const std::function<Logs()>& validate) {
  replicas_synced = false;        // data parallel: weights may have been set since the last fit
  programs().mirrors().upload();  // a device the host cannot address: the same
  auto history = std::make_shared<History>();
  const std::vector<CallbackPtr> callbacks = nn::fit_callbacks(&model_, o, source.steps(), history);
  const int verbose = !model_.is_chief() ? 0 : o.verbose == -1 ? 1 : o.verbose;  // MPI: rank 0 alone prints

  Logs logs;
  model_.stop_training = false;
  position = FitPosition{.epoch = o.initial_epoch};
  source.record(position, false);
  for (const CallbackPtr& cb : callbacks) cb->on_train_begin(logs);
  int first_epoch = o.initial_epoch;
  int64_t first_step = 0;
  if (resume) {  // restore_training_state (before fit, or BackupAndRestore in on_train_begin): continue there
    const FitPosition r = *resume;
    resume.reset();
    source.resume(r);
    first_epoch = r.epoch;
    first_step = r.batch;
    position = r;
  }
  // On a GPU batch k's logs are read after batch k+1 was staged and queued (nn/training/lagged_logs.h: what that
  // means for callbacks and stop_training); on the CPU right after each step.
  const std::unique_ptr<nn::LaggedLogs> lagged = nn::make_lagged_logs(model_.device(), programs(), replicated());
  std::vector<nn::Batch> round(1);  // fit reads one batch at a time (a replicated step splits it)
  for (int epoch = first_epoch; epoch < o.epochs && !model_.stop_training; ++epoch) {
    const int64_t start = epoch == first_epoch ? first_step : 0;
    source.begin_epoch(start);
    position.epoch = epoch;
    position.batch = start;
    source.record(position, false);
    logs.clear();
    for (const CallbackPtr& cb : callbacks) cb->on_epoch_begin(epoch, logs);
    const tk::distribute::StepClock clock = strategy_ ? strategy_->clock() : tk::distribute::StepClock{};
    nn::Accumulator acc;
    acc.lagged = lagged.get();
    auto end_batch = [&](int64_t b) {
      acc.write(logs);
      add_loss_scale_logs(logs);
      for (const CallbackPtr& cb : callbacks) cb->on_train_batch_end(b, logs);
    };
    const nn::DeliverOnUnwind deliver_on_unwind(lagged.get(), acc, end_batch);  // an exception: trained batches first
    const int64_t steps = source.steps();  // 0: until the source runs out (its length is learned then)
    bool ran_out = false;
    const int64_t s = nn::for_each_batch(source, start, steps, round, ran_out, [&](int64_t k, size_t) {
      const nn::Batch& batch = round[0];
      for (const CallbackPtr& cb : callbacks) cb->on_train_batch_begin(k, logs);
      if (lagged) lagged->begin(k);
      train_step(*batch.x, *batch.y, batch.rows, batch.n, micro, acc, batch.own_rows);
      if (lagged) lagged->end();
      source.step_done();
      position.batch = k + 1;  // with lagged logs: the batches queued (what the model's weights include)
      source.record(position, false);
      if (lagged)
        nn::deliver_lagged(lagged.get(), acc, false, end_batch);  // batch k - 1's
      else
        end_batch(k);
      return !model_.stop_training;  // a callback stopped training mid-epoch (TerminateOnNaN); Keras 3 does the same
    });
    if (ran_out && source.stop_when_exhausted()) model_.stop_training = true;
    nn::deliver_lagged(lagged.get(), acc, true, end_batch);  // the epoch's last (after a stop: the one queued since)
    if (steps == 0) {  // the first pass counted the steps: later progress bars know their length
      source.learned_steps(s);
      for (const CallbackPtr& cb : callbacks) cb->params.steps = s;
    }
    tk::distribute::add_allreduce_logs(strategy_.get(), clock, logs);
    source.end_epoch(logs);
    if (validate) {
      const Logs val = validate();
      for (const auto& [k, v] : val.items()) logs.set("val_" + k, v);
    }
    position.epoch = epoch + 1;  // a state saved now resumes with the next epoch
    position.batch = 0;
    source.record(position, true);
    programs().mirrors().download();  // callbacks (checkpoints, early stopping) read the model's weights
    for (const CallbackPtr& cb : callbacks) cb->on_epoch_end(epoch, logs);
    source.after_epoch(verbose > 0);
  }
  programs().mirrors().download();
  for (const CallbackPtr& cb : callbacks) cb->on_train_end(logs);
  return *history;
}

}  // namespace tk
