// batch_size / micro_batch_size = kAutoBatchSize: the largest batch that fits, on one device or per replica under a
// strategy (each replica runs its share of the global batch on its own device and budget; the tightest decides).
#include <algorithm>
#include <cstdio>

#include "core/device_bytes.h"
#include "nn/compiler/programs.h"
#include "nn/distribute/strategy_state.h"
#include "trainkit/core/error.h"
#include "trainkit/runtime/memory.h"

namespace tk {
namespace {

// Micro-batching's gradient accumulators: one per trainable weight, each rounded to the device allocator's 256 bytes.
size_t accumulator_bytes(nn::ProgramCache& programs) {
  size_t bytes = 0;
  for (Weight* w : programs.trainable_weights()) bytes += allocated_bytes(w->value.nbytes());
  return bytes;
}

// One replica's answer, as the ranks exchange it (every field an int64 for MPI_Allgatherv).
struct ReplicaFit {
  int64_t batch = 0;      // the largest that fits (0: not even 1)
  int64_t available = 0;  // bytes a step may use there
  int64_t plan = 0;       // bytes the plan of `batch` takes (0 when none fits)
  int64_t limit = 0;      // the device's budget
  int64_t device_kind = 0, device_index = 0;
  int64_t rank = 0, replica = 0;  // which replica of which rank
  Device device() const { return {static_cast<DeviceKind>(device_kind), static_cast<int>(device_index)}; }
};

std::string where(const ReplicaFit& f, bool mpi, int replicas) {
  return mpi ? "rank " + std::to_string(f.rank) + "'s " + f.device().to_string()
             : f.device().to_string() + " (replica " + std::to_string(f.replica) + " of " + std::to_string(replicas) +
                   ")";
}

}  // namespace

int64_t nn::Trainer::auto_batch_size(int64_t cap, bool report, const std::string& what) {
  check_compiled("auto_batch_size");
  if (cap <= 0) throw InvalidArgument(what + ": the cap must be positive, got " + std::to_string(cap));
  if (replicated()) return replicated_auto_batch(cap, false, 0, report, what);
  const size_t available = memory_available_for_training();
  const int64_t batch = largest_batch_that_fits_on(0, available, cap);
  if (batch == 0)
    throw OutOfMemoryError(what + ": not even a batch of 1 fits the " + config::format_bytes(available) +
                           " available for training (raise the budget)");
  if (report)
    std::printf("batch_size auto: %lld (plan %s of %s available)\n", static_cast<long long>(batch),
                config::format_bytes(model_.memory_plan(batch).total).c_str(), config::format_bytes(available).c_str());
  return batch;
}

int64_t nn::Trainer::auto_micro_batch_size(int64_t batch, bool report, const std::string& what) {
  check_compiled("auto_micro_batch_size");
  if (batch <= 0) throw InvalidArgument(what + ": the batch must be positive, got " + std::to_string(batch));
  if (replicated()) return replicated_auto_batch(batch, true, batch, report, what);
  const size_t accumulators = accumulator_bytes(programs());
  const size_t available = memory_available_for_training();
  const int64_t micro = largest_batch_that_fits_on(0, available > accumulators ? available - accumulators : 0, batch);
  if (micro == 0)
    throw OutOfMemoryError(what + ": not even a micro-batch of 1 fits the " + config::format_bytes(available) +
                           " available for training (raise the budget)");
  if (report)
    std::printf("micro_batch_size auto: %lld per step of %lld\n", static_cast<long long>(micro),
                static_cast<long long>(batch));
  return micro;
}

// cap: the global batch's cap (auto batch), or the global batch (micro: each replica's micro-batch is at most its
// share, the largest shard of nn/distribute/batch_split.h).
int64_t nn::Trainer::replicated_auto_batch(int64_t cap, bool micro, int64_t batch, bool report,
                                           const std::string& what) {
  tk::distribute::StrategyState& s = *strategy_;
  nn::distribute::MpiCollective* world = s.mpi && s.mpi->size() > 1 ? s.mpi : nullptr;
  const int64_t in_sync = s.replicas_in_sync();
  const int64_t per_replica_cap = micro ? (batch + in_sync - 1) / in_sync : std::max<int64_t>(1, cap / in_sync);
  const size_t accumulators = micro ? accumulator_bytes(programs()) : 0;
  const bool remat = model_.rematerialization == Remat::on;

  // This process's replicas: each one's largest batch on its own device beside what others hold there.
  auto local_fits = [&] {
    std::vector<ReplicaFit> fits;
    for (int r = 0; r < s.replicas(); ++r) {
      ReplicaFit f;
      const Device d = r == 0 ? model_.device() : programs(r).device();
      // Tracing makes the replica's copies of the weights on its device first: what they hold there (and strand: a
      // small tensor takes a shared 2 MiB region) is then counted the same way before and after training.
      memory_plan_with(1, remat, r);
      const size_t available = replica_memory_available(r);
      f.batch = largest_batch_that_fits_on(r, available > accumulators ? available - accumulators : 0, per_replica_cap);
      f.available = static_cast<int64_t>(available);
      f.plan = f.batch > 0 ? static_cast<int64_t>(memory_plan_with(f.batch, remat, r).total) : 0;
      f.limit = static_cast<int64_t>(config::get_memory_info(d).limit);
      f.device_kind = static_cast<int64_t>(d.kind);
      f.device_index = d.index;
      f.rank = world ? world->rank() : 0;
      f.replica = r;
      fits.push_back(f);
    }
    return fits;
  };
  std::vector<ReplicaFit> fits;
  if (!world) {
    fits = local_fits();
  } else {  // one replica per rank: every rank's answer on every rank, so every rank takes the same decision
    ReplicaFit mine;
    try {  // a rank that fails while planning would leave the others waiting in the all-gather
      mine = local_fits().at(0);
    } catch (const std::exception& e) {
      world->abort(what + ": planning this rank's batch: " + e.what());
    }
    fits.assign(static_cast<size_t>(world->size()), ReplicaFit{});
    fits[static_cast<size_t>(world->rank())] = mine;
    world->all_gather(fits.data(), std::vector<int64_t>(fits.size(), 1), sizeof(ReplicaFit),
                      micro ? "micro_batch_size auto" : "batch_size auto");
  }
  const ReplicaFit& tightest = *std::min_element(
      fits.begin(), fits.end(), [](const ReplicaFit& a, const ReplicaFit& b) { return a.batch < b.batch; });
  const std::string on = where(tightest, world != nullptr, s.replicas());
  if (tightest.batch == 0)  // every rank throws alike
    throw OutOfMemoryError(what + ": not even a" + (micro ? " micro-batch" : " batch") + " of 1 fits the " +
                           config::format_bytes(static_cast<size_t>(tightest.available)) +
                           " available for training on " + on + (micro ? " beside its gradient accumulators" : "") +
                           " (its budget " + config::format_bytes(static_cast<size_t>(tightest.limit)) + "; raise it)");
  const bool prints = report && (world == nullptr || world->rank() == 0);
  const std::string plan = "plan " + config::format_bytes(static_cast<size_t>(tightest.plan)) + " of " +
                           config::format_bytes(static_cast<size_t>(tightest.available)) +
                           " available on the tightest, " + on;
  if (micro) {
    if (prints)
      std::printf("micro_batch_size auto: %lld per replica step of %lld rows (batch %lld over %lld replicas; %s)\n",
                  static_cast<long long>(tightest.batch), static_cast<long long>(per_replica_cap),
                  static_cast<long long>(batch), static_cast<long long>(in_sync), plan.c_str());
    return tightest.batch;
  }
  const int64_t global = std::min(cap, in_sync * tightest.batch);
  if (prints)
    std::printf("batch_size auto: %lld (%lld replicas x %lld; %s)\n", static_cast<long long>(global),
                static_cast<long long>(in_sync), static_cast<long long>(tightest.batch), plan.c_str());
  return global;
}

}  // namespace tk
