// The general Binary and Compare ops' functions (graph/tensor_fns.h: BinaryFn), per element: one definition the CPU
// (backends/cpu/broadcast.cpp) and CUDA (backends/cuda/tensor_ops.cu) kernels both run, for float32 (16-bit dtypes
// widen to it) and for int32/int64.
//
//   float y = tk::math::arithmetic<tk::graph::BinaryFn::maximum>(a, b);   // NaN if either is NaN
//   int32_t q = tk::math::arithmetic<tk::graph::BinaryFn::floor_divide>(-7, 2);   // -4, as Python's -7 // 2
//   bool c = tk::math::comparison<tk::graph::BinaryFn::less>(a, b);
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backends/math/host_device.h"
#include "graph/tensor_fns.h"

namespace tk::math {

// floor_divide is floor(a / b) and mod a - floor(a / b) * b computed as TensorFlow's FloorMod (fmod, then the
// divisor's sign): x // 0 is +-inf (NaN for 0 // 0) and x % 0 NaN, as NumPy and TensorFlow.
template <graph::BinaryFn F>
TK_HD float arithmetic(float a, float b) {
  using graph::BinaryFn;
  if constexpr (F == BinaryFn::add) return a + b;
  if constexpr (F == BinaryFn::subtract) return a - b;
  if constexpr (F == BinaryFn::multiply) return a * b;
  if constexpr (F == BinaryFn::divide) return a / b;
  if constexpr (F == BinaryFn::maximum) return a != a ? a : b != b ? b : a >= b ? a : b;
  if constexpr (F == BinaryFn::minimum) return a != a ? a : b != b ? b : a <= b ? a : b;
  if constexpr (F == BinaryFn::power) return powf(a, b);
  if constexpr (F == BinaryFn::squared_difference) return (a - b) * (a - b);
  if constexpr (F == BinaryFn::floor_divide) return floorf(a / b);
  if constexpr (F == BinaryFn::mod) {
    const float m = fmodf(a, b);
    return m != 0.0f && ((b < 0.0f) != (m < 0.0f)) ? m + b : m;
  }
  return a;
}

// Integers (int32, int64) as NumPy and TensorFlow compute them: add, subtract, multiply, squared_difference and power
// wrap around on overflow (two's complement; computed in the unsigned type, where C++ defines it); floor_divide and
// mod round toward negative infinity (Python's // and %; MIN // -1 wraps to MIN, MIN % -1 is 0). A divisor of 0 and
// a negative exponent are errors the kernels raise before computing (integer_operand_error below); here they give 0.
// There is no integer divide: Keras' true division of integers returns floats (the dtype rule says so).
template <typename T>
TK_HD T wrap_add(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
}
template <typename T>
TK_HD T wrap_sub(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) - static_cast<U>(b));
}
template <typename T>
TK_HD T wrap_mul(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
}

template <graph::BinaryFn F, typename T, typename = std::enable_if_t<std::is_integral_v<T>>>
TK_HD T arithmetic(T a, T b) {
  using graph::BinaryFn;
  if constexpr (F == BinaryFn::add) return wrap_add(a, b);
  if constexpr (F == BinaryFn::subtract) return wrap_sub(a, b);
  if constexpr (F == BinaryFn::multiply) return wrap_mul(a, b);
  if constexpr (F == BinaryFn::maximum) return a >= b ? a : b;
  if constexpr (F == BinaryFn::minimum) return a <= b ? a : b;
  if constexpr (F == BinaryFn::squared_difference) return wrap_mul(wrap_sub(a, b), wrap_sub(a, b));
  if constexpr (F == BinaryFn::power) {  // by squaring, wrapping as repeated multiplication does
    T r = 1, base = a;
    for (T e = b < 0 ? T(0) : b; e > 0; e >>= 1) {
      if (e & 1) r = wrap_mul(r, base);
      base = wrap_mul(base, base);
    }
    return r;
  }
  if constexpr (F == BinaryFn::floor_divide) {
    if (b == 0) return 0;
    if (b == -1) return wrap_sub(T(0), a);
    const T q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
  }
  if constexpr (F == BinaryFn::mod) {
    if (b == 0 || b == -1) return 0;
    const T r = a % b;
    return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
  }
  return a;
}

// Whether the second operand `b` makes F an error on integers: a divisor of 0 (floor_divide, mod; TensorFlow's
// "Integer division by zero") or a negative exponent (power; "Integers to negative integer powers are not allowed").
template <typename T>
TK_HD bool bad_integer_operand(graph::BinaryFn f, T b) {
  using graph::BinaryFn;
  return ((f == BinaryFn::floor_divide || f == BinaryFn::mod) && b == 0) || (f == BinaryFn::power && b < 0);
}
// The first position j = start, start + step, ... < count of b[] that bad_integer_operand names, else count. Every
// element of a broadcast operand meets at least one output element (when there is one), so scanning b's own elements
// finds exactly the bad ones.
template <typename T>
TK_HD int64_t first_bad_operand(graph::BinaryFn f, const T* b, int64_t count, int64_t start, int64_t step) {
  for (int64_t j = start; j < count; j += step)
    if (bad_integer_operand(f, b[j])) return j;
  return count;
}

template <graph::BinaryFn F, typename T>
TK_HD bool comparison(T a, T b) {
  using graph::BinaryFn;
  if constexpr (F == BinaryFn::equal) return a == b;
  if constexpr (F == BinaryFn::not_equal) return a != b;
  if constexpr (F == BinaryFn::less) return a < b;
  if constexpr (F == BinaryFn::less_equal) return a <= b;
  if constexpr (F == BinaryFn::greater) return a > b;
  if constexpr (F == BinaryFn::greater_equal) return a >= b;
  return false;
}

}  // namespace tk::math
