// Keras' sample_weight and class_weight in fit / evaluate (FitOptions, EvaluateOptions, a Dataset's (x..., y..., w)
// elements): the checks, class_weight made into per-row weights, and the pass's weighting as the programs see it.
// The weights travel as one more "target" array: staged with y, row by row (so micro-batches, data-parallel replicas
// and device-resident staging slice them as they slice y), into the weight input of a weighted program
// (ProgramCache::trace: nn::emit_weighted_loss). A pass without weights runs the programs it always ran.
//
//   const Tensor w = nn::class_weight_to_sample_weights(model, y[0], {{0, 1.0f}, {1, 5.0f}}, "fit");  // (rows,)
//   nn::check_sample_weight(model, w, rows, "fit");
//   nn::SampleWeightScope scope(trainer, &w);   // the programs built and cached in the scope have a weight input
//   y.push_back(w);                             // the pass's y arrays end with the weights
#pragma once
#include <cstdint>
#include <map>

#include "nn/training/trainer.h"
#include "trainkit/core/tensor.h"
#include "trainkit/nn/model.h"

namespace tk::nn {

// The key of the weight input a program for weights `w` has (Trainer::sample_weight_key): -1 for (rows,), k for
// (rows, k); 0 for no weights (null).
int64_t sample_weight_key(const Tensor* w);

// Keras' rules for sample_weight (FitOptions::sample_weight): a host array of n rows, (n,) or (n, 1), or the
// per-position losses' shape (n, steps) of a sequence output (one output); numeric. InvalidArgument naming `what` and
// the shapes. Allocates nothing when the weights are good (a Dataset's batches are checked at every step).
void check_sample_weight(const Model& model, const Tensor& w, int64_t n, const char* what);

// Keras' class_weight_to_sample_weights: (rows,) float32 weights, each row's its class's (class_weight[id], 1 for a
// class not listed). The class of a row is its integer id (sparse targets, (rows,) or (rows, 1)), the argmax of a
// one-hot target (rows, classes), or the rounded value of a single binary target (rows, 1). InvalidArgument for a
// model with several outputs, targets with more than one class per row (a sequence: give sample_weight), a class id
// in class_weight or in the targets outside the output's classes (naming the class and the row).
Tensor class_weight_to_sample_weights(const Model& model, const Tensor& y, const std::map<int, float>& class_weight,
                                      const char* what);
// InvalidArgument unless class_weight's ids are classes of the model's single output (before any data is read).
void check_class_weight(const Model& model, const std::map<int, float>& class_weight, const char* what);

// The weighting of a pass (fit's training, its validation, an evaluate) for the trainer's programs: set for the
// scope's life, the previous one restored after (a validation inside fit).
class SampleWeightScope {
 public:
  SampleWeightScope(Trainer& trainer, const Tensor* w) : trainer_(trainer), saved_(trainer.sample_weight_key) {
    trainer.sample_weight_key = sample_weight_key(w);
  }
  SampleWeightScope(Trainer& trainer, int64_t key) : trainer_(trainer), saved_(trainer.sample_weight_key) {
    trainer.sample_weight_key = key;
  }
  ~SampleWeightScope() { trainer_.sample_weight_key = saved_; }
  SampleWeightScope(const SampleWeightScope&) = delete;
  SampleWeightScope& operator=(const SampleWeightScope&) = delete;

 private:
  Trainer& trainer_;
  int64_t saved_;
};

}  // namespace tk::nn
