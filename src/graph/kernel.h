// The seam between graph/ and backends/: a kernel is a function registered per (device kind, op,
// dtype). graph/ never includes a backend header; backends register into this table.
#pragma once
#include <cstdint>

#include "graph/graph.h"
#include "trainkit/core/device.h"

namespace tk::graph {

// Per-run state a kernel may read.
struct ExecContext {
  uint64_t step = 0;        // training steps run so far by this model (dropout randomness)
  bool training = false;    // false for evaluate/predict
  float grad_scale = 1.0f;  // AccumulateGrad: this micro-batch's share of the batch (rows / batch rows)
};

struct KernelArgs {
  const Graph& g;
  const Node& node;
  void* out;              // (node.shape) in the node's dtype; nullptr for ops without output
  const void* const* in;  // one pointer per node.inputs[i]
  const ExecContext& ctx;
  void* workspace;  // the program's scratch, at least op_info(op).workspace bytes, 64-byte aligned

  const Shape& in_shape(int i) const { return g[node.inputs[static_cast<size_t>(i)]].shape; }
  const float* in_f(int i) const { return static_cast<const float*>(in[i]); }
  // Update ops overwrite their variable and slot inputs.
  float* inout_f(int i) const { return const_cast<float*>(static_cast<const float*>(in[i])); }
  float* out_f() const { return static_cast<float*>(out); }
};

using KernelFn = void (*)(const KernelArgs&);

void register_kernel(DeviceKind device, Op op, DType dtype, KernelFn fn);
// Throws Unsupported naming op, dtype and device when none is registered (never a silent fallback).
KernelFn find_kernel(DeviceKind device, Op op, DType dtype);
bool has_kernel(DeviceKind device, Op op, DType dtype);

// A backend whose kernel for `op` needs scratch other than the op table's default says how much here
// (e.g. oneDNN's blocked layouts); the planner asks workspace_bytes(), so the plan stays exact.
void register_workspace(DeviceKind device, Op op, WorkspaceFn fn);
size_t workspace_bytes(const Graph& g, int node, DeviceKind device = DeviceKind::cpu);

// Defined in backends/: registers every backend compiled into this build (idempotent).
void ensure_backends_registered();
// Defined in backends/: puts the calling thread (and the kernels' worker threads) in the floating-point
// mode kernels expect: denormals flushed to zero, as TensorFlow does, because gradients and Adam's
// second moments underflow into denormals, which x86 cores process many times slower. Cheap when done.
void prepare_thread_for_kernels();

}  // namespace tk::graph
