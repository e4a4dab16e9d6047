// The TensorBoard callback: Keras' run layout and tag names over EventFileWriter.
#include "trainkit/io/tensorboard.h"

#include "trainkit/core/error.h"
#include "trainkit/nn/model.h"
#include "trainkit/runtime/memory.h"

namespace tk::callbacks {
namespace {

bool is_validation(const std::string& key) { return key.rfind("val_", 0) == 0; }
constexpr double kMiB = 1024.0 * 1024.0;

}  // namespace

TensorBoard::TensorBoard(std::string log_dir, TensorBoardOptions options)
    : log_dir_(std::move(log_dir)), options_(options) {
  if (log_dir_.empty()) throw InvalidArgument("TensorBoard: log_dir is empty (give a folder, e.g. \"logs\")");
  if (options_.histogram_freq < 0)
    throw InvalidArgument("TensorBoard: histogram_freq must be >= 0, got " + std::to_string(options_.histogram_freq));
  if (options_.update_freq < 0)
    throw InvalidArgument("TensorBoard: update_freq must be >= 0 (0: once per epoch), got " +
                          std::to_string(options_.update_freq));
}

TensorBoard::~TensorBoard() = default;

void TensorBoard::on_train_begin(const Logs&) {
  validation_.reset();
  train_.reset();
  if (!is_chief()) return;  // under MPI: rank 0 alone writes event files (every write below needs train_)
  train_ = std::make_unique<io::EventFileWriter>(log_dir_ / "train");
  // Continues where the optimizer is (a run resumed by BackupAndRestore, or a second fit).
  global_step_ = model && model->optimizer() ? model->optimizer()->iterations() : 0;
}

void TensorBoard::on_train_batch_end(int64_t, const Logs& logs) {
  ++global_step_;
  if (!train_ || options_.update_freq == 0 || global_step_ % options_.update_freq != 0) return;
  for (const auto& [key, value] : logs.items())
    if (!is_validation(key)) train_->add_scalar("batch_" + key, static_cast<float>(value), global_step_);
}

void TensorBoard::on_epoch_end(int epoch, const Logs& logs) {
  if (!train_) return;
  for (const auto& [key, value] : logs.items()) {
    if (is_validation(key)) {
      if (!validation_) validation_ = std::make_unique<io::EventFileWriter>(log_dir_ / "validation");
      validation_->add_scalar("epoch_" + key.substr(4), static_cast<float>(value), epoch);
    } else {
      train_->add_scalar("epoch_" + key, static_cast<float>(value), epoch);
    }
  }
  if (model && model->optimizer() && !logs.contains("learning_rate"))
    train_->add_scalar("epoch_learning_rate", model->optimizer()->learning_rate(), epoch);
  if (model && options_.log_memory) {
    const MemoryInfo m = config::get_memory_info(model->device());
    train_->add_scalar("epoch_memory_in_use_mib", static_cast<float>(double(m.current) / kMiB), epoch);
    train_->add_scalar("epoch_memory_peak_mib", static_cast<float>(double(m.peak) / kMiB), epoch);
  }
  if (model && options_.histogram_freq > 0 && epoch % options_.histogram_freq == 0) {
    for (const LayerPtr& layer : model->layers())
      for (const Weight& w : layer->weights()) {
        const Tensor host = w.value.on_host() ? w.value : w.value.to_device(Device::cpu());
        const Tensor f = host.dtype() == DType::f32 ? host : host.to(DType::f32);
        train_->add_histogram(w.name + "/histogram", f.data<float>(), f.numel(), epoch);
      }
  }
  train_->flush();
  if (validation_) validation_->flush();
}

void TensorBoard::on_train_end(const Logs&) {
  if (train_) train_->close();
  if (validation_) validation_->close();
}

std::filesystem::path TensorBoard::train_file() const { return train_ ? train_->path() : std::filesystem::path{}; }
std::filesystem::path TensorBoard::validation_file() const {
  return validation_ ? validation_->path() : std::filesystem::path{};
}

}  // namespace tk::callbacks
