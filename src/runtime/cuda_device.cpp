// CUDA devices. The pure helpers at the top are compiled in every build; the part that calls the CUDA runtime
// only with TK_HAVE_CUDA (CMake TK_CUDA=AUTO/ON and the toolkit found), otherwise the stubs at the bottom
// report "this build has no CUDA backend". Nothing here needs nvcc.
#include "runtime/cuda_device.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>

#include "runtime/log.h"
#include "runtime/nvml.h"
#include "runtime/settings.h"
#include "trainkit/core/error.h"

#ifdef TK_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace tk::runtime {

// ---------------------------------------------------------------- pure helpers

std::string format_gpu_uuid(const unsigned char b[16]) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return buf;
}

std::string format_pci_bus_id(unsigned domain, unsigned bus, unsigned device) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04x:%02x:%02x.0", domain, bus, device);
  return buf;
}

namespace {

bool parse_hex(const std::string& s, unsigned& out) {
  if (s.empty() || s.size() > 8) return false;
  unsigned v = 0;
  for (char c : s) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
    const int d =
        std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : std::tolower(static_cast<unsigned char>(c)) - 'a' + 10;
    v = v * 16 + static_cast<unsigned>(d);
  }
  out = v;
  return true;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

bool parse_index(const std::string& s, size_t& out) {
  if (s.empty() || s.size() > 6 || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return false;
  out = std::stoul(s);
  return true;
}

}  // namespace

bool parse_pci_bus_id(const std::string& text, unsigned& domain, unsigned& bus, unsigned& device) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t colon; (colon = text.find(':', start)) != std::string::npos; start = colon + 1)
    parts.push_back(text.substr(start, colon - start));
  parts.push_back(text.substr(start));
  if (parts.size() == 2) parts.insert(parts.begin(), "0");
  if (parts.size() != 3) return false;
  std::string dev = parts[2];
  const auto dot = dev.find('.');
  unsigned function = 0;
  if (dot != std::string::npos) {
    if (!parse_hex(dev.substr(dot + 1), function)) return false;
    dev.resize(dot);
  }
  return parse_hex(parts[0], domain) && parse_hex(parts[1], bus) && parse_hex(dev, device);
}

std::vector<size_t> select_visible_gpus(const std::vector<DeviceInfo>& all, const std::string& spec,
                                        std::string& error) {
  error.clear();
  std::vector<size_t> out;
  if (trim(spec).empty()) {
    for (size_t i = 0; i < all.size(); ++i) out.push_back(i);
    return out;
  }
  auto complain = [&](const std::string& message) { error += (error.empty() ? "" : "; ") + message; };
  size_t start = 0;
  while (start <= spec.size()) {
    size_t comma = spec.find(',', start);
    if (comma == std::string::npos) comma = spec.size();
    const std::string entry = trim(spec.substr(start, comma - start)), low = lower(entry);
    start = comma + 1;
    if (entry.empty() || low == "-1" || low == "none" || low == "cpu" || low.rfind("cpu:", 0) == 0) continue;
    size_t index = all.size();
    bool named = false;
    if (parse_index(low, index)) {
      named = true;
    } else if (low.rfind("cuda:", 0) == 0 || low.rfind("gpu:", 0) == 0) {
      named = parse_index(low.substr(low.find(':') + 1), index);
    } else if (low.rfind("gpu-", 0) == 0 || low.rfind("mig-", 0) == 0) {
      named = true;
      size_t matches = 0;
      for (size_t i = 0; i < all.size(); ++i)
        if (lower(all[i].uuid).rfind(low, 0) == 0) index = i, ++matches;
      if (matches > 1) {
        complain("TK_VISIBLE_DEVICES entry '" + entry + "' matches " + std::to_string(matches) +
                 " GPUs; give more of the UUID");
        continue;
      }
      if (matches == 0) index = all.size();
    }
    if (!named) {
      complain("TK_VISIBLE_DEVICES entry '" + entry +
               "' is not a device (use N, cuda:N, a GPU UUID, or -1 for no GPU; entries are separated by commas)");
      continue;
    }
    if (index >= all.size()) {
      complain("TK_VISIBLE_DEVICES entry '" + entry + "' names no device (" + std::to_string(all.size()) +
               " CUDA device" + (all.size() == 1 ? "" : "s") + " visible to the CUDA runtime)");
      continue;
    }
    if (std::find(out.begin(), out.end(), index) != out.end()) {
      complain("TK_VISIBLE_DEVICES entry '" + entry + "' repeats a device");
      continue;
    }
    out.push_back(index);
  }
  return out;
}

size_t gpu_system_reserve(size_t available, int compute_capability_major) {
  constexpr size_t MiB = size_t{1} << 20;
  if (available < (size_t{1} << 31)) return 225 * MiB;
  if (compute_capability_major <= 6) return 500 * MiB;
  if (compute_capability_major <= 7) return 1050 * MiB;
  if (compute_capability_major <= 8) return 1536 * MiB;
  return 1800 * MiB;
}

const CudaDevice& cuda_device(int index) {
  const CudaDevices& c = cuda_devices();
  if (index >= 0 && static_cast<size_t>(index) < c.devices.size()) return c.devices[static_cast<size_t>(index)];
  const std::string name = Device::cuda(index).to_string();
  if (c.devices.empty()) throw Unsupported("device " + name + " is not available: no CUDA device: " + c.reason);
  throw Unsupported("device " + name + " is not available: " + std::to_string(c.devices.size()) + " CUDA device" +
                    (c.devices.size() == 1 ? "" : "s") + " visible (cuda:0" +
                    (c.devices.size() > 1 ? "..cuda:" + std::to_string(c.devices.size() - 1) : std::string()) +
                    "; CUDA_VISIBLE_DEVICES and TK_VISIBLE_DEVICES select them)");
}

bool cuda_built() { return cuda_devices().built; }

bool cuda_backend_compiled() {
#ifdef TK_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

#ifdef TK_HAVE_CUDA
// ---------------------------------------------------------------- with the CUDA runtime

namespace {

std::string cuda_error(cudaError_t e) { return std::string(cudaGetErrorString(e)) + " (" + cudaGetErrorName(e) + ")"; }

std::string version_text(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

// Makes `ordinal` the calling thread's current device and restores the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int ordinal) : ordinal_(ordinal) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != ordinal_) cudaSetDevice(ordinal_);
  }
  ~DeviceGuard() {
    if (previous_ >= 0 && previous_ != ordinal_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int ordinal_, previous_ = -1;
};

std::string no_device_reason(cudaError_t e, int driver_version, int runtime_version) {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string env = visible ? std::string("; CUDA_VISIBLE_DEVICES=") + visible : std::string();
  if (e == cudaErrorInsufficientDriver) {
    if (driver_version == 0)
      return "CUDA driver not found (cudaErrorInsufficientDriver): no NVIDIA driver is installed";
    return "the CUDA driver (" + version_text(driver_version) + ") is older than this build's CUDA runtime (" +
           version_text(runtime_version) + ") needs (cudaErrorInsufficientDriver): update the NVIDIA driver";
  }
  if (e == cudaErrorNoDevice) return "no CUDA-capable device is detected (cudaErrorNoDevice)" + env;
  return "cudaGetDeviceCount failed: " + cuda_error(e) + env;
}

CudaDevices discover() {
  CudaDevices out;
  out.built = true;
  cudaRuntimeGetVersion(&out.runtime_version);
  if (cudaDriverGetVersion(&out.driver_version) != cudaSuccess) out.driver_version = 0;
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear it (the runtime keeps the last error per thread)
    out.reason = no_device_reason(e, out.driver_version, out.runtime_version);
    return out;
  }
  if (n <= 0) {
    out.reason = "no CUDA device found (cudaGetDeviceCount returned 0)";
    return out;
  }
  std::vector<CudaDevice> all;
  std::string failures;
  Nvml& nvml = Nvml::instance();
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    const cudaError_t pe = cudaGetDeviceProperties(&p, i);
    if (pe != cudaSuccess) {
      cudaGetLastError();
      failures += (failures.empty() ? "" : "; ") + std::string("cudaGetDeviceProperties(") + std::to_string(i) +
                  "): " + cuda_error(pe);
      continue;
    }
    CudaDevice d;
    d.ordinal = i;
    d.info.device = Device::cuda(i);
    d.info.name = p.name;
    d.info.total = p.totalGlobalMem;
    d.info.uuid = format_gpu_uuid(reinterpret_cast<const unsigned char*>(p.uuid.bytes));
    d.info.pci_bus_id = format_pci_bus_id(static_cast<unsigned>(p.pciDomainID), static_cast<unsigned>(p.pciBusID),
                                          static_cast<unsigned>(p.pciDeviceID));
    d.info.compute_capability_major = p.major;
    d.info.compute_capability_minor = p.minor;
    d.nvml_index = nvml.index_of_pci_bus_id(d.info.pci_bus_id);
    all.push_back(std::move(d));
  }
  std::vector<DeviceInfo> infos;
  for (const CudaDevice& d : all) infos.push_back(d.info);
  const char* spec_env = setting_raw(Setting::visible_devices);
  const std::string spec = spec_env ? spec_env : "";
  for (size_t index : select_visible_gpus(infos, spec, out.warning)) {
    CudaDevice d = all[index];
    d.info.device = Device::cuda(static_cast<int>(out.devices.size()));
    out.devices.push_back(std::move(d));
  }
  if (!out.warning.empty() && log_enabled(LogSeverity::warning))
    std::fprintf(stderr, "trainkit: warning: %s\n", out.warning.c_str());
  if (out.devices.empty())
    out.reason = !failures.empty() ? failures
                                   : "TK_VISIBLE_DEVICES=" + spec + " hides all " + std::to_string(all.size()) +
                                         " CUDA device" + (all.size() == 1 ? "" : "s");
  return out;
}

class CudaRegions final : public RegionSource {
 public:
  explicit CudaRegions(int ordinal) : ordinal_(ordinal) {}
  void* take(size_t bytes, std::string& error) override {
    DeviceGuard guard(ordinal_);
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e == cudaSuccess) return p;
    cudaGetLastError();
    error = "cudaMalloc(" + config::format_bytes(bytes) + ") failed: " + cuda_error(e);
    return nullptr;
  }
  void give_back(void* base) noexcept override {
    DeviceGuard guard(ordinal_);
    cudaFree(base);  // at process exit the runtime may already be unloading: nothing to do then
    cudaGetLastError();
  }

 private:
  int ordinal_;
};

}  // namespace

const CudaDevices& cuda_devices() {
  // Never destroyed: tensors with static storage duration may still free into a CUDA device at exit.
  static const CudaDevices* devices = new CudaDevices(discover());
  return *devices;
}

CudaMemInfo cuda_mem_get_info(int ordinal) {
  DeviceGuard guard(ordinal);
  CudaMemInfo m;
  const cudaError_t e = cudaMemGetInfo(&m.free, &m.total);
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw Error("cudaMemGetInfo on CUDA device " + std::to_string(ordinal) + " failed: " + cuda_error(e));
  }
  return m;
}

std::unique_ptr<RegionSource> cuda_region_source(int ordinal) { return std::make_unique<CudaRegions>(ordinal); }

void cuda_memset_zero(void* p, size_t bytes, int ordinal) {
  DeviceGuard guard(ordinal);
  cudaError_t e = cudaMemset(p, 0, bytes);
  if (e == cudaSuccess) e = cudaStreamSynchronize(nullptr);  // cudaMemset is asynchronous for device memory
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw Error("cudaMemset(" + config::format_bytes(bytes) + ") on CUDA device " + std::to_string(ordinal) +
                " failed: " + cuda_error(e));
  }
}

void cuda_copy(void* dst, const void* src, size_t bytes) {
  cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);
  // cudaMemcpy is not synchronous for the host in every case: a pageable host-to-device copy returns once the source
  // is staged, before the DMA into device memory lands, and a device-to-device copy (a peer copy included) returns at
  // once. Programs run on non-blocking compute streams (backends/cuda/compute_stream.h), which do not wait for the
  // legacy stream, so a kernel queued right after this could read a half-written buffer (weights, optimizer slots,
  // the loss-scale state, Tensor::to_device). cudaMemcpy queued the copy on the current device's legacy stream:
  // synchronizing that stream (the same current device; nothing changed it since) makes the copy done on return.
  if (e == cudaSuccess) e = cudaStreamSynchronize(nullptr);
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw Error("cudaMemcpy(" + config::format_bytes(bytes) + ") failed: " + cuda_error(e));
  }
}

#else
// ---------------------------------------------------------------- without the CUDA backend

const CudaDevices& cuda_devices() {
  static const CudaDevices* devices = [] {
    auto* d = new CudaDevices;
    d->reason = "this build has no CUDA backend (configure with -DTK_CUDA=ON, or AUTO with the CUDA toolkit installed)";
    return d;
  }();
  return *devices;
}

CudaMemInfo cuda_mem_get_info(int) { throw Unsupported("cudaMemGetInfo: this build has no CUDA backend"); }
std::unique_ptr<RegionSource> cuda_region_source(int) {
  throw Unsupported("cudaMalloc: this build has no CUDA backend");
}
void cuda_memset_zero(void*, size_t, int) { throw Unsupported("cudaMemset: this build has no CUDA backend"); }
void cuda_copy(void*, const void*, size_t) { throw Unsupported("cudaMemcpy: this build has no CUDA backend"); }

#endif

}  // namespace tk::runtime
