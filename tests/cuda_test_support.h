// What the GPU tests share (test_cuda_fit.cpp, test_cuda_staging.cpp, test_cuda_graphs.cpp, test_cudnn_gpu.cpp): the
// skip without a device, their random inputs, and the per-tensor comparison of trained weights.
//
//   TEST(CudaX, Y) { SKIP_WITHOUT_GPU(); ... EXPECT_LE(tk::testing::worst_relative(gpu, cpu), 1e-4); }
#pragma once
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "runtime/cuda_device.h"
#include "trainkit/core/tensor.h"

#define SKIP_WITHOUT_GPU()                                                      \
  do {                                                                          \
    if (tk::runtime::cuda_devices().devices.empty())                            \
      GTEST_SKIP() << "no CUDA device: " << tk::runtime::cuda_devices().reason; \
  } while (0)

namespace tk::testing {

// A float32 tensor uniform in [-1, 1) drawn from mt19937(seed): the GPU tests' features.
inline Tensor uniform(Shape shape, uint32_t seed) {
  Tensor t(std::move(shape), DType::f32);
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(gen);
  return t;
}

// Largest |a - b| over the largest |b|, per tensor; the worst tensor.
inline double worst_relative(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  double w = 0;
  for (size_t t = 0; t < b.size(); ++t) {
    double d = 0, m = 1e-30;
    for (int64_t i = 0; i < b[t].numel(); ++i) {
      d = std::max(d, double(std::fabs(a[t].data<float>()[i] - b[t].data<float>()[i])));
      m = std::max(m, double(std::fabs(b[t].data<float>()[i])));
    }
    w = std::max(w, d / m);
  }
  return w;
}

}  // namespace tk::testing
