#include "cli/callback_options.h"

#include <cstdlib>

#include "trainkit/core/error.h"
#include "trainkit/nn/keras_callbacks.h"

namespace tk::cli {

void add_callback_options(CLI::App* fit, CallbackArgs& a) {
  fit->add_option("--backup-dir", a.backup_dir,
                  "Back up the training state here (BackupAndRestore): a killed run started again with the same "
                  "command resumes at the saved step, bit for bit");
  fit->add_option("--backup-freq", a.backup_freq, "\"epoch\", or save the backup every N optimizer steps")
      ->capture_default_str();
  fit->add_flag("--keep-backup", a.keep_backup,
                "Keep the backup when training ends, holding the final state (a later run with more --epochs "
                "continues from it)");
  fit->add_option("--early-stopping", a.early_stopping,
                  "Stop after this many epochs without improvement of --monitor (EarlyStopping, restoring the best "
                  "weights)");
  fit->add_option("--reduce-lr-on-plateau", a.reduce_lr_on_plateau,
                  "Divide the learning rate by 10 after this many epochs without improvement of --monitor");
  fit->add_option("--monitor", a.monitor,
                  "Log watched by --early-stopping and --reduce-lr-on-plateau (default: "
                  "val_loss with validation data, else loss)");
  fit->add_option("--csv-log", a.csv_log, "Write one CSV row per epoch to this file (CSVLogger)");
  fit->add_option("--checkpoint", a.checkpoint,
                  "Save the model after every epoch (ModelCheckpoint): a .keras path, or .weights.h5 for the weights; "
                  "it may name {epoch} and logs, e.g. ckpt/m_{epoch:02d}-{val_loss:.2f}.keras");
  fit->add_flag("--checkpoint-best-only", a.checkpoint_best_only,
                "With --checkpoint: save only when --monitor improves");
  fit->add_flag("--terminate-on-nan", a.terminate_on_nan, "Stop training when a batch's loss is NaN or infinite");
}

std::vector<CallbackPtr> make_callbacks(const CallbackArgs& a, bool has_validation, int verbose) {
  const int say = verbose != 0 ? 1 : 0;
  using namespace callbacks;
  std::vector<CallbackPtr> out;
  const std::string monitor = !a.monitor.empty() ? a.monitor : has_validation ? "val_loss" : "loss";
  if (!has_validation && monitor.rfind("val_", 0) == 0 &&
      (a.early_stopping >= 0 || a.reduce_lr_on_plateau >= 0 || a.checkpoint_best_only))
    throw InvalidArgument("--monitor " + monitor +
                          ": this run has no validation data (add --validation-split or --validation-data, or "
                          "monitor loss)");
  if (!a.backup_dir.empty()) {
    BackupAndRestoreOptions o;
    o.delete_checkpoint = !a.keep_backup;
    if (a.backup_freq != "epoch") {
      char* end = nullptr;
      const long long n = std::strtoll(a.backup_freq.c_str(), &end, 10);
      if (a.backup_freq.empty() || *end != '\0' || n <= 0)
        throw InvalidArgument("--backup-freq must be \"epoch\" or a positive number of steps, got " + a.backup_freq);
      o.save_freq = n;
    }
    auto backup = std::make_shared<BackupAndRestore>(a.backup_dir, o);
    out.push_back(backup);
  } else if (a.keep_backup || a.backup_freq != "epoch") {
    throw InvalidArgument("--backup-freq and --keep-backup need --backup-dir");
  }
  if (a.early_stopping >= 0)
    out.push_back(std::make_shared<EarlyStopping>(EarlyStoppingOptions{
        .monitor = monitor, .patience = a.early_stopping, .verbose = say, .restore_best_weights = true}));
  else if (a.early_stopping != -1)
    throw InvalidArgument("--early-stopping must be >= 0 epochs, got " + std::to_string(a.early_stopping));
  if (a.reduce_lr_on_plateau >= 0)
    out.push_back(std::make_shared<ReduceLROnPlateau>(
        ReduceLROnPlateauOptions{.monitor = monitor, .patience = a.reduce_lr_on_plateau, .verbose = say}));
  else if (a.reduce_lr_on_plateau != -1)
    throw InvalidArgument("--reduce-lr-on-plateau must be >= 0 epochs, got " + std::to_string(a.reduce_lr_on_plateau));
  if (!a.checkpoint.empty()) {
    const bool weights_only = a.checkpoint.size() > 11 && a.checkpoint.ends_with(".weights.h5");
    out.push_back(
        std::make_shared<ModelCheckpoint>(a.checkpoint, ModelCheckpointOptions{.monitor = monitor,
                                                                               .verbose = say,
                                                                               .save_best_only = a.checkpoint_best_only,
                                                                               .save_weights_only = weights_only}));
  } else if (a.checkpoint_best_only) {
    throw InvalidArgument("--checkpoint-best-only needs --checkpoint PATH");
  }
  if (!a.csv_log.empty()) out.push_back(std::make_shared<CSVLogger>(a.csv_log));
  if (a.terminate_on_nan) out.push_back(std::make_shared<TerminateOnNaN>());
  return out;
}

}  // namespace tk::cli
