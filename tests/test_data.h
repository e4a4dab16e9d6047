// Small synthetic data and build facts the unit tests share.
//
//   tk::Tensor x = tk::testing::uniform({100, 8}, /*seed=*/1);         // float32 in [-1, 1)
//   tk::Tensor y = tk::testing::int_labels(100, /*classes=*/3, /*seed=*/2);
//   tk::Tensor z = tk::testing::lcg_tensor({32, 784}, 7);              // float32 in [-0.5, 0.5), no <random>
//   if (tk::testing::kAsan) GTEST_SKIP() << "resident size includes ASan's shadow memory";
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "trainkit/core/tensor.h"

namespace tk::testing {

// Under AddressSanitizer the resident size counts its shadow memory and quarantine too.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAsan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kAsan = true;
#else
inline constexpr bool kAsan = false;
#endif
#else
inline constexpr bool kAsan = false;
#endif

// float32, uniform in [-1, 1) from std::mt19937(seed).
inline Tensor uniform(Shape shape, uint32_t seed) {
  Tensor t(std::move(shape), DType::f32);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

// int32 labels in [0, classes) from std::mt19937(seed).
inline Tensor int_labels(int64_t n, int classes, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(classes));
  return Tensor::from_vector<int32_t>(Shape{n}, v);
}

// float32 in [-0.5, 0.5) from a linear congruential generator: no library code runs (the allocation tests
// count every malloc).
inline Tensor lcg_tensor(Shape s, uint32_t seed) {
  Tensor t(s, DType::f32);
  uint32_t state = seed;
  for (int64_t i = 0; i < t.numel(); ++i) {
    state = state * 1664525u + 1013904223u;
    t.data<float>()[i] = static_cast<float>(state >> 8) / 16777216.0f - 0.5f;
  }
  return t;
}

}  // namespace tk::testing
