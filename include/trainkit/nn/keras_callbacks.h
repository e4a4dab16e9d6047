// Keras' built-in callbacks, with Keras' names, arguments and defaults (keras.callbacks.*).
//
//   using namespace tk::callbacks;
//   model.fit(x, y, {.epochs = 50, .validation_split = 0.1f, .callbacks = {
//       // after a crash, the same command resumes here: same batches, bit-identical weights
//       std::make_shared<BackupAndRestore>("run1/backup", BackupAndRestoreOptions{.save_freq = 200}),
//       std::make_shared<EarlyStopping>(EarlyStoppingOptions{.patience = 3, .restore_best_weights = true}),
//       std::make_shared<ReduceLROnPlateau>(ReduceLROnPlateauOptions{.factor = 0.5, .patience = 2}),
//       std::make_shared<CSVLogger>("run1/log.csv"),
//       std::make_shared<TerminateOnNaN>()}});
//
// Every file is written atomically (io/atomic_file.h): a crash at any moment leaves the previous file whole.
#pragma once
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainkit/nn/callbacks.h"
#include "trainkit/nn/training_state.h"

namespace tk::callbacks {

// "min": lower is better; "max": higher is better; "auto": from the name (losses and errors min; accuracy,
// AUC, precision and recall max).
enum class Mode { automatic, min, max };

// ---------------------------------------------------------------- BackupAndRestore
struct BackupAndRestoreOptions {
  int64_t save_freq = 0;          // 0: at the end of every epoch (Keras' "epoch"); N: every N optimizer steps
  bool delete_checkpoint = true;  // remove the backup when fit ends normally (Keras' default); false: save the
                                  // final state there (a later fit with more epochs continues from it)
};
// Saves the whole training state (weights, optimizer state, counters, data position) to
// backup_dir/latest.tkstate; when fit starts and that file exists, restores it and continues at the saved epoch
// and batch, reading the same batches an uninterrupted run would read (same model, data and seed required).
// While a fit runs, the folder is locked (flock on backup_dir/.lock, released by the kernel if the process
// dies): a second process given the same folder gets an IoError naming the holder instead of mixing backups.
class BackupAndRestore : public Callback {
 public:
  explicit BackupAndRestore(std::string backup_dir, BackupAndRestoreOptions options = {});
  ~BackupAndRestore() override;
  BackupAndRestore(const BackupAndRestore&) = delete;
  BackupAndRestore& operator=(const BackupAndRestore&) = delete;
  void on_train_begin(const Logs&) override;
  void on_train_batch_end(int64_t batch, const Logs&) override;
  void on_epoch_end(int epoch, const Logs&) override;
  void on_train_end(const Logs&) override;
  std::string backup_path() const;
  // Where the last on_train_begin resumed from (nullopt: it started fresh).
  const std::optional<FitPosition>& restored_from() const { return restored_; }

 private:
  void save();
  void lock_folder();
  void unlock_folder();
  int lock_fd_ = -1;
  std::string dir_;
  BackupAndRestoreOptions o_;
  std::optional<FitPosition> restored_;
};

// ---------------------------------------------------------------- ModelCheckpoint
struct ModelCheckpointOptions {
  std::string monitor = "val_loss";
  int verbose = 0;
  bool save_best_only = false;     // save only when `monitor` improves on the best so far
  bool save_weights_only = false;  // filepath must then end in .weights.h5 (else .keras)
  Mode mode = Mode::automatic;
  int64_t save_freq = 0;  // 0: at the end of every epoch (Keras' "epoch"); N: every N batches
  std::optional<double> initial_value_threshold = std::nullopt;  // the best value to beat at the start
};
// Saves the model (Model::save, .keras) or its weights (save_weights, .weights.h5), atomically. `filepath` may
// name the epoch (1-based) and any log, with Python's format specs: "ckpt/model_{epoch:02d}-{val_loss:.2f}.keras".
class ModelCheckpoint : public Callback {
 public:
  explicit ModelCheckpoint(std::string filepath, ModelCheckpointOptions options = {});
  void on_train_begin(const Logs&) override;
  void on_epoch_begin(int epoch, const Logs&) override;
  void on_train_batch_end(int64_t batch, const Logs& logs) override;
  void on_epoch_end(int epoch, const Logs& logs) override;
  // The path for an epoch (0-based, shown 1-based as Keras does) and logs; InvalidArgument for a field that
  // is neither "epoch" nor a log.
  std::string format_path(int epoch, const Logs& logs) const;
  double best() const { return best_; }

 private:
  void save(int epoch, const Logs& logs);
  std::string filepath_;
  ModelCheckpointOptions o_;
  bool maximize_ = false;
  double best_ = 0;
  int current_epoch_ = 0;
  int64_t batches_since_save_ = 0;
  bool warned_ = false;
};

// ---------------------------------------------------------------- EarlyStopping
struct EarlyStoppingOptions {
  std::string monitor = "val_loss";
  double min_delta = 0.0;  // an improvement must beat the best by more than this
  int patience = 0;        // epochs without improvement before stopping
  int verbose = 0;
  Mode mode = Mode::automatic;
  std::optional<double> baseline = std::nullopt;  // stop unless the monitor beats this
  bool restore_best_weights = false;
  int start_from_epoch = 0;  // epochs of warm-up before watching
};
class EarlyStopping : public Callback {
 public:
  explicit EarlyStopping(EarlyStoppingOptions options = {});
  void on_train_begin(const Logs&) override;
  void on_epoch_end(int epoch, const Logs& logs) override;
  void on_train_end(const Logs&) override;
  int stopped_epoch() const { return stopped_epoch_; }  // 0: did not stop early
  int best_epoch() const { return best_epoch_; }

 private:
  bool improves(double current, double reference) const;
  EarlyStoppingOptions o_;
  bool maximize_ = false;
  int wait_ = 0, stopped_epoch_ = 0, best_epoch_ = 0;
  std::optional<double> best_;
  std::vector<Tensor> best_weights_;
  bool warned_ = false;
};

// ---------------------------------------------------------------- ReduceLROnPlateau
struct ReduceLROnPlateauOptions {
  std::string monitor = "val_loss";
  double factor = 0.1;  // new_lr = lr * factor (must be < 1)
  int patience = 10;
  int verbose = 0;
  Mode mode = Mode::automatic;
  double min_delta = 1e-4;
  int cooldown = 0;  // epochs to wait after a reduction before counting again
  double min_lr = 0.0;
};
class ReduceLROnPlateau : public Callback {
 public:
  explicit ReduceLROnPlateau(ReduceLROnPlateauOptions options = {});
  void on_train_begin(const Logs&) override;
  void on_epoch_end(int epoch, const Logs& logs) override;

 private:
  ReduceLROnPlateauOptions o_;
  bool maximize_ = false;
  double best_ = 0;
  int wait_ = 0, cooldown_counter_ = 0;
  bool warned_ = false;
};

// ---------------------------------------------------------------- LearningRateScheduler
// schedule(epoch, current_lr) -> the learning rate for that epoch, set at the start of each epoch.
class LearningRateScheduler : public Callback {
 public:
  explicit LearningRateScheduler(std::function<double(int epoch, double lr)> schedule, int verbose = 0);
  void on_epoch_begin(int epoch, const Logs&) override;

 private:
  std::function<double(int, double)> schedule_;
  int verbose_;
};

// ---------------------------------------------------------------- CSVLogger
// One row per epoch: "epoch" then the logs' keys in sorted order (as Keras' csv.DictWriter writes them).
class CSVLogger : public Callback {
 public:
  explicit CSVLogger(std::string filename, char separator = ',', bool append = false);
  void on_train_begin(const Logs&) override;
  void on_epoch_end(int epoch, const Logs& logs) override;

 private:
  std::string filename_;
  char sep_;
  bool append_;
  std::string text_;  // the whole file, rewritten atomically each epoch
  std::vector<std::string> keys_;
};

// ---------------------------------------------------------------- TerminateOnNaN
// Stops training when a batch's loss is NaN or infinite.
class TerminateOnNaN : public Callback {
 public:
  void on_train_batch_end(int64_t batch, const Logs& logs) override;
};

}  // namespace tk::callbacks
