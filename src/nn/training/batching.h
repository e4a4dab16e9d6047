// Copies samples into a program's input buffers, converting dtypes; allocates nothing.
#pragma once
#include <cstdint>

#include "trainkit/core/tensor.h"

namespace tk::nn {

// dst(n, ...) = src[rows], rows = idx[0..n) or, when idx is null, [begin, begin + n).
void gather_rows(const Tensor& src, const int64_t* idx, int64_t begin, int64_t n, void* dst, DType dst_dtype);

}  // namespace tk::nn
