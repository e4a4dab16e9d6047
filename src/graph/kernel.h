// The seam between graph/ and backends/: a kernel is a function registered per (device kind, op, input
// dtypes, output dtype). graph/ never includes a backend header; backends register into this table, and
// say how much scratch an op needs on them (graph/backend.h).
//
//   register_kernel(DeviceKind::cpu, Op::Relu, DType::f32, relu);             // the op's usual signature for f32
//   register_kernel(DeviceKind::cpu, Op::Cast, {{DType::u8}, DType::f32}, cast_u8_f32);  // an explicit one
//   KernelFn fn = find_kernel(DeviceKind::cpu, Op::Relu, signature_of(g, node));  // Unsupported if none
#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "trainkit/core/device.h"

namespace tk::graph {

// Per-step scalars. Kernels read them from device memory (KernelArgs::scalars): Program::run copies the
// host values in ExecContext::scalars there before the first kernel (on CUDA, an asynchronous copy on the
// stream). Nothing per-step is baked into a kernel call, so a captured step (a CUDA Graph) stays valid when
// the learning rate, the step count or the loss scale change.
struct StepScalars {
  uint64_t step = 0;           // training steps run by the model (dropout randomness)
  int64_t iterations = 0;      // optimizer updates applied so far (Adam's bias correction)
  float learning_rate = 0.0f;  // the optimizer's for this step (a schedule changes it without recompiling)
  float loss_scale = 1.0f;     // the loss-scaling factor (mixed precision; 1 otherwise)
  float grad_scale = 1.0f;     // AccumulateGrad: this micro-batch's share of the batch (rows / batch rows)
  float reserved = 0.0f;
  int64_t sample_offset = 0;  // DropoutMask: the batch's first row in the global batch (data parallel replicas)
};
// The planner reserves this much at the end of the workspace region for the scalars.
inline constexpr size_t kStepScalarsBytes = 64;
static_assert(sizeof(StepScalars) <= kStepScalarsBytes);

// Per-run state. A backend may run asynchronously on `stream`: Program::run returns when the work is
// queued, and reading an output synchronizes.
struct ExecContext {
  Device device = Device::cpu();
  void* stream = nullptr;   // the backend's stream (a cudaStream_t on CUDA); null on the CPU
  void* handles = nullptr;  // per-backend library handles (cuBLAS, cuDNN), owned by the backend; null on the CPU
  bool training = false;    // false for evaluate/predict
  StepScalars scalars;      // host values, copied to the device by Program::run
};

inline constexpr int kMaxKernelInputs = 6;

// The dtypes a kernel takes and produces. Variadic ops (all inputs of one dtype) have one input entry.
struct KernelSignature {
  std::array<DType, kMaxKernelInputs> in{};
  uint8_t inputs = 0;
  DType out = DType::f32;

  KernelSignature() = default;
  KernelSignature(std::initializer_list<DType> ins, DType output);
  std::string to_string() const;  // "(float16, int32) -> float32"
  auto operator<=>(const KernelSignature&) const = default;
};

// The signature of a graph node (what a kernel for it must take).
KernelSignature signature_of(const Graph& g, int node);
// The usual signature of `op` computing in floating dtype `t`: every operand t, except the op's fixed
// dtypes (int32 class indices of the sparse losses, the float32 loss dy, float32 loss and metric values).
KernelSignature signature_for(Op op, DType t);

[[noreturn]] void kernel_dtype_mismatch(const Node& node, int input, DType have, DType want);

struct KernelArgs {
  const Graph& g;
  const Node& node;
  void* out;              // (node.shape) in out_dtype; nullptr for ops without output
  const void* const* in;  // one pointer per node.inputs[i]
  const ExecContext& ctx;
  void* workspace;         // the program's scratch, at least the backend's workspace_bytes, 64-byte aligned
  const DType* in_dtypes;  // per input: the dtype in[i] holds
  DType out_dtype;
  const StepScalars* scalars;  // this step's scalars, in the device's memory
  // A second output (node.attrs.side_output): where the kernel writes its output's column sums, the BiasGrad
  // reading its output (in out_dtype, shape (node.shape[-1])); nullptr when the program does not compute it.
  void* side_out = nullptr;

  const Shape& in_shape(int i) const { return g[node.inputs[static_cast<size_t>(i)]].shape; }
  // Typed views: each checks the dtype (an InvalidArgument naming the op, never a reinterpretation).
  template <typename T>
  const T* input(int i) const {
    if (in_dtypes[i] != dtype_of<T>()) [[unlikely]]
      kernel_dtype_mismatch(node, i, in_dtypes[i], dtype_of<T>());
    return static_cast<const T*>(in[i]);
  }
  // Update ops overwrite their variable and slot inputs.
  template <typename T>
  T* inout(int i) const {
    return const_cast<T*>(input<T>(i));
  }
  template <typename T>
  T* output() const {
    if (out_dtype != dtype_of<T>()) [[unlikely]]
      kernel_dtype_mismatch(node, -1, out_dtype, dtype_of<T>());
    return static_cast<T*>(out);
  }
};

using KernelFn = void (*)(const KernelArgs&);

void register_kernel(DeviceKind device, Op op, const KernelSignature& sig, KernelFn fn);
inline void register_kernel(DeviceKind device, Op op, DType t, KernelFn fn) {
  register_kernel(device, op, signature_for(op, t), fn);
}
// Throws Unsupported naming the op, the dtypes and the device, and listing the signatures that device has
// for the op, when none matches (never a silent upcast or fallback to another device).
KernelFn find_kernel(DeviceKind device, Op op, const KernelSignature& sig);
bool has_kernel(DeviceKind device, Op op, const KernelSignature& sig);
// The kernel registered so far, or nullptr (for backends wrapping their own kernels while they register).
KernelFn registered_kernel(DeviceKind device, Op op, const KernelSignature& sig);
// Every signature registered for (device, op), in a stable order.
std::vector<KernelSignature> kernel_signatures(DeviceKind device, Op op);

// Scratch a backend's kernel for `op` needs (e.g. im2col buffers, oneDNN's blocked layouts); the planner
// asks workspace_bytes() for the device that will run the program, so the plan stays exact.
void register_workspace(DeviceKind device, Op op, WorkspaceFn fn);
WorkspaceFn registered_workspace(DeviceKind device, Op op);  // nullptr: none
size_t workspace_bytes(const Graph& g, int node, DeviceKind device);

// Defined in backends/: registers every backend compiled into this build (idempotent).
void ensure_backends_registered();

}  // namespace tk::graph
