// bfloat16 MatMul and FusedMatMul on oneDNN's matmul primitive with bfloat16 memory, where the CPU computes
// bfloat16 natively (AVX512_BF16 or AMX; oneDNN reports it through dnnl_get_effective_cpu_isa, which
// ONEDNN_MAX_CPU_ISA caps). Operands and result stay in 2 bytes; oneDNN accumulates in float32 and rounds once
// after the bias — the same contract as the widened kernel (widen.cpp: float32 math, one rounding); the relu is
// applied to the rounded result (exact either way) by a pass of ours (relu_pass.h), not oneDNN's post-op, which maps
// NaN to 0 — without the float32 copies of the operands in the workspace. Elsewhere (AVX2-only CPUs, no oneDNN)
// the widened kernel stays: sgemm on float32 copies that live in the planned workspace. TK_PROFILE=1 says once
// which path runs. relu_grad (FusedMatMul's backward mask) is the product, then the mask applied in bfloat16
// (exact: it only zeroes elements).
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "backends/cpu/gemm.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/relu_pass.h"
#include "backends/cpu/threads.h"
#include "graph/kernel.h"
#include "runtime/settings.h"
#include "trainkit/core/half.h"

#ifdef TK_HAVE_ONEDNN
#include <omp.h>

#include "backends/cpu/onednn.h"
#endif

namespace tk::cpu {
using graph::KernelArgs;
using graph::Op;

bool onednn_bf16_native() {
#ifdef TK_HAVE_ONEDNN
  static const bool yes = [] {
    const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    const bool ok = (isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16;
    if (runtime::setting_bool_or_default(runtime::Setting::profile))
      std::fprintf(stderr, "TK_PROFILE bfloat16 matmul and convolution: %s\n",
                   ok ? "oneDNN, native bfloat16 (AVX512_BF16/AMX), no float32 copies"
                      : "widened to float32 in the workspace (oneDNN sees no AVX512_BF16/AMX on this CPU)");
    return ok;
  }();
  return yes;
#else
  return false;
#endif
}

#ifdef TK_HAVE_ONEDNN
namespace {

using dt = dnnl::memory::data_type;

bool native() { return onednn_bf16_native(); }

// f32_out: the product written in float32 (a weight's gradient, graph/fuse.h), else in bfloat16.
dnnl::matmul::primitive_desc describe(const GemmShape& s, bool f32_out) {
  return dnnl::matmul::primitive_desc(matmul_desc(s, dt::bf16, f32_out ? dt::f32 : dt::bf16), user_scratchpad(),
                                      onednn_engine());
}

// A built primitive and its argument array (data handles set per call), per (shape, threads).
struct Built {
  dnnl::matmul prim;
  OnednnArgs<5> args;  // a, b, bias, c, scratchpad
  size_t scratch = 0;
  Built(const GemmShape& s, bool f32_out) {
    const auto pd = describe(s, f32_out);
    prim = dnnl::matmul(pd);
    scratch = pd.scratchpad_desc().get_size();
    bind_matmul(args, pd, has_bias(s.epilogue));
  }
};

std::mutex& built_mutex() {
  static std::mutex m;
  return m;
}
// Per (shape, float32 output, threads, thread): argument memories are bound per call, so each thread has its own
// (replicas run the same shapes side by side).
using BuiltKey = std::tuple<GemmShape, bool, int, int64_t>;
std::map<BuiltKey, std::unique_ptr<Built>>& built() {
  static std::map<BuiltKey, std::unique_ptr<Built>> b;
  return b;
}

// The bf16 GEMM's shape: relu_grad runs as a plain product, then the mask.
GemmShape product_shape(const graph::Graph& g, const graph::Node& n) {
  GemmShape s = gemm_shape(g, n);
  if (s.epilogue == Epilogue::relu_grad) s.epilogue = Epilogue::none;
  return s;
}

graph::KernelFn g_widened[2] = {nullptr, nullptr};  // MatMul, FusedMatMul: the widened kernels (other CPUs)
graph::WorkspaceFn g_widened_ws = nullptr;

// bfloat16 operands; the output is bfloat16, or float32 where graph/fuse.h folded a cast into the product.
bool runs_native(const graph::Graph& g, int node) { return native() && g[g[node].inputs[0]].dtype == DType::bf16; }
bool f32_out(const graph::Node& n) { return n.dtype == DType::f32; }

size_t workspace(const graph::Graph& g, int node) {
  if (!runs_native(g, node)) return g_widened_ws ? g_widened_ws(g, node) : 0;
  try {
    return describe(product_shape(g, g[node]), f32_out(g[node])).scratchpad_desc().get_size();
  } catch (const dnnl::error&) {
    return 0;
  }
}

void matmul_bf16(const KernelArgs& a) {
  const bool fused = a.node.op == Op::FusedMatMul;
  if (!native()) return g_widened[fused ? 1 : 0](a);
  const GemmShape full = gemm_shape(a.g, a.node);
  const GemmShape s = product_shape(a.g, a.node);
  if (s.m == 0 || s.n == 0) return;
  Built* b;
  {
    std::lock_guard lock(built_mutex());
    auto& slot = built()[{s, f32_out(a.node), omp_get_max_threads(), thread_index()}];
    if (!slot) slot = std::make_unique<Built>(s, f32_out(a.node));
    b = slot.get();
  }
  static thread_local dnnl::stream stream(onednn_engine());
  b->args.run(b->prim, stream, {a.in[0], a.in[1], has_bias(s.epilogue) ? a.in[2] : nullptr, a.out, a.workspace});
  if (has_relu(full.epilogue))  // after the rounding (exact), not oneDNN's post-op (relu_pass.h)
    relu_in_place(a.out, full.m * full.n, f32_out(a.node) ? DType::f32 : DType::bf16);
  if (full.epilogue == Epilogue::relu_grad) {  // c *= (y > 0), y the relu's bfloat16 output
    auto* c = static_cast<bfloat16*>(a.out);
    const auto* y = static_cast<const bfloat16*>(a.in[2]);
    parallel_for(full.m * full.n, [c, y](int64_t lo, int64_t hi) {  // branch-free, vectorized (exact16.cpp)
      bfloat16* __restrict out = c;
      const bfloat16* __restrict keep = y;
      for (int64_t i = lo; i < hi; ++i) out[i].bits &= positive_mask(keep[i]);
    });
  }
}

}  // namespace

void register_bf16_gemm_kernels() {
  g_widened[0] = graph::registered_kernel(DeviceKind::cpu, Op::MatMul, graph::signature_for(Op::MatMul, DType::bf16));
  g_widened[1] =
      graph::registered_kernel(DeviceKind::cpu, Op::FusedMatMul, graph::signature_for(Op::FusedMatMul, DType::bf16));
  g_widened_ws = graph::registered_workspace(DeviceKind::cpu, Op::MatMul);
  if (!g_widened[0] || !g_widened[1] || !g_widened_ws) return;  // keep what is there
  graph::register_kernel(DeviceKind::cpu, Op::MatMul, DType::bf16, matmul_bf16);
  graph::register_kernel(DeviceKind::cpu, Op::MatMul, graph::KernelSignature({DType::bf16, DType::bf16}, DType::f32),
                         matmul_bf16);
  graph::register_kernel(DeviceKind::cpu, Op::FusedMatMul, DType::bf16, matmul_bf16);
  graph::register_workspace(DeviceKind::cpu, Op::MatMul, workspace);
  graph::register_workspace(DeviceKind::cpu, Op::FusedMatMul, workspace);
}
#else
void register_bf16_gemm_kernels() {}
#endif

}  // namespace tk::cpu
