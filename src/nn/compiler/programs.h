// Compiles a Model into programs (one per kind and batch size) and keeps the optimizer slots.
#pragma once
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "graph/autodiff.h"
#include "graph/program.h"
#include "trainkit/nn/model.h"

namespace tk::nn {

// accumulate: forward + backward adding the gradients into accumulators (micro-batching);
// apply: one optimizer step from the accumulators.
enum class ProgramKind { train, eval, predict, accumulate, apply };

struct Compiled {
  std::unique_ptr<graph::Program> program;
  std::vector<int> x, y;                          // input value ids: model inputs, targets
  std::vector<DType> y_dtype;                     // i32 for sparse targets
  std::vector<int> outputs;                       // predictions (predict programs)
  std::vector<std::pair<std::string, int>> logs;  // log name -> scalar value id ("loss" first)
};

class ProgramCache {
 public:
  explicit ProgramCache(Model& m) : model_(m) {}
  Compiled& get(ProgramKind kind, int64_t batch);
  // Weights the optimizer updates: trainable weights of trainable layers, in layer order.
  std::vector<Weight*> trainable_weights() const;

  // The graph of a program without compiling it. With allocate_slots false, missing optimizer slots are
  // placeholders, so planning allocates nothing.
  struct Traced {
    graph::Graph g;
    std::vector<int> keep, sinks;
    std::unique_ptr<Compiled> compiled;  // metadata only (program not built)
  };
  // remat: rematerialize the backward pass (stats filled in when non-null).
  Traced trace(ProgramKind kind, int64_t batch, bool allocate_slots, bool remat = false,
               graph::RematStats* stats = nullptr);
  // Bytes this cache holds on the device: optimizer slots and the shared arena.
  size_t persistent_bytes() const;

 private:
  std::unique_ptr<Compiled> build(ProgramKind kind, int64_t batch);
  int accumulator(graph::Graph& g, const Weight& w, bool allocate);
  int add_update(graph::Graph& g, const Weight& w, int var, int grad, bool zero_grad, bool allocate_slots);
  Model& model_;
  std::map<std::pair<int, int64_t>, std::unique_ptr<Compiled>> cache_;
  std::map<const void*, std::vector<Tensor>> slots_;  // per weight storage: optimizer slots
  Tensor arena_;                                      // shared by every program of the model
  std::map<const void*, Tensor> accumulators_;        // per weight storage: micro-batch gradient sums
  std::set<const void*> has_gradient_;                // weights the accumulate program reaches
};

// The loss op and the resolved metric op for one output (Keras' "accuracy" resolution).
graph::Op loss_op(const Loss& loss);
bool is_sparse(const Loss& loss);
graph::Op metric_op(const std::string& metric, const Loss& loss, const Shape& output_shape);

}  // namespace tk::nn
