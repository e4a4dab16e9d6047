// Where a batch from the input pipeline meets a program: the seam between data and device.
//
// CPU (today): the pipeline's last prefetch thread has the next host batch ready while the current step
// runs; staging copies it into the program's input buffers with dtype conversion (nn::bind_batch).
// CUDA (the CUDA backend issue): a stager per device owns pinned host buffers and the device's copy stream;
// stage() issues cudaMemcpyAsync of batch k+1 while step k runs on the compute stream, and bind() makes
// the compute stream wait on the copy's event. fit() only talks to this interface.
#pragma once
#include <memory>
#include <utility>
#include <vector>

#include "nn/training/fit_common.h"
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
    bind_batch(c, x_, with_targets ? &y_ : nullptr, nullptr, 0, n);
    return n;
  }
  const std::vector<Tensor>& x() const override { return x_; }
  const std::vector<Tensor>& y() const override { return y_; }

 private:
  std::vector<Tensor> x_, y_;
};

}  // namespace tk::nn
