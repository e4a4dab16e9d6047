// float16 and bfloat16 on CUDA, as on the CPU (backends/cpu/widen.cpp): each 16-bit input is widened to float32
// in the program's workspace by the Cast kernel, the op's float32 kernel runs, and a 16-bit output is rounded back
// to nearest even. So a 16-bit program on CUDA computes the float32 result rounded once per op, the same contract
// the CPU's 16-bit kernels meet and the op harness checks. It costs a pass over memory per 16-bit operand; the
// native 16-bit GEMMs (gemm_cublaslt.cpp) and convolutions (conv_native16.cpp) are registered over these kernels
// and fall back to them.
#include "backends/cuda/cuda_kernels.h"

#ifdef TK_HAVE_CUDA
#include "backends/cuda/launchers.h"
#include "backends/widen.h"

namespace tk::cuda {

int sm_count(int index);  // cuda_kernels.cpp

namespace {
void convert_on_stream(const void* src, DType from, void* dst, DType to, int64_t n, const graph::ExecContext& ctx) {
  launch_cast(src, static_cast<int>(from), dst, static_cast<int>(to), n, sm_count(ctx.device.index), ctx.stream);
}
}  // namespace

// 256-byte steps keep every widened operand as aligned as cudaMalloc's memory (vector loads, cuBLASLt).
void register_widened_kernels() { backends::register_widened<DeviceKind::cuda>(convert_on_stream, 256); }

}  // namespace tk::cuda
#endif
