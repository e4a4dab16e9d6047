// float16 and bfloat16 on the CPU: each 16-bit input is widened to float32 in the program's workspace,
// the op's float32 kernel runs, and a 16-bit output is rounded back to nearest even. x86 cores before
// AVX-512 FP16/AMX have no 16-bit arithmetic worth the name, so this is what a 16-bit op costs here anyway
// (PyTorch's CPU half kernels also compute in float); what it proves is that a 16-bit program computes
// exactly the float32 result rounded to 16 bits — the reference the CUDA 16-bit kernels are tested
// against. Ops without an output (optimizer updates, AccumulateGrad, BnUpdateMoving) write into their
// operands in place and have no 16-bit CPU kernel: weights and optimizer state stay float32.
#include <array>

#include "backends/cpu/kernels.h"
#include "backends/cpu/parallel.h"
#include "graph/kernel.h"
#include "trainkit/core/convert.h"
#include "trainkit/core/error.h"

namespace tk::cpu {
using graph::KernelArgs;
using graph::KernelFn;
using graph::Op;
using graph::WorkspaceFn;

namespace {

constexpr int kMaxWidenedInputs = 64;
std::array<KernelFn, graph::kOpCount> g_f32{};       // the float32 kernel each 16-bit kernel wraps
std::array<WorkspaceFn, graph::kOpCount> g_inner{};  // its workspace rule

bool is_16bit(DType t) { return t == DType::f16 || t == DType::bf16; }
size_t align64(size_t b) { return (b + 63) & ~size_t{63}; }
size_t f32_bytes(const Shape& s) { return align64(static_cast<size_t>(s.numel()) * sizeof(float)); }

void convert_parallel(const void* src, DType from, void* dst, DType to, int64_t n) {
  const size_t sf = dtype_size(from), st = dtype_size(to);
  parallel_for(n, [&](int64_t b, int64_t e) {
    convert_elements(static_cast<const char*>(src) + static_cast<size_t>(b) * sf, from,
                     static_cast<char*>(dst) + static_cast<size_t>(b) * st, to, static_cast<size_t>(e - b));
  });
}

void widened(const KernelArgs& a) {
  const auto op = static_cast<size_t>(a.node.op);
  const size_t n_in = a.node.inputs.size();
  if (n_in > static_cast<size_t>(kMaxWidenedInputs))
    throw Unsupported(std::string(graph::op_name(a.node.op)) + " '" + a.node.name + "' with more than " +
                      std::to_string(kMaxWidenedInputs) + " 16-bit inputs");
  std::array<const void*, kMaxWidenedInputs> in{};
  std::array<DType, kMaxWidenedInputs> types{};
  auto* ws = static_cast<char*>(a.workspace);
  for (size_t i = 0; i < n_in; ++i) {
    in[i] = a.in[i];
    types[i] = a.in_dtypes[i];
    if (!is_16bit(types[i])) continue;
    const Shape& s = a.in_shape(static_cast<int>(i));
    convert_parallel(a.in[i], types[i], ws, DType::f32, s.numel());
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
  if (out != a.out) convert_parallel(out, DType::f32, a.out, a.out_dtype, a.node.shape.numel());
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
    KernelFn f32 = graph::registered_kernel(DeviceKind::cpu, op, graph::signature_for(op, DType::f32));
    if (!f32) continue;
    g_f32[static_cast<size_t>(i)] = f32;
    g_inner[static_cast<size_t>(i)] = graph::registered_workspace(DeviceKind::cpu, op);
    graph::register_kernel(DeviceKind::cpu, op, DType::f16, widened);
    graph::register_kernel(DeviceKind::cpu, op, DType::bf16, widened);
    graph::register_workspace(DeviceKind::cpu, op, widened_workspace);
  }
  // A bfloat16 product written in float32 (a weight's gradient, graph/fuse.h): sgemm writes the output directly.
  graph::register_kernel(DeviceKind::cpu, Op::MatMul, graph::KernelSignature({DType::bf16, DType::bf16}, DType::f32),
                         widened);
}

}  // namespace tk::cpu
