// fit(Dataset)'s batches: the staged pipeline's host batches, a device-resident dataset's row numbers
// (Dataset::on_device: x, y are then the arrays on the GPU, rows the batch's rows), or under
// MultiWorkerMirroredStrategy this rank's share of each global batch (data/worker_share: own_rows, n = the global
// batch's rows). Passes are numbered by the user's dataset, so reshuffling continues across fit calls and a resume
// reopens the same pass at the same batch. Measures how long each batch was waited for (the stall report of every
// epoch).
//
//   nn::DatasetBatches source(dataset, setup, steps_per_epoch, epochs);   // reads the first batch
//   model.ensure_built(source.first_x());
#pragma once
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "data/auto_shard.h"
#include "nn/training/batch_source.h"
#include "nn/training/device_dataset.h"
#include "trainkit/data/dataset.h"
#include "trainkit/data/stall.h"

namespace tk::nn {

class DatasetBatches final : public BatchSource {
 public:
  // Splits an element into the model's inputs and targets (Model::split_element); checks a batch (check_data).
  using Split = std::function<void(data::Element&, std::vector<Tensor>&, std::vector<Tensor>&)>;
  using Check = std::function<void(const std::vector<Tensor>&, const std::vector<Tensor>&)>;
  struct Setup {
    std::unique_ptr<DeviceDataset> on_device;  // the dataset's source is in the model's GPU memory
    std::optional<data::WorkerShare> share;    // this rank's part of each global batch (several MPI ranks)
    Split split;
    Check check;
    size_t inputs = 0, outputs = 0;  // the model's
    bool chief = true;               // prints the running-out warning
  };
  // Opens the user's next pass and reads its first batch (first_x/first_y: what builds the model).
  // InvalidArgument when the dataset yields nothing.
  DatasetBatches(const data::Dataset& dataset, Setup setup, int64_t steps_per_epoch, int epochs);

  const std::vector<Tensor>& first_x() const { return x_; }
  const std::vector<Tensor>& first_y() const { return y_; }

  int64_t steps() const override { return steps_; }
  void learned_steps(int64_t steps) override { steps_ = steps; }
  void resume(const FitPosition& p) override;
  void begin_epoch(int64_t start) override;
  bool next(size_t slot, Batch& b) override;
  bool stop_when_exhausted() const override { return persistent_; }
  void step_done() override;
  void record(FitPosition& p, bool epoch_end) const override;
  void end_epoch(Logs& logs) override;
  void after_epoch(bool verbose) override;

 private:
  using Clock = std::chrono::steady_clock;
  bool pull(data::Element& out);  // the pass's next element; sets global_rows_
  void open(uint64_t pass);       // pass `pass` of the pipeline, nothing consumed

  const data::Dataset& dataset_;
  Setup setup_;
  data::Dataset pipeline_;  // staged(indices | share | dataset)
  std::shared_ptr<data::GlobalBatchSizes> global_;
  bool persistent_;  // steps_per_epoch given: one pass continues across epochs
  int64_t steps_per_epoch_;
  int epochs_;
  int64_t steps_;  // per epoch; 0: unknown until the first pass ends
  uint64_t pass_ = 0;
  int64_t consumed_ = 0;  // batches taken from this pass
  data::Iterator it_;
  data::Element element_;
  bool pending_ = false;     // element_ holds a batch read but not trained on yet (the first one)
  double first_wait_s_ = 0;  // how long the first batch took (counted as the first step's wait)
  bool first_step_ = true;
  bool next_pass_ = false;  // each epoch after the first reads a new pass (unless persistent)
  int64_t global_rows_ = 0;
  const int64_t* rows_ = nullptr;  // on_device: the batch's rows of x_, y_
  std::vector<Tensor> x_, y_;      // the batch next() gave (before it: the first batch)
  data::StallMeter meter_;
  Clock::time_point staged_at_;
  data::StallReport report_;
  std::set<std::string> advised_;
};

}  // namespace tk::nn
