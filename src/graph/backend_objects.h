// The objects a backend makes for a model's programs besides kernels and copies (graph/backend.h's factories): the
// stream its programs run on, the staging of host batches into program inputs, host slots that step results are
// read back into after an event, and the gather of a device-resident dataset's rows. nn/ holds them through these
// interfaces and never names a backend's types. A backend whose memory is host memory and whose work is synchronous
// (the CPU) makes none of them; its callers copy and read synchronously. CUDA's are in backends/cuda/
// (compute_stream.h, pinned_staging.h, pinned_logs.h, device_gather.h).
//
// Every call here is made per step or less often (never per element): the virtual call costs nothing measurable.
//
//   std::unique_ptr<graph::Stream> s = graph::backend(device.kind).make_stream(device);   // null on the CPU
//   program.set_stream(s->get()); ...; s->synchronize();
#pragma once
#include <cstddef>
#include <cstdint>

#include "trainkit/core/tensor.h"

namespace tk::graph {

// A queue of device work that a model's programs run, copy and synchronize on (CUDA: a non-blocking cudaStream_t).
class Stream {
 public:
  virtual ~Stream() = default;  // waits for its queued work first
  // The backend's handle (what Program::set_stream and ExecContext::stream take).
  virtual void* get() const = 0;
  // Waits until everything queued on it is done.
  virtual void synchronize() const = 0;
};

// A program's input staging (made at its first bind): host buffers the device copies from asynchronously, ordered
// against the program's stream (CUDA: two pinned buffers, a copy stream and events; the waits are
// backends/cuda/staging_ring.h's). Regions are the program's inputs in the order the stager copies them.
//
//   char* host = static_cast<char*>(s.acquire());    // may wait until no queued copy still reads this buffer
//   s.copy(0, x_device, bytes); gather x into host + s.offset(0) ...;
//   s.submit();                                      // the copies, ordered after the compute queued so far
class InputStaging {
 public:
  virtual ~InputStaging() = default;  // waits for its queued copies first
  // The host buffer the next batch is gathered into.
  virtual void* acquire() = 0;
  // Where a region starts in it.
  virtual size_t offset(size_t region) const = 0;
  // Queues (until submit) the copy of a region's first `bytes` to device_dst; refuses more bytes than it holds.
  virtual void copy(size_t region, void* device_dst, size_t bytes) = 0;
  virtual void submit() = 0;
  // The gather threw: nothing of this batch is copied, the buffer is free again.
  virtual void abandon() = 0;
};

// Host slots a step's results (fit's log values) are copied into without waiting, each with an event recorded after
// its copies, which the host waits for later (CUDA: cudaHostAlloc buffers and events).
class ReadbackSlots {
 public:
  virtual ~ReadbackSlots() = default;  // waits for each slot's last recorded event first
  virtual void* data(int slot) const = 0;
  virtual size_t capacity(int slot) const = 0;
  // Grows the slot's buffer to at least `bytes`, keeping its first `keep` bytes. The caller has synchronized with the
  // copies queued into it.
  virtual void grow(int slot, size_t bytes, size_t keep) = 0;
  // Records the slot's event on `stream` (a Stream::get()), after the copies queued into the slot.
  virtual void record(int slot, void* stream) = 0;
  // Waits for the slot's event (no-op when none was recorded since the last wait).
  virtual void wait(int slot) = 0;
};

// Batches of a dataset whose arrays are in the device's memory (Dataset::on_device), gathered there straight into a
// program's inputs, converting the dtype and applying a fused Rescaling as host staging does.
class RowGather {
 public:
  virtual ~RowGather() = default;
  // The batch's rows: idx[0..n) (host memory) or, when idx is null, [begin, begin + n). `stream`: the program's.
  virtual void begin_batch(const int64_t* idx, int64_t begin, int64_t n, void* stream) = 0;
  // dst(n, ...) in `dtype` <- src's rows of the batch, scaled (x * scale + offset); src (N, ...) is on the device.
  virtual void rows(const Tensor& src, void* dst, DType dtype, float scale, float offset) = 0;
};

}  // namespace tk::graph
