// The CUDA runtime layer (issue 6): NVML loaded at run time, device discovery, TK_VISIBLE_DEVICES, the GPU
// budget and the region source under DeviceMemory. The tests named Cuda*Gpu* need a CUDA device and skip with
// "no CUDA device: <reason>" when there is none; everything else runs on every machine, with or without the
// CUDA backend built.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/cuda_device.h"
#include "runtime/device_memory.h"
#include "runtime/nvml.h"
#include "trainkit/runtime/memory.h"
#include "trainkit/trainkit.h"

namespace tk {
namespace {

using runtime::CudaDevices;
using runtime::DeviceMemory;
using runtime::Nvml;

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}
#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_TRUE(contains((haystack), (needle))) << "expected to find \"" << (needle) << "\" in:\n" << (haystack)

#define SKIP_WITHOUT_GPU()                                                                                             \
  do {                                                                                                                 \
    if (runtime::cuda_devices().devices.empty()) GTEST_SKIP() << "no CUDA device: " << runtime::cuda_devices().reason; \
  } while (0)

constexpr size_t MiB = size_t{1} << 20;

// ---------------------------------------------------------------- NVML, everywhere

TEST(CudaNvml, MissingLibraryIsAClearNotAvailableState) {
  Nvml nvml({"libtrainkit-no-such-nvml.so.1"});
  EXPECT_FALSE(nvml.available());
  EXPECT_CONTAINS(nvml.status(), "NVML not available (no NVIDIA driver)");
  EXPECT_CONTAINS(nvml.status(), "libtrainkit-no-such-nvml.so.1");
  EXPECT_TRUE(nvml.gpus().empty());
  EXPECT_EQ(nvml.driver_version(), "");
  EXPECT_EQ(nvml.index_of_pci_bus_id("0000:19:00.0"), -1);
}

TEST(CudaNvml, ALibraryWithoutNvmlEntryPointsIsRejected) {
  Nvml nvml({"libtrainkit-no-such-nvml.so.1", "libz.so.1"});  // zlib opens, but has no nvmlInit_v2
  EXPECT_FALSE(nvml.available());
  EXPECT_CONTAINS(nvml.status(), "NVML not available");
  EXPECT_CONTAINS(nvml.status(), "libz.so.1 lacks nvmlInit_v2");
  EXPECT_TRUE(nvml.gpus().empty());
}

TEST(CudaNvml, NoNamesAtAll) {
  Nvml nvml(std::vector<std::string>{});
  EXPECT_FALSE(nvml.available());
  EXPECT_CONTAINS(nvml.status(), "NVML not available (no NVIDIA driver)");
}

TEST(CudaNvml, TheProcessWideInstanceNeverThrows) {
  const Nvml& nvml = Nvml::instance();
  EXPECT_FALSE(nvml.status().empty());
  if (!nvml.available()) {
    EXPECT_CONTAINS(nvml.status(), "NVML not available");
    EXPECT_TRUE(nvml.gpus().empty());
  }
}

// ---------------------------------------------------------------- pure helpers, everywhere

TEST(CudaHelpers, UuidAndPciBusIdFormats) {
  const unsigned char bytes[16] = {0x5a, 0x1c, 0x02, 0xff, 0x10, 0x20, 0x30, 0x40,
                                   0xab, 0xcd, 0x01, 0x23, 0x45, 0x67, 0x89, 0xef};
  EXPECT_EQ(runtime::format_gpu_uuid(bytes), "GPU-5a1c02ff-1020-3040-abcd-0123456789ef");
  EXPECT_EQ(runtime::format_pci_bus_id(0, 0x19, 0), "0000:19:00.0");
  EXPECT_EQ(runtime::format_pci_bus_id(1, 0xab, 0x1f), "0001:ab:1f.0");
  unsigned d = 9, b = 9, v = 9;
  ASSERT_TRUE(runtime::parse_pci_bus_id("00000000:3B:00.0", d, b, v));  // NVML's form
  EXPECT_EQ(d, 0u);
  EXPECT_EQ(b, 0x3bu);
  EXPECT_EQ(v, 0u);
  ASSERT_TRUE(runtime::parse_pci_bus_id("0001:ab:1f.0", d, b, v));
  EXPECT_EQ(d, 1u);
  EXPECT_EQ(b, 0xabu);
  EXPECT_EQ(v, 0x1fu);
  ASSERT_TRUE(runtime::parse_pci_bus_id("19:02.0", d, b, v));  // no domain
  EXPECT_EQ(d, 0u);
  EXPECT_EQ(b, 0x19u);
  EXPECT_EQ(v, 2u);
  for (const char* bad : {"", "19", "zz:00.0", "0000:19:00.x", "0:1:2:3", "123456789:00:00.0"})
    EXPECT_FALSE(runtime::parse_pci_bus_id(bad, d, b, v)) << bad;
}

TEST(CudaHelpers, SystemReserveFollowsTensorFlow) {
  constexpr size_t GiB = size_t{1} << 30;
  EXPECT_EQ(runtime::gpu_system_reserve(1 * GiB, 9), 225 * MiB) << "less than 2 GiB available";
  EXPECT_EQ(runtime::gpu_system_reserve(16 * GiB, 6), 500 * MiB);
  EXPECT_EQ(runtime::gpu_system_reserve(16 * GiB, 7), 1050 * MiB);
  EXPECT_EQ(runtime::gpu_system_reserve(80 * GiB, 8), 1536 * MiB);
  EXPECT_EQ(runtime::gpu_system_reserve(140 * GiB, 9), 1800 * MiB);
}

std::vector<DeviceInfo> fake_gpus() {
  std::vector<DeviceInfo> all(3);
  all[0].uuid = "GPU-aaaa1111-0000-0000-0000-000000000000";
  all[1].uuid = "GPU-aaaa2222-0000-0000-0000-000000000000";
  all[2].uuid = "GPU-bbbb3333-0000-0000-0000-000000000000";
  for (size_t i = 0; i < all.size(); ++i) all[i].device = Device::cuda(static_cast<int>(i));
  return all;
}

TEST(CudaVisibleDevices, SelectsAndOrdersLikeCudaVisibleDevices) {
  const std::vector<DeviceInfo> all = fake_gpus();
  std::string error;
  EXPECT_EQ(runtime::select_visible_gpus(all, "", error), (std::vector<size_t>{0, 1, 2}));
  EXPECT_EQ(error, "");
  EXPECT_EQ(runtime::select_visible_gpus(all, "2,0", error), (std::vector<size_t>{2, 0})) << "order is kept";
  EXPECT_EQ(runtime::select_visible_gpus(all, " cuda:1 , gpu:2", error), (std::vector<size_t>{1, 2}));
  EXPECT_EQ(runtime::select_visible_gpus(all, "GPU-bbbb", error), (std::vector<size_t>{2})) << "UUID prefix";
  EXPECT_EQ(runtime::select_visible_gpus(all, "gpu-AAAA2222", error), (std::vector<size_t>{1}));
  EXPECT_EQ(error, "");
  for (const char* none : {"-1", "none", "cpu", "cpu:0", "cpu,-1"}) {
    EXPECT_TRUE(runtime::select_visible_gpus(all, none, error).empty()) << none;
    EXPECT_EQ(error, "") << none;
  }
  EXPECT_EQ(runtime::select_visible_gpus(all, "cpu,cuda:0", error), (std::vector<size_t>{0}));
}

TEST(CudaVisibleDevices, EntriesThatNameNoDeviceAreSkippedAndDescribed) {
  const std::vector<DeviceInfo> all = fake_gpus();
  std::string error;
  EXPECT_EQ(runtime::select_visible_gpus(all, "0,7", error), (std::vector<size_t>{0}));
  EXPECT_CONTAINS(error, "'7' names no device (3 CUDA devices");
  EXPECT_EQ(runtime::select_visible_gpus(all, "GPU-aaaa", error), (std::vector<size_t>{}));
  EXPECT_CONTAINS(error, "matches 2 GPUs");
  EXPECT_EQ(runtime::select_visible_gpus(all, "1,1", error), (std::vector<size_t>{1}));
  EXPECT_CONTAINS(error, "repeats a device");
  EXPECT_EQ(runtime::select_visible_gpus(all, "tpu:0,1", error), (std::vector<size_t>{1}));
  EXPECT_CONTAINS(error, "'tpu:0' is not a device");
  EXPECT_EQ(runtime::select_visible_gpus({}, "0", error), (std::vector<size_t>{}));
  EXPECT_CONTAINS(error, "(0 CUDA devices");
}

// ---------------------------------------------------------------- the region source under DeviceMemory

// Counts what DeviceMemory takes and gives back; refuses once `capacity` would be exceeded (a "device" that
// is fuller than the budget thinks).
class CountingRegions final : public runtime::RegionSource {
 public:
  struct Counts {
    int taken = 0, given_back = 0;
    size_t live_bytes = 0;
  };
  CountingRegions(Counts& counts, size_t capacity) : counts_(counts), capacity_(capacity) {}
  void* take(size_t bytes, std::string& error) override {
    if (counts_.live_bytes + bytes > capacity_) {
      error = "fake device full";
      return nullptr;
    }
    void* p = std::aligned_alloc(runtime::kAllocationAlignment, bytes);
    ++counts_.taken;
    counts_.live_bytes += bytes;
    sizes_.emplace_back(p, bytes);
    return p;
  }
  void give_back(void* base) noexcept override {
    auto it = std::find_if(sizes_.begin(), sizes_.end(), [&](const auto& s) { return s.first == base; });
    if (it == sizes_.end()) return;
    counts_.live_bytes -= it->second;
    sizes_.erase(it);
    ++counts_.given_back;
    std::free(base);
  }

 private:
  Counts& counts_;
  size_t capacity_;
  std::vector<std::pair<void*, size_t>> sizes_;
};

TEST(CudaRegionSource, RegionsComeFromTheSourceAndGoBackUnderGrowth) {
  CountingRegions::Counts counts;
  {
    DeviceMemory m(DeviceInfo{Device::cuda(0), "fake gpu", 64 * MiB},
                   std::make_unique<CountingRegions>(counts, 64 * MiB));
    void* a = m.allocate(3 * MiB, "a");
    void* b = m.allocate(1 * MiB, "b");
    EXPECT_GE(counts.taken, 1);
    EXPECT_EQ(m.info().reserved, counts.live_bytes);
    m.free(a);
    m.free(b);
    EXPECT_EQ(counts.live_bytes, 0u) << "empty regions go back to the device under growth";
    EXPECT_EQ(counts.given_back, counts.taken);
    EXPECT_EQ(m.info().reserved, 0u);
    m.allocate(1 * MiB, "kept until the destructor");
  }
  EXPECT_EQ(counts.live_bytes, 0u) << "the destructor gives every region back";
  EXPECT_EQ(counts.given_back, counts.taken);
}

TEST(CudaRegionSource, ADeviceThatRefusesARegionTheBudgetAllowsIsNamedInTheReport) {
  CountingRegions::Counts counts;
  DeviceMemory m(DeviceInfo{Device::cuda(0), "fake gpu", 64 * MiB},
                 std::make_unique<CountingRegions>(counts, 8 * MiB));  // budget 64 MiB, device only 8
  try {
    m.allocate(16 * MiB, "dense/kernel");
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    const std::string r = e.what();
    EXPECT_CONTAINS(r, "OOM when allocating 16.00 MiB for 'dense/kernel' on cuda:0");
    EXPECT_CONTAINS(r, "the budget allowed it but the device refused: fake device full");
    EXPECT_CONTAINS(r, "trainkit smi");
  }
  void* p = m.allocate(4 * MiB, "fits");
  EXPECT_NE(p, nullptr);
  m.free(p);
}

// ---------------------------------------------------------------- discovery without a GPU

TEST(CudaDiscovery, WithoutADeviceThereIsAReasonAndNoCudaEntry) {
  const CudaDevices& c = runtime::cuda_devices();
  if (!c.devices.empty()) GTEST_SKIP() << "this machine has a CUDA device (cuda:0 " << c.devices[0].info.name << ")";
  EXPECT_FALSE(c.reason.empty());
  if (c.built)
    EXPECT_TRUE(contains(c.reason, "cudaError") || contains(c.reason, "TK_VISIBLE_DEVICES") ||
                contains(c.reason, "cudaGetDeviceCount"))
        << c.reason;
  else
    EXPECT_CONTAINS(c.reason, "this build has no CUDA backend");
  EXPECT_EQ(config::no_cuda_device_reason(), c.reason);
  for (const DeviceInfo& d : config::list_devices()) EXPECT_EQ(d.device.kind, DeviceKind::cpu) << d.device.to_string();
  EXPECT_EQ(runtime::cuda_built(), c.built);
}

TEST(CudaDiscovery, ACudaTensorWithoutADeviceIsAClearErrorNamingTheDevice) {
  SCOPED_TRACE("reason: " + runtime::cuda_devices().reason);
  if (!runtime::cuda_devices().devices.empty()) GTEST_SKIP() << "this machine has a CUDA device";
  try {
    Tensor t(Shape{4}, DType::f32, Device::cuda(0));
    FAIL() << "expected Unsupported";
  } catch (const Unsupported& e) {
    EXPECT_CONTAINS(std::string(e.what()), "device cuda:0 is not available: no CUDA device: ");
    EXPECT_CONTAINS(std::string(e.what()), runtime::cuda_devices().reason);
  }
  EXPECT_THROW(config::get_memory_info(Device::cuda(0)), Unsupported);
  EXPECT_THROW(config::set_memory_limit(Device::cuda(1), 1 << 20), Unsupported);
  try {
    config::set_visible_devices({Device::cuda(0)});
    FAIL() << "expected Unsupported";
  } catch (const Unsupported& e) {
    EXPECT_CONTAINS(std::string(e.what()), "cuda:0 does not exist (devices: ");
    EXPECT_CONTAINS(std::string(e.what()), "0 cuda; no CUDA device: ");
  }
  EXPECT_THROW(config::set_logical_device_configuration(Device::cuda(0), {MiB}), Unsupported);
}

// ---------------------------------------------------------------- with a GPU (skipped without one)

TEST(CudaGpu, DeviceFieldsFromTheRuntimeAndNvmlAgree) {
  SKIP_WITHOUT_GPU();
  const std::vector<DeviceInfo> devices = config::list_devices();
  const auto gpu =
      std::find_if(devices.begin(), devices.end(), [](const DeviceInfo& d) { return d.device == Device::cuda(0); });
  ASSERT_NE(gpu, devices.end()) << "cuda:0 is listed";
  EXPECT_FALSE(gpu->name.empty());
  EXPECT_TRUE(gpu->uuid.rfind("GPU-", 0) == 0 || gpu->uuid.rfind("MIG-", 0) == 0) << gpu->uuid;
  unsigned d = 0, b = 0, v = 0;
  EXPECT_TRUE(runtime::parse_pci_bus_id(gpu->pci_bus_id, d, b, v)) << gpu->pci_bus_id;
  EXPECT_GE(gpu->compute_capability_major, 5);
  EXPECT_GT(gpu->total, 0u);
  EXPECT_GT(gpu->free, 0u);
  EXPECT_LE(gpu->free, gpu->total);
  const runtime::CudaDevice& cd = runtime::cuda_device(0);
  const Nvml& nvml = Nvml::instance();
  if (!nvml.available()) GTEST_SKIP() << "CUDA works but " << nvml.status();
  ASSERT_GE(cd.nvml_index, 0) << "NVML has a GPU at " << gpu->pci_bus_id;
  const std::vector<runtime::NvmlGpu> gpus = nvml.gpus();
  ASSERT_LT(static_cast<size_t>(cd.nvml_index), gpus.size());
  const runtime::NvmlGpu& g = gpus[static_cast<size_t>(cd.nvml_index)];
  EXPECT_EQ(g.uuid, gpu->uuid) << "the same GPU through NVML and the CUDA runtime";
  // NVML counts the whole card; cudaMemGetInfo's total leaves out what the driver keeps for itself (on an H200 with
  // driver 580: 150754820096 vs 150109880320 bytes, 615 MiB). The same card, so within 2%.
  EXPECT_GE(g.total, gpu->total);
  EXPECT_LE(g.total - gpu->total, g.total / 50) << "NVML " << g.total << " B, CUDA runtime " << gpu->total << " B";
  EXPECT_TRUE(g.memory_known) << g.errors;
}

TEST(CudaGpu, AllocateUnderABudgetAndGiveEveryRegionBack) {
  SKIP_WITHOUT_GPU();
  const runtime::CudaDevice& cd = runtime::cuda_device(0);
  runtime::cuda_mem_get_info(cd.ordinal);  // the context exists before the baseline
  const size_t baseline = runtime::cuda_mem_get_info(cd.ordinal).free;
  {
    DeviceMemory m(cd.info, runtime::cuda_region_source(cd.ordinal));
    m.set_limit(256 * MiB, "test limit");
    std::vector<void*> blocks;
    for (int i = 0; i < 3; ++i) blocks.push_back(m.allocate(64 * MiB, "block " + std::to_string(i)));
    EXPECT_EQ(m.info().current, 192 * MiB);
    EXPECT_GE(baseline - runtime::cuda_mem_get_info(cd.ordinal).free, 192 * MiB) << "cudaMalloc'ed";
    EXPECT_THROW(m.allocate(128 * MiB, "over the budget"), OutOfMemoryError);
    for (void* p : blocks) m.free(p);
    EXPECT_EQ(m.info().reserved, 0u);
    const size_t after = runtime::cuda_mem_get_info(cd.ordinal).free;
    EXPECT_LE(baseline > after ? baseline - after : 0, 2 * MiB) << "cudaFree'd: back to the baseline";
  }
}

TEST(CudaGpu, TensorsOnTheDeviceAreChargedCopiedAndReturned) {
  SKIP_WITHOUT_GPU();
  const Device gpu = Device::cuda(0);
  const runtime::CudaDevice& cd = runtime::cuda_device(0);
  const bool first_use = !DeviceMemory::get(gpu).in_use();
  const MemoryInfo before = config::get_memory_info(gpu);
  runtime::cuda_mem_get_info(cd.ordinal);
  const size_t baseline = runtime::cuda_mem_get_info(cd.ordinal).free;
  {
    testing::internal::CaptureStdout();
    Tensor t(Shape{1024, 1024}, DType::f32, gpu, "test/gpu tensor");  // 4 MiB
    const std::string out = testing::internal::GetCapturedStdout();
    if (first_use) {
      EXPECT_CONTAINS(out, "Created device cuda:0 with ");
      EXPECT_CONTAINS(out, "name: " + cd.info.name);
      EXPECT_CONTAINS(out, "pci bus id: " + cd.info.pci_bus_id);
      EXPECT_CONTAINS(out, "compute capability: " + std::to_string(cd.info.compute_capability_major) + "." +
                               std::to_string(cd.info.compute_capability_minor));
    }
    EXPECT_EQ(t.device(), gpu);
    EXPECT_EQ(config::get_memory_info(gpu).current, before.current + 4 * MiB);
    Tensor c = t.clone();  // cudaMemcpy device -> device
    EXPECT_EQ(c.device(), gpu);
    EXPECT_CONTAINS(c.to_string(4), "device=cuda:0, values=[0, 0, 0, 0, ...]") << "zeroed with cudaMemset";
    Tensor rows = t.slice_rows(2, 4);
    EXPECT_EQ(rows.shape(), (Shape{2, 1024}));
    try {
      (void)t.to(DType::i32);
      FAIL() << "expected Unsupported";
    } catch (const Unsupported& e) {
      EXPECT_CONTAINS(std::string(e.what()), "cuda:0");
    }
  }
  EXPECT_EQ(config::get_memory_info(gpu).current, before.current);
  if (before.current == 0) {
    EXPECT_EQ(config::get_memory_info(gpu).reserved, 0u) << "growth: empty regions went back with cudaFree";
    const size_t after = runtime::cuda_mem_get_info(cd.ordinal).free;
    EXPECT_LE(baseline > after ? baseline - after : 0, 2 * MiB) << "cudaMemGetInfo back to the baseline";
  }
}

TEST(CudaGpu, NvmlSeesThisProcessMemory) {
  SKIP_WITHOUT_GPU();
  const runtime::CudaDevice& cd = runtime::cuda_device(0);
  const Nvml& nvml = Nvml::instance();
  if (!nvml.available()) GTEST_SKIP() << nvml.status();
  DeviceMemory m(cd.info, runtime::cuda_region_source(cd.ordinal));
  void* p = m.allocate(128 * MiB, "visible to NVML");
  const std::vector<runtime::NvmlGpu> gpus = nvml.gpus();
  ASSERT_GE(cd.nvml_index, 0);
  const runtime::NvmlGpu& g = gpus.at(static_cast<size_t>(cd.nvml_index));
  ASSERT_TRUE(g.processes_known) << g.errors;
  const auto self = std::find_if(g.processes.begin(), g.processes.end(), [](const runtime::NvmlProcess& q) {
    return q.pid == static_cast<unsigned>(getpid());
  });
  m.free(p);
  if (self == g.processes.end())
    GTEST_SKIP() << "NVML lists " << g.processes.size()
                 << " processes but none with this PID (a container's PID namespace?)";
  if (self->used_known) EXPECT_GE(self->used, 128 * MiB);
}

// Run by tools/gpu_check.sh in two processes side by side with TK_MEMORY_FRACTION=0.45 and
// TK_GPU_CHECK_HOLD_SECONDS set (skipped otherwise): fills 90% of this process's budget on cuda:0, shows that
// the budget (not the GPU) stops it, holds the memory while the script prints `trainkit smi`, compares NVML's
// figure for this process with the budget, and gives everything back.
TEST(CudaGpuCheck, HoldMemoryUnderTheFractionBudget) {
  const char* hold = std::getenv("TK_GPU_CHECK_HOLD_SECONDS");
  if (!hold || !*hold) GTEST_SKIP() << "run by tools/gpu_check.sh (TK_GPU_CHECK_HOLD_SECONDS)";
  SKIP_WITHOUT_GPU();
  const Device gpu = Device::cuda(0);
  const MemoryInfo budget = config::get_memory_info(gpu);
  std::printf("HOLD pid %d: budget %s (%s) of %s on cuda:0\n", static_cast<int>(getpid()),
              config::format_bytes(budget.limit).c_str(), budget.limit_source.c_str(),
              config::format_bytes(budget.total).c_str());
  constexpr size_t kChunk = 256 * MiB;
  std::vector<Tensor> held;
  for (size_t i = 0; i < static_cast<size_t>(0.9 * double(budget.limit)) / kChunk; ++i)
    held.emplace_back(Shape{static_cast<int64_t>(kChunk / 4)}, DType::f32, gpu, "gpu_check/chunk " + std::to_string(i));
  const size_t in_use = config::get_memory_info(gpu).current;
  EXPECT_LE(in_use, budget.limit);
  EXPECT_THROW(Tensor(Shape{static_cast<int64_t>(budget.limit / 4 / 5)}, DType::f32, gpu, "gpu_check/over budget"),
               OutOfMemoryError)
      << "20% more than the 10% left: the budget refuses it";
  std::printf("HOLD pid %d: holding %s in %zu tensors for %s s\n", static_cast<int>(getpid()),
              config::format_bytes(in_use).c_str(), held.size(), hold);
  std::fflush(stdout);
  std::this_thread::sleep_for(std::chrono::duration<double>(std::strtod(hold, nullptr)));
  const Nvml& nvml = Nvml::instance();
  const runtime::CudaDevice& cd = runtime::cuda_device(0);
  if (nvml.available() && cd.nvml_index >= 0) {
    const std::vector<runtime::NvmlGpu> gpus = nvml.gpus();
    const runtime::NvmlGpu& g = gpus.at(static_cast<size_t>(cd.nvml_index));
    bool found = false;
    for (const runtime::NvmlProcess& p : g.processes)
      if (p.pid == static_cast<unsigned>(getpid()) && p.used_known) {
        found = true;
        std::printf("HOLD pid %d: NVML says this process uses %s (budget %s; the CUDA context is outside it)\n",
                    static_cast<int>(getpid()), config::format_bytes(p.used).c_str(),
                    config::format_bytes(budget.limit).c_str());
        EXPECT_LE(p.used, budget.limit + (size_t{1} << 30)) << "within the budget plus 1 GiB for the context";
      }
    if (!found)
      std::printf("HOLD pid %d: NVML lists no process with this PID (%zu processes; a container's PID namespace?)\n",
                  static_cast<int>(getpid()), g.processes.size());
  } else {
    std::printf("HOLD pid %d: %s\n", static_cast<int>(getpid()), nvml.status().c_str());
  }
  held.clear();
  EXPECT_EQ(config::get_memory_info(gpu).current, 0u);
  EXPECT_EQ(config::get_memory_info(gpu).reserved, 0u) << "every region went back with cudaFree";
  std::printf("HOLD pid %d: released; reserved now %s\n", static_cast<int>(getpid()),
              config::format_bytes(config::get_memory_info(gpu).reserved).c_str());
}

}  // namespace
}  // namespace tk
