// fit / evaluate / predict over a tk::data::Dataset of batches, with stall accounting per epoch.

#include <cstdio>
#include <cstring>
#include <functional>

#include "data/node.h"
#include "nn/compiler/programs.h"
#include "nn/distribute/mpi_collective.h"
#include "nn/distribute/replicated_eval.h"
#include "nn/distribute/strategy_state.h"
#include "nn/distribute/worker_input.h"
#include "nn/training/dataset_batches.h"
#include "nn/training/device_dataset.h"
#include "nn/training/fit_common.h"
#include "nn/training/staging.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/model.h"

namespace tk {
namespace {

void require(bool ok, const std::string& message) {
  if (!ok) throw InvalidArgument(message);
}

using nn::staged;

// A model replicated by a distribution strategy (in process or over MPI).
bool distributed(const distribute::StrategyState* s) { return s && s->replicated(); }

}  // namespace

void Model::split_element(data::Element& e, std::vector<Tensor>& x, std::vector<Tensor>& y, bool need_y,
                          const char* what) const {
  const size_t nx = inputs_.size(), ny = outputs_.size();
  if (e.size() < nx || (need_y && e.size() != nx + ny))
    throw InvalidArgument(std::string(what) + ": the dataset's elements have " + std::to_string(e.size()) +
                          " component(s) " + data::shapes_of(e) + " but model '" + name_ + "' takes " +
                          std::to_string(nx) + " input(s)" +
                          (need_y ? " and " + std::to_string(ny) + " target(s): elements must be (x..., y...)" : "") +
                          " (batch the dataset, and map it to that tuple)");
  for (const Tensor& t : e)
    if (t.shape().rank() == 0)
      throw InvalidArgument(std::string(what) + ": the dataset's elements " + data::shapes_of(e) +
                            " have a scalar component: fit takes batches (add .batch(n) to the pipeline)");
  x.assign(e.begin(), e.begin() + static_cast<std::ptrdiff_t>(nx));
  y.assign(e.begin() + static_cast<std::ptrdiff_t>(nx), e.end());
}

History Model::fit(const data::Dataset& dataset, FitOptions o) {
  check_compiled("fit");
  require(o.epochs >= 0, "fit: epochs must be >= 0, got " + std::to_string(o.epochs));
  require(o.initial_epoch >= 0 && o.initial_epoch <= o.epochs,
          "fit: initial_epoch must be in [0, epochs], got " + std::to_string(o.initial_epoch));
  require(o.validation_split == 0.0f,
          "fit: validation_split is not supported with a Dataset (the dataset is not indexable): pass "
          "validation_dataset, or split before building the pipeline (take / skip)");
  require(!o.validation_data, "fit: with a Dataset, give validation as validation_dataset");
  require(o.steps_per_epoch >= 0 && o.validation_steps >= 0, "fit: steps_per_epoch and validation_steps must be >= 0");
  require(o.micro_batch_size >= 0, "fit: with a Dataset, micro_batch_size must be >= 0 (the dataset sets the batch)");
  require(o.verbose >= -1 && o.verbose <= 2,
          "fit: verbose must be -1 (auto), 0, 1 or 2, got " + std::to_string(o.verbose));
  const int64_t card = dataset.cardinality();
  require(card != data::kInfiniteCardinality || o.steps_per_epoch > 0,
          "fit: the dataset is infinite (repeat() without a count): give steps_per_epoch");
  require(card != 0, "fit: the dataset is empty (" + dataset.describe() + ")");

  require(!o.validation_dataset || o.validation_dataset->cardinality() != data::kInfiniteCardinality ||
              o.validation_steps > 0,
          "fit: validation_dataset is infinite (repeat() without a count): give validation_steps");
  // Dataset::on_device(arrays, cuda:N): the pipeline runs on row numbers, each batch gathered on the GPU
  // (nn/training/device_dataset.h). MultiWorkerMirroredStrategy: each rank reads its rows of every global batch
  // (worker_input.h).
  nn::DatasetBatches::Setup setup{
      .on_device = nn::DeviceDataset::of(dataset, device_, distributed(strategy_.get()), "fit"),
      .share = std::nullopt,
      .split = [this](data::Element& e, std::vector<Tensor>& x,
                      std::vector<Tensor>& y) { split_element(e, x, y, true, "fit"); },
      .check = [this](const std::vector<Tensor>& x, const std::vector<Tensor>& y) { check_data(x, &y, "fit"); },
      .inputs = inputs_.size(),
      .outputs = outputs_.size(),
      .chief = is_chief()};
  if (strategy_ && strategy_->mpi && strategy_->mpi->size() > 1)
    setup.share = nn::distribute::worker_input(dataset, *strategy_->mpi);
  nn::DatasetBatches source(dataset, std::move(setup), o.steps_per_epoch, o.epochs);  // reads the first batch
  ensure_built(source.first_x());
  check_data(source.first_x(), &source.first_y(), "fit");
  if (!programs_) programs_ = std::make_unique<nn::ProgramCache>(*this);
  std::function<Logs()> validate;
  if (o.validation_dataset) validate = [&] { return run_evaluation(*o.validation_dataset, o.validation_steps); };
  return fit_loop(source, o, o.micro_batch_size, validate);
}

}  // namespace tk
