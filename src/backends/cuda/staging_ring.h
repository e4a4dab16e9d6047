// The host-side logic of staging batches into a CUDA program's inputs through two pinned host buffers and a copy
// stream (pinned_staging.h holds the CUDA calls): where each input sits in a pinned buffer, which buffer the next
// batch is gathered into, and the order of the waits around each copy. Host code every build compiles; the CUDA
// calls are behind StagingEvents, so tests/test_staging_ring.cpp checks the order with a fake on the CPU.
//
// The hazards, and what orders each (k = the step that reads batch k):
//   1. Gathering batch k+1 into pinned buffer b must not overwrite bytes a queued copy still reads: acquire() makes
//      the host wait for the event recorded after b's last copy (batch k-1's: with two buffers, batch k's copy from
//      the other buffer may still be queued while the host gathers).
//   2. The copy of batch k+1 must not overwrite the program's input while step k (or any other work queued before
//      it) still reads it. The inputs live in the program's arena, which every program of a model shares, so the
//      region may also be another program's temporary: submit() makes the copy stream wait for an event recorded on
//      the compute stream at that moment, i.e. after all compute queued so far. One device buffer per input, and the
//      device-side copy of batch k+1 follows step k (simplest correct scheme); what overlaps step k is the host's
//      gather of batch k+1 into the other pinned buffer.
//   3. Step k+1's kernels must not read the input before its copy lands: submit() makes the compute stream wait for
//      the event recorded after the copies, before anything queued later on it (the next program run).
// Together 2 and 3 put each copy between everything queued on the compute stream before submit() and everything
// after, as the synchronous copy on the compute stream was.
//
//   tk::cuda::StagingRing ring({x_bytes, y_bytes}, events);   // per program input, its device bytes
//   const int b = ring.acquire();                              // waits when b's last copy is still queued
//   gather into pinned[b] + ring.offset(0) ...; ring.copy(0, x_device, x_bytes_now);
//   ring.submit();                                             // the copies, with the waits of hazards 2 and 3
#pragma once
#include <cstddef>
#include <vector>

namespace tk::cuda {

// Inputs' regions in one pinned buffer start at multiples of this (CUDA's copy engines prefer aligned sources).
inline constexpr size_t kStagingAlignment = 256;

// Where each region sits in a staging buffer, and the buffer's size.
struct StagingLayout {
  std::vector<size_t> offset;  // per region, a multiple of kStagingAlignment
  std::vector<size_t> bytes;   // per region, as asked
  size_t total = 0;            // bytes of one buffer (at least kStagingAlignment, so a buffer is never empty)
};
StagingLayout staging_layout(const std::vector<size_t>& region_bytes);

// What the ring asks of the device. PinnedStaging's are CUDA calls; the tests' record the order.
class StagingEvents {
 public:
  virtual ~StagingEvents() = default;
  // The host blocks until buffer b's last copy is done (cudaEventSynchronize on its copied event).
  virtual void host_wait_copied(int b) = 0;
  // The copy stream waits for everything queued on the compute stream so far (an event recorded there,
  // cudaStreamWaitEvent on the copy stream).
  virtual void copy_after_compute() = 0;
  // Queues bytes of buffer b from `offset` to `device_dst` on the copy stream (cudaMemcpyAsync from pinned memory).
  virtual void copy(int b, size_t offset, void* device_dst, size_t bytes) = 0;
  // Records buffer b's copied event on the copy stream, after its copies.
  virtual void record_copied(int b) = 0;
  // The compute stream waits for buffer b's copied event (cudaStreamWaitEvent) before anything queued after.
  virtual void compute_after_copied(int b) = 0;
};

class StagingRing {
 public:
  static constexpr int kBuffers = 2;
  StagingRing(const std::vector<size_t>& region_bytes, StagingEvents& events);

  const StagingLayout& layout() const { return layout_; }
  size_t offset(size_t region) const;
  // The buffer the next batch is gathered into (they take turns); waits for its last copy when that is queued.
  int acquire();
  // Between acquire() and submit(): queue region's first `bytes` (at most the region's size) to device_dst.
  void copy(size_t region, void* device_dst, size_t bytes);
  // The acquired buffer's copies, after the compute queued so far and before the compute queued later.
  void submit();
  // Drops the acquired buffer's batch without copying it (the gather threw): nothing of it was queued.
  void abandon();
  // Waits for every queued copy (before the pinned buffers are freed). The ring stays usable.
  void drain();

  bool copy_queued(int b) const { return queued_[static_cast<size_t>(b)]; }
  int current() const { return current_; }  // the acquired buffer, or -1 outside acquire()..submit()

 private:
  StagingLayout layout_;
  StagingEvents& events_;
  bool queued_[kBuffers] = {};  // per buffer: a copy from it was queued and not yet seen done by the host
  struct Pending {
    size_t offset;
    void* dst;
    size_t bytes;
  };
  std::vector<Pending> pending_;  // the acquired buffer's copies, issued by submit() after the wait on compute
  int next_ = 0, current_ = -1;
};

}  // namespace tk::cuda
