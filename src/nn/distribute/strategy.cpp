// MirroredStrategy: devices, scope, and the replicas' shared machinery (trainkit/nn/distribute.h).
#include <algorithm>
#include <cstdlib>

#include "graph/bucket.h"
#include "nn/distribute/strategy_state.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/callbacks.h"
#include "trainkit/runtime/memory.h"

namespace tk::distribute {
namespace {

thread_local std::shared_ptr<StrategyState> t_current;

std::chrono::milliseconds collective_timeout(std::chrono::milliseconds given) {
  if (given.count() > 0) return given;
  if (const char* env = std::getenv("TK_COLLECTIVE_TIMEOUT"); env && *env) {
    char* end = nullptr;
    const double s = std::strtod(env, &end);
    if (end == env || *end != '\0' || !(s > 0.0))
      throw InvalidArgument("TK_COLLECTIVE_TIMEOUT='" + std::string(env) +
                            "': expected a positive number of seconds (e.g. 300)");
    return std::chrono::milliseconds(static_cast<int64_t>(s * 1000.0));
  }
  return std::chrono::seconds(300);
}

size_t bytes_per_pack(size_t given) {
  if (given > 0) return given;
  if (const char* env = std::getenv("TK_BYTES_PER_PACK"); env && *env) {
    try {
      const size_t bytes = config::parse_bytes(env);
      if (bytes > 0) return bytes;
    } catch (const Error&) {
    }
    throw InvalidArgument("TK_BYTES_PER_PACK='" + std::string(env) +
                          "': expected a positive number of bytes, with or without a unit (e.g. 26214400 or 25MiB)");
  }
  return graph::kDefaultBucketBytes;
}

bool env_flag(const char* name) {
  const char* env = std::getenv(name);
  if (!env || !*env) return false;
  const std::string v = env;
  if (v == "1" || v == "true" || v == "on") return true;
  if (v == "0" || v == "false" || v == "off") return false;
  throw InvalidArgument(std::string(name) + "='" + v + "': expected 1 or 0");
}

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
    if (d.kind == DeviceKind::cuda)
      throw Unsupported("MirroredStrategy over " + d.to_string() +
                        ": replicas on GPUs are not wired to NCCL yet (one GPU trains with Model::set_device or "
                        "`trainkit fit --device cuda`); use cpu devices for data parallel");
    config::get_memory_info(d);  // InvalidArgument/Unsupported naming a device that does not exist
  }
  auto s = std::make_shared<StrategyState>();
  s->devices = std::move(devices);
  s->collective =
      std::make_unique<nn::distribute::LocalCollective>(s->replicas(), collective_timeout(options.collective_timeout));
  s->runner = std::make_unique<nn::distribute::ReplicaRunner>(s->replicas());
  s->bytes_per_pack = bytes_per_pack(options.bytes_per_pack);
  s->description = "MirroredStrategy over " + names + " (" + std::to_string(s->replicas()) + " replica" +
                   (s->replicas() == 1 ? "" : "s") + " in sync)";
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

MultiWorkerMirroredStrategy::MultiWorkerMirroredStrategy(Options options) {
  auto s = std::make_shared<StrategyState>();
  s->mpi = &nn::distribute::MpiCollective::world(collective_timeout(options.collective_timeout));
  s->devices = {Device::cpu()};
  s->bytes_per_pack = bytes_per_pack(options.bytes_per_pack);
  s->description = "MultiWorkerMirroredStrategy over " + std::to_string(s->mpi->size()) + " process" +
                   (s->mpi->size() == 1 ? "" : "es") + " (MPI), this is rank " + std::to_string(s->mpi->rank()) +
                   " on cpu:0";
  s->overlap = options.overlap ? *options.overlap : env_flag("TK_ALLREDUCE_OVERLAP");
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
