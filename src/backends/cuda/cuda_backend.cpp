#include "backends/cuda/cuda_backend.h"

#include "backends/cuda/compute_stream.h"
#include "backends/cuda/device_gather.h"
#include "backends/cuda/pinned_logs.h"
#include "backends/cuda/pinned_staging.h"

// The objects nn/ makes through graph::Backend (graph/backend_objects.h): compiled in every build.
namespace tk::cuda {
std::unique_ptr<graph::Stream> CudaBackend::make_stream(Device device) {
  return std::make_unique<ComputeStream>(device);
}
std::unique_ptr<graph::InputStaging> CudaBackend::make_input_staging(Device device,
                                                                     const std::vector<size_t>& region_bytes,
                                                                     void* stream) {
  return std::make_unique<PinnedStaging>(device, region_bytes, stream);
}
std::unique_ptr<graph::ReadbackSlots> CudaBackend::make_readback_slots(Device device, int slots) {
  return std::make_unique<PinnedLogSlots>(device, slots);
}
std::unique_ptr<graph::RowGather> CudaBackend::make_row_gather(Device device) {
  return std::make_unique<DeviceGather>(device);
}
}  // namespace tk::cuda

#ifdef TK_HAVE_CUDA
#include <cuda_runtime.h>

#include <string>

#include "backends/cuda/check.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/device_errors_cuda.h"
#include "backends/cuda/step_graph.h"

namespace tk::cuda {
namespace {
cudaStream_t stream_of(const graph::ExecContext& ctx) { return static_cast<cudaStream_t>(ctx.stream); }
std::string where(const graph::ExecContext& ctx, size_t bytes) {
  return ctx.device.to_string() + ", " + std::to_string(bytes) + " bytes";
}
// Kernels launch on the current device of the calling thread: every entry point makes it the context's.
void use_device(const graph::ExecContext& ctx) {
  check(cudaSetDevice(ctx.device.index), "cudaSetDevice", ctx.device.to_string());
}
}  // namespace

void CudaBackend::register_kernels() { tk::cuda::register_kernels(); }

void CudaBackend::copy_to_device(void* dst, const void* host_src, size_t bytes, const graph::ExecContext& ctx) {
  if (bytes == 0) return;
  use_device(ctx);
  check(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream_of(ctx)), "cudaMemcpyAsync (to device)",
        where(ctx, bytes));
}

void CudaBackend::copy_to_host(void* host_dst, const void* src, size_t bytes, const graph::ExecContext& ctx) {
  if (bytes == 0) return;
  use_device(ctx);
  check(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream_of(ctx)), "cudaMemcpyAsync (to host)",
        where(ctx, bytes));
  check(cudaStreamSynchronize(stream_of(ctx)), "cudaStreamSynchronize (after a copy to the host)", where(ctx, bytes));
  raise_device_errors(ctx.device.index);  // what a kernel found in its inputs (a gather index outside its table)
}

void CudaBackend::copy_to_host_async(void* host_dst, const void* src, size_t bytes, const graph::ExecContext& ctx) {
  if (bytes == 0) return;
  use_device(ctx);
  check(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream_of(ctx)),
        "cudaMemcpyAsync (to pinned host memory)", where(ctx, bytes));
}

std::unique_ptr<graph::StepLauncher> CudaBackend::make_step_launcher(Device device) {
  return std::make_unique<CudaStepLauncher>(device);
}

bool CudaBackend::pin_host(void* p, size_t bytes) {
  if (bytes == 0) return false;
  if (cudaHostRegister(p, bytes, cudaHostRegisterPortable) == cudaSuccess) return true;
  cudaGetLastError();  // a refusal (a range sharing a page with one already registered, no device) is not sticky
  return false;
}

void CudaBackend::unpin_host(void* p) {
  if (cudaHostUnregister(p) != cudaSuccess) cudaGetLastError();  // nothing to report from a release path
}

void CudaBackend::synchronize(const graph::ExecContext& ctx) {
  use_device(ctx);
  check(cudaStreamSynchronize(stream_of(ctx)), "cudaStreamSynchronize", ctx.device.to_string());
  raise_device_errors(ctx.device.index);
}

}  // namespace tk::cuda

#else
namespace tk::cuda {
void CudaBackend::register_kernels() {}
void CudaBackend::copy_to_device(void*, const void*, size_t, const graph::ExecContext&) {}
void CudaBackend::copy_to_host(void*, const void*, size_t, const graph::ExecContext&) {}
void CudaBackend::synchronize(const graph::ExecContext&) {}
void CudaBackend::copy_to_host_async(void*, const void*, size_t, const graph::ExecContext&) {}
std::unique_ptr<graph::StepLauncher> CudaBackend::make_step_launcher(Device) { return nullptr; }
bool CudaBackend::pin_host(void*, size_t) { return false; }
void CudaBackend::unpin_host(void*) {}
}  // namespace tk::cuda
#endif
