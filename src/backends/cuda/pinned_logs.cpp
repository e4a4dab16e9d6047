// PinnedLogSlots (pinned_logs.h): cudaHostAlloc buffers and events. Compiled in every build; the CUDA part only with
// TK_HAVE_CUDA.
#include "backends/cuda/pinned_logs.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "trainkit/core/error.h"

#ifdef TK_HAVE_CUDA
#include <cuda_runtime.h>

#include <string>

#include "backends/cuda/check.h"
#include "backends/cuda/device_errors_cuda.h"

namespace tk::cuda {

struct PinnedLogSlots::Impl {
  struct Slot {
    void* host = nullptr;  // `bytes` of page-locked memory
    size_t bytes = 0;
    cudaEvent_t done = nullptr;
    bool recorded = false;  // an event was recorded and not yet waited for
  };
  Device device;
  std::vector<Slot> slots;
  std::string where() const { return device.to_string() + ", lagged logs"; }
  void use_device() { check(cudaSetDevice(device.index), "cudaSetDevice", device.to_string()); }
  ~Impl() {
    // No copy may still write a buffer being freed: wait for each slot's last event. Every copy queued into a slot is
    // followed by one (LaggedLogs seals a step abandoned by an exception too). Not cudaDeviceSynchronize: it would
    // break a capture another thread has in progress on the device (a data parallel replica's, another model's).
    // Errors are not thrown from here: the context may be gone.
    cudaSetDevice(device.index);
    for (Slot& s : slots) {
      if (s.done && s.recorded) cudaEventSynchronize(s.done);
      if (s.done) cudaEventDestroy(s.done);
      if (s.host) cudaFreeHost(s.host);
    }
    cudaGetLastError();  // a failed wait's error is not left for the next CUDA call on this thread
  }
};

PinnedLogSlots::PinnedLogSlots(Device device, int slots) : impl_(std::make_unique<Impl>()) {
  impl_->device = device;
  impl_->slots.resize(static_cast<size_t>(slots));
  impl_->use_device();
  for (Impl::Slot& s : impl_->slots)
    check(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming), "cudaEventCreateWithFlags", impl_->where());
}

PinnedLogSlots::~PinnedLogSlots() = default;

void* PinnedLogSlots::data(int slot) const { return impl_->slots[static_cast<size_t>(slot)].host; }
size_t PinnedLogSlots::capacity(int slot) const { return impl_->slots[static_cast<size_t>(slot)].bytes; }

void PinnedLogSlots::grow(int slot, size_t bytes, size_t keep) {
  Impl::Slot& s = impl_->slots[static_cast<size_t>(slot)];
  if (s.bytes >= bytes) return;
  wait(slot);  // nothing may still be copied into the buffer being replaced
  impl_->use_device();
  void* grown = nullptr;
  const size_t size = std::max<size_t>(bytes, 256);  // grown rarely: once for a fit's logs (micro-batches: more)
  check(cudaHostAlloc(&grown, size, cudaHostAllocDefault), "cudaHostAlloc (lagged logs)",
        impl_->where() + ", " + std::to_string(size) + " bytes");
  if (s.host && keep > 0) std::memcpy(grown, s.host, std::min(keep, s.bytes));
  if (s.host) cudaFreeHost(s.host);
  s.host = grown;
  s.bytes = size;
}

void PinnedLogSlots::record(int slot, void* stream) {
  Impl::Slot& s = impl_->slots[static_cast<size_t>(slot)];
  impl_->use_device();
  check(cudaEventRecord(s.done, static_cast<cudaStream_t>(stream)), "cudaEventRecord (lagged logs)", impl_->where());
  s.recorded = true;
}

void PinnedLogSlots::wait(int slot) {
  Impl::Slot& s = impl_->slots[static_cast<size_t>(slot)];
  if (!s.recorded) return;
  check(cudaEventSynchronize(s.done), "cudaEventSynchronize (a step's log values)", impl_->where());
  s.recorded = false;
  raise_device_errors(impl_->device.index);  // the step's kernels are done: what they found in their inputs
}

}  // namespace tk::cuda

#else
namespace tk::cuda {
struct PinnedLogSlots::Impl {};
PinnedLogSlots::PinnedLogSlots(Device device, int) {
  throw Unsupported("pinned log slots for " + device.to_string() + ": this build has no CUDA backend");
}
PinnedLogSlots::~PinnedLogSlots() = default;
void* PinnedLogSlots::data(int) const { return nullptr; }
size_t PinnedLogSlots::capacity(int) const { return 0; }
void PinnedLogSlots::grow(int, size_t, size_t) {}
void PinnedLogSlots::record(int, void*) {}
void PinnedLogSlots::wait(int) {}
}  // namespace tk::cuda
#endif
