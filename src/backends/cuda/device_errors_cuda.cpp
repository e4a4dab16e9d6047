// The per-device error records (device_errors_cuda.h). Compiled in every build; the CUDA part only with TK_HAVE_CUDA.
#include "backends/cuda/device_errors_cuda.h"

#ifdef TK_HAVE_CUDA
#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <mutex>
#include <string>

#include "backends/cuda/check.h"
#include "backends/device_errors.h"
#include "trainkit/core/error.h"

namespace tk::cuda {
namespace {
constexpr int kMaxDevices = 64;
std::array<std::atomic<backends::DeviceErrorRecord*>, kMaxDevices> g_records{};
std::mutex g_alloc;
}  // namespace

backends::DeviceErrorRecord* device_error_record(int device) {
  if (device < 0 || device >= kMaxDevices) throw InvalidArgument("cuda:" + std::to_string(device) + ": no such device");
  if (auto* r = g_records[static_cast<size_t>(device)].load(std::memory_order_acquire)) return r;
  std::lock_guard<std::mutex> hold(g_alloc);
  if (auto* r = g_records[static_cast<size_t>(device)].load()) return r;
  void* host = nullptr;
  // Portable: any context may use it; mapped: kernels write it through the same address (unified addressing).
  check(cudaHostAlloc(&host, sizeof(backends::DeviceErrorRecord), cudaHostAllocMapped | cudaHostAllocPortable),
        "cudaHostAlloc (device error record)", "cuda:" + std::to_string(device));
  auto* r = new (host) backends::DeviceErrorRecord{};
  void* on_device = nullptr;
  check(cudaHostGetDevicePointer(&on_device, host, 0), "cudaHostGetDevicePointer (device error record)",
        "cuda:" + std::to_string(device));
  if (on_device != host)
    throw Unsupported("cuda:" + std::to_string(device) +
                      ": mapped host memory at another address (no unified "
                      "addressing); the gather bounds check needs it");
  g_records[static_cast<size_t>(device)].store(r, std::memory_order_release);
  return r;
}

void raise_device_errors(int device) {
  if (device < 0 || device >= kMaxDevices) return;
  if (auto* r = g_records[static_cast<size_t>(device)].load(std::memory_order_acquire))
    backends::raise_recorded_error(*r);
}

}  // namespace tk::cuda

#else
namespace tk::cuda {
backends::DeviceErrorRecord* device_error_record(int) { return nullptr; }
void raise_device_errors(int) {}
}  // namespace tk::cuda
#endif
