// Copies samples into a program input on the host, converting dtypes; allocates nothing.
#pragma once
#include <cstdint>

#include "trainkit/core/tensor.h"

namespace tk::nn {

// dst(n, ...) = src[rows] * scale + offset in dst_dtype, rows = idx[0..n) or, when idx is null,
// [begin, begin + n). scale/offset apply only to a floating dst_dtype (1 and 0 otherwise).
void gather_rows(const Tensor& src, const int64_t* idx, int64_t begin, int64_t n, void* dst, DType dst_dtype,
                 float scale = 1.0f, float offset = 0.0f);

}  // namespace tk::nn
