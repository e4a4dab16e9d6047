// predict over arrays or a Dataset: the outputs of every row, in order, run by the one inference loop
// (inference_loop.cpp). Under MultiWorkerMirroredStrategy each rank runs its share of the batches and then every rank
// gets every row (gather_batches).
#include <cstring>

#include "nn/compiler/programs.h"
#include "nn/distribute/mpi_collective.h"
#include "nn/distribute/replicated_eval.h"
#include "nn/training/array_batches.h"
#include "nn/training/fit_common.h"
#include "nn/training/read_batches.h"
#include "nn/training/trainer.h"
#include "trainkit/core/error.h"

namespace tk {
namespace {

using nn::require;

// MPI: out of memory on one rank ends the job at once, not after the others' collective timeout.
Tensor allocate(const Shape& shape, nn::distribute::MpiCollective* world) {
  try {
    return Tensor(shape, DType::f32);
  } catch (const std::exception& e) {
    if (!world) throw;
    world->abort(std::string("predict: ") + e.what());
  }
  return {};
}

// Batch rows of a program's outputs into out[j] from byte row `row` on.
void read_outputs(nn::Compiled& c, std::vector<Tensor>& out, int64_t first_row, int64_t rows, int64_t total) {
  for (size_t j = 0; j < out.size(); ++j) {
    const size_t row = total > 0 ? out[j].nbytes() / static_cast<size_t>(total) : 0;
    c.program->read_output(c.outputs[j], static_cast<char*>(out[j].raw()) + static_cast<size_t>(first_row) * row,
                           static_cast<size_t>(rows) * row);
  }
}

}  // namespace

std::vector<Tensor> nn::Trainer::predict(const std::vector<Tensor>& x, int64_t batch_size) {
  require(batch_size > 0, "predict: batch_size must be a positive integer, got " + std::to_string(batch_size));
  check_policies("predict");
  model_.ensure_built(x);
  check_data(x, nullptr, "predict");
  programs().mirrors().upload();
  const int64_t n = nn::rows_of(x);
  // MultiWorkerMirroredStrategy: batch k on rank k % ranks (rank 0's batch size), then every rank gets every row.
  nn::distribute::MpiCollective* world = evaluation_group("predict arrays of " + std::to_string(n) + " rows", {&x});
  int64_t batch = batch_size;
  if (world) batch = static_cast<int64_t>(world->broadcast(static_cast<uint64_t>(batch), "predict batch size"));
  std::vector<Tensor> out;
  for (const KerasTensor& o : model_.outputs()) out.push_back(allocate(o.shape().with_batch(n), world));
  nn::ArrayBatches source(x, nullptr, batch);
  nn::InferenceHooks h;
  h.predict = true;
  h.group = [world] { return world; };
  // Batch k's predictions straight into its rows of the outputs.
  h.ran = [&](nn::Compiled& c, int, int64_t, const nn::Batch& b) { read_outputs(c, out, b.begin, b.n, n); };
  inference_loop(source, h);
  if (world) {
    std::vector<int64_t> rows;
    for (int64_t k = 0; k < source.steps(); ++k) rows.push_back(std::min(batch, n - k * batch));
    nn::distribute::gather_batches(*world, out, rows, "predict outputs");
  }
  return out;
}

std::vector<Tensor> nn::Trainer::predict(const data::Dataset& dataset) {
  require(dataset.cardinality() != data::kInfiniteCardinality,
          "predict: the dataset is infinite (repeat() without a count): add take(n)");
  check_policies("predict");
  programs().mirrors().upload();
  nn::DatasetReads source(dataset,
                          {.on_device = nn::DeviceDataset::of(dataset, model_.device(), replicated(), "predict"),
                           .split = [this](data::Element& e, std::vector<Tensor>& x,
                                           std::vector<Tensor>& y) { split_element(e, x, y, false, "predict"); },
                           .prepare =
                               [this](const std::vector<Tensor>& x, const std::vector<Tensor>&) {
                                 model_.ensure_built(x);
                                 check_data(x, nullptr, "predict");
                               },
                           .inputs = model_.inputs().size(),
                           .outputs = model_.outputs().size(),
                           .need_y = false},
                          inference_replicas());
  // Batch k's predictions (parts[k][j]: output j), and its rows. Under MultiWorkerMirroredStrategy another rank's
  // batch stays without parts until the gather.
  std::vector<std::vector<Tensor>> parts;
  std::vector<int64_t> rows;
  nn::InferenceHooks h;
  h.predict = true;
  h.group = [&] { return evaluation_group("predict the dataset " + dataset.describe()); };
  h.read = [&](int64_t, const nn::Batch& b) {
    rows.push_back(b.n);
    parts.emplace_back();
  };
  h.prepare = [&](int, int64_t k, const nn::Batch& b) {
    for (const KerasTensor& o : model_.outputs())
      parts[static_cast<size_t>(k)].emplace_back(o.shape().with_batch(b.n), DType::f32);
  };
  h.ran = [&](nn::Compiled& c, int, int64_t k, const nn::Batch& b) {
    read_outputs(c, parts[static_cast<size_t>(k)], 0, b.n, b.n);
  };
  nn::distribute::MpiCollective* world = inference_loop(source, h);
  int64_t total = 0;
  for (const int64_t r : rows) total += r;
  std::vector<Tensor> result;
  for (size_t j = 0; j < model_.outputs().size(); ++j) {
    Tensor all = allocate(model_.outputs()[j].shape().with_batch(total), world);
    const size_t row = total > 0 ? all.nbytes() / static_cast<size_t>(total) : 0;
    size_t offset = 0;
    for (size_t k = 0; k < parts.size(); ++k) {
      if (!parts[k].empty())
        std::memcpy(static_cast<char*>(all.raw()) + offset, parts[k][j].raw(), parts[k][j].nbytes());
      offset += static_cast<size_t>(rows[k]) * row;
    }
    result.push_back(std::move(all));
  }
  if (world) nn::distribute::gather_batches(*world, result, rows, "predict outputs");
  return result;
}

}  // namespace tk
