// The process's lease ledger and how a device is named in it (runtime/device_memory.h).
#include <cstdio>
#include <memory>
#include <mutex>

#include "runtime/device_memory.h"
#include "runtime/log.h"
#include "trainkit/core/error.h"

namespace tk::runtime {

Ledger* process_ledger() {
  // Created once and never destroyed: the devices that use it live until the process exits. A bad TK_LEASE_DIR
  // throws (every time it is asked for): a ledger the user named is never silently skipped.
  static std::mutex mu;
  static Ledger* ledger = nullptr;
  static bool decided = false;
  std::lock_guard lock(mu);
  if (decided) return ledger;
  if (!Ledger::enabled()) {
    decided = true;
    return nullptr;
  }
  const std::string dir = Ledger::default_dir();
  decided = true;
  if (dir.empty()) {
    if (runtime::log_enabled(runtime::LogSeverity::warning))
      std::fprintf(stderr,
                   "trainkit: warning: no lease ledger folder is usable (/run/trainkit, /dev/shm/trainkit, "
                   "$XDG_RUNTIME_DIR/trainkit, ~/.cache/trainkit/leases): this job's memory is not coordinated with "
                   "other jobs (set TK_LEASE_DIR to a writable folder)\n");
    return nullptr;
  }
  ledger = new Ledger(dir);
  return ledger;
}

LeaseDevice lease_device(const DeviceInfo& info) {
  if (info.device.kind == DeviceKind::cpu) return {"cpu", "cpu", info.total};
  return {info.uuid.empty() ? info.device.to_string() : info.uuid, info.device.to_string(), info.total};
}

}  // namespace tk::runtime
