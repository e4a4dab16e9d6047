// TensorBoard logs: Keras' TensorBoard callback, and the event-file writer under it.
//
//   using namespace tk::callbacks;
//   auto tb = std::make_shared<TensorBoard>("logs/run1", TensorBoardOptions{.histogram_freq = 1});
//   model.fit(x, y, {.epochs = 10, .validation_split = 0.1, .callbacks = {tb}});
//   // $ tensorboard --logdir logs        (or: trainkit fit --tensorboard logs/run1)
//
// As Keras writes them: logs/run1/train/ and logs/run1/validation/, one event file each, named
// events.out.tfevents.<seconds>.<host>.<pid>.<n>.v2; scalars "epoch_<metric>" at step = epoch (validation
// metrics without their "val_" prefix, in the validation run), "batch_<metric>" every update_freq steps at
// step = the global step (the optimizer's iterations), "epoch_learning_rate", and in train/ the input-wait fraction
// (fit on a Dataset) and the device memory in use and at peak ("epoch_memory_in_use_mib", "epoch_memory_peak_mib");
// weight histograms "<layer>/<weight>/histogram" every histogram_freq epochs. The model graph is not written.
//
// Files: TFRecord framing (uint64 length, masked CRC32C, data, masked CRC32C), first record an Event with
// file_version "brain.Event:2". They grow while training runs (TensorBoard reads them live), so they are
// appended and flushed after every epoch rather than written atomically; a crash can leave at most a torn last
// record, which TensorBoard's reader treats as not yet written.
#pragma once
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "trainkit/nn/callbacks.h"

namespace tk {

namespace io {

// One event file in `dir` (created if missing). Records are buffered until flush().
class EventFileWriter {
 public:
  explicit EventFileWriter(const std::filesystem::path& dir);
  ~EventFileWriter();  // flushes and closes; errors then are ignored (call close() to see them)
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // Scalars as Summary.Value.simple_value; wall_time < 0: now.
  void add_scalar(std::string_view tag, float value, int64_t step, double wall_time = -1);
  // A HistogramProto of `n` values: min, max, num, sum, sum of squares and `buckets` equal-width buckets
  // (one bucket when all values are equal).
  void add_histogram(std::string_view tag, const float* values, int64_t n, int64_t step, int buckets = 30,
                     double wall_time = -1);
  void flush();  // IoError naming the file when the write fails
  void close();
  const std::filesystem::path& path() const { return path_; }

 private:
  void write_record(const std::string& event);
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

// Serialized tensorflow.Event messages (for tests and tools): the file-version event and a scalar event.
std::string file_version_event(double wall_time);
std::string scalar_event(std::string_view tag, float value, int64_t step, double wall_time);

}  // namespace io

namespace callbacks {  // with Keras' built-in callbacks (trainkit/nn/keras_callbacks.h), as keras.callbacks.TensorBoard

struct TensorBoardOptions {
  int histogram_freq = 0;   // epochs between weight histograms; 0: none (Keras' default)
  int64_t update_freq = 0;  // 0: "epoch" (Keras' default); N: batch_<metric> scalars every N training steps
  bool log_memory = true;   // epoch_memory_in_use_mib / epoch_memory_peak_mib of the model's device
};

class TensorBoard : public Callback {
 public:
  explicit TensorBoard(std::string log_dir = "logs", TensorBoardOptions options = {});
  ~TensorBoard() override;
  void on_train_begin(const Logs& logs) override;
  void on_train_end(const Logs& logs) override;
  void on_epoch_end(int epoch, const Logs& logs) override;
  void on_train_batch_end(int64_t batch, const Logs& logs) override;

  // The event files written so far ("" before on_train_begin / before the first validation epoch).
  std::filesystem::path train_file() const;
  std::filesystem::path validation_file() const;

 private:
  std::filesystem::path log_dir_;
  TensorBoardOptions options_;
  std::unique_ptr<io::EventFileWriter> train_, validation_;
  int64_t global_step_ = 0;
};

}  // namespace callbacks
}  // namespace tk
