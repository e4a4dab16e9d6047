// Three `trainkit fit` processes on a device whose ledger capacity fits two (tests/lease/process.h spawns them):
// two run, the third queues and starts when a holder is killed (kill -9) or finishes; --no-wait is refused naming
// the holders; `trainkit jobs` shows holders and waiters.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "lease/process.h"
#include "runtime/lease.h"

namespace fs = std::filesystem;
using tk::testing::Child;
using tk::testing::spawn;

namespace {

struct Folder {
  fs::path dir = fs::temp_directory_path() / ("tk_cli_lease_" + std::to_string(::getpid()));
  Folder() {
    fs::remove_all(dir);
    fs::create_directories(dir / "ledger");
    std::ofstream(dir / "ledger" / "capacity") << "cpu 80MiB\n";  // two fits of 32 MiB, not three
    write_idx("train-images", {256, 28, 28}), write_idx("train-labels", {256});
    write_idx("test-images", {64, 28, 28}), write_idx("test-labels", {64});
  }
  ~Folder() { fs::remove_all(dir); }
  void write_idx(const std::string& name, const std::vector<uint32_t>& dims) {
    std::vector<uint8_t> b{0, 0, 0x08, static_cast<uint8_t>(dims.size())};
    size_t n = 1;
    for (uint32_t d : dims) {
      n *= d;
      for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(d >> s));
    }
    std::mt19937 gen(1);
    for (size_t i = 0; i < n; ++i) b.push_back(static_cast<uint8_t>(dims.size() == 1 ? gen() % 10 : gen() % 256));
    std::ofstream(dir / name, std::ios::binary)
        .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  }
};

struct Fits {
  Folder f;
  std::vector<Child> children;
  ~Fits() {
    for (Child& c : children) c.kill9();
  }
  std::string ledger() const { return (f.dir / "ledger").string(); }
  // A fit of `epochs` epochs under a 32 MiB budget; returns its index in children.
  size_t fit(int epochs, const std::string& extra = "") {
    std::vector<std::string> argv{TK_CLI_PATH,
                                  "fit",
                                  "--model",
                                  "dense:16:relu,dense:10",
                                  "-e",
                                  std::to_string(epochs),
                                  "-v",
                                  "0",
                                  "--no-summary",
                                  "--memory-limit",
                                  "32MiB",
                                  "--train-images",
                                  (f.dir / "train-images").string(),
                                  "--train-labels",
                                  (f.dir / "train-labels").string(),
                                  "--test-images",
                                  (f.dir / "test-images").string(),
                                  "--test-labels",
                                  (f.dir / "test-labels").string()};
    if (!extra.empty()) argv.push_back(extra);
    const std::string n = std::to_string(children.size());
    children.push_back(
        spawn(argv, (f.dir / ("out" + n)).string(), (f.dir / ("err" + n)).string(), {"TK_LEASE_DIR=" + ledger()}));
    return children.size() - 1;
  }
  // Waits (at most 30 s) until the ledger shows these holder and waiter pids.
  bool wait_for(const std::vector<int>& holders, const std::vector<int>& waiters) {
    tk::runtime::Ledger l(ledger());
    const tk::runtime::LeaseDevice cpu{"cpu", "cpu", 0};
    for (int i = 0; i < 1500; ++i) {
      const tk::runtime::DeviceUsage u = l.usage(cpu);
      std::vector<int> h, w;
      for (const auto& r : u.holders) h.push_back(r.pid);
      for (const auto& r : u.waiters) w.push_back(r.pid);
      std::sort(h.begin(), h.end());
      std::vector<int> want = holders;
      std::sort(want.begin(), want.end());
      if (h == want && w == waiters) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  int pid(size_t i) const { return children[i].pid; }
};

}  // namespace

TEST(CliLease, ThreeFitsOnABudgetForTwoQueueRefuseAndReclaim) {
  Fits fits;
  const size_t a = fits.fit(1000000), b = fits.fit(1000000);  // run until killed
  ASSERT_TRUE(fits.wait_for({fits.pid(a), fits.pid(b)}, {})) << fits.children[a].stderr_text();
  const size_t c = fits.fit(2);  // queues behind them
  ASSERT_TRUE(fits.wait_for({fits.pid(a), fits.pid(b)}, {fits.pid(c)})) << fits.children[c].stderr_text();

  // --no-wait: refused at once, exit 1, naming both holders with their memory.
  const size_t d = fits.fit(1, "--no-wait");
  ASSERT_TRUE(fits.children[d].wait_for(60));
  EXPECT_TRUE(fits.children[d].exited_with(1));
  const std::string refused = fits.children[d].stderr_text();
  EXPECT_NE(refused.find("trainkit: error: "), std::string::npos) << refused;
  EXPECT_NE(refused.find("--no-wait"), std::string::npos) << refused;
  for (size_t holder : {a, b})
    EXPECT_NE(refused.find("pid " + std::to_string(fits.pid(holder)) + " ("), std::string::npos) << refused;
  EXPECT_NE(refused.find("32.00 MiB"), std::string::npos) << refused;

  // `trainkit jobs` lists the two holders and the waiter.
  Child jobs = spawn({TK_CLI_PATH, "jobs"}, (fits.f.dir / "jobs.out").string(), (fits.f.dir / "jobs.err").string(),
                     {"TK_LEASE_DIR=" + fits.ledger()});
  ASSERT_TRUE(jobs.wait_for(60));
  const std::string listing = jobs.stdout_text();
  EXPECT_NE(listing.find("64.00 MiB leased by 2 jobs"), std::string::npos) << listing;
  EXPECT_NE(listing.find("1 waiting"), std::string::npos) << listing;
  EXPECT_NE(listing.find("wait #1"), std::string::npos) << listing;
  EXPECT_NE(listing.find(std::to_string(fits.pid(c))), std::string::npos) << listing;

  // kill -9 of a holder frees its lease: the waiter starts (within 30 s) and finishes.
  fits.children[b].kill9();
  ASSERT_TRUE(fits.wait_for({fits.pid(a), fits.pid(c)}, {})) << "the waiter did not start after the kill -9";
  // A fourth queues behind a and c, and starts when c finishes normally.
  const size_t e = fits.fit(1);
  ASSERT_TRUE(fits.children[c].wait_for(120));
  EXPECT_TRUE(fits.children[c].exited_with(0)) << fits.children[c].stderr_text();
  EXPECT_NE(fits.children[c].stderr_text().find("trainkit: waiting for cpu: 64.00 MiB held by 2 jobs, need 32.00 MiB"),
            std::string::npos)
      << fits.children[c].stderr_text();
  ASSERT_TRUE(fits.children[e].wait_for(120));
  EXPECT_TRUE(fits.children[e].exited_with(0)) << fits.children[e].stderr_text();
  EXPECT_NE(fits.children[e].stderr_text().find("trainkit: waiting for cpu"), std::string::npos)
      << fits.children[e].stderr_text();
  EXPECT_NE(fits.children[e].stdout_text().find("test_accuracy"), std::string::npos);
}
