#include "nn/distribute/replicated_eval.h"

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <string>

#include "graph/host_threads.h"
#include "nn/compiler/programs.h"
#include "nn/distribute/mpi_collective.h"
#include "nn/distribute/strategy_state.h"

namespace tk::nn::distribute {

bool replicated_in_process(const tk::distribute::StrategyState* state) {
  return state && !state->mpi && (state->replicas() > 1 || state->one_device_replicated);
}

std::vector<ProgramCache*> synced_replicas(int replicas, const std::function<ProgramCache&(int)>& programs) {
  std::vector<ProgramCache*> out{&programs(0)};
  for (int r = 1; r < replicas; ++r) {
    out.push_back(&programs(r));
    out.back()->sync_from(*out[0]);
  }
  return out;
}

void run_on_replicas(tk::distribute::StrategyState& state, const std::vector<ProgramCache*>& replicas, int64_t first,
                     int64_t count, const graph::ExecContext& base, const std::function<void(int, int64_t)>& prepare,
                     const std::function<void(int, int64_t, const graph::ExecContext&)>& run) {
  const auto n = static_cast<int64_t>(replicas.size());
  if (count <= 0) return;
  if (n < 1 || first % n != 0 || n > state.replicas())
    throw std::logic_error("run_on_replicas: batches from " + std::to_string(first) + " over " + std::to_string(n) +
                           " replicas of " + std::to_string(state.replicas()));
  for (int64_t k = first; k < first + count; ++k) prepare(static_cast<int>(k % n), k);
  const int active = static_cast<int>(std::min(n, count));
  if (state.inference_batches.size() < replicas.size()) state.inference_batches.resize(replicas.size(), 0);
  std::atomic<bool> failed{false};
  state.runner->run(
      active, std::max(1, graph::host_threads() / active),
      [&](int r) {
        graph::ExecContext ctx = base;
        ctx.device = replicas[static_cast<size_t>(r)]->device();
        try {
          for (int64_t k = first + r; k < first + count && !failed.load(); k += n) {
            run(r, k, ctx);
            ++state.inference_batches[static_cast<size_t>(r)];
          }
        } catch (...) {
          failed = true;  // the other replicas stop after their current batch
          throw;
        }
      },
      nullptr);  // evaluation and prediction programs hold no collective
}

void count_rank_batch(tk::distribute::StrategyState& state) {
  if (state.inference_batches.empty()) state.inference_batches.resize(1, 0);
  ++state.inference_batches[0];
}

void gather_batches(MpiCollective& world, std::vector<Tensor>& outputs, const std::vector<int64_t>& rows,
                    const char* what) {
  const int ranks = world.size();
  if (ranks < 2) return;
  int64_t at = 0;  // the round's first row
  for (size_t k0 = 0; k0 < rows.size(); k0 += static_cast<size_t>(ranks)) {
    std::vector<int64_t> counts(static_cast<size_t>(ranks), 0);
    int64_t round = 0;
    for (size_t r = 0; r < counts.size() && k0 + r < rows.size(); ++r) round += counts[r] = rows[k0 + r];
    for (Tensor& t : outputs) {
      const int64_t total = t.shape().rank() == 0 ? 0 : t.dim(0);
      if (total == 0) continue;
      const size_t row_bytes = t.nbytes() / static_cast<size_t>(total);
      world.all_gather(static_cast<char*>(t.raw()) + static_cast<size_t>(at) * row_bytes, counts, row_bytes, what);
    }
    at += round;
  }
}

}  // namespace tk::nn::distribute
