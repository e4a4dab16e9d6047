// The CUDA backend: kernels from cuda_kernels.h on the device's memory (runtime::DeviceMemory's cudaMalloc
// regions); copies are cudaMemcpyAsync on the context's stream (the program's compute stream, compute_stream.h), and
// synchronize waits for that stream. Each program gets a step launcher (step_graph.h): the step's scalars uploaded
// from pinned memory, and its kernels captured as a CUDA Graph and replayed (graph/step_capture.h). It makes what lets
// a model's steps run ahead of the host (graph/backend_objects.h): a compute stream per model or replica
// (compute_stream.h), pinned input staging per program (pinned_staging.h), pinned log slots per fit (pinned_logs.h)
// and the row gather of a device-resident dataset (device_gather.h).
//
//   graph::Backend& b = graph::backend(DeviceKind::cuda);   // registered in builds with TK_CUDA=ON
//   b.copy_to_device(dst, host, bytes, ctx); b.synchronize(ctx);
//
// Programs run on it (graph::Program, the op harness), and models on cuda:N (nn::ProgramCache's device copies).
#pragma once
#include "graph/backend.h"

namespace tk::cuda {

class CudaBackend final : public graph::Backend {
 public:
  DeviceKind kind() const override { return DeviceKind::cuda; }
  std::string_view name() const override { return "cuda"; }
  void register_kernels() override;
  void copy_to_device(void* dst, const void* host_src, size_t bytes, const graph::ExecContext& ctx) override;
  void copy_to_host(void* host_dst, const void* src, size_t bytes, const graph::ExecContext& ctx) override;
  void synchronize(const graph::ExecContext& ctx) override;
  void copy_to_host_async(void* host_dst, const void* src, size_t bytes, const graph::ExecContext& ctx) override;
  std::unique_ptr<graph::StepLauncher> make_step_launcher(Device device) override;
  // cudaHostRegister (portable: every device's copies see it as pinned) / cudaHostUnregister.
  bool pin_host(void* p, size_t bytes) override;
  void unpin_host(void* p) override;
  // compute_stream.h, pinned_staging.h, pinned_logs.h, device_gather.h (their constructors throw Unsupported in a
  // build without CUDA, where this backend is not registered).
  std::unique_ptr<graph::Stream> make_stream(Device device) override;
  std::unique_ptr<graph::InputStaging> make_input_staging(Device device, const std::vector<size_t>& region_bytes,
                                                          void* stream) override;
  std::unique_ptr<graph::ReadbackSlots> make_readback_slots(Device device, int slots) override;
  std::unique_ptr<graph::RowGather> make_row_gather(Device device) override;
};

}  // namespace tk::cuda
