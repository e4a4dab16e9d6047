// tk::config: budgets from the API and the environment, device listing, byte-size parsing.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/device_bytes.h"
#include "runtime/cuda_device.h"
#include "runtime/device_memory.h"
#include "runtime/log.h"
#include "runtime/settings.h"
#include "trainkit/core/error.h"

namespace tk {
namespace {

runtime::DeviceMemory& unused_device(Device device, const char* what) {
  runtime::DeviceMemory& m = runtime::DeviceMemory::get(device);
  if (m.in_use())
    throw InvalidArgument(std::string(what) + ": " + device.to_string() +
                          " is already in use; memory settings must be made before the first tensor is created "
                          "(set them at the start of the program, or use TK_MEMORY_* environment variables)");
  return m;
}

}  // namespace

void* device_allocate(size_t bytes, Device device, const std::string& owner) {
  return runtime::DeviceMemory::get(device).allocate(bytes, owner);
}
void device_free(void* p, Device device) noexcept {
  if (p) runtime::DeviceMemory::get(device).free(p);
}
// Byte operations behind Tensor (declared in core/tensor.cpp): plain memset/memcpy on the cpu, the CUDA
// runtime when either side is a CUDA device.
void device_memset_zero(void* p, size_t bytes, Device device) {
  if (!bytes) return;
  if (device.kind == DeviceKind::cpu)
    std::memset(p, 0, bytes);
  else
    runtime::cuda_memset_zero(p, bytes, runtime::cuda_device(device.index).ordinal);
}
void device_copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (!bytes) return;
  if (dst_device.kind == DeviceKind::cpu && src_device.kind == DeviceKind::cpu)
    std::memcpy(dst, src, bytes);
  else
    runtime::cuda_copy(dst, src, bytes);
}

namespace runtime {

void apply_environment(DeviceMemory& m) {
  const size_t total = m.device_info().total;
  const std::optional<std::string> limit = setting_text(Setting::memory_limit);
  const std::optional<std::string> fraction = setting_text(Setting::memory_fraction);
  if (limit && fraction) throw InvalidArgument("both TK_MEMORY_LIMIT and TK_MEMORY_FRACTION are set; set one of them");
  if (const std::optional<size_t> bytes = setting_bytes(Setting::memory_limit))
    m.set_limit(std::min(*bytes, total), "TK_MEMORY_LIMIT=" + *limit);
  else if (const std::optional<double> f = setting_number(Setting::memory_fraction))
    m.set_limit(static_cast<size_t>(*f * double(total)), "TK_MEMORY_FRACTION=" + *fraction);
  m.set_growth(setting_bool_or_default(Setting::memory_growth));  // the registry's default (true) when unset
}

}  // namespace runtime

namespace config {

size_t parse_bytes(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  std::string unit(end);
  while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
  static const std::pair<const char*, double> kUnits[] = {
      {"", 1},      {"B", 1},        {"KB", 1e3},        {"MB", 1e6},           {"GB", 1e9},
      {"TB", 1e12}, {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
  if (end == text.c_str() || !(v >= 0) || !std::isfinite(v))
    throw InvalidArgument("'" + text + "' is not a byte size (examples: 1073741824, 512MB, 1.5GiB)");
  for (const auto& [name, scale] : kUnits)
    if (unit == name) return static_cast<size_t>(v * scale);
  throw InvalidArgument("'" + text + "' has an unknown unit '" + unit + "' (use B, KB, MB, GB, KiB, MiB or GiB)");
}

std::string format_bytes(size_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) v /= 1024.0, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
  return buf;
}

namespace {
std::vector<Device>& visible() {
  static std::vector<Device> v;  // empty: all
  return v;
}

// TK_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES: with the CUDA backend, the CUDA runtime applies the latter and
// discovery the former (runtime/cuda_device.cpp). Without it, GPU names cannot be honoured: say so instead of
// silently ignoring them ("-1", "" and "cpu" mean no GPU).
void check_visible_env() {
  if (runtime::cuda_built()) return;
  const std::pair<const char*, const char*> env[] = {
      {"TK_VISIBLE_DEVICES", runtime::setting_raw(runtime::Setting::visible_devices)},
      {"CUDA_VISIBLE_DEVICES", std::getenv("CUDA_VISIBLE_DEVICES")}};  // the CUDA runtime's variable
  for (const auto& [name, v] : env) {
    if (!v || !*v || std::string(v) == "-1" || std::string(v) == "cpu" || std::string(v) == "cpu:0") continue;
    static bool warned = false;
    if (!warned && runtime::log_enabled(runtime::LogSeverity::warning))
      std::fprintf(stderr, "trainkit: warning: %s=%s names GPUs, but this build has no CUDA backend; using the cpu\n",
                   name, v);
    warned = true;
  }
}

std::string device_counts(const std::vector<DeviceInfo>& all) {
  const auto gpus =
      std::count_if(all.begin(), all.end(), [](const DeviceInfo& d) { return d.device.kind == DeviceKind::cuda; });
  std::string s = std::to_string(all.size() - static_cast<size_t>(gpus)) + " cpu, " + std::to_string(gpus) + " cuda";
  if (gpus == 0) s += "; no CUDA device: " + runtime::cuda_devices().reason;
  return s;
}

// Free memory of a CUDA device now; 0 when it cannot be queried (e.g. exclusive mode, held by another process).
size_t cuda_free_now(Device device) {
  try {
    return runtime::cuda_mem_get_info(runtime::cuda_device(device.index).ordinal).free;
  } catch (const Error&) {
    return 0;
  }
}
}  // namespace

std::vector<DeviceInfo> list_devices() {
  check_visible_env();
  std::vector<DeviceInfo> all = runtime::DeviceMemory::all(), out;
  for (DeviceInfo& d : all)
    if (visible().empty() || std::find(visible().begin(), visible().end(), d.device) != visible().end()) {
      if (d.device.kind == DeviceKind::cuda) d.free = cuda_free_now(d.device);
      out.push_back(d);
    }
  return out;
}

std::string no_cuda_device_reason() {
  const runtime::CudaDevices& c = runtime::cuda_devices();
  return c.devices.empty() ? c.reason : std::string();
}

void set_visible_devices(const std::vector<Device>& devices) {
  const std::vector<DeviceInfo> all = runtime::DeviceMemory::all();
  for (const Device& d : devices)
    if (std::none_of(all.begin(), all.end(), [&](const DeviceInfo& i) { return i.device == d; }))
      throw Unsupported("set_visible_devices: " + d.to_string() + " does not exist (devices: " + device_counts(all) +
                        ")");
  visible() = devices;
}

void set_logical_device_configuration(Device physical, const std::vector<size_t>& memory_limits) {
  if (physical != Device::cpu())
    throw Unsupported("set_logical_device_configuration: only the cpu can be split into logical devices; " +
                      physical.to_string() + " cannot (not implemented for CUDA devices yet)");
  runtime::DeviceMemory::split_cpu(memory_limits);
}

void set_memory_limit(Device device, size_t bytes) {
  runtime::DeviceMemory& m = unused_device(device, "set_memory_limit");
  if (bytes == 0) throw InvalidArgument("set_memory_limit: the limit must be positive");
  m.set_limit(std::min(bytes, m.device_info().total), "limit");
}

void set_memory_fraction(Device device, double fraction) {
  runtime::DeviceMemory& m = unused_device(device, "set_memory_fraction");
  if (!(fraction > 0.0 && fraction <= 1.0))
    throw InvalidArgument("set_memory_fraction: fraction must be in (0, 1], got " + std::to_string(fraction));
  m.set_limit(static_cast<size_t>(fraction * double(m.device_info().total)),
              "fraction " + std::to_string(fraction).substr(0, 4));
}

void set_memory_growth(Device device, bool growth) { unused_device(device, "set_memory_growth").set_growth(growth); }

MemoryInfo get_memory_info(Device device) { return runtime::DeviceMemory::get(device).info(); }

void reset_peak_memory(Device device) { runtime::DeviceMemory::get(device).reset_peak(); }

}  // namespace config
}  // namespace tk
