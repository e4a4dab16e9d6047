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

CudaStepLauncher::CudaStepLauncher(Device device) : device_(device), where_(device.to_string() + ", step scalars") {}

CudaStepLauncher::~CudaStepLauncher() { release(); }

// The pinned slots and their events, made with the first upload on a stream of the program's own (a program of the op
// harness, on the legacy stream, never needs them).
void CudaStepLauncher::make_slots() {
  try {
    check(cudaSetDevice(device_.index), "cudaSetDevice", where_);
    check(cudaHostAlloc(&pinned_, kSlots * kSlotBytes, cudaHostAllocDefault), "cudaHostAlloc (step scalars)", where_);
    for (void*& e : events_) {
      cudaEvent_t ev = nullptr;
      check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreateWithFlags (step scalars)", where_);
      e = ev;
    }
  } catch (...) {
    release();
    throw;
  }
}

void CudaStepLauncher::release() noexcept {
  // Errors are not thrown from here: a failed call means the context is gone, and the frees then fail harmlessly.
  cudaSetDevice(device_.index);
  for (int s = 0; s < kSlots; ++s) {
    if (events_[s]) {
      if (recorded_[s]) cudaEventSynchronize(static_cast<cudaEvent_t>(events_[s]));  // no copy still reads the slot
      cudaEventDestroy(static_cast<cudaEvent_t>(events_[s]));
    }
    events_[s] = nullptr;
    recorded_[s] = false;
  }
  if (pinned_) cudaFreeHost(pinned_);
  pinned_ = nullptr;
  reset();
}

void CudaStepLauncher::upload_scalars(void* dst, const void* host, size_t bytes, void* stream) {
  if (bytes > kSlotBytes) throw InvalidArgument("step scalars of " + std::to_string(bytes) + " bytes (" + where_ + ")");
  // Kernels launch on the calling thread's current device: every run starts here, so this makes it the program's.
  check(cudaSetDevice(device_.index), "cudaSetDevice", where_);
  if (!stream) {  // the legacy default stream (the op harness): a plain copy, never captured
    check(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, nullptr), "cudaMemcpyAsync (step scalars)", where_);
    return;
  }
  if (!pinned_) make_slots();
  const int s = next_;
  next_ = (next_ + 1) % kSlots;
  auto* ev = static_cast<cudaEvent_t>(events_[s]);
  // The slot's copy kSlots steps ago has long run unless the host is kSlots steps ahead of the device: then this
  // waits, which also bounds how far ahead the host queues.
  if (recorded_[s]) check(cudaEventSynchronize(ev), "cudaEventSynchronize (a step-scalar slot's last copy)", where_);
  char* slot = static_cast<char*>(pinned_) + static_cast<size_t>(s) * kSlotBytes;
  std::memcpy(slot, host, bytes);
  check(cudaMemcpyAsync(dst, slot, bytes, cudaMemcpyHostToDevice, as_stream(stream)), "cudaMemcpyAsync (step scalars)",
        where_);
  check(cudaEventRecord(ev, as_stream(stream)), "cudaEventRecord (step scalars)", where_);
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
