// Where a host batch meets a program: the seam between data and device, and the only code that writes a
// program's inputs (it alone holds graph::InputAccess).
//
// CPU (today): the pipeline's last prefetch thread has the next host batch ready while the current step
// runs; staging copies it into the program's input buffers, converting the dtype (uint8 images, float16
// features -> the program's float32) and applying a Rescaling fused into staging (x * scale + offset).
// A device whose backend stages asynchronously (graph::InputStaging; CUDA: two pinned host buffers and a copy stream
// per program, Compiled::staging): binding gathers the batch into the next host buffer and queues its copy, which
// waits for the compute queued so far, and the program's stream waits for the copy. fit reads the logs one step late
// there (lagged_logs.h), so the gather of batch k+1 overlaps step k. A device-resident dataset's batches are
// gathered on the device (graph::RowGather, device_staging.cpp).
// fit() only talks to this interface.
//
//   nn::HostStager stager;
//   stager.stage(std::move(x), std::move(y));     // a batch from the pipeline
//   int64_t rows = stager.bind(compiled, true);   // into the program's inputs
//   nn::HostStager::bind_rows(compiled, x, &y, perm, 0, 128);   // rows perm[0..128) of whole arrays
#pragma once
#include <memory>
#include <utility>
#include <vector>

#include "nn/compiler/programs.h"
#include "trainkit/core/device.h"

namespace tk::nn {

class BatchStager {
 public:
  virtual ~BatchStager() = default;
  // Takes ownership of the next batch (may start copying it to the device).
  virtual void stage(std::vector<Tensor> x, std::vector<Tensor> y) = 0;
  // Binds the staged batch to the program's inputs; returns its row count.
  virtual int64_t bind(Compiled& c, bool with_targets) = 0;
  virtual const std::vector<Tensor>& x() const = 0;
  virtual const std::vector<Tensor>& y() const = 0;

 protected:
  // A program input's memory, for stagers that fill it their own way.
  static graph::InputSlot input_slot(graph::Program& p, int value) { return graph::InputAccess().slot(p, value); }
  // Rows idx[0..n) (or [begin, begin + n) when idx is null) of host arrays into the program's inputs: the
  // CPU copy with dtype conversion and fused scaling. Allocates nothing.
  static void copy_rows(Compiled& c, const std::vector<Tensor>& x, const std::vector<Tensor>* y, const int64_t* idx,
                        int64_t begin, int64_t n);

 private:
  // copy_rows for a program whose backend made it an input staging (Compiled::staging): through its host buffers.
  static void stage_async(Compiled& c, const std::vector<Tensor>& x, const std::vector<Tensor>* y, const int64_t* idx,
                          int64_t begin, int64_t n);
  // copy_rows for arrays in the program's GPU memory (Dataset::on_device): gathered there (device_staging.cpp).
  static void stage_on_device(Compiled& c, const std::vector<Tensor>& x, const std::vector<Tensor>* y,
                              const int64_t* idx, int64_t begin, int64_t n);
};

// Host batches bound by copying: the CPU device.
class HostStager final : public BatchStager {
 public:
  void stage(std::vector<Tensor> x, std::vector<Tensor> y) override {
    x_ = std::move(x);
    y_ = std::move(y);
  }
  // Hands the previous batch's vectors back, so a loop reuses their capacity.
  void recycle(std::vector<Tensor>& x, std::vector<Tensor>& y) {
    std::swap(x, x_);
    std::swap(y, y_);
  }
  int64_t bind(Compiled& c, bool with_targets) override {
    const int64_t n = x_.empty() ? 0 : x_[0].dim(0);
    copy_rows(c, x_, with_targets ? &y_ : nullptr, nullptr, 0, n);
    return n;
  }
  const std::vector<Tensor>& x() const override { return x_; }
  const std::vector<Tensor>& y() const override { return y_; }
  // Binds rows of whole arrays (fit/evaluate/predict over tensors) without staging them first.
  static void bind_rows(Compiled& c, const std::vector<Tensor>& x, const std::vector<Tensor>* y, const int64_t* idx,
                        int64_t begin, int64_t n) {
    copy_rows(c, x, y, idx, begin, n);
  }

 private:
  std::vector<Tensor> x_, y_;
};

}  // namespace tk::nn
