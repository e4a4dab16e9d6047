// One training step under a MirroredStrategy with several replicas (trainkit/nn/distribute.h).
#include <algorithm>

#include "backends/cpu/threads.h"
#include "nn/compiler/programs.h"
#include "nn/distribute/strategy_state.h"
#include "nn/training/fit_common.h"
#include "nn/training/staging.h"
#include "trainkit/nn/model.h"

namespace tk {

nn::ProgramCache& Model::replica_programs(int r) {
  if (!programs_) programs_ = std::make_unique<nn::ProgramCache>(*this);
  if (r == 0) return *programs_;
  while (static_cast<int>(replica_programs_.size()) < r)
    replica_programs_.push_back(
        std::make_unique<nn::ProgramCache>(*this, static_cast<int>(replica_programs_.size()) + 1));
  return *replica_programs_[static_cast<size_t>(r - 1)];
}

void Model::train_step_replicated(const std::vector<Tensor>& x, const std::vector<Tensor>& y, const int64_t* idx,
                                  int64_t bs, int64_t micro, nn::Accumulator& acc) {
  distribute::StrategyState& s = *strategy_;
  // The global batch in order: replica r takes rows [first[r], first[r] + rows[r]); the first bs % active
  // replicas one row more. A batch smaller than the replica count runs on as many replicas as it has rows.
  const int active = static_cast<int>(std::min<int64_t>(s.replicas(), bs));
  std::vector<int64_t> rows(static_cast<size_t>(active)), first(static_cast<size_t>(active));
  for (int r = 0, start = 0; r < active; ++r) {
    rows[static_cast<size_t>(r)] = bs / active + (r < bs % active ? 1 : 0);
    first[static_cast<size_t>(r)] = start;
    start += static_cast<int>(rows[static_cast<size_t>(r)]);
  }
  // Micro-batching per replica (one all-reduce per step, in the apply program): when the largest shard is
  // larger than a micro-batch. Every replica then runs the same kind of programs.
  const bool micro_batched = micro > 0 && micro < rows[0];
  if (!replicas_synced_) {
    for (int r = 1; r < s.replicas(); ++r) replica_programs(r).sync_from(replica_programs(0));
    replicas_synced_ = true;
  }
  // Build every program this step needs here, one at a time: building measures kernels and touches the model.
  for (int r = 0; r < active; ++r) {
    nn::ProgramCache& pc = replica_programs(r);
    const int64_t n = rows[static_cast<size_t>(r)];
    if (!micro_batched) {
      pc.get(nn::ProgramKind::train, n);
      continue;
    }
    for (int64_t m = 0; m < n; m += micro) pc.get(nn::ProgramKind::accumulate, std::min(micro, n - m));
    pc.get(nn::ProgramKind::apply, 0);
  }
  std::vector<nn::Accumulator> logs(static_cast<size_t>(active));
  const graph::ExecContext base = nn::exec_context(device_, step_, true, optimizer_.get());
  auto run_replica = [&](int r) {
    nn::ProgramCache& pc = replica_programs(r);
    const int64_t n = rows[static_cast<size_t>(r)], at = first[static_cast<size_t>(r)];
    nn::Accumulator& out = logs[static_cast<size_t>(r)];
    graph::ExecContext ctx = base;
    ctx.device = pc.device();
    if (!micro_batched) {
      nn::Compiled& c = pc.get(nn::ProgramKind::train, n);
      nn::HostStager::bind_rows(c, x, &y, idx ? idx + at : nullptr, idx ? 0 : at, n);
      ctx.scalars.grad_scale = static_cast<float>(n) / static_cast<float>(bs);  // AllReduce: this replica's share
      ctx.scalars.sample_offset = at;                                           // dropout: global sample index
      c.program->run(ctx);
      out.add(c, n);
      return;
    }
    for (int64_t m = 0; m < n; m += micro) {  // as one device's micro-batches, at their global row
      const int64_t mb = std::min(micro, n - m);
      nn::Compiled& c = pc.get(nn::ProgramKind::accumulate, mb);
      nn::HostStager::bind_rows(c, x, &y, idx ? idx + at + m : nullptr, idx ? 0 : at + m, mb);
      ctx.scalars.step = (step_ << 20) + static_cast<uint64_t>(at + m);
      ctx.scalars.grad_scale = static_cast<float>(mb) / static_cast<float>(bs);
      c.program->run(ctx);
      out.add(c, mb);
    }
    ctx.scalars.step = step_;
    ctx.scalars.grad_scale = 1.0f;  // the accumulators already hold each micro-batch's share of the global batch
    pc.get(nn::ProgramKind::apply, 0).program->run(ctx);
  };
  s.collective->begin_step(active);
  const int threads_each = std::max(1, cpu::adapted_threads() / active);
  s.runner->run(active, threads_each, run_replica, s.collective.get());
  for (const nn::Accumulator& a : logs) acc.merge(a);
  ++step_;
  bool skipped = false;  // every replica took the same decision on the same all-reduced gradients
  for (int r = 0; r < active; ++r) skipped = replica_programs(r).step_was_skipped() || skipped;
  if (!skipped) ++optimizer_->config().iterations;
}

}  // namespace tk
