// MirroredStrategy: devices, scope, and the replicas' shared machinery (trainkit/nn/distribute.h).
#include <algorithm>
#include <cstdlib>

#include "graph/bucket.h"
#include "nn/distribute/nccl_collective.h"
#include "nn/distribute/overlap_default.h"
#include "nn/distribute/rank_device.h"
#include "nn/distribute/strategy_state.h"
#include "runtime/cuda_device.h"
#include "runtime/settings.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/callbacks.h"
#include "trainkit/runtime/memory.h"

namespace tk::distribute {
namespace {

thread_local std::shared_ptr<StrategyState> t_current;

std::chrono::milliseconds collective_timeout(std::chrono::milliseconds given) {
  if (given.count() > 0) return given;
  const double s = runtime::setting_number_or_default(runtime::Setting::collective_timeout);  // 300 when unset
  return std::chrono::milliseconds(static_cast<int64_t>(s * 1000.0));
}

size_t bytes_per_pack(size_t given) {
  if (given > 0) return given;
  return runtime::setting_bytes_or_default(runtime::Setting::bytes_per_pack);  // 25 MiB (graph::kDefaultBucketBytes)
}

#ifdef TK_HAVE_NCCL
constexpr bool kNccl = true;
#else
constexpr bool kNccl = false;
#endif

int visible_cuda_devices() { return static_cast<int>(runtime::cuda_devices().devices.size()); }

// The CUDA runtime's number of cuda:N (after CUDA_VISIBLE_DEVICES / TK_VISIBLE_DEVICES): what NCCL takes.
[[maybe_unused]] int cuda_ordinal(Device d) { return runtime::cuda_device(d.index).ordinal; }

std::vector<Device> default_devices() {
  std::vector<Device> out;
  for (const DeviceInfo& d : config::list_devices())
    if (d.device.kind == DeviceKind::cpu) out.push_back(d.device);
  return out;
}

}  // namespace

MirroredStrategy::MirroredStrategy(std::vector<Device> devices) : MirroredStrategy(std::move(devices), Options{}) {}

MirroredStrategy::MirroredStrategy(std::vector<Device> devices, Options options) {
  if (devices.empty()) devices = default_devices();
  std::string names;
  for (size_t i = 0; i < devices.size(); ++i) {
    const Device d = devices[i];
    names += (i ? ", " : "") + d.to_string();
    for (size_t j = 0; j < i; ++j)
      if (devices[j] == d)
        throw InvalidArgument("MirroredStrategy: " + d.to_string() +
                              " is listed twice (one replica per device; split the cpu into logical devices with "
                              "tk::config::set_logical_device_configuration for more cpu replicas)");
    if (d.kind != devices[0].kind)
      throw InvalidArgument("MirroredStrategy: devices of one kind, got " + devices[0].to_string() + " and " +
                            d.to_string());
    // A cpu device that does not exist: InvalidArgument/Unsupported naming it. CUDA devices are checked below, and
    // their budgets are taken at first use, after NCCL has made its buffers.
    if (d.kind == DeviceKind::cpu) config::get_memory_info(d);
  }
  const bool gpus = !devices.empty() && devices[0].kind == DeviceKind::cuda;
  if (gpus) {
    const std::string problem = nn::distribute::cuda_replicas_problem(
        devices, runtime::cuda_built(), visible_cuda_devices(), runtime::cuda_devices().reason, kNccl);
    if (!problem.empty()) throw Unsupported(problem);
  }
  const auto timeout = collective_timeout(options.collective_timeout);
  auto s = std::make_shared<StrategyState>();
  s->devices = std::move(devices);
  s->collective = std::make_unique<nn::distribute::LocalCollective>(s->replicas(), timeout);
  s->runner = std::make_unique<nn::distribute::ReplicaRunner>(s->replicas());
  s->bytes_per_pack = bytes_per_pack(options.bytes_per_pack);
  s->one_device_replicated = options.replicate_one_device && s->replicas() == 1;
  s->description = "MirroredStrategy over " + names + " (" + std::to_string(s->replicas()) + " replica" +
                   (s->replicas() == 1 ? "" : "s") + " in sync" +
                   (s->one_device_replicated ? ", run as replicas for tests" : "");
#ifdef TK_HAVE_NCCL
  // One NCCL communicator per GPU, all made here (ncclCommInitAll); one rank of one for replicate_one_device (tests).
  if (gpus && (s->replicas() > 1 || s->one_device_replicated)) {
    std::vector<int> ordinals;
    for (const Device& d : s->devices) ordinals.push_back(cuda_ordinal(d));
    s->device_collective = nn::distribute::NcclCollective::for_devices(ordinals, timeout);
    s->every_replica_every_step = true;
    s->description += "; gradients summed by NCCL";
    s->overlap =
        nn::distribute::choose_overlap(options.overlap, runtime::setting_raw(runtime::Setting::allreduce_overlap),
                                       nn::distribute::OverlapGroup::nccl)
            .overlap;
    if (s->overlap) s->description += ", overlapping the backward pass";
  }
#endif
  if (!gpus) {  // cpu replicas in one process: overlap is not built (overlap_default.h)
    const std::string note =
        nn::distribute::choose_overlap(options.overlap, nullptr, nn::distribute::OverlapGroup::in_process_cpu).note;
    if (!note.empty()) s->description += "; " + note;
  }
  s->description += ")";
  state_ = std::move(s);
}

int MirroredStrategy::num_replicas_in_sync() const { return state_->replicas(); }
const std::vector<Device>& MirroredStrategy::devices() const { return state_->devices; }
std::string MirroredStrategy::describe() const { return state_->description; }

StrategyScope::StrategyScope(std::shared_ptr<StrategyState> s) : previous_(std::move(t_current)) {
  t_current = std::move(s);
}
StrategyScope::~StrategyScope() { t_current = std::move(previous_); }

StrategyScope MirroredStrategy::scope() const { return StrategyScope(state_); }

MultiWorkerMirroredStrategy::MultiWorkerMirroredStrategy() : MultiWorkerMirroredStrategy(Options{}) {}

namespace {

// MultiWorkerMirroredStrategy on cuda: this rank's GPU (its local rank's, nn/distribute/rank_device.h) and, with more
// than one rank, NCCL's communicator over the ranks, rank 0's id broadcast over MPI. Before NCCL's initialization,
// which would wait for a rank that never comes, every rank learns which ranks could not take a GPU.
Device take_local_gpu(StrategyState& s, std::chrono::milliseconds timeout, std::string& placed) {
  nn::distribute::MpiCollective& world = *s.mpi;
  std::string error;
  nn::distribute::RankDevice rd;
  try {
    if (!runtime::cuda_built())
      throw Unsupported(
          "MultiWorkerMirroredStrategy on cuda: this build of trainkit has no CUDA backend (configure with "
          "-DTK_CUDA=ON where the CUDA toolkit is installed), or train on the cpu");
    rd = nn::distribute::rank_device(
        world.local_rank(), visible_cuda_devices(), [](const char* v) { return std::getenv(v); },  // OMPI_*, SLURM_*
        runtime::cuda_devices().reason);
    if (world.size() > 1 && !kNccl)
      throw Unsupported(
          "MultiWorkerMirroredStrategy on cuda: summing gradients between GPUs needs NCCL, and this build of "
          "trainkit has none (install NCCL, e.g. libnccl-dev or the CUDA toolkit's, and rebuild: CMake finds it)");
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (world.size() > 1) {
    std::vector<double> failed(static_cast<size_t>(world.size()), 0.0);
    failed[static_cast<size_t>(world.rank())] = error.empty() ? 0.0 : 1.0;
    world.all_reduce_sum(failed.data(), world.size(), "which ranks have a GPU");
    std::string others;
    for (int r = 0; r < world.size(); ++r)
      if (failed[static_cast<size_t>(r)] != 0.0 && r != world.rank())
        others += (others.empty() ? "" : ", ") + std::to_string(r);
    if (!error.empty()) throw Unsupported("rank " + std::to_string(world.rank()) + ": " + error);
    if (!others.empty())
      throw Unsupported("MultiWorkerMirroredStrategy on cuda: rank(s) " + others +
                        " could not take a GPU (each prints why); this is rank " + std::to_string(world.rank()) +
                        ", which would have taken cuda:" + std::to_string(rd.index));
  } else if (!error.empty()) {
    throw Unsupported(error);
  }
  const Device device = Device::cuda(rd.index);
  placed = "local rank " + std::to_string(rd.local_rank) + " on its node (" + rd.source + ") of " +
           std::to_string(visible_cuda_devices()) + " visible GPU" + (visible_cuda_devices() == 1 ? "" : "s");
#ifdef TK_HAVE_NCCL
  if (world.size() > 1) {
    std::string id = world.rank() == 0 ? nn::distribute::NcclCollective::unique_id() : std::string();
    const uint64_t bytes = world.broadcast(static_cast<uint64_t>(id.size()), "NCCL id size");
    id.resize(static_cast<size_t>(bytes));
    world.broadcast(id.data(), id.size(), "NCCL id");
    s.device_collective =
        nn::distribute::NcclCollective::for_rank(id, world.size(), world.rank(), cuda_ordinal(device), timeout);
    placed += "; gradients summed by NCCL";
  }
#else
  (void)timeout;
#endif
  return device;
}

}  // namespace

MultiWorkerMirroredStrategy::MultiWorkerMirroredStrategy(Options options) {
  auto s = std::make_shared<StrategyState>();
  const auto timeout = collective_timeout(options.collective_timeout);
  s->mpi = &nn::distribute::MpiCollective::world(timeout);
  if (options.device != DeviceKind::cpu && options.device != DeviceKind::cuda)
    throw InvalidArgument("MultiWorkerMirroredStrategy: Options::device must be cpu or cuda");
  std::string placed;
  const Device device = options.device == DeviceKind::cuda ? take_local_gpu(*s, timeout, placed) : Device::cpu();
  s->devices = {device};
  s->bytes_per_pack = bytes_per_pack(options.bytes_per_pack);
  s->description = "MultiWorkerMirroredStrategy over " + std::to_string(s->mpi->size()) + " process" +
                   (s->mpi->size() == 1 ? "" : "es") + " (MPI), this is rank " + std::to_string(s->mpi->rank()) +
                   " on " + device.to_string() + (placed.empty() ? "" : " (" + placed + ")");
  // NCCL: on unless turned off (its own communication stream; overlap_default.h says why); MPI on the cpu: off unless
  // asked for.
  s->overlap = nn::distribute::choose_overlap(
                   options.overlap, runtime::setting_raw(runtime::Setting::allreduce_overlap),
                   s->device_collective ? nn::distribute::OverlapGroup::nccl : nn::distribute::OverlapGroup::mpi)
                   .overlap;
  if (s->overlap) s->description += "; all-reduces overlap the backward pass";
  state_ = std::move(s);
}

bool MultiWorkerMirroredStrategy::launched_by_mpi() { return nn::distribute::MpiCollective::launched_by_mpi(); }
void MultiWorkerMirroredStrategy::end_job_after_error(int exit_code) {
  nn::distribute::MpiCollective::end_job_after_error(exit_code);
}
int MultiWorkerMirroredStrategy::num_replicas_in_sync() const { return state_->replicas_in_sync(); }
int MultiWorkerMirroredStrategy::rank() const { return state_->mpi->rank(); }
std::string MultiWorkerMirroredStrategy::describe() const { return state_->description; }
Device MultiWorkerMirroredStrategy::device() const { return state_->devices[0]; }
StrategyScope MultiWorkerMirroredStrategy::scope() const { return StrategyScope(state_); }

std::shared_ptr<StrategyState> current_strategy() { return t_current; }

void add_allreduce_logs(const StrategyState* s, const StepClock& since, Logs& logs) {
  if (!s || !s->program_collective()) return;
  const StepClock now = s->clock();
  const int64_t steps = now.steps - since.steps;
  const double wall = now.step_seconds - since.step_seconds;
  if (steps <= 0 || wall <= 0) return;
  const double collective = now.collective_seconds - since.collective_seconds;
  logs.set("allreduce_ms_per_step", 1e3 * collective / static_cast<double>(steps));
  logs.set("allreduce_fraction", collective / wall);
  const double span = now.overlap_span_seconds - since.overlap_span_seconds;
  const double blocked = now.overlap_blocked_seconds - since.overlap_blocked_seconds;
  if (span > 0) logs.set("allreduce_overlap", std::clamp(1.0 - blocked / span, 0.0, 1.0));
}

}  // namespace tk::distribute
