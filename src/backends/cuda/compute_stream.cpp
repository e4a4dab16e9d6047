// ComputeStream (compute_stream.h): cudaStreamCreateWithFlags(cudaStreamNonBlocking) on the device, once per
// nn::ProgramCache. Compiled in every build; the CUDA part only with TK_HAVE_CUDA.
#include "backends/cuda/compute_stream.h"

#include "trainkit/core/error.h"

#ifdef TK_HAVE_CUDA
#include <cuda_runtime.h>

#include "backends/cuda/check.h"
#include "backends/cuda/device_errors_cuda.h"

namespace tk::cuda {

ComputeStream::ComputeStream(Device device) : device_(device) {
  // Made on its device; the calling thread's current device is given back (a replica's cache may be built from
  // another replica's thread).
  int previous = 0;
  check(cudaGetDevice(&previous), "cudaGetDevice", device.to_string());
  check(cudaSetDevice(device.index), "cudaSetDevice", device.to_string());
  cudaStream_t s = nullptr;
  const cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaSetDevice(previous);
  check(e, "cudaStreamCreateWithFlags (compute stream)", device.to_string());
  stream_ = s;
  // The device's error record, allocated now rather than at a kernel's first launch, which may come while another
  // thread captures a CUDA Graph (a pinned allocation is not allowed then).
  (void)device_error_record(device.index);
}

ComputeStream::~ComputeStream() {
  // Errors are not thrown from here: a failed call means the context is gone, and the destroy then fails harmlessly.
  cudaSetDevice(device_.index);
  cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

void ComputeStream::synchronize() const {
  check(cudaSetDevice(device_.index), "cudaSetDevice", device_.to_string());
  check(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)), "cudaStreamSynchronize (compute stream)",
        device_.to_string());
  raise_device_errors(device_.index);  // what a kernel found in its inputs (a gather index outside its table)
}

}  // namespace tk::cuda

#else
namespace tk::cuda {
ComputeStream::ComputeStream(Device device) : device_(device) {
  throw Unsupported("a compute stream on " + device.to_string() + ": this build has no CUDA backend");
}
ComputeStream::~ComputeStream() = default;
void ComputeStream::synchronize() const {}
}  // namespace tk::cuda
#endif
