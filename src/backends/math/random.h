// Counter-based randomness: a value is a pure function of (stream, index), so parallel loops, any thread count and
// any device give identical results. Dropout's masks are drawn here by the CPU kernel (backends/cpu/elementwise.cpp)
// and the CUDA kernel (backends/cuda/elementwise.cu) alike.
//
//   const uint64_t s = tk::math::dropout_stream(node_seed, step);
//   mask[i] = tk::math::dropout_value(s, tk::math::dropout_key(i, shape), rate);
#pragma once
#include <cmath>
#include <cstdint>

#include "backends/math/host_device.h"

namespace tk::math {

// SplitMix64 finalizer (Steele, Lea, Flood 2014): a bijective 64-bit mixer.
TK_HD constexpr uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [0, 1) with 24 random bits.
TK_HD float uniform01(uint64_t stream, uint64_t index) {
  return static_cast<float>(mix64(stream ^ mix64(index)) >> 40) * (1.0f / 16777216.0f);
}

// Standard normal (Box-Muller over two uniforms keyed 2 * index and 2 * index + 1; 1 - u in (0, 1] keeps the log
// finite).
TK_HD float standard_normal(uint64_t stream, uint64_t index) {
  const float u1 = 1.0f - uniform01(stream, 2 * index), u2 = uniform01(stream, 2 * index + 1);
  return sqrtf(-2.0f * logf(u1)) * cosf(6.28318530717958647692f * u2);
}

// A DropoutMask node's stream for one training step (RandomUniform's and RandomNormal's too).
TK_HD uint64_t dropout_stream(uint64_t node_seed, uint64_t step) {
  return mix64(node_seed ^ mix64(step + 0x632BE59BD9B4E019ull));
}

// The mask's layout: rows of per_row elements; spatial (SpatialDropout2D): one draw per (sample, channel) of an
// (N, H, W, C) tensor, per_sample = H * W * C. first_row: the batch's first row in the global batch (data-parallel
// replicas key by the global sample, so N replicas draw what one device would).
struct DropoutLayout {
  bool spatial;
  int64_t per_sample, channels, per_row, first_row;
};
TK_HD uint64_t dropout_key(int64_t i, const DropoutLayout& l) {
  return static_cast<uint64_t>(l.spatial ? (i / l.per_sample + l.first_row) * l.channels + i % l.channels
                                         : i + l.first_row * l.per_row);
}
// 0 with probability rate, else 1 / (1 - rate) (inverted dropout, as Keras).
TK_HD float dropout_value(uint64_t stream, uint64_t key, float rate, float keep) {
  return uniform01(stream, key) < rate ? 0.0f : keep;
}

}  // namespace tk::math
