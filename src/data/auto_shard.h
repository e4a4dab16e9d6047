// One worker's share of a batched pipeline (tf.data's AutoShardPolicy.DATA): the pipeline is rewritten so that each
// worker keeps only its rows of every global batch, cut as early as the pipeline allows: below the batch and below
// the per-element maps between the cut and the batch, so that their work is divided among the workers.
//
//   source -> shuffle -> map(decode) -> batch(B) -> prefetch            (every worker's definition)
//   source -> shuffle -> [rows of this worker in each window of B] -> map(decode) -> batch(its rows) -> prefetch
//
// Everything below the cut runs on every worker, element for element (the source, shuffle, filter, ...: keep it
// cheap, and seed shuffles alike), so global batch k holds the same elements as in one process; only its rows are
// split. Every worker gets one batch per global batch, so all run the same number of steps.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "trainkit/data/dataset.h"

namespace tk::data {

// This worker's rows of a global batch of `window` elements: [first, first + count), count >= 1, and no more than its
// rows of a full batch (a worker without rows of a short last batch takes row 0, to run a step that counts nothing).
struct WorkerRows {
  int64_t first = 0, count = 0;
};
using RowsOf = std::function<WorkerRows(int64_t window)>;

// The size of every global batch this worker's pipeline cut rows from, in order (the pipeline's thread pushes; the
// consumer takes one per batch it receives).
class GlobalBatchSizes {
 public:
  void push(int64_t n);
  int64_t pop();  // std::logic_error when none is left (the pipeline and its consumer went out of step)
  void clear();   // before a new pass, once the last pass's threads are gone

 private:
  std::mutex mu_;
  std::deque<int64_t> sizes_;
};

struct WorkerShare {
  Dataset dataset;                                   // this worker's pipeline
  std::shared_ptr<GlobalBatchSizes> global_batches;  // what each of its batches is a part of
};

// The rewrite, or nullopt with `why` set when the pipeline does not end in batch(), or something between the batch
// and the end is not one of map (deterministic, no Rng), prefetch, repeat and with_options.
std::optional<WorkerShare> share_of_batches(const Dataset& d, const RowsOf& rows, std::string& why);

}  // namespace tk::data
