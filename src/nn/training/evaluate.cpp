// evaluate over arrays or a Dataset: the loss and metrics, row-weighted over the batches (Keras' means), run by the one
// inference loop (inference_loop.cpp).
#include "nn/compiler/programs.h"
#include "nn/distribute/mpi_collective.h"
#include "nn/training/array_batches.h"
#include "nn/training/fit_common.h"
#include "nn/training/read_batches.h"
#include "nn/training/sample_weights.h"
#include "nn/training/trainer.h"
#include "trainkit/core/error.h"

namespace tk {
namespace {

using nn::require;

// The loop's hooks for evaluate: each replica's row-weighted sums (added in replica order at the end).
nn::InferenceHooks evaluation_hooks(std::vector<nn::Accumulator>& sums, int64_t steps) {
  nn::InferenceHooks h;
  h.steps = steps;
  h.ran = [&sums](nn::Compiled& c, int r, int64_t, const nn::Batch& b) { sums[static_cast<size_t>(r)].add(c, b.n); };
  return h;
}

}  // namespace

Logs nn::Trainer::evaluate(const std::vector<Tensor>& x, const std::vector<Tensor>& y, EvaluateOptions o) {
  check_compiled("evaluate");
  require(o.batch_size > 0, "evaluate: batch_size must be a positive integer, got " + std::to_string(o.batch_size));
  model_.ensure_built(x);
  check_data(x, &y, "evaluate");
  std::vector<Tensor> y_weighted;  // Keras' sample_weight: after the targets (nn/training/sample_weights.h)
  if (o.sample_weight) {
    nn::check_sample_weight(model_, *o.sample_weight, x.empty() ? 0 : x[0].dim(0), "evaluate");
    y_weighted = y;
    y_weighted.push_back(*o.sample_weight);
  }
  const nn::SampleWeightScope weights(*this, o.sample_weight ? &*o.sample_weight : nullptr);
  programs().mirrors().upload();
  Logs logs = run_evaluation(x, o.sample_weight ? y_weighted : y, o.batch_size, o.steps);
  if (o.verbose > 0 && model_.is_chief()) nn::print_logs(logs);  // MPI: rank 0 alone prints
  return logs;
}

Logs nn::Trainer::evaluate(const data::Dataset& dataset, EvaluateOptions o) {
  check_compiled("evaluate");
  require(dataset.cardinality() != data::kInfiniteCardinality || o.steps > 0,
          "evaluate: the dataset is infinite (repeat() without a count): give steps");
  programs().mirrors().upload();  // else the programs are built with the model's weights
  Logs logs = run_evaluation(dataset, o.steps);
  if (o.verbose > 0 && model_.is_chief()) nn::print_logs(logs);
  return logs;
}

Logs nn::Trainer::run_evaluation(const std::vector<Tensor>& x, const std::vector<Tensor>& y, int64_t batch_size,
                                 int64_t steps) {
  const int replicas = inference_replicas();
  const int64_t n = nn::rows_of(x);
  int64_t batch = std::min(batch_size, std::max<int64_t>(n, 1));
  // MultiWorkerMirroredStrategy: batch k on rank k % ranks, the logs summed over the ranks at the end; rank 0's batch
  // size (an automatic one follows each rank's free memory).
  nn::distribute::MpiCollective* world = evaluation_group(
      "evaluate arrays of " + std::to_string(n) + " rows" + (steps > 0 ? ", " + std::to_string(steps) + " steps" : ""),
      {&x, &y});
  if (world) batch = static_cast<int64_t>(world->broadcast(static_cast<uint64_t>(batch), "evaluation batch size"));
  nn::ArrayBatches source(x, &y, batch);
  std::vector<nn::Accumulator> sums(static_cast<size_t>(replicas));
  nn::InferenceHooks h = evaluation_hooks(sums, steps);
  h.group = [world] { return world; };
  inference_loop(source, h);
  return evaluation_logs(sums, world && n > 0 ? world : nullptr);
}

Logs nn::Trainer::run_evaluation(const data::Dataset& dataset, int64_t steps) {
  const int replicas = inference_replicas();
  // Elements (x..., y..., w) are weighted (Keras' sample_weight): each batch's prepare says so before its program is
  // chosen; the caller's weighting (fit's training) comes back after.
  const nn::SampleWeightScope weights(*this, int64_t{0});
  nn::DatasetReads source(dataset,
                          {.on_device = nn::DeviceDataset::of(dataset, model_.device(), replicated(), "evaluate"),
                           .split = [this](data::Element& e, std::vector<Tensor>& x,
                                           std::vector<Tensor>& y) { split_element(e, x, y, true, "evaluate"); },
                           .prepare =
                               [this](const std::vector<Tensor>& x, const std::vector<Tensor>& y) {
                                 model_.ensure_built(x);
                                 const bool weighted = y.size() > model_.outputs().size();
                                 check_data(x, &y, "evaluate", weighted);
                                 sample_weight_key = nn::sample_weight_key(weighted ? &y.back() : nullptr);
                               },
                           .inputs = model_.inputs().size(),
                           .outputs = model_.outputs().size(),
                           .need_y = true},
                          replicas);
  std::vector<nn::Accumulator> sums(static_cast<size_t>(replicas));
  nn::InferenceHooks h = evaluation_hooks(sums, steps);
  // MultiWorkerMirroredStrategy: every rank reads the dataset (the same batches, as for training) and runs batch k
  // when k % ranks is its rank; the logs are summed over the ranks at the end.
  h.group = [&] {
    return evaluation_group("evaluate the dataset " + dataset.describe() +
                            (steps > 0 ? ", " + std::to_string(steps) + " steps" : std::string()));
  };
  return evaluation_logs(sums, inference_loop(source, h));
}

Logs nn::Trainer::evaluation_logs(const std::vector<nn::Accumulator>& sums, nn::distribute::MpiCollective* world) {
  nn::Accumulator acc;
  for (const nn::Accumulator& a : sums) acc.merge(a);
  // Every rank's sums added to acc's (a rank that ran no batch contributes zeros).
  if (world) {
    if (acc.names.empty()) {  // this rank ran no batch: the names (from the smallest eval program) and zeros
      try {
        acc.reset(programs(0).get(nn::ProgramKind::eval, 1));
      } catch (const std::exception& e) {
        world->abort(std::string("evaluation: ") + e.what());
      }
    }
    std::vector<double> all = acc.sum;
    all.push_back(acc.count);
    world->all_reduce_sum(all.data(), static_cast<int64_t>(all.size()), "evaluation logs");
    acc.count = all.back();
    all.pop_back();
    acc.sum = std::move(all);
  }
  Logs logs;
  acc.write(logs);
  return logs;
}

}  // namespace tk
