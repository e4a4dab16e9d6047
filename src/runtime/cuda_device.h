// CUDA devices: discovery (CUDA runtime, joined with NVML by PCI bus id), TK_VISIBLE_DEVICES, the default
// budget, and the cudaMalloc region source under runtime::DeviceMemory. Implemented in cuda_device.cpp, whose
// CUDA part is compiled only with TK_HAVE_CUDA (CMake TK_CUDA); without it there are no CUDA devices and
// the reason says that the build has no CUDA backend.
//
//   const tk::runtime::CudaDevices& c = tk::runtime::cuda_devices();   // discovered once per process
//   if (c.devices.empty()) std::puts(c.reason.c_str());                 // "CUDA driver not found (...)"
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "runtime/device_memory.h"
#include "trainkit/runtime/memory.h"

namespace tk::runtime {

struct CudaDevice {
  DeviceInfo info;      // device cuda:N (N = position in CudaDevices::devices), name, uuid, pci bus id, ...
  int ordinal = 0;      // the CUDA runtime's device number (after CUDA_VISIBLE_DEVICES)
  int nvml_index = -1;  // the same GPU in NVML's numbering (all GPUs of the machine); -1 without NVML
};

struct CudaDevices {
  bool built = false;               // this build has the CUDA backend (TK_HAVE_CUDA)
  std::vector<CudaDevice> devices;  // visible devices, cuda:0, cuda:1, ...
  std::string reason;               // why `devices` is empty ("" otherwise)
  std::string warning;              // a TK_VISIBLE_DEVICES entry that names no device ("" when none)
  int runtime_version = 0;          // CUDART_VERSION style: 13000 = 13.0
  int driver_version = 0;           // 0: no driver
};

// Discovered on first use (thread-safe), never again: CUDA_VISIBLE_DEVICES / TK_VISIBLE_DEVICES are read then.
const CudaDevices& cuda_devices();
bool cuda_built();
// The same without discovering devices (no CUDA call): for `trainkit --help`.
bool cuda_backend_compiled();
// The CUDA device behind cuda:N; Unsupported (with the reason) when there is none.
const CudaDevice& cuda_device(int index);

// Free and total memory of a device now (cudaMemGetInfo; creates the device's context on first use).
struct CudaMemInfo {
  size_t free = 0, total = 0;
};
CudaMemInfo cuda_mem_get_info(int ordinal);

// The default budget of a CUDA device, TensorFlow's rule: the memory free when the device is first used less
// a reserve for the system (cuDNN/cuBLAS workspaces, the context, other libraries): 225 MiB when less than
// 2 GiB is free, else 500 MiB up to compute capability 6.x, 1050 MiB for 7.x, 1536 MiB for 8.x and 1800 MiB
// from 9.0 (TensorFlow's MinSystemMemory). TK_MEMORY_LIMIT / TK_MEMORY_FRACTION (of the total) override it.
size_t gpu_system_reserve(size_t available, int compute_capability_major);

// Regions of a CUDA device: cudaMalloc / cudaFree on that device (the caller's current device is restored).
std::unique_ptr<RegionSource> cuda_region_source(int ordinal);
// Byte operations on device memory, both done when they return (cudaMemset / cudaMemcpy with cudaMemcpyDefault, which
// handles host<->device and device<->device through unified addressing, each followed by a synchronization of the
// legacy stream they were queued on: non-blocking compute streams never wait for it).
void cuda_memset_zero(void* p, size_t bytes, int ordinal);
void cuda_copy(void* dst, const void* src, size_t bytes);

// --- pure helpers (compiled in every build; tested without a GPU)

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" from the 16 bytes of cudaUUID_t, as nvidia-smi prints it.
std::string format_gpu_uuid(const unsigned char bytes[16]);
// "0000:19:00.0" (lower-case hex, 4-digit domain as TensorFlow and lspci print it).
std::string format_pci_bus_id(unsigned domain, unsigned bus, unsigned device);
// Parses "0000:19:00.0", NVML's "00000000:19:00.0" or "19:00.0"; false when it is not a PCI bus id.
bool parse_pci_bus_id(const std::string& text, unsigned& domain, unsigned& bus, unsigned& device);
// TK_VISIBLE_DEVICES: indices into `all` (CUDA runtime order), in the order the spec names them; an empty spec
// selects all; "-1", "none", "cpu" or "cpu:N" entries select no GPU. Entries: "N", "cuda:N", "gpu:N", a UUID
// or a unique prefix of one ("GPU-5a1c"). An entry naming no device (or a repeated one) is skipped and
// described in `error`.
std::vector<size_t> select_visible_gpus(const std::vector<DeviceInfo>& all, const std::string& spec,
                                        std::string& error);

}  // namespace tk::runtime
