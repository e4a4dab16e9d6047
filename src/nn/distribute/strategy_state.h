// What a MirroredStrategy shares with the models compiled in its scope: the devices, the replicas' group and
// their threads.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "nn/distribute/local_collective.h"
#include "nn/distribute/mpi_collective.h"
#include "nn/distribute/replica_runner.h"
#include "trainkit/nn/distribute.h"

namespace tk {
class Logs;
}

namespace tk::distribute {

// Where the time of replicated steps went, summed since the strategy was made.
struct StepClock {
  double step_seconds = 0, collective_seconds = 0;
  double overlap_span_seconds = 0, overlap_blocked_seconds = 0;  // started all-reduces (Collective's)
  int64_t steps = 0;
};

struct StrategyState {
  std::vector<Device> devices;  // this process's replicas
  std::unique_ptr<nn::distribute::LocalCollective> collective;
  std::unique_ptr<nn::distribute::ReplicaRunner> runner;
  nn::distribute::MpiCollective* mpi = nullptr;  // MultiWorkerMirroredStrategy: one replica per process
  // Replicas on CUDA devices: NCCL's group (nn/distribute/nccl_collective.h), which the programs' AllReduce ops call
  // instead of `collective` (in one process) or `mpi` (across processes; MPI still checks, broadcasts and sums the
  // logs in host memory). Null on the cpu.
  std::unique_ptr<graph::Collective> device_collective;
  // Every replica runs every step, those without rows of a short batch one row with weight 0: NCCL's all-reduce waits
  // for every rank of its communicator (MPI's ranks do the same). Set with device_collective; else such replicas sit
  // the step out and take replica 0's state before the next.
  bool every_replica_every_step = false;
  std::string description;
  size_t bytes_per_pack = 0;  // the gradient buckets' size (graph/bucket.h), resolved from the options
  bool overlap = false;       // buckets' all-reduces started early, finished after the backward pass
  int replicas() const { return static_cast<int>(devices.size()); }  // in this process
  int replicas_in_sync() const { return replicas() * (mpi ? mpi->size() : 1); }
  // MirroredStrategy::Options::replicate_one_device (tests): one replica, run as replicas are.
  bool one_device_replicated = false;
  // Whether models run the replicated path (replica threads, AllReduce ops in the training programs).
  bool replicated() const { return replicas_in_sync() > 1 || one_device_replicated; }
  bool chief() const { return mpi == nullptr || mpi->rank() == 0; }
  // What training programs' AllReduce ops call: the processes' group, the replicas' in this process, or none.
  graph::Collective* program_collective() const {
    if (!replicated()) return nullptr;  // one replica: plain programs (train_step runs them)
    if (device_collective) return device_collective.get();
    if (mpi) return mpi;
    return collective.get();
  }
  // Per replica in this process: the evaluate and predict batches it ran (nn/distribute/replicated_eval.h), for tests.
  std::vector<int64_t> inference_batches;
  // Replicated steps' wall time (Model::train_step_replicated adds to it) and replica 0's time in collectives.
  double step_seconds = 0;
  int64_t steps = 0;
  StepClock clock() const {
    const graph::Collective* c = program_collective();
    return {step_seconds, c ? c->seconds() : 0.0, c ? c->overlapped_span_seconds() : 0.0,
            c ? c->overlapped_blocked_seconds() : 0.0, steps};
  }
};

// fit's epoch line under data parallel: "allreduce_ms_per_step" (replica 0's time in all-reduces per step: waiting
// for the other replicas, moving and summing), "allreduce_fraction" (of the steps' wall time) and, when they were
// started early, "allreduce_overlap" (the share of their start-to-finish span not spent blocked) over the steps
// since `since`. Nothing without a strategy, with one replica, or when no replicated step ran.
void add_allreduce_logs(const StrategyState* s, const StepClock& since, Logs& logs);

}  // namespace tk::distribute
