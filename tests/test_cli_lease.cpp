// Three `trainkit fit` processes on a device whose ledger capacity fits two (tests/lease/process.h spawns them):
// two run, the third queues and starts when a holder is killed (kill -9) or finishes; --no-wait is refused naming
// the holders; `trainkit jobs` shows holders and waiters.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "lease/process.h"
#include "runtime/isolate.h"
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
  std::vector<std::string> fit_argv(int epochs) const {
    return {TK_CLI_PATH,
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
  }
  size_t fit(int epochs, const std::string& extra = "") {
    std::vector<std::string> argv = fit_argv(epochs);
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

  // `trainkit smi` ends with the same ledger section.
  Child smi = spawn({TK_CLI_PATH, "smi"}, (fits.f.dir / "smi.out").string(), (fits.f.dir / "smi.err").string(),
                    {"TK_LEASE_DIR=" + fits.ledger()});
  ASSERT_TRUE(smi.wait_for(60));
  EXPECT_NE(smi.stdout_text().find("lease ledger: " + fits.ledger()), std::string::npos) << smi.stdout_text();
  EXPECT_NE(smi.stdout_text().find(std::to_string(fits.pid(a))), std::string::npos) << smi.stdout_text();

  // A fourth queues behind c (FIFO). It is queued before anything frees memory, so the order below does not depend
  // on how fast the processes start.
  const size_t e = fits.fit(1, "--device=auto");  // the cpu: the only device here
  ASSERT_TRUE(fits.wait_for({fits.pid(a), fits.pid(b)}, {fits.pid(c), fits.pid(e)})) << fits.children[e].stderr_text();
  // kill -9 of a holder frees its lease: the first waiter (c) starts and finishes; e still waits (a + c hold 64 of
  // 80 MiB), and starts when c finishes normally.
  fits.children[b].kill9();
  ASSERT_TRUE(fits.children[c].wait_for(120)) << "the waiter did not start after the kill -9";
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

// batch_size=auto without a limit plans for what the ledger can still grant, not for the whole device: a colleague
// holding 48 of the ledger's 80 MiB leaves about 32 MiB (less 5%) to plan for.
TEST(CliLease, AutoBatchWithoutALimitPlansForWhatTheLedgerCanGrant) {
  Fits fits;
  fits.children.push_back(
      spawn({TK_LEASE_HOLDER_PATH, fits.ledger(), std::to_string(80 << 20), std::to_string(48 << 20), "-1"},
            (fits.f.dir / "holder.out").string(), (fits.f.dir / "holder.err").string(), {}));
  ASSERT_TRUE(fits.wait_for({fits.pid(0)}, {})) << fits.children[0].stderr_text();
  std::vector<std::string> argv = fits.fit_argv(1);
  const auto limit = std::find(argv.begin(), argv.end(), "--memory-limit");
  argv.erase(limit, limit + 2);  // no limit: the budget is the device, the ledger grants less
  argv[std::find(argv.begin(), argv.end(), "-v") - argv.begin() + 1] = "2";
  argv.push_back("--batch-size");
  argv.push_back("auto");
  Child fit = spawn(argv, (fits.f.dir / "auto.out").string(), (fits.f.dir / "auto.err").string(),
                    {"TK_LEASE_DIR=" + fits.ledger()});
  ASSERT_TRUE(fit.wait_for(120));
  EXPECT_TRUE(fit.exited_with(0)) << fit.stderr_text();
  const std::string out = fit.stdout_text();
  const size_t line = out.find("batch_size auto: ");
  ASSERT_NE(line, std::string::npos) << out;
  const size_t at = out.find(" of ", line), end = out.find(" MiB available)", line);
  ASSERT_NE(end, std::string::npos) << out;
  const double available_mib = std::stod(out.substr(at + 4, end - at - 4));
  EXPECT_LE(available_mib, 32.0 * 0.95 + 0.01) << out;
  EXPECT_GT(available_mib, 20.0) << out;
}

// ---------------------------------------------------------------- trainkit run / fit --isolate

namespace {
tk::runtime::ChildResult run_cli(Fits& fits, std::vector<std::string> args, std::vector<std::string> env = {}) {
  args.insert(args.begin(), TK_CLI_PATH);
  env.push_back("TK_LEASE_DIR=" + fits.ledger());
  env.push_back("TK_LEASE_WAIT=no");  // a second lease of the same memory would be refused, not queued
  return tk::runtime::run_child(args, env, /*forward=*/false);
}
std::string lines(const tk::runtime::ChildResult& r) {
  std::string s;
  for (const std::string& l : r.last_lines) s += l + "\n";
  return s;
}
}  // namespace

TEST(CliRun, TheChildUsesTheLeaseOfTrainkitRun) {
  Fits fits;  // capacity 80 MiB: a second lease of 64 MiB would not fit
  std::vector<std::string> args{"run", "--memory-limit", "64MiB", "--"};
  for (const std::string& a : fits.fit_argv(1)) args.push_back(a);
  const tk::runtime::ChildResult r = run_cli(fits, args);
  EXPECT_TRUE(r.ok()) << lines(r);
  EXPECT_NE(lines(r).find("test_accuracy"), std::string::npos) << lines(r);
}

TEST(CliRun, ACrashOomOrSignalInTheChildIsAClearErrorInTheParent) {
  Fits fits;
  std::vector<std::string> fit{"fit", "--isolate"};
  for (size_t i = 2; i < fits.fit_argv(1).size(); ++i) fit.push_back(fits.fit_argv(1)[i]);
  // Segmentation fault (the test-only fault hook).
  tk::runtime::ChildResult r = run_cli(fits, fit, {"TK_TEST_FAULT=segfault"});
  EXPECT_EQ(r.exit_code, 128 + SIGSEGV);
  EXPECT_NE(lines(r).find("trainkit: error: `trainkit fit "), std::string::npos) << lines(r);
  EXPECT_NE(lines(r).find("crashed: SIGSEGV (segmentation fault); its last lines:"), std::string::npos) << lines(r);
  EXPECT_NE(lines(r).find("  | TK_TEST_FAULT: segfault now"), std::string::npos) << lines(r);
  // Out of memory: the child's budget is too small for its data.
  std::vector<std::string> oom = fit;
  oom[std::find(oom.begin(), oom.end(), "32MiB") - oom.begin()] = "64KiB";
  r = run_cli(fits, oom);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(lines(r).find("ran out of memory (exit status 1); its last lines:"), std::string::npos) << lines(r);
  EXPECT_NE(lines(r).find("  | trainkit: error: OOM when allocating"), std::string::npos) << lines(r);
  // Killed by a signal.
  r = run_cli(fits, {"run", "--memory-limit", "1MiB", "--", "/bin/sh", "-c", "echo last words; kill -TERM $$"});
  EXPECT_EQ(r.exit_code, 128 + SIGTERM);
  EXPECT_NE(lines(r).find("was killed by SIGTERM; its last lines:\n  | last words"), std::string::npos) << lines(r);
}

namespace {
// A process that runs (not a zombie): /proc/PID/stat's state.
bool running(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return false;
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z' && stat[paren + 2] != 'X';
}
}  // namespace

// fit --isolate: the child takes its own lease. A kill -9 of the parent leaves that lease accounted for as long as
// the child lives (it trains on, or dies with its parent's pipes): never a running child without its lease.
TEST(CliRun, AKilledIsolateParentNeverLeavesItsChildUnaccounted) {
  Fits fits;
  std::vector<std::string> argv = fits.fit_argv(1000000);
  argv.insert(argv.begin() + 2, "--isolate");
  fits.children.push_back(spawn(argv, (fits.f.dir / "iso.out").string(), (fits.f.dir / "iso.err").string(),
                                {"TK_LEASE_DIR=" + fits.ledger()}));
  const int parent = fits.pid(0);
  tk::runtime::Ledger ledger(fits.ledger());
  const tk::runtime::LeaseDevice cpu{"cpu", "cpu", 0};
  int child = 0;
  for (int i = 0; i < 1500 && child == 0; ++i) {
    for (const auto& r : ledger.usage(cpu).holders)
      if (r.pid != parent) child = r.pid;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_NE(child, 0) << "the isolated child took no lease: " << fits.children[0].stderr_text();
  fits.children[0].kill9();
  for (int i = 0; i < 50; ++i) {  // a second of looks: the lease is held exactly while the child runs
    const tk::runtime::DeviceUsage u = ledger.usage(cpu);
    const bool held = u.holders.size() == 1 && u.holders[0].pid == child && u.leased == (32u << 20);
    if (!held) ASSERT_FALSE(running(child)) << "the child runs without its lease (look " << i << ")";
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(child, SIGKILL);
  bool freed = false;
  for (int i = 0; i < 1500 && !freed; ++i) {
    freed = ledger.usage(cpu).leased == 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(freed) << "the killed child's lease was not reclaimed";
}

TEST(CliRun, SetsTheDeviceAndTheFrameworksMemoryCaps) {
  if (std::system("python3 -c pass >/dev/null 2>&1") != 0) GTEST_SKIP() << "no python3";
  Fits fits;
  // Stand-ins for torch and tensorflow that record what the import hook asks of them.
  const fs::path mods = fits.f.dir / "mods";
  fs::create_directories(mods / "torch");
  fs::create_directories(mods / "tensorflow");
  std::ofstream(mods / "torch" / "__init__.py") << "class cuda:\n"
                                                   "    is_available = staticmethod(lambda: True)\n"
                                                   "    device_count = staticmethod(lambda: 2)\n"
                                                   "    calls = []\n"
                                                   "    @staticmethod\n"
                                                   "    def set_per_process_memory_fraction(f, i):\n"
                                                   "        cuda.calls.append((round(f, 6), i))\n";
  std::ofstream(mods / "tensorflow" / "__init__.py")
      << "class config:\n"
         "    calls = []\n"
         "    LogicalDeviceConfiguration = staticmethod(lambda memory_limit: memory_limit)\n"
         "    list_physical_devices = staticmethod(lambda kind: ['GPU:0'])\n"
         "    @staticmethod\n"
         "    def set_logical_device_configuration(gpu, cfg):\n"
         "        config.calls.append((gpu, cfg))\n";
  const std::string script =
      "import os, torch, tensorflow\n"
      "print('CUDA_VISIBLE_DEVICES=' + os.environ['CUDA_VISIBLE_DEVICES'])\n"
      "print('TF_FORCE_GPU_ALLOW_GROWTH=' + os.environ['TF_FORCE_GPU_ALLOW_GROWTH'])\n"
      "print('torch', torch.cuda.calls, 'fraction', os.environ['TK_RUN_MEMORY_FRACTION'])\n"
      "print('tensorflow', tensorflow.config.calls)\n";
  const tk::runtime::ChildResult r =
      run_cli(fits, {"run", "--device", "cpu", "--memory-limit", "8MiB", "--", "python3", "-c", script},
              {"PYTHONPATH=" + mods.string()});
  ASSERT_TRUE(r.ok()) << lines(r);
  const std::string out = lines(r);
  EXPECT_NE(out.find("CUDA_VISIBLE_DEVICES=-1"), std::string::npos) << out;  // the cpu: no GPU for the job
  EXPECT_NE(out.find("TF_FORCE_GPU_ALLOW_GROWTH=true"), std::string::npos) << out;
  EXPECT_NE(out.find("tensorflow [('GPU:0', [8])]"), std::string::npos) << out;  // 8 MiB as TF's memory_limit
  // PyTorch: the lease as a fraction of the device, on every device it sees.
  const size_t t = out.find("torch [(");
  ASSERT_NE(t, std::string::npos) << out;
  EXPECT_NE(out.find(", 0), (", t), std::string::npos) << out;
  EXPECT_NE(out.find(", 1)]", t), std::string::npos) << out;
}

// The parent's memory is untouched by what its children do: its resident set grows by less than 1 MiB over 20
// isolated fits.
TEST(CliRun, TwentyIsolatedFitsLeaveTheParentsMemoryAlone) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer keeps freed memory resident (its quarantine): RSS says nothing here";
#endif
  Fits fits;
  std::vector<std::string> fit = fits.fit_argv(1);
  std::vector<std::string> env{"TK_LEASE_DIR=" + fits.ledger()};
  ASSERT_TRUE(tk::runtime::run_child(fit, env, false).ok());  // warm-up: the first call's one-time allocations
  const size_t before = tk::runtime::resident_bytes();
  for (int i = 0; i < 20; ++i) {
    const tk::runtime::ChildResult r = tk::runtime::run_child(fit, env, false);
    ASSERT_TRUE(r.ok()) << lines(r);
  }
  const size_t after = tk::runtime::resident_bytes();
  EXPECT_LT(after, before + (size_t{1} << 20)) << "before " << before << ", after " << after;
}
