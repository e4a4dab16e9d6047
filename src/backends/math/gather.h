// The bounds check of Gather and GatherGrad, shared by the CPU kernels (backends/cpu/gather.cpp: one pass, start 0,
// step 1) and the CUDA check kernel (backends/cuda/tensor_ops.cu: each thread a strided share, then the smallest of
// their answers), so both name the same first bad index.
//
//   int64_t j = tk::math::first_outside(idx, count, rows, 0, 1);   // == count: every index is inside the table
#pragma once
#include <cstdint>

#include "backends/math/host_device.h"

namespace tk::math {

// The first j of start, start + step, ... below count with idx[j] outside [0, rows); count when there is none.
template <typename I>
TK_HD int64_t first_outside(const I* idx, int64_t count, int64_t rows, int64_t start, int64_t step) {
  for (int64_t j = start; j < count; j += step)
    if (idx[j] < 0 || static_cast<int64_t>(idx[j]) >= rows) return j;
  return count;
}

}  // namespace tk::math
