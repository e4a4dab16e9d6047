// Memory the lease ledger cannot hand out because processes outside it hold it: NVML's per-process GPU memory.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "runtime/lease.h"
#include "runtime/nvml.h"

namespace tk::runtime {

// The GPU's compute processes that are not in the ledger, summed. NVML reports host pids: a job in another pid
// namespace (a container) that holds a lease is counted as outside too, which errs on the safe side. When NVML is
// absent, or cannot list processes, nothing is subtracted (the ledger then only knows what trainkit jobs declare).
uint64_t nvml_outside_usage(const LeaseDevice& device, const InLedger& in_ledger) {
  if (device.id == "cpu") return 0;
  const Nvml& nvml = Nvml::instance();
  if (!nvml.available()) return 0;
  uint64_t outside = 0;
  for (const NvmlGpu& g : nvml.gpus()) {
    if (g.uuid != device.id || !g.processes_known) continue;
    for (const NvmlProcess& p : g.processes)
      if (p.used_known && !in_ledger(static_cast<int>(p.pid))) outside += p.used;
  }
  return outside;
}

bool process_has_open(int pid, const std::vector<std::string>& files) {
  std::vector<std::pair<dev_t, ino_t>> ids;
  for (const std::string& f : files)
    if (struct stat st{}; ::stat(f.c_str(), &st) == 0) ids.emplace_back(st.st_dev, st.st_ino);
  if (ids.empty()) return false;
  const std::string fd_dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR* d = ::opendir(fd_dir.c_str());
  if (!d) return false;  // gone, or another user's: not known to hold one
  bool found = false;
  while (const dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    struct stat st {};  // stat() follows the descriptor's link to the open file itself
    if (::stat((fd_dir + "/" + e->d_name).c_str(), &st) != 0) continue;
    if (std::find(ids.begin(), ids.end(), std::pair<dev_t, ino_t>{st.st_dev, st.st_ino}) != ids.end()) {
      found = true;
      break;
    }
  }
  ::closedir(d);
  return found;
}

}  // namespace tk::runtime
