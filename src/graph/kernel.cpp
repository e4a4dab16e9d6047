#include "graph/kernel.h"

#include <map>
#include <tuple>

#include "trainkit/core/error.h"

namespace tk::graph {
namespace {

using Key = std::tuple<DeviceKind, Op, KernelSignature>;
std::map<Key, KernelFn>& table() {
  static std::map<Key, KernelFn> t;
  return t;
}
std::array<std::array<WorkspaceFn, kOpCount>, kDeviceKindCount>& workspaces() {
  static std::array<std::array<WorkspaceFn, kOpCount>, kDeviceKindCount> t{};
  return t;
}

bool is_loss_or_metric_value(Op op) {
  return op == Op::MseLoss || op == Op::BceLoss || op == Op::CceLoss || op == Op::SparseCceLoss ||
         op == Op::BinaryAccuracy || op == Op::CategoricalAccuracy || op == Op::SparseCategoricalAccuracy ||
         op == Op::StepControl || op == Op::StepValue;
}

}  // namespace

KernelSignature::KernelSignature(std::initializer_list<DType> ins, DType output) : out(output) {
  if (ins.size() > static_cast<size_t>(kMaxKernelInputs))
    throw InvalidArgument("a kernel signature holds at most " + std::to_string(kMaxKernelInputs) + " inputs");
  for (DType t : ins) in[inputs++] = t;
}

std::string KernelSignature::to_string() const {
  std::string s = "(";
  for (int i = 0; i < inputs; ++i) s += (i ? ", " : "") + std::string(dtype_name(in[static_cast<size_t>(i)]));
  return s + ") -> " + std::string(dtype_name(out));
}

KernelSignature signature_of(const Graph& g, int node) {
  const Node& n = g[node];
  KernelSignature sig;
  sig.out = n.dtype;
  // Variadic ops: one entry. A gated update's StepControl input is not part of its signature.
  const size_t count =
      op_info(n.op).arity < 0 ? std::min<size_t>(n.inputs.size(), 1) : n.inputs.size() - (n.attrs.gated ? 1 : 0);
  if (count > static_cast<size_t>(kMaxKernelInputs))
    throw InvalidArgument(std::string(op_name(n.op)) + " '" + n.name + "' has more inputs than a kernel can take");
  for (size_t i = 0; i < count; ++i) sig.in[sig.inputs++] = g[n.inputs[i]].dtype;
  return sig;
}

KernelSignature signature_for(Op op, DType t) {
  const OpInfo& info = op_info(op);
  KernelSignature sig;
  sig.inputs = static_cast<uint8_t>(info.arity < 0 ? 1 : info.arity);
  for (int i = 0; i < sig.inputs; ++i) sig.in[static_cast<size_t>(i)] = t;
  if (is_sparse_target_op(op)) sig.in[1] = DType::i32;
  if (is_loss_grad_op(op)) sig.in[2] = DType::f32;
  if (op == Op::Where) sig.in[0] = DType::boolean;                       // the condition
  if (op == Op::Gather || op == Op::GatherGrad) sig.in[1] = DType::i32;  // indices
  if (op == Op::OneHot) sig.in[0] = DType::i32;                          // indices
  sig.out = is_loss_or_metric_value(op)                         ? DType::f32
            : op == Op::Compare                                 ? DType::boolean
            : op == Op::ArgReduce                               ? DType::i32
            : op == Op::RandomUniform || op == Op::RandomNormal ? DType::f32  // drawn in float32, cast after
                                                                : t;
  return sig;
}

void kernel_dtype_mismatch(const Node& node, int input, DType have, DType want) {
  throw InvalidArgument(std::string(op_name(node.op)) + " '" + node.name + "': the kernel reads " +
                        (input < 0 ? std::string("its output") : "input " + std::to_string(input)) + " as " +
                        std::string(dtype_name(want)) + " but it holds " + std::string(dtype_name(have)) +
                        " (a kernel registered under the wrong signature)");
}

void register_workspace(DeviceKind device, Op op, WorkspaceFn fn) {
  workspaces()[static_cast<size_t>(device)][static_cast<size_t>(op)] = fn;
}

WorkspaceFn registered_workspace(DeviceKind device, Op op) {
  return workspaces()[static_cast<size_t>(device)][static_cast<size_t>(op)];
}

size_t workspace_bytes(const Graph& g, int node, DeviceKind device) {
  ensure_backends_registered();
  if (WorkspaceFn fn = registered_workspace(device, g[node].op)) return fn(g, node);
  return 0;
}

void register_kernel(DeviceKind device, Op op, const KernelSignature& sig, KernelFn fn) {
  table()[Key{device, op, sig}] = fn;
}

KernelFn registered_kernel(DeviceKind device, Op op, const KernelSignature& sig) {
  auto it = table().find(Key{device, op, sig});
  return it == table().end() ? nullptr : it->second;
}

bool has_kernel(DeviceKind device, Op op, const KernelSignature& sig) {
  ensure_backends_registered();
  return table().count(Key{device, op, sig}) != 0;
}

std::vector<KernelSignature> kernel_signatures(DeviceKind device, Op op) {
  ensure_backends_registered();
  std::vector<KernelSignature> out;
  for (const auto& [key, fn] : table())
    if (std::get<0>(key) == device && std::get<1>(key) == op) out.push_back(std::get<2>(key));
  return out;
}

KernelFn find_kernel(DeviceKind device, Op op, const KernelSignature& sig) {
  ensure_backends_registered();
  if (KernelFn fn = registered_kernel(device, op, sig)) return fn;
  std::string have;
  for (const KernelSignature& s : kernel_signatures(device, op)) have += (have.empty() ? "" : ", ") + s.to_string();
  const std::string where = Device{device, 0}.to_string();
  throw Unsupported("no kernel for op " + std::string(op_name(op)) + " with dtypes " + sig.to_string() + " on " +
                    where + " (" + (have.empty() ? "the op has no kernel there" : "it has " + have) +
                    "; run on a device that has it, or change the layer's dtype / the dtype policy)");
}

}  // namespace tk::graph
