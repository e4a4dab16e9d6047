// The shared batch-normalization math (src/backends/math/batchnorm.h), which the CPU kernels and the CUDA kernels
// both run, against a straightforward double-precision reference of each formula: the CPU proves the code the GPU
// runs (the op harness then compares the CUDA kernels with the CPU's on a GPU machine).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "backends/math/batchnorm.h"

namespace tk {
namespace {

// One channel's m values: x, dy, and the channel's gamma, beta, epsilon.
struct Channel {
  std::vector<float> x, dy;
  float gamma, beta, eps;
};

std::vector<Channel> channels() {
  return {
      {{0.5f, -1.25f, 2.0f, 0.75f, -0.3f, 1.1f, -2.2f},
       {0.1f, -0.4f, 0.9f, 0.3f, -1.2f, 0.05f, 0.6f},
       1.5f,
       -0.25f,
       1e-3f},
      {{100.0f, 100.5f, 99.25f, 101.0f}, {-2.0f, 1.0f, 0.5f, 0.25f}, 0.8f, 3.0f, 1e-5f},  // a large mean
      {{-0.001f, 0.002f, 0.0005f}, {1.0f, 1.0f, -1.0f}, -2.0f, 0.0f, 1e-3f},              // variance below epsilon
  };
}

// Relative to the magnitude `scale` of what was computed: a few float roundings.
void expect_near_rel(double got, double want, double scale, const char* what) {
  EXPECT_NEAR(got, want, 4e-6 * std::max(scale, 1e-30)) << what;
}

struct Stats {
  float mean, var;
};
// The drivers' passes: the sum, the mean, the centered squares, the variance (rows in order).
Stats shared_stats(const std::vector<float>& x) {
  const auto m = static_cast<int64_t>(x.size());
  double sum = 0.0;
  for (float v : x) sum += v;
  const double mean = math::bn_mean(sum, m);
  double sq = 0.0;
  for (float v : x) sq += math::bn_centered_square(v, mean);
  return {static_cast<float>(mean), math::bn_variance(sq, m)};
}

// Synchronized statistics sum the replicas' row counts in float32: whole, three counts of 9,999,999 (a global
// N * H * W past 2^24) lose their last digit; as high and low parts each sum stays exact.
TEST(BatchNormMath, RowCountsSumExactlyInFloatAsTwoParts) {
  const int64_t m = 9'999'999, replicas = 3;
  float whole = 0, high = 0, low = 0;
  for (int64_t r = 0; r < replicas; ++r) {
    whole += static_cast<float>(m);
    high += tk::math::bn_count_high(m);
    low += tk::math::bn_count_low(m);
  }
  EXPECT_NE(static_cast<int64_t>(whole), m * replicas) << "float32 alone rounds it";
  EXPECT_EQ(tk::math::bn_count(high, low), m * replicas);
  const int64_t big = (int64_t{1} << 36) - 1;
  EXPECT_EQ(tk::math::bn_count(tk::math::bn_count_high(big), tk::math::bn_count_low(big)), big);
}

TEST(BatchNormMath, StatisticsAreTheMeanAndBiasedVariance) {
  for (const Channel& ch : channels()) {
    double mean = 0.0;
    for (float v : ch.x) mean += static_cast<double>(v);
    mean /= static_cast<double>(ch.x.size());
    double var = 0.0;
    for (float v : ch.x) var += (static_cast<double>(v) - mean) * (static_cast<double>(v) - mean);
    var /= static_cast<double>(ch.x.size());
    const Stats s = shared_stats(ch.x);
    // Both rounded once from double: the float nearest the reference (within its half ulp).
    EXPECT_EQ(s.mean, static_cast<float>(mean));
    expect_near_rel(s.var, var, var, "variance");
  }
  // Known values: {1, 2, 3, 4} has mean 2.5 and biased variance 1.25.
  const Stats s = shared_stats({1.0f, 2.0f, 3.0f, 4.0f});
  EXPECT_EQ(s.mean, 2.5f);
  EXPECT_EQ(s.var, 1.25f);
}

TEST(BatchNormMath, NormalizeAndInferenceMatchTheDoubleFormulas) {
  for (const Channel& ch : channels()) {
    const Stats s = shared_stats(ch.x);
    const double invstd = 1.0 / std::sqrt(static_cast<double>(s.var) + ch.eps);
    for (size_t i = 0; i < ch.x.size(); ++i) {
      const double xhat = (static_cast<double>(ch.x[i]) - s.mean) * invstd;
      expect_near_rel(math::bn_xhat(ch.x[i], s.mean, s.var, ch.eps), xhat, std::fabs(xhat) + 1.0, "xhat");
      const double y = xhat * ch.gamma + ch.beta;
      expect_near_rel(math::bn_normalize(ch.x[i], s.mean, s.var, ch.eps, ch.gamma, ch.beta), y,
                      std::fabs(xhat * ch.gamma) + std::fabs(ch.beta), "y");
      const double dx = static_cast<double>(ch.dy[i]) * ch.gamma * invstd;
      expect_near_rel(math::bn_inference_grad(ch.dy[i], s.var, ch.gamma, ch.eps), dx, std::fabs(dx), "inference dx");
      const double term = static_cast<double>(ch.dy[i]) * xhat;
      expect_near_rel(math::bn_inference_gamma_term(ch.dy[i], ch.x[i], s.mean, s.var, ch.eps), term, std::fabs(term),
                      "inference dgamma term");
      EXPECT_EQ(math::bn_dy_xhat(ch.dy[i], 0.5f), static_cast<double>(ch.dy[i]) * 0.5);
    }
  }
}

// dx = gamma * invstd / m * (m * dy - sum(dy) - xhat * sum(dy * xhat)), from the sums the drivers accumulate.
TEST(BatchNormMath, InputGradientMatchesTheDoubleFormula) {
  for (const Channel& ch : channels()) {
    const auto m = static_cast<int64_t>(ch.x.size());
    const Stats s = shared_stats(ch.x);
    double sum_dy = 0.0, sum_dy_xhat = 0.0;  // as the drivers add them
    for (int64_t i = 0; i < m; ++i) {
      sum_dy += ch.dy[i];
      sum_dy_xhat += math::bn_dy_xhat(ch.dy[i], math::bn_xhat(ch.x[i], s.mean, s.var, ch.eps));
    }
    const double invstd = 1.0 / std::sqrt(static_cast<double>(s.var) + ch.eps);
    double ref_dy = 0.0, ref_dy_xhat = 0.0;
    for (int64_t i = 0; i < m; ++i) {
      ref_dy += ch.dy[i];
      ref_dy_xhat += ch.dy[i] * ((static_cast<double>(ch.x[i]) - s.mean) * invstd);
    }
    expect_near_rel(sum_dy_xhat, ref_dy_xhat, std::fabs(ref_dy_xhat) + 1.0, "sum(dy * xhat)");
    double dx_sum = 0.0, dx_scale = 0.0;
    for (int64_t i = 0; i < m; ++i) {
      const double xhat = (static_cast<double>(ch.x[i]) - s.mean) * invstd;
      const double k = ch.gamma * invstd / static_cast<double>(m);
      const double want = k * (static_cast<double>(m) * ch.dy[i] - ref_dy - xhat * ref_dy_xhat);
      const double scale = std::fabs(k) * (static_cast<double>(m) * std::fabs(ch.dy[i]) + std::fabs(ref_dy) +
                                           std::fabs(xhat * ref_dy_xhat));
      const float got = math::bn_input_grad(ch.dy[i], ch.x[i], s.mean, s.var, ch.eps, ch.gamma, m, sum_dy, sum_dy_xhat);
      expect_near_rel(got, want, scale, "dx");
      dx_sum += got;
      dx_scale += scale;
    }
    // The gradient through the mean: a shift of every x in the channel does not change y, so dx sums to 0.
    EXPECT_NEAR(dx_sum, 0.0, 1e-5 * dx_scale);
  }
}

TEST(BatchNormMath, MovingAverageIsKerasUpdate) {
  // moving * momentum + batch * (1 - momentum)
  for (float momentum : {0.99f, 0.9f, 0.0f, 1.0f})
    for (float moving : {0.0f, 1.0f, -3.5f})
      for (float batch : {2.0f, -0.125f}) {
        const double want = static_cast<double>(moving) * momentum + static_cast<double>(batch) * (1.0 - momentum);
        expect_near_rel(math::bn_moving(moving, batch, momentum), want, std::fabs(moving) + std::fabs(batch), "moving");
      }
  EXPECT_EQ(math::bn_moving(5.0f, 7.0f, 1.0f), 5.0f);  // momentum 1 keeps the moving value
  EXPECT_EQ(math::bn_moving(5.0f, 7.0f, 0.0f), 7.0f);  // momentum 0 takes the batch's
}

}  // namespace
}  // namespace tk
