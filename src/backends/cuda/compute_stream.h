// A CUDA compute stream (issue 13): the stream a model's (or a data-parallel replica's) programs run, copy and
// synchronize on, created once per nn::ProgramCache with cudaStreamNonBlocking, so nothing on the legacy default
// stream (cudaMemcpy, cudaMemset of another part of the program) serializes with it implicitly. Everything that
// touches memory the stream's kernels use from outside a program (weight upload/download, optimizer slots, the
// loss-scale state) synchronizes with it first (nn::ProgramCache does).
//
// Why one per ProgramCache and not one per device: the programs of one cache share one arena and run one after the
// other, so one stream orders them; two caches on one device (two models, or two replicas placed on one GPU) share
// no memory that a program writes, and each data-parallel replica runs on its own thread with its own cache.
// Builds without CUDA compile a constructor that throws Unsupported (no CUDA program exists there). nn/ makes it
// through graph::Backend::make_stream (graph/backend_objects.h).
//
//   tk::cuda::ComputeStream s(tk::Device::cuda(0));
//   program.set_stream(s.get());     // every run, copy and read of that program on it
//   s.synchronize();                 // before the host touches what its kernels read or write
#pragma once
#include "graph/backend_objects.h"
#include "trainkit/core/device.h"

namespace tk::cuda {

class ComputeStream final : public graph::Stream {
 public:
  explicit ComputeStream(Device device);
  ~ComputeStream() override;  // waits for its queued work, then destroys it
  ComputeStream(const ComputeStream&) = delete;
  ComputeStream& operator=(const ComputeStream&) = delete;

  void* get() const override { return stream_; }  // a cudaStream_t
  Device device() const { return device_; }
  void synchronize() const override;

 private:
  Device device_;
  void* stream_ = nullptr;
};

}  // namespace tk::cuda
