// The fit options that attach Keras callbacks: backups a crashed run resumes from, early stopping, learning-rate
// reduction on a plateau, a CSV log and stopping on a NaN loss.
//
//   trainkit fit --backup-dir run1/backup --backup-freq 200   # kill it any time; the same command resumes
//   trainkit fit --validation-split 0.1 --early-stopping 3 --reduce-lr-on-plateau 2 --csv-log run1/log.csv
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "trainkit/nn/callbacks.h"

namespace tk::cli {

struct CallbackArgs {
  std::string backup_dir;             // BackupAndRestore
  std::string backup_freq = "epoch";  // "epoch" or a number of optimizer steps
  bool keep_backup = false;           // keep the backup (the finished run's state) instead of deleting it
  int early_stopping = -1;            // EarlyStopping patience; -1: off
  int reduce_lr_on_plateau = -1;      // ReduceLROnPlateau patience; -1: off
  std::string monitor;                // default: val_loss with validation data, else loss
  std::string csv_log;                // CSVLogger file
  bool terminate_on_nan = false;
  std::string checkpoint;  // ModelCheckpoint filepath (.keras, or .weights.h5 for the weights alone)
  bool checkpoint_best_only = false;
};

void add_callback_options(CLI::App* command, CallbackArgs& args);
// The callbacks the options ask for; InvalidArgument names a bad option. `has_validation`: the fit reports
// val_* logs (picks the default monitor); `verbose`: the fit's -v (0: the callbacks print nothing).
std::vector<CallbackPtr> make_callbacks(const CallbackArgs& args, bool has_validation, int verbose);

}  // namespace tk::cli
