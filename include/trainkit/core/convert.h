// Element-wise dtype conversion between any two dtypes, shared by Tensor::to, the CPU Cast kernel and batch
// staging (so all three round the same way).
//
//   tk::convert_elements(src, tk::DType::u8, dst, tk::DType::f32, n);                 // 0..255 -> 0.0..255.0
//   tk::convert_elements(src, tk::DType::u8, dst, tk::DType::f16, n, 1.0f / 255);   // x * scale (+ offset)
//
// Rules: to float16/bfloat16, round to nearest even from the float32 value (NumPy's astype); float to
// integer truncates toward zero and saturates at the target's range, NaN becomes 0 (NumPy leaves these
// undefined); to bool, nonzero is true; bool to a number is 0 or 1. With scale/offset (floating targets
// only) the value is x * scale + offset computed in float32, then rounded to the target (Keras'
// Rescaling formula).
#pragma once
#include <cstddef>

#include "trainkit/core/dtype.h"

namespace tk {

void convert_elements(const void* src, DType from, void* dst, DType to, size_t n);
void convert_elements(const void* src, DType from, void* dst, DType to, size_t n, float scale, float offset = 0.0f);

}  // namespace tk
