// PinnedStaging (pinned_staging.h): StagingRing's events as CUDA calls, over two cudaHostAlloc buffers and a
// non-blocking copy stream. Compiled in every build; the CUDA part only with TK_HAVE_CUDA.
#include "backends/cuda/pinned_staging.h"

#include "trainkit/core/error.h"

#ifdef TK_HAVE_CUDA
#include <cuda_runtime.h>

#include <string>

#include "backends/cuda/check.h"
#include "backends/cuda/staging_ring.h"

namespace tk::cuda {

struct PinnedStaging::Impl final : StagingEvents {
  Device device;
  cudaStream_t compute = nullptr;                  // not owned: the stream programs run on
  cudaStream_t copier = nullptr;                   // owned, cudaStreamNonBlocking
  cudaEvent_t computed = nullptr;                  // recorded on `compute` before each batch's copies (hazard 2)
  cudaEvent_t copied[StagingRing::kBuffers] = {};  // per buffer: recorded on `copier` after its copies (1, 3)
  void* pinned[StagingRing::kBuffers] = {};        // per buffer: ring.layout().total bytes of page-locked memory
  StagingRing ring;

  Impl(Device d, const std::vector<size_t>& region_bytes, void* compute_stream)
      : device(d), compute(static_cast<cudaStream_t>(compute_stream)), ring(region_bytes, *this) {
    try {
      use_device();
      check(cudaStreamCreateWithFlags(&copier, cudaStreamNonBlocking), "cudaStreamCreateWithFlags (copy stream)",
            where());
      // Timing off: these events only order work, and timing makes cudaEventRecord/Synchronize slower.
      check(cudaEventCreateWithFlags(&computed, cudaEventDisableTiming), "cudaEventCreateWithFlags", where());
      for (int b = 0; b < StagingRing::kBuffers; ++b) {
        check(cudaEventCreateWithFlags(&copied[b], cudaEventDisableTiming), "cudaEventCreateWithFlags", where());
        check(cudaHostAlloc(&pinned[b], ring.layout().total, cudaHostAllocDefault), "cudaHostAlloc (staging buffer)",
              where() + ", " + std::to_string(ring.layout().total) + " bytes");
      }
    } catch (...) {
      release();
      throw;
    }
  }
  ~Impl() override {
    // No copy may still read a buffer being freed: wait for each queued copy (errors are not thrown from here; a
    // failed wait means the context is gone, and the free below then fails harmlessly too).
    for (int b = 0; b < StagingRing::kBuffers; ++b)
      if (ring.copy_queued(b) && copied[b]) cudaEventSynchronize(copied[b]);
    release();
  }
  void release() noexcept {
    cudaSetDevice(device.index);
    for (int b = 0; b < StagingRing::kBuffers; ++b) {
      if (pinned[b]) cudaFreeHost(pinned[b]);
      if (copied[b]) cudaEventDestroy(copied[b]);
      pinned[b] = nullptr;
      copied[b] = nullptr;
    }
    if (computed) cudaEventDestroy(computed);
    if (copier) cudaStreamDestroy(copier);
    computed = nullptr;
    copier = nullptr;
  }
  std::string where() const { return device.to_string() + ", input staging"; }
  // Streams and events belong to the device current when they were made: every call makes it current again.
  void use_device() { check(cudaSetDevice(device.index), "cudaSetDevice", device.to_string()); }

  void host_wait_copied(int b) override {
    check(cudaEventSynchronize(copied[b]), "cudaEventSynchronize (a staging buffer's last copy)", where());
  }
  void copy_after_compute() override {
    check(cudaEventRecord(computed, compute), "cudaEventRecord (compute stream)", where());
    check(cudaStreamWaitEvent(copier, computed, 0), "cudaStreamWaitEvent (copy stream after compute)", where());
  }
  void copy(int b, size_t offset, void* device_dst, size_t bytes) override {
    check(cudaMemcpyAsync(device_dst, static_cast<const char*>(pinned[b]) + offset, bytes, cudaMemcpyHostToDevice,
                          copier),
          "cudaMemcpyAsync (pinned staging buffer to device)", where() + ", " + std::to_string(bytes) + " bytes");
  }
  void record_copied(int b) override {
    check(cudaEventRecord(copied[b], copier), "cudaEventRecord (copy stream)", where());
  }
  void compute_after_copied(int b) override {
    check(cudaStreamWaitEvent(compute, copied[b], 0), "cudaStreamWaitEvent (compute stream after the copy)", where());
  }
};

PinnedStaging::PinnedStaging(Device device, const std::vector<size_t>& region_bytes, void* compute_stream)
    : impl_(std::make_unique<Impl>(device, region_bytes, compute_stream)) {}
PinnedStaging::~PinnedStaging() = default;

void* PinnedStaging::acquire() {
  impl_->use_device();
  return impl_->pinned[impl_->ring.acquire()];
}
size_t PinnedStaging::offset(size_t region) const { return impl_->ring.offset(region); }
void PinnedStaging::copy(size_t region, void* device_dst, size_t bytes) { impl_->ring.copy(region, device_dst, bytes); }
void PinnedStaging::submit() {
  impl_->use_device();
  impl_->ring.submit();
}
void PinnedStaging::abandon() { impl_->ring.abandon(); }

}  // namespace tk::cuda

#else
namespace tk::cuda {
struct PinnedStaging::Impl {};
PinnedStaging::PinnedStaging(Device device, const std::vector<size_t>&, void*) {
  throw Unsupported("pinned input staging for " + device.to_string() + ": this build has no CUDA backend");
}
PinnedStaging::~PinnedStaging() = default;
void* PinnedStaging::acquire() { return nullptr; }
size_t PinnedStaging::offset(size_t) const { return 0; }
void PinnedStaging::copy(size_t, void*, size_t) {}
void PinnedStaging::submit() {}
void PinnedStaging::abandon() {}
}  // namespace tk::cuda
#endif
