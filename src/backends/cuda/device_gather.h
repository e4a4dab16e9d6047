// Batches of a device-resident Dataset (Dataset::on_device(arrays, cuda:N)) gathered on the GPU straight into a
// program's inputs: nn::BatchStager (nn/training/device_staging.cpp) calls it for every input of a batch whose arrays
// are on the program's device. Per program (kind and batch size) one device buffer of row numbers, uploaded once per
// shuffled batch with cudaMemcpyAsync from one of two pinned slots (the host waits for a slot's upload two batches
// ago before writing it again). Every copy and kernel is queued on the stream the program runs on, in order with
// its kernels: batch k+1's gather runs after step k has read the inputs it overwrites. What is copied and what goes
// through the kernel is device_gather_plan.h (host logic). Builds without CUDA compile a constructor that throws
// Unsupported (no CUDA program exists there). nn::BatchStager makes it through graph::Backend::make_row_gather
// (graph/backend_objects.h).
//
//   tk::cuda::DeviceGather g(tk::Device::cuda(0));
//   g.begin_batch(idx, begin, n, stream);                     // uploads idx when some input needs it
//   g.rows(x_array, slot.data, slot.dtype, scale, offset);    // per input: (n, ...) <- rows of x_array (N, ...)
#pragma once
#include <cstdint>
#include <memory>

#include "backends/cuda/device_gather_launch.h"
#include "graph/backend_objects.h"
#include "trainkit/core/tensor.h"

namespace tk::cuda {

class DeviceGather final : public graph::RowGather {
 public:
  explicit DeviceGather(Device device);
  ~DeviceGather() override;
  DeviceGather(const DeviceGather&) = delete;
  DeviceGather& operator=(const DeviceGather&) = delete;

  // The batch's rows: idx[0..n) (host memory) or, when idx is null, [begin, begin + n). `stream`: the program's.
  void begin_batch(const int64_t* idx, int64_t begin, int64_t n, void* stream) override;
  // dst(n, ...) in `dtype` <- the batch's rows of src (N, ...), an array on this device, x * scale + offset.
  void rows(const Tensor& src, void* dst, DType dtype, float scale, float offset) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tk::cuda
