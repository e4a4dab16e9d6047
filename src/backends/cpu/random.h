// Counter-based randomness: a value is a pure function of (stream, index), so parallel loops and any
// thread count give identical results.
#pragma once
#include <cstdint>

namespace tk::cpu {

// SplitMix64 finalizer (Steele, Lea, Flood 2014): a bijective 64-bit mixer.
constexpr uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [0, 1) with 24 random bits.
inline float uniform01(uint64_t stream, uint64_t index) {
  return static_cast<float>(mix64(stream ^ mix64(index)) >> 40) * (1.0f / 16777216.0f);
}

}  // namespace tk::cpu
