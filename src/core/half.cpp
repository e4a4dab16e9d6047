// Bulk float16 / bfloat16 conversions (scalar loops the compiler vectorizes where it can; the rounding is
// the same as float16::from_float, so every path gives NumPy's bits).
#include "trainkit/core/half.h"

namespace tk {

void convert_f32_to_f16(const float* src, float16* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = float16::from_float(src[i]);
}
void convert_f16_to_f32(const float16* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = src[i].to_float();
}
void convert_f32_to_bf16(const float* src, bfloat16* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = bfloat16::from_float(src[i]);
}
void convert_bf16_to_f32(const bfloat16* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = src[i].to_float();
}

}  // namespace tk
