// A CUDA program's input staging (issue 13): two pinned host buffers (cudaHostAlloc, sized from the program's
// input slots, allocated once per program, i.e. per kind and batch size), a copy stream of its own
// (cudaStreamNonBlocking, so it serializes with nothing implicitly)
// and the events StagingRing (staging_ring.h, where the hazards are spelled out) orders the copies with. A batch is
// gathered on the host into the acquired pinned buffer and copied with cudaMemcpyAsync from pinned memory, which
// returns before the copy is done.
//
// Not charged to the cpu device's budget (runtime::DeviceMemory allocates from its own regions and cannot account
// memory it did not allocate), like the host buffer the synchronous copy used before: 2 x the program's input bytes.
// Builds without CUDA compile a constructor that throws Unsupported (no CUDA program exists there). nn::BatchStager
// makes it through graph::Backend::make_input_staging (graph/backend_objects.h).
//
//   tk::cuda::PinnedStaging s(tk::Device::cuda(0), {x_bytes, y_bytes}, /*compute_stream=*/nullptr);
//   void* host = s.acquire();                          // waits for this buffer's copy two batches ago
//   gather x into (char*)host + s.offset(0) ...; s.copy(0, x_device, bytes);
//   s.submit();                                        // copy stream: after compute; compute: after the copy
#pragma once
#include <cstddef>
#include <memory>
#include <vector>

#include "graph/backend_objects.h"
#include "trainkit/core/device.h"

namespace tk::cuda {

class PinnedStaging final : public graph::InputStaging {
 public:
  // region_bytes: per program input, its device buffer's bytes (shape x dtype). compute_stream: the cudaStream_t
  // the program runs on (Program::stream(), its ProgramCache's compute stream; null: the legacy default stream).
  PinnedStaging(Device device, const std::vector<size_t>& region_bytes, void* compute_stream);
  ~PinnedStaging() override;  // waits for its queued copies, then frees the buffers, events and stream
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;

  void* acquire() override;                     // the pinned buffer the next batch is gathered into
  size_t offset(size_t region) const override;  // where a region starts in it
  void copy(size_t region, void* device_dst, size_t bytes) override;
  void submit() override;
  void abandon() override;  // the gather threw: nothing of this batch is copied

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tk::cuda
