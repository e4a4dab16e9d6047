// evaluate's and predict's side of the batch sources (batch_source.h): the hooks of their one batch loop
// (Trainer::inference_loop, nn/training/inference_loop.cpp), and DatasetReads, the batches of a Dataset pass (host
// batches, or a device-resident dataset's row numbers into its arrays on the GPU). Batches are read in rounds (one
// per replica under MirroredStrategy), so a source keeps one slot per batch of a round alive; host arrays are read
// by ArrayBatches (array_batches.h).
//
//   nn::DatasetReads source(dataset, setup, replicas);
//   nn::Batch b;
//   for (int64_t k = 0; source.next(0, b); ++k) ...   // b.x, b.y, b.rows / b.begin, b.n
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "nn/training/batch_source.h"
#include "nn/training/device_dataset.h"
#include "trainkit/core/tensor.h"
#include "trainkit/data/dataset.h"

namespace tk::nn {

struct Compiled;
namespace distribute {
class MpiCollective;
}

// What evaluate or predict does around the loop's steps (Model::inference_loop).
struct InferenceHooks {
  bool predict = false;  // the programs: predict (outputs) or eval (logs)
  int64_t steps = 0;     // batches to run; 0: all
  // MultiWorkerMirroredStrategy: the ranks' group (null without one), asked once the first batch was read (the model
  // is built then); batch k then runs on rank k % ranks.
  std::function<distribute::MpiCollective*()> group;
  // On this thread, after batch k was read (every batch, also those another rank runs).
  std::function<void(int64_t k, const Batch&)> read;
  // On this thread, before batch k runs (on replica r: the thread that runs it may not allocate in shared vectors).
  std::function<void(int r, int64_t k, const Batch&)> prepare;
  // On replica r's thread, after batch k ran on its program c (read its logs or outputs).
  std::function<void(Compiled& c, int r, int64_t k, const Batch&)> ran;
};

// A pass of a Dataset. `prepare(x, y)` is called with each batch's host tensors (the stand-ins of a device-resident
// source for the first): split checks and builds the model (Model::ensure_built + check_data).
class DatasetReads final : public BatchSource {
 public:
  using Split = std::function<void(data::Element&, std::vector<Tensor>&, std::vector<Tensor>&)>;
  using Prepare = std::function<void(const std::vector<Tensor>&, const std::vector<Tensor>&)>;
  struct Setup {
    std::unique_ptr<DeviceDataset> on_device;
    Split split;      // Model::split_element
    Prepare prepare;  // Model::ensure_built + check_data
    size_t inputs = 0, outputs = 0;
    bool need_y = true;  // evaluate: targets; predict: none
  };
  // Opens the pass evaluate / predict reads (nn::evaluation_pass); slots for rounds of `replicas` batches.
  DatasetReads(const data::Dataset& dataset, Setup setup, int replicas);
  int64_t steps() const override { return 0; }
  bool next(size_t slot, Batch& b) override;

 private:
  struct Slot {
    data::Element element;
    std::vector<Tensor> x, y;
    const int64_t* rows = nullptr;  // on_device: inside element
  };
  Setup setup_;
  data::Iterator it_;
  std::vector<Slot> slots_;
  bool first_ = true;
};

}  // namespace tk::nn
