// Where fit's one batch loop (Model::fit_loop, nn/training/fit_loop.cpp) gets its batches. A source hands out
// batches as *row numbers of arrays* (or a batch that is its own arrays) plus the row count; the stager
// (nn/training/staging.h) turns them into program inputs. Two sources exist:
//   - ArrayBatches (array_batches.cpp): fit(x, y) — the arrays themselves, rows = a slice of a shuffled permutation
//     of their row numbers (no copy);
//   - DatasetBatches (dataset_batches.cpp): fit(Dataset) — the pipeline's host batches (rows null), or a
//     device-resident dataset's row numbers into its arrays on the GPU (Dataset::on_device), or a rank's share of
//     each global batch under MultiWorkerMirroredStrategy (own_rows).
// The source also owns its part of the resume position (FitPosition: the shuffle seed and count, or the pass number
// and offset) and its epoch-end logs (the input pipeline's stall report).
//
//   nn::ArrayBatches source(x, y, batch, steps, shuffle, seed);
//   source.begin_epoch(0);
//   nn::StepBatch b;
//   while (source.next(b)) train_step(*b.x, *b.y, b.rows, b.n, ...);
#pragma once
#include <cstdint>
#include <vector>

#include "trainkit/core/tensor.h"
#include "trainkit/nn/callbacks.h"
#include "trainkit/nn/training_state.h"

namespace tk::nn {

// One training step's data.
struct StepBatch {
  const std::vector<Tensor>* x = nullptr;  // the model's inputs: whole arrays (rows set) or the batch itself
  const std::vector<Tensor>* y = nullptr;  // the targets, alike
  const int64_t* rows = nullptr;           // the batch's n row numbers of x, y; null: rows [0, n)
  int64_t n = 0;                           // rows in the batch (under own_rows: in the global batch)
  bool own_rows = false;  // MultiWorkerMirroredStrategy over a sharded dataset: x, y hold this rank's rows only
};

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // Batches per epoch; 0 while unknown (a dataset of unknown cardinality before its first pass ended).
  virtual int64_t steps() const = 0;
  // The first pass of unknown length ended after `steps` batches: later epochs (and progress bars) know it.
  virtual void learned_steps(int64_t /*steps*/) {}
  // Continues where a restored training state left off (restore_training_state, BackupAndRestore): the same
  // permutation or pass, at the same batch. InvalidArgument when the state was saved by the other kind of fit.
  virtual void resume(const FitPosition& p) = 0;
  // An epoch begins at batch `start` (non-zero only for a resumed epoch): reshuffle / start a new pass.
  virtual void begin_epoch(int64_t start) = 0;
  // The next batch, valid until the next call; false when the data ran out (after printing why if that ends
  // training: see stop_when_exhausted).
  virtual bool next(StepBatch& b) = 0;
  // Whether running out ends training (steps_per_epoch over a dataset that ran dry) rather than only the epoch.
  virtual bool stop_when_exhausted() const { return false; }
  // The step for the last batch was queued (stall accounting: the host's share of the step).
  virtual void step_done() {}
  // Writes the source's part of the resume position: where the next batch comes from (epoch_end: the position a
  // state saved after this epoch resumes from).
  virtual void record(FitPosition& p, bool epoch_end) const = 0;
  // The epoch's source logs (input_wait_fraction, ...), and what to say after its callbacks (pipeline advice).
  virtual void end_epoch(Logs& /*logs*/) {}
  virtual void after_epoch(bool /*verbose*/) {}
};

}  // namespace tk::nn
