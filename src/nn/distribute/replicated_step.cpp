// One training step under a strategy with several replicas in sync (trainkit/nn/distribute.h): in this process
// (MirroredStrategy) or one per process (MultiWorkerMirroredStrategy on MPI).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <stdexcept>

#include "core/device_bytes.h"
#include "data/formats/crc32c.h"
#include "graph/host_threads.h"
#include "nn/compiler/programs.h"
#include "nn/distribute/batch_split.h"
#include "nn/distribute/strategy_state.h"
#include "nn/training/fit_common.h"
#include "nn/training/staging.h"
#include "nn/training/trainer.h"

namespace tk {
namespace {

using nn::distribute::Shard;
using nn::distribute::shard_of;

// Micro-batching per replica (one all-reduce per step, in the apply program) when the largest shard is larger
// than a micro-batch: every replica then runs the same kinds of programs.
bool micro_batched(int64_t micro, int64_t active, int64_t bs) {
  return micro > 0 && micro < bs / active + (bs % active ? 1 : 0);
}

// Builds the programs a shard needs (on the calling thread: building measures kernels and touches the model).
void prepare(nn::ProgramCache& pc, const Shard& s, bool micro_batched, int64_t micro) {
  if (!micro_batched) {
    pc.get(nn::ProgramKind::train, s.rows);
    return;
  }
  for (int64_t m = 0; m < s.rows; m += micro) pc.get(nn::ProgramKind::accumulate, std::min(micro, s.rows - m));
  pc.get(nn::ProgramKind::apply, 0);
}

// Runs a shard: its rows, through AllReduce ops that wait for the other replicas. x and y hold the global batch, or
// (own_rows) only the shard's rows.
void run_shard(nn::ProgramCache& pc, const Shard& s, bool micro_batched, int64_t micro, int64_t bs,
               const std::vector<Tensor>& x, const std::vector<Tensor>& y, const int64_t* idx, bool own_rows,
               graph::ExecContext ctx, uint64_t step, nn::Accumulator& out) {
  ctx.device = pc.device();
  const bool counts = s.weight > 0.0f;
  const int64_t at = own_rows ? 0 : s.first;  // the shard's first row in x
  if (!micro_batched) {
    nn::Compiled& c = pc.get(nn::ProgramKind::train, s.rows);
    nn::BatchStager::bind_rows(c, x, &y, idx ? idx + s.first : nullptr, idx ? 0 : at, s.rows);
    ctx.scalars.grad_scale = s.weight;    // AllReduce: this replica's share of the global batch
    ctx.scalars.sample_offset = s.first;  // dropout: keyed by the global sample index
    c.program->run(ctx);
    if (counts) out.add(c, s.rows);
    return;
  }
  for (int64_t m = 0; m < s.rows; m += micro) {  // as one device's micro-batches, at their global rows
    const int64_t mb = std::min(micro, s.rows - m);
    nn::Compiled& c = pc.get(nn::ProgramKind::accumulate, mb);
    nn::BatchStager::bind_rows(c, x, &y, idx ? idx + s.first + m : nullptr, idx ? 0 : at + m, mb);
    ctx.scalars.step = (step << 20) + static_cast<uint64_t>(s.first + m);
    ctx.scalars.grad_scale = counts ? static_cast<float>(mb) / static_cast<float>(bs) : 0.0f;
    c.program->run(ctx);
    if (counts) out.add(c, mb);
  }
  ctx.scalars.step = step;
  ctx.scalars.grad_scale = 1.0f;  // the accumulators already hold each micro-batch's share of the global batch
  pc.get(nn::ProgramKind::apply, 0).program->run(ctx);
}

// Rank 0's bytes of `t` on every rank. MPI reads and writes host memory: a tensor on a GPU goes through a host copy
// (MPI built with CUDA support could take the device pointer; Debian's Open MPI is not).
void broadcast_tensor(nn::distribute::MpiCollective& world, Tensor& t, const std::string& name) {
  if (t.on_host()) {
    world.broadcast(t.raw(), t.nbytes(), name.c_str());
    return;
  }
  std::vector<unsigned char> host(t.nbytes());
  device_copy(host.data(), Device::cpu(), t.raw(), t.device(), t.nbytes());
  world.broadcast(host.data(), host.size(), name.c_str());
  device_copy(t.raw(), t.device(), host.data(), Device::cpu(), t.nbytes());
}

}  // namespace

nn::distribute::MpiCollective* nn::Trainer::evaluation_group(const std::string& data,
                                                             const std::vector<const std::vector<Tensor>*>& arrays) {
  if (!strategy_ || !strategy_->mpi || strategy_->mpi->size() < 2) return nullptr;
  nn::distribute::MpiCollective& world = *strategy_->mpi;
  const std::vector<std::pair<std::string, Tensor*>> state = programs(0).state_tensors();
  std::string fingerprint = data;  // "evaluate arrays of 1050 rows", "predict the dataset ..."
  if (!arrays.empty()) {  // host arrays (check_data): the same row count with other values would mix the ranks' rows
    uint32_t crc = 0;
    for (const std::vector<Tensor>* list : arrays)
      for (const Tensor& t : *list) crc = tk::data::crc32c_extend(crc, t.raw(), t.nbytes());
    char hex[12];
    std::snprintf(hex, sizeof hex, "%08x", crc);
    fingerprint += std::string(", contents crc32c ") + hex;
  }
  fingerprint += ", weights";
  for (const auto& [name, t] : state) fingerprint += " " + name + t->shape().to_string();
  world.check_same(fingerprint, "MultiWorkerMirroredStrategy: model and data check before evaluating or predicting",
                   "every rank must evaluate or predict with the same model on the same data, the same rows in the "
                   "same order (each rank runs some of the batches; predict gives every rank every row)");
  if (!replicas_synced) {  // before the first fit each rank may hold its own initial weights: rank 0's count
    sync_host_weights();
    for (const auto& [name, t] : state) broadcast_tensor(world, *t, name);
    // The broadcast wrote the programs' storage: on a GPU the device copies, which the model's weights now follow
    // (on the cpu the storage is the model's weights, and both calls do nothing).
    programs(0).mirrors().mark_trained();
    sync_host_weights();
    // Every rank took this path (the flag changes on every rank alike: here and at the start of each fit), so the
    // weights now agree until the next fit, which checks and broadcasts again.
    replicas_synced = true;
  }
  return &world;
}

void nn::Trainer::train_step_replicated(const std::vector<Tensor>& x, const std::vector<Tensor>& y, const int64_t* idx,
                                        int64_t bs, int64_t micro, nn::Accumulator& acc, bool own_rows) {
  tk::distribute::StrategyState& s = *strategy_;
  const auto started = std::chrono::steady_clock::now();
  const graph::ExecContext base = nn::exec_context(model_.device(), step, true, model_.optimizer().get());
  bool skipped = false;
  if (s.mpi) {  // one replica per process: this one is replica `rank`
    nn::distribute::MpiCollective& world = *s.mpi;
    const int64_t active = std::min<int64_t>(world.size(), bs);
    const Shard mine = shard_of(world.rank(), active, bs);
    const bool mb = micro_batched(micro, active, bs);
    if (own_rows && (idx || x[0].dim(0) != mine.rows))
      throw std::logic_error("MultiWorkerMirroredStrategy: rank " + std::to_string(world.rank()) + " read " +
                             std::to_string(x[0].dim(0)) + " rows of a global batch of " + std::to_string(bs) +
                             " but its share is " + std::to_string(mine.rows));
    nn::ProgramCache& pc = programs(0);
    // A failure on one rank (out of memory building its programs, say) would leave the others waiting in the next
    // collective until the timeout: it ends the job at once instead, naming the rank and the error.
    try {
      prepare(pc, mine, mb, micro);
    } catch (const std::exception& e) {
      world.abort(std::string("building this rank's programs: ") + e.what());
    }
    if (!replicas_synced) {  // the same model and batch everywhere, then rank 0's weights and optimizer state
      std::vector<std::pair<std::string, Tensor*>> state = pc.state_tensors();
      std::string fingerprint = "optimizer " + model_.optimizer()->name() + ", global batch " + std::to_string(bs) +
                                (own_rows ? " (each rank reads its rows)" : " (each rank reads it all)") +
                                ", micro-batch " + std::to_string(micro) + ", gradient buckets of " +
                                std::to_string(strategy_->bytes_per_pack) + " bytes" +
                                (strategy_->overlap ? " overlapping the backward pass" : " reduced blocking") +
                                " (TK_BYTES_PER_PACK, TK_ALLREDUCE_OVERLAP: mpirun -x passes them to other hosts)" +
                                ", at optimizer step " + std::to_string(model_.optimizer()->config().iterations) +
                                " (a rank that restored another backup differs here), weights";
      for (const auto& [name, t] : state) fingerprint += " " + name + t->shape().to_string();
      // Layers that run collectives of their own (synchronized BatchNormalization): a rank without them would send
      // its gradient buckets where the others sum statistics.
      for (const LayerPtr& l : model_.layers()) {
        const LayerConfig config = l->get_config();
        const LayerConfig::Value* v = config.find("synchronized");
        if (v && v->b) fingerprint += ", " + l->name + " synchronized";
      }
      world.check_same(fingerprint, "MultiWorkerMirroredStrategy: model check before the first step");
      for (const auto& [name, t] : state) broadcast_tensor(world, *t, name);
      step = world.broadcast(step, "step (dropout keys)");
      model_.optimizer()->config().iterations = static_cast<int64_t>(
          world.broadcast(static_cast<uint64_t>(model_.optimizer()->config().iterations), "optimizer iterations"));
      replicas_synced = true;
    }
    nn::Accumulator local;
    graph::ExecContext ctx = base;
    ctx.scalars.step = step;  // as broadcast from rank 0
    ctx.scalars.iterations = model_.optimizer()->config().iterations;
    try {
      run_shard(pc, mine, mb, micro, bs, x, y, idx, own_rows, ctx, step, local);
    } catch (const std::exception& e) {
      world.abort(std::string("training step: ") + e.what());
    }
    {  // The logs of the global batch: every rank's row-weighted sums, summed (every rank takes part).
      const nn::Compiled& any = mb ? pc.get(nn::ProgramKind::accumulate, std::min(micro, mine.rows))
                                   : pc.get(nn::ProgramKind::train, mine.rows);
      nn::Accumulator global;  // the logs' names and widths (a stateful metric's counts), zero sums
      global.reset(any);
      std::vector<float> sums(global.sum.size() + 1, 0.0f), total(sums.size());
      for (size_t k = 0; k < local.sum.size() && k < global.sum.size(); ++k) sums[k] = static_cast<float>(local.sum[k]);
      sums.back() = static_cast<float>(local.count);
      world.all_reduce(0, sums.data(), total.data(), static_cast<int64_t>(sums.size()), 1.0f, "logs", -2);
      for (size_t k = 0; k + 1 < total.size(); ++k) global.sum[k] = total[k];
      global.count = total.back();
      acc.merge(global);
    }
    skipped = pc.optimizer_state().step_was_skipped();
  } else {
    // The global batch in order across this process's replicas; a batch smaller than the replica count runs on
    // as many replicas as it has rows. Under NCCL (GPUs) every replica must take part in every collective: those
    // without rows run one row with weight 0, as MPI's ranks do.
    const int active = static_cast<int>(std::min<int64_t>(s.replicas(), bs));
    const int running = s.every_replica_every_step ? s.replicas() : active;
    const bool mb = micro_batched(micro, active, bs);
    if (!replicas_synced) {
      for (int r = 1; r < s.replicas(); ++r) programs(r).sync_from(programs(0));
      replicas_synced = true;
    }
    std::vector<Shard> shards;
    for (int r = 0; r < running; ++r) {
      shards.push_back(shard_of(r, active, bs));
      prepare(programs(r), shards.back(), mb, micro);
    }
    std::vector<nn::Accumulator> logs(static_cast<size_t>(running));
    s.collective->begin_step(running);
    const int threads_each = std::max(1, graph::host_threads() / running);
    s.runner->run(
        running, threads_each,
        [&](int r) {
          run_shard(programs(r), shards[static_cast<size_t>(r)], mb, micro, bs, x, y, idx, false, base, step,
                    logs[static_cast<size_t>(r)]);
        },
        s.collective.get());
    for (const nn::Accumulator& a : logs) acc.merge(a);
    // Replicas that sat this step out (a batch with fewer rows than replicas) missed its update: they take replica
    // 0's weights and optimizer state again before the next step.
    if (running < s.replicas()) replicas_synced = false;
    for (int r = 0; r < running; ++r)  // every replica took the same decision on the same all-reduced gradients
      skipped = programs(r).optimizer_state().step_was_skipped() || skipped;
  }
  ++step;
  if (!skipped) ++model_.optimizer()->config().iterations;
  s.step_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  ++s.steps;
}

}  // namespace tk
