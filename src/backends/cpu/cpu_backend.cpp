#include "backends/cpu/cpu_backend.h"

#include <xmmintrin.h>

#include <cstring>

#include "backends/cpu/gemm.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/threads.h"
#include "graph/program.h"

namespace tk::cpu {

void register_kernels() {
  register_linalg_kernels();
  register_elementwise_kernels();
  register_activation_kernels();
  register_loss_kernels();
  register_optimizer_kernels();
  register_conv_kernels();
  register_pooling_kernels();
  register_image_transform_kernels();
  register_batchnorm_kernels();
  register_collective_kernels();
  register_unary_kernels();
  register_broadcast_kernels();
  register_reduce_kernels();
  register_layout_kernels();
  register_gather_kernels();
  register_batch_matmul_kernels();
  register_assign_kernels();
  register_layer_norm_kernels();
  register_lstm_kernels();
  register_attention_kernels();
  register_cast_kernels();
  register_onednn_conv_kernels();  // after the im2col ones, which it replaces
  register_c1_conv_kernels();      // one input channel: direct; every other convolution as registered above
  register_widened_kernels();      // wraps the float32 kernels registered above
  register_bf16_gemm_kernels();    // last: native bfloat16 GEMMs and convolutions where the CPU has them
  register_onednn_bf16_conv_kernels();
  register_c1_bf16_conv_kernels();
  register_exact16_kernels();
}

void CpuBackend::register_kernels() { cpu::register_kernels(); }

namespace {
constexpr unsigned kFlushToZero = 0x8000, kDenormalsAreZero = 0x0040;
}

uint64_t CpuBackend::enter_run() {
  cpu::adapt_threads();  // the team size for this step, from the cores free now (threads.h)
  const unsigned saved = _mm_getcsr();
  thread_local bool workers_done = false;
  if (!workers_done) {  // the OpenMP team this thread starts (kernels and OpenBLAS share it)
    workers_done = true;
#pragma omp parallel
    _mm_setcsr(_mm_getcsr() | kFlushToZero | kDenormalsAreZero);
  }
  _mm_setcsr(saved | kFlushToZero | kDenormalsAreZero);
  return saved;
}

void CpuBackend::leave_run(uint64_t saved) { _mm_setcsr(static_cast<unsigned>(saved)); }

void CpuBackend::copy_to_device(void* dst, const void* host_src, size_t bytes, const graph::ExecContext&) {
  if (bytes) std::memcpy(dst, host_src, bytes);
}

void CpuBackend::copy_to_host(void* host_dst, const void* src, size_t bytes, const graph::ExecContext&) {
  if (bytes) std::memcpy(host_dst, src, bytes);
}

std::string CpuBackend::kernel_choices(const std::vector<const graph::Program*>& programs) const {
  std::vector<GemmShape> shapes;
  for (const graph::Program* p : programs)
    for (int id : p->order())
      if (p->graph()[id].op == graph::Op::MatMul || p->graph()[id].op == graph::Op::FusedMatMul)
        shapes.push_back(gemm_shape(p->graph(), p->graph()[id]));
  return gemm_choices_of(shapes);  // with those a restored state carried (a resumed run may build none)
}

void CpuBackend::set_kernel_choices(const std::string& text) { set_gemm_choices(text); }

}  // namespace tk::cpu
