// fit / evaluate / predict over a Dataset whose source is in a GPU's memory (Dataset::on_device(arrays, cuda:N)): the
// pipeline runs on row numbers (data/device_batches.h), and each batch is bound as x, y = the source's whole arrays
// and rows = the batch's row numbers, which nn::BatchStager gathers on the GPU straight into the program's inputs
// (device_staging.cpp). The model must run on that GPU, without a distribution strategy (the replicas' programs on
// other devices would read another GPU's memory): anything else is an InvalidArgument saying what to do.
//
//   std::unique_ptr<nn::DeviceDataset> dev = nn::DeviceDataset::of(dataset, device_, distributed, "fit");
//   data::Iterator it = (dev ? dev->indices() : dataset).iterator();
//   int64_t n = dev->split(element, x, y, true, rows);   // x, y: the arrays; rows: n row numbers
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "data/device_batches.h"

namespace tk::nn {

// The pipeline fit / evaluate / predict run: `d` with a prefetch (the next batch made on the pipeline's thread while
// the step runs) unless it already ends with one, when it is `d` itself.
data::Dataset staged(const data::Dataset& d);

// A pass of evaluate / predict over the user's dataset `user`, run on `run` (staged(user), or staged(indices) for a
// device-resident source), numbered exactly as the host path's staged(user).iterator() numbers it: the user's next
// pass (taken from its counter) when staged(user) is `user` itself (the pipeline ends with prefetch), else 0 (a new
// prefetch's first pass; the user's counter untouched). So a device-resident source reshuffles as host arrays do,
// and a later fit continues the same pass numbers (tests/test_device_batches.cpp).
data::Iterator evaluation_pass(const data::Dataset& user, const data::Dataset& run);

// Why a model on `model` cannot train on a dataset held on `data` ("" when it can): plain C++, tested without a GPU.
std::string device_dataset_mismatch(Device data, Device model, bool distributed, const char* what);

class DeviceDataset {
 public:
  // Null when the dataset's source is host memory.
  static std::unique_ptr<DeviceDataset> of(const data::Dataset& d, Device model, bool distributed, const char* what);
  explicit DeviceDataset(data::DeviceBatches b) : b_(std::move(b)) {}

  const data::Dataset& indices() const { return b_.indices; }
  // (1, ...) host zeros shaped and typed as the arrays' rows (the model's inputs, then its targets when need_y): what
  // building the model and checking the data look at. InvalidArgument when the component count does not fit.
  void stand_ins(size_t nx, size_t ny, bool need_y, std::vector<Tensor>& x, std::vector<Tensor>& y,
                 const char* what) const;
  // A batch of the index pipeline: x = the arrays of the model's nx inputs, y = the rest (when need_y); `rows` points
  // at the batch's row numbers (inside e, valid while e is). Returns the batch's row count.
  int64_t split(const data::Element& e, size_t nx, std::vector<Tensor>& x, std::vector<Tensor>& y, bool need_y,
                const int64_t*& rows) const;

 private:
  data::DeviceBatches b_;
};

}  // namespace tk::nn
