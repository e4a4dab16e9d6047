// Single-precision GEMM with an epilogue, on the faster of two engines for each shape: OpenBLAS' sgemm or
// oneDNN's matmul primitive (JIT kernels; bias and relu fused as post-ops). The choice is made once per
// (shape, transposes, epilogue, threads) at the first call, by timing both engines on that call's own buffers
// (a few repetitions each, no allocation), kept for the life of the process and appended to the machine's
// choice cache (TK_GEMM_CACHE; default ~/.cache/trainkit/gemm-<cpu model>.txt), which later processes start from,
// so runs on one machine choose alike and compute the same bits. TK_GEMM=openblas|onednn forces one engine;
// TK_PROFILE=1 prints each measurement. A resumed run reuses the choices its backup was made with (gemm_choices /
// set_gemm_choices travel in the training state), so it computes the same bits as the run that made it.
//
//   tk::cpu::GemmShape s{m, n, k, /*ta=*/false, /*tb=*/false, tk::cpu::Epilogue::bias_relu};
//   tk::cpu::gemm(s, a, b, bias, /*y=*/nullptr, c, workspace);   // c(m,n) = relu(a(m,k) b(k,n) + bias(n))
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace tk::cpu {

enum class Epilogue : uint8_t {
  none,       // c = op(a) op(b)
  bias,       // c = op(a) op(b) + bias(n)
  bias_relu,  // c = max(op(a) op(b) + bias(n), 0)
  relu,       // c = max(op(a) op(b), 0)
  relu_grad,  // c = op(a) op(b) * (y(m,n) > 0): the gradient through a relu whose output is y
};

// Row-major operands: a is (m,k), or (k,m) when ta; b is (k,n), or (n,k) when tb; c is (m,n).
struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
  bool ta = false, tb = false;
  Epilogue epilogue = Epilogue::none;
  auto operator<=>(const GemmShape&) const = default;
};

// Whether the epilogue adds the bias (n), whether it applies a relu.
inline bool has_bias(Epilogue e) { return e == Epilogue::bias || e == Epilogue::bias_relu; }
inline bool has_relu(Epilogue e) { return e == Epilogue::bias_relu || e == Epilogue::relu; }

enum class GemmEngine : uint8_t { openblas, onednn };

// Scratch bytes gemm() may use for `s` (oneDNN's scratchpad; 0 without oneDNN). Cheap: builds no kernel.
size_t gemm_workspace(const GemmShape& s);
// The column sums of c (the bias gradient), added by the relu_grad epilogue's pass while it writes c
// (graph/fuse.h): out(n), with partial holding ColumnSums(m, n).workspace_bytes() (column_sums.h).
struct SumsOut {
  float* out;
  double* partial;
};

// Runs c = epilogue(op(a) op(b)); bias is read for the bias epilogues, y for relu_grad. workspace holds at
// least gemm_workspace(s) bytes, 64-byte aligned. With sums (relu_grad only), also their column sums.
void gemm(const GemmShape& s, const float* a, const float* b, const float* bias, const float* y, float* c,
          void* workspace, const SumsOut* sums = nullptr);

// c(m,n) = epilogue(c) in one pass over c (s.k unused): what gemm() does after an engine without the epilogue, and
// what a convolution computed as GEMMs uses for its bias and relu.
void apply_epilogue(const GemmShape& s, const float* bias, const float* y, float* c);

// The GEMM of a MatMul or FusedMatMul node.
GemmShape gemm_shape(const graph::Graph& g, const graph::Node& n);

// The engines chosen by measurement so far for `shapes` (all when empty) and those set_gemm_choices restored, as text
// ("m,n,k,ta,tb,epilogue,threads=engine;..."; forced and too-small shapes are the same on every run and not
// listed), and restoring them: shapes named there use the named engine instead of measuring. Unknown engines
// (a build without oneDNN) are ignored.
std::string gemm_choices(const std::vector<GemmShape>& shapes = {});
// The same for `shapes` alone (none when empty), with the restored ones always: what a training state records.
std::string gemm_choices_of(const std::vector<GemmShape>& shapes);
void set_gemm_choices(const std::string& text);
bool onednn_gemm_available();
// oneDNN is built in and the CPU computes bfloat16 natively (AVX512_BF16 or AMX, as oneDNN's effective ISA, which
// ONEDNN_MAX_CPU_ISA caps): bfloat16 MatMul and convolutions then run on oneDNN without float32 copies
// (gemm_bf16.cpp, conv_onednn.cpp); elsewhere they are widened to float32 in the workspace (widen.cpp).
bool onednn_bf16_native();

}  // namespace tk::cpu
