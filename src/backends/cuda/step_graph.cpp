// CudaStepLauncher (step_graph.h): the CUDA calls of a program's step — pinned scalar upload, graph capture,
// instantiation and replay. Compiled only as part of the CUDA backend (TK_HAVE_CUDA); the decisions are
// graph::StepCapture's (host code, unit-tested on the CPU).
#ifdef TK_HAVE_CUDA
#include "backends/cuda/step_graph.h"

#include <cuda_runtime.h>

#include <cstring>
#include <string>

#include "backends/cuda/check.h"

namespace tk::cuda {
namespace {
cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }
}  // namespace

CudaStepLauncher::CudaStepLauncher(Device device) : device_(device) {
  const std::string where = device.to_string() + ", step launcher";
  try {
    check(cudaSetDevice(device.index), "cudaSetDevice", where);
    check(cudaHostAlloc(&pinned_, kSlots * kSlotBytes, cudaHostAllocDefault), "cudaHostAlloc (step scalars)", where);
    for (void*& e : events_) {
      cudaEvent_t ev = nullptr;
      check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreateWithFlags (step scalars)", where);
      e = ev;
    }
  } catch (...) {
    release();
    throw;
  }
}

CudaStepLauncher::~CudaStepLauncher() { release(); }

void CudaStepLauncher::release() noexcept {
  // Errors are not thrown from here: a failed call means the context is gone, and the frees then fail harmlessly.
  cudaSetDevice(device_.index);
  for (int s = 0; s < kSlots; ++s)
    if (events_[s]) {
      if (recorded_[s]) cudaEventSynchronize(static_cast<cudaEvent_t>(events_[s]));  // no copy still reads the slot
      cudaEventDestroy(static_cast<cudaEvent_t>(events_[s]));
      events_[s] = nullptr;
    }
  if (pinned_) cudaFreeHost(pinned_);
  pinned_ = nullptr;
  reset();
}

void CudaStepLauncher::upload_scalars(void* dst, const void* host, size_t bytes, void* stream) {
  const std::string where = device_.to_string() + ", step scalars";
  if (bytes > kSlotBytes) throw InvalidArgument("step scalars of " + std::to_string(bytes) + " bytes (" + where + ")");
  const int s = next_;
  next_ = (next_ + 1) % kSlots;
  auto* ev = static_cast<cudaEvent_t>(events_[s]);
  // The slot's copy kSlots steps ago has long run unless the host is kSlots steps ahead of the device: then this
  // waits, which also bounds how far ahead the host queues.
  if (recorded_[s]) check(cudaEventSynchronize(ev), "cudaEventSynchronize (a step-scalar slot's last copy)", where);
  char* slot = static_cast<char*>(pinned_) + static_cast<size_t>(s) * kSlotBytes;
  std::memcpy(slot, host, bytes);
  check(cudaMemcpyAsync(dst, slot, bytes, cudaMemcpyHostToDevice, as_stream(stream)), "cudaMemcpyAsync (step scalars)",
        where);
  check(cudaEventRecord(ev, as_stream(stream)), "cudaEventRecord (step scalars)", where);
  recorded_[s] = true;
}

void CudaStepLauncher::begin_capture(void* stream) {
  reset();
  check(cudaStreamBeginCapture(as_stream(stream), cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture",
        device_.to_string());
}

void CudaStepLauncher::end_capture(void* stream) {
  cudaGraph_t g = nullptr;
  const cudaError_t e = cudaStreamEndCapture(as_stream(stream), &g);
  if (e != cudaSuccess || !g) {
    if (g) cudaGraphDestroy(g);
    cudaGetLastError();  // capture errors are not sticky; clear the thread's last error for the plain launches
    check(e == cudaSuccess ? cudaErrorStreamCaptureInvalidated : e, "cudaStreamEndCapture", device_.to_string());
  }
  graph_ = g;
  cudaGraphExec_t exec = nullptr;
  const cudaError_t ie = cudaGraphInstantiate(&exec, g, 0);
  if (ie != cudaSuccess) {
    cudaGetLastError();
    reset();
    check(ie, "cudaGraphInstantiate", device_.to_string());
  }
  exec_ = exec;
}

void CudaStepLauncher::abort_capture(void* stream) noexcept {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(as_stream(stream), &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
    cudaGraph_t g = nullptr;
    cudaStreamEndCapture(as_stream(stream), &g);
    if (g) cudaGraphDestroy(g);
  }
  cudaGetLastError();
  reset();
}

void CudaStepLauncher::launch(void* stream) {
  check(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), as_stream(stream)), "cudaGraphLaunch",
        device_.to_string());
}

void CudaStepLauncher::reset() noexcept {
  if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  if (graph_) cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
  exec_ = nullptr;
  graph_ = nullptr;
}

}  // namespace tk::cuda
#endif
