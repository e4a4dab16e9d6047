// Callbacks that watch a log value: EarlyStopping, ReduceLROnPlateau, TerminateOnNaN, and the per-epoch
// LearningRateScheduler. The rules follow Keras 3's keras/src/callbacks/*.py line by line.
#include <cmath>
#include <cstdio>
#include <limits>

#include "trainkit/core/error.h"
#include "trainkit/nn/keras_callbacks.h"
#include "trainkit/nn/model.h"

namespace tk::callbacks {
namespace {

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// Keras' "auto" mode: accuracy-like metrics are maximized, losses and errors minimized.
bool maximize(Mode mode, const std::string& monitor, const char* who) {
  if (mode != Mode::automatic) return mode == Mode::max;
  const std::string m = monitor.rfind("val_", 0) == 0 ? monitor.substr(4) : monitor;
  if (contains(m, "acc") || contains(m, "auc") || contains(m, "precision") || contains(m, "recall")) return true;
  if (contains(m, "loss") || contains(m, "error") || contains(m, "crossentropy")) return false;
  throw InvalidArgument(std::string(who) + ": cannot tell whether '" + monitor +
                        "' should go up or down (give mode = Mode::min or Mode::max)");
}

// The monitored value, or nullopt with a one-time warning naming what is available (as Keras).
std::optional<double> monitored(const Logs& logs, const std::string& monitor, const char* who, bool& warned) {
  if (logs.contains(monitor)) return logs.get(monitor);
  if (!warned) {
    std::string known;
    for (const auto& [k, v] : logs.items()) known += (known.empty() ? "" : ", ") + k;
    std::fprintf(stderr, "WARNING: %s conditioned on metric '%s' which is not available. Available metrics are: %s\n",
                 who, monitor.c_str(), known.c_str());
    warned = true;
  }
  return std::nullopt;
}

}  // namespace

// ---------------------------------------------------------------- EarlyStopping
EarlyStopping::EarlyStopping(EarlyStoppingOptions options) : o_(std::move(options)) {
  if (o_.patience < 0)
    throw InvalidArgument("EarlyStopping: patience must be >= 0, got " + std::to_string(o_.patience));
  maximize_ = maximize(o_.mode, o_.monitor, "EarlyStopping");
  o_.min_delta = std::abs(o_.min_delta);
}

bool EarlyStopping::improves(double current, double reference) const {
  return maximize_ ? current - o_.min_delta > reference : current + o_.min_delta < reference;
}

void EarlyStopping::on_train_begin(const Logs&) {
  wait_ = stopped_epoch_ = best_epoch_ = 0;
  best_.reset();
  best_weights_.clear();
}

void EarlyStopping::on_epoch_end(int epoch, const Logs& logs) {
  const std::optional<double> current = monitored(logs, o_.monitor, "Early stopping", warned_);
  if (!current || epoch < o_.start_from_epoch) return;
  if (o_.restore_best_weights && best_weights_.empty()) {  // never improved yet: the current weights are the best
    best_weights_ = model->get_weights();
    best_epoch_ = epoch;
  }
  ++wait_;
  if (!best_ || improves(*current, *best_)) {
    best_ = *current;
    best_epoch_ = epoch;
    if (o_.restore_best_weights) best_weights_ = model->get_weights();
    if (!o_.baseline || improves(*current, *o_.baseline)) wait_ = 0;  // beat both the baseline and the best
    return;
  }
  if (wait_ >= o_.patience && epoch > 0) {
    stopped_epoch_ = epoch;
    model->stop_training = true;
  }
}

void EarlyStopping::on_train_end(const Logs&) {
  if (stopped_epoch_ > 0 && o_.verbose > 0) std::printf("Epoch %d: early stopping\n", stopped_epoch_ + 1);
  if (o_.restore_best_weights && !best_weights_.empty()) {
    if (o_.verbose > 0) std::printf("Restoring model weights from the end of the best epoch: %d.\n", best_epoch_ + 1);
    model->set_weights(best_weights_);
  }
}

// ---------------------------------------------------------------- ReduceLROnPlateau
ReduceLROnPlateau::ReduceLROnPlateau(ReduceLROnPlateauOptions options) : o_(std::move(options)) {
  if (!(o_.factor < 1.0) || !(o_.factor >= 0.0))
    throw InvalidArgument("ReduceLROnPlateau: factor must be in [0, 1) (it multiplies the learning rate), got " +
                          std::to_string(o_.factor));
  if (o_.patience < 0 || o_.cooldown < 0 || o_.min_lr < 0)
    throw InvalidArgument("ReduceLROnPlateau: patience, cooldown and min_lr must be >= 0");
  maximize_ = maximize(o_.mode, o_.monitor, "ReduceLROnPlateau");
}

void ReduceLROnPlateau::on_train_begin(const Logs&) {
  best_ = maximize_ ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  wait_ = cooldown_counter_ = 0;
}

void ReduceLROnPlateau::on_epoch_end(int epoch, const Logs& logs) {
  const std::optional<double> current = monitored(logs, o_.monitor, "Learning rate reduction", warned_);
  if (!current) return;
  const bool in_cooldown = cooldown_counter_ > 0;
  if (in_cooldown) {
    --cooldown_counter_;
    wait_ = 0;
  }
  const bool better = maximize_ ? *current > best_ + o_.min_delta : *current < best_ - o_.min_delta;
  if (better) {
    best_ = *current;
    wait_ = 0;
  } else if (!in_cooldown && ++wait_ >= o_.patience) {
    const double old_lr = model->optimizer()->learning_rate();
    if (old_lr > static_cast<double>(static_cast<float>(o_.min_lr))) {
      const double new_lr = std::max(old_lr * o_.factor, o_.min_lr);
      model->optimizer()->set_learning_rate(static_cast<float>(new_lr));
      if (o_.verbose > 0)
        std::printf("\nEpoch %d: ReduceLROnPlateau reducing learning rate to %g.\n", epoch + 1,
                    static_cast<double>(static_cast<float>(new_lr)));
      cooldown_counter_ = o_.cooldown;
      wait_ = 0;
    }
  }
}

// ---------------------------------------------------------------- LearningRateScheduler
LearningRateScheduler::LearningRateScheduler(std::function<double(int, double)> schedule, int verbose)
    : schedule_(std::move(schedule)), verbose_(verbose) {
  if (!schedule_) throw InvalidArgument("LearningRateScheduler: the schedule is empty");
}

void LearningRateScheduler::on_epoch_begin(int epoch, const Logs&) {
  const double lr = schedule_(epoch, model->optimizer()->learning_rate());
  if (!std::isfinite(lr) || lr < 0)
    throw InvalidArgument("LearningRateScheduler: the schedule returned " + std::to_string(lr) + " for epoch " +
                          std::to_string(epoch) + " (it must return a finite learning rate >= 0)");
  model->optimizer()->set_learning_rate(static_cast<float>(lr));
  if (verbose_ > 0) std::printf("\nEpoch %d: LearningRateScheduler setting learning rate to %g.\n", epoch + 1, lr);
}

// ---------------------------------------------------------------- TerminateOnNaN
void TerminateOnNaN::on_train_batch_end(int64_t batch, const Logs& logs) {
  if (!logs.contains("loss")) return;
  const double loss = logs.get("loss");
  if (!std::isfinite(loss)) {
    std::printf("Batch %lld: Invalid loss, terminating training\n", static_cast<long long>(batch));
    model->stop_training = true;
  }
}

}  // namespace tk::callbacks
