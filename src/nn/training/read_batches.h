// Where evaluate's and predict's one batch loop (Model::inference_loop, nn/training/inference_loop.cpp) gets its
// batches, in order: rows [k * batch, ...) of host arrays (ArrayReads: no copy), or the batches of a Dataset pass
// (DatasetReads: host batches, or a device-resident dataset's row numbers into its arrays on the GPU). Batches are
// read in rounds (one per replica under MirroredStrategy), so a source keeps one slot per batch of a round alive.
//
//   nn::ArrayReads source(x, &y, 32);
//   nn::ReadBatch b;
//   for (int64_t k = 0; source.next(0, b); ++k) ...   // b.x, b.y, b.rows / b.begin, b.n
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "nn/training/device_dataset.h"
#include "trainkit/core/tensor.h"
#include "trainkit/data/dataset.h"

namespace tk::nn {

struct Compiled;
namespace distribute {
class MpiCollective;
}

// One batch of evaluate or predict: rows rows[0..n) of x, y — or [begin, begin + n) when rows is null.
struct ReadBatch {
  const std::vector<Tensor>* x = nullptr;
  const std::vector<Tensor>* y = nullptr;  // null for predict
  const int64_t* rows = nullptr;
  int64_t begin = 0;
  int64_t n = 0;
};

class ReadSource {
 public:
  virtual ~ReadSource() = default;
  // Batches to read per round when `replicas` run them (at least one per replica).
  virtual int64_t round_size(int replicas) const { return replicas; }
  // The next batch into slot `slot` of the round (slot < round_size), valid until that slot is read again; false at
  // the end of the data.
  virtual bool next(size_t slot, ReadBatch& b) = 0;
};

// What evaluate or predict does around the loop's steps (Model::inference_loop).
struct InferenceHooks {
  bool predict = false;  // the programs: predict (outputs) or eval (logs)
  int64_t steps = 0;     // batches to run; 0: all
  // MultiWorkerMirroredStrategy: the ranks' group (null without one), asked once the first batch was read (the model
  // is built then); batch k then runs on rank k % ranks.
  std::function<distribute::MpiCollective*()> group;
  // On this thread, after batch k was read (every batch, also those another rank runs).
  std::function<void(int64_t k, const ReadBatch&)> read;
  // On this thread, before batch k runs (on replica r: the thread that runs it may not allocate in shared vectors).
  std::function<void(int r, int64_t k, const ReadBatch&)> prepare;
  // On replica r's thread, after batch k ran on its program c (read its logs or outputs).
  std::function<void(Compiled& c, int r, int64_t k, const ReadBatch&)> ran;
};

// Host arrays in batches of `batch` rows (the last one shorter).
class ArrayReads final : public ReadSource {
 public:
  ArrayReads(const std::vector<Tensor>& x, const std::vector<Tensor>* y, int64_t batch);
  int64_t batches() const { return batches_; }
  int64_t round_size(int /*replicas*/) const override { return batches_ > 0 ? batches_ : 1; }  // all at once: free
  bool next(size_t slot, ReadBatch& b) override;

 private:
  const std::vector<Tensor>& x_;
  const std::vector<Tensor>* y_;
  int64_t rows_, batch_, batches_, read_ = 0;
};

// A pass of a Dataset. `prepare(x, y)` is called with each batch's host tensors (the stand-ins of a device-resident
// source for the first): split checks and builds the model (Model::ensure_built + check_data).
class DatasetReads final : public ReadSource {
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
  bool next(size_t slot, ReadBatch& b) override;

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
