// The CPU backend: kernels on OpenBLAS, oneDNN and OpenMP loops; memory is host memory, so copies are
// memcpy and nothing is asynchronous: it makes no stream, staging, read-back slots or row gather
// (graph/backend_objects.h). Its thread team is the host's (graph/host_threads.h, host_threads.cpp).
#pragma once
#include "graph/backend.h"

namespace tk::cpu {

class CpuBackend final : public graph::Backend {
 public:
  DeviceKind kind() const override { return DeviceKind::cpu; }
  std::string_view name() const override { return "cpu"; }
  void register_kernels() override;
  // Denormals flushed to zero while kernels run, as TensorFlow does: gradients and Adam's second moments
  // underflow into denormals, which x86 cores process many times slower. The calling thread gets its own
  // MXCSR back after the run (user code keeps IEEE denormals); the OpenMP workers, which run kernels and
  // OpenBLAS, keep the flush mode once set.
  uint64_t enter_run() override;
  void leave_run(uint64_t saved) override;
  void copy_to_device(void* dst, const void* host_src, size_t bytes, const graph::ExecContext& ctx) override;
  void copy_to_host(void* host_dst, const void* src, size_t bytes, const graph::ExecContext& ctx) override;
  void synchronize(const graph::ExecContext&) override {}
  // The GEMM engine measured fastest per shape (gemm.h) for the programs' MatMul and FusedMatMul nodes.
  std::string kernel_choices(const std::vector<const graph::Program*>& programs) const override;
  void set_kernel_choices(const std::string& text) override;
};

}  // namespace tk::cpu
