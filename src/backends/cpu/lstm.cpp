// The fused LSTM ops on the CPU (graph/lstm_rules.h): per step one GEMM (h U forward, dz U^T backward, on gemm.h's
// engines) and one pass of the cell's element math (backends/math/lstm.h), 16 lanes at a time where the build
// targets AVX-512F (sigmoid through exp16.h, tanh as Cephes' tanhf: each within 2 ulp of glibc's), the
// remaining columns through math::lstm_cell itself. The batch rows of an LSTM never meet (each row's recurrence is
// its own), so the threads split the rows once for the whole sequence: each runs every step of its rows, its GEMMs
// on one thread, and no thread waits for another between steps (a barrier per step, and GEMMs of 64 rows split two
// ways, cost more than the steps' work at the sizes this is for: a (64, 64) state is 4096 elements).
#include "backends/math/lstm.h"

#include <algorithm>
#include <cstring>

#include "backends/cpu/exp16.h"
#include "backends/cpu/gemm.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/vector_exp.h"
#include "graph/kernel.h"
#include "graph/lstm_rules.h"

namespace tk::cpu {
namespace {
using graph::KernelArgs;
using graph::LstmLayout;
using graph::Op;

size_t align64(size_t b) { return (b + 63) / 64 * 64; }

GemmShape forward_gemm(int64_t rows, int64_t u) { return {rows, 4 * u, u, false, false, Epilogue::none}; }
GemmShape backward_gemm(int64_t rows, int64_t u) { return {rows, u, 4 * u, false, true, Epilogue::none}; }

// The threads' row blocks: up to the team's size, at least kMinRows rows each.
constexpr int64_t kMinRows = 8;
int row_threads(int64_t batch) {
  adapt_threads();
  return static_cast<int>(std::clamp<int64_t>(batch / kMinRows, 1, omp_get_max_threads()));
}
struct Rows {
  int64_t begin, end;
};
Rows rows_of(int64_t batch, int threads, int k) {
  const int64_t chunk = (batch + threads - 1) / threads;
  return {std::min(batch, k * chunk), std::min(batch, (k + 1) * chunk)};
}

// [GEMM scratch per thread (max_threads())][(N, 4u) h U | (N, u) dh, dh_in and dc carried between steps]. The
// scratch is sized for the largest block (all N rows), whatever the split.
size_t scratch_bytes(const LstmLayout& L, bool fwd) {
  return align64(gemm_workspace(fwd ? forward_gemm(L.batch, L.units) : backward_gemm(L.batch, L.units)));
}
size_t lstm_workspace(const graph::Graph& g, int node) {
  const LstmLayout L = graph::lstm_layout(g, node);
  return scratch_bytes(L, g[node].op == Op::LstmSequence) * static_cast<size_t>(max_threads()) +
         align64(sizeof(float) * static_cast<size_t>(4 * L.state()));
}

#if defined(__AVX512F__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12's AVX-512 intrinsics (vector_exp.h says why)
inline __m512 sigmoid16(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  return _mm512_div_ps(one, _mm512_add_ps(one, exp16(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}
// Cephes' tanhf: |x| < 0.625 an odd polynomial, else 1 - 2 / (e^2|x| + 1) with x's sign (1 once e^2|x| is inf).
inline __m512 tanh16(__m512 x) {
  const __m512 ax = _mm512_abs_ps(x);
  const __m512 z = _mm512_mul_ps(x, x);
  __m512 p = _mm512_set1_ps(-5.70498872745e-3f);
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(2.06390887954e-2f));
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(-5.37397155531e-2f));
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(1.33314422036e-1f));
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(-3.33332819422e-1f));
  const __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(p, z), x, x);
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 e = exp16(_mm512_add_ps(ax, ax));
  __m512 big = _mm512_sub_ps(one, _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, one)));
  // x's sign on the large branch (a NaN x is NaN on both branches)
  big = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(big),
                                            _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN))));
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(ax, _mm512_set1_ps(0.625f), _CMP_LT_OQ), big, small);
}
#endif

// One step's cell over row n's u columns: z = proj + hu (both (4u) gate blocks), gates (4u), c and h (u).
void cell_row(const float* proj, const float* hu, const float* c_prev, int64_t u, float* gates, float* c, float* h) {
  int64_t j = 0;
#if defined(__AVX512F__)
  for (; j + 16 <= u; j += 16) {
    auto z = [&](int64_t k) {
      return _mm512_add_ps(_mm512_loadu_ps(proj + k * u + j), _mm512_loadu_ps(hu + k * u + j));
    };
    const __m512 i = sigmoid16(z(0)), f = sigmoid16(z(1)), g = tanh16(z(2)), o = sigmoid16(z(3));
    const __m512 cn = _mm512_add_ps(_mm512_mul_ps(f, _mm512_loadu_ps(c_prev + j)), _mm512_mul_ps(i, g));
    _mm512_storeu_ps(gates + j, i);
    _mm512_storeu_ps(gates + u + j, f);
    _mm512_storeu_ps(gates + 2 * u + j, g);
    _mm512_storeu_ps(gates + 3 * u + j, o);
    _mm512_storeu_ps(c + j, cn);
    _mm512_storeu_ps(h + j, _mm512_mul_ps(o, tanh16(cn)));
  }
#endif
  for (; j < u; ++j)
    math::lstm_cell(proj[j] + hu[j], proj[u + j] + hu[u + j], proj[2 * u + j] + hu[2 * u + j],
                    proj[3 * u + j] + hu[3 * u + j], c_prev[j], gates + j, gates + u + j, gates + 2 * u + j,
                    gates + 3 * u + j, c + j, h + j);
}

// One step's gradient over row n: dh, dc (u) and the gate rows' dy dg (4u) in; dz (4u) out, dc replaced by dc_prev.
void cell_grad_row(const float* gates, const float* c, const float* c_prev, const float* dh, const float* dg, float* dc,
                   int64_t u, float* dz) {
  int64_t j = 0;
#if defined(__AVX512F__)
  const __m512 one = _mm512_set1_ps(1.0f);
  for (; j + 16 <= u; j += 16) {
    const __m512 i = _mm512_loadu_ps(gates + j), f = _mm512_loadu_ps(gates + u + j);
    const __m512 g = _mm512_loadu_ps(gates + 2 * u + j), o = _mm512_loadu_ps(gates + 3 * u + j);
    const __m512 tc = tanh16(_mm512_loadu_ps(c + j));
    const __m512 vdh = _mm512_loadu_ps(dh + j);
    const __m512 dct = _mm512_add_ps(_mm512_loadu_ps(dc + j),
                                     _mm512_mul_ps(_mm512_mul_ps(vdh, o), _mm512_sub_ps(one, _mm512_mul_ps(tc, tc))));
    auto sig_grad = [&](__m512 d, __m512 y) { return _mm512_mul_ps(_mm512_mul_ps(d, y), _mm512_sub_ps(one, y)); };
    auto plus_dg = [&](__m512 d, int k) { return _mm512_add_ps(d, _mm512_loadu_ps(dg + k * u + j)); };
    _mm512_storeu_ps(dz + j, sig_grad(plus_dg(_mm512_mul_ps(dct, g), 0), i));
    _mm512_storeu_ps(dz + u + j, sig_grad(plus_dg(_mm512_mul_ps(dct, _mm512_loadu_ps(c_prev + j)), 1), f));
    _mm512_storeu_ps(dz + 2 * u + j,
                     _mm512_mul_ps(plus_dg(_mm512_mul_ps(dct, i), 2), _mm512_sub_ps(one, _mm512_mul_ps(g, g))));
    _mm512_storeu_ps(dz + 3 * u + j, sig_grad(plus_dg(_mm512_mul_ps(vdh, tc), 3), o));
    _mm512_storeu_ps(dc + j, _mm512_mul_ps(dct, f));
  }
#endif
  for (; j < u; ++j)
    math::lstm_cell_grad(gates[j], gates[u + j], gates[2 * u + j], gates[3 * u + j], c[j], c_prev[j], dh[j], dc[j],
                         dg[j], dg[u + j], dg[2 * u + j], dg[3 * u + j], dz + j, dz + u + j, dz + 2 * u + j,
                         dz + 3 * u + j, dc + j);
}
#if defined(__AVX512F__)
#pragma GCC diagnostic pop
#endif

void lstm_sequence(const KernelArgs& a) {
  const LstmLayout L = graph::lstm_layout(a.g, a.node);
  const int64_t n = L.batch, u = L.units, s = L.state();
  const float* proj = a.input<float>(0);  // (T * N, 4u), time-major
  const float* w = a.input<float>(1);     // (u, 4u)
  float* y = a.output<float>();           // (6T + 2, N, u): graph/lstm_rules.h
  const size_t scratch = scratch_bytes(L, true);
  float* hu = reinterpret_cast<float*>(static_cast<char*>(a.workspace) +
                                       scratch * static_cast<size_t>(max_threads()));  // (N, 4u)
  std::memcpy(y + L.h(L.init_row()), a.input<float>(2), sizeof(float) * static_cast<size_t>(s));
  std::memcpy(y + L.c(L.init_row()), a.input<float>(3), sizeof(float) * static_cast<size_t>(s));
  const int threads = row_threads(n);
#pragma omp parallel num_threads(threads)
  {
    omp_set_num_threads(1);  // this thread's GEMMs run on it alone (their engine is chosen for one thread)
    const int k = omp_get_thread_num();
    const Rows r = rows_of(n, omp_get_num_threads(), k);
    void* gemm_ws = static_cast<char*>(a.workspace) + scratch * static_cast<size_t>(k);
    const GemmShape shape = forward_gemm(r.end - r.begin, u);
    for (int64_t step = 0; step < L.steps && r.begin < r.end; ++step) {
      const int64_t t = L.reverse ? L.steps - 1 - step : step;
      const int64_t prev = L.prev_row(t), out = L.out_row(t);
      gemm(shape, y + L.h(prev) + r.begin * u, w, nullptr, nullptr, hu + r.begin * 4 * u, gemm_ws);
      const float* pt = proj + t * 4 * s;
      float* gates = y + L.gates(t);
      for (int64_t i = r.begin; i < r.end; ++i)
        cell_row(pt + i * 4 * u, hu + i * 4 * u, y + L.c(prev) + i * u, u, gates + i * 4 * u, y + L.c(out) + i * u,
                 y + L.h(out) + i * u);
    }
  }
}

void lstm_sequence_grad(const KernelArgs& a) {
  const LstmLayout L = graph::lstm_layout(a.g, a.node);
  const int64_t n = L.batch, u = L.units, s = L.state();
  const float* dy = a.input<float>(0);  // (6T + 2, N, u)
  const float* y = a.input<float>(1);   // (6T + 2, N, u)
  const float* w = a.input<float>(2);   // (u, 4u)
  float* d = a.output<float>();         // (T + 1, N, 4u)
  const size_t scratch = scratch_bytes(L, false);
  float* dh = reinterpret_cast<float*>(static_cast<char*>(a.workspace) +
                                       scratch * static_cast<size_t>(max_threads()));  // (N, u)
  float* dh_in = dh + s;                                                               // (N, u)
  float* dc = dh + 2 * s;                                                              // (N, u)
  const int threads = row_threads(n);
#pragma omp parallel num_threads(threads)
  {
    omp_set_num_threads(1);
    const int k = omp_get_thread_num();
    const Rows r = rows_of(n, omp_get_num_threads(), k);
    void* gemm_ws = static_cast<char*>(a.workspace) + scratch * static_cast<size_t>(k);
    const GemmShape shape = backward_gemm(r.end - r.begin, u);
    const int64_t e0 = r.begin * u, e1 = r.end * u;  // this thread's elements of an (N, u) state
    std::fill(dh + e0, dh + e1, 0.0f);
    std::fill(dc + e0, dc + e1, 0.0f);
    for (int64_t step = L.steps - 1; step >= 0 && r.begin < r.end; --step) {
      const int64_t t = L.reverse ? L.steps - 1 - step : step;
      const int64_t prev = L.prev_row(t), out = L.out_row(t);
      // What reaches h and c at time t: the layer's readers (dy) and the step after (dh, dc).
      for (int64_t e = e0; e < e1; ++e) dh_in[e] = dy[L.h(out) + e] + dh[e];
      for (int64_t e = e0; e < e1; ++e) dc[e] += dy[L.c(out) + e];
      float* dz = d + t * 4 * s;
      for (int64_t i = r.begin; i < r.end; ++i)
        cell_grad_row(y + L.gates(t) + i * 4 * u, y + L.c(out) + i * u, y + L.c(prev) + i * u, dh_in + i * u,
                      dy + L.gates(t) + i * 4 * u, dc + i * u, u, dz + i * 4 * u);
      gemm(shape, dz + r.begin * 4 * u, w, nullptr, nullptr, dh + e0, gemm_ws);  // dh_prev = dz U^T
    }
    float* dh0 = d + L.dh0();
    float* dc0 = d + L.dc0();
    for (int64_t e = e0; e < e1; ++e) dh0[e] = dy[L.h(L.init_row()) + e] + dh[e];
    for (int64_t e = e0; e < e1; ++e) dc0[e] = dy[L.c(L.init_row()) + e] + dc[e];
  }
  std::fill(d + L.dc0() + s, d + L.dc0() + 3 * s, 0.0f);
}

}  // namespace

void register_lstm_kernels() {
  graph::register_kernel(DeviceKind::cpu, Op::LstmSequence, DType::f32, lstm_sequence);
  graph::register_kernel(DeviceKind::cpu, Op::LstmSequenceGrad, DType::f32, lstm_sequence_grad);
  graph::register_workspace(DeviceKind::cpu, Op::LstmSequence, lstm_workspace);
  graph::register_workspace(DeviceKind::cpu, Op::LstmSequenceGrad, lstm_workspace);
}

}  // namespace tk::cpu
