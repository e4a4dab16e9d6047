// The fused attention ops on CUDA (attention_launchers.h), flash-attention style at its simplest: a thread per query
// row runs the online softmax over the keys (backends/math/attention.h's rules, the CPU kernels' too), its output
// row accumulated in place, so no (T, S) value is ever stored. The gradient: a thread per query row (its logsumexp,
// rowsum(do * o) and dq, the scores recomputed), then a thread per key row (dk and dv, summing over the query rows in
// order): each sum in one thread in a fixed order, no atomics, the same bits every run.
// Not tuned (no shared-memory tiles or tensor cores yet): compiled in CI, never run on a GPU so far.
#include <cuda_runtime.h>

#include "backends/cuda/attention_launchers.h"
#include "backends/cuda/check.h"
#include "backends/cuda/launch_geometry.h"
#include "backends/math/attention.h"

namespace tk::cuda {
namespace {

__device__ int64_t first_index() { return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ int64_t grid_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

__device__ float dot(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
  for (int64_t e = 0; e < n; ++e) s += a[e] * b[e];
  return s;
}

// Row pointers of sample n, head h.
struct Rows {
  AttentionDims d;
  __device__ int64_t q(int64_t n, int64_t h, int64_t i) const {
    return (n * d.steps_q + i) * d.heads * d.dim + h * d.dim;
  }
  __device__ int64_t k(int64_t n, int64_t h, int64_t j) const {
    return (n * d.steps_k + j) * d.heads * d.dim + h * d.dim;
  }
  __device__ int64_t o(int64_t n, int64_t h, int64_t i) const {
    return (n * d.steps_q + i) * d.heads * d.dim_v + h * d.dim_v;
  }
  __device__ int64_t v(int64_t n, int64_t h, int64_t j) const {
    return (n * d.steps_k + j) * d.heads * d.dim_v + h * d.dim_v;
  }
  __device__ const float* mask_row(const float* mask, int64_t n, int64_t i) const {
    return mask ? mask + (n * d.steps_q + i) * d.steps_k : nullptr;
  }
};

__global__ void forward_kernel(AttentionDims d, const float* __restrict__ q, const float* __restrict__ k,
                               const float* __restrict__ v, const float* __restrict__ mask, float* __restrict__ o) {
  const Rows at{d};
  for (int64_t r = first_index(); r < d.batch * d.heads * d.steps_q; r += grid_stride()) {
    const int64_t i = r % d.steps_q, h = r / d.steps_q % d.heads, n = r / d.steps_q / d.heads;
    const float* qi = q + at.q(n, h, i);
    const float* mrow = at.mask_row(mask, n, i);
    float* oi = o + at.o(n, h, i);
    for (int64_t e = 0; e < d.dim_v; ++e) oi[e] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    bool seen = false;
    for (int64_t j = 0; j < d.steps_k; ++j) {
      // A key the query does not see still multiplies its value by weight 0 (0 * inf is NaN), as the CPU kernel's
      // block GEMMs and the composite's probs . v do.
      float alpha = 1.0f, p = 0.0f;
      if (math::attention_sees(d.causal, mrow, i, j)) {
        seen = true;
        math::online_softmax_step(d.scale * dot(qi, k + at.k(n, h, j), d.dim), &m, &l, &alpha, &p);
      }
      const float* vj = v + at.v(n, h, j);
      for (int64_t e = 0; e < d.dim_v; ++e) oi[e] = oi[e] * alpha + p * vj[e];
    }
    const float inv = seen ? 1.0f / l : 0.0f;
    for (int64_t e = 0; e < d.dim_v; ++e) oi[e] = seen ? oi[e] * inv : 0.0f;
  }
}

// Per query row: lse and D = rowsum(do * o) into rows, and dq.
__global__ void query_grad_kernel(AttentionDims d, const float* __restrict__ dout, const float* __restrict__ q,
                                  const float* __restrict__ k, const float* __restrict__ v, const float* __restrict__ o,
                                  const float* __restrict__ mask, float* __restrict__ dq, float* __restrict__ rows) {
  const Rows at{d};
  const int64_t count = d.batch * d.heads * d.steps_q;
  for (int64_t r = first_index(); r < count; r += grid_stride()) {
    const int64_t i = r % d.steps_q, h = r / d.steps_q % d.heads, n = r / d.steps_q / d.heads;
    const float* qi = q + at.q(n, h, i);
    const float* doi = dout + at.o(n, h, i);
    const float* mrow = at.mask_row(mask, n, i);
    float m = -INFINITY, l = 0.0f;
    bool seen = false;
    for (int64_t j = 0; j < d.steps_k; ++j) {
      if (!math::attention_sees(d.causal, mrow, i, j)) continue;
      seen = true;
      float alpha, p;
      math::online_softmax_step(d.scale * dot(qi, k + at.k(n, h, j), d.dim), &m, &l, &alpha, &p);
    }
    const float lse = math::attention_lse(m, l, seen);
    const float di = dot(doi, o + at.o(n, h, i), d.dim_v);
    rows[r] = lse;
    rows[count + r] = di;
    float* dqi = dq + at.q(n, h, i);
    for (int64_t e = 0; e < d.dim; ++e) dqi[e] = 0.0f;
    for (int64_t j = 0; j < d.steps_k; ++j) {
      if (!math::attention_sees(d.causal, mrow, i, j)) continue;
      const float* kj = k + at.k(n, h, j);
      const float p = math::attention_weight(d.scale * dot(qi, kj, d.dim), lse);
      const float ds = p * (dot(doi, v + at.v(n, h, j), d.dim_v) - di);
      for (int64_t e = 0; e < d.dim; ++e) dqi[e] += ds * kj[e];
    }
    for (int64_t e = 0; e < d.dim; ++e) dqi[e] *= d.scale;
  }
}

// Per key row: dk and dv, over the query rows in order.
__global__ void key_grad_kernel(AttentionDims d, const float* __restrict__ dout, const float* __restrict__ q,
                                const float* __restrict__ k, const float* __restrict__ v,
                                const float* __restrict__ mask, const float* __restrict__ rows, float* __restrict__ dk,
                                float* __restrict__ dv) {
  const Rows at{d};
  const int64_t queries = d.batch * d.heads * d.steps_q;
  for (int64_t r = first_index(); r < d.batch * d.heads * d.steps_k; r += grid_stride()) {
    const int64_t j = r % d.steps_k, h = r / d.steps_k % d.heads, n = r / d.steps_k / d.heads;
    const float* kj = k + at.k(n, h, j);
    const float* vj = v + at.v(n, h, j);
    float* dkj = dk + at.k(n, h, j);
    float* dvj = dv + at.v(n, h, j);
    for (int64_t e = 0; e < d.dim; ++e) dkj[e] = 0.0f;
    for (int64_t e = 0; e < d.dim_v; ++e) dvj[e] = 0.0f;
    for (int64_t i = 0; i < d.steps_q; ++i) {
      if (!math::attention_sees(d.causal, at.mask_row(mask, n, i), i, j)) continue;
      const int64_t row = (n * d.heads + h) * d.steps_q + i;
      const float* qi = q + at.q(n, h, i);
      const float* doi = dout + at.o(n, h, i);
      const float p = math::attention_weight(d.scale * dot(qi, kj, d.dim), rows[row]);
      const float ds = p * (dot(doi, vj, d.dim_v) - rows[queries + row]);
      for (int64_t e = 0; e < d.dim_v; ++e) dvj[e] += p * doi[e];
      for (int64_t e = 0; e < d.dim; ++e) dkj[e] += ds * d.scale * qi[e];
    }
  }
}

template <typename Kernel, typename... Args>
void launch(const char* what, int64_t n, int sms, Stream stream, Kernel kernel, Args... args) {
  const Geometry g = elementwise_geometry(n, sms);
  if (g.blocks) kernel<<<g.blocks, g.threads, 0, static_cast<cudaStream_t>(stream)>>>(args...);
  check(cudaGetLastError(), what, "attention.cu");
}

}  // namespace

void launch_attention(const AttentionDims& d, const float* q, const float* k, const float* v, const float* mask,
                      float* o, int sms, Stream stream) {
  launch("attention kernel launch", d.batch * d.heads * d.steps_q, sms, stream, forward_kernel, d, q, k, v, mask, o);
}

void launch_attention_grad(const AttentionDims& d, const float* dout, const float* q, const float* k, const float* v,
                           const float* o, const float* mask, float* grad, float* rows, int sms, Stream stream) {
  const int64_t q_size = d.batch * d.steps_q * d.heads * d.dim, k_size = d.batch * d.steps_k * d.heads * d.dim;
  launch("attention query gradient kernel launch", d.batch * d.heads * d.steps_q, sms, stream, query_grad_kernel, d,
         dout, q, k, v, o, mask, grad, rows);
  launch("attention key gradient kernel launch", d.batch * d.heads * d.steps_k, sms, stream, key_grad_kernel, d, dout,
         q, k, v, mask, static_cast<const float*>(rows), grad + q_size, grad + q_size + k_size);
}

}  // namespace tk::cuda
