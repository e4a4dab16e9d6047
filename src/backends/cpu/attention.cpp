// The fused attention ops on the CPU (graph/attention_rules.h), flash-attention style: per (sample, head) and block of
// kBlockQ query rows, the keys and values go by in blocks of kBlockK; a block's scores (kBlockQ, kBlockK) are one
// GEMM (small_gemm.h's register tiles: for products this small a library call's packing and dispatch cost as much as
// the arithmetic), their softmax is online (the row max and sum carried from block to block, the partial output
// rescaled when the max grows; exps in vector_exp.h's lanes, AVX-512 or AVX2 chosen at run time) and the block's
// share of the output one more GEMM. No (T, S) value exists beyond one block, so the memory an attention needs grows
// with T (the workspace below), not T * S.
// The gradient recomputes the scores: a first pass per query block finds each row's logsumexp, then per key block
// (outer) and query block (inner) P = exp(scores - logsumexp), dV += P^T dO, dP = dO V^T, dS = P (dP - rowsum(dO o)),
// dQ += dS K, dK += dS^T Q: four GEMMs per block pair, dK and dV summed over the query blocks in a block-sized
// buffer and dQ over the key blocks in a (T, D) one. When the whole (T, S) is one block (T, S <= 128: the issue's
// transformer) the first pass's exps are P itself and the scores are computed once.
// Threads: one (sample, head[, query block]) at a time each (dynamically: a thread descheduled by another process
// holds back only the pieces it has taken); every sum runs in one thread in a fixed order, so results do not depend on
// the thread count (no atomics).
#include "backends/math/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/kernels.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/small_gemm.h"
#include "backends/cpu/vector_exp.h"
#include "graph/attention_rules.h"
#include "graph/kernel.h"

namespace tk::cpu {
namespace {
using graph::AttentionLayout;
using graph::KernelArgs;
using graph::Op;

constexpr int64_t kBlockQ = 128, kBlockK = 128;

size_t align64(size_t b) { return (b + 63) / 64 * 64; }
int64_t blocks(int64_t n, int64_t b) { return (n + b - 1) / b; }

// One thread's scratch: float buffers (each 64-byte aligned). No allocation: the kernels compute it every step.
constexpr int kMaxBuffers = 13;
struct Scratch {
  size_t floats[kMaxBuffers] = {};  // element counts of the buffers, in order
  int count = 0;
  int64_t bq = 0;  // rows of a query block
  size_t bytes() const {
    size_t b = 0;
    for (int i = 0; i < count; ++i) b += align64(sizeof(float) * floats[i]);
    return b;
  }
  struct Buffers {
    float* at[kMaxBuffers];
    float* operator[](int i) const { return at[i]; }
  };
  Buffers carve(void* base) const {
    char* p = static_cast<char*>(base);
    Buffers out{};
    for (int i = 0; i < count; ++i) {
      out.at[i] = reinterpret_cast<float*>(p);
      p += align64(sizeof(float) * floats[i]);
    }
    return out;
  }
};

Scratch scratch_of(const AttentionLayout& L, bool forward) {
  Scratch s;
  const auto bq = static_cast<size_t>(std::min(L.steps_q, kBlockQ));
  const auto bk = static_cast<size_t>(std::min(L.steps_k, kBlockK));
  const auto t = static_cast<size_t>(L.steps_q), d = static_cast<size_t>(L.dim), dv = static_cast<size_t>(L.dim_v);
  s.bq = static_cast<int64_t>(bq);
  if (forward) {  // Q, K^T, V, S, O, tmp, [m, l, alpha, seen]
    const size_t f[] = {bq * d, d * bk, bk * dv, bq * bk, bq * dv, bq * dv, 4 * bq};
    std::copy(std::begin(f), std::end(f), s.floats);
    s.count = 7;
  } else {  // Q, dO, dQ, [lse, D], K, V, dK, dV, P, dP, K^T, [m, l, seen], V^T
    const size_t f[] = {t * d,   t * dv,  t * d,   2 * t,  bk * d, bk * dv, bk * d,
                        bk * dv, bq * bk, bq * bk, d * bk, 3 * bq, dv * bk};
    std::copy(std::begin(f), std::end(f), s.floats);
    s.count = 13;
  }
  return s;
}

size_t attention_workspace(const graph::Graph& g, int node) {
  const AttentionLayout L = graph::attention_layout(g, node);
  return scratch_of(L, g[node].op == Op::Attention).bytes() * static_cast<size_t>(max_threads());
}

// rows (r, cols) of x starting at column `col` of a (.., stride) matrix, into dst (r, cols), times `scale`.
void pack(const float* x, int64_t stride, int64_t col, int64_t r, int64_t cols, float scale, float* dst) {
  for (int64_t i = 0; i < r; ++i) {
    const float* src = x + i * stride + col;
    float* out = dst + i * cols;
    for (int64_t j = 0; j < cols; ++j) out[j] = src[j] * scale;
  }
}
// The same rows transposed: dst (cols, r), dst[j * r + i] = x[i][col + j].
void pack_transposed(const float* x, int64_t stride, int64_t col, int64_t r, int64_t cols, float* dst) {
  for (int64_t i = 0; i < r; ++i) {
    const float* src = x + i * stride + col;
    for (int64_t j = 0; j < cols; ++j) dst[j * r + i] = src[j];
  }
}
// dst rows (r, cols) at column `col` of a (.., stride) matrix = src * scale.
void unpack(const float* src, int64_t r, int64_t cols, float scale, float* x, int64_t stride, int64_t col) {
  for (int64_t i = 0; i < r; ++i) {
    float* out = x + i * stride + col;
    const float* in = src + i * cols;
    for (int64_t j = 0; j < cols; ++j) out[j] = in[j] * scale;
  }
}

// Masks query row i's scores against keys [j0, j0 + c): a key it may not see becomes -inf (its exp is 0). Returns
// whether it sees any of them.
bool mask_row(const AttentionLayout& L, const float* mask, int64_t n, int64_t i, int64_t j0, int64_t c, float* s) {
  int64_t end = c;  // keys [j0, j0 + end) pass the causal test
  if (L.causal) end = std::clamp<int64_t>(i - j0 + 1, 0, c);
  for (int64_t j = end; j < c; ++j) s[j] = -INFINITY;
  if (!mask) return end > 0;
  const float* row = mask + (n * L.steps_q + i) * L.steps_k;
  bool seen = false;
  for (int64_t j = 0; j < end; ++j) {
    if (math::attention_sees(false, row, i, j0 + j))
      seen = true;
    else
      s[j] = -INFINITY;
  }
  return seen;
}

// The online softmax's step for one row of block scores s (c): m, l the running max and sum. Leaves exp(s - m_new)
// in s and returns the factor the row's earlier sums shrink by (exp(m_old - m_new)). A NaN score wins the max (NaN
// rows stay NaN); a row whose max is still -inf keeps l = 0 and zeroes s.
float online_row(float* s, int64_t c, float& m, float& l) {
  const float mx = max_row(s, c);  // NaN when s[0] is; a NaN elsewhere makes its exp NaN below
  bool nan = std::isnan(mx);
  if (mx == -INFINITY)  // ... unless the zeroing below would drop it
    for (int64_t j = 0; j < c && !nan; ++j) nan = std::isnan(s[j]);
  const float m_new = nan ? NAN : std::max(m, mx);
  if (m_new == -INFINITY) {
    std::fill(s, s + c, 0.0f);
    return 1.0f;
  }
  const float alpha = std::exp(m - m_new);  // 0 for the first block (m = -inf)
  const float sum = exp_row(s, s, c, m_new);
  l = l * alpha + sum;
  m = m_new;
  return alpha;
}

// The team for `items` independent pieces: the threads adapt_threads allows now (scratch is sized for max_threads()).
int team(int64_t items) {
  adapt_threads();
  return static_cast<int>(std::clamp<int64_t>(items, 1, std::min(omp_get_max_threads(), max_threads())));
}

struct Io {
  const float *q, *k, *v, *mask;
};

void forward_block(const AttentionLayout& L, const Io& io, float* o, int64_t n, int64_t h, int64_t i0, int64_t i1,
                   const Scratch::Buffers& buf) {
  const int64_t d = L.dim, dv = L.dim_v, hd = L.heads * d, hdv = L.heads * dv, r = i1 - i0;
  float *qp = buf[0], *kt = buf[1], *vp = buf[2], *s = buf[3], *acc = buf[4], *tmp = buf[5];
  float *m = buf[6], *l = m + r, *alpha = l + r, *seen = alpha + r;
  pack(io.q + (n * L.steps_q + i0) * hd, hd, h * d, r, d, L.scale, qp);
  std::fill(m, m + r, -INFINITY);
  std::fill(l, l + r, 0.0f);
  std::fill(seen, seen + r, 0.0f);
  std::fill(acc, acc + r * dv, 0.0f);
  const int64_t s_end = L.causal ? std::min(L.steps_k, i1) : L.steps_k;  // causal: keys j <= i < i1
  for (int64_t j0 = 0; j0 < s_end; j0 += kBlockK) {
    const int64_t c = std::min(kBlockK, L.steps_k - j0);
    pack_transposed(io.k + (n * L.steps_k + j0) * hd, hd, h * d, c, d, kt);  // (d, c)
    pack(io.v + (n * L.steps_k + j0) * hdv, hdv, h * dv, c, dv, 1.0f, vp);
    small_gemm({r, c, d}, qp, d, false, kt, c, s, c, false);  // S (r, c) = Q K^T
    for (int64_t i = 0; i < r; ++i) {
      if (mask_row(L, io.mask, n, i0 + i, j0, c, s + i * c)) seen[i] = 1.0f;
      alpha[i] = online_row(s + i * c, c, m[i], l[i]);
    }
    small_gemm({r, dv, c}, s, c, false, vp, dv, tmp, dv, false);  // (r, dv) = P V
    for (int64_t i = 0; i < r; ++i)
      for (int64_t e = 0; e < dv; ++e) acc[i * dv + e] = acc[i * dv + e] * alpha[i] + tmp[i * dv + e];
  }
  // A row that saw no key: 0; else acc / l (l = 0 with keys seen means all their scores were -inf: 0 / 0, NaN).
  for (int64_t i = 0; i < r; ++i) {
    if (seen[i] == 0.0f) std::fill(acc + i * dv, acc + (i + 1) * dv, 0.0f);
    const float inv = seen[i] == 0.0f ? 1.0f : 1.0f / l[i];
    unpack(acc + i * dv, 1, dv, inv, o + (n * L.steps_q + i0 + i) * hdv, hdv, h * dv);
  }
}

void attention_forward(const KernelArgs& a) {
  const AttentionLayout L = graph::attention_layout(a.g, a.node);
  const Io io{a.input<float>(0), a.input<float>(1), a.input<float>(2), L.has_mask ? a.input<float>(3) : nullptr};
  float* o = a.output<float>();  // (N*T, H*Dv)
  const Scratch sc = scratch_of(L, true);
  const size_t per_thread = sc.bytes();
  const int64_t qblocks = blocks(L.steps_q, kBlockQ), items = L.batch * L.heads * qblocks;
  const int threads = team(items);
#pragma omp parallel num_threads(threads)
  {
    omp_set_num_threads(1);  // this thread's GEMMs run on it alone
    void* mine = static_cast<char*>(a.workspace) + per_thread * static_cast<size_t>(omp_get_thread_num());
    const Scratch::Buffers buf = sc.carve(mine);
#pragma omp for schedule(dynamic)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t nh = item / qblocks, b = item % qblocks;
      const int64_t i0 = b * kBlockQ, i1 = std::min(L.steps_q, i0 + kBlockQ);
      forward_block(L, io, o, nh / L.heads, nh % L.heads, i0, i1, buf);
    }
  }
}

void backward_head(const AttentionLayout& L, const Io& io, const float* dout, const float* out, float* grad, int64_t n,
                   int64_t h, const Scratch::Buffers& buf) {
  const int64_t t = L.steps_q, sk = L.steps_k, d = L.dim, dv = L.dim_v, hd = L.heads * d, hdv = L.heads * dv;
  float *qs = buf[0], *dob = buf[1], *dq = buf[2], *lse = buf[3], *drow = lse + t;
  float *kp = buf[4], *vp = buf[5], *dk = buf[6], *dvb = buf[7], *p = buf[8], *dp = buf[9], *kt = buf[10],
        *vt = buf[12];
  const int64_t bq = std::min(kBlockQ, t);
  float *m = buf[11], *l = m + bq, *seen = l + bq;
  pack(io.q + n * t * hd, hd, h * d, t, d, L.scale, qs);
  pack(dout + n * t * hdv, hdv, h * dv, t, dv, 1.0f, dob);
  for (int64_t i = 0; i < t; ++i) {  // D_i = dO_i . O_i
    const float* oi = out + (n * t + i) * hdv + h * dv;
    float sum = 0.0f;
    for (int64_t e = 0; e < dv; ++e) sum += dob[i * dv + e] * oi[e];
    drow[i] = sum;
  }
  std::fill(dq, dq + t * d, 0.0f);
  const bool one_block = t <= kBlockQ && sk <= kBlockK;  // the first pass's exps are P
  auto scores = [&](int64_t i0, int64_t r, int64_t c) {  // P (r, c) = Q K^T
    small_gemm({r, c, d}, qs + i0 * d, d, false, kt, c, p, c, false);
  };
  auto pack_kv = [&](int64_t j0, int64_t c, bool with_v) {  // K (c, d) and K^T (d, c) [, V (c, dv) and V^T (dv, c)]
    pack(io.k + (n * sk + j0) * hd, hd, h * d, c, d, 1.0f, kp);
    pack_transposed(io.k + (n * sk + j0) * hd, hd, h * d, c, d, kt);
    if (!with_v) return;
    pack(io.v + (n * sk + j0) * hdv, hdv, h * dv, c, dv, 1.0f, vp);
    pack_transposed(io.v + (n * sk + j0) * hdv, hdv, h * dv, c, dv, vt);
  };
  // Pass 1: each query row's logsumexp over the keys it sees (-inf: none; NaN as the forward's rows).
  for (int64_t i0 = 0; i0 < t; i0 += kBlockQ) {
    const int64_t r = std::min(kBlockQ, t - i0), i1 = i0 + r;
    std::fill(m, m + r, -INFINITY);
    std::fill(l, l + r, 0.0f);
    std::fill(seen, seen + r, 0.0f);
    const int64_t s_end = L.causal ? std::min(sk, i1) : sk;
    for (int64_t j0 = 0; j0 < s_end; j0 += kBlockK) {
      const int64_t c = std::min(kBlockK, sk - j0);
      pack_kv(j0, c, one_block);
      scores(i0, r, c);
      for (int64_t i = 0; i < r; ++i) {
        if (mask_row(L, io.mask, n, i0 + i, j0, c, p + i * c)) seen[i] = 1.0f;
        online_row(p + i * c, c, m[i], l[i]);
      }
    }
    for (int64_t i = 0; i < r; ++i) {
      lse[i0 + i] = math::attention_lse(m[i], l[i], seen[i] != 0.0f);
      if (!one_block) continue;
      const int64_t c = sk;
      const float inv = seen[i] == 0.0f ? 0.0f : 1.0f / l[i];  // unseen: P = 0; l = 0 (scores -inf): NaN (0 * inf)
      for (int64_t j = 0; j < c; ++j) p[i * c + j] *= inv;
    }
  }
  // Pass 2: per key block, the gradients through P.
  for (int64_t j0 = 0; j0 < sk; j0 += kBlockK) {
    const int64_t c = std::min(kBlockK, sk - j0);
    if (!one_block) pack_kv(j0, c, true);
    std::fill(dk, dk + c * d, 0.0f);
    std::fill(dvb, dvb + c * dv, 0.0f);
    const int64_t first = L.causal ? j0 / kBlockQ * kBlockQ : 0;  // causal: only queries i >= j0 see these keys
    for (int64_t i0 = first; i0 < t; i0 += kBlockQ) {
      const int64_t r = std::min(kBlockQ, t - i0);
      if (!one_block) {
        scores(i0, r, c);
        for (int64_t i = 0; i < r; ++i) {
          float* row = p + i * c;
          mask_row(L, io.mask, n, i0 + i, j0, c, row);
          if (lse[i0 + i] == -INFINITY)
            std::fill(row, row + c, 0.0f);
          else
            exp_row(row, row, c, lse[i0 + i]);
        }
      }
      const float* doi = dob + i0 * dv;
      small_gemm({c, dv, r}, p, c, true, doi, dv, dvb, dv, true);   // dV (c, dv) += P^T dO
      small_gemm({r, c, dv}, doi, dv, false, vt, c, dp, c, false);  // dP (r, c) = dO V^T
      for (int64_t i = 0; i < r; ++i) {
        const float di = drow[i0 + i];
        float* dpi = dp + i * c;
        const float* pi = p + i * c;
        for (int64_t j = 0; j < c; ++j) dpi[j] = pi[j] * (dpi[j] - di);  // dS
      }
      small_gemm({r, d, c}, dp, c, false, kp, d, dq + i0 * d, d, true);  // dQ (r, d) += dS K
      small_gemm({c, d, r}, dp, c, true, qs + i0 * d, d, dk, d, true);   // dK (c, d) += dS^T Q
    }
    unpack(dk, c, d, 1.0f, grad + L.dk() + (n * sk + j0) * hd, hd, h * d);
    unpack(dvb, c, dv, 1.0f, grad + L.dv() + (n * sk + j0) * hdv, hdv, h * dv);
  }
  unpack(dq, t, d, L.scale, grad + L.dq() + n * t * hd, hd, h * d);  // the scores are (scale q) k^T
}

void attention_backward(const KernelArgs& a) {
  const AttentionLayout L = graph::attention_layout(a.g, a.node);
  const float* dout = a.input<float>(0);  // (N*T, H*Dv)
  const Io io{a.input<float>(1), a.input<float>(2), a.input<float>(3), L.has_mask ? a.input<float>(5) : nullptr};
  const float* out = a.input<float>(4);  // (N*T, H*Dv)
  float* grad = a.output<float>();       // [dq | dk | dv]
  const Scratch sc = scratch_of(L, false);
  const size_t per_thread = sc.bytes();
  const int64_t items = L.batch * L.heads;
  const int threads = team(items);
#pragma omp parallel num_threads(threads)
  {
    omp_set_num_threads(1);
    void* mine = static_cast<char*>(a.workspace) + per_thread * static_cast<size_t>(omp_get_thread_num());
    const Scratch::Buffers buf = sc.carve(mine);
#pragma omp for schedule(dynamic)
    for (int64_t item = 0; item < items; ++item)
      backward_head(L, io, dout, out, grad, item / L.heads, item % L.heads, buf);
  }
}

}  // namespace

void register_attention_kernels() {
  graph::register_kernel(DeviceKind::cpu, Op::Attention, DType::f32, attention_forward);
  graph::register_kernel(DeviceKind::cpu, Op::AttentionGrad, DType::f32, attention_backward);
  graph::register_workspace(DeviceKind::cpu, Op::Attention, attention_workspace);
  graph::register_workspace(DeviceKind::cpu, Op::AttentionGrad, attention_workspace);
}

}  // namespace tk::cpu
