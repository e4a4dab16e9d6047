// A backend: everything device-specific a program needs — kernels, workspace sizes, copies between host
// and device, synchronization, per-thread setup. There are two: the CPU backend (backends/cpu/) and the CUDA
// backend (backends/cuda/, in builds with -DTK_CUDA=ON; models train on it). graph/ talks to backends only
// through this interface and the kernel table (graph/kernel.h).
//
//   graph::Backend& b = graph::backend(device.kind);     // Unsupported if this build has none for it
//   uint64_t saved = b.enter_run(); ...; b.leave_run(saved);  // CPU: denormals flushed while kernels run
//   b.copy_to_device(dst, host_src, bytes, ctx);         // CPU: memcpy; CUDA: async on ctx.stream
//   b.synchronize(ctx);                                  // before the host reads what kernels wrote
#pragma once
#include <cstddef>
#include <memory>
#include <string_view>

#include "graph/kernel.h"
#include "graph/step_capture.h"

namespace tk::graph {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual DeviceKind kind() const = 0;
  virtual std::string_view name() const = 0;
  // Registers the backend's kernels and workspace rules; called once, from ensure_backends_registered().
  virtual void register_kernels() = 0;
  // Around one run on the calling thread: enter_run puts the thread (and the backend's worker threads) in
  // the mode kernels expect and returns what leave_run needs to give the caller's thread its own mode back.
  virtual uint64_t enter_run() { return 0; }
  virtual void leave_run(uint64_t /*saved*/) {}
  // Copies between host memory and this backend's device memory; may be asynchronous on ctx.stream.
  virtual void copy_to_device(void* dst, const void* host_src, size_t bytes, const ExecContext& ctx) = 0;
  virtual void copy_to_host(void* host_dst, const void* src, size_t bytes, const ExecContext& ctx) = 0;
  // Waits until everything queued on ctx.stream is done.
  virtual void synchronize(const ExecContext& ctx) = 0;
  // Queues a copy to host memory on ctx.stream without waiting for it (CUDA: the host memory must be pinned, and is
  // read after an event or a synchronize). Synchronous where the backend is (the CPU).
  virtual void copy_to_host_async(void* host_dst, const void* src, size_t bytes, const ExecContext& ctx) {
    copy_to_host(host_dst, src, bytes, ctx);
  }
  // A program's step launcher (scalar upload, graph capture and replay: graph/step_capture.h), or null when the
  // backend has no graphs (the CPU).
  virtual std::unique_ptr<StepLauncher> make_step_launcher(Device /*device*/) { return nullptr; }

  // Scratch bytes the kernel for `node` needs on this backend.
  size_t workspace_bytes(const Graph& g, int node) const { return graph::workspace_bytes(g, node, kind()); }
  bool supports(Op op, const KernelSignature& sig) const { return has_kernel(kind(), op, sig); }
};

// Called by ensure_backends_registered() for each backend compiled in.
void register_backend(std::unique_ptr<Backend> backend);
// The backend for a device kind; Unsupported naming the kind when this build has none.
Backend& backend(DeviceKind kind);
bool has_backend(DeviceKind kind);

}  // namespace tk::graph
