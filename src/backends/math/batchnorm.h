// Batch normalization's math, per element and per channel: the one definition the CPU kernels
// (backends/cpu/batchnorm.cpp) and the CUDA kernels (backends/cuda/batchnorm.cu) both run. x is viewed as (M, C),
// channels last; stats(2, C) = [mean; biased variance]; the per-channel sums are in double (each driver adds them in
// its own fixed order: the CPU in row order, CUDA in fixed chunks of rows, then the chunks in order).
//
//   double sum = 0;  for (i < m) sum += x[i * c + j];           // pass 1: the mean
//   const double mean = tk::math::bn_mean(sum, m);
//   double sq = 0;   for (i < m) sq += tk::math::bn_centered_square(x[i * c + j], mean);
//   stats[j] = float(mean), stats[c + j] = tk::math::bn_variance(sq, m);
//   y = tk::math::bn_normalize(x, stats[j], stats[c + j], eps, gamma[j], beta[j]);
#pragma once
#include <cmath>
#include <cstdint>

#include "backends/math/host_device.h"

namespace tk::math {

// The batch mean from the sum of a channel's m values.
TK_HD double bn_mean(double sum, int64_t m) { return sum / static_cast<double>(m); }
// (x - mean)^2, in double: the terms of the variance's second pass.
TK_HD double bn_centered_square(float x, double mean) {
  const double d = x - mean;
  return d * d;
}
// The biased variance from the sum of the centered squares of a channel's m values.
TK_HD float bn_variance(double sum_squares, int64_t m) {
  return static_cast<float>(sum_squares / static_cast<double>(m));
}

// Synchronized BatchNormalization sums each replica's row count with the per-channel sums, in float32, which holds
// integers exactly only to 2^24 (a global N * H * W can pass that): the count goes as two parts, count / 4096 and
// count % 4096, each summed exactly while the global count stays below 2^36 and the replicas below 4096.
inline constexpr int64_t kBnCountSplit = 4096;
TK_HD float bn_count_high(int64_t m) { return static_cast<float>(m / kBnCountSplit); }
TK_HD float bn_count_low(int64_t m) { return static_cast<float>(m % kBnCountSplit); }
TK_HD int64_t bn_count(float high, float low) {
  return static_cast<int64_t>(high) * kBnCountSplit + static_cast<int64_t>(low);
}

// xhat = (x - mean) / sqrt(var + eps)
TK_HD float bn_xhat(float x, float mean, float var, float eps) { return (x - mean) / sqrtf(var + eps); }
// y = gamma * xhat + beta (BnApply with the batch's stats, BnInference with the moving ones)
TK_HD float bn_normalize(float x, float mean, float var, float eps, float gamma, float beta) {
  return bn_xhat(x, mean, var, eps) * gamma + beta;
}

// dy * xhat in double: the terms of sum(dy * xhat), the gamma gradient (sum(dy) adds dy itself).
TK_HD double bn_dy_xhat(float dy, float xhat) { return static_cast<double>(dy) * xhat; }
// The input gradient through the batch statistics, from the channel's sums over its m values:
// dx = gamma * invstd / m * (m * dy - sum(dy) - xhat * sum(dy * xhat)), invstd = 1 / sqrt(var + eps).
TK_HD float bn_input_grad(float dy, float x, float mean, float var, float eps, float gamma, int64_t m, double sum_dy,
                          double sum_dy_xhat) {
  const float invstd = 1.0f / sqrtf(var + eps), fm = static_cast<float>(m);
  const float xhat = (x - mean) * invstd;
  return gamma * invstd / fm * (fm * dy - static_cast<float>(sum_dy) - xhat * static_cast<float>(sum_dy_xhat));
}

// Inference (the moving statistics are constants): dx = dy * gamma / sqrt(moving_variance + eps)
TK_HD float bn_inference_grad(float dy, float var, float gamma, float eps) { return dy * gamma / sqrtf(var + eps); }
// and the terms of dgamma = sum(dy * (x - moving_mean) / sqrt(moving_variance + eps))
TK_HD float bn_inference_gamma_term(float dy, float x, float mean, float var, float eps) {
  return dy * (x - mean) / sqrtf(var + eps);
}

// moving = moving * momentum + batch * (1 - momentum), for the mean and the biased variance (Keras 3).
TK_HD float bn_moving(float moving, float batch, float momentum) {
  return moving * momentum + batch * (1.0f - momentum);
}

}  // namespace tk::math
