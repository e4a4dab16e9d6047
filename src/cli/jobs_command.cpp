// `trainkit jobs`: who holds and who waits for each device's memory in the machine's lease ledger.
#include "cli/commands.h"
#include "cli/lease_options.h"

namespace tk::cli {

void add_jobs_command(CLI::App& app) {
  app.add_subcommand("jobs",
                     "Show the machine's lease ledger: the jobs holding each device's memory and those waiting "
                     "(TK_LEASE_DIR, see docs/sharing.md)");
}

int run_jobs() {
  print_ledger();
  return 0;
}

}  // namespace tk::cli
