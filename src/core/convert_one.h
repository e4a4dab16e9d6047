// One element converted from S to D: the rule every conversion in trainkit follows (Tensor::to, batch staging and
// the Cast op on the CPU, core/convert.cpp; the Cast op on CUDA, backends/cuda/cast.cu), written once for both
// compilers (TK_HD: host C++20 and nvcc C++17).
//
//   float32 -> 16-bit floats: round to nearest, ties to even (trainkit/core/half.h); 16-bit -> float32: exact;
//   float -> integer: truncate toward zero, saturate, NaN -> 0; integer -> float32: one rounding;
//   integer -> integer: saturate (a negative value -> 0 for uint8); anything -> bool: nonzero (floats by their
//   bits, so a denormal is true even where the FPU flushes denormals); bool -> 0 / 1.
//
//   float16 h = tk::convert_detail::convert_one<float, float16>(0.1f);
//
// S and D are float, float16, bfloat16, int32_t, int64_t, uint8_t, bool.
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backends/math/host_device.h"
#include "trainkit/core/half.h"

namespace tk::convert_detail {

template <typename T>
inline constexpr bool is_float_type =
    std::is_same_v<T, float> || std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>;

// The integer types' ranges (std::numeric_limits is not usable in device code without relaxed constexpr).
template <typename T>
struct Range;
template <>
struct Range<int32_t> {
  static constexpr int64_t lo = -2147483647 - 1, hi = 2147483647;
};
template <>
struct Range<int64_t> {
  static constexpr int64_t lo = -9223372036854775807LL - 1, hi = 9223372036854775807LL;
};
template <>
struct Range<uint8_t> {
  static constexpr int64_t lo = 0, hi = 255;
};

template <typename S>
TK_HD float to_float(S x) {
  if constexpr (std::is_same_v<S, float16> || std::is_same_v<S, bfloat16>)
    return x.to_float();
  else
    return static_cast<float>(x);
}

template <typename D>
TK_HD D from_float(float x) {
  if constexpr (std::is_same_v<D, float16> || std::is_same_v<D, bfloat16>) {
    return D::from_float(x);
  } else if constexpr (std::is_same_v<D, float>) {
    return x;
  } else if constexpr (std::is_same_v<D, bool>) {
    return x != 0.0f;
  } else {  // integers: truncate toward zero, saturate, NaN -> 0
    if (x != x) return D{0};
    const double t = trunc(static_cast<double>(x));
    if (t <= static_cast<double>(Range<D>::lo)) return static_cast<D>(Range<D>::lo);
    if (t >= static_cast<double>(Range<D>::hi)) return static_cast<D>(Range<D>::hi);
    return static_cast<D>(t);
  }
}

// Nonzero by the bits, so a denormal is true even where the FPU flushes denormals to zero (kernel threads).
template <typename S>
TK_HD bool float_is_nonzero(S x) {
  if constexpr (std::is_same_v<S, float>)
    return (half_detail::bits_of(x) & 0x7fffffffu) != 0;
  else
    return (x.bits & 0x7fffu) != 0;
}

template <typename S, typename D>
TK_HD D convert_one(S x) {
  if constexpr (std::is_same_v<S, D>) {
    return x;
  } else if constexpr (is_float_type<S> || is_float_type<D>) {
    if constexpr (std::is_same_v<D, bool>)
      return float_is_nonzero(x);
    else if constexpr (!is_float_type<S> && std::is_same_v<D, float>)
      return static_cast<float>(x);  // int -> float32: one rounding
    else
      return from_float<D>(to_float(x));
  } else if constexpr (std::is_same_v<D, bool>) {
    return x != S{0};
  } else {  // integer -> integer (int32, int64, uint8, bool as 0 / 1): saturate
    const auto w = static_cast<int64_t>(x);
    if (w < Range<D>::lo) return static_cast<D>(Range<D>::lo);
    if (w > Range<D>::hi) return static_cast<D>(Range<D>::hi);
    return static_cast<D>(x);
  }
}

}  // namespace tk::convert_detail
