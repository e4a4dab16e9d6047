// Data parallel training over devices in one process, with Keras' shape (tf.distribute.MirroredStrategy).
//
//   const size_t GiB = size_t{1} << 30;
//   tk::config::set_logical_device_configuration(tk::Device::cpu(), {GiB, GiB});  // cpu:0 and cpu:1
//   tk::distribute::MirroredStrategy strategy({tk::Device::cpu(0), tk::Device::cpu(1)});
//   auto model = tk::models::tutorial_cnn();
//   {
//     auto scope = strategy.scope();          // models compiled inside the scope are replicated
//     model->compile(tk::optimizers::Adam(), "sparse_categorical_crossentropy", {"accuracy"});
//   }
//   model->fit(x, y, {.batch_size = 128});   // each step: 64 rows per replica, one update all replicas see
//
// What a step does: the global batch is split across the replicas in order (the first batch % replicas get one
// row more; no row is dropped or repeated, and a batch with fewer rows than replicas runs on fewer replicas).
// Each replica runs its own program on its own device, under that device's budget, on its own thread with
// cores / replicas kernel threads. Its gradients are summed across replicas by AllReduce ops in the program
// (each weighted by the replica's share of the global batch, so the step equals one device on the whole batch
// up to float rounding, Keras' averaging) and every replica applies the same update to its copy of the weights.
// The model's own weights are replica 0's; the other copies are refreshed from them when fit, train_on_batch,
// evaluate or predict starts. evaluate and predict (arrays or a Dataset, and fit's validation) divide the batches:
// batch k runs on replica k % replicas, on that replica's thread with its own programs on its own device; evaluate's
// row-weighted sums are added in replica order (one device's logs up to rounding), predict's replicas write their
// batches' rows into the outputs. Randomness (dropout) is keyed by the sample's index in the
// global batch, so N replicas draw what one device would (with micro-batches, when their boundaries fall where one
// device's do). BatchNormalization computes its statistics per
// replica (as Keras does) and keeps replica 0's moving statistics; with synchronized = true the statistics are the
// global batch's on every replica (tk::layers::BatchNormalizationOptions).
//
// batch_size = tk::kAutoBatchSize: each replica runs batch / replicas rows on its own device, so the global batch is
// replicas x the largest batch that fits every replica's own budget (the tightest replica decides; Model::
// auto_batch_size); micro_batch_size = kAutoBatchSize likewise, per replica beside its gradient accumulators.
//
// A collective that makes no progress within the timeout (Options::collective_timeout, or TK_COLLECTIVE_TIMEOUT
// in seconds; default 300 s) ends the step on every replica with a CollectiveError naming the collective and the
// replicas that never arrived; a replica that throws ends the others' waits at once.
//
// GPUs: the devices may be CUDA devices instead (all of one kind):
//   tk::distribute::MirroredStrategy gpus({tk::Device::cuda(0), tk::Device::cuda(1)});
// Each replica's programs, weights and optimizer state then live on its GPU, under that GPU's budget, and the
// gradients are summed by NCCL (one communicator per GPU, made by the constructor; the all-reduce is queued on the
// replica's stream with its share of the global batch read on the device). Every replica takes part in every step:
// a batch with fewer rows than GPUs runs one row with weight 0 on the GPUs without rows. A collective stuck longer
// than the timeout, or an NCCL error, ends the process (exit 70) with one line naming the collective and the GPU.
// Unsupported, saying what to do, when trainkit was built without CUDA, when a listed GPU is not visible, or when
// more than one GPU is listed and trainkit was built without NCCL (one GPU needs no NCCL). Written and compiled,
// never run on a machine with two GPUs (docs/distributed.md).
#pragma once
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainkit/core/device.h"

namespace tk::distribute {

struct StrategyState;  // nn/distribute/strategy_state.h

// While a scope lives, models compiled on this thread are replicated under its strategy.
class StrategyScope {
 public:
  ~StrategyScope();
  StrategyScope(const StrategyScope&) = delete;
  StrategyScope& operator=(const StrategyScope&) = delete;

 private:
  friend class MirroredStrategy;
  friend class MultiWorkerMirroredStrategy;
  explicit StrategyScope(std::shared_ptr<StrategyState> s);
  std::shared_ptr<StrategyState> previous_;
};

class MirroredStrategy {
 public:
  struct Options {
    std::chrono::milliseconds collective_timeout{0};  // 0: TK_COLLECTIVE_TIMEOUT seconds, else 300 s
    // Gradients are packed into buckets of at most this many bytes, each summed by one all-reduce (tf.distribute's
    // CommunicationOptions::bytes_per_pack, PyTorch DDP's bucket_cap_mb). 0: TK_BYTES_PER_PACK (bytes, or with a
    // unit: "4MiB"), else 25 MiB. 1: every gradient alone.
    size_t bytes_per_pack = 0;
    // Over cuda devices (NCCL): start each bucket's all-reduce on NCCL's communication stream as soon as its gradients
    // are ready and make the compute stream wait for it only after the backward pass. Unset: TK_ALLREDUCE_OVERLAP
    // when set, else on (PyTorch DDP's behaviour). Over cpu devices: not built (ignored).
    std::optional<bool> overlap;
    // For tests only: over one device, run the replicated path anyway (a replica thread, the training programs'
    // bucketed AllReduce ops; over a cuda device a one-rank NCCL communicator, its comm stream and overlap), which a
    // machine with one GPU otherwise never runs (tests/test_cuda_data_parallel.cpp compares it with no strategy). It
    // only adds work: not for training. Ignored with more than one device.
    bool replicate_one_device = false;
  };
  // Distinct devices of one kind: cpu devices, or cuda devices (through NCCL, above). Empty: every cpu device (the
  // logical devices when the cpu is split).
  explicit MirroredStrategy(std::vector<Device> devices = {});
  MirroredStrategy(std::vector<Device> devices, Options options);

  int num_replicas_in_sync() const;
  const std::vector<Device>& devices() const;
  // "MirroredStrategy over cpu:0, cpu:1 (2 replicas in sync)"
  std::string describe() const;

  // While the scope lives, models compiled on this thread are replicated over the strategy's devices.
  using Scope = StrategyScope;
  [[nodiscard]] Scope scope() const;

  const std::shared_ptr<StrategyState>& state() const { return state_; }

 private:
  std::shared_ptr<StrategyState> state_;
};

// Data parallel across processes and machines on MPI (Keras' MultiWorkerMirroredStrategy): one replica per process,
// rank and size from MPI itself, so the same program runs under `mpirun -np N`, `mpiexec` or Slurm's `srun`.
//
//   tk::distribute::MultiWorkerMirroredStrategy strategy;   // MPI_Init on first use
//   { auto scope = strategy.scope(); model->compile(...); }
//   model->fit(x, y, {.batch_size = 256});                  // every rank passes the same arrays and batch size
//
// Each step, rank r trains on its rows of the global batch (the same shuffle everywhere: rank 0's seed), and the
// gradients are summed across ranks in the program, so the step is one device's on the whole batch. Before the
// first step every rank checks that all ranks built the same model with the same batch size (InvalidArgument
// naming the ranks that differ), then takes rank 0's weights and optimizer state. Only rank 0 shows progress
// (is_chief). The logged loss and metrics are the global batch's. A collective that makes no progress within the
// timeout (TK_COLLECTIVE_TIMEOUT, default 300 s) prints which rank gave up on which collective and ends that rank
// (exit 70), and the launcher ends the others; a rank whose step fails (out of memory, say) prints why and ends every
// rank (MPI_Abort). On one node each rank takes cores / local ranks kernel threads unless TK_THREADS or
// OMP_NUM_THREADS says otherwise. fit over a Dataset: each rank reads its rows of every global batch (tf.data's
// AutoShardPolicy.DATA): the pipeline is cut below its last batch() and below the maps before it, so their work is
// divided, while the stages below the cut (source, shuffle, ...) run on every rank. Its shuffle must therefore be
// seeded the same on every rank (Dataset::shuffle's seed, or tk::utils::set_random_seed before building it). A
// pipeline that cannot be cut (no batch(), or a filter after it, ...) is read whole by every rank, rank 0 saying why
// once; with_options({.auto_shard_policy = tk::data::AutoShardPolicy::OFF}) or TK_AUTO_SHARD=OFF asks for that.
// docs/distributed.md lists what the cut passes. evaluate and predict (arrays or a Dataset, and fit's validation) run
// batch k on rank k % ranks, every rank reading every batch; evaluate's logs are summed over the ranks, and predict's
// rows are gathered so that every rank returns all of them (as Keras' predict under a strategy does).
// batch_size = tk::kAutoBatchSize: ranks x the smallest over the ranks of the largest batch that fits each rank's own
// budget (every rank's answer is all-gathered, so every rank takes the same global batch; rank 0 prints it).
// On GPUs: Options{.device = tk::DeviceKind::cuda} (`mpirun -np 4 trainkit fit --device cuda`), each rank on its
// local rank's GPU. Unsupported when trainkit was built without MPI.
class MultiWorkerMirroredStrategy {
 public:
  struct Options {
    std::chrono::milliseconds collective_timeout{0};  // 0: TK_COLLECTIVE_TIMEOUT seconds, else 300 s
    // Gradients are packed into buckets of at most this many bytes, each summed by one all-reduce (tf.distribute's
    // CommunicationOptions::bytes_per_pack, PyTorch DDP's bucket_cap_mb). 0: TK_BYTES_PER_PACK (bytes, or with a
    // unit: "4MiB"), else 25 MiB. 1: every gradient alone.
    size_t bytes_per_pack = 0;
    // Start each bucket's all-reduce (MPI nonblocking) as soon as its gradients are ready and finish it after the
    // backward pass, so the rest of the backward pass runs meanwhile; the first bucket is then at most 1 MiB.
    // Unset: TK_ALLREDUCE_OVERLAP=1 turns it on. Off by default on the cpu (on cuda, NCCL: on): on shared-memory MPI
    // (one machine) a nonblocking all-reduce only progresses inside MPI calls, and measured slower
    // (docs/distributed.md).
    std::optional<bool> overlap;
    // Where this rank's replica runs. cuda: the GPU of this rank's local rank (its number among the ranks on its node,
    // from MPI_COMM_TYPE_SHARED), modulo the GPUs the process sees: rank 1 of a node on cuda:1; the gradients summed
    // by NCCL over the ranks (rank 0's communicator id broadcast over MPI; MPI still checks the model, broadcasts rank
    // 0's weights and sums the logs). Every rank must ask for the same kind. Under NCCL overlap is on unless
    // turned off (false, or TK_ALLREDUCE_OVERLAP=0): NCCL runs on a stream of its own beside the backward pass. Never
    // run on more than one GPU (docs/distributed.md).
    DeviceKind device = DeviceKind::cpu;
  };
  MultiWorkerMirroredStrategy();
  explicit MultiWorkerMirroredStrategy(Options options);

  // Whether this process was started by an MPI launcher (mpirun, mpiexec, srun): what `trainkit fit` checks.
  static bool launched_by_mpi();
  // For a program that caught an error this rank cannot go on from: when MPI runs with more than one rank, ends
  // every rank with `exit_code` after a grace second (ranks that failed at the same point print their own errors);
  // else returns. Without it the other ranks wait in their next collective until the timeout.
  static void end_job_after_error(int exit_code);

  int num_replicas_in_sync() const;  // the number of processes
  int rank() const;
  bool is_chief() const { return rank() == 0; }
  // "MultiWorkerMirroredStrategy over 3 processes (MPI), this is rank 1 on cpu:0", or on cuda: "... this is rank 1
  // on cuda:1 (local rank 1 on its node (MPI_COMM_TYPE_SHARED) of 2 visible GPUs; gradients summed by NCCL)"
  std::string describe() const;
  Device device() const;  // this rank's replica's device
  [[nodiscard]] StrategyScope scope() const;
  const std::shared_ptr<StrategyState>& state() const { return state_; }

 private:
  std::shared_ptr<StrategyState> state_;
};

// Calls f() inside the strategy's scope, or as is when there is no strategy (a strategy made only under mpirun, say):
//   std::optional<MultiWorkerMirroredStrategy> mpi;
//   if (MultiWorkerMirroredStrategy::launched_by_mpi()) mpi.emplace();
//   tk::distribute::in_scope(mpi ? &*mpi : nullptr, [&] { model->compile(...); });
template <class Strategy, class F>
void in_scope(const Strategy* strategy, F&& f) {
  if (!strategy) {
    f();
    return;
  }
  auto scope = strategy->scope();
  f();
}

// The strategy whose scope is open on this thread, or null (Keras' tf.distribute.get_strategy, without the
// default strategy object).
std::shared_ptr<StrategyState> current_strategy();

}  // namespace tk::distribute
