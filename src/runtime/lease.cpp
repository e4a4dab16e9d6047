// The lease ledger: flock'ed files in one folder (see lease.h and docs/sharing.md).
#include "runtime/lease.h"

#include <dirent.h>
#include <fcntl.h>
#include <pwd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <mutex>
#include <thread>
#include <utility>

#include "runtime/lease_record.h"
#include "runtime/settings.h"
#include "trainkit/core/error.h"
#include "trainkit/runtime/memory.h"

namespace tk::runtime {
namespace {

using config::format_bytes;

std::string errno_text() { return std::strerror(errno); }

// A usable folder: exists (or was created), is a directory, and we may create files in it.
bool usable_dir(const std::string& dir, bool shared, std::string* why) {
  auto fail = [why](const std::string& reason) {
    if (why) *why = reason;
    return false;
  };
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    if (::mkdir(dir.c_str(), shared ? 01777 : 0700) != 0 && errno != EEXIST)
      return fail("cannot create " + dir + ": " + errno_text());
    if (shared) ::chmod(dir.c_str(), 01777);  // mkdir's mode is cut by the umask
    if (::stat(dir.c_str(), &st) != 0) return fail(dir + ": " + errno_text());
  }
  if (!S_ISDIR(st.st_mode)) return fail(dir + " is not a folder");
  if (::access(dir.c_str(), W_OK | X_OK | R_OK) != 0) return fail(dir + ": " + errno_text());
  return true;
}

// The folder-wide lock around every read-modify-write of the ledger.
class FolderLock {
 public:
  explicit FolderLock(const std::string& dir) {
    const std::string path = dir + "/ledger.lock";
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd_ < 0)
      throw IoError("lease ledger: cannot open " + path + ": " + errno_text() +
                    " (every user's trainkit needs read and write access to the ledger folder: set TK_LEASE_DIR "
                    "to a folder you may write, or ask the admin to make it sticky and world-writable, mode 1777)");
    struct stat st {};
    if (::fstat(fd_, &st) == 0 && !S_ISREG(st.st_mode)) {
      ::close(fd_);
      throw IoError("lease ledger: " + path + " is not a regular file (remove it; trainkit recreates it)");
    }
    if (st.st_uid == ::geteuid()) ::fchmod(fd_, 0666);  // the umask cut the mode: other users must open it too
    while (::flock(fd_, LOCK_EX) != 0)
      if (errno != EINTR) {
        const std::string e = errno_text();
        ::close(fd_);
        throw IoError("lease ledger: cannot lock " + path + ": " + e +
                      " (the ledger must be on a local filesystem: set TK_LEASE_DIR)");
      }
  }
  ~FolderLock() { ::close(fd_); }  // closing the only descriptor releases the flock
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;

 private:
  int fd_ = -1;
};

std::atomic<int> g_serial{0};

int64_t now_unix() { return static_cast<int64_t>(std::time(nullptr)); }

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
}

std::string user_name(unsigned uid) {
  struct passwd pw {};
  struct passwd* found = nullptr;
  char buf[1024];
  if (::getpwuid_r(uid, &pw, buf, sizeof buf, &found) == 0 && found) return found->pw_name;
  return "uid " + std::to_string(uid);
}

// Writes `text` into a fresh file `tmp`, flock's it, renames it to `final`: readers (who hold the folder lock, as
// the writer does) never see a half-written record, and the lock is taken before the name appears.
int create_locked(const std::string& tmp, const std::string& final, const std::string& text) {
  const int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw IoError("lease ledger: cannot create " + tmp + ": " + errno_text());
  ::fchmod(fd, 0644);
  const bool ok = ::flock(fd, LOCK_EX | LOCK_NB) == 0 &&
                  ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                  ::rename(tmp.c_str(), final.c_str()) == 0;
  if (!ok) {
    const std::string e = errno_text();
    ::unlink(tmp.c_str());
    ::close(fd);
    throw IoError("lease ledger: cannot write " + final + ": " + e);
  }
  return fd;
}

void rewrite(int fd, const std::string& file, const std::string& text) {
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()))
    throw IoError("lease ledger: cannot update " + file + ": " + errno_text());
}

// This process's lease files, removed at exit: a process that ends without releasing (exit() with the device
// memories alive, as the process-wide ones are) leaves no file behind. A killed process still leaves one; it is
// dead (unlocked) and the next process that looks removes it — except in a sticky folder, where only its owner
// (or root) may: other users then skip it on every look, which costs an open() each.
struct OwnFiles {
  std::mutex mu;
  std::vector<std::string> paths;
};
OwnFiles& own_files() {
  static auto* files = [] {
    auto* f = new OwnFiles;  // never destroyed, so the atexit handler can still use it
    std::atexit([] {
      OwnFiles& o = own_files();
      std::lock_guard lock(o.mu);
      for (const std::string& p : o.paths) ::unlink(p.c_str());
    });
    return f;
  }();
  return *files;
}
void track(const std::string& path) {
  OwnFiles& o = own_files();
  std::lock_guard lock(o.mu);
  o.paths.push_back(path);
}
void untrack(const std::string& path) {
  OwnFiles& o = own_files();
  std::lock_guard lock(o.mu);
  o.paths.erase(std::remove(o.paths.begin(), o.paths.end(), path), o.paths.end());
}

std::mutex& policy_mutex() {
  static std::mutex mu;
  return mu;
}
WaitPolicy& process_policy() {
  static WaitPolicy p = [] {
    WaitPolicy w;
    if (const std::optional<std::string> v = setting_text(Setting::lease_wait)) {
      const std::string& s = *v;
      if (s == "no" || s == "0" || s == "false") {
        w.wait = false;
      } else if (s != "forever") {
        char* end = nullptr;
        w.timeout_s = std::strtod(s.c_str(), &end);
        if (*end != '\0' || !(w.timeout_s >= 0)) throw_bad_setting(Setting::lease_wait, s);
      }
    }
    return w;
  }();
  return p;
}

}  // namespace

std::string process_command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()), out;
  for (char c : all) out += (c == '\0' || c == '\n' || c == '\r') ? ' ' : c;
  while (!out.empty() && out.back() == ' ') out.pop_back();
  if (const size_t slash = out.substr(0, out.find(' ')).rfind('/'); slash != std::string::npos)
    out = out.substr(slash + 1);  // "trainkit fit ...", not the build folder's path
  if (out.size() > 200) out = out.substr(0, 197) + "...";
  return out.empty() ? "?" : out;
}

std::string LeaseRecord::describe() const {
  return "pid " + std::to_string(pid) + " (" + user + ", `" + command + "`) " + format_bytes(bytes);
}

uint64_t DeviceUsage::available() const {
  const uint64_t taken = outside + leased;
  return taken >= capacity ? 0 : capacity - taken;
}

void set_lease_wait_policy(const WaitPolicy& policy) {
  std::lock_guard lock(policy_mutex());
  process_policy() = policy;
}
WaitPolicy lease_wait_policy() {
  std::lock_guard lock(policy_mutex());
  return process_policy();
}

// ---------------------------------------------------------------- Lease

Lease::Lease(Lease&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)),
      inherited_(std::exchange(o.inherited_, false)),
      dir_(std::move(o.dir_)),
      record_(std::move(o.record_)) {}
Lease& Lease::operator=(Lease&& o) noexcept {
  if (this != &o) {
    release();
    fd_ = std::exchange(o.fd_, -1), inherited_ = std::exchange(o.inherited_, false);
    dir_ = std::move(o.dir_), record_ = std::move(o.record_);
  }
  return *this;
}
Lease::~Lease() { release(); }

void Lease::release() {
  inherited_ = false;
  if (fd_ < 0) return;
  try {
    FolderLock lock(dir_);
    ::close(fd_);
    fd_ = -1;
    // Still locked through a descriptor a child inherited (`trainkit run`'s job left a process running)? Then the
    // lease is that process's until it exits; the next look after that reclaims the file. Every look holds the
    // folder lock, as we do, so nothing else can hold this probe's lock.
    const int probe = ::open(record_.file.c_str(), O_RDONLY | O_CLOEXEC);
    const bool unheld = probe >= 0 && ::flock(probe, LOCK_EX | LOCK_NB) == 0;
    if (unheld) ::unlink(record_.file.c_str());
    if (probe >= 0) ::close(probe);
    untrack(record_.file);
  } catch (const Error&) {
    // The folder went away or became unusable: closing the descriptor still releases the lease (a file left
    // behind is dead, and the next process to look reclaims it).
  }
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

// ---------------------------------------------------------------- Ledger

bool Ledger::enabled() { return setting_bool_or_default(Setting::lease); }

std::string Ledger::default_dir() {
  std::string why;
  if (const std::optional<std::string> d = setting_text(Setting::lease_dir)) {
    if (!usable_dir(*d, true, &why))
      throw IoError("TK_LEASE_DIR=" + *d + " is not a usable lease ledger folder: " + why +
                    " (point it at a folder every trainkit user may write, or unset it)");
    return *d;
  }
  for (const char* d : {"/run/trainkit", "/dev/shm/trainkit"})
    if (usable_dir(d, true, nullptr)) return d;
  if (const char* x = std::getenv("XDG_RUNTIME_DIR"); x && *x)
    if (usable_dir(std::string(x) + "/trainkit", false, nullptr)) return std::string(x) + "/trainkit";
  if (const char* h = std::getenv("HOME"); h && *h) {
    const std::string cache = std::string(h) + "/.cache";
    ::mkdir(cache.c_str(), 0700);
    ::mkdir((cache + "/trainkit").c_str(), 0700);
    if (usable_dir(cache + "/trainkit/leases", false, nullptr)) return cache + "/trainkit/leases";
  }
  return "";
}

Ledger::Ledger(std::string dir, OutsideUsage outside) : dir_(std::move(dir)), outside_(std::move(outside)) {
  if (!outside_) outside_ = [](const LeaseDevice&, const InLedger&) { return uint64_t{0}; };
}

// Reads every record of the folder (holders and waiters, live ones only; dead ones are removed when we may).
// Called with the folder lock held.
static std::vector<LeaseRecord> read_live(const std::string& dir) {
  std::vector<LeaseRecord> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) throw IoError("lease ledger: cannot list " + dir + ": " + errno_text() + " (check TK_LEASE_DIR)");
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n.rfind("lease-", 0) == 0 || n.rfind("wait-", 0) == 0) names.push_back(n);
  }
  ::closedir(d);
  for (const std::string& n : names) {
    const std::string path = dir + "/" + n;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) continue;  // released between readdir and open
      throw IoError("lease ledger: cannot read " + path + ": " + errno_text() +
                    " (every trainkit user must be able to read the ledger: make the file readable, mode 0644, or "
                    "remove it if no trainkit job is running)");
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      throw IoError("lease ledger: " + path +
                    " is not a lease file (not a regular file): remove it; only trainkit writes in the ledger folder");
    }
    // Held by a live process? Our probe's lock conflicts with the holder's even when the holder is this process
    // (flock locks belong to open file descriptions, not processes).
    const bool dead = ::flock(fd, LOCK_SH | LOCK_NB) == 0;
    std::string text, error;
    char buf[4096];
    ssize_t got = 0;
    bool read_failed = false;
    while ((got = ::read(fd, buf, sizeof buf)) != 0) {
      if (got < 0) {
        if (errno == EINTR) continue;
        error = errno_text();
        read_failed = true;
        break;
      }
      text.append(buf, static_cast<size_t>(got));
      if (text.size() > 65536) break;
    }
    ::close(fd);
    if (dead) {
      ::unlink(path.c_str());  // a dead process's lease: reclaimed (fails harmlessly for another user's file)
      continue;
    }
    if (read_failed)
      throw IoError("lease ledger: cannot read " + path + ": " + error +
                    " (the ledger folder holds something that is not a lease file: remove it)");
    LeaseRecord r = parse_lease_record(text, path);  // FormatError naming the file and byte offset
    r.file = path;
    r.waiting = n.rfind("wait-", 0) == 0;
    out.push_back(std::move(r));
  }
  std::sort(out.begin(), out.end(), [](const LeaseRecord& a, const LeaseRecord& b) { return a.ticket < b.ticket; });
  return out;
}

uint64_t Ledger::capacity_of(const LeaseDevice& device) const {
  const uint64_t cap = read_capacity_file(dir_ + "/capacity", device);
  return cap ? std::min(cap, device.total ? device.total : cap) : device.total;
}

DeviceUsage Ledger::usage_locked(const LeaseDevice& device, const std::vector<LeaseRecord>& live) const {
  DeviceUsage u;
  u.device = device.id;
  u.name = device.name;
  u.capacity = capacity_of(device);
  std::vector<int> pids;
  std::vector<std::string> held;  // the holders' lease files: a job that inherited one is inside the ledger too
  for (const LeaseRecord& r : live) {
    if (r.device != device.id) continue;
    pids.push_back(r.pid);
    if (r.waiting) {
      u.waiters.push_back(r);
    } else {
      u.holders.push_back(r);
      u.leased += r.bytes;
      held.push_back(r.file);
    }
  }
  u.outside = outside_(device, [&](int pid) {
    return std::find(pids.begin(), pids.end(), pid) != pids.end() || process_has_open(pid, held);
  });
  return u;
}

void Ledger::check_invariant(const LeaseDevice& device) const {
  const DeviceUsage u = usage_locked(device, read_live(dir_));
  if (u.leased > u.capacity)
    throw Error("lease ledger " + dir_ + ": invariant violated on " + device.name + ": " + format_bytes(u.leased) +
                " leased of a capacity of " + format_bytes(u.capacity) + " (please report it)");
}

std::string Ledger::refusal(const LeaseDevice& device, uint64_t bytes, const DeviceUsage& u) const {
  std::string s = device.name + ": " + format_bytes(u.leased) + " of " + format_bytes(u.capacity) + " held by " +
                  std::to_string(u.holders.size()) + (u.holders.size() == 1 ? " job" : " jobs");
  if (u.outside) s += " and " + format_bytes(u.outside) + " by processes outside trainkit";
  s += ", need " + format_bytes(bytes);
  for (const LeaseRecord& h : u.holders) s += "; " + h.describe();
  if (!u.waiters.empty()) s += "; " + std::to_string(u.waiters.size()) + " queued before it";
  return s;
}

namespace {
LeaseRecord new_record(const LeaseDevice& device, uint64_t bytes, bool waiting, uint64_t ticket, std::string file) {
  const unsigned uid = ::geteuid();
  return {.waiting = waiting,
          .device = device.id,
          .name = device.name,
          .bytes = bytes,
          .total = device.total,
          .ticket = ticket,
          .pid = static_cast<int>(::getpid()),
          .uid = uid,
          .user = user_name(uid),
          .since = now_unix(),
          .command = process_command_line(),
          .file = std::move(file)};
}

// A lease `trainkit run` took for this process (TK_LEASE_INHERITED names its file): alive and for this device.
bool inherited_lease(const std::string& dir, const LeaseDevice& device, LeaseRecord* out) {
  const std::optional<std::string> file = setting_text(Setting::lease_inherited);
  if (!file) return false;
  for (const LeaseRecord& r : read_live(dir))
    if (r.file == *file && !r.waiting && r.device == device.id) {
      *out = r;
      return true;
    }
  return false;
}
}  // namespace

Lease Ledger::acquire(const LeaseDevice& device, uint64_t bytes, const WaitPolicy& policy) {
  Lease lease;
  lease.dir_ = dir_;
  const std::string pid = std::to_string(::getpid());
  const auto start = std::chrono::steady_clock::now();
  auto waited = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  {
    FolderLock lock(dir_);
    if (inherited_lease(dir_, device, &lease.record_)) {
      lease.inherited_ = true;
      return lease;
    }
    const std::vector<LeaseRecord> live = read_live(dir_);
    const DeviceUsage u = usage_locked(device, live);
    if (bytes > u.capacity)
      throw OutOfMemoryError("cannot lease " + format_bytes(bytes) + " of " + device.name +
                             ": the ledger's capacity is " + format_bytes(u.capacity) + " (" + dir_ +
                             "/capacity or the device's memory); lower the memory limit");
    uint64_t ticket = now_ns();
    for (const LeaseRecord& r : live) ticket = std::max(ticket, r.ticket + 1);
    const std::string n = pid + "-" + std::to_string(g_serial++);
    const bool queued = !u.waiters.empty() || bytes > u.available();
    if (queued && !policy.wait)
      throw OutOfMemoryError("cannot lease " + format_bytes(bytes) + " now (--no-wait): " + refusal(device, bytes, u) +
                             " (wait for them: drop --no-wait; or lower the memory limit)");
    lease.record_ = new_record(device, bytes, queued, ticket, dir_ + (queued ? "/wait-" : "/lease-") + n);
    lease.fd_ = create_locked(dir_ + "/.tmp-" + n, lease.record_.file, format_lease_record(lease.record_));
    track(lease.record_.file);
    if (!queued) {
      check_invariant(device);
      return lease;
    }
  }
  // Queued: look again every poll_s, until first in line for the device and the bytes are free.
  double next_progress = 0;
  for (;;) {
    std::string line, gave_up;
    {
      FolderLock lock(dir_);
      const std::vector<LeaseRecord> live = read_live(dir_);
      const DeviceUsage u = usage_locked(device, live);
      const bool first = !u.waiters.empty() && u.waiters.front().file == lease.record_.file;
      if (first && bytes <= u.available()) {
        const std::string n = pid + "-" + std::to_string(g_serial++);
        const std::string holder = dir_ + "/lease-" + n;
        LeaseRecord r = lease.record_;
        r.waiting = false;
        r.since = now_unix();
        rewrite(lease.fd_, lease.record_.file, format_lease_record(r));
        if (::rename(lease.record_.file.c_str(), holder.c_str()) != 0)
          throw IoError("lease ledger: cannot rename " + lease.record_.file + ": " + errno_text());
        untrack(r.file);
        track(holder);
        r.file = holder;
        lease.record_ = r;
        check_invariant(device);
        return lease;
      }
      DeviceUsage shown = u;
      shown.waiters.clear();
      for (const LeaseRecord& w : u.waiters)
        if (w.ticket < lease.record_.ticket) shown.waiters.push_back(w);
      if (policy.timeout_s >= 0 && waited() >= policy.timeout_s)
        gave_up = "gave up waiting " + std::to_string(static_cast<int>(waited())) + " s (--wait-timeout) for " +
                  format_bytes(bytes) + " of " + refusal(device, bytes, shown) +
                  " (wait longer, or lower the memory limit)";
      if (waited() >= next_progress) {
        line = "waiting for " + device.name + ": " + format_bytes(u.leased) + " held by " +
               std::to_string(u.holders.size()) + (u.holders.size() == 1 ? " job" : " jobs") +
               (u.outside ? " (+" + format_bytes(u.outside) + " outside trainkit)" : "") + ", need " +
               format_bytes(bytes) +
               (shown.waiters.empty() ? "" : ", " + std::to_string(shown.waiters.size()) + " queued before");
        next_progress = waited() + policy.progress_s;
      }
    }
    if (!gave_up.empty()) {
      lease.release();  // outside the folder lock, which release() takes
      throw OutOfMemoryError(gave_up);
    }
    if (!line.empty()) {
      if (policy.progress)
        policy.progress(line);
      else
        std::fprintf(stderr, "trainkit: %s\n", line.c_str());
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(policy.poll_s));
  }
}

bool Ledger::grow(Lease& lease, uint64_t bytes, std::string* why) {
  if (!lease.held()) throw InvalidArgument("Ledger::grow: the lease is not held");
  if (bytes <= lease.bytes()) return true;
  const LeaseDevice device{lease.record_.device, lease.record_.name, lease.record_.total};
  if (lease.inherited_) {
    if (why)
      *why = "the lease `trainkit run` took for this job is " + format_bytes(lease.bytes()) +
             " (give `trainkit run` a larger --memory-limit)";
    return false;
  }
  FolderLock lock(dir_);
  const std::vector<LeaseRecord> live = read_live(dir_);
  DeviceUsage u = usage_locked(device, live);
  const uint64_t extra = bytes - lease.bytes();
  if (!u.waiters.empty() || extra > u.available()) {
    if (why) *why = "the lease ledger has no room to grow: " + refusal(device, extra, u);
    return false;
  }
  LeaseRecord r = lease.record_;
  r.bytes = bytes;
  rewrite(lease.fd_, r.file, format_lease_record(r));
  lease.record_ = r;
  check_invariant(device);
  return true;
}

std::vector<DeviceUsage> Ledger::snapshot(const std::vector<LeaseDevice>& known) {
  FolderLock lock(dir_);
  const std::vector<LeaseRecord> live = read_live(dir_);
  std::vector<LeaseDevice> devices = known;
  for (const LeaseRecord& r : live)
    if (std::none_of(devices.begin(), devices.end(), [&](const LeaseDevice& d) { return d.id == r.device; }))
      devices.push_back({r.device, r.name, r.total});
  std::vector<DeviceUsage> out;
  for (const LeaseDevice& d : devices) out.push_back(usage_locked(d, live));
  return out;
}

DeviceUsage Ledger::usage(const LeaseDevice& device) {
  FolderLock lock(dir_);
  return usage_locked(device, read_live(dir_));
}

}  // namespace tk::runtime
