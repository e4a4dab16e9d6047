// The one batch loop of every pass (for_each_batch, below) and where it gets its batches. fit (Trainer::fit_loop,
// nn/training/fit_loop.cpp: epochs, callbacks, resume, lagged logs) and evaluate / predict (Trainer::inference_loop,
// inference_loop.cpp: replicas, MPI ranks) drive it. A source hands out batches as *row numbers of arrays* (or a
// batch that is its own arrays) plus the row count; the stager (nn/training/staging.h) turns them into program
// inputs. The sources:
//   - ArrayBatches (array_batches.cpp): arrays x, y themselves — fit's rows a slice of a shuffled permutation of
//     their row numbers, evaluate's and predict's the rows in order (no copy);
//   - DatasetBatches (dataset_batches.cpp): fit(Dataset) — the pipeline's host batches (rows null), or a
//     device-resident dataset's row numbers into its arrays on the GPU (Dataset::on_device), or a rank's share of
//     each global batch under MultiWorkerMirroredStrategy (own_rows);
//   - DatasetReads (read_batches.h): a pass of a Dataset for evaluate and predict, one slot per batch of a round.
// A fit source also owns its part of the resume position (FitPosition: the shuffle seed and count, or the pass
// number and offset) and its epoch-end logs (the input pipeline's stall report).
//
//   nn::ArrayBatches source(x, &y, batch, steps, shuffle, seed);
//   source.begin_epoch(0);
//   std::vector<nn::Batch> round(1);
//   bool ran_out = false;
//   nn::for_each_batch(source, 0, source.steps(), round, ran_out, [&](int64_t s, size_t got) {
//     train_step(*round[0].x, *round[0].y, round[0].rows, round[0].n, ...);   // batch s
//     return true;                                                             // false: stop here
//   });
#pragma once
#include <cstdint>
#include <vector>

#include "trainkit/core/tensor.h"
#include "trainkit/nn/callbacks.h"
#include "trainkit/nn/training_state.h"

namespace tk::nn {

// One batch: rows rows[0..n) of x, y — or [begin, begin + n) when rows is null.
struct Batch {
  const std::vector<Tensor>* x = nullptr;  // the model's inputs: whole arrays (rows set) or the batch itself
  const std::vector<Tensor>* y = nullptr;  // the targets, alike; null for predict
  const int64_t* rows = nullptr;
  int64_t begin = 0;      // where the batch starts in the pass's order (its first output row, for predict)
  int64_t n = 0;          // rows in the batch (under own_rows: in the global batch)
  bool own_rows = false;  // MultiWorkerMirroredStrategy over a sharded dataset: x, y hold this rank's rows only
};

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // Batches per epoch; 0 while unknown (a dataset of unknown cardinality before its first pass ended).
  virtual int64_t steps() const = 0;
  // Batches the inference loop reads per round when `replicas` run them (at least one per replica).
  virtual int64_t round_size(int replicas) const { return replicas; }
  // The next batch into slot `slot` of the round (slot < round_size; fit: 0), valid until that slot is read again;
  // false when the data ran out (after printing why if that ends training: see stop_when_exhausted).
  virtual bool next(size_t slot, Batch& b) = 0;

  // ---- fit's
  // The first pass of unknown length ended after `steps` batches: later epochs (and progress bars) know it.
  virtual void learned_steps(int64_t /*steps*/) {}
  // Continues where a restored training state left off (restore_training_state, BackupAndRestore): the same
  // permutation or pass, at the same batch. InvalidArgument when the state was saved by the other kind of fit.
  virtual void resume(const FitPosition& /*p*/) {}
  // An epoch begins at batch `start` (non-zero only for a resumed epoch): reshuffle / start a new pass.
  virtual void begin_epoch(int64_t /*start*/) {}
  // Whether running out ends training (steps_per_epoch over a dataset that ran dry) rather than only the epoch.
  virtual bool stop_when_exhausted() const { return false; }
  // The step for the last batch was queued (stall accounting: the host's share of the step).
  virtual void step_done() {}
  // Writes the source's part of the resume position: where the next batch comes from (epoch_end: the position a
  // state saved after this epoch resumes from).
  virtual void record(FitPosition& /*p*/, bool /*epoch_end*/) const {}
  // The epoch's source logs (input_wait_fraction, ...), and what to say after its callbacks (pipeline advice).
  virtual void end_epoch(Logs& /*logs*/) {}
  virtual void after_epoch(bool /*verbose*/) {}
};

// The batch loop: reads `source`'s batches from number `start` up to `steps` (0: until the source runs out) in
// rounds of up to round.size() (fit: 1; evaluate / predict: one per replica, or every batch of host arrays at once)
// into round[0..got), and calls run(s, got) for batches s .. s + got - 1; stops early when run returns false.
// Returns the number after the last batch read; ran_out says whether the source ran out of batches.
template <typename Run>
int64_t for_each_batch(BatchSource& source, int64_t start, int64_t steps, std::vector<Batch>& round, bool& ran_out,
                       Run&& run) {
  ran_out = false;
  int64_t s = start;
  while (!ran_out && (steps == 0 || s < steps)) {
    size_t got = 0;
    while (got < round.size() && (steps == 0 || s + static_cast<int64_t>(got) < steps)) {
      if (!source.next(got, round[got])) {
        ran_out = true;
        break;
      }
      ++got;
    }
    if (got == 0) break;
    const bool more = run(s, got);
    s += static_cast<int64_t>(got);
    if (!more) break;
  }
  return s;
}

}  // namespace tk::nn
