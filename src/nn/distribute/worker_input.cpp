// fit's input under MultiWorkerMirroredStrategy (worker_input.h): the policy, and the rows each rank reads.
#include "nn/distribute/worker_input.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>

#include "data/node.h"
#include "nn/distribute/batch_split.h"
#include "runtime/log.h"
#include "runtime/settings.h"
#include "trainkit/core/error.h"

namespace tk::nn::distribute {

data::AutoShardPolicy auto_shard_policy(const data::Dataset& d) {
  if (const std::optional<std::string> v = runtime::setting_choice(runtime::Setting::auto_shard)) {
    if (*v == "AUTO") return data::AutoShardPolicy::AUTO;
    if (*v == "DATA") return data::AutoShardPolicy::DATA;
    return data::AutoShardPolicy::OFF;
  }
  return data::pipeline_options(*d.node()).auto_shard_policy;
}

std::optional<data::WorkerShare> worker_input(const data::Dataset& d, const MpiCollective& world) {
  const data::AutoShardPolicy policy = auto_shard_policy(d);
  if (policy == data::AutoShardPolicy::OFF || world.size() < 2) return std::nullopt;
  const int64_t rank = world.rank(), ranks = world.size();
  std::string why;
  std::optional<data::WorkerShare> share = data::share_of_batches(
      d,
      [rank, ranks](int64_t window) {
        const Shard s = rank_shard(rank, ranks, window);
        return data::WorkerRows{s.first, s.rows};
      },
      why);
  if (share) return share;
  const std::string what = "the dataset " + d.describe() + " cannot be split by rows of its global batches: " + why;
  if (policy == data::AutoShardPolicy::DATA)
    throw InvalidArgument("fit: AutoShardPolicy::DATA: " + what +
                          ". End the pipeline with batch(), followed only by map (deterministic, without an Rng), "
                          "prefetch, repeat or with_options; or set the policy to AUTO or OFF");
  static std::mutex mu;
  static std::set<std::string> said;  // once per pipeline shape and reason
  std::lock_guard<std::mutex> lock(mu);
  if (world.rank() == 0 && said.insert(what).second && runtime::log_enabled(runtime::LogSeverity::warning))
    std::printf(
        "fit: MultiWorkerMirroredStrategy: every rank reads every batch: %s (TK_AUTO_SHARD=OFF silences this)\n",
        what.c_str());
  return std::nullopt;
}

}  // namespace tk::nn::distribute
