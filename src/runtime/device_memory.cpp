#include "runtime/device_memory.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "runtime/cuda_device.h"
#include "runtime/log.h"
#include "trainkit/core/error.h"

namespace tk::runtime {
namespace {

size_t round_up(size_t x, size_t to) { return (x + to - 1) / to * to; }

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos && colon + 2 <= line.size()) return line.substr(colon + 2);
    }
  return "cpu";
}

size_t physical_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : size_t{16} << 30;
}

class HostRegions final : public RegionSource {
 public:
  void* take(size_t bytes, std::string& error) override {
    void* p = std::aligned_alloc(kAllocationAlignment, round_up(bytes, kAllocationAlignment));
    if (!p) error = "aligned_alloc(" + config::format_bytes(bytes) + ") failed: the host is out of memory";
    return p;
  }
  void give_back(void* base) noexcept override { std::free(base); }
};

}  // namespace

std::unique_ptr<RegionSource> host_region_source() { return std::make_unique<HostRegions>(); }

namespace {
// m with the TK_MEMORY_* settings applied and the process's ledger attached, released to its (never destroyed) owner.
DeviceMemory* configured(std::unique_ptr<DeviceMemory> m) {
  apply_environment(*m);  // may throw (a bad TK_MEMORY_* value): nothing leaks, the next call tries again
  m->use_ledger(process_ledger());
  return m.release();
}

// The CPU's logical devices: cpu:0 alone, unless split by set_logical_device_configuration. Never
// destroyed: tensors with static storage duration may still free into them at exit.
// (The vector is never destroyed either, so the devices stay reachable and leak checkers stay quiet.)
std::vector<DeviceMemory*>& cpu_devices() {
  static auto* devices = new std::vector<DeviceMemory*>{
      configured(std::make_unique<DeviceMemory>(DeviceInfo{Device::cpu(), cpu_model_name(), physical_memory()}))};
  return *devices;
}
// The CUDA devices' memories, created when each is first asked for (never destroyed, as the cpu's).
std::vector<DeviceMemory*>& cuda_memories() {
  static auto* memories = new std::vector<DeviceMemory*>;
  return *memories;
}
std::mutex& devices_mutex() {
  static std::mutex mu;
  return mu;
}

// A CUDA device's memory: cudaMalloc regions, and by default TensorFlow's budget (runtime/cuda_device.h:
// the memory free now less a system reserve); TK_MEMORY_* override it in apply_environment.
DeviceMemory* new_cuda_memory(const CudaDevice& d) {
  const CudaMemInfo now = cuda_mem_get_info(d.ordinal);
  auto m = std::make_unique<DeviceMemory>(d.info, cuda_region_source(d.ordinal));
  const size_t reserve = gpu_system_reserve(now.free, d.info.compute_capability_major);
  if (now.free > reserve)
    m->set_limit(
        now.free - reserve,
        "free " + config::format_bytes(now.free) + " less a " + config::format_bytes(reserve) + " system reserve",
        false);
  else
    m->set_limit(now.free, "free memory (" + config::format_bytes(now.free) + ")", false);
  return configured(std::move(m));
}
}  // namespace

DeviceMemory& DeviceMemory::get(Device device) {
  std::lock_guard lock(devices_mutex());
  if (device.kind == DeviceKind::cuda) {
    const CudaDevice& d = cuda_device(device.index);  // throws Unsupported with the reason
    std::vector<DeviceMemory*>& memories = cuda_memories();
    const auto i = static_cast<size_t>(device.index);
    if (memories.size() <= i) memories.resize(i + 1, nullptr);
    if (!memories[i]) memories[i] = new_cuda_memory(d);
    return *memories[i];
  }
  std::vector<DeviceMemory*>& cpus = cpu_devices();
  if (device.kind != DeviceKind::cpu || device.index < 0 || static_cast<size_t>(device.index) >= cpus.size())
    throw Unsupported("device " + device.to_string() + " is not available (logical cpu devices: " +
                      std::to_string(cpus.size()) + ", see tk::config::set_logical_device_configuration)");
  return *cpus[static_cast<size_t>(device.index)];
}

std::vector<DeviceInfo> DeviceMemory::all() {
  std::lock_guard lock(devices_mutex());
  std::vector<DeviceInfo> out;
  for (DeviceMemory* m : cpu_devices()) out.push_back(m->device_info());
  for (const CudaDevice& d : cuda_devices().devices) out.push_back(d.info);
  return out;
}

void DeviceMemory::split_cpu(const std::vector<size_t>& limits) {
  std::lock_guard lock(devices_mutex());
  std::vector<DeviceMemory*>& cpus = cpu_devices();
  DeviceMemory& physical = *cpus[0];
  if (cpus.size() > 1) throw InvalidArgument("set_logical_device_configuration: the cpu is already split");
  if (physical.in_use())
    throw InvalidArgument(
        "set_logical_device_configuration: cpu:0 is already in use; split it before creating tensors");
  if (limits.empty()) throw InvalidArgument("set_logical_device_configuration: give at least one memory limit");
  size_t sum = 0;
  for (size_t l : limits) sum += l;
  const size_t budget = physical.info().limit;
  if (sum > budget)
    throw InvalidArgument("set_logical_device_configuration: the limits add up to " + config::format_bytes(sum) +
                          ", more than the cpu budget of " + config::format_bytes(budget));
  const DeviceInfo base = physical.device_info();
  physical.set_limit(limits[0], "logical device 0 of " + std::to_string(limits.size()));
  for (size_t i = 1; i < limits.size(); ++i) {
    auto* m = new DeviceMemory(DeviceInfo{Device::cpu(static_cast<int>(i)), base.name, base.total});
    m->set_limit(limits[i], "logical device " + std::to_string(i) + " of " + std::to_string(limits.size()));
    m->set_growth(physical.info().growth);
    m->use_ledger(process_ledger());
    cpus.push_back(m);
  }
}

DeviceMemory::DeviceMemory(DeviceInfo info, std::unique_ptr<RegionSource> source)
    : info_(std::move(info)), source_(std::move(source)), limit_(info_.total) {
  if (!source_) source_ = host_region_source();
}

DeviceMemory::~DeviceMemory() {
  for (Region& r : regions_)
    if (r.base) source_->give_back(r.base);
}

bool DeviceMemory::in_use() const {
  std::lock_guard lock(mu_);
  return announced_;
}

void DeviceMemory::set_limit(size_t bytes, std::string source, bool chosen) {
  std::lock_guard lock(mu_);
  limit_ = bytes;
  limit_source_ = std::move(source);
  limit_chosen_ = chosen;
}

void DeviceMemory::use_ledger(Ledger* ledger) {
  std::lock_guard lock(mu_);
  ledger_ = ledger;
}

bool DeviceMemory::lease_covers(size_t reserved) {
  if (!ledger_ || (lease_.held() && lease_.bytes() >= reserved)) return true;
  if (!lease_.held()) {  // the first lease may wait in the queue: this process holds nothing of the device yet
    const size_t margin = std::max<size_t>(size_t{64} << 20, reserved / 4);
    size_t want = limit_chosen_ ? limit_ : std::min(limit_, reserved + margin);
    if (!limit_chosen_) {  // the margin is a wish: take less rather than queue when colleagues hold the rest
      try {
        const DeviceUsage u = ledger_->usage(lease_device(info_));
        if (u.available() < want && u.available() >= reserved) want = static_cast<size_t>(u.available());
      } catch (const Error&) {  // acquire() below reports an unreadable ledger
      }
    }
    lease_ = ledger_->acquire(lease_device(info_), want, lease_wait_policy());
    if (lease_.bytes() >= reserved) return true;
    region_error_ = "the lease this job was given is " + config::format_bytes(lease_.bytes());
    return false;
  }
  // Growing never waits (two jobs that each wait to grow would wait for each other): the lease grows by half, or
  // by just what is needed, or the region is refused with the holders named.
  std::string why;
  const size_t want = std::min(limit_, std::max(reserved + (size_t{64} << 20), lease_.bytes() / 2 * 3));
  if (ledger_->grow(lease_, want, &why) || (want > reserved && ledger_->grow(lease_, reserved, &why))) return true;
  region_error_ = why;
  return false;
}

size_t DeviceMemory::leasable() {
  std::lock_guard lock(mu_);
  if (!ledger_ || limit_chosen_) return limit_;
  try {
    const DeviceUsage u = ledger_->usage(lease_device(info_));
    const uint64_t mine = lease_.held() ? lease_.bytes() : 0;
    const uint64_t others = u.leased > mine ? u.leased - mine : 0;
    const uint64_t taken = u.outside + others;
    return static_cast<size_t>(std::min<uint64_t>(limit_, u.capacity > taken ? u.capacity - taken : 0));
  } catch (const Error&) {  // an unreadable ledger is reported when the lease is taken; plan for the budget here
    return limit_;
  }
}

void DeviceMemory::set_growth(bool growth) {
  std::lock_guard lock(mu_);
  growth_ = growth;
}

void DeviceMemory::announce() {
  if (announced_) return;
  if (limit_chosen_ && !lease_covers(limit_))
    throw OutOfMemoryError("could not lease the budget of " + config::format_bytes(limit_) + " on " +
                           info_.device.to_string() + ": " + region_error_);
  announced_ = true;
  // TensorFlow's "Created device ... with N MB memory" line (an INFO line), saying where the budget came from.
  if (log_enabled(LogSeverity::info)) {
    if (info_.pci_bus_id.empty())
      std::printf("Created device %s with %s budget (%s, %s) -> physical device: %s, total %s\n",
                  info_.device.to_string().c_str(), config::format_bytes(limit_).c_str(), limit_source_.c_str(),
                  growth_ ? "growth" : "reserved up front", info_.name.c_str(),
                  config::format_bytes(info_.total).c_str());
    else  // a GPU, as TensorFlow prints it: "-> device: 0, name: ..., pci bus id: ..., compute capability: 9.0"
      std::printf(
          "Created device %s with %s budget (%s, %s) -> device: %d, name: %s, pci bus id: %s, compute capability: "
          "%d.%d, total %s\n",
          info_.device.to_string().c_str(), config::format_bytes(limit_).c_str(), limit_source_.c_str(),
          growth_ ? "growth" : "reserved up front", info_.device.index, info_.name.c_str(), info_.pci_bus_id.c_str(),
          info_.compute_capability_major, info_.compute_capability_minor, config::format_bytes(info_.total).c_str());
    std::fflush(stdout);
  }
  if (!growth_ && !add_region(limit_))
    throw OutOfMemoryError("could not reserve the budget of " + config::format_bytes(limit_) + " on " +
                           info_.device.to_string() + (region_error_.empty() ? "" : ": " + region_error_) +
                           " (lower TK_MEMORY_LIMIT / TK_MEMORY_FRACTION)");
}

bool DeviceMemory::add_region(size_t bytes) {
  region_error_.clear();
  // Small allocations share 2 MiB regions; a large one gets a region of its own size (to 64 KiB), so no 2 MiB
  // tail is stranded behind it (three 3.06 MiB tensors in 4 MiB regions left 2.8 MiB unusable, and a batch size
  // the plan said fits ran out of memory).
  size_t size = !growth_ ? bytes : bytes < kRegionGranularity ? kRegionGranularity : round_up(bytes, size_t{64} << 10);
  if (reserved_ + size > limit_) size = bytes;  // the last region may be smaller than the granularity
  if (size == 0 || reserved_ + size > limit_) return false;
  if (!lease_covers(reserved_ + size)) return false;
  void* base = source_->take(round_up(size, kAllocationAlignment), region_error_);
  if (!base) return false;
  regions_.push_back({static_cast<char*>(base), size, 0});
  blocks_.emplace(static_cast<char*>(base), Block{size, true, static_cast<int>(regions_.size() - 1), {}});
  reserved_ += size;
  return true;
}

void* DeviceMemory::allocate(size_t bytes, const std::string& owner) {
  std::lock_guard lock(mu_);
  announce();
  const size_t need = round_up(std::max<size_t>(bytes, 1), kAllocationAlignment);
  auto best_fit = [&] {
    auto best = blocks_.end();
    for (auto it = blocks_.begin(); it != blocks_.end(); ++it)
      if (it->second.free && it->second.size >= need && (best == blocks_.end() || it->second.size < best->second.size))
        best = it;
    return best;
  };
  auto it = best_fit();
  if (it == blocks_.end()) {
    if (!growth_ || !add_region(need)) out_of_memory(bytes, owner);
    it = best_fit();
  }
  Block& b = it->second;
  if (b.size > need) {  // split: the tail stays free
    blocks_.emplace(it->first + need, Block{b.size - need, true, b.region, {}});
    b.size = need;
  }
  b.free = false;
  b.owner = owner;
  ++regions_[static_cast<size_t>(b.region)].used_blocks;
  current_ += need;
  peak_ = std::max(peak_, current_);
  return it->first;
}

void DeviceMemory::free(void* p) noexcept {
  if (!p) return;
  std::lock_guard lock(mu_);
  auto it = blocks_.find(static_cast<char*>(p));
  if (it == blocks_.end() || it->second.free) return;  // not ours (or a double free): ignore
  Block& b = it->second;
  b.free = true;
  b.owner.clear();
  current_ -= b.size;
  Region& r = regions_[static_cast<size_t>(b.region)];
  --r.used_blocks;
  // Coalesce with the free neighbours of the same region.
  auto next = std::next(it);
  if (next != blocks_.end() && next->second.free && next->second.region == b.region) {
    b.size += next->second.size;
    blocks_.erase(next);
  }
  if (it != blocks_.begin()) {
    auto prev = std::prev(it);
    if (prev->second.free && prev->second.region == b.region) {
      prev->second.size += b.size;
      blocks_.erase(it);
      it = prev;
    }
  }
  // A region with nothing left in it goes back to the device (under growth).
  if (growth_ && r.used_blocks == 0) {
    blocks_.erase(it);
    source_->give_back(r.base);
    reserved_ -= r.size;
    r = Region{nullptr, 0, 0};
  }
}

MemoryInfo DeviceMemory::info() const {
  std::lock_guard lock(mu_);
  MemoryInfo m;
  m.current = current_, m.peak = peak_, m.reserved = reserved_, m.limit = limit_, m.total = info_.total,
  m.growth = growth_, m.limit_source = limit_source_;
  size_t free_bytes = 0;
  for (const auto& [p, b] : blocks_) {
    if (b.free) {
      free_bytes += b.size;
      m.largest_free_block = std::max(m.largest_free_block, b.size);
    } else {
      ++m.allocations;
    }
  }
  m.fragmentation = free_bytes ? 1.0 - double(m.largest_free_block) / double(free_bytes) : 0.0;
  return m;
}

void DeviceMemory::reset_peak() {
  std::lock_guard lock(mu_);
  peak_ = current_;
}

namespace {
thread_local const FileOperation* current_file_operation = nullptr;
}

FileOperation::FileOperation(std::string what) : what_(std::move(what)), outer_(current_file_operation) {
  current_file_operation = this;
}
FileOperation::~FileOperation() { current_file_operation = outer_; }
const std::string* FileOperation::current() {
  return current_file_operation ? &current_file_operation->what_ : nullptr;
}

void DeviceMemory::out_of_memory(size_t bytes, const std::string& owner) const {
  // Called with mu_ held: gather the numbers directly.
  size_t free_bytes = 0, largest = 0;
  std::vector<std::pair<std::string, size_t>> live;
  for (const auto& [p, b] : blocks_) {
    if (b.free)
      free_bytes += b.size, largest = std::max(largest, b.size);
    else
      live.emplace_back(b.owner.empty() ? "(unnamed tensor)" : b.owner, b.size);
  }
  std::sort(live.begin(), live.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  using config::format_bytes;
  std::string r = "OOM when allocating " + format_bytes(bytes) + " for '" + owner + "' on " + info_.device.to_string() +
                  ": budget " + format_bytes(limit_) + " (" + limit_source_ + "), in use " + format_bytes(current_) +
                  ", reserved " + format_bytes(reserved_) + ", largest free block " + format_bytes(largest) +
                  ", fragmentation " +
                  std::to_string(int(100.0 * (free_bytes ? 1.0 - double(largest) / double(free_bytes) : 0.0))) + "%";
  if (!region_error_.empty())
    r += "\n  the budget allowed it but the device refused: " + region_error_ +
         (info_.device.kind == DeviceKind::cuda ? " (other processes may hold the GPU's memory: see `trainkit smi`)"
                                                : "");
  r += "\n  largest live allocations:";
  for (size_t i = 0; i < std::min<size_t>(10, live.size()); ++i)
    r += "\n    " + format_bytes(live[i].second) + "  " + live[i].first;
  if (live.empty()) r += " none";
  // The remedies follow what failed: a model's memory (arena, weights, optimizer state) or data.
  auto has = [&](const char* part) { return owner.find(part) != std::string::npos; };
  auto ends = [&](const char* tail) { return owner.ends_with(tail); };
  const bool model_memory = has("program arena") || has(" slot ") || has("gradient accumulator") || ends("/kernel") ||
                            ends("/bias") || ends("/gamma") || ends("/beta") || ends("/moving_mean") ||
                            ends("/moving_variance");
  // A file operation's memory (io/file_staging.h tags it "<file>: staging for <tensor>" or "<file>: read of
  // <tensor>"): the batch size has nothing to do with it.
  const std::string* file_operation = FileOperation::current();
  const bool file_memory = file_operation || has(": staging for ") || has(": read of ");
  if (file_memory)
    r += "\n  what to do (this allocation is part of " + (file_operation ? *file_operation : std::string("a file")) +
         ", not the training step: a smaller batch size does not help): (1) when saving: nothing is lost (the model, "
         "its optimizer state and the previous file are intact); "
         "a save needs at most one staging buffer (4 MiB; `trainkit fit --save` retries with the smallest one), so "
         "free or add that much and save again; (2) when loading: the file's tensors are read beside the model's own "
         "memory, so the budget must hold the model's weights twice while it loads (`trainkit plan` reads no weights: "
         "plan first); or raise the budget (TK_MEMORY_LIMIT / TK_MEMORY_FRACTION)";
  else if (model_memory)
    r += "\n  what to do, in order: (1) a smaller batch size (`trainkit plan` or Model::largest_batch_that_fits shows "
         "the largest that fits; fit(batch_size = tk::kAutoBatchSize) picks it, micro_batch_size keeps the batch); "
         "(2) mixed precision (dtype policy mixed_bfloat16 or mixed_float16: activations and their gradients in 2 "
         "bytes; a model's report says below what it saves); (3) freeze layers (trainable = false: no "
         "gradients, no optimizer state); (4) rematerialization (model.rematerialization = tk::Remat::on; automatic "
         "when the plan does not fit); or raise the budget (TK_MEMORY_LIMIT / TK_MEMORY_FRACTION)";
  else
    r += "\n  what to do, in order (this is data, not the model): (1) stream it from the file instead of loading it "
         "whole (a tk::data::Dataset over the reader, or `trainkit fit --data FILE`: one shuffle buffer and a few "
         "batches in memory); (2) keep it narrow: uint8 images and float16 features stay in their dtype and are "
         "converted batch by batch as they are staged (a Rescaling(1/255) first layer instead of dividing the "
         "array, which quadruples it); (3) keep it in host memory (Dataset::on_device only when it fits next to "
         "the model); or raise the budget (TK_MEMORY_LIMIT / TK_MEMORY_FRACTION)";
  throw OutOfMemoryError(r);
}

}  // namespace tk::runtime
