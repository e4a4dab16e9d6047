// The CPU backend: kernels on OpenBLAS, oneDNN and OpenMP loops; memory is host memory, so copies are
// memcpy and nothing is asynchronous.
#pragma once
#include "graph/backend.h"

namespace tk::cpu {

class CpuBackend final : public graph::Backend {
 public:
  DeviceKind kind() const override { return DeviceKind::cpu; }
  std::string_view name() const override { return "cpu"; }
  void register_kernels() override;
  // Denormals flushed to zero on the calling thread and every OpenMP worker, as TensorFlow does: gradients
  // and Adam's second moments underflow into denormals, which x86 cores process many times slower.
  void prepare_thread() override;
  void copy_to_device(void* dst, const void* host_src, size_t bytes, const graph::ExecContext& ctx) override;
  void copy_to_host(void* host_dst, const void* src, size_t bytes, const graph::ExecContext& ctx) override;
  void synchronize(const graph::ExecContext&) override {}
};

}  // namespace tk::cpu
