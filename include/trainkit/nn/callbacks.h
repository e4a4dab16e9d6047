// Callbacks (Keras' interface): History and the progress display are callbacks too.
//
//   struct StopAt90 : tk::Callback {
//     void on_epoch_end(int epoch, const tk::Logs& logs) override {
//       if (logs.get("accuracy") > 0.9) model->stop_training = true;
//     }
//   };
//   model.fit(x, y, {.epochs = 20, .callbacks = {std::make_shared<StopAt90>()}});
#pragma once
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tk {

class Model;

// Name -> value, in insertion order (loss first, then metrics, then val_*). Updating an existing key
// never allocates, so the training loop can refresh logs at every step.
class Logs {
 public:
  void set(const std::string& key, double value);
  double get(const std::string& key) const;  // throws InvalidArgument for an unknown key
  bool contains(const std::string& key) const;
  const std::vector<std::pair<std::string, double>>& items() const { return items_; }
  void clear() { items_.clear(); }

 private:
  std::vector<std::pair<std::string, double>> items_;
};

struct CallbackParams {
  int epochs = 0;
  int64_t steps = 0;  // per epoch
  int verbose = 0;
};

class Callback {
 public:
  virtual ~Callback() = default;
  Model* model = nullptr;  // set by fit
  CallbackParams params;
  virtual void on_train_begin(const Logs&) {}
  virtual void on_train_end(const Logs&) {}
  virtual void on_epoch_begin(int /*epoch*/, const Logs&) {}
  virtual void on_epoch_end(int /*epoch*/, const Logs&) {}
  virtual void on_train_batch_begin(int64_t /*batch*/, const Logs&) {}
  virtual void on_train_batch_end(int64_t /*batch*/, const Logs&) {}

  // False on the ranks after the first under MultiWorkerMirroredStrategy (MPI): the callbacks that write files
  // (ModelCheckpoint, BackupAndRestore, CSVLogger, TensorBoard) write on the chief alone, as Keras' do, so N ranks
  // never write one file at once. True without a model or a strategy.
  bool is_chief() const;
};
using CallbackPtr = std::shared_ptr<Callback>;

// Returned by fit: per-epoch values of every log key.
class History : public Callback {
 public:
  std::vector<int> epoch;
  std::map<std::string, std::vector<double>> history;
  void on_epoch_end(int e, const Logs& logs) override;
};

// Keras' progress display: a bar redrawn in place on a terminal (verbose 1), one line per epoch
// otherwise (verbose 2).
class ProgbarLogger : public Callback {
 public:
  explicit ProgbarLogger(int verbose, bool terminal);
  void on_epoch_begin(int epoch, const Logs&) override;
  void on_train_batch_end(int64_t batch, const Logs& logs) override;
  void on_epoch_end(int epoch, const Logs& logs) override;

 private:
  void draw(int64_t done, const Logs& logs, bool final_line, bool with_val);
  int verbose_;
  bool terminal_;
  std::chrono::steady_clock::time_point start_, last_draw_;
  int64_t seen_ = 0;
  char line_[1024];
};

}  // namespace tk
