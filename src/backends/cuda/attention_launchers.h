// Launchers of the fused attention kernels (attention.cu), plain C++ for attention.cpp (host compiler). Layout:
// graph/attention_rules.h; per-score rules: backends/math/attention.h. Each queues on `stream`.
#pragma once
#include <cstdint>

namespace tk::cuda {

using Stream = void*;  // cudaStream_t

struct AttentionDims {
  int64_t batch, heads, steps_q, steps_k, dim, dim_v;
  bool causal;
  float scale;
};

// o (N*T, H*Dv) from q (N*T, H*D), k (N*S, H*D), v (N*S, H*Dv) and mask (N, T, S) or null.
void launch_attention(const AttentionDims& d, const float* q, const float* k, const float* v, const float* mask,
                      float* o, int sms, Stream stream);
// [dq | dk | dv] into grad (graph/attention_rules.h's offsets); rows (N * H * T * 2 floats) holds each query row's
// logsumexp and rowsum(do * o) between the two kernels.
void launch_attention_grad(const AttentionDims& d, const float* dout, const float* q, const float* k, const float* v,
                           const float* o, const float* mask, float* grad, float* rows, int sms, Stream stream);

}  // namespace tk::cuda
