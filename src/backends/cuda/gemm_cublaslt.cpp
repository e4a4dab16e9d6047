// MatMul and FusedMatMul on cuBLASLt. The row-major GEMM becomes cuBLASLt's column-major one through
// to_column_major (gemm_mapping.h, tested on the CPU); the bias runs as cuBLASLt's epilogue and a relu after it as
// the shared math's relu kernel (NaN stays NaN; cuBLASLt's relu epilogue is max(x, 0)); relu_grad is the product,
// then the relu mask kernel. float32 compute by default; TK_ALLOW_TF32=1 allows TF32 tensor cores, as
// PyTorch's torch.backends.cuda.matmul.allow_tf32. The algorithm is cuBLASLt's first heuristic choice under the
// planned workspace (kWorkspaceBytes), kept per (shape, dtypes, device), so a step runs the same algorithm every time.
// float16 and bfloat16 (mixed precision) run natively: 16-bit operands, float32 accumulation and scale, the output
// (and a bias) in the node's dtype, rounded once, as the CPU's widened kernels compute it; also the bfloat16 product
// written in float32 (a weight's gradient, graph/fuse.h). The relu_grad epilogue, an empty sum (k = 0) and shapes
// with a dimension that is not a multiple of 8 stay on the widened kernels (backends/widen.h), and
// TK_CUDA_NATIVE16=0 puts every 16-bit GEMM there (A/B measurements).
// Determinism: every cuBLASLt reduction scheme is ordered (cublasLt.h: split-K partials are reduced in a separate
// step or "in place" with counters that keep the order; atomics are opt-in and not used here), and the algorithm is
// fixed per shape, so a GEMM gives the same bits on every run. With op determinism on
// (tk::config::enable_op_determinism, TK_DETERMINISTIC=1) the first of cuBLASLt's ranked results whose
// CUBLASLT_ALGO_CONFIG_SPLITK_NUM is 1 is chosen (first_unsplit_algorithm), so a product's sums do not depend on how
// cuBLASLt splits them; a shape where all of them split takes the first, said once. (Asking with the
// reduction-scheme mask NONE instead may filter out every algorithm of a shape.)
#ifdef TK_HAVE_CUDA
#include "backends/cuda/gemm_cublaslt.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "backends/cpu/gemm.h"
#include "backends/cuda/check.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/cudnn_conv.h"
#include "backends/cuda/device_info.h"
#include "backends/cuda/gemm_mapping.h"
#include "backends/cuda/launchers.h"
#include "backends/widen.h"
#include "graph/kernel.h"
#include "runtime/settings.h"
#include "trainkit/runtime/determinism.h"

namespace tk::cuda {
namespace {
using cpu::Epilogue;
using cpu::GemmShape;
using graph::KernelArgs;
using graph::Op;

constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // NVIDIA's recommendation for Hopper
constexpr uint32_t kOperandAlignment = 64;            // graph::kArenaAlignment
constexpr size_t kDeterministicCandidates = 8;        // heuristic results looked through for an unsplit one
// cublasLtMatmul refuses a workspace pointer that is not 256-byte aligned (seen on an H200: "The workspace pointer
// must be aligned to at least a multiple of 256 bytes"); the program's workspace is 64-byte aligned, so the kernel
// asks for 256 bytes more and rounds its pointer up.
constexpr size_t kWorkspaceAlignment = 256;
void* aligned_workspace(void* p) {
  const auto u = reinterpret_cast<uintptr_t>(p);
  return reinterpret_cast<void*>((u + kWorkspaceAlignment - 1) & ~uintptr_t{kWorkspaceAlignment - 1});
}

void check_lt(cublasStatus_t s, const char* call, const std::string& where) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  throw Error(std::string(call) + " failed: " + cublasLtGetStatusString(s) + " (" + where + ")");
}

// The storage dtypes of a GEMM: the operands a and b, and the output c (and bias).
struct GemmTypes {
  DType ab = DType::f32, c = DType::f32;
  auto operator<=>(const GemmTypes&) const = default;
};
cudaDataType_t cuda_type(DType t) { return t == DType::f16 ? CUDA_R_16F : t == DType::bf16 ? CUDA_R_16BF : CUDA_R_32F; }

bool allow_tf32() {
  static const bool yes = runtime::setting_bool_or_default(runtime::Setting::allow_tf32);
  return yes;
}

// One handle per (thread, device): cuBLASLt handles are not meant to be shared across threads, and a thread may run
// programs on more than one device.
cublasLtHandle_t handle(int device) {
  using Owned = std::unique_ptr<std::remove_pointer_t<cublasLtHandle_t>, decltype(&cublasLtDestroy)>;
  thread_local std::map<int, Owned> handles;
  auto it = handles.find(device);
  if (it == handles.end()) {
    cublasLtHandle_t raw = nullptr;
    check_lt(cublasLtCreate(&raw), "cublasLtCreate", "the CUDA backend's GEMM on cuda:" + std::to_string(device));
    it = handles.emplace(device, Owned(raw, cublasLtDestroy)).first;
  }
  return it->second.get();
}

// A shape's descriptors and chosen algorithm.
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool has_bias = false;
  ~Plan() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

// Strided batches: the batch count and each layout's stride between matrices (A' is trainkit's B, B' its A).
void set_batch(cublasLtMatrixLayout_t layout, const GemmBatch& b, int64_t stride, const std::string& where) {
  const int32_t count = static_cast<int32_t>(b.count);
  check_lt(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count),
           "BATCH_COUNT", where);
  check_lt(
      cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride),
      "STRIDED_BATCH_OFFSET", where);
}

std::unique_ptr<Plan> make_plan(const GemmShape& s, GemmTypes t, int device, bool deterministic,
                                const std::string& where, const GemmBatch& batch = {}) {
  auto p = std::make_unique<Plan>();
  const ColumnMajorGemm g = to_column_major(s.m, s.n, s.k, s.ta, s.tb);
  const bool tf32 = allow_tf32() && t.ab == DType::f32;  // 16-bit operands accumulate in float32 regardless
  check_lt(cublasLtMatmulDescCreate(&p->desc, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F),
           "cublasLtMatmulDescCreate", where);
  const cublasOperation_t ta = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  check_lt(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "TRANSA", where);
  check_lt(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "TRANSB", where);
  p->has_bias = s.epilogue == Epilogue::bias || s.epilogue == Epilogue::bias_relu;
  // No CUBLASLT_EPILOGUE_RELU*: cuBLASLt documents its relu as max(x, 0), which on the GPU maps NaN to 0; the relu
  // runs after the product as the shared math's (gemm_typed), so a NaN stays NaN as on the cpu (TensorFlow's rule).
  const cublasLtEpilogue_t e = p->has_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  check_lt(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e), "EPILOGUE", where);
  if (p->has_bias) {  // the bias in the output's dtype (the FusedMatMul node's)
    const cudaDataType_t bias_type = cuda_type(t.c);
    check_lt(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type),
             "BIAS_DATA_TYPE", where);
  }
  // Stored shapes before the op: A' is m x k (k x m when transposed), B' is k x n (n x k), D' is m x n.
  check_lt(cublasLtMatrixLayoutCreate(&p->a, cuda_type(t.ab), static_cast<uint64_t>(g.trans_a ? g.k : g.m),
                                      static_cast<uint64_t>(g.trans_a ? g.m : g.k), g.lda),
           "cublasLtMatrixLayoutCreate(A)", where);
  check_lt(cublasLtMatrixLayoutCreate(&p->b, cuda_type(t.ab), static_cast<uint64_t>(g.trans_b ? g.n : g.k),
                                      static_cast<uint64_t>(g.trans_b ? g.k : g.n), g.ldb),
           "cublasLtMatrixLayoutCreate(B)", where);
  check_lt(
      cublasLtMatrixLayoutCreate(&p->c, cuda_type(t.c), static_cast<uint64_t>(g.m), static_cast<uint64_t>(g.n), g.ldc),
      "cublasLtMatrixLayoutCreate(C)", where);
  if (batch.count > 1) {
    set_batch(p->a, batch, batch.stride_b, where);
    set_batch(p->b, batch, batch.stride_a, where);
    set_batch(p->c, batch, batch.stride_c, where);
  }
  cublasLtMatmulPreference_t pref = nullptr;
  check_lt(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate", where);
  const size_t ws = kWorkspaceBytes;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  // Program values are 64-byte aligned (graph::kArenaAlignment), not the 256 bytes cuBLASLt assumes by default:
  // only algorithms that work at that alignment may be chosen.
  const uint32_t align = kOperandAlignment;
  for (const cublasLtMatmulPreferenceAttributes_t a :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    cublasLtMatmulPreferenceSetAttribute(pref, a, &align, sizeof align);
  // Op determinism: of the first kDeterministicCandidates ranked results, the first that does not split k
  // (first_unsplit_algorithm); otherwise cuBLASLt's first.
  std::vector<cublasLtMatmulHeuristicResult_t> results(deterministic ? kDeterministicCandidates : 1);
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle(device), p->desc, p->a, p->b, p->c, p->c, pref,
                                                           static_cast<int>(results.size()), results.data(), &found);
  cublasLtMatmulPreferenceDestroy(pref);
  check_lt(st, "cublasLtMatmulAlgoGetHeuristic", where);
  if (found == 0) throw Unsupported("cuBLASLt has no algorithm for " + where);
  results.resize(static_cast<size_t>(std::min<int>(found, static_cast<int>(results.size()))));
  size_t pick = 0;
  if (deterministic) {
    std::vector<int> split_k;
    for (const cublasLtMatmulHeuristicResult_t& r : results) {
      int32_t parts = 0;
      size_t written = 0;
      const cublasStatus_t a = cublasLtMatmulAlgoConfigGetAttribute(&r.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &parts,
                                                                    sizeof parts, &written);
      split_k.push_back(a == CUBLAS_STATUS_SUCCESS && written == sizeof parts ? parts : -1);
    }
    const int unsplit = first_unsplit_algorithm(split_k);
    if (unsplit >= 0) {
      pick = static_cast<size_t>(unsplit);
    } else {
      static std::once_flag once;
      std::call_once(once, [&] {
        std::fprintf(stderr,
                     "trainkit: op determinism: cuBLASLt's first %zu algorithms for %s all split k; it takes the "
                     "first (its split-K reduction is ordered, so runs still match, but the sums are grouped "
                     "differently from an unsplit product); said once\n",
                     results.size(), where.c_str());
      });
    }
  }
  const cublasLtMatmulHeuristicResult_t& result = results[pick];
  p->algo = result.algo;
  return p;
}

// Per thread, like the handle: a plan's bias pointer is set per call, so threads never share one.
// "MatMul 'dense/matmul'": built only for an error or a new plan, never on the step's path.
std::string where(const graph::Node& node) { return std::string(graph::op_name(node.op)) + " '" + node.name + "'"; }

Plan& plan_for(const GemmShape& s, GemmTypes t, int device, const graph::Node& node) {
  thread_local std::map<std::tuple<GemmShape, GemmTypes, int, bool, bool>, std::unique_ptr<Plan>> plans;
  const bool deterministic = config::is_op_determinism_enabled();
  auto& slot = plans[{s, t, device, allow_tf32(), deterministic}];
  if (!slot) slot = make_plan(s, t, device, deterministic, where(node));
  return *slot;
}

// A strided batch's plan, or null where cuBLASLt has no algorithm for it (kept: asked once per shape and batch).
Plan* batched_plan_for(const GemmShape& s, const GemmBatch& b, int device, const graph::Node& node) {
  struct Slot {
    std::unique_ptr<Plan> plan;
    bool asked = false;
  };
  thread_local std::map<std::tuple<GemmShape, GemmBatch, int, bool, bool>, Slot> plans;
  const bool deterministic = config::is_op_determinism_enabled();
  Slot& slot = plans[{s, b, device, allow_tf32(), deterministic}];
  if (!slot.asked) {
    slot.asked = true;
    try {
      slot.plan = make_plan(s, GemmTypes{}, device, deterministic, where(node), b);
    } catch (const Error& e) {  // no algorithm for the batch (a stride-0 operand, say), or the heuristics refused
      slot.plan = nullptr;      // its layouts: one GEMM per matrix, whose own errors still throw; said once per shape
      std::fprintf(stderr,
                   "trainkit: %s: cuBLASLt takes no strided batch of %lld (strides %lld, %lld): one GEMM per matrix "
                   "instead (%s)\n",
                   where(node).c_str(), static_cast<long long>(b.count), static_cast<long long>(b.stride_a),
                   static_cast<long long>(b.stride_b), e.what());
    }
  }
  return slot.plan.get();
}

// c = epilogue(op(a) op(b)) + beta c for any operand and output dtypes (k > 0; alpha and beta in float32).
void gemm_typed(const GemmShape& s, GemmTypes t, const void* a, const void* b, const void* bias, void* c, float beta,
                void* workspace, int device, void* stream, const graph::Node& node) {
  Plan& p = plan_for(s, t, device, node);
  if (p.has_bias) {
    const cublasStatus_t st =
        cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    if (st != CUBLAS_STATUS_SUCCESS) check_lt(st, "BIAS_POINTER", where(node));
  }
  const float alpha = 1.0f;
  // A' is trainkit's B, B' is trainkit's A (gemm_mapping.h).
  const cublasStatus_t st =
      cublasLtMatmul(handle(device), p.desc, &alpha, b, p.a, a, p.b, &beta, c, p.c, c, p.c, &p.algo,
                     aligned_workspace(workspace), kWorkspaceBytes, static_cast<cudaStream_t>(stream));
  if (st != CUBLAS_STATUS_SUCCESS) check_lt(st, "cublasLtMatmul", where(node));
  if (s.epilogue == Epilogue::bias_relu || s.epilogue == Epilogue::relu) {  // the plan's epilogue left it out
    const int64_t n = s.m * s.n;
    if (t.c == DType::f32)
      launch_activation(Activation::relu, static_cast<float*>(c), static_cast<float*>(c), n, 0.0f, sm_count(device),
                        stream);
    else
      launch_relu16(c, n, static_cast<int>(t.c), sm_count(device), stream);
  }
}

}  // namespace

void gemm(const GemmShape& s, const float* a, const float* b, const float* bias, float* c, float beta, void* workspace,
          int device, void* stream, const graph::Node& node) {
  if (s.m == 0 || s.n == 0) return;
  if (s.k == 0) {  // an empty product (e.g. a convolution with no output pixels): beta * c, then the epilogue
    if (beta == 0.0f) {
      const cudaError_t e =
          cudaMemsetAsync(c, 0, sizeof(float) * static_cast<size_t>(s.m * s.n), static_cast<cudaStream_t>(stream));
      if (e != cudaSuccess) check(e, "cudaMemsetAsync", where(node));
    }
    if (s.epilogue == Epilogue::bias || s.epilogue == Epilogue::bias_relu)
      launch_bias_add(c, bias, c, s.m, s.n, sm_count(device), stream);
    if (s.epilogue == Epilogue::bias_relu || s.epilogue == Epilogue::relu)
      launch_activation(Activation::relu, c, c, s.m * s.n, 0.0f, sm_count(device), stream);
    return;
  }
  gemm_typed(s, GemmTypes{}, a, b, bias, c, beta, workspace, device, stream, node);
}

bool gemm_strided_batched(const GemmShape& s, const GemmBatch& batch, const float* a, const float* b, float* c,
                          void* workspace, int device, void* stream, const graph::Node& node) {
  if (s.epilogue != Epilogue::none)
    throw InvalidArgument("gemm_strided_batched: " + where(node) + " asks for an epilogue; batches take none");
  if (batch.count <= 0 || s.m == 0 || s.n == 0) return true;
  if (s.k == 0 || batch.count > INT32_MAX) return false;  // the caller's per-matrix loop (k = 0: zeros)
  Plan* p = batched_plan_for(s, batch, device, node);
  if (!p) return false;
  const float alpha = 1.0f, beta = 0.0f;
  const cublasStatus_t st =
      cublasLtMatmul(handle(device), p->desc, &alpha, b, p->a, a, p->b, &beta, c, p->c, c, p->c, &p->algo,
                     aligned_workspace(workspace), kWorkspaceBytes, static_cast<cudaStream_t>(stream));
  if (st != CUBLAS_STATUS_SUCCESS) check_lt(st, "cublasLtMatmul (strided batch)", where(node));
  return true;
}

size_t gemm_workspace_bytes() { return kWorkspaceBytes + kWorkspaceAlignment - kOperandAlignment; }

namespace {

void matmul(const KernelArgs& a) {
  const GemmShape s = cpu::gemm_shape(a.g, a.node);
  if (s.m == 0 || s.n == 0) {
    if (a.side_out && s.n > 0) {  // the fused bias gradient of no rows: zeros
      const cudaError_t e = cudaMemsetAsync(a.side_out, 0, sizeof(float) * static_cast<size_t>(s.n),
                                            static_cast<cudaStream_t>(a.ctx.stream));
      if (e != cudaSuccess) check(e, "cudaMemsetAsync", where(a.node));
    }
    return;
  }
  GemmShape product = s;
  if (s.epilogue == Epilogue::relu_grad) product.epilogue = Epilogue::none;
  float* out = a.output<float>();
  gemm(product, a.input<float>(0), a.input<float>(1),
       product.epilogue == Epilogue::bias || product.epilogue == Epilogue::bias_relu ? a.input<float>(2) : nullptr, out,
       0.0f, a.workspace, a.ctx.device.index, a.ctx.stream, a.node);
  if (s.epilogue == Epilogue::relu_grad)
    launch_relu_mask(out, a.input<float>(2), s.m * s.n, sm_count(a.ctx.device.index), a.ctx.stream);
  if (a.side_out) launch_side_bias_grad(a, out, gemm_workspace_bytes());  // the fused bias gradient (graph/fuse.h)
}

size_t workspace(const graph::Graph& g, int node) { return side_bias_grad_workspace(g, node, gemm_workspace_bytes()); }

// ---- float16 / bfloat16
using Widened = backends::Widened<DeviceKind::cuda>;

bool native16_enabled() {
  static const bool yes = runtime::setting_bool_or_default(runtime::Setting::cuda_native16);
  return yes;
}
// Whether a 16-bit MatMul / FusedMatMul runs on cuBLASLt in its own dtypes (else on the widened kernel). The kernel
// and its workspace rule decide alike, from the shape alone. Every dimension a multiple of 8 (16 bytes): the leading
// dimensions cuBLASLt's 16-bit tensor-core kernels take; other shapes (a 10-class output layer) stay widened rather
// than risk a shape cuBLASLt has no 16-bit algorithm for.
bool runs_native(const graph::Graph& g, const graph::Node& n) {
  const GemmShape s = cpu::gemm_shape(g, n);
  return native16_enabled() && s.epilogue != Epilogue::relu_grad && s.k > 0 && s.m % 8 == 0 && s.n % 8 == 0 &&
         s.k % 8 == 0;
}

void matmul16(const KernelArgs& a) {
  if (!runs_native(a.g, a.node)) {
    Widened::kernel(a);
    return;
  }
  const GemmShape s = cpu::gemm_shape(a.g, a.node);
  if (s.m == 0 || s.n == 0) return;
  const bool bias = s.epilogue == Epilogue::bias || s.epilogue == Epilogue::bias_relu;
  gemm_typed(s, GemmTypes{a.in_dtypes[0], a.out_dtype}, a.in[0], a.in[1], bias ? a.in[2] : nullptr, a.out, 0.0f,
             a.workspace, a.ctx.device.index, a.ctx.stream, a.node);
}
size_t workspace16(const graph::Graph& g, int node) {
  const graph::Node& n = g[node];
  if (g[n.inputs[0]].dtype == DType::f32) return workspace(g, node);  // a float32 GEMM
  return runs_native(g, n) ? gemm_workspace_bytes() : Widened::workspace(g, node);
}

}  // namespace

void register_gemm_kernels() {
  graph::register_kernel(DeviceKind::cuda, Op::MatMul, DType::f32, matmul);
  graph::register_kernel(DeviceKind::cuda, Op::FusedMatMul, DType::f32, matmul);
  graph::register_workspace(DeviceKind::cuda, Op::MatMul, workspace);
  graph::register_workspace(DeviceKind::cuda, Op::FusedMatMul, workspace);
}

void register_native16_gemm_kernels() {
  for (DType t : {DType::f16, DType::bf16}) {
    graph::register_kernel(DeviceKind::cuda, Op::MatMul, t, matmul16);
    graph::register_kernel(DeviceKind::cuda, Op::FusedMatMul, t, matmul16);
  }
  graph::register_kernel(DeviceKind::cuda, Op::MatMul, graph::KernelSignature({DType::bf16, DType::bf16}, DType::f32),
                         matmul16);
  // One rule for every dtype (the float32 one for float32 operands).
  graph::register_workspace(DeviceKind::cuda, Op::MatMul, workspace16);
  graph::register_workspace(DeviceKind::cuda, Op::FusedMatMul, workspace16);
}

bool gemm16_is_native(graph::KernelFn fn) { return fn == matmul16; }

}  // namespace tk::cuda
#else  // built without CUDA
#include "backends/cuda/gemm_cublaslt.h"

namespace tk::cuda {
void register_native16_gemm_kernels() {}
bool gemm16_is_native(graph::KernelFn) { return false; }
}  // namespace tk::cuda
#endif
