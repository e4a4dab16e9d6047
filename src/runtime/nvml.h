// NVML (the NVIDIA Management Library, part of the driver), loaded at run time with dlopen: no header or
// library is needed to build, and a machine without the NVIDIA driver gets a clear "not available" state.
// Used for what the CUDA runtime cannot tell: utilization and per-process memory (`trainkit smi`).
//
//   const tk::runtime::Nvml& nvml = tk::runtime::Nvml::instance();
//   if (!nvml.available()) std::puts(nvml.status().c_str());   // "NVML not available (no NVIDIA driver): ..."
//   for (const tk::runtime::NvmlGpu& g : nvml.gpus()) ...
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tk::runtime {

struct NvmlProcess {
  unsigned pid = 0;
  uint64_t used = 0;       // bytes of GPU memory
  bool used_known = true;  // false when NVML reports NVML_VALUE_NOT_AVAILABLE
};

// One GPU as NVML sees it (NVML numbers every GPU of the machine; CUDA_VISIBLE_DEVICES does not apply).
struct NvmlGpu {
  unsigned index = 0;
  std::string name, uuid, pci_bus_id;  // pci_bus_id as NVML prints it: "00000000:19:00.0"
  uint64_t total = 0, used = 0, free = 0;
  bool memory_known = false;
  unsigned utilization_gpu = 0, utilization_memory = 0;  // percent over NVML's last sample period
  bool utilization_known = false;
  std::vector<NvmlProcess> processes;  // compute processes (CUDA contexts) with their memory
  bool processes_known = false;
  std::string errors;  // what could not be read, e.g. "utilization: Not Supported"
};

class Nvml {
 public:
  // The process-wide instance: libnvidia-ml.so.1, then libnvidia-ml.so, or the file named by TK_NVML_LIBRARY.
  // Loaded on first use and never unloaded.
  static Nvml& instance();
  // Tries each name with dlopen; the first that opens and whose nvmlInit_v2 succeeds is used. Never throws.
  explicit Nvml(const std::vector<std::string>& library_names);
  ~Nvml();  // nvmlShutdown + dlclose
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  bool available() const { return api_ != nullptr; }
  // "NVML from libnvidia-ml.so.1, driver 560.35.03", or "NVML not available (no NVIDIA driver): <dlerror>", or
  // "NVML not available: nvmlInit_v2 failed: Driver Not Loaded".
  const std::string& status() const { return status_; }
  std::string driver_version() const;  // "" when unknown
  std::vector<NvmlGpu> gpus() const;   // empty when not available
  // NVML's index of the GPU at this PCI bus id (any format parse_pci_bus_id accepts); -1 when none.
  int index_of_pci_bus_id(const std::string& pci_bus_id) const;

 private:
  struct Api;
  void* library_ = nullptr;
  std::unique_ptr<Api> api_;
  std::string status_;
};

}  // namespace tk::runtime
