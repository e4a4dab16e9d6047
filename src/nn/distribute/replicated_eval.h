// evaluate and predict under data parallel (trainkit/nn/distribute.h): the batches, not the rows, are divided. In one
// process (MirroredStrategy), batch k runs on replica k % replicas, on that replica's thread with its own programs on
// its own device; over MPI (MultiWorkerMirroredStrategy), on rank k % ranks, and predict's rows are then gathered
// so that every rank returns all of them.
//
//   std::vector<ProgramCache*> replicas = synced_replicas(n, [&](int r) -> ProgramCache& { ... });
//   run_on_replicas(state, replicas, 0, batches, ctx,
//                   [&](int r, int64_t k) { replicas[r]->get(ProgramKind::eval, rows(k)); },   // on this thread
//                   [&](int r, int64_t k, const graph::ExecContext& c) { ... run batch k ... });  // replica r's
//   gather_batches(world, outputs, rows_per_batch, "predict outputs");  // MPI: every rank's batches everywhere
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "graph/program.h"
#include "trainkit/core/tensor.h"

namespace tk::distribute {
struct StrategyState;
}

namespace tk::nn {
class ProgramCache;
}

namespace tk::nn::distribute {

class MpiCollective;

// Whether the model's strategy runs several replicas in this process (MirroredStrategy), where evaluate and predict
// divide their batches with run_on_replicas.
bool replicated_in_process(const tk::distribute::StrategyState* state);

// Replica r's programs for r in [0, replicas), every replica after 0 given replica 0's weights, optimizer state and
// loss-scale state first (the model's weights may have been set since the last step).
std::vector<ProgramCache*> synced_replicas(int replicas, const std::function<ProgramCache&(int)>& programs);

// Runs batches [first, first + count) in one process, batch k on replica k % replicas.size() (`first` is a multiple
// of it, so a batch's replica does not depend on how the batches were grouped). prepare(r, k) is called for every
// batch on this thread first (programs are built there: building measures kernels and touches the model); then each
// replica with a batch runs its batches in order on its own thread (the strategy's runner, cores / active replicas
// kernel threads each), run(r, k, ctx) with ctx on replica r's device. When a batch throws, the other replicas stop
// after the batch they are running, and the first failure in replica order is rethrown. Counts each replica's
// batches in state.inference_batches (count_rank_batch: the same under MPI, where this process is one replica).
void run_on_replicas(tk::distribute::StrategyState& state, const std::vector<ProgramCache*>& replicas, int64_t first,
                     int64_t count, const graph::ExecContext& base, const std::function<void(int, int64_t)>& prepare,
                     const std::function<void(int, int64_t, const graph::ExecContext&)>& run);

// Counts a batch this process ran for evaluate or predict as one replica of a MultiWorkerMirroredStrategy.
void count_rank_batch(tk::distribute::StrategyState& state);

// MPI: batch k of `rows` (rows[k] rows, one after the other from row 0 of every tensor in `outputs`) was computed on
// rank k % ranks alone; afterwards every rank holds every batch's rows. One in-place allgather per output per round
// of `ranks` batches (a round's rows are contiguous, rank r's part of it is batch r of the round).
void gather_batches(MpiCollective& world, std::vector<Tensor>& outputs, const std::vector<int64_t>& rows,
                    const char* what);

}  // namespace tk::nn::distribute
