#include "trainkit/core/convert.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "trainkit/core/error.h"

namespace tk {
namespace {

// Every value goes through float32 (16-bit floats, scaling) or straight to the target (integers).
template <typename S>
float to_float(S x) {
  if constexpr (std::is_same_v<S, float16> || std::is_same_v<S, bfloat16>)
    return x.to_float();
  else
    return static_cast<float>(x);
}

template <typename D>
D from_float(float x) {
  if constexpr (std::is_same_v<D, float16> || std::is_same_v<D, bfloat16>) {
    return D::from_float(x);
  } else if constexpr (std::is_same_v<D, float>) {
    return x;
  } else if constexpr (std::is_same_v<D, bool>) {
    return x != 0.0f;
  } else {  // integers: truncate toward zero, saturate, NaN -> 0
    if (std::isnan(x)) return D{0};
    const double t = std::trunc(static_cast<double>(x));
    if (t <= static_cast<double>(std::numeric_limits<D>::min())) return std::numeric_limits<D>::min();
    if (t >= static_cast<double>(std::numeric_limits<D>::max())) return std::numeric_limits<D>::max();
    return static_cast<D>(t);
  }
}

template <typename T>
constexpr bool is_float_type = std::is_same_v<T, float> || std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>;

// Nonzero by the bits, so a denormal is true even where the FPU flushes denormals to zero (kernel threads).
template <typename S>
bool float_is_nonzero(S x) {
  if constexpr (std::is_same_v<S, float>)
    return (std::bit_cast<uint32_t>(x) & 0x7fffffffu) != 0;
  else
    return (x.bits & 0x7fffu) != 0;
}

template <typename S, typename D>
D convert_one(S x) {
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
  } else {  // integer -> integer: saturate
    using W = std::conditional_t<std::is_signed_v<S> || std::is_signed_v<D>, int64_t, uint64_t>;
    const auto w = static_cast<W>(x);
    if (std::is_signed_v<S> && w < 0 && !std::is_signed_v<D>) return D{0};
    if (w > static_cast<W>(std::numeric_limits<D>::max())) return std::numeric_limits<D>::max();
    if constexpr (std::is_signed_v<D>)
      if (static_cast<int64_t>(w) < static_cast<int64_t>(std::numeric_limits<D>::min()))
        return std::numeric_limits<D>::min();
    return static_cast<D>(x);
  }
}

template <typename S, typename D>
void loop(const void* src, void* dst, size_t n, bool scaled, float scale, float offset) {
  const auto* s = static_cast<const S*>(src);
  auto* d = static_cast<D*>(dst);
  if (scaled) {
    if constexpr (is_float_type<D>) {
      for (size_t i = 0; i < n; ++i) d[i] = from_float<D>(to_float(s[i]) * scale + offset);
    }
    return;
  }
  if constexpr (std::is_same_v<S, D>) {
    std::memcpy(d, s, n * sizeof(S));
  } else {
    for (size_t i = 0; i < n; ++i) d[i] = convert_one<S, D>(s[i]);
  }
}

template <typename S>
void to_any(const void* src, void* dst, DType to, size_t n, bool scaled, float scale, float offset) {
  switch (to) {
    case DType::f32:
      return loop<S, float>(src, dst, n, scaled, scale, offset);
    case DType::f16:
      return loop<S, float16>(src, dst, n, scaled, scale, offset);
    case DType::bf16:
      return loop<S, bfloat16>(src, dst, n, scaled, scale, offset);
    case DType::i32:
      return loop<S, int32_t>(src, dst, n, scaled, scale, offset);
    case DType::i64:
      return loop<S, int64_t>(src, dst, n, scaled, scale, offset);
    case DType::u8:
      return loop<S, uint8_t>(src, dst, n, scaled, scale, offset);
    case DType::boolean:
      return loop<S, bool>(src, dst, n, scaled, scale, offset);
  }
}

void dispatch(const void* src, DType from, void* dst, DType to, size_t n, bool scaled, float scale, float offset) {
  switch (from) {
    case DType::f32:
      return to_any<float>(src, dst, to, n, scaled, scale, offset);
    case DType::f16:
      return to_any<float16>(src, dst, to, n, scaled, scale, offset);
    case DType::bf16:
      return to_any<bfloat16>(src, dst, to, n, scaled, scale, offset);
    case DType::i32:
      return to_any<int32_t>(src, dst, to, n, scaled, scale, offset);
    case DType::i64:
      return to_any<int64_t>(src, dst, to, n, scaled, scale, offset);
    case DType::u8:
      return to_any<uint8_t>(src, dst, to, n, scaled, scale, offset);
    case DType::boolean: {
      // Read bools as bytes (any nonzero byte is true) so foreign bytes are never undefined behaviour.
      const auto* b = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < n; ++i) {
        const uint8_t v = b[i] != 0;
        to_any<uint8_t>(&v, static_cast<char*>(dst) + i * dtype_size(to), to, 1, scaled, scale, offset);
      }
      return;
    }
  }
}

}  // namespace

void convert_elements(const void* src, DType from, void* dst, DType to, size_t n) {
  if (from == to) {  // a byte copy, as Tensor::clone (even for bool bytes other than 0 and 1)
    if (n) std::memcpy(dst, src, n * dtype_size(from));
    return;
  }
  dispatch(src, from, dst, to, n, false, 1.0f, 0.0f);
}

void convert_elements(const void* src, DType from, void* dst, DType to, size_t n, float scale, float offset) {
  if (!is_floating(to))
    throw InvalidArgument("scaling while converting " + std::string(dtype_name(from)) + " to " +
                          std::string(dtype_name(to)) + ": the target must be floating-point");
  if (scale == 1.0f && offset == 0.0f) return dispatch(src, from, dst, to, n, false, 1.0f, 0.0f);
  dispatch(src, from, dst, to, n, true, scale, offset);
}

}  // namespace tk
