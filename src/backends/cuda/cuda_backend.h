// The CUDA backend: kernels from cuda_kernels.h on the device's memory (runtime::DeviceMemory's cudaMalloc
// regions); copies are cudaMemcpyAsync on the context's stream, and synchronize waits for that stream.
//
//   graph::Backend& b = graph::backend(DeviceKind::cuda);   // registered in builds with TK_CUDA=ON
//   b.copy_to_device(dst, host, bytes, ctx); b.synchronize(ctx);
//
// Programs run on it (graph::Program, the op harness). Models do not train on CUDA devices yet: nn/ still
// stages batches and weights through host memory (issue 13), so Model::set_device refuses cuda with that reason.
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
};

}  // namespace tk::cuda
