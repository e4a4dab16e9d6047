// What a training step needs and what the device has for it: the plan of a traced program, the largest batch that
// fits, the memory available beside what others hold.
#include <algorithm>

#include "core/device_bytes.h"
#include "nn/compiler/programs.h"
#include "nn/distribute/strategy_state.h"
#include "nn/training/trainer.h"
#include "runtime/device_memory.h"
#include "trainkit/runtime/memory.h"

namespace tk::nn {
namespace {

// What a training step on `device` may use: 95% of its budget, less what others hold there (`mine`: what the
// caller's own weights, optimizer state and arena hold, which the plan includes).
size_t available_beside(Device device, size_t mine) {
  const MemoryInfo m = config::get_memory_info(device);
  // Count what others hold by reservation, not by use: free pieces inside reserved regions may be too
  // small for an arena, which needs one contiguous block.
  // Without a chosen limit, the budget is the device; the lease ledger may grant less (colleagues' leases).
  const size_t budget = std::min(m.limit, runtime::DeviceMemory::get(device).leasable());
  const size_t usable = static_cast<size_t>(0.95 * double(budget));
  const size_t others = m.reserved > mine ? m.reserved - mine : 0;
  return usable > others ? usable - others : 0;
}

}  // namespace

MemoryPlan Trainer::memory_plan_with(int64_t batch_size, bool remat, int replica) {
  model_.ensure_built({});
  ProgramCache& pc = programs(replica);
  graph::RematStats stats;
  ProgramCache::Traced t = pc.trace(ProgramKind::train, batch_size, false, remat, &stats);
  MemoryPlan plan = plan_from_trace(t, model_.layers(), pc.device(), batch_size, remat, stats);
  plan.dtype_policy = model_.dtype_policy();  // Model::memory_plan's trace of the other policy: not reported
  return plan;
}

int64_t Trainer::largest_batch_that_fits_on(int replica, size_t available, int64_t cap) {
  // Plain plans unless rematerialization is forced: a batch that needs recomputation is not chosen.
  auto fits = [&](int64_t b) {
    return memory_plan_with(b, model_.rematerialization == Remat::on, replica).total <= available;
  };
  if (!fits(1)) return 0;
  int64_t lo = 1, hi = 1;
  while (hi < cap && fits(std::min(cap, hi * 2))) hi = std::min(cap, hi * 2), lo = hi;
  if (hi >= cap) return cap;
  hi = std::min(cap, hi * 2);  // lo fits, hi does not
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

size_t Trainer::memory_available_for_training() const {
  // A device planned for but not here: its whole budget, less the margin (nobody else holds any of it).
  if (absent_device_budget_ > 0) return static_cast<size_t>(0.95 * double(absent_device_budget_));
  size_t mine = 0;
  for (const LayerPtr& l : model_.layers())
    for (const Weight& w : l->weights()) mine += allocated_bytes(w.value.nbytes());
  mine += caches_[0]->persistent_bytes();
  return available_beside(model_.device(), mine);  // the model's device (was: always the cpu)
}

size_t Trainer::replica_memory_available(int r) {
  if (r == 0) return memory_available_for_training();
  ProgramCache& pc = programs(r);
  return available_beside(pc.device(), pc.held_bytes());  // its weight copies, slots and arena are its own
}

}  // namespace tk::nn
