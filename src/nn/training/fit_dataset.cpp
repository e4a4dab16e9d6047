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
#include "nn/training/sample_weights.h"
#include "nn/training/staging.h"
#include "nn/training/trainer.h"
#include "trainkit/core/error.h"

namespace tk {

using nn::require;
using nn::staged;

History nn::Trainer::fit(const data::Dataset& dataset, FitOptions o) {
  check_compiled("fit");
  nn::check_fit_options(o);
  require(o.validation_split == 0.0f,
          "fit: validation_split is not supported with a Dataset (the dataset is not indexable): pass "
          "validation_dataset, or split before building the pipeline (take / skip)");
  require(!o.validation_data, "fit: with a Dataset, give validation as validation_dataset");
  require(o.micro_batch_size >= 0, "fit: with a Dataset, micro_batch_size must be >= 0 (the dataset sets the batch)");
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
  require(!o.sample_weight && !o.validation_sample_weight,
          "fit: with a Dataset, the sample weights are the elements' last component: (x..., y..., sample_weight)");
  if (!o.class_weight.empty()) nn::check_class_weight(model_, o.class_weight, "fit");
  const size_t ny = model_.outputs().size();
  // Keras' class_weight over a dataset: each batch's weights from its targets, after them (sample_weights.h).
  auto split = [this, &o, ny](data::Element& e, std::vector<Tensor>& x, std::vector<Tensor>& y) {
    split_element(e, x, y, true, "fit");
    if (o.class_weight.empty()) return;
    require(y.size() == ny,
            "fit: give class_weight or sample_weight, not both (the dataset's elements carry sample "
            "weights; Keras: \"You cannot `class_weight` and `sample_weight` at the same time\")");
    y.push_back(nn::class_weight_to_sample_weights(model_, y[0], o.class_weight, "fit"));
  };
  std::unique_ptr<nn::DeviceDataset> on_device = nn::DeviceDataset::of(dataset, model_.device(), replicated(), "fit");
  require(!on_device || o.class_weight.empty(),
          "fit: class_weight is not supported over a device-resident dataset (Dataset::on_device; nor are sample "
          "weights there): weight a dataset in host memory");
  nn::DatasetBatches::Setup setup{
      .on_device = std::move(on_device),
      .share = std::nullopt,
      .split = split,
      .check = [this, ny](const std::vector<Tensor>& x,
                          const std::vector<Tensor>& y) { check_data(x, &y, "fit", y.size() > ny); },
      .inputs = model_.inputs().size(),
      .outputs = model_.outputs().size(),
      .chief = model_.is_chief()};
  if (strategy_ && strategy_->mpi && strategy_->mpi->size() > 1)
    setup.share = nn::distribute::worker_input(dataset, *strategy_->mpi);
  nn::DatasetBatches source(dataset, std::move(setup), o.steps_per_epoch, o.epochs);  // reads the first batch
  model_.ensure_built(source.first_x());
  const std::vector<Tensor>& first_y = source.first_y();
  const bool weighted = first_y.size() > ny;  // (x..., y..., sample_weight), or class_weight
  check_data(source.first_x(), &first_y, "fit", weighted);
  std::function<Logs()> validate;
  if (o.validation_dataset) validate = [&] { return run_evaluation(*o.validation_dataset, o.validation_steps); };
  const nn::SampleWeightScope weights(*this, weighted ? &first_y.back() : nullptr);
  return fit_loop(source, o, o.micro_batch_size, validate);
}

}  // namespace tk
