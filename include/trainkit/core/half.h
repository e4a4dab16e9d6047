// 16-bit floating-point storage types and their conversions to and from float32.
//
//   tk::float16 h = tk::float16::from_float(0.1f);   // round-to-nearest-even, as NumPy's astype(float16)
//   float back = h.to_float();                        // exact (every float16 is a float32)
//   tk::bfloat16 b = tk::bfloat16::from_float(3.14159f);
//   tk::convert_f32_to_f16(src, dst, n);              // bulk, the same rounding
//
// float16 is IEEE 754 binary16 (1 sign, 5 exponent, 10 mantissa bits); bfloat16 is the top half of a
// float32 (1, 8, 7). Conversions from float32 round to nearest, ties to even; overflow becomes Inf; NaN
// stays NaN with its sign (float16 keeps the top payload bits as NumPy does; bfloat16 becomes the quiet
// NaN 0x7fc0 / 0xffc0 as ml_dtypes does); Inf stays Inf. Both widen to float32 exactly.
//
// The conversions are also compiled by nvcc (C++17), for the CUDA kernels: the same code on both backends
// (backends/cuda/cast.cu). There they are __host__ __device__ functions; the host compiler (C++20) keeps them
// constexpr.
#pragma once
#include <cstddef>
#include <cstdint>
#if defined(__CUDACC__)
#include <cstring>
#define TK_HALF_FN __host__ __device__ inline
#else
#include <bit>
#define TK_HALF_FN constexpr
#endif

namespace tk {

namespace half_detail {

TK_HALF_FN uint32_t bits_of(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#elif defined(__CUDACC__)
  uint32_t u = 0;
  std::memcpy(&u, &f, sizeof u);
  return u;
#else
  return std::bit_cast<uint32_t>(f);
#endif
}
TK_HALF_FN float float_of(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#elif defined(__CUDACC__)
  float f = 0;
  std::memcpy(&f, &u, sizeof f);
  return f;
#else
  return std::bit_cast<float>(u);
#endif
}

TK_HALF_FN uint16_t f32_to_f16_bits(float value) {
  uint32_t f = bits_of(value);
  const uint32_t sign = (f >> 16) & 0x8000u;
  f &= 0x7fffffffu;
  if (f >= 0x7f800000u) {  // Inf or NaN
    if (f == 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u);
    uint32_t h = 0x7c00u + ((f & 0x007fffffu) >> 13);  // NumPy: keep the payload's top bits
    if (h == 0x7c00u) ++h;                             // ... but never turn a NaN into Inf
    return static_cast<uint16_t>(sign | h);
  }
  if (f >= 0x47800000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65536: Inf
  if (f < 0x38800000u) {  // below 2^-14: float16 subnormal or zero; round at 2^-24 by hand
    if (f < 0x33000000u) return static_cast<uint16_t>(sign);    // < 2^-25: rounds to zero
    const uint32_t exponent = f >> 23;                          // 102 .. 112
    const uint32_t mantissa = (f & 0x007fffffu) | 0x00800000u;  // implicit one
    const uint32_t shift = 126u - exponent;                     // bits dropped: 14 .. 24
    uint32_t h = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1u), halfway = 1u << (shift - 1u);
    if (rest > halfway || (rest == halfway && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  // Normal: re-bias the exponent (127 -> 15) and round the 13 dropped mantissa bits to nearest even; a
  // carry out of the mantissa correctly bumps the exponent (up to Inf at 65520).
  const uint32_t odd = (f >> 13) & 1u;
  f += 0xc8000000u + 0x0fffu + odd;
  return static_cast<uint16_t>(sign | (f >> 13));
}

TK_HALF_FN float f16_bits_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  if (exponent == 0x1fu) return float_of(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0) return float_of(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  if (mantissa == 0) return float_of(sign);
  // Subnormal: mantissa * 2^-24, normal in float32. Normalize by hand (no FPU: exact under FTZ/DAZ too).
  uint32_t m = mantissa;
  uint32_t e = 113;  // exponent of 2^-14 in float32
  while (!(m & 0x400u)) {
    m <<= 1;
    --e;
  }
  return float_of(sign | (e << 23) | ((m & 0x3ffu) << 13));
}

TK_HALF_FN uint16_t f32_to_bf16_bits(float value) {
  const uint32_t f = bits_of(value);
  if ((f & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((f & 0x80000000u) ? 0xffc0u : 0x7fc0u);
  const uint32_t rounding = 0x7fffu + ((f >> 16) & 1u);  // ties to even; overflow carries into Inf
  return static_cast<uint16_t>((f + rounding) >> 16);
}

TK_HALF_FN float bf16_bits_to_f32(uint16_t b) { return float_of(static_cast<uint32_t>(b) << 16); }

}  // namespace half_detail

struct float16 {
  uint16_t bits = 0;
  TK_HALF_FN static float16 from_bits(uint16_t b) { return float16{b}; }
  TK_HALF_FN static float16 from_float(float f) { return float16{half_detail::f32_to_f16_bits(f)}; }
  TK_HALF_FN float to_float() const { return half_detail::f16_bits_to_f32(bits); }
  TK_HALF_FN bool operator==(const float16& o) const { return bits == o.bits; }
};

struct bfloat16 {
  uint16_t bits = 0;
  TK_HALF_FN static bfloat16 from_bits(uint16_t b) { return bfloat16{b}; }
  TK_HALF_FN static bfloat16 from_float(float f) { return bfloat16{half_detail::f32_to_bf16_bits(f)}; }
  TK_HALF_FN float to_float() const { return half_detail::bf16_bits_to_f32(bits); }
  TK_HALF_FN bool operator==(const bfloat16& o) const { return bits == o.bits; }
};
static_assert(sizeof(float16) == 2 && sizeof(bfloat16) == 2);

// Whether a value is > 0 (+Inf is, NaN and -0 are not), from its bits alone: no branch and no conversion, so
// elementwise loops over it (relu's gradient mask) vectorize. The positive values are the bits 1 .. +Inf.
TK_HALF_FN bool positive(float16 h) { return static_cast<uint16_t>(h.bits - 1u) < 0x7c00u; }
TK_HALF_FN bool positive(bfloat16 h) { return static_cast<uint16_t>(h.bits - 1u) < 0x7f80u; }
// All ones where positive(h), else zero: value.bits & positive_mask(h) keeps value where h > 0.
template <typename Half>
TK_HALF_FN uint16_t positive_mask(Half h) {
  return static_cast<uint16_t>(0u - static_cast<unsigned>(positive(h)));
}

// Bulk conversions (n elements; src and dst may not overlap).
void convert_f32_to_f16(const float* src, float16* dst, size_t n);
void convert_f16_to_f32(const float16* src, float* dst, size_t n);
void convert_f32_to_bf16(const float* src, bfloat16* dst, size_t n);
void convert_bf16_to_f32(const bfloat16* src, float* dst, size_t n);

}  // namespace tk
