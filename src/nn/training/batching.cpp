#include "nn/training/batching.h"

#include <algorithm>
#include <cstring>

#include "graph/host_threads.h"
#include "trainkit/core/convert.h"

namespace tk::nn {

void gather_rows(const Tensor& src, const int64_t* idx, int64_t begin, int64_t n, void* dst, DType dst_dtype,
                 float scale, float offset) {
  const int64_t row = src.shape().rank() > 0 && src.dim(0) > 0 ? src.numel() / src.dim(0) : 0;
  const size_t src_row = static_cast<size_t>(row) * dtype_size(src.dtype());
  const size_t dst_row = static_cast<size_t>(row) * dtype_size(dst_dtype);
  const auto* s = static_cast<const char*>(src.raw());
  auto* d = static_cast<char*>(dst);
  const bool plain = scale == 1.0f && offset == 0.0f;
  if (src.dtype() == dst_dtype && plain) {
    if (!idx) {
      std::memcpy(d, s + static_cast<size_t>(begin) * src_row, static_cast<size_t>(n) * src_row);
    } else {
      for (int64_t r = 0; r < n; ++r)
        std::memcpy(d + static_cast<size_t>(r) * dst_row, s + static_cast<size_t>(idx[r]) * src_row, src_row);
    }
    return;
  }
  // Converting (widening uint8 pixels, rounding to a mixed policy's 16 bits, scaling) is compute, not a copy: the
  // rows are split over the kernel threads, as the cast op that this replaces was.
  const DType from_dtype = src.dtype();
  graph::host_parallel_for(
      n,
      [&](int64_t lo, int64_t hi) {
        for (int64_t r = lo; r < hi; ++r) {
          const char* from = s + static_cast<size_t>(idx ? idx[r] : begin + r) * src_row;
          char* to = d + static_cast<size_t>(r) * dst_row;
          if (plain || !is_floating(dst_dtype))
            convert_elements(from, from_dtype, to, dst_dtype, static_cast<size_t>(row));
          else
            convert_elements(from, from_dtype, to, dst_dtype, static_cast<size_t>(row), scale, offset);
        }
      },
      std::max<int64_t>(1, graph::kHostParallelGrain / std::max<int64_t>(row, 1)));
}

}  // namespace tk::nn
