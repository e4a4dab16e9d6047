// float16 and bfloat16 on the CPU: each 16-bit input is widened to float32 in the program's workspace,
// the op's float32 kernel runs, and a 16-bit output is rounded back to nearest even. x86 cores before
// AVX-512 FP16/AMX have no 16-bit arithmetic worth the name, so this is what a 16-bit op costs here anyway
// (PyTorch's CPU half kernels also compute in float); what it proves is that a 16-bit program computes
// exactly the float32 result rounded to 16 bits — the reference the CUDA 16-bit kernels are tested
// against. Ops without an output (optimizer updates, AccumulateGrad, BnUpdateMoving) write into their
// operands in place and have no 16-bit CPU kernel: weights and optimizer state stay float32.
#include "backends/widen.h"

#include "backends/cpu/kernels.h"

namespace tk::cpu {

void register_widened_kernels() { backends::register_widened<DeviceKind::cpu>(convert_parallel, 64); }

}  // namespace tk::cpu
