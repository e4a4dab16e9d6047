// One device's memory: a budget, a best-fit allocator with coalescing over regions taken from the
// device on demand (256-byte aligned), an owner tag per allocation, and statistics.
//
//   auto& mem = tk::runtime::DeviceMemory::get(tk::Device::cpu());
//   void* p = mem.allocate(bytes, "dense/kernel");    // throws OutOfMemoryError with a report
//   mem.free(p);
#pragma once
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/lease.h"
#include "trainkit/runtime/memory.h"

namespace tk::runtime {

inline constexpr size_t kAllocationAlignment = 256;
inline constexpr size_t kRegionGranularity = size_t{2} << 20;  // small allocations share regions of 2 MiB

// Where a device's regions come from: host memory (aligned_alloc) for the cpu, cudaMalloc for a CUDA device
// (runtime/cuda_device.cpp). The allocator above it is the same for every device.
class RegionSource {
 public:
  virtual ~RegionSource() = default;
  // `bytes` (a multiple of kAllocationAlignment), kAllocationAlignment-aligned; nullptr when the device cannot
  // give it, with the reason in `error` ("cudaMalloc(2.00 MiB): out of memory (cudaErrorMemoryAllocation)").
  virtual void* take(size_t bytes, std::string& error) = 0;
  virtual void give_back(void* base) noexcept = 0;
};
std::unique_ptr<RegionSource> host_region_source();

class DeviceMemory {
 public:
  // cpu:N or cuda:N (Unsupported, naming the reason, when the device does not exist).
  static DeviceMemory& get(Device device);
  static std::vector<DeviceInfo> all();  // the cpu's logical devices, then the visible CUDA devices
  // Splits the physical cpu into logical devices cpu:0..n-1 with these budgets (before first use).
  static void split_cpu(const std::vector<size_t>& limits);
  // A standalone instance (tests); the process-wide ones come from get(). Regions come from `source`.
  explicit DeviceMemory(DeviceInfo info, std::unique_ptr<RegionSource> source = host_region_source());
  ~DeviceMemory();  // gives every region back (standalone instances; the process-wide ones live forever)
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  void* allocate(size_t bytes, const std::string& owner);
  void free(void* p) noexcept;
  MemoryInfo info() const;
  void reset_peak();

  // Budget configuration; only before the first allocation.
  // source: "TK_MEMORY_LIMIT", "fraction 0.45 of total", ...; `chosen` false for a default that nobody asked for
  // (a GPU's free memory): the lease then grows with use instead of covering the whole limit up front.
  void set_limit(size_t bytes, std::string source, bool chosen = true);
  void set_growth(bool growth);
  bool in_use() const;
  // Takes this device's memory through the machine's lease ledger (runtime/lease.h): with a chosen limit, a lease
  // of the whole limit at first use (waiting in the queue per lease_wait_policy()); without one, a lease that
  // grows with the regions taken (plus a margin). The process-wide instances do; standalone ones do not.
  void use_ledger(Ledger* ledger);
  // What this process could hold of the device now: the budget, and without a chosen limit no more than the lease
  // ledger could grant (its capacity less memory outside the ledger and other processes' leases), so that
  // batch_size=auto does not plan for memory colleagues hold. Reads the ledger (a folder lock): not per step.
  size_t leasable();
  // This device's lease (an empty one when none is held).
  const Lease& lease() const { return lease_; }
  const DeviceInfo& device_info() const { return info_; }

 private:
  struct Block {
    size_t size;
    bool free;
    int region;
    std::string owner;
  };
  struct Region {
    char* base;
    size_t size;
    size_t used_blocks;  // live allocations inside
  };
  // Adds a region of at least `bytes` as one free block; false when the budget does not allow it.
  bool add_region(size_t bytes);
  bool lease_covers(size_t reserved);  // takes or grows the lease; false with the reason in region_error_
  void announce();                     // the "Created device" line, once
  [[noreturn]] void out_of_memory(size_t bytes, const std::string& owner) const;

  mutable std::mutex mu_;
  DeviceInfo info_;
  std::unique_ptr<RegionSource> source_;
  std::string region_error_;  // why the device last refused a region the budget allowed
  size_t limit_, current_ = 0, peak_ = 0, reserved_ = 0;
  bool growth_ = true, announced_ = false, limit_chosen_ = false;
  Ledger* ledger_ = nullptr;
  Lease lease_;
  std::string limit_source_ = "physical memory";
  std::map<char*, Block> blocks_;  // every block of every region, by address
  std::vector<Region> regions_;    // index = Block::region; a released region has base == nullptr
};

// While one is alive, allocations on this thread are part of reading or writing a file ("saving m.keras"): an
// out-of-memory report says so and gives file advice, never the training step's (a smaller batch size).
class FileOperation {
 public:
  explicit FileOperation(std::string what);
  ~FileOperation();
  FileOperation(const FileOperation&) = delete;
  FileOperation& operator=(const FileOperation&) = delete;
  // The innermost operation on this thread, or null.
  static const std::string* current();

 private:
  std::string what_;
  const FileOperation* outer_;
};

// The process's ledger (TK_LEASE_DIR or the default folder); nullptr when TK_LEASE=off or no folder is usable
// (then a warning says once that this job's memory is not coordinated with other jobs).
Ledger* process_ledger();
LeaseDevice lease_device(const DeviceInfo& info);

// Reads TK_MEMORY_LIMIT, TK_MEMORY_FRACTION and TK_MEMORY_GROWTH (config.cpp).
void apply_environment(DeviceMemory& memory);

}  // namespace tk::runtime
