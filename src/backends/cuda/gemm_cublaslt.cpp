// MatMul and FusedMatMul (float32) on cuBLASLt. The row-major GEMM becomes cuBLASLt's column-major one through
// to_column_major (gemm_mapping.h, tested on the CPU); bias and bias + relu run as cuBLASLt epilogues; relu_grad is
// the product, then the relu mask kernel. float32 compute by default; TK_ALLOW_TF32=1 allows TF32 tensor cores, as
// PyTorch's torch.backends.cuda.matmul.allow_tf32. The algorithm is cuBLASLt's first heuristic choice under the
// planned workspace (kWorkspaceBytes), kept per (shape, device), so a step runs the same algorithm every time.
#ifdef TK_HAVE_CUDA
#include "backends/cuda/gemm_cublaslt.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <tuple>

#include "backends/cpu/gemm.h"
#include "backends/cuda/check.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/device_info.h"
#include "backends/cuda/gemm_mapping.h"
#include "backends/cuda/launchers.h"
#include "graph/kernel.h"

namespace tk::cuda {
namespace {
using cpu::Epilogue;
using cpu::GemmShape;
using graph::KernelArgs;
using graph::Op;

constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // NVIDIA's recommendation for Hopper
constexpr uint32_t kOperandAlignment = 64;            // graph::kArenaAlignment
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

bool allow_tf32() {
  static const bool yes = [] {
    const char* v = std::getenv("TK_ALLOW_TF32");
    return v && std::string(v) == "1";
  }();
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

std::unique_ptr<Plan> make_plan(const GemmShape& s, int device, const std::string& where) {
  auto p = std::make_unique<Plan>();
  const ColumnMajorGemm g = to_column_major(s.m, s.n, s.k, s.ta, s.tb);
  check_lt(
      cublasLtMatmulDescCreate(&p->desc, allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F),
      "cublasLtMatmulDescCreate", where);
  const cublasOperation_t ta = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  check_lt(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "TRANSA", where);
  check_lt(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "TRANSB", where);
  p->has_bias = s.epilogue == Epilogue::bias || s.epilogue == Epilogue::bias_relu;
  const cublasLtEpilogue_t e = s.epilogue == Epilogue::bias        ? CUBLASLT_EPILOGUE_BIAS
                               : s.epilogue == Epilogue::bias_relu ? CUBLASLT_EPILOGUE_RELU_BIAS
                               : s.epilogue == Epilogue::relu      ? CUBLASLT_EPILOGUE_RELU
                                                                   : CUBLASLT_EPILOGUE_DEFAULT;
  check_lt(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e), "EPILOGUE", where);
  // Stored shapes before the op: A' is m x k (k x m when transposed), B' is k x n (n x k), D' is m x n.
  check_lt(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_32F, static_cast<uint64_t>(g.trans_a ? g.k : g.m),
                                      static_cast<uint64_t>(g.trans_a ? g.m : g.k), g.lda),
           "cublasLtMatrixLayoutCreate(A)", where);
  check_lt(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_32F, static_cast<uint64_t>(g.trans_b ? g.n : g.k),
                                      static_cast<uint64_t>(g.trans_b ? g.k : g.n), g.ldb),
           "cublasLtMatrixLayoutCreate(B)", where);
  check_lt(cublasLtMatrixLayoutCreate(&p->c, CUDA_R_32F, static_cast<uint64_t>(g.m), static_cast<uint64_t>(g.n), g.ldc),
           "cublasLtMatrixLayoutCreate(C)", where);
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
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(handle(device), p->desc, p->a, p->b, p->c, p->c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  check_lt(st, "cublasLtMatmulAlgoGetHeuristic", where);
  if (found == 0) throw Unsupported("cuBLASLt has no algorithm for " + where);
  p->algo = result.algo;
  return p;
}

// Per thread, like the handle: a plan's bias pointer is set per call, so threads never share one.
// "MatMul 'dense/matmul'": built only for an error or a new plan, never on the step's path.
std::string where(const graph::Node& node) { return std::string(graph::op_name(node.op)) + " '" + node.name + "'"; }

Plan& plan_for(const GemmShape& s, int device, const graph::Node& node) {
  thread_local std::map<std::tuple<GemmShape, int, bool>, std::unique_ptr<Plan>> plans;
  auto& slot = plans[{s, device, allow_tf32()}];
  if (!slot) slot = make_plan(s, device, where(node));
  return *slot;
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
  Plan& p = plan_for(s, device, node);
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

}  // namespace

void register_gemm_kernels() {
  graph::register_kernel(DeviceKind::cuda, Op::MatMul, DType::f32, matmul);
  graph::register_kernel(DeviceKind::cuda, Op::FusedMatMul, DType::f32, matmul);
  graph::register_workspace(DeviceKind::cuda, Op::MatMul, workspace);
  graph::register_workspace(DeviceKind::cuda, Op::FusedMatMul, workspace);
}

}  // namespace tk::cuda
#endif
