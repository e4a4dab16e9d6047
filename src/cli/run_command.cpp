// `trainkit run [options] -- PROGRAM ARGS...`: takes a lease in the machine's ledger, then runs any program
// (a trainkit command, a Python training script) in a child process with the device and its memory cap set in
// the environment, and reports how the child ended. `trainkit fit --isolate` is the same with no lease of its own
// (the child takes it). docs/sharing.md names each variable and why.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "cli/commands.h"
#include "cli/lease_options.h"
#include "cli/usage.h"
#include "runtime/device_memory.h"
#include "runtime/isolate.h"
#include "runtime/lease.h"
#include "runtime/test_hooks.h"
#include "trainkit/runtime/memory.h"

namespace tk::cli {
namespace {

// Caps TensorFlow's and PyTorch's GPU memory to the lease: neither reads a cap from the environment, so an import
// hook applies their own API right after the module loads, before the script's code runs.
constexpr const char* kPythonShim =
    R"PY(# Written by `trainkit run` (docs/sharing.md): caps TensorFlow's and PyTorch's memory to the lease.
import os, sys
_limit = int(os.environ.get("TK_MEMORY_LIMIT", "0"))
_fraction = float(os.environ.get("TK_RUN_MEMORY_FRACTION", "0"))


def _cap(name, module):
    try:
        if name == "torch" and _fraction > 0 and module.cuda.is_available():
            for i in range(module.cuda.device_count()):
                module.cuda.set_per_process_memory_fraction(_fraction, i)
        elif name == "tensorflow" and _limit > 0:
            for gpu in module.config.list_physical_devices("GPU"):
                module.config.set_logical_device_configuration(
                    gpu, [module.config.LogicalDeviceConfiguration(memory_limit=_limit // (1 << 20))])
    except Exception as e:  # the job still runs; say that the cap is missing
        print("trainkit run: could not cap %s's memory: %s" % (name, e), file=sys.stderr)


class _TrainkitCap:
    def find_spec(self, name, path=None, target=None):
        if name not in ("torch", "tensorflow"):
            return None
        import importlib.util
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        original = spec.loader.exec_module

        def exec_module(module):
            original(module)
            _cap(name, module)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _TrainkitCap())
)PY";

Device parse_run_device(const std::string& text) {
  if (text == "auto") return auto_device(false);
  if (text == "cpu" || text == "cpu:0") return Device::cpu();
  if (text == "cuda" || text == "gpu") return Device::cuda(0);
  for (const char* prefix : {"cuda:", "gpu:"})
    if (text.rfind(prefix, 0) == 0) {
      const std::string n = text.substr(std::strlen(prefix));
      if (!n.empty() && n.size() < 4 && n.find_first_not_of("0123456789") == std::string::npos)
        return Device::cuda(std::stoi(n));
    }
  throw InvalidArgument("--device " + text + ": expected auto, cpu, cuda or cuda:N (`trainkit devices` lists them)");
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& a : v) s += (s.empty() ? "" : " ") + a;
  return s.size() > 120 ? s.substr(0, 117) + "..." : s;
}

int report(const runtime::ChildResult& r, const std::vector<std::string>& command) {
  if (r.ok()) return 0;
  std::fflush(stdout);
  std::fprintf(stderr, "trainkit: error: %s\n", r.describe(join(command)).c_str());
  return r.exited ? r.exit_code : 128 + r.signal;
}

}  // namespace

void add_run_command(CLI::App& app, RunArgs& a) {
  CLI::App* run = app.add_subcommand(
      "run",
      "Lease device memory in the machine's ledger, then run a program (a trainkit command or e.g. `python "
      "train.py`) in a child process with the device and memory cap set: trainkit run --memory-limit 8GiB -- CMD");
  run->add_option("--device", a.device, "auto (the most unleased memory), cpu, cuda or cuda:N")->capture_default_str();
  run->add_option("--memory-limit", a.memory_limit, "Memory to lease for the job, e.g. 8GiB (required)");
  add_lease_options(run, a.lease);
  run->add_option("command", a.command, "The program and its arguments, after --")->required();
}

int run_run(const RunArgs& a) {
  if (a.memory_limit.empty())
    throw InvalidArgument("trainkit run needs --memory-limit: how much of the device the job may use, e.g. 8GiB");
  const size_t bytes = parse_memory_limit(a.memory_limit);
  if (bytes == 0) throw InvalidArgument("--memory-limit must be positive");
  apply_lease_options(a.lease);
  const Device device = parse_run_device(a.device);
  const std::vector<DeviceInfo> devices = config::list_devices();
  const auto info = std::ranges::find(devices, device, &DeviceInfo::device);
  if (info == devices.end())
    throw Unsupported("--device " + a.device + ": " + device.to_string() + " is not available");

  runtime::Lease lease;
  std::vector<std::string> env{"TK_MEMORY_LIMIT=" + std::to_string(bytes)};
  if (runtime::Ledger* ledger = runtime::process_ledger()) {
    lease = ledger->acquire(runtime::lease_device(*info), bytes, runtime::lease_wait_policy());
    env.push_back("TK_LEASE_INHERITED=" + lease.file());  // a trainkit child uses this lease, not a second one
  }
  // The device: a GPU by UUID (its index differs under each CUDA_VISIBLE_DEVICES), or none for the cpu.
  env.push_back("CUDA_VISIBLE_DEVICES=" + (device.kind == DeviceKind::cuda ? info->uuid : std::string("-1")));
  env.push_back("TK_VISIBLE_DEVICES=");
  // TensorFlow: take memory as needed instead of all of it at start (its only memory setting in the environment);
  // the cap itself comes from the import hook below. PyTorch: the fraction of the device the lease is.
  env.push_back("TF_FORCE_GPU_ALLOW_GROWTH=true");
  char fraction[32];
  std::snprintf(fraction, sizeof fraction, "%.6f", info->total ? double(bytes) / double(info->total) : 0.0);
  env.push_back(std::string("TK_RUN_MEMORY_FRACTION=") + fraction);
  char tmpl[] = "/tmp/trainkit-run-XXXXXX";
  const char* shim_dir = ::mkdtemp(tmpl);
  if (!shim_dir) throw IoError(std::string("trainkit run: cannot create a folder in /tmp: ") + std::strerror(errno));
  std::ofstream(std::string(shim_dir) + "/sitecustomize.py") << kPythonShim;
  const char* pythonpath = std::getenv("PYTHONPATH");
  env.push_back("PYTHONPATH=" + std::string(shim_dir) +
                (pythonpath && *pythonpath ? ":" + std::string(pythonpath) : ""));
  runtime::ChildResult r;
  try {
    // The child inherits the lease's locked descriptor: the lease lives while any process of the job lives, even
    // when this process is killed first (kill -9 skips every destructor here, but the child's lock stays).
    std::vector<int> keep;
    if (lease.descriptor() >= 0) keep.push_back(lease.descriptor());
    r = runtime::run_child(a.command, env, true, 20, keep);
  } catch (...) {
    std::filesystem::remove_all(shim_dir);
    throw;
  }
  std::filesystem::remove_all(shim_dir);
  return report(r, a.command);
}

int run_isolated(int argc, char** argv) {
  std::vector<std::string> command{"/proc/self/exe"};
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) != "--isolate") command.push_back(argv[i]);
  const runtime::ChildResult r = runtime::run_child(command, {});
  command[0] = "trainkit";
  return report(r, command);
}

void maybe_test_fault() {
  const char* fault = runtime::test_hook(runtime::Setting::test_fault);  // the isolation tests crash a child
  if (!fault) return;
  if (std::string(fault) == "segfault") {
    std::fprintf(stderr, "TK_TEST_FAULT: segfault now\n");
    std::fflush(stderr);
    // The kernel's own SIGSEGV, not a null store: sanitizer builds would report that store and exit 1 instead.
    std::signal(SIGSEGV, SIG_DFL);
    std::raise(SIGSEGV);
  }
  if (std::string(fault) == "abort") std::abort();
}

}  // namespace tk::cli
