// A backend: everything device-specific that programs and the model code above them need — kernels, workspace
// sizes, copies between host and device, synchronization, per-thread setup, a program's step launcher, and the
// objects that let a step run ahead of the host (graph/backend_objects.h: a stream, input staging, read-back slots,
// a row gather). There are two: the CPU backend (backends/cpu/) and the CUDA backend (backends/cuda/, in builds with
// -DTK_CUDA=ON). graph/ and nn/ talk to backends only through this interface, the kernel table (graph/kernel.h) and
// the host's threads (graph/host_threads.h); a backend is added by writing its folder and one line in
// backends/backends.cpp (CONTRIBUTING.md, "Adding a backend").
//
//   graph::Backend& b = graph::backend(device.kind);     // Unsupported if this build has none for it
//   uint64_t saved = b.enter_run(); ...; b.leave_run(saved);  // CPU: denormals flushed while kernels run
//   b.copy_to_device(dst, host_src, bytes, ctx);         // CPU: memcpy; CUDA: async on ctx.stream
//   b.synchronize(ctx);                                  // before the host reads what kernels wrote
//   std::unique_ptr<graph::Stream> s = b.make_stream(device);   // null where work is synchronous (the CPU)
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "graph/backend_objects.h"
#include "graph/kernel.h"
#include "graph/step_capture.h"

namespace tk::graph {

class Program;

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
  // Page-locks the host memory [p, p + bytes) (a file's staging buffer: a cpu tensor, tagged and charged to the cpu's
  // budget like any other) so that copies between it and this backend's devices go by DMA without a bounce through
  // the driver's own buffer; unpin_host(p) undoes it before the memory is freed. False where nothing was done (the
  // CPU, whose memory is the host's; a CUDA refusal): the copies are then the same, only slower.
  virtual bool pin_host(void* /*p*/, size_t /*bytes*/) { return false; }
  virtual void unpin_host(void* /*p*/) {}
  // A program's step launcher (scalar upload, graph capture and replay: graph/step_capture.h), or null when the
  // backend has no graphs (the CPU).
  virtual std::unique_ptr<StepLauncher> make_step_launcher(Device /*device*/) { return nullptr; }

  // The objects of graph/backend_objects.h, made once per model (stream), per program (staging, gather) or per fit
  // (read-back slots). Null where the backend has none: its work is synchronous and its memory the host's (the CPU),
  // and callers stage, copy and read synchronously instead (a device-resident dataset then has no gather: Unsupported).
  virtual std::unique_ptr<Stream> make_stream(Device /*device*/) { return nullptr; }
  // region_bytes: per program input, its device buffer's bytes. stream: the program's (Program::stream()).
  virtual std::unique_ptr<InputStaging> make_input_staging(Device /*device*/,
                                                           const std::vector<size_t>& /*region_bytes*/,
                                                           void* /*stream*/) {
    return nullptr;
  }
  virtual std::unique_ptr<ReadbackSlots> make_readback_slots(Device /*device*/, int /*slots*/) { return nullptr; }
  virtual std::unique_ptr<RowGather> make_row_gather(Device /*device*/) { return nullptr; }

  // Kernel choices made by measurement that change a result's bits (the CPU's GEMM engine per shape), as text, for
  // the programs given (a training state records them so a resumed run computes the same bits), and restoring them.
  // "" and a no-op where the backend measures nothing.
  virtual std::string kernel_choices(const std::vector<const Program*>& /*programs*/) const { return {}; }
  virtual void set_kernel_choices(const std::string& /*text*/) {}

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
