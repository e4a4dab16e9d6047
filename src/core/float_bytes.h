// A float32, float16 or bfloat16 value read from its bytes as a float: a program's scalar output read back to the
// host (graph::Program::read_scalar) or a log value in a pinned slot (nn/training/lagged_logs.cpp).
//
//   float loss = tk::float_from_bytes(bytes, DType::bf16);   // bytes: at least dtype_size(dtype) of them
#pragma once
#include <cstdint>
#include <cstring>

#include "trainkit/core/dtype.h"
#include "trainkit/core/half.h"

namespace tk {

inline float float_from_bytes(const unsigned char* p, DType t) {
  if (t == DType::f16 || t == DType::bf16) {
    uint16_t half = 0;
    std::memcpy(&half, p, sizeof half);
    return t == DType::f16 ? float16::from_bits(half).to_float() : bfloat16::from_bits(half).to_float();
  }
  float f = 0;
  std::memcpy(&f, p, sizeof f);
  return f;
}

}  // namespace tk
