// Conv2D with one input channel (a network's first layer on grayscale images; the tutorial CNN's conv1: 28x28x1
// -> 32 filters, 5x5, "same") computed directly in trainkit's own NHWC / HWIO layouts.
//
// oneDNN computes these convolutions at ~315 GFLOP/s, but in its blocked layout: reordering the output (forward)
// or the output gradient (filter gradient), 12.8 MB at batch 128, from or to NHWC took as long as the convolution
// itself (docs/benchmarks.md, "Convolution kernels chosen by measurement"). With C = 1, an output pixel's F values
// are a sum of KH*KW pixels, each broadcast and multiplied by one row of the kernel: register-tiled FMA loops over
// NHWC, with no reorder at all.
//
// Taken for C == 1, stride 1, dilation 1, KW in {3, 5, 7}, KH <= 7, F a multiple of the vector width, in float32
// and bfloat16 (bfloat16 is widened on load, accumulated in float32 and rounded once when stored, as oneDNN
// does); every other convolution keeps the kernel registered before this one (oneDNN, im2col, widened).
// TK_CONV=im2col or TK_CONV_C1=0 turn it off.
//
// The filter gradient sums fixed chunks of images into partial sums and adds the partials in chunk order, so its
// bits do not depend on the thread count. All scratch is in the program's planned workspace.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#include "backends/cpu/kernels.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/threads.h"
#include "graph/kernel.h"
#include "graph/window.h"
#include "runtime/settings.h"
#include "trainkit/core/error.h"
#include "trainkit/core/half.h"

namespace tk::cpu {
using graph::KernelArgs;
using graph::KernelFn;
using graph::Op;
using graph::Window;
using graph::WorkspaceFn;

namespace {

// The vector the build's ISA has (-march=native where TK_NATIVE is on): 16 floats and 32 registers with
// AVX-512, 8 and 16 with AVX, 4 and 16 with SSE only.
#if defined(__AVX512F__)
constexpr int kLanes = 16, kRegs = 32;
#elif defined(__AVX__)
constexpr int kLanes = 8, kRegs = 16;
#else
constexpr int kLanes = 4, kRegs = 16;
#endif
typedef float Vec __attribute__((vector_size(kLanes * sizeof(float))));

inline Vec load(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, Vec v) { std::memcpy(p, &v, sizeof v); }
// Hides where p points from the optimizer. The forward tile reads pixels k .. k + OWB - 1 at tap k; seeing that
// tap k + 1 reads the same pixels shifted by one, GCC keeps them in registers and broadcasts each from a register,
// which takes the shuffle port that is also an FMA port. Loaded afresh, each broadcast folds into its FMA
// (vfmadd231ps mem{1to16}), done by the load unit.
template <typename P>
inline void opaque(P*& p) {
  asm("" : "+r"(p));
}

// Output pixels per forward tile: OWB x NV accumulators, NV kernel vectors and one broadcast fit the registers.
constexpr int kOutBlock = kRegs >= 32 ? 14 : 6;

bool disabled() {
  static const bool off = [] {
    return runtime::setting_choice(runtime::Setting::conv) == "im2col" ||
           !runtime::setting_bool_or_default(runtime::Setting::conv_c1);
  }();
  return off;
}

// The window and filter count of a conv node (the filter gradient's output is the kernel (KH, KW, C, F)).
std::pair<Window, int64_t> geometry(const graph::Graph& gr, const graph::Node& n) {
  if (n.op == Op::Conv2DGradFilter) return {Window::of(gr[n.inputs[0]].shape, n.attrs), n.attrs.shape[3]};
  return {Window::of(gr[n.inputs[0]].shape, n.attrs), gr[n.inputs[1]].shape[3]};
}

bool fits(const Window& g, int64_t f) {
  return !disabled() && g.c == 1 && g.sh == 1 && g.sw == 1 && g.dh == 1 && g.dw == 1 &&
         (g.kw == 3 || g.kw == 5 || g.kw == 7) && g.kh >= 1 && g.kh <= 7 && f > 0 && f % kLanes == 0 && g.n > 0 &&
         g.oh > 0 && g.ow > 0;
}

// Filter vectors per tile: two where the accumulators still fit the registers and F is a multiple of two vectors.
int vectors_per_tile(const Window& g, int64_t f) { return f % (2 * kLanes) == 0 && 2 * g.kw + 3 <= kRegs ? 2 : 1; }

size_t align16(size_t floats) { return (floats + 15) / 16 * 16; }  // 64 bytes

// The padded image P (PH, PW): the input with its zero padding, and OWB zero columns more on the right so that
// the last forward tile of a row may read past the row's end.
int64_t padded_rows(const Window& g) { return g.oh + g.kh - 1; }
int64_t padded_cols(const Window& g) { return g.ow + g.kw - 1 + kOutBlock; }

// Images per filter-gradient chunk: a fixed function of the batch (at most 64 chunks), never of the threads.
int64_t images_per_chunk(const Window& g) { return std::max<int64_t>(4, (g.n + 63) / 64); }
int64_t chunks(const Window& g) { return (g.n + images_per_chunk(g) - 1) / images_per_chunk(g); }

// Per-thread scratch, in floats: the padded image and one row of output (or output gradient) in float32.
size_t per_thread(const Window& g, int64_t f) {
  return align16(static_cast<size_t>(padded_rows(g) * padded_cols(g))) + align16(static_cast<size_t>(g.ow * f));
}

// Forward: the kernel and bias in float32, then per-thread scratch. Filter gradient: the chunks' partial sums, then
// per-thread scratch.
size_t direct_workspace_floats(Op op, const Window& g, int64_t f) {
  const size_t taps = static_cast<size_t>(g.kh * g.kw * f);
  const size_t head = op == Op::Conv2DGradFilter ? static_cast<size_t>(chunks(g)) * align16(taps)
                                                 : align16(taps) + align16(static_cast<size_t>(f));
  return head + static_cast<size_t>(max_threads()) * per_thread(g, f);
}

// The per-thread scratch is planned for max_threads() threads; a team is never larger (threads.h).
void check_threads() {
  if (omp_get_max_threads() > max_threads())
    throw Error("conv_c1: " + std::to_string(omp_get_max_threads()) + " threads, but the workspace was planned for " +
                std::to_string(max_threads()));
}

// n values widened to float32 (half.h's bulk conversion for bfloat16), and the way back: the kernels compute in
// float32 whatever the tensors hold.
void load_row(const float* src, float* dst, int64_t n) { std::memcpy(dst, src, sizeof(float) * size_t(n)); }
void load_row(const bfloat16* src, float* dst, int64_t n) { convert_bf16_to_f32(src, dst, static_cast<size_t>(n)); }
void store_row(const float* row, float* dst, int64_t n) { std::memcpy(dst, row, sizeof(float) * size_t(n)); }
void store_row(const float* row, bfloat16* dst, int64_t n) { convert_f32_to_bf16(row, dst, static_cast<size_t>(n)); }

// P(PH, PW) = x (H, W) of one image placed at (pt, pl), zeros around it.
template <typename T>
void pad_image(const Window& g, const T* x, float* p) {
  const int64_t pw = padded_cols(g), ph = padded_rows(g);
  std::memset(p, 0, sizeof(float) * static_cast<size_t>(ph * pw));
  for (int64_t r = 0; r < g.h; ++r) {
    const int64_t pr = r + g.pt;
    if (pr >= ph) break;
    float* dst = p + pr * pw + g.pl;
    const T* src = x + r * g.w;
    const int64_t cols = std::min(g.w, pw - g.pl);
    load_row(src, dst, cols);
  }
}

// One forward tile: output pixels [ow0, ow0 + count) of row oh, filters [f0, f0 + NV * kLanes):
// y(pixel, f) = sum over (i, k) of P(oh + i, pixel + k) * w(i, k, f) (+ bias, relu).
template <int NV>
void forward_tile(const Window& g, const float* p, const float* w, int64_t f, int64_t f0, const float* bias, bool relu,
                  int64_t oh, int64_t ow0, int64_t count, float* yrow) {
  const int64_t pw = padded_cols(g);
  Vec acc[kOutBlock][NV] = {};
  for (int64_t i = 0; i < g.kh; ++i) {
    const float* prow = p + (oh + i) * pw + ow0;
    const float* wrow = w + i * g.kw * f + f0;
    for (int64_t k = 0; k < g.kw; ++k) {
      Vec wv[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) wv[v] = load(wrow + k * f + v * kLanes);
      const float* px = prow + k;
      opaque(px);
#pragma GCC unroll 16
      for (int j = 0; j < kOutBlock; ++j) {
        const float x = px[j];
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[j][v] += x * wv[v];
      }
    }
  }
  const Vec zero = {};
  for (int j = 0; j < kOutBlock; ++j) {
    if (j >= count) break;
    for (int v = 0; v < NV; ++v) {
      Vec out = acc[j][v];
      if (bias) out += load(bias + f0 + v * kLanes);
      if (relu) out = out < zero ? zero : out;  // NaN stays NaN, as std::max(x, 0) keeps it
      store(yrow + (ow0 + j) * f + f0 + v * kLanes, out);
    }
  }
}

// y(OH, OW, F) of one image, row by row; yrow receives each row (OW, F) in float32.
template <int NV>
void forward_image(const Window& g, const float* p, const float* w, int64_t f, const float* bias, bool relu, int64_t oh,
                   float* yrow) {
  for (int64_t f0 = 0; f0 < f; f0 += NV * kLanes)
    for (int64_t ow0 = 0; ow0 < g.ow; ow0 += kOutBlock)
      forward_tile<NV>(g, p, w, f, f0, bias, relu, oh, ow0, std::min<int64_t>(kOutBlock, g.ow - ow0), yrow);
}

// (x (N, H, W, 1), w (KH, KW, 1, F)[, bias (F)]) -> y (N, OH, OW, F)
template <typename T>
void forward(const KernelArgs& a) {
  const auto [g, f] = geometry(a.g, a.node);
  const bool fused = a.node.op == Op::FusedConv2D, relu = fused && a.node.attrs.epilogue == Op::Relu;
  const T* x = a.input<T>(0);
  T* y = a.output<T>();
  float* ws = static_cast<float*>(a.workspace);
  const size_t taps = static_cast<size_t>(g.kh * g.kw * f);
  float* w = ws;  // (KH, KW, F) in float32
  float* bias = ws + align16(taps);
  load_row(a.input<T>(1), w, static_cast<int64_t>(taps));
  if (fused) load_row(a.input<T>(2), bias, f);
  float* scratch = bias + align16(static_cast<size_t>(f));
  const size_t stride = per_thread(g, f);
  const int nv = vectors_per_tile(g, f);
  check_threads();
  parallel_for(
      g.n,
      [&](int64_t b, int64_t e) {
        const int t = omp_get_thread_num();
        float* p = scratch + static_cast<size_t>(t) * stride;
        float* row = p + align16(static_cast<size_t>(padded_rows(g) * padded_cols(g)));
        for (int64_t i = b; i < e; ++i) {
          pad_image(g, x + i * g.h * g.w, p);
          T* yi = y + i * g.pixels() * f;
          for (int64_t oh = 0; oh < g.oh; ++oh) {
            float* dst = row;
            if constexpr (std::is_same_v<T, float>) dst = yi + oh * g.ow * f;
            if (nv == 2)
              forward_image<2>(g, p, w, f, fused ? bias : nullptr, relu, oh, dst);
            else
              forward_image<1>(g, p, w, f, fused ? bias : nullptr, relu, oh, dst);
            if constexpr (!std::is_same_v<T, float>) store_row(row, yi + oh * g.ow * f, g.ow * f);
          }
        }
      },
      1);
}

// One output row's contribution to the partial kernel gradient, filters [f0, f0 + NV * kLanes):
// dw(i, k, f) += sum over pixels of P(oh + i, pixel + k) * dy(pixel, f).
template <int KW, int NV>
void grad_row(const Window& g, const float* p, const float* dyrow, int64_t f, int64_t f0, int64_t oh, float* part) {
  const int64_t pw = padded_cols(g);
  for (int64_t i = 0; i < g.kh; ++i) {
    const float* prow = p + (oh + i) * pw;
    float* dst = part + i * KW * f + f0;
    Vec acc[KW][NV];
#pragma GCC unroll 8
    for (int k = 0; k < KW; ++k)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[k][v] = load(dst + k * f + v * kLanes);
    for (int64_t o = 0; o < g.ow; ++o) {
      Vec d[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) d[v] = load(dyrow + o * f + f0 + v * kLanes);
#pragma GCC unroll 8
      for (int k = 0; k < KW; ++k) {
        const float x = prow[o + k];
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[k][v] += x * d[v];
      }
    }
#pragma GCC unroll 8
    for (int k = 0; k < KW; ++k)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) store(dst + k * f + v * kLanes, acc[k][v]);
  }
}

template <int KW>
void grad_row_any(const Window& g, const float* p, const float* dyrow, int64_t f, int nv, int64_t oh, float* part) {
  for (int64_t f0 = 0; f0 < f; f0 += nv * kLanes)
    if (nv == 2)
      grad_row<KW, 2>(g, p, dyrow, f, f0, oh, part);
    else
      grad_row<KW, 1>(g, p, dyrow, f, f0, oh, part);
}

// (x (N, H, W, 1), dy (N, OH, OW, F)) -> dw (KH, KW, 1, F)
template <typename T>
void grad_filter(const KernelArgs& a) {
  const auto [g, f] = geometry(a.g, a.node);
  const T* x = a.input<T>(0);
  const T* dy = a.input<T>(1);
  float* ws = static_cast<float*>(a.workspace);
  const size_t taps = static_cast<size_t>(g.kh * g.kw * f), part_stride = align16(taps);
  const int64_t nchunks = chunks(g), per_chunk = images_per_chunk(g);
  float* scratch = ws + static_cast<size_t>(nchunks) * part_stride;
  const size_t stride = per_thread(g, f);
  const int nv = vectors_per_tile(g, f);
  check_threads();
  parallel_for(
      nchunks,
      [&](int64_t b, int64_t e) {
        const int t = omp_get_thread_num();
        float* p = scratch + static_cast<size_t>(t) * stride;
        float* row = p + align16(static_cast<size_t>(padded_rows(g) * padded_cols(g)));
        for (int64_t c = b; c < e; ++c) {
          float* part = ws + static_cast<size_t>(c) * part_stride;
          std::memset(part, 0, sizeof(float) * taps);
          for (int64_t i = c * per_chunk; i < std::min(g.n, (c + 1) * per_chunk); ++i) {
            pad_image(g, x + i * g.h * g.w, p);
            const T* dyi = dy + i * g.pixels() * f;
            for (int64_t oh = 0; oh < g.oh; ++oh) {
              const float* dyrow;
              if constexpr (std::is_same_v<T, float>) {
                dyrow = dyi + oh * g.ow * f;
              } else {
                load_row(dyi + oh * g.ow * f, row, g.ow * f);
                dyrow = row;
              }
              if (g.kw == 3)
                grad_row_any<3>(g, p, dyrow, f, nv, oh, part);
              else if (g.kw == 5)
                grad_row_any<5>(g, p, dyrow, f, nv, oh, part);
              else
                grad_row_any<7>(g, p, dyrow, f, nv, oh, part);
            }
          }
        }
      },
      1);
  // dw = the partials added in chunk order (a fixed order: the same bits on any number of threads).
  T* dw = a.output<T>();
  float* sum = ws;  // the first chunk's partial
  for (int64_t c = 1; c < nchunks; ++c) {
    const float* part = ws + static_cast<size_t>(c) * part_stride;
#pragma omp simd
    for (size_t k = 0; k < taps; ++k) sum[k] += part[k];
  }
  store_row(sum, dw, static_cast<int64_t>(taps));
}

// The kernels registered before this file's, per op and dtype (0: float32, 1: bfloat16), and their workspace rules.
constexpr Op kOps[3] = {Op::Conv2D, Op::FusedConv2D, Op::Conv2DGradFilter};
KernelFn g_prev[3][2] = {};
WorkspaceFn g_prev_ws[3][2] = {};
template <typename T>
constexpr int kDtype = std::is_same_v<T, float> ? 0 : 1;  // T's column of g_prev and g_prev_ws

int op_index(Op op) { return op == Op::Conv2D ? 0 : op == Op::FusedConv2D ? 1 : 2; }

template <typename T>
void run(const KernelArgs& a) {
  const auto [g, f] = geometry(a.g, a.node);
  if (!fits(g, f)) {
    g_prev[op_index(a.node.op)][kDtype<T>](a);
    return;
  }
  if (a.node.op == Op::Conv2DGradFilter)
    grad_filter<T>(a);
  else
    forward<T>(a);
}

// The workspace where the direct kernel runs: with T = float (the float32 stage), every dtype of a fitting node (a
// 16-bit node widened to float32 reaches the float32 kernel through widen.cpp, which adds its copies to this rule);
// with T = bfloat16, registered last, a bfloat16 node that runs the bfloat16 kernel of this file.
template <typename T>
size_t workspace_stage(const graph::Graph& gr, int node) {
  const auto [g, f] = geometry(gr, gr[node]);
  if ((kDtype<T> == 0 || gr[node].dtype == DType::bf16) && fits(g, f))
    return direct_workspace_floats(gr[node].op, g, f) * sizeof(float);
  const WorkspaceFn prev = g_prev_ws[op_index(gr[node].op)][kDtype<T>];
  return prev ? prev(gr, node) : 0;
}

// Wraps, per op, what is registered before it for dtype t (and registers nothing twice: a second call keeps the first
// wrapping).
template <typename T>
void register_c1(DType t) {
  constexpr int k = kDtype<T>;
  for (Op op : kOps) {
    const int i = op_index(op);
    const KernelFn now = graph::registered_kernel(DeviceKind::cpu, op, graph::signature_for(op, t));
    if (now == run<T>) {  // bfloat16: a float32 kernel registered since may have replaced the op's workspace rule
      if (k == 1 && g_prev_ws[i][k]) graph::register_workspace(DeviceKind::cpu, op, workspace_stage<T>);
      continue;
    }
    g_prev[i][k] = now;
    g_prev_ws[i][k] = graph::registered_workspace(DeviceKind::cpu, op);
    if (!g_prev[i][k]) continue;
    graph::register_kernel(DeviceKind::cpu, op, t, run<T>);
    graph::register_workspace(DeviceKind::cpu, op, workspace_stage<T>);
  }
}

}  // namespace

bool c1_conv_taken(const graph::Graph& gr, int node) {
  const graph::Node& n = gr[node];
  if (n.op != Op::Conv2D && n.op != Op::FusedConv2D && n.op != Op::Conv2DGradFilter) return false;
  const auto [g, f] = geometry(gr, n);
  const graph::KernelFn want = n.dtype == DType::bf16 ? run<bfloat16> : run<float>;
  const DType t = n.dtype == DType::bf16 ? DType::bf16 : DType::f32;
  return fits(g, f) && graph::registered_kernel(DeviceKind::cpu, n.op, graph::signature_for(n.op, t)) == want;
}

void register_c1_conv_kernels() { register_c1<float>(DType::f32); }
void register_c1_bf16_conv_kernels() { register_c1<bfloat16>(DType::bf16); }

}  // namespace tk::cpu
