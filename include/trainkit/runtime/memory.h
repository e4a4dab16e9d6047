// Device memory: budgets, statistics and configuration (TensorFlow's tf.config, made explicit).
//
//   tk::config::set_memory_limit(tk::Device::cpu(), 2ull << 30);   // before the device is first used
//   // or: TK_MEMORY_LIMIT=1.5GiB, TK_MEMORY_FRACTION=0.45, TK_MEMORY_GROWTH=false in the environment
//   // (they apply to every device: the cpu and each CUDA device)
//   tk::MemoryInfo m = tk::config::get_memory_info();              // current, peak, reserved, limit, ...
//   tk::config::reset_peak_memory();
//
// Every tensor, weight, optimizer slot and program arena is charged to its device's budget. Exceeding it
// throws tk::OutOfMemoryError whose message is a report: what was requested and for whom, the budget,
// what is in use and by whom (the largest live allocations by owner), fragmentation, and what to do.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "trainkit/core/device.h"

namespace tk {

struct MemoryInfo {
  size_t current = 0;             // bytes in live allocations
  size_t peak = 0;                // highest `current` since start or reset_peak_memory()
  size_t reserved = 0;            // bytes taken from the device (regions the allocator holds)
  size_t limit = 0;               // the budget
  size_t total = 0;               // the physical device's memory
  int64_t allocations = 0;        // live allocations
  size_t largest_free_block = 0;  // inside reserved regions
  double fragmentation = 0.0;     // 1 - largest free block / free bytes inside reserved regions
  bool growth = true;             // reserve on demand (true) or the whole limit up front
  std::string limit_source;       // where the budget came from: "physical memory", "TK_MEMORY_FRACTION=0.45", ...
};

struct DeviceInfo {
  Device device;
  std::string name;  // the CPU model, or the GPU's name ("NVIDIA H200")
  size_t total = 0;  // physical memory in bytes
  // CUDA devices only (empty / 0 for the cpu):
  std::string uuid = {};        // "GPU-5a1c...", as nvidia-smi prints it
  std::string pci_bus_id = {};  // "0000:19:00.0" (domain:bus:device.function)
  int compute_capability_major = 0, compute_capability_minor = 0;
  size_t free = 0;  // free device memory when listed (cudaMemGetInfo: all processes' use counts)
};

namespace config {

// Devices this process may use: the cpu (and its logical devices), then the CUDA devices cuda:0, cuda:1, ...
// when the CUDA backend is built and a device is present. CUDA_VISIBLE_DEVICES is applied by the CUDA runtime
// itself; TK_VISIBLE_DEVICES then selects and renumbers among those, the same way ("1,0", "cuda:1", a UUID
// "GPU-5a1c..." or a prefix of it; "-1", "none" or "cpu": no GPU; the cpu is always visible). After
// set_visible_devices, only the devices it named.
std::vector<DeviceInfo> list_devices();
// Why list_devices() has no CUDA device, e.g. "CUDA driver not found (cudaErrorInsufficientDriver)" or "this
// build has no CUDA backend (...)"; empty when there is at least one.
std::string no_cuda_device_reason();
// Restricts the devices list_devices() reports; each must exist (Unsupported otherwise).
void set_visible_devices(const std::vector<Device>& devices);
// Budgets; each throws InvalidArgument once the device has been used (as TensorFlow's
// "cannot be modified after being initialized").
void set_memory_limit(Device device, size_t bytes);
void set_memory_fraction(Device device, double fraction);
void set_memory_growth(Device device, bool growth);
MemoryInfo get_memory_info(Device device = Device::cpu());
// Splits a physical device into logical devices (cpu:0, cpu:1, ...) with their own budgets, as
// TensorFlow's set_logical_device_configuration; before first use. The limits must fit the budget.
void set_logical_device_configuration(Device physical, const std::vector<size_t>& memory_limits);
void reset_peak_memory(Device device = Device::cpu());
// Parses "1.5GiB", "512MB", "1024" (bytes); KB/MB/GB are powers of 1000, KiB/MiB/GiB of 1024.
size_t parse_bytes(const std::string& text);
std::string format_bytes(size_t bytes);  // "1.50 GiB"

}  // namespace config
}  // namespace tk
