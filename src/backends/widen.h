// 16-bit kernels by widening, for any backend: each float16/bfloat16 input is converted to float32 in the program's
// workspace, the op's float32 kernel runs, and a 16-bit output is rounded back to nearest even, so a 16-bit op computes
// exactly its float32 result rounded once. The CPU (cpu/widen.cpp) and CUDA (cuda/widen.cpp) register their kernels
// through this, each with its own conversion (OpenMP loops; the Cast kernel on the context's stream).
//
//   tk::backends::register_widened<DeviceKind::cuda>(convert_on_stream, /*alignment=*/256);
#pragma once
#include <array>
#include <string>

#include "graph/kernel.h"
#include "trainkit/core/error.h"

namespace tk::backends {

// dst(n, to) = src(n, from) converted element by element, queued where ctx's kernels run.
using ConvertFn = void (*)(const void* src, DType from, void* dst, DType to, int64_t n, const graph::ExecContext& ctx);

template <DeviceKind Kind>
struct Widened {
  static constexpr int kMaxInputs = 64;
  static inline std::array<graph::KernelFn, graph::kOpCount> f32{};       // the float32 kernel each one wraps
  static inline std::array<graph::WorkspaceFn, graph::kOpCount> inner{};  // its workspace rule
  static inline ConvertFn convert = nullptr;
  static inline size_t alignment = 64;  // of each widened operand inside the workspace

  static bool is_16bit(DType t) { return t == DType::f16 || t == DType::bf16; }
  static size_t f32_bytes(const Shape& s) {
    return (static_cast<size_t>(s.numel()) * sizeof(float) + alignment - 1) / alignment * alignment;
  }

  static void kernel(const graph::KernelArgs& a) {
    const size_t n_in = a.node.inputs.size();
    if (n_in > static_cast<size_t>(kMaxInputs))
      throw Unsupported(std::string(graph::op_name(a.node.op)) + " '" + a.node.name + "' with more than " +
                        std::to_string(kMaxInputs) + " 16-bit inputs");
    std::array<const void*, kMaxInputs> in{};
    std::array<DType, kMaxInputs> types{};
    auto* ws = static_cast<char*>(a.workspace);
    for (size_t i = 0; i < n_in; ++i) {
      in[i] = a.in[i];
      types[i] = a.in_dtypes[i];
      if (!is_16bit(types[i])) continue;
      const Shape& s = a.in_shape(static_cast<int>(i));
      convert(a.in[i], types[i], ws, DType::f32, s.numel(), a.ctx);
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
    f32[static_cast<size_t>(a.node.op)](
        graph::KernelArgs{a.g, a.node, out, in.data(), a.ctx, ws, types.data(), out_type, a.scalars, nullptr});
    if (out != a.out) convert(out, DType::f32, a.out, a.out_dtype, a.node.shape.numel(), a.ctx);
  }

  static size_t workspace(const graph::Graph& g, int node) {
    const graph::Node& n = g[node];
    const graph::WorkspaceFn wrapped = inner[static_cast<size_t>(n.op)];
    size_t bytes = 0;
    for (int i : n.inputs)
      if (is_16bit(g[i].dtype)) bytes += f32_bytes(g[i].shape);
    if (is_16bit(n.dtype)) bytes += f32_bytes(n.shape);
    return bytes + (wrapped ? wrapped(g, node) : 0);
  }
};

// Registers float16 and bfloat16 kernels for every op with an output and a float32 kernel on Kind registered so far
// (call it last), except the ops with their own 16-bit kernels (Cast, Reshape, StepControl, and any op that has a
// float16 kernel registered by then); and a bfloat16 MatMul
// written in float32 (a weight's gradient, graph/fuse.h).
template <DeviceKind Kind>
void register_widened(ConvertFn convert, size_t alignment) {
  using W = Widened<Kind>;
  W::convert = convert;
  W::alignment = alignment;
  for (int i = 0; i < graph::kOpCount; ++i) {
    const auto op = static_cast<graph::Op>(i);
    if (!graph::op_info(op).has_output || op == graph::Op::Input || op == graph::Op::Variable ||
        op == graph::Op::Cast || op == graph::Op::Reshape || op == graph::Op::StepControl)
      continue;
    const graph::KernelFn f32 = graph::registered_kernel(Kind, op, graph::signature_for(op, DType::f32));
    if (!f32) continue;
    // Ops with 16-bit kernels of their own (the data-movement ops copy every dtype's bytes as they are) keep them.
    if (graph::registered_kernel(Kind, op, graph::signature_for(op, DType::f16))) continue;
    W::f32[static_cast<size_t>(i)] = f32;
    W::inner[static_cast<size_t>(i)] = graph::registered_workspace(Kind, op);
    graph::register_kernel(Kind, op, DType::f16, W::kernel);
    graph::register_kernel(Kind, op, DType::bf16, W::kernel);
    graph::register_workspace(Kind, op, W::workspace);
  }
  graph::register_kernel(Kind, graph::Op::MatMul, graph::KernelSignature({DType::bf16, DType::bf16}, DType::f32),
                         W::kernel);
}

}  // namespace tk::backends
