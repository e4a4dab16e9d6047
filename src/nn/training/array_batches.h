// Arrays' batches (fit, evaluate and predict over tensors): each batch a slice of a permutation of their row numbers
// — for fit with shuffle, shuffled once per epoch with a seeded std::mt19937_64, so a resumed fit replays the same
// permutations; else the rows in order. No copy: the stager reads rows perm[cursor..cursor+n) of the arrays straight
// into the program's inputs.
//
//   nn::ArrayBatches source(x, &y, 128, steps, true, seed);   // nn/training/batch_source.h
//   nn::ArrayBatches reads(x, nullptr, 32);                   // predict: one pass in order
#pragma once
#include <random>

#include "nn/training/batch_source.h"

namespace tk::nn {

class ArrayBatches final : public BatchSource {
 public:
  // x, y: the arrays (outlive the source; y null for predict); steps per epoch, 0: one pass (steps_per_epoch beyond
  // one pass wraps around).
  ArrayBatches(const std::vector<Tensor>& x, const std::vector<Tensor>* y, int64_t batch, int64_t steps = 0,
               bool shuffle = false, uint64_t seed = 0);

  int64_t steps() const override { return steps_; }
  int64_t round_size(int /*replicas*/) const override { return steps_ > 0 ? steps_ : 1; }  // all at once: free
  bool next(size_t slot, Batch& b) override;
  void resume(const FitPosition& p) override;
  void begin_epoch(int64_t start) override;
  void record(FitPosition& p, bool epoch_end) const override;

 private:
  const std::vector<Tensor>& x_;
  const std::vector<Tensor>* y_;
  int64_t rows_, batch_, steps_;
  bool shuffle_;
  uint64_t seed_;
  std::mt19937_64 rng_;
  int64_t shuffles_ = 0;       // epochs that reshuffled so far (replayed on resume)
  std::vector<int64_t> perm_;  // (rows_,) the epoch's order
  int64_t cursor_ = 0;         // perm_[cursor_] is the next batch's first row
  int64_t taken_ = 0;          // batches of this epoch handed out
};

}  // namespace tk::nn
