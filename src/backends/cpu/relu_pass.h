// y = relu(y) in place over n float32 or bfloat16 values, in parallel: the relu of the oneDNN paths (gemm_bf16.cpp,
// conv_onednn.cpp), which leave out oneDNN's relu post-op because it maps NaN to 0 (its vmaxps returns the zero
// operand for a NaN); here a NaN stays NaN, as math::relu and TensorFlow (docs/architecture.md, "NaN and Inf").
// In bfloat16 the relu of the rounded value equals the rounded relu: exact.
//
//   tk::cpu::relu_in_place(out, rows * n, DType::bf16);
#pragma once
#include <cstdint>

#include "backends/cpu/parallel.h"
#include "backends/math/activations.h"
#include "trainkit/core/dtype.h"
#include "trainkit/core/half.h"

namespace tk::cpu {

inline void relu_in_place(void* y, int64_t n, DType t) {
  if (t == DType::bf16) {
    auto* p = static_cast<bfloat16*>(y);
    parallel_for(n, [p](int64_t lo, int64_t hi) {
      bfloat16* __restrict out = p;
#pragma omp simd
      for (int64_t i = lo; i < hi; ++i) {  // negative or -0, and not NaN: +0
        const uint16_t v = out[i].bits;
        out[i].bits = (v & 0x8000u) && (v & 0x7fffu) <= 0x7f80u ? uint16_t{0} : v;
      }
    });
    return;
  }
  auto* p = static_cast<float*>(y);
  parallel_for(n, [p](int64_t lo, int64_t hi) {
    float* __restrict out = p;
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) out[i] = math::relu(out[i], 0.0f);
  });
}

}  // namespace tk::cpu
