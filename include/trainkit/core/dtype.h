// Element types: float32, the 16-bit floats (storage types in core/half.h), and the integer types of labels
// and raw data. Which (op, dtype, device) has a kernel is the kernel registry's business (graph/kernel.h).
//
//   tk::DType t = tk::DType::f32;
//   size_t bytes = tk::dtype_size(t) * n;   // 4 * n
//   std::string s = tk::dtype_name(t);      // "float32" (Keras' spelling)
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "trainkit/core/half.h"

namespace tk {

enum class DType : uint8_t { f32, f16, bf16, i32, i64, u8, boolean };
inline constexpr int kDTypeCount = 7;

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
      return 4;
    case DType::f16:
      return 2;
    case DType::bf16:
      return 2;
    case DType::i32:
      return 4;
    case DType::i64:
      return 8;
    case DType::u8:
      return 1;
    case DType::boolean:
      return 1;
  }
  return 0;
}

// Keras / NumPy names: float32, float16, bfloat16, int32, int64, uint8, bool.
constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "float32";
    case DType::f16:
      return "float16";
    case DType::bf16:
      return "bfloat16";
    case DType::i32:
      return "int32";
    case DType::i64:
      return "int64";
    case DType::u8:
      return "uint8";
    case DType::boolean:
      return "bool";
  }
  return "?";
}

constexpr bool is_floating(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }

// Parses a Keras dtype name; throws InvalidArgument for an unknown one.
DType dtype_from_name(std::string_view name);

template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::f32;
}
template <>
constexpr DType dtype_of<float16>() {
  return DType::f16;
}
template <>
constexpr DType dtype_of<bfloat16>() {
  return DType::bf16;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::i32;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::i64;
}
template <>
constexpr DType dtype_of<uint8_t>() {
  return DType::u8;
}
template <>
constexpr DType dtype_of<bool>() {
  return DType::boolean;
}

}  // namespace tk
