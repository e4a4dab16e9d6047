// float16 and bfloat16 on CUDA, as on the CPU (backends/cpu/widen.cpp): each 16-bit input is widened to float32
// in the program's workspace by the Cast kernel, the op's float32 kernel runs, and a 16-bit output is rounded back
// to nearest even. So a 16-bit program on CUDA computes the float32 result rounded once per op, the same contract
// the CPU's 16-bit kernels meet and the op harness checks. It costs a pass over memory per 16-bit operand; the
// native 16-bit GEMMs (cuBLASLt with float16/bfloat16 operands, float32 accumulation) are not built yet.
#include "backends/cuda/cuda_kernels.h"

#ifdef TK_HAVE_CUDA
#include <array>
#include <string>

#include "backends/cuda/launchers.h"
#include "graph/kernel.h"
#include "trainkit/core/error.h"

namespace tk::cuda {
using graph::KernelArgs;
using graph::KernelFn;
using graph::Op;
using graph::WorkspaceFn;

int sm_count(int index);  // cuda_kernels.cpp

namespace {

constexpr int kMaxWidenedInputs = 64;
std::array<KernelFn, graph::kOpCount> g_f32{};       // the float32 kernel each 16-bit kernel wraps
std::array<WorkspaceFn, graph::kOpCount> g_inner{};  // its workspace rule

bool is_16bit(DType t) { return t == DType::f16 || t == DType::bf16; }
// 256-byte steps keep every widened operand as aligned as cudaMalloc's memory (vector loads, cuBLASLt).
size_t align256(size_t b) { return (b + 255) & ~size_t{255}; }
size_t f32_bytes(const Shape& s) { return align256(static_cast<size_t>(s.numel()) * sizeof(float)); }

void widened(const KernelArgs& a) {
  const auto op = static_cast<size_t>(a.node.op);
  const size_t n_in = a.node.inputs.size();
  if (n_in > static_cast<size_t>(kMaxWidenedInputs))
    throw Unsupported(std::string(graph::op_name(a.node.op)) + " '" + a.node.name + "' with more than " +
                      std::to_string(kMaxWidenedInputs) + " 16-bit inputs");
  const int sms = sm_count(a.ctx.device.index);
  std::array<const void*, kMaxWidenedInputs> in{};
  std::array<DType, kMaxWidenedInputs> types{};
  auto* ws = static_cast<char*>(a.workspace);
  for (size_t i = 0; i < n_in; ++i) {
    in[i] = a.in[i];
    types[i] = a.in_dtypes[i];
    if (!is_16bit(types[i])) continue;
    const Shape& s = a.in_shape(static_cast<int>(i));
    launch_cast(a.in[i], static_cast<int>(types[i]), ws, static_cast<int>(DType::f32), s.numel(), sms, a.ctx.stream);
    in[i] = ws;
    types[i] = DType::f32;
    ws += f32_bytes(s);
  }
  void* out = a.out;
  DType out_type = a.out_dtype;
  if (is_16bit(out_type)) {
    out = ws;
    out_type = DType::f32;
    ws += f32_bytes(a.node.shape);
  }
  g_f32[op](KernelArgs{a.g, a.node, out, in.data(), a.ctx, ws, types.data(), out_type, a.scalars});
  if (out != a.out)
    launch_cast(out, static_cast<int>(DType::f32), a.out, static_cast<int>(a.out_dtype), a.node.shape.numel(), sms,
                a.ctx.stream);
}

size_t widened_workspace(const graph::Graph& g, int node) {
  const graph::Node& n = g[node];
  const WorkspaceFn inner = g_inner[static_cast<size_t>(n.op)];
  size_t bytes = 0;
  for (int in : n.inputs)
    if (is_16bit(g[in].dtype)) bytes += f32_bytes(g[in].shape);
  if (is_16bit(n.dtype)) bytes += f32_bytes(n.shape);
  return bytes + (inner ? inner(g, node) : 0);
}

}  // namespace

void register_widened_kernels() {
  for (int i = 0; i < graph::kOpCount; ++i) {
    const auto op = static_cast<Op>(i);
    const graph::OpInfo& info = graph::op_info(op);
    if (!info.has_output || op == Op::Input || op == Op::Variable || op == Op::Cast || op == Op::Reshape ||
        op == Op::StepControl)  // these have their own 16-bit kernels
      continue;
    KernelFn f32 = graph::registered_kernel(DeviceKind::cuda, op, graph::signature_for(op, DType::f32));
    if (!f32) continue;
    g_f32[static_cast<size_t>(i)] = f32;
    g_inner[static_cast<size_t>(i)] = graph::registered_workspace(DeviceKind::cuda, op);
    graph::register_kernel(DeviceKind::cuda, op, DType::f16, widened);
    graph::register_kernel(DeviceKind::cuda, op, DType::bf16, widened);
    graph::register_workspace(DeviceKind::cuda, op, widened_workspace);
  }
  // A bfloat16 product written in float32 (a weight's gradient, graph/fuse.h).
  graph::register_kernel(DeviceKind::cuda, Op::MatMul, graph::KernelSignature({DType::bf16, DType::bf16}, DType::f32),
                         widened);
}

}  // namespace tk::cuda
#endif
