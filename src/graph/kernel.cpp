#include "graph/kernel.h"

#include <array>

#include "trainkit/core/error.h"

namespace tk::graph {
namespace {
using Table = std::array<std::array<std::array<KernelFn, kDTypeCount>, kOpCount>, kDeviceKindCount>;
Table& table() {
  static Table t{};
  return t;
}
std::array<std::array<WorkspaceFn, kOpCount>, kDeviceKindCount>& workspaces() {
  static std::array<std::array<WorkspaceFn, kOpCount>, kDeviceKindCount> t{};
  return t;
}
}  // namespace

void register_workspace(DeviceKind device, Op op, WorkspaceFn fn) {
  workspaces()[static_cast<size_t>(device)][static_cast<size_t>(op)] = fn;
}

size_t workspace_bytes(const Graph& g, int node, DeviceKind device) {
  ensure_backends_registered();
  const Op op = g[node].op;
  if (WorkspaceFn fn = workspaces()[static_cast<size_t>(device)][static_cast<size_t>(op)]) return fn(g, node);
  if (WorkspaceFn fn = op_info(op).workspace) return fn(g, node);
  return 0;
}

void register_kernel(DeviceKind device, Op op, DType dtype, KernelFn fn) {
  table()[static_cast<size_t>(device)][static_cast<size_t>(op)][static_cast<size_t>(dtype)] = fn;
}

bool has_kernel(DeviceKind device, Op op, DType dtype) {
  ensure_backends_registered();
  return table()[static_cast<size_t>(device)][static_cast<size_t>(op)][static_cast<size_t>(dtype)] != nullptr;
}

KernelFn find_kernel(DeviceKind device, Op op, DType dtype) {
  ensure_backends_registered();
  KernelFn fn = table()[static_cast<size_t>(device)][static_cast<size_t>(op)][static_cast<size_t>(dtype)];
  if (!fn)
    throw Unsupported("no " + std::string(dtype_name(dtype)) + " kernel for op " + std::string(op_name(op)) + " on " +
                      Device{device, 0}.to_string() + " (run on a device that has it, or change the layer's dtype)");
  return fn;
}

}  // namespace tk::graph
