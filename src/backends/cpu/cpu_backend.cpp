#include "backends/cpu/cpu_backend.h"

#include <xmmintrin.h>

#include <cstring>

#include "backends/cpu/kernels.h"

namespace tk::cpu {

void register_kernels() {
  register_linalg_kernels();
  register_elementwise_kernels();
  register_activation_kernels();
  register_loss_kernels();
  register_optimizer_kernels();
  register_conv_kernels();
  register_pooling_kernels();
  register_batchnorm_kernels();
  register_cast_kernels();
  register_onednn_conv_kernels();  // after the im2col ones, which it replaces
  register_widened_kernels();      // last: wraps the float32 kernels registered above
}

void CpuBackend::register_kernels() { cpu::register_kernels(); }

void CpuBackend::prepare_thread() {
  constexpr unsigned kFlushToZero = 0x8000, kDenormalsAreZero = 0x0040;
  thread_local bool done = false;
  if (done) return;
  done = true;
  // The calling thread and every OpenMP worker (kernels and OpenBLAS run on the same pool).
#pragma omp parallel
  _mm_setcsr(_mm_getcsr() | kFlushToZero | kDenormalsAreZero);
  _mm_setcsr(_mm_getcsr() | kFlushToZero | kDenormalsAreZero);
}

void CpuBackend::copy_to_device(void* dst, const void* host_src, size_t bytes, const graph::ExecContext&) {
  if (bytes) std::memcpy(dst, host_src, bytes);
}

void CpuBackend::copy_to_host(void* host_dst, const void* src, size_t bytes, const graph::ExecContext&) {
  if (bytes) std::memcpy(host_dst, src, bytes);
}

}  // namespace tk::cpu
