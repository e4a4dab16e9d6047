// The lease ledger (src/runtime/lease.h) with real processes: FIFO queueing, refusal naming the holders, reclaim of
// a kill -9'ed holder, 50 racing processes that never overcommit, outside (NVML) usage, corrupt ledgers.
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "lease/process.h"
#include "runtime/lease.h"
#include "runtime/lease_record.h"
#include "trainkit/core/error.h"

namespace fs = std::filesystem;
using namespace tk::runtime;
using tk::testing::Child;
using tk::testing::spawn;

namespace {

std::string fresh_dir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("tk_lease_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

const LeaseDevice kCpu{"cpu", "cpu", 1000};

WaitPolicy quiet(bool wait = true, double timeout = -1) {
  WaitPolicy p;
  p.wait = wait;
  p.timeout_s = timeout;
  p.poll_s = 0.02;
  p.progress = [](const std::string&) {};
  return p;
}

Child holder(const std::string& dir, uint64_t bytes, long hold_ms, const std::string& mode, const std::string& tag) {
  return spawn({TK_LEASE_HOLDER_PATH, dir, "1000", std::to_string(bytes), std::to_string(hold_ms), mode},
               dir + "/../" + fs::path(dir).filename().string() + "_" + tag + ".out",
               dir + "/../" + fs::path(dir).filename().string() + "_" + tag + ".err");
}

// Waits until the ledger shows `holders` holders and `waiters` waiters of the cpu (at most 30 s).
bool wait_for_state(Ledger& ledger, size_t holders, size_t waiters) {
  for (int i = 0; i < 1500; ++i) {
    const DeviceUsage u = ledger.usage(kCpu);
    if (u.holders.size() == holders && u.waiters.size() == waiters) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

}  // namespace

TEST(LeaseRecord, RoundTripsAndNamesTheByteOfACorruption) {
  LeaseRecord r;
  r.device = "GPU-5a1c";
  r.name = "cuda:0";
  r.bytes = 123456789;
  r.total = 1u << 30;
  r.ticket = 77;
  r.pid = 4242;
  r.uid = 1000;
  r.user = "alice";
  r.since = 1700000000;
  r.command = "trainkit fit --memory-limit 120MiB";
  const std::string text = format_lease_record(r);
  const LeaseRecord back = parse_lease_record(text, "f");
  EXPECT_EQ(back.device, r.device);
  EXPECT_EQ(back.bytes, r.bytes);
  EXPECT_EQ(back.pid, r.pid);
  EXPECT_EQ(back.user, r.user);
  EXPECT_EQ(back.command, r.command);
  EXPECT_EQ(back.ticket, r.ticket);

  std::string bad = text;
  bad.replace(bad.find("bytes 123456789"), 15, "bytes 12x456789");
  try {
    parse_lease_record(bad, "/ledger/lease-1-0");
    FAIL() << "a corrupt record was accepted";
  } catch (const tk::FormatError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("/ledger/lease-1-0: byte " + std::to_string(text.find("bytes "))), std::string::npos) << m;
    EXPECT_NE(m.find("'bytes'"), std::string::npos) << m;
  }
  EXPECT_THROW(parse_lease_record("", "f"), tk::FormatError);
  EXPECT_THROW(parse_lease_record(text.substr(0, text.size() - 1), "f"), tk::FormatError);    // cut short
  EXPECT_THROW(parse_lease_record(text.substr(0, text.find("pid ")), "f"), tk::FormatError);  // fields missing
}

TEST(LeaseLedger, PlacesRefusesNamingHoldersAndQueuesInOrder) {
  const std::string dir = fresh_dir("fifo");
  Ledger ledger(dir);
  Lease a = ledger.acquire(kCpu, 600, quiet());
  EXPECT_EQ(ledger.usage(kCpu).leased, 600u);
  try {
    ledger.acquire(kCpu, 500, quiet(false));
    FAIL() << "an overcommitting lease was given";
  } catch (const tk::OutOfMemoryError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("pid " + std::to_string(::getpid())), std::string::npos) << m;
    EXPECT_NE(m.find("600 B"), std::string::npos) << m;
    EXPECT_NE(m.find("`" + process_command_line() + "`"), std::string::npos) << m;  // the holder's command
    EXPECT_NE(m.find("need 500 B"), std::string::npos) << m;
  }
  EXPECT_THROW(ledger.acquire(kCpu, 1001, quiet()), tk::OutOfMemoryError);  // can never fit: refused at once
  // Two waiters in order: 800 then 300. When a goes, 800 is placed first although 300 would have fit earlier. The
  // 300 cannot join the 800 (1100 > 1000), so it is placed only after t1 has counted and let go: the order below is
  // the ledger's, not a race between the two threads' first steps after placement.
  std::atomic<int> order{0};
  int first_order = 0, second_order = 0;
  std::thread t1([&] {
    Lease l = ledger.acquire(kCpu, 800, quiet());
    first_order = ++order;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  });
  ASSERT_TRUE(wait_for_state(ledger, 1, 1));
  std::thread t2([&] {
    Lease l = ledger.acquire(kCpu, 300, quiet());
    second_order = ++order;
  });
  ASSERT_TRUE(wait_for_state(ledger, 1, 2));
  const DeviceUsage queued = ledger.usage(kCpu);
  EXPECT_EQ(queued.waiters[0].bytes, 800u);  // FIFO: the 300 waits behind the 800 though it would fit now
  EXPECT_EQ(queued.waiters[1].bytes, 300u);
  a.release();
  t1.join();
  t2.join();
  EXPECT_EQ(first_order, 1);
  EXPECT_EQ(second_order, 2);
  EXPECT_EQ(ledger.usage(kCpu).leased, 0u);
  // A timeout gives up and leaves the queue.
  Lease big = ledger.acquire(kCpu, 900, quiet());
  EXPECT_THROW(ledger.acquire(kCpu, 200, quiet(true, 0.1)), tk::OutOfMemoryError);
  EXPECT_TRUE(ledger.usage(kCpu).waiters.empty());
}

TEST(LeaseLedger, AFullLedgerRefusesOneByteMore) {
  const std::string dir = fresh_dir("full");
  Ledger ledger(dir);
  Lease a = ledger.acquire(kCpu, 600, quiet());
  Lease b = ledger.acquire(kCpu, 400, quiet(false));  // exactly the capacity: fits
  EXPECT_EQ(ledger.usage(kCpu).available(), 0u);
  EXPECT_THROW(ledger.acquire(kCpu, 1, quiet(false)), tk::OutOfMemoryError);
  EXPECT_FALSE(ledger.grow(b, 401));
  b.release();
  EXPECT_TRUE(ledger.grow(a, 1000));
  EXPECT_THROW(ledger.acquire(kCpu, 1, quiet(false)), tk::OutOfMemoryError);
  EXPECT_EQ(ledger.usage(kCpu).leased, 1000u);
}

TEST(LeaseLedger, GrowsOnlyIntoFreeRoomWithNobodyQueued) {
  const std::string dir = fresh_dir("grow");
  Ledger ledger(dir);
  Lease a = ledger.acquire(kCpu, 100, quiet());
  Lease b = ledger.acquire(kCpu, 500, quiet());
  EXPECT_TRUE(ledger.grow(a, 400));
  EXPECT_EQ(ledger.usage(kCpu).leased, 900u);
  std::string why;
  EXPECT_FALSE(ledger.grow(a, 600, &why));
  EXPECT_NE(why.find("pid "), std::string::npos) << why;
  EXPECT_EQ(a.bytes(), 400u);
}

TEST(LeaseLedger, OutsideUsageReducesWhatCanBeLeased) {
  const std::string dir = fresh_dir("outside");
  bool self_inside = false, parent_inside = true;
  // 700 bytes of the device held by processes the ledger does not know (as NVML reports for a GPU).
  Ledger ledger(dir, [&](const LeaseDevice&, const InLedger& in_ledger) {
    self_inside = in_ledger(::getpid());
    parent_inside = in_ledger(::getppid());
    return uint64_t{700};
  });
  const LeaseDevice gpu{"GPU-test", "cuda:0", 1000};
  Lease a = ledger.acquire(gpu, 200, quiet());
  EXPECT_TRUE(self_inside);     // the ledger's own holders are excluded from "outside"
  EXPECT_FALSE(parent_inside);  // ctest holds no lease
  try {
    ledger.acquire(gpu, 200, quiet(false));
    FAIL() << "leased memory that processes outside the ledger hold";
  } catch (const tk::OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("outside trainkit"), std::string::npos) << e.what();
  }
  EXPECT_EQ(ledger.usage(gpu).available(), 100u);
}

// The job `trainkit run` starts inherits the lease's locked descriptor; NVML lists the job's pid, not the runner's,
// so a GPU job's memory would be subtracted twice (leased by the runner, "outside" as the child's) unless a process
// holding a holder's lease file counts as inside the ledger. A process without it stays outside.
TEST(LeaseLedger, AProcessHoldingAnInheritedLeaseIsInsideTheLedger) {
  const std::string dir = fresh_dir("inherited");
  std::vector<int> probe;  // pids to ask about, and what the ledger answered
  std::vector<bool> inside;
  Ledger ledger(dir, [&](const LeaseDevice&, const InLedger& in_ledger) {
    inside.clear();
    for (int pid : probe) inside.push_back(in_ledger(pid));
    return uint64_t{0};
  });
  const LeaseDevice gpu{"GPU-test", "cuda:0", 1000};
  auto sleeper = [] {
    const pid_t pid = ::fork();
    if (pid == 0) {
      for (;;) ::pause();  // holds whatever descriptors it inherited until killed
    }
    return pid;
  };
  const pid_t stranger = sleeper();  // forked before the lease exists: holds no lease file
  Lease lease = ledger.acquire(gpu, 300, quiet());
  const pid_t job = sleeper();  // inherits the lease's descriptor, as trainkit run's child does
  ASSERT_GT(stranger, 0);
  ASSERT_GT(job, 0);
  EXPECT_TRUE(process_has_open(job, {lease.file()}));
  EXPECT_FALSE(process_has_open(stranger, {lease.file()}));
  EXPECT_FALSE(process_has_open(job, {dir + "/no-such-file"}));
  probe = {job, stranger, ::getpid()};
  (void)ledger.usage(gpu);
  EXPECT_EQ(inside, (std::vector<bool>{true, false, true}));
  for (pid_t pid : {job, stranger}) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
}

TEST(LeaseLedger, CapacityFileCapsTheDeviceAndRejectsBadLines) {
  const std::string dir = fresh_dir("capacity");
  std::ofstream(dir + "/capacity") << "# admin's caps\ncpu 300\ncuda:1 2GiB\n";
  Ledger ledger(dir);
  EXPECT_EQ(ledger.usage(kCpu).capacity, 300u);
  EXPECT_THROW(ledger.acquire(kCpu, 400, quiet()), tk::OutOfMemoryError);
  std::ofstream(dir + "/capacity") << "cpu 300\ncpu lots\n";
  try {
    ledger.usage(kCpu);
    FAIL();
  } catch (const tk::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("line 2 (byte 8)"), std::string::npos) << e.what();
  }
}

TEST(LeaseLedger, AKilledHolderIsReclaimedAndTheWaiterStarts) {
  const std::string dir = fresh_dir("reclaim");
  Ledger ledger(dir);
  Child h = holder(dir, 800, -1, "30", "holder");
  ASSERT_TRUE(wait_for_state(ledger, 1, 0)) << h.stderr_text();
  Child w = holder(dir, 500, 0, "30", "waiter");
  ASSERT_TRUE(wait_for_state(ledger, 1, 1)) << w.stderr_text();
  EXPECT_EQ(ledger.usage(kCpu).holders[0].pid, h.pid);
  ::kill(h.pid, SIGKILL);
  ASSERT_TRUE(h.wait_for(30));
  ASSERT_TRUE(w.wait_for(30)) << "the waiter did not start within 30 s of the holder's kill -9";
  EXPECT_TRUE(w.exited_with(0)) << w.stderr_text();
  const DeviceUsage after = ledger.usage(kCpu);
  EXPECT_EQ(after.leased, 0u);
  EXPECT_FALSE(fs::exists(dir + "/lease-" + std::to_string(h.pid) + "-0"));  // the dead file was removed
}

TEST(LeaseLedger, FiftyRacingProcessesNeverOvercommit) {
  const std::string dir = fresh_dir("race");
  Ledger ledger(dir);
  std::mt19937 gen(7);
  std::vector<Child> children;
  // 100 to 399 bytes of 1000 each, held 50 to 99 ms: 2 to 9 fit at once.
  for (int i = 0; i < 50; ++i)
    children.push_back(holder(dir, 100 + gen() % 300, 50 + static_cast<long>(gen() % 50), "120", std::to_string(i)));
  // The parent checks the invariant too, as often as it can, while they race.
  size_t max_seen = 0, done = 0;
  while (done < children.size()) {
    const DeviceUsage u = ledger.usage(kCpu);
    ASSERT_LE(u.leased, u.capacity);
    max_seen = std::max(max_seen, u.holders.size());
    done = 0;
    for (Child& c : children) done += c.wait_for(0) ? 1 : 0;
  }
  // Each holder also says how many holders the ledger showed right after it was placed ("held FILE with N holders").
  for (Child& c : children) {
    EXPECT_TRUE(c.exited_with(0)) << c.exit_code() << ": " << c.stderr_text();
    const std::string out = c.stdout_text();
    const size_t with = out.find(" with ");
    if (with != std::string::npos) max_seen = std::max(max_seen, std::stoul(out.substr(with + 6)));
  }
  // Real concurrency: a ledger that admitted one holder at a time would never show two.
  EXPECT_GE(max_seen, 2u);
  EXPECT_EQ(ledger.usage(kCpu).leased, 0u);
  EXPECT_TRUE(ledger.usage(kCpu).waiters.empty());
}

TEST(LeaseLedger, ACorruptOrUnreadableLedgerIsAClearError) {
  const std::string dir = fresh_dir("corrupt");
  Ledger ledger(dir);
  // A garbage record that a live process holds: an error naming the file, never a lease silently ignored.
  const std::string garbage = dir + "/lease-999999-0";
  std::ofstream(garbage) << "trainkit-lease 1\ndevice cpu\nbytes lots\n";
  const int fd = ::open(garbage.c_str(), O_RDONLY);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);
  try {
    ledger.acquire(kCpu, 10, quiet());
    FAIL() << "a corrupt ledger was accepted";
  } catch (const tk::FormatError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(garbage + ": byte "), std::string::npos) << m;
    EXPECT_NE(m.find("corrupt"), std::string::npos) << m;
  }
  EXPECT_THROW(ledger.usage(kCpu), tk::FormatError);
  ::close(fd);  // nobody holds it now: a dead file, reclaimed
  EXPECT_EQ(ledger.usage(kCpu).leased, 0u);
  EXPECT_FALSE(fs::exists(garbage));
  // Something unreadable where a record should be.
  fs::create_directory(dir + "/lease-1-1");
  EXPECT_THROW(ledger.usage(kCpu), tk::IoError);
  fs::remove(dir + "/lease-1-1");
  // A ledger lock that is not a file.
  fs::create_directory(dir + "/ledger.lock.d");
  fs::rename(dir + "/ledger.lock", dir + "/ledger.lock.old");
  fs::rename(dir + "/ledger.lock.d", dir + "/ledger.lock");
  EXPECT_THROW(ledger.usage(kCpu), tk::IoError);
}

// Two user ids share the sticky, world-writable folder: each sees the other's lease (needs root, to start the
// second process as `nobody` with setpriv; skipped otherwise).
TEST(LeaseLedger, TwoUsersSeeEachOther) {
  if (::geteuid() != 0 || !fs::exists("/usr/bin/setpriv")) GTEST_SKIP() << "needs root and setpriv";
  const std::string dir = fresh_dir("users");
  fs::permissions(dir, fs::perms::all | fs::perms::sticky_bit);
  Ledger ledger(dir);
  Lease mine = ledger.acquire(kCpu, 600, quiet());
  auto as_nobody = [&](const std::string& bytes, const std::string& hold, const std::string& tag) {
    return spawn({"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", TK_LEASE_HOLDER_PATH, dir,
                  "1000", bytes, hold, "no-wait"},
                 dir + "/" + tag + ".out", dir + "/" + tag + ".err");
  };
  // nobody is refused, told that root holds 600 B.
  Child refused = as_nobody("600", "0", "refused");
  ASSERT_TRUE(refused.wait_for(30));
  EXPECT_EQ(refused.exit_code(), 3) << refused.stderr_text();
  EXPECT_NE(refused.stderr_text().find("pid " + std::to_string(::getpid()) + " (root, "), std::string::npos)
      << refused.stderr_text();
  // nobody's lease is seen by root, with its user.
  Child held = as_nobody("300", "-1", "held");
  ASSERT_TRUE(wait_for_state(ledger, 2, 0)) << held.stderr_text();
  const DeviceUsage u = ledger.usage(kCpu);
  EXPECT_TRUE(std::any_of(u.holders.begin(), u.holders.end(),
                          [&](const LeaseRecord& r) { return r.pid == held.pid && r.user == "nobody"; }));
  held.kill9();
  EXPECT_TRUE(wait_for_state(ledger, 1, 0));  // root reclaims nobody's dead lease (it may: root)
}
