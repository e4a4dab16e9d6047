// The lease options every command that takes device memory shares (runtime/lease.h, docs/sharing.md):
//
//   trainkit fit --memory-limit 4GiB --no-wait          # refuse at once, naming the holders, when it does not fit
//   trainkit fit --memory-limit 4GiB --wait-timeout 600 # wait in the queue at most 10 minutes
//   trainkit fit --device auto                           # the device with the most unleased memory
#pragma once
#include <CLI/CLI.hpp>
#include <string>

#include "trainkit/core/device.h"

namespace tk::cli {

struct LeaseOptions {
  bool no_wait = false;
  double wait_timeout = -1;  // seconds; < 0: as long as it takes
};

void add_lease_options(CLI::App* command, LeaseOptions& options);
// Sets the process's wait policy (before the first allocation takes the lease).
void apply_lease_options(const LeaseOptions& options);
// `--device auto`: the device with the most memory the ledger can still lease (the cpu when there is no ledger
// or no other device). compute_only: only devices trainkit's kernels run on (fit, plan), else any (run).
Device auto_device(bool compute_only);
// `trainkit jobs` and the ledger section of `trainkit smi`: holders and waiters per device.
void print_ledger();

}  // namespace tk::cli
