// trainkit devices: every device this process can use, with its memory and budget.
// trainkit smi: per-GPU utilization, memory and per-process memory from NVML (like nvidia-smi / gpustat); on a
// machine without a GPU it says why and shows the cpu device, its memory and its budget.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <string>
#include <thread>

#include "backends/cuda/cudnn_loader.h"
#include "cli/commands.h"
#include "cli/lease_options.h"
#include "runtime/cuda_device.h"
#include "runtime/nvml.h"
#include "trainkit/core/error.h"
#include "trainkit/runtime/memory.h"

namespace tk::cli {
namespace {

using config::format_bytes;

std::string version_text(int v) {
  return v <= 0 ? std::string("none") : std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

std::string budget_text(Device device) {
  MemoryInfo m;
  try {
    m = config::get_memory_info(device);
  } catch (const InvalidArgument&) {
    throw;  // a TK_MEMORY_* mistake: a real error
  } catch (const Error& e) {
    if (device.kind == DeviceKind::cpu) throw;
    return std::string("budget unavailable: ") + e.what();  // e.g. a GPU in exclusive mode held by another process
  }
  return "budget " + format_bytes(m.limit) + " (" + m.limit_source + ", " +
         (m.growth ? "growth" : "reserved up front") + ")";
}

// The machine's memory in use (MemTotal - MemAvailable) and total, from /proc/meminfo; false when unreadable.
bool system_memory(size_t& used, size_t& total) {
  std::ifstream in("/proc/meminfo");
  size_t total_kib = 0, available_kib = 0;
  std::string key;
  size_t value;
  std::string unit;
  while (in >> key >> value) {
    std::getline(in, unit);
    if (key == "MemTotal:") total_kib = value;
    if (key == "MemAvailable:") available_kib = value;
  }
  if (total_kib == 0 || available_kib > total_kib) return false;
  total = total_kib * 1024, used = (total_kib - available_kib) * 1024;
  return true;
}

std::string process_name(unsigned pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  if (!std::getline(in, name) || name.empty()) return "?";  // another PID namespace (a container), or gone
  return name;
}

std::string now_text() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

std::string cuda_summary() {
  const runtime::CudaDevices& c = runtime::cuda_devices();
  if (!c.built) return "CUDA backend: not built";
  return "CUDA backend: built, CUDA runtime " + version_text(c.runtime_version) + ", driver " +
         version_text(c.driver_version) + "; " + cuda::cudnn_summary();
}

void print_cpu_line(const DeviceInfo& d) {
  std::printf("%-7s %s | memory %s | %s\n", d.device.to_string().c_str(), d.name.c_str(), format_bytes(d.total).c_str(),
              budget_text(d.device).c_str());
}

}  // namespace

void add_devices_command(CLI::App& app) {
  app.add_subcommand("devices",
                     "List the devices trainkit can use (cpu and CUDA GPUs): name, memory, budget, and for GPUs the "
                     "UUID, PCI bus id and compute capability");
}

int run_devices() {
  const std::vector<DeviceInfo> devices = config::list_devices();
  for (const DeviceInfo& d : devices) {
    if (d.device.kind == DeviceKind::cpu) {
      print_cpu_line(d);
      continue;
    }
    std::printf("%-7s %s | memory %s, %s free | %s | uuid %s | pci bus id %s | compute capability %d.%d\n",
                d.device.to_string().c_str(), d.name.c_str(), format_bytes(d.total).c_str(),
                format_bytes(d.free).c_str(), budget_text(d.device).c_str(), d.uuid.c_str(), d.pci_bus_id.c_str(),
                d.compute_capability_major, d.compute_capability_minor);
  }
  const std::string reason = config::no_cuda_device_reason();
  if (!reason.empty()) std::printf("no CUDA device: %s\n", reason.c_str());
  std::printf("%s; %s\n", cuda_summary().c_str(), runtime::Nvml::instance().status().c_str());
  return 0;
}

void add_smi_command(CLI::App& app, SmiArgs& a) {
  CLI::App* smi = app.add_subcommand(
      "smi", "Per-GPU utilization, memory used/total and per-process memory (NVML), like nvidia-smi / gpustat");
  smi->add_option("--watch", a.watch, "Refresh every this many seconds (0: print once)")->capture_default_str();
  smi->add_option("--count", a.count, "With --watch: stop after this many reports (0: until interrupted)")
      ->capture_default_str();
}

namespace {

void print_smi_report(bool clear) {
  if (clear) std::fputs("\033[H\033[2J", stdout);
  const runtime::Nvml& nvml = runtime::Nvml::instance();
  const runtime::CudaDevices& cuda = runtime::cuda_devices();
  std::printf("trainkit smi  %s  %s\n%s\n", now_text().c_str(), cuda_summary().c_str(), nvml.status().c_str());
  const std::vector<runtime::NvmlGpu> gpus = nvml.gpus();
  for (const runtime::NvmlGpu& g : gpus) {
    std::string label = "-";  // not visible to this process as a CUDA device
    for (const runtime::CudaDevice& d : cuda.devices)
      if (d.nvml_index == static_cast<int>(g.index)) label = d.info.device.to_string();
    std::printf("GPU %u  %-6s %s  %s", g.index, label.c_str(), g.name.c_str(), g.pci_bus_id.c_str());
    if (g.utilization_known)
      std::printf(" | util %3u%% (memory %u%%)", g.utilization_gpu, g.utilization_memory);
    else
      std::printf(" | util n/a");
    if (g.memory_known)
      std::printf(" | memory %s / %s used\n", format_bytes(g.used).c_str(), format_bytes(g.total).c_str());
    else
      std::printf(" | memory n/a\n");
    if (g.processes_known && g.processes.empty()) std::printf("    no compute processes\n");
    for (const runtime::NvmlProcess& p : g.processes)
      std::printf("    pid %-8u %-16s %s%s\n", p.pid, process_name(p.pid).c_str(),
                  p.used_known ? format_bytes(p.used).c_str() : "n/a",
                  p.pid == static_cast<unsigned>(getpid()) ? "  (this process)" : "");
    if (!g.errors.empty()) std::printf("    not available: %s\n", g.errors.c_str());
  }
  if (gpus.empty()) {
    // CUDA devices without NVML (unusual): what the CUDA runtime can tell.
    for (const runtime::CudaDevice& d : cuda.devices) {
      const runtime::CudaMemInfo m = runtime::cuda_mem_get_info(d.ordinal);
      std::printf("%-7s %s  %s | util n/a | memory %s / %s used (cudaMemGetInfo)\n", d.info.device.to_string().c_str(),
                  d.info.name.c_str(), d.info.pci_bus_id.c_str(), format_bytes(m.total - m.free).c_str(),
                  format_bytes(m.total).c_str());
    }
    if (cuda.devices.empty())
      std::printf("no GPU: %s\n", nvml.available() ? "NVML reports no GPU" : cuda.reason.c_str());
  }
  for (const DeviceInfo& d : config::list_devices()) {
    if (d.device.kind != DeviceKind::cpu) continue;
    size_t used = 0, total = 0;
    const MemoryInfo m = config::get_memory_info(d.device);
    std::printf("%-7s %s", d.device.to_string().c_str(), d.name.c_str());
    if (system_memory(used, total))
      std::printf(" | memory %s / %s used (whole machine)", format_bytes(used).c_str(), format_bytes(total).c_str());
    std::printf(" | %s, %s in use by this process\n", budget_text(d.device).c_str(), format_bytes(m.current).c_str());
  }
  print_ledger();  // who holds and who waits for each device's memory (cli/lease_options.h)
  std::fflush(stdout);
}

}  // namespace

int run_smi(const SmiArgs& a) {
  if (!(a.watch >= 0.0))
    throw InvalidArgument("--watch must be a number of seconds >= 0, got " + std::to_string(a.watch));
  if (a.count < 0) throw InvalidArgument("--count must be >= 0, got " + std::to_string(a.count));
  if (a.count > 0 && a.watch == 0.0) throw InvalidArgument("--count needs --watch (seconds between reports)");
  const bool terminal = isatty(STDOUT_FILENO) != 0;
  for (int n = 1;; ++n) {
    print_smi_report(a.watch > 0.0 && terminal);
    if (a.watch == 0.0 || (a.count > 0 && n >= a.count)) break;
    if (!terminal) std::printf("\n");
    std::this_thread::sleep_for(std::chrono::duration<double>(a.watch));
  }
  return 0;
}

}  // namespace tk::cli
