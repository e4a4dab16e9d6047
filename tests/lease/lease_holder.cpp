// A trivial lease holder for the ledger tests (tests/test_lease.cpp): takes a lease, checks the ledger's invariant
// from outside, says how many holders it saw ("held FILE with N holders"), holds it, releases it.
//
//   trainkit_lease_holder DIR CAPACITY BYTES HOLD_MS [no-wait|TIMEOUT_S]
//   (HOLD_MS < 0: hold until killed). Exit 0 done, 3 refused or timed out, 4 invariant broken, 5 other error.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "runtime/lease.h"
#include "trainkit/core/error.h"

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s DIR CAPACITY BYTES HOLD_MS [no-wait|TIMEOUT_S]\n", argv[0]);
    return 5;
  }
  using namespace tk::runtime;
  const LeaseDevice cpu{"cpu", "cpu", std::strtoull(argv[2], nullptr, 10)};
  const uint64_t bytes = std::strtoull(argv[3], nullptr, 10);
  const long hold_ms = std::strtol(argv[4], nullptr, 10);
  WaitPolicy policy;
  policy.poll_s = 0.02;
  policy.progress = [](const std::string&) {};
  if (argc > 5) {
    if (std::string(argv[5]) == "no-wait")
      policy.wait = false;
    else
      policy.timeout_s = std::strtod(argv[5], nullptr);
  }
  try {
    Ledger ledger(argv[1]);
    Lease lease = ledger.acquire(cpu, bytes, policy);
    const DeviceUsage u = ledger.usage(cpu);
    std::printf("held %s with %zu holders\n", lease.file().c_str(), u.holders.size());
    std::fflush(stdout);
    if (u.leased > u.capacity || u.leased < bytes) {
      std::fprintf(stderr, "invariant broken: %llu leased of %llu (this lease %llu)\n",
                   static_cast<unsigned long long>(u.leased), static_cast<unsigned long long>(u.capacity),
                   static_cast<unsigned long long>(bytes));
      return 4;
    }
    if (hold_ms < 0)
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms));
    lease.release();
    const DeviceUsage after = ledger.usage(cpu);
    if (after.leased > after.capacity) return 4;
    return 0;
  } catch (const tk::OutOfMemoryError& e) {
    std::fprintf(stderr, "refused: %s\n", e.what());
    return 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 5;
  }
}
