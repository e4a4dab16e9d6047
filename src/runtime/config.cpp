// tk::config: budgets from the API and the environment, device listing, byte-size parsing.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "runtime/device_memory.h"
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

bool parse_bool(const char* name, const std::string& v) {
  if (v == "1" || v == "true" || v == "TRUE" || v == "True") return true;
  if (v == "0" || v == "false" || v == "FALSE" || v == "False") return false;
  throw InvalidArgument(std::string(name) + "='" + v + "' is not a boolean (use true or false)");
}

double parse_fraction(const char* what, const std::string& v) {
  char* end = nullptr;
  const double f = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !(f > 0.0 && f <= 1.0))
    throw InvalidArgument(std::string(what) + "='" + v + "' must be a number in (0, 1], e.g. 0.45");
  return f;
}

}  // namespace

void* device_allocate(size_t bytes, Device device, const std::string& owner) {
  return runtime::DeviceMemory::get(device).allocate(bytes, owner);
}
void device_free(void* p, Device device) noexcept {
  if (p) runtime::DeviceMemory::get(device).free(p);
}

namespace runtime {

void apply_environment(DeviceMemory& m) {
  const size_t total = m.device_info().total;
  const char* limit = std::getenv("TK_MEMORY_LIMIT");
  const char* fraction = std::getenv("TK_MEMORY_FRACTION");
  const char* growth = std::getenv("TK_MEMORY_GROWTH");
  if (limit && *limit && fraction && *fraction)
    throw InvalidArgument("both TK_MEMORY_LIMIT and TK_MEMORY_FRACTION are set; set one of them");
  if (limit && *limit) {
    size_t bytes;
    try {
      bytes = config::parse_bytes(limit);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(std::string("TK_MEMORY_LIMIT: ") + e.what());
    }
    m.set_limit(std::min(bytes, total), "TK_MEMORY_LIMIT=" + std::string(limit));
  } else if (fraction && *fraction) {
    const double f = parse_fraction("TK_MEMORY_FRACTION", fraction);
    m.set_limit(static_cast<size_t>(f * double(total)), "TK_MEMORY_FRACTION=" + std::string(fraction));
  }
  if (growth && *growth) m.set_growth(parse_bool("TK_MEMORY_GROWTH", growth));
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

// TK_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES: "-1" or "" means no GPU; GPU indices cannot be honoured by
// this cpu-only build, which says so instead of silently ignoring them.
void check_visible_env() {
  for (const char* name : {"TK_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"}) {
    const char* v = std::getenv(name);
    if (!v || !*v || std::string(v) == "-1" || std::string(v) == "cpu" || std::string(v) == "cpu:0") continue;
    static bool warned = false;
    if (!warned)
      std::fprintf(stderr,
                   "trainkit: warning: %s=%s names GPUs, but this build has only the cpu backend; using cpu:0\n", name,
                   v);
    warned = true;
  }
}
}  // namespace

std::vector<DeviceInfo> list_devices() {
  check_visible_env();
  std::vector<DeviceInfo> all = runtime::DeviceMemory::all(), out;
  for (const DeviceInfo& d : all)
    if (visible().empty() || std::find(visible().begin(), visible().end(), d.device) != visible().end())
      out.push_back(d);
  return out;
}

void set_visible_devices(const std::vector<Device>& devices) {
  const std::vector<DeviceInfo> all = runtime::DeviceMemory::all();
  for (const Device& d : devices)
    if (std::none_of(all.begin(), all.end(), [&](const DeviceInfo& i) { return i.device == d; }))
      throw Unsupported("set_visible_devices: " + d.to_string() + " does not exist (devices: " +
                        std::to_string(all.size()) + " cpu; this build has no CUDA backend)");
  visible() = devices;
}

void set_logical_device_configuration(Device physical, const std::vector<size_t>& memory_limits) {
  if (physical != Device::cpu())
    throw Unsupported("set_logical_device_configuration: " + physical.to_string() + " is not available in this build");
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
