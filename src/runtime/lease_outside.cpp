// Memory the lease ledger cannot hand out because processes outside it hold it: NVML's per-process GPU memory.
#include <algorithm>

#include "runtime/lease.h"
#include "runtime/nvml.h"

namespace tk::runtime {

// The GPU's compute processes that are not in the ledger, summed. NVML reports host pids: a job in another pid
// namespace (a container) that holds a lease is counted as outside too, which errs on the safe side. When NVML is
// absent, or cannot list processes, nothing is subtracted (the ledger then only knows what trainkit jobs declare).
uint64_t nvml_outside_usage(const LeaseDevice& device, const std::vector<int>& ledger_pids) {
  if (device.id == "cpu") return 0;
  const Nvml& nvml = Nvml::instance();
  if (!nvml.available()) return 0;
  uint64_t outside = 0;
  for (const NvmlGpu& g : nvml.gpus()) {
    if (g.uuid != device.id || !g.processes_known) continue;
    for (const NvmlProcess& p : g.processes)
      if (p.used_known &&
          std::find(ledger_pids.begin(), ledger_pids.end(), static_cast<int>(p.pid)) == ledger_pids.end())
        outside += p.used;
  }
  return outside;
}

}  // namespace tk::runtime
