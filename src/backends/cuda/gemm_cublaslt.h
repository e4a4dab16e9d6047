// Row-major float32 GEMMs on cuBLASLt, for the CUDA kernels that are GEMMs inside (MatMul, the convolutions).
//
//   tk::cuda::gemm({m, n, k, ta, tb, Epilogue::bias_relu}, a, b, bias, c, /*beta=*/0.0f, ws, device, stream, node);
//   // ws: gemm_workspace_bytes() of device memory, any 64-byte alignment (rounded up to cuBLASLt's 256 inside)
#pragma once
#include <cstddef>

#include "backends/cpu/gemm.h"
#include "graph/graph.h"
#include "graph/kernel.h"

namespace tk::cuda {

// c(m, n) = epilogue(op(a) op(b)) + beta * c; bias (n values) read for the bias epilogues (not relu_grad). Queued on
// `stream` (a cudaStream_t); `node` is named in errors (the message is built only then: the step allocates nothing).
void gemm(const cpu::GemmShape& s, const float* a, const float* b, const float* bias, float* c, float beta,
          void* workspace, int device, void* stream, const graph::Node& node);
size_t gemm_workspace_bytes();

// `count` float32 products c_j = op(a_j) op(b_j), j = 0 .. count - 1, the matrices `stride_*` elements apart (0: the
// same matrix for every j, a broadcast operand), as one cuBLASLt matmul whose layouts carry
// CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT / STRIDED_BATCH_OFFSET (BatchMatMul; s.epilogue must be none). Returns false,
// having queued nothing, where cuBLASLt offers no algorithm for that batch (the caller then runs one gemm per matrix).
struct GemmBatch {
  int64_t count = 1, stride_a = 0, stride_b = 0, stride_c = 0;
  auto operator<=>(const GemmBatch&) const = default;
};
bool gemm_strided_batched(const cpu::GemmShape& s, const GemmBatch& batch, const float* a, const float* b, float* c,
                          void* workspace, int device, void* stream, const graph::Node& node);

// float16 / bfloat16 MatMul and FusedMatMul on cuBLASLt in their own dtypes (float32 accumulation), registered after
// the widened kernels (backends/widen.h), which they fall back to for relu_grad, k = 0, dimensions that are not
// multiples of 8, and TK_CUDA_NATIVE16=0.
void register_native16_gemm_kernels();
// Whether `fn` is that native kernel (tests: the registration holds).
bool gemm16_is_native(graph::KernelFn fn);

}  // namespace tk::cuda
