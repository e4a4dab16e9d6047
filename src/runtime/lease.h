// The machine's lease ledger: before a process takes a device budget it takes a lease (device, bytes, pid, user,
// command, start time) in a folder every trainkit process on the machine shares, so two jobs never promise each
// other the same memory. docs/sharing.md explains the design (flock'ed files) and its guarantees.
//
//   tk::runtime::Ledger ledger(tk::runtime::Ledger::default_dir());
//   tk::runtime::LeaseDevice cpu{"cpu", "cpu", physical_memory};
//   tk::runtime::Lease lease = ledger.acquire(cpu, 2ull << 30, {.wait = true, .timeout_s = 60});
//   ...                                   // the lease is held while `lease` lives, or until the process dies
//   ledger.grow(lease, 3ull << 30);       // never waits; false (with the holders named) when it does not fit
//
// Files in the folder: `ledger.lock` (flock'ed around every read-modify-write), `lease-<pid>-<n>` (a holder)
// and `wait-<pid>-<n>` (a waiter in the FIFO queue), each flock'ed by its process for as long as it lives: the
// kernel releases that lock when the process dies (kill -9 included), which is how a dead job's lease is told
// apart from a live one. `capacity` (optional, written by the machine's admin) caps what may be leased per device.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tk::runtime {

// A physical device as the ledger names it. `id` is stable across processes: "cpu", or the GPU's UUID (a
// process's cuda:0 depends on its CUDA_VISIBLE_DEVICES; the UUID does not).
struct LeaseDevice {
  std::string id;    // "cpu", "GPU-5a1c..."
  std::string name;  // as this process calls it: "cpu", "cuda:0"
  uint64_t total = 0;
};

struct LeaseRecord {
  bool waiting = false;  // a waiter in the queue (its `bytes` is what it needs), else a holder
  std::string device, name;
  uint64_t bytes = 0;
  uint64_t total = 0;   // the device's memory as this process saw it (the capacity when no `capacity` file says)
  uint64_t ticket = 0;  // queue order (waiters); a holder keeps the ticket it waited with
  int pid = 0;
  unsigned uid = 0;
  std::string user;
  int64_t since = 0;  // unix time the lease (or the wait) began
  std::string command;
  std::string file;              // path in the ledger folder
  std::string describe() const;  // "pid 123 (alice, `trainkit fit ...`) 1.50 GiB"
};

struct DeviceUsage {
  std::string device, name;
  uint64_t capacity = 0;  // what the ledger may hand out: the device's memory, or the `capacity` file's value
  uint64_t outside = 0;   // memory held by processes outside the ledger (NVML), which cannot be leased
  uint64_t leased = 0;    // sum of the live holders' bytes
  std::vector<LeaseRecord> holders, waiters;  // waiters in queue order
  uint64_t available() const;                 // capacity - outside - leased (0 when negative)
};

struct WaitPolicy {
  bool wait = true;        // false: refuse at once when the lease does not fit (--no-wait)
  double timeout_s = -1;   // < 0: wait as long as it takes
  double poll_s = 0.1;     // how often a waiter looks again (a dead holder is noticed this fast)
  double progress_s = 10;  // how often the "waiting for ..." line is repeated
  std::function<void(const std::string&)> progress;  // default: the line on stderr
};

// Bytes of a device held by processes the ledger does not know: NVML's per-process memory for a GPU, less that of
// the processes `in_ledger` accepts; 0 for the cpu. Tests inject their own. `in_ledger(pid)` is true for a holder or
// waiter of the device's ledger, and for a process that holds a holder's lease file open — the job `trainkit run`
// started, which inherited the locked descriptor (its memory is the lease's, not "outside" as well).
using InLedger = std::function<bool(int pid)>;
using OutsideUsage = std::function<uint64_t(const LeaseDevice& device, const InLedger& in_ledger)>;
uint64_t nvml_outside_usage(const LeaseDevice& device, const InLedger& in_ledger);
// True when process `pid` has one of `files` open (compared by device and inode, so any spelling of the path
// matches); false when it has not, or its descriptors cannot be read (another user's process: counted as outside,
// the safe side).
bool process_has_open(int pid, const std::vector<std::string>& files);

class Ledger;

// A held lease; released (its file removed) when destroyed. Move-only.
class Lease {
 public:
  Lease() = default;
  Lease(Lease&& other) noexcept;
  Lease& operator=(Lease&& other) noexcept;
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  ~Lease();
  bool held() const { return fd_ >= 0 || inherited_; }
  uint64_t bytes() const { return record_.bytes; }
  const LeaseRecord& record() const { return record_; }
  const std::string& file() const { return record_.file; }
  // The open, flock'ed lease file (-1 when not held here). A child that inherits it holds the lease with this
  // process: the kernel keeps the lock until the last process with the descriptor exits (`trainkit run`).
  int descriptor() const { return fd_; }
  // Closes this process's descriptor; the file is removed unless a process that inherited the descriptor still
  // holds the lock (a program the job left running): then the lease ends when that process does.
  void release();

 private:
  friend class Ledger;
  int fd_ = -1;             // the open, flock'ed lease file
  bool inherited_ = false;  // held by the parent `trainkit run` (TK_LEASE_INHERITED), not by this process
  std::string dir_;
  LeaseRecord record_;
};

class Ledger {
 public:
  // TK_LEASE_DIR when set (created if missing); else the first usable of /run/trainkit and /dev/shm/trainkit
  // (system-wide, created sticky and world-writable), then $XDG_RUNTIME_DIR/trainkit and ~/.cache/trainkit/leases
  // (this user's only). "" when none is usable and TK_LEASE_DIR is unset; IoError when TK_LEASE_DIR is unusable.
  static std::string default_dir();
  // False when TK_LEASE=off (or 0/false/no): no process of this user takes leases.
  static bool enabled();

  explicit Ledger(std::string dir, OutsideUsage outside = nvml_outside_usage);
  const std::string& dir() const { return dir_; }

  // Takes `bytes` of `device`. When it does not fit (or earlier waiters for the device are queued): waits in FIFO
  // order per `policy`, or throws OutOfMemoryError naming the holders (pid, user, command, bytes).
  Lease acquire(const LeaseDevice& device, uint64_t bytes, const WaitPolicy& policy);
  // Raises a held lease to `bytes` when that fits now and no one is queued for the device; never waits (a process
  // that waits while holding memory could wait for another that waits for it). False with the reason in `why`.
  bool grow(Lease& lease, uint64_t bytes, std::string* why = nullptr);

  // The live holders and waiters of every device named in the ledger (dead ones are reclaimed on the way), plus
  // `known` devices even when nobody holds them. Throws FormatError / IoError for a corrupt or unreadable ledger.
  std::vector<DeviceUsage> snapshot(const std::vector<LeaseDevice>& known = {});
  DeviceUsage usage(const LeaseDevice& device);

 private:
  struct Locked;
  DeviceUsage usage_locked(const LeaseDevice& device, const std::vector<LeaseRecord>& live) const;
  uint64_t capacity_of(const LeaseDevice& device) const;
  void check_invariant(const LeaseDevice& device) const;
  std::string refusal(const LeaseDevice& device, uint64_t bytes, const DeviceUsage& u) const;

  std::string dir_;
  OutsideUsage outside_;
};

// The process's wait policy for the leases DeviceMemory takes (set by `--no-wait` / `--wait-timeout`; TK_LEASE_WAIT
// = "no" or a number of seconds in the environment).
void set_lease_wait_policy(const WaitPolicy& policy);
WaitPolicy lease_wait_policy();

// This process's command line, one line, at most 200 characters ("trainkit fit --memory-limit 120MiB").
std::string process_command_line();

}  // namespace tk::runtime
