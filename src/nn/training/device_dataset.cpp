// DeviceDataset (device_dataset.h): a device-resident Dataset as fit / evaluate / predict bind it.
#include "nn/training/device_dataset.h"

#include <cstring>

#include "data/node.h"
#include "trainkit/core/error.h"

namespace tk::nn {

data::Dataset staged(const data::Dataset& d) {
  const data::Node* last = d.node().get();
  while (last->label().empty() && !last->inputs.empty()) last = last->inputs[0].get();  // with_options
  return last->label().rfind("prefetch", 0) == 0 ? d : d.prefetch(2);
}

data::Iterator evaluation_pass(const data::Dataset& user, const data::Dataset& run) {
  const bool numbered_by_user = staged(user).node() == user.node();
  return data::make_iterator(run, numbered_by_user ? user.node()->passes.fetch_add(1) : 0);
}

std::string device_dataset_mismatch(Device data, Device model, bool distributed, const char* what) {
  const std::string w =
      std::string(what) + ": the dataset's arrays are held on " + data.to_string() + " (Dataset::on_device)";
  if (model.kind == DeviceKind::cpu)
    return w + " but the model runs on " + model.to_string() + ": place the model there (model.set_device(" +
           data.to_string() + ")), or build the dataset from host arrays (Dataset::from_tensor_slices)";
  if (model != data)
    return w + " but the model runs on " + model.to_string() + ": build it with Dataset::on_device(arrays, " +
           model.to_string() + "), or place the model on " + data.to_string();
  if (distributed)
    return w + " and the model is replicated by a distribution strategy, whose replicas cannot gather rows from " +
           "another device's memory: build the dataset from host arrays (Dataset::from_tensor_slices)";
  return {};
}

std::unique_ptr<DeviceDataset> DeviceDataset::of(const data::Dataset& d, Device model, bool distributed,
                                                 const char* what) {
  std::optional<data::DeviceBatches> b = data::device_batches(d, what);
  if (!b) return nullptr;
  const std::string why = device_dataset_mismatch(b->device, model, distributed, what);
  if (!why.empty()) throw InvalidArgument(why);
  return std::make_unique<DeviceDataset>(std::move(*b));
}

void DeviceDataset::stand_ins(size_t nx, size_t ny, bool need_y, std::vector<Tensor>& x, std::vector<Tensor>& y,
                              const char* what) const {
  const std::vector<Tensor>& a = b_.arrays;
  if (a.size() < nx || (need_y && a.size() != nx + ny))
    throw InvalidArgument(std::string(what) + ": the dataset holds " + std::to_string(a.size()) + " array(s) on " +
                          b_.device.to_string() + " but the model takes " + std::to_string(nx) + " input(s)" +
                          (need_y ? " and " + std::to_string(ny) + " target(s)" : std::string()) +
                          ": give Dataset::on_device the arrays (x..., y...)");
  x.clear();
  y.clear();
  for (size_t c = 0; c < (need_y ? a.size() : nx); ++c) {
    Tensor t(a[c].shape().with_batch(1), a[c].dtype());
    std::memset(t.raw(), 0, t.nbytes());
    (c < nx ? x : y).push_back(std::move(t));
  }
}

int64_t DeviceDataset::split(const data::Element& e, size_t nx, std::vector<Tensor>& x, std::vector<Tensor>& y,
                             bool need_y, const int64_t*& rows) const {
  if (e.size() == 1 && e[0].shape().rank() == 0)
    throw InvalidArgument("the dataset's elements are single rows of the arrays held on " + b_.device.to_string() +
                          ": fit, evaluate and predict take batches (add .batch(n) to the pipeline)");
  if (e.size() != 1 || e[0].dtype() != DType::i64 || e[0].shape().rank() != 1)
    throw InvalidArgument("the dataset over the arrays held on " + b_.device.to_string() +
                          " (Dataset::on_device) gives batches of row numbers shaped " + data::shapes_of(e) +
                          ", not (n,): its pipeline batches more than once (batch(...).batch(...)); fit, evaluate and "
                          "predict take batches of rows, so keep one batch(n) stage");
  const std::vector<Tensor>& a = b_.arrays;
  x.assign(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(nx));
  if (need_y)
    y.assign(a.begin() + static_cast<std::ptrdiff_t>(nx), a.end());
  else
    y.clear();
  rows = e[0].data<int64_t>();
  return e[0].dim(0);
}

}  // namespace tk::nn
