// Every evaluate and predict — over arrays, a Dataset or a device-resident dataset — around the one batch loop
// (nn::for_each_batch, nn/training/batch_source.h), a round of batches at a time: on this thread, on the replicas of
// a MirroredStrategy (batch k on replica k % replicas, each on its own thread), or on this rank's share of a
// MultiWorkerMirroredStrategy (batch k on rank k % ranks). Its source says where batches come from; the hooks
// (nn/training/read_batches.h) say what evaluate (sum the logs) or predict (keep the outputs) does with each.
#include <string>

#include "nn/compiler/programs.h"
#include "nn/distribute/mpi_collective.h"
#include "nn/distribute/replicated_eval.h"
#include "nn/distribute/strategy_state.h"
#include "nn/training/fit_common.h"
#include "nn/training/read_batches.h"
#include "nn/training/staging.h"
#include "nn/training/trainer.h"

namespace tk {

int nn::Trainer::inference_replicas() const {
  return nn::distribute::replicated_in_process(strategy_.get()) ? strategy_->replicas() : 1;
}

nn::distribute::MpiCollective* nn::Trainer::inference_loop(nn::BatchSource& source, const nn::InferenceHooks& h) {
  const nn::ProgramKind kind = h.predict ? nn::ProgramKind::predict : nn::ProgramKind::eval;
  const bool in_process = nn::distribute::replicated_in_process(strategy_.get());
  const int replicas = inference_replicas();
  std::vector<nn::Batch> round(static_cast<size_t>(source.round_size(replicas)));  // batches s, s + 1, ...
  std::vector<nn::ProgramCache*> caches;
  nn::distribute::MpiCollective* world = nullptr;
  const graph::ExecContext ctx = nn::exec_context(model_.device(), step, false, model_.optimizer().get());
  auto bind_and_run = [&](nn::Compiled& c, const nn::Batch& b, const graph::ExecContext& on) {
    nn::BatchStager::bind_rows(c, *b.x, b.y, b.rows, b.begin, b.n);
    c.program->run(on);
  };
  bool ran_out = false;
  nn::for_each_batch(source, 0, h.steps, round, ran_out, [&](int64_t s, size_t got) {
    const auto count = static_cast<int64_t>(got);
    if (h.read)
      for (size_t g = 0; g < got; ++g) h.read(s + static_cast<int64_t>(g), round[g]);
    if (in_process) {
      if (caches.empty()) {  // the model is built now (by the first batch)
        caches = nn::distribute::synced_replicas(replicas, [&](int r) -> nn::ProgramCache& { return programs(r); });
        replicas_synced = true;
      }
      auto batch = [&](int64_t k) -> const nn::Batch& { return round[static_cast<size_t>(k - s)]; };
      nn::distribute::run_on_replicas(
          *strategy_, caches, s, count, ctx,
          [&](int r, int64_t k) {
            caches[static_cast<size_t>(r)]->get(kind, batch(k).n);
            if (h.prepare) h.prepare(r, k, batch(k));
          },
          [&](int r, int64_t k, const graph::ExecContext& on) {
            nn::Compiled& c = caches[static_cast<size_t>(r)]->get(kind, batch(k).n);
            bind_and_run(c, batch(k), on);
            h.ran(c, r, k, batch(k));
          });
    } else {
      if (s == 0 && h.group) world = h.group();
      for (int64_t k = s; k < s + count; ++k) {
        if (world && k % world->size() != world->rank()) continue;
        const nn::Batch& b = round[static_cast<size_t>(k - s)];
        try {  // a failure on one rank ends the job at once, not after the others' collective timeout
          if (h.prepare) h.prepare(0, k, b);
          nn::Compiled& c = programs().get(kind, b.n);
          bind_and_run(c, b, ctx);
          h.ran(c, 0, k, b);
          if (world) nn::distribute::count_rank_batch(*strategy_);
        } catch (const std::exception& e) {
          if (!world) throw;
          world->abort(std::string(h.predict ? "predict: " : "evaluation: ") + e.what());
        }
      }
    }
    return true;
  });
  return world;
}

}  // namespace tk
