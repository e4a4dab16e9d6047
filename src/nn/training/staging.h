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
// fit, evaluate and predict bind every batch through BatchStager::bind_rows:
//
//   nn::BatchStager::bind_rows(compiled, x, &y, perm, 0, 128);   // rows perm[0..128) of x, y into the inputs
#pragma once
#include <vector>

#include "nn/compiler/programs.h"
#include "trainkit/core/device.h"

namespace tk::nn {

class BatchStager {
 public:
  // Rows idx[0..n) (or [begin, begin + n) when idx is null) of x, y (y null: inputs only) into the program's
  // inputs: from host arrays, the CPU copy with dtype conversion and fused scaling. Allocates nothing.
  static void bind_rows(Compiled& c, const std::vector<Tensor>& x, const std::vector<Tensor>* y, const int64_t* idx,
                        int64_t begin, int64_t n);

 protected:
  // A program input's memory, for stagers that fill it their own way.
  static graph::InputSlot input_slot(graph::Program& p, int value) { return graph::InputAccess().slot(p, value); }

 private:
  // bind_rows for a program whose backend made it an input staging (Compiled::staging): through its host buffers.
  static void stage_async(Compiled& c, const std::vector<Tensor>& x, const std::vector<Tensor>* y, const int64_t* idx,
                          int64_t begin, int64_t n);
  // bind_rows for arrays in the program's GPU memory (Dataset::on_device): gathered there (device_staging.cpp).
  static void stage_on_device(Compiled& c, const std::vector<Tensor>& x, const std::vector<Tensor>* y,
                              const int64_t* idx, int64_t begin, int64_t n);
  // f(slot, src, region, scale) for each x input an output needs (region i), then, when y is given, each y (region
  // c.x.size() + j, no scaling): the order every path binds in.
  template <typename F>
  static void for_each_input(Compiled& c, const std::vector<Tensor>& x, const std::vector<Tensor>* y, F&& f) {
    graph::Program& p = *c.program;
    const graph::InputAccess access;
    for (size_t i = 0; i < c.x.size(); ++i)
      if (p.plan().offset[static_cast<size_t>(c.x[i])] >= 0) f(access.slot(p, c.x[i]), x[i], i, c.x_scale[i]);
    if (y)
      for (size_t j = 0; j < c.y.size(); ++j) f(access.slot(p, c.y[j]), (*y)[j], c.x.size() + j, StageScale{});
  }
};

}  // namespace tk::nn
