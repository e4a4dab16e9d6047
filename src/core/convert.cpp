#include "trainkit/core/convert.h"

#include <bit>
#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "core/convert_one.h"
#include "trainkit/core/error.h"

namespace tk {
namespace {

// The element rules (float -> integer truncation and saturation, rounding to 16 bits, ...): core/convert_one.h, the
// one definition the CUDA Cast kernel compiles too.
using convert_detail::convert_one;
using convert_detail::from_float;
using convert_detail::is_float_type;
using convert_detail::to_float;

// float32 <-> bfloat16 on the bits (mixed precision casts weights and activations every step): the same
// rounding as half_detail's scalar functions, NaN included. float32 -> bfloat16 has an AVX2 path chosen at run
// time (GCC does not vectorize the narrowing loop by itself); bfloat16 -> float32 is a shift it vectorizes.
uint16_t f32_to_bf16_one(uint32_t f) {
  if ((f & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((f & 0x80000000u) ? 0xffc0u : 0x7fc0u);
  return static_cast<uint16_t>((f + 0x7fffu + ((f >> 16) & 1u)) >> 16);
}

#if defined(__x86_64__)
// 8 float32 bit patterns -> their bfloat16 bits in the low halves of 32-bit lanes. (A function with the target
// attribute, not a lambda: a lambda does not inherit it, and an unoptimized build then cannot inline the
// intrinsics.)
__attribute__((target("avx2"))) inline __m256i round8(__m256i f) {
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(f, 16), _mm256_set1_epi32(1));
  const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(f, _mm256_set1_epi32(0x7fff)), lsb), 16);
  const __m256i nan =
      _mm256_cmpgt_epi32(_mm256_and_si256(f, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
  const __m256i nan_bits =
      _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(f, 16), _mm256_set1_epi32(0x8000)), _mm256_set1_epi32(0x7fc0));
  return _mm256_blendv_epi8(r, nan_bits, nan);
}

__attribute__((target("avx2"))) size_t f32_to_bf16_avx2(const uint32_t* s, uint16_t* d, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i lo = round8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i)));
    const __m256i hi = round8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 8)));
    // packus interleaves 128-bit lanes: [lo0 hi0 lo1 hi1] -> order them [lo0 lo1 hi0 hi1]
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xD8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), packed);
  }
  return i;
}
#endif

void f32_to_bf16_loop(const float* src, bfloat16* dst, size_t n) {
  const auto* s = reinterpret_cast<const uint32_t*>(src);
  auto* d = reinterpret_cast<uint16_t*>(dst);
  size_t i = 0;
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) i = f32_to_bf16_avx2(s, d, n);
#endif
  for (; i < n; ++i) d[i] = f32_to_bf16_one(s[i]);
}
// AVX2 (with the OS saving its registers) and F16C. F16C through cpuid: clang's __builtin_cpu_supports does not
// know "f16c".
bool cpu_has_avx2_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__builtin_cpu_supports("avx2") || !__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
  return (ecx & bit_F16C) != 0;
}

// float32 <-> float16 with F16C (every AVX2 CPU has it), 8 at a time; a block holding a NaN goes through the
// scalar conversion, which keeps NumPy's payload rules (F16C would quiet a signaling NaN).
#if defined(__x86_64__)
__attribute__((target("avx2,f16c"))) size_t f32_to_f16_f16c(const float* s, uint16_t* d, size_t n) {
  const __m256i abs = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 f = _mm256_loadu_ps(s + i);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(_mm256_castps_si256(f), abs), inf);
    if (!_mm256_testz_si256(nan, nan)) {
      for (size_t j = i; j < i + 8; ++j) d[j] = float16::from_float(s[j]).bits;
      continue;
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT));
  }
  return i;
}
__attribute__((target("avx2,f16c"))) size_t f16_to_f32_f16c(const uint16_t* s, float* d, size_t n) {
  const __m128i abs = _mm_set1_epi16(0x7fff), inf = _mm_set1_epi16(0x7c00);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    const __m128i nan = _mm_cmpgt_epi16(_mm_and_si128(h, abs), inf);  // |h| > Inf as signed 16-bit: a NaN
    if (!_mm_testz_si128(nan, nan)) {
      for (size_t j = i; j < i + 8; ++j) d[j] = float16::from_bits(s[j]).to_float();
      continue;
    }
    _mm256_storeu_ps(d + i, _mm256_cvtph_ps(h));
  }
  return i;
}
#endif

void f32_to_f16_loop(const float* src, float16* dst, size_t n) {
  auto* d = reinterpret_cast<uint16_t*>(dst);
  size_t i = 0;
#if defined(__x86_64__)
  static const bool f16c = cpu_has_avx2_f16c();
  if (f16c) i = f32_to_f16_f16c(src, d, n);
#endif
  for (; i < n; ++i) d[i] = float16::from_float(src[i]).bits;
}
void f16_to_f32_loop(const float16* src, float* dst, size_t n) {
  const auto* s = reinterpret_cast<const uint16_t*>(src);
  size_t i = 0;
#if defined(__x86_64__)
  static const bool f16c = cpu_has_avx2_f16c();
  if (f16c) i = f16_to_f32_f16c(s, dst, n);
#endif
  for (; i < n; ++i) dst[i] = float16::from_bits(s[i]).to_float();
}

void bf16_to_f32_loop(const bfloat16* src, float* dst, size_t n) {
  const auto* s = reinterpret_cast<const uint16_t*>(src);
  auto* d = reinterpret_cast<uint32_t*>(dst);
  for (size_t i = 0; i < n; ++i) d[i] = static_cast<uint32_t>(s[i]) << 16;
}

template <typename S, typename D>
void loop(const void* src, void* dst, size_t n, bool scaled, float scale, float offset) {
  const auto* s = static_cast<const S*>(src);
  auto* d = static_cast<D*>(dst);
  if (!scaled) {
    if constexpr (std::is_same_v<S, float> && std::is_same_v<D, bfloat16>) return f32_to_bf16_loop(s, d, n);
    if constexpr (std::is_same_v<S, bfloat16> && std::is_same_v<D, float>) return bf16_to_f32_loop(s, d, n);
    if constexpr (std::is_same_v<S, float> && std::is_same_v<D, float16>) return f32_to_f16_loop(s, d, n);
    if constexpr (std::is_same_v<S, float16> && std::is_same_v<D, float>) return f16_to_f32_loop(s, d, n);
  }
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

// Calls f(T{}) with T the element type of `type` (float, float16, bfloat16, int32_t, int64_t, uint8_t, bool).
template <typename F>
void with_element_type(DType type, F&& f) {
  switch (type) {
    case DType::f32:
      return f(float{});
    case DType::f16:
      return f(float16{});
    case DType::bf16:
      return f(bfloat16{});
    case DType::i32:
      return f(int32_t{});
    case DType::i64:
      return f(int64_t{});
    case DType::u8:
      return f(uint8_t{});
    case DType::boolean:
      return f(bool{});
  }
}

template <typename S>
void to_any(const void* src, void* dst, DType to, size_t n, bool scaled, float scale, float offset) {
  with_element_type(to, [&](auto d) { loop<S, decltype(d)>(src, dst, n, scaled, scale, offset); });
}

void dispatch(const void* src, DType from, void* dst, DType to, size_t n, bool scaled, float scale, float offset) {
  with_element_type(from, [&](auto s) {
    if constexpr (std::is_same_v<decltype(s), bool>) {
      // Read bools as bytes (any nonzero byte is true) so foreign bytes are never undefined behaviour.
      const auto* b = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < n; ++i) {
        const uint8_t v = b[i] != 0;
        to_any<uint8_t>(&v, static_cast<char*>(dst) + i * dtype_size(to), to, 1, scaled, scale, offset);
      }
    } else {
      to_any<decltype(s)>(src, dst, to, n, scaled, scale, offset);
    }
  });
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
