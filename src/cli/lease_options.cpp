#include "cli/lease_options.h"

#include <algorithm>
#include <cstdio>
#include <ctime>

#include "runtime/device_memory.h"
#include "runtime/lease.h"
#include "trainkit/nn/model.h"
#include "trainkit/runtime/memory.h"

namespace tk::cli {

using config::format_bytes;

void add_lease_options(CLI::App* command, LeaseOptions& o) {
  command->add_flag("--no-wait", o.no_wait,
                    "When the machine's lease ledger cannot give the memory now, fail at once naming who holds it "
                    "(default: wait in the queue)");
  command->add_option("--wait-timeout", o.wait_timeout,
                      "Seconds to wait in the lease queue before giving up (default: as long as it takes)");
}

void apply_lease_options(const LeaseOptions& o) {
  if (o.no_wait && o.wait_timeout >= 0) throw InvalidArgument("--no-wait and --wait-timeout exclude each other");
  if (o.wait_timeout < 0 && o.wait_timeout != -1)
    throw InvalidArgument("--wait-timeout must be a number of seconds >= 0, got " + std::to_string(o.wait_timeout));
  runtime::WaitPolicy p = runtime::lease_wait_policy();
  if (o.no_wait) p.wait = false;
  if (o.wait_timeout >= 0) p.timeout_s = o.wait_timeout;
  runtime::set_lease_wait_policy(p);
}

Device auto_device(bool compute_only) {
  runtime::Ledger* ledger = runtime::process_ledger();
  Device best = Device::cpu();
  uint64_t most = 0;
  for (const DeviceInfo& d : config::list_devices()) {
    if (d.device.kind == DeviceKind::cpu && d.device.index != 0) continue;  // logical cpus share one memory
    if (compute_only) {
      try {
        require_compute_device(d.device);
      } catch (const Error&) {
        continue;
      }
    }
    const runtime::LeaseDevice ld = runtime::lease_device(d);
    const uint64_t free = ledger ? ledger->usage(ld).available() : d.total;
    if (free > most) best = d.device, most = free;
  }
  return best;
}

namespace {
std::string clock_time(int64_t unix_time) {
  const std::time_t t = static_cast<std::time_t>(unix_time);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%H:%M:%S", &tm);
  return buf;
}
}  // namespace

void print_ledger() {
  runtime::Ledger* ledger = runtime::process_ledger();
  if (!ledger) {
    std::printf("lease ledger: none (%s)\n", runtime::Ledger::enabled() ? "no usable folder" : "TK_LEASE=off");
    return;
  }
  std::vector<runtime::LeaseDevice> known;
  for (const DeviceInfo& d : config::list_devices())
    if (d.device.kind != DeviceKind::cpu || d.device.index == 0) known.push_back(runtime::lease_device(d));
  std::printf("lease ledger: %s\n", ledger->dir().c_str());
  for (const runtime::DeviceUsage& u : ledger->snapshot(known)) {
    std::printf("%s: %s leased by %zu %s, %s free of %s", u.name.c_str(), format_bytes(u.leased).c_str(),
                u.holders.size(), u.holders.size() == 1 ? "job" : "jobs", format_bytes(u.available()).c_str(),
                format_bytes(u.capacity).c_str());
    if (u.outside) std::printf(" (%s held outside trainkit)", format_bytes(u.outside).c_str());
    std::printf(", %zu waiting\n", u.waiters.size());
    if (u.holders.empty() && u.waiters.empty()) continue;
    std::printf("  %-8s %8s  %-10s %12s  %-8s  %s\n", "STATE", "PID", "USER", "MEMORY", "SINCE", "COMMAND");
    for (const runtime::LeaseRecord& r : u.holders)
      std::printf("  %-8s %8d  %-10s %12s  %-8s  %s\n", "holds", r.pid, r.user.c_str(), format_bytes(r.bytes).c_str(),
                  clock_time(r.since).c_str(), r.command.c_str());
    int place = 0;
    for (const runtime::LeaseRecord& r : u.waiters)
      std::printf("  %-8s %8d  %-10s %12s  %-8s  %s\n", ("wait #" + std::to_string(++place)).c_str(), r.pid,
                  r.user.c_str(), format_bytes(r.bytes).c_str(), clock_time(r.since).c_str(), r.command.c_str());
  }
  std::fflush(stdout);
}

}  // namespace tk::cli
