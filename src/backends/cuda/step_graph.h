// A CUDA program's step launcher (graph::StepLauncher, graph/step_capture.h holds the state machine that drives it):
//   - the step's scalars (graph::StepScalars) copied with cudaMemcpyAsync from a small ring of pinned host slots (made
//     at the first upload on the program's own stream; on the legacy stream, the op harness, a plain copy), so the
//     upload never waits for the device (a pageable source may make the driver synchronize), and the host may write
//     the next step's slot at once (a slot is reused after kSlots steps, once its copy's event has fired);
//   - the step's kernels captured with cudaStreamBeginCapture (cudaStreamCaptureModeThreadLocal: only this thread's
//     unsafe calls, e.g. a cudaMalloc inside a step, break the capture) / cudaStreamEndCapture, instantiated with
//     cudaGraphInstantiate and replayed with cudaGraphLaunch. The scalar upload stays outside the graph.
// Written and compiled, never launched (docs/gpu-report.md; CudaGraphs.* checks it on a GPU).
//
//   tk::cuda::CudaStepLauncher l(tk::Device::cuda(0));
//   l.upload_scalars(dev_scalars, &s, sizeof s, stream); l.begin_capture(stream); ...kernels...; l.end_capture(stream);
//   l.launch(stream);
#pragma once
#include <string>

#include "graph/step_capture.h"
#include "trainkit/core/device.h"

namespace tk::cuda {

class CudaStepLauncher final : public graph::StepLauncher {
 public:
  static constexpr int kSlots = 4;
  static constexpr size_t kSlotBytes = 64;  // graph::kStepScalarsBytes

  explicit CudaStepLauncher(Device device);
  ~CudaStepLauncher() override;
  void upload_scalars(void* dst, const void* host, size_t bytes, void* stream) override;
  void begin_capture(void* stream) override;
  void end_capture(void* stream) override;
  void abort_capture(void* stream) noexcept override;
  void launch(void* stream) override;
  void reset() noexcept override;

 private:
  void make_slots();
  void release() noexcept;
  Device device_;
  std::string where_;           // for error messages, made once
  void* pinned_ = nullptr;      // kSlots x kSlotBytes of page-locked memory
  void* events_[kSlots] = {};   // cudaEvent_t per slot: recorded after its copy
  bool recorded_[kSlots] = {};  // the slot's event was recorded at least once
  int next_ = 0;                // the slot the next upload uses
  void* graph_ = nullptr;       // cudaGraph_t
  void* exec_ = nullptr;        // cudaGraphExec_t
};

}  // namespace tk::cuda
