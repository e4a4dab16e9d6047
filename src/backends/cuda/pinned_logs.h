// Pinned host slots the lagged logs of fit (nn/training/lagged_logs.h) are copied into (issue 13): per slot, a
// cudaHostAlloc buffer the step's log values are copied to with cudaMemcpyAsync on the compute stream, and an event
// recorded after them, which the host waits for one step later instead of synchronizing the stream after each step.
// Builds without CUDA compile a constructor that throws Unsupported (no CUDA program exists there). nn/ makes it
// through graph::Backend::make_readback_slots (graph/backend_objects.h).
//
//   tk::cuda::PinnedLogSlots s(tk::Device::cuda(0), 2);
//   s.grow(0, 64, 0); void* host = s.data(0);  // slot 0 holds 64 bytes (grown only while nothing is queued into it)
//   program.copy_output_async(loss, host, 4); s.record(0, program.stream());
//   s.wait(0);                               // the copies are done: read host
#pragma once
#include <cstddef>
#include <memory>

#include "graph/backend_objects.h"
#include "trainkit/core/device.h"

namespace tk::cuda {

class PinnedLogSlots final : public graph::ReadbackSlots {
 public:
  PinnedLogSlots(Device device, int slots);
  ~PinnedLogSlots() override;  // waits for each slot's last recorded event, then frees the buffers and events
  PinnedLogSlots(const PinnedLogSlots&) = delete;
  PinnedLogSlots& operator=(const PinnedLogSlots&) = delete;

  void* data(int slot) const override;
  size_t capacity(int slot) const override;
  // Grows slot `slot`'s buffer to at least `bytes`, keeping its first `keep` bytes. The caller has synchronized with
  // the copies queued into it.
  void grow(int slot, size_t bytes, size_t keep) override;
  // Records the slot's event on `stream` (a cudaStream_t), after the copies queued into it.
  void record(int slot, void* stream) override;
  // Waits for the slot's event (no-op when none was recorded since the last wait).
  void wait(int slot) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tk::cuda
