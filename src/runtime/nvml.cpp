// NVML through dlopen. The few types and entry points used are declared here, with the layouts of the driver's
// nvml.h (NVML API version 11+; checked by static_assert against the sizes nvml.h gives them). Nothing here
// needs CUDA headers, so it is built and its not-available path tested everywhere.
#include "runtime/nvml.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "runtime/cuda_device.h"
#include "runtime/dl_symbol.h"
#include "runtime/settings.h"

namespace tk::runtime {
namespace {

// ---- from nvml.h
using nvmlReturn_t = int;  // an enum there; NVML_SUCCESS is 0
constexpr nvmlReturn_t NVML_SUCCESS = 0;
constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_SIZE = 7;
constexpr unsigned long long NVML_VALUE_NOT_AVAILABLE = ~0ull;  // (unsigned long long)-1
constexpr unsigned NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96;
constexpr unsigned NVML_DEVICE_UUID_V2_BUFFER_SIZE = 96;
constexpr unsigned NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE = 80;
using nvmlDevice_t = struct nvmlDevice_st*;
struct nvmlMemory_t {  // nvmlDeviceGetMemoryInfo (v1): note the order total, free, used
  unsigned long long total, free, used;
};
struct nvmlUtilization_t {
  unsigned int gpu, memory;
};
struct nvmlPciInfo_t {   // nvmlDeviceGetPciInfo_v3 / _v2
  char busIdLegacy[16];  // NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];  // NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE
};
struct nvmlProcessInfo_t {  // nvmlDeviceGetComputeRunningProcesses_v3 / _v2 (nvmlProcessInfo_v2_t)
  unsigned int pid;
  unsigned long long usedGpuMemory;  // NVML_VALUE_NOT_AVAILABLE when unknown
  unsigned int gpuInstanceId;        // 0xFFFFFFFF unless MIG
  unsigned int computeInstanceId;
};
static_assert(sizeof(nvmlMemory_t) == 24 && sizeof(nvmlUtilization_t) == 8);
static_assert(sizeof(nvmlPciInfo_t) == 68 && offsetof(nvmlPciInfo_t, domain) == 16 &&
              offsetof(nvmlPciInfo_t, busId) == 36);
static_assert(sizeof(nvmlProcessInfo_t) == 24 && offsetof(nvmlProcessInfo_t, usedGpuMemory) == 8 &&
              offsetof(nvmlProcessInfo_t, gpuInstanceId) == 16);

}  // namespace

struct Nvml::Api {
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  const char* (*error_string)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*driver_version)(char*, unsigned int) = nullptr;
  nvmlReturn_t (*count)(unsigned int*) = nullptr;
  nvmlReturn_t (*handle_by_index)(unsigned int, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*name)(nvmlDevice_t, char*, unsigned int) = nullptr;
  nvmlReturn_t (*uuid)(nvmlDevice_t, char*, unsigned int) = nullptr;
  nvmlReturn_t (*pci_info)(nvmlDevice_t, nvmlPciInfo_t*) = nullptr;
  nvmlReturn_t (*memory_info)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*processes)(nvmlDevice_t, unsigned int*, nvmlProcessInfo_t*) = nullptr;

  std::string error(nvmlReturn_t r) const {
    const char* s = error_string ? error_string(r) : nullptr;
    return (s ? std::string(s) : std::string("NVML error")) + " (" + std::to_string(r) + ")";
  }
};

Nvml& Nvml::instance() {
  static Nvml* nvml = [] {
    if (const std::optional<std::string> name = setting_text(Setting::nvml_library)) return new Nvml({*name});
    return new Nvml({"libnvidia-ml.so.1", "libnvidia-ml.so"});
  }();
  return *nvml;
}

Nvml::Nvml(const std::vector<std::string>& library_names) {
  std::string errors;
  for (const std::string& name : library_names) {
    void* library = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!library) {
      const char* e = dlerror();
      if (errors.empty()) errors = e ? std::string(e) : name + ": cannot be opened";  // the first name's reason
      continue;
    }
    auto api = std::make_unique<Api>();
    // Sets `fn` to the library's `symbol` (null when it lacks it); true when found.
    auto load = [library](auto& fn, const char* symbol) {
      fn = dl_symbol<std::remove_reference_t<decltype(fn)>>(library, symbol);
      return fn != nullptr;
    };
    load(api->init, "nvmlInit_v2");
    load(api->shutdown, "nvmlShutdown");
    load(api->error_string, "nvmlErrorString");
    load(api->count, "nvmlDeviceGetCount_v2");
    load(api->handle_by_index, "nvmlDeviceGetHandleByIndex_v2");
    if (!api->init || !api->shutdown || !api->count || !api->handle_by_index) {
      status_ = "NVML not available: " + name +
                " lacks nvmlInit_v2 / nvmlShutdown / nvmlDeviceGetCount_v2 / nvmlDeviceGetHandleByIndex_v2 (not an "
                "NVML library, or a driver older than r325)";
      dlclose(library);
      return;
    }
    const nvmlReturn_t r = api->init();
    if (r != NVML_SUCCESS) {
      status_ = "NVML not available: nvmlInit_v2 failed: " + api->error(r);
      dlclose(library);
      return;
    }
    load(api->driver_version, "nvmlSystemGetDriverVersion");
    load(api->name, "nvmlDeviceGetName");
    load(api->uuid, "nvmlDeviceGetUUID");
    if (!load(api->pci_info, "nvmlDeviceGetPciInfo_v3")) load(api->pci_info, "nvmlDeviceGetPciInfo_v2");
    load(api->memory_info, "nvmlDeviceGetMemoryInfo");
    load(api->utilization, "nvmlDeviceGetUtilizationRates");
    if (!load(api->processes, "nvmlDeviceGetComputeRunningProcesses_v3"))
      load(api->processes, "nvmlDeviceGetComputeRunningProcesses_v2");
    library_ = library;
    api_ = std::move(api);
    const std::string driver = driver_version();
    status_ = "NVML from " + name + (driver.empty() ? "" : ", driver " + driver);
    return;
  }
  status_ = "NVML not available (no NVIDIA driver): " + (errors.empty() ? "no library name given" : errors);
}

Nvml::~Nvml() {
  if (api_) api_->shutdown();
  if (library_) dlclose(library_);
}

std::string Nvml::driver_version() const {
  if (!api_ || !api_->driver_version) return "";
  char buf[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = {};
  if (api_->driver_version(buf, sizeof buf) != NVML_SUCCESS) return "";
  buf[sizeof buf - 1] = '\0';
  return buf;
}

std::vector<NvmlGpu> Nvml::gpus() const {
  std::vector<NvmlGpu> out;
  if (!api_) return out;
  unsigned int n = 0;
  if (api_->count(&n) != NVML_SUCCESS) return out;
  for (unsigned int i = 0; i < n; ++i) {
    NvmlGpu g;
    g.index = i;
    auto note = [&g](const char* what, const std::string& e) {
      g.errors += (g.errors.empty() ? "" : "; ") + std::string(what) + ": " + e;
    };
    nvmlDevice_t h = nullptr;
    nvmlReturn_t r = api_->handle_by_index(i, &h);
    if (r != NVML_SUCCESS) {
      note("handle", api_->error(r));
      out.push_back(std::move(g));
      continue;
    }
    // An optional entry point's query of this device: true when it succeeded; a failure is noted.
    auto query = [&](auto fn, const char* what, auto... args) {
      if (!fn) return false;
      if ((r = fn(h, args...)) == NVML_SUCCESS) return true;
      note(what, api_->error(r));
      return false;
    };
    char text[NVML_DEVICE_NAME_V2_BUFFER_SIZE > NVML_DEVICE_UUID_V2_BUFFER_SIZE ? NVML_DEVICE_NAME_V2_BUFFER_SIZE
                                                                                : NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    if (query(api_->name, "name", text, NVML_DEVICE_NAME_V2_BUFFER_SIZE)) text[sizeof text - 1] = '\0', g.name = text;
    if (query(api_->uuid, "uuid", text, NVML_DEVICE_UUID_V2_BUFFER_SIZE)) text[sizeof text - 1] = '\0', g.uuid = text;
    nvmlPciInfo_t pci{};
    if (query(api_->pci_info, "pci info", &pci)) pci.busId[sizeof pci.busId - 1] = '\0', g.pci_bus_id = pci.busId;
    nvmlMemory_t mem{};
    if (query(api_->memory_info, "memory", &mem))
      g.total = mem.total, g.free = mem.free, g.used = mem.used, g.memory_known = true;
    nvmlUtilization_t util{};
    if (query(api_->utilization, "utilization", &util))
      g.utilization_gpu = util.gpu, g.utilization_memory = util.memory, g.utilization_known = true;
    if (api_->processes) {
      std::vector<nvmlProcessInfo_t> procs(16);
      for (int attempt = 0; attempt < 4; ++attempt) {
        unsigned int count = static_cast<unsigned int>(procs.size());
        r = api_->processes(h, &count, procs.data());
        if (r == NVML_ERROR_INSUFFICIENT_SIZE) {  // processes started meanwhile: `count` says how many now
          procs.resize(std::max<size_t>(count, procs.size()) * 2);
          continue;
        }
        if (r == NVML_SUCCESS) {
          g.processes_known = true;
          for (unsigned int k = 0; k < count && k < procs.size(); ++k) {
            NvmlProcess p;
            p.pid = procs[k].pid;
            p.used_known = procs[k].usedGpuMemory != NVML_VALUE_NOT_AVAILABLE;
            p.used = p.used_known ? procs[k].usedGpuMemory : 0;
            g.processes.push_back(p);
          }
        }
        break;
      }
      if (!g.processes_known) note("processes", api_->error(r));
    }
    out.push_back(std::move(g));
  }
  return out;
}

int Nvml::index_of_pci_bus_id(const std::string& pci_bus_id) const {
  unsigned domain = 0, bus = 0, device = 0;
  if (!api_ || !api_->pci_info || !parse_pci_bus_id(pci_bus_id, domain, bus, device)) return -1;
  unsigned int n = 0;
  if (api_->count(&n) != NVML_SUCCESS) return -1;
  for (unsigned int i = 0; i < n; ++i) {
    nvmlDevice_t h = nullptr;
    nvmlPciInfo_t pci{};
    if (api_->handle_by_index(i, &h) == NVML_SUCCESS && api_->pci_info(h, &pci) == NVML_SUCCESS &&
        pci.domain == domain && pci.bus == bus && pci.device == device)
      return static_cast<int>(i);
  }
  return -1;
}

}  // namespace tk::runtime
