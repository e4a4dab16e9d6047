// A lease lives exactly as long as the job (docs/sharing.md, `trainkit run`): the child inherits the lease's locked
// descriptor, so a `trainkit run` killed with kill -9 leaves the lease held by its still-running child, and a waiter
// starts only once the child is gone. Real processes throughout: `trainkit run`, /bin/sh jobs, the lease holder.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "lease/process.h"
#include "runtime/lease.h"

namespace fs = std::filesystem;
using tk::testing::Child;
using tk::testing::spawn;

namespace {

struct Ledger {
  fs::path dir;
  explicit Ledger(const std::string& name, const std::string& capacity) {
    dir = fs::temp_directory_path() / ("tk_lease_jobs_" + std::to_string(::getpid()) + "_" + name);
    fs::remove_all(dir);
    fs::create_directories(dir / "ledger");
    fs::create_directories(dir / "running");
    std::ofstream(dir / "ledger" / "capacity") << "cpu " << capacity << "\n";
  }
  ~Ledger() { fs::remove_all(dir); }
  std::string ledger() const { return (dir / "ledger").string(); }
  std::string path(const std::string& name) const { return (dir / name).string(); }
  tk::runtime::DeviceUsage usage() const {
    tk::runtime::Ledger l(ledger());
    return l.usage({"cpu", "cpu", 0});
  }
};

bool alive(pid_t pid) { return ::kill(pid, 0) == 0; }

// Polls `done` every 10 ms for at most `seconds`.
template <class F>
bool eventually(double seconds, F done) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

// kill -9 of `trainkit run` while its child holds the lease: the lease stays until the child ends, and a waiter for
// the same memory starts only then.
TEST(LeaseJobs, AKilledTrainkitRunLeavesTheLeaseWithItsChildUntilTheChildEnds) {
  Ledger l("orphan", "100MiB");
  const std::string pidfile = l.path("child.pid"), stop = l.path("stop");
  // The child: says its pid, then runs until the test creates `stop`.
  Child run = spawn(
      {TK_CLI_PATH, "run", "--memory-limit", "80MiB", "--", "/bin/sh", "-c",
       "echo $$ > " + pidfile + "; while [ ! -e " + stop + " ] && [ -d " + l.ledger() + " ]; do sleep 0.02; done"},
      l.path("run.out"), l.path("run.err"), {"TK_LEASE_DIR=" + l.ledger()});
  ASSERT_TRUE(eventually(30, [&] { return !read(pidfile).empty() && read(pidfile).back() == '\n'; }))
      << run.stderr_text();
  const pid_t child = std::stoi(read(pidfile));
  ASSERT_EQ(l.usage().leased, 80ull << 20);
  run.kill9();
  ASSERT_TRUE(run.finished);
  ASSERT_TRUE(alive(child)) << "the job ended with its parent";
  // The lease is still held (by the child's inherited descriptor), so a waiter for 60 MiB queues behind it.
  EXPECT_EQ(l.usage().leased, 80ull << 20) << "the lease went with the killed parent while its child runs";
  Child waiter =
      spawn({TK_LEASE_HOLDER_PATH, l.ledger(), std::to_string(1ull << 40), std::to_string(60ull << 20), "0", "60"},
            l.path("waiter.out"), l.path("waiter.err"));
  ASSERT_TRUE(eventually(30, [&] { return l.usage().waiters.size() == 1; })) << waiter.stderr_text();
  // The waiter looks every 20 ms; 50 looks later it must still be waiting, as the child still runs.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_FALSE(waiter.wait_for(0)) << "the waiter started while the killed parent's child still ran: "
                                   << waiter.stdout_text();
  EXPECT_TRUE(alive(child));
  std::ofstream(stop).put('\n');
  ASSERT_TRUE(waiter.wait_for(30)) << "the waiter did not start once the child ended";
  EXPECT_TRUE(waiter.exited_with(0)) << waiter.stderr_text();
  EXPECT_EQ(l.usage().leased, 0u);
}

// A process the job leaves running keeps the lease after `trainkit run` ends normally: its memory stays accounted.
TEST(LeaseJobs, AProcessTheJobLeftRunningKeepsTheLeaseUntilItExits) {
  Ledger l("left", "100MiB");
  const std::string pidfile = l.path("bg.pid"), stop = l.path("stop");
  Child run = spawn({TK_CLI_PATH, "run", "--memory-limit", "80MiB", "--", "/bin/sh", "-c",
                     "(while [ ! -e " + stop + " ] && [ -d " + l.ledger() +
                         " ]; do sleep 0.02; done) >/dev/null 2>&1 & echo $! > " + pidfile},
                    l.path("run.out"), l.path("run.err"), {"TK_LEASE_DIR=" + l.ledger()});
  ASSERT_TRUE(run.wait_for(30));
  EXPECT_TRUE(run.exited_with(0)) << run.stderr_text();
  const pid_t background = std::stoi(read(pidfile));
  ASSERT_TRUE(alive(background));
  EXPECT_EQ(l.usage().leased, 80ull << 20) << "the lease ended while a process of the job still runs";
  std::ofstream(stop).put('\n');
  EXPECT_TRUE(eventually(30, [&] { return l.usage().leased == 0; })) << "the lease outlived the job's last process";
}

// The race of issue 35: 20 `trainkit run` jobs on a ledger that holds 3, one runner killed with kill -9 while its
// job runs. Each job counts the jobs running when it starts (its own file among the others' in running/), and the
// test polls the same folder: never more than 3 at once, and every job that was not killed finishes.
// TK_LEASE_RACE_ROUNDS repeats it (the 20 rounds: TK_LEASE_RACE_ROUNDS=20).
TEST(LeaseJobs, TwentyRacingRunsWithOneKilledNeverExceedTheCapacity) {
  const char* rounds_env = std::getenv("TK_LEASE_RACE_ROUNDS");
  const int rounds = rounds_env ? std::atoi(rounds_env) : 1;
  std::mt19937 gen(std::random_device{}());
  for (int round = 0; round < rounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    Ledger l("race" + std::to_string(round), "300MiB");
    const std::string running = l.path("running"), counts = l.path("counts");
    std::vector<Child> runs;
    for (int i = 0; i < 20; ++i) {
      const std::string me = running + "/" + std::to_string(i);
      const std::string job = "touch " + me + "; ls " + running + " | wc -l >> " + counts + "; sleep 1.2; rm " + me;
      runs.push_back(spawn({TK_CLI_PATH, "run", "--memory-limit", "100MiB", "--", "/bin/sh", "-c", job},
                           l.path("out" + std::to_string(i)), l.path("err" + std::to_string(i)),
                           {"TK_LEASE_DIR=" + l.ledger()}));
    }
    const int victim = static_cast<int>(gen() % 20);
    bool killed = false;
    size_t max_seen = 0;
    // (1.2 s per job, so that jobs overlap even when a loaded machine starts the runners slowly; 120 s for 20 jobs
    // three at a time on such a machine.)
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    auto all_done = [&] {
      for (int i = 0; i < 20; ++i)
        if (!runs[i].wait_for(0)) return false;
      return fs::is_empty(running);  // the killed runner's job ends on its own
    };
    while (!all_done() && std::chrono::steady_clock::now() < end) {
      const size_t now = static_cast<size_t>(std::distance(fs::directory_iterator(running), fs::directory_iterator{}));
      max_seen = std::max(max_seen, now);
      if (!killed && fs::exists(running + "/" + std::to_string(victim))) {
        ::kill(runs[victim].pid, SIGKILL);  // while its job runs
        killed = true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    ASSERT_TRUE(killed);
    ASSERT_TRUE(all_done()) << "not every job finished within 120 s";
    std::istringstream seen(read(counts));
    int started = 0;
    for (size_t n = 0; seen >> n; ++started) max_seen = std::max(max_seen, n);
    EXPECT_EQ(started, 20) << "every job, the killed runner's included, started once";
    EXPECT_LE(max_seen, 3u) << "more jobs ran at once than the capacity holds";
    EXPECT_GE(max_seen, 2u) << "the jobs never ran side by side: the ledger admitted one at a time";
    for (int i = 0; i < 20; ++i) {
      if (i == victim) {
        EXPECT_TRUE(WIFSIGNALED(runs[i].status) && WTERMSIG(runs[i].status) == SIGKILL);
        continue;
      }
      EXPECT_TRUE(runs[i].exited_with(0)) << "job " << i << ": " << runs[i].stderr_text();
    }
    EXPECT_EQ(l.usage().leased, 0u);
  }
}
