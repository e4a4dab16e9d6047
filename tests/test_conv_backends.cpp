// docs/benchmarks.md states that oneDNN's convolutions and the im2col + OpenBLAS ones agree to float32 rounding
// (max relative difference ~5e-6). This runs the tutorial CNN's two convolutions (5x5, 32 and 64 filters, same
// padding) both ways in one process — the kernels are swapped by re-registering them — and compares the
// forward outputs and one SGD step (lr 1: the update is the gradient, through Conv2DGradFilter of both layers
// and Conv2DGradInput of the second).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "backends/cpu/kernels.h"
#include "trainkit/trainkit.h"

namespace tk {
namespace {

struct Outputs {
  Tensor logits;
  std::vector<Tensor> before, after;
};

Outputs run_cnn(const Tensor& x, const Tensor& y) {
  utils::set_random_seed(17);
  Sequential model({layers::Input({14, 14, 3}), layers::Conv2D(32, 5, "relu", {.padding = "same"}),
                    layers::Conv2D(64, 5, "relu", {.padding = "same"}), layers::Flatten(), layers::Dense(10)});
  model.compile(optimizers::SGD({.learning_rate = 1.0f}), losses::SparseCategoricalCrossentropy({.from_logits = true}));
  Outputs o;
  o.before = model.get_weights();
  o.logits = model.predict(x, 16);
  model.train_on_batch({x}, {y});
  o.after = model.get_weights();
  return o;
}

// max |a - b| / max |b|: relative to the tensor's scale (elementwise relative errors blow up near 0).
double relative_diff(const Tensor& a, const Tensor& b) {
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    diff = std::max(diff, double(std::abs(a.data<float>()[i] - b.data<float>()[i])));
    scale = std::max(scale, double(std::abs(b.data<float>()[i])));
  }
  return scale == 0 ? diff : diff / scale;
}

Tensor update(const Tensor& before, const Tensor& after) {
  Tensor u(before.shape(), DType::f32);
  for (int64_t i = 0; i < u.numel(); ++i) u.data<float>()[i] = after.data<float>()[i] - before.data<float>()[i];
  return u;
}

TEST(ConvBackends, OneDnnAndIm2colAgreeToFloatRounding) {
  // Which kernels the process registered at start (TK_CONV=im2col keeps im2col): put oneDNN's in place.
  if (!cpu::register_onednn_conv_kernels()) GTEST_SKIP() << "oneDNN is not built in (or TK_CONV=im2col)";
  std::mt19937 gen(5);
  std::normal_distribution<float> normal;
  Tensor x(Shape({16, 14, 14, 3}), DType::f32), y(Shape({16}), DType::i32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = normal(gen);
  for (int64_t i = 0; i < 16; ++i) y.data<int32_t>()[i] = static_cast<int32_t>(i % 10);

  const Outputs onednn = run_cnn(x, y);
  cpu::register_conv_kernels();  // the im2col + OpenBLAS kernels replace oneDNN's for programs built from now
  const Outputs im2col = run_cnn(x, y);
  cpu::register_onednn_conv_kernels();  // back to the process' choice for the tests that follow,
  cpu::register_c1_conv_kernels();      // with the one-channel kernels around it
  cpu::register_c1_bf16_conv_kernels();

  for (size_t i = 0; i < onednn.before.size(); ++i)
    ASSERT_EQ(relative_diff(onednn.before[i], im2col.before[i]), 0.0) << "different initial weights";
  const double forward = relative_diff(onednn.logits, im2col.logits);
  double grads = 0;
  for (size_t i = 0; i < 4; ++i)  // conv kernel, bias, conv_1 kernel, bias
    grads = std::max(
        grads, relative_diff(update(onednn.before[i], onednn.after[i]), update(im2col.before[i], im2col.after[i])));
  std::printf("[ conv ] oneDNN vs im2col: forward %.2e, gradients %.2e (relative to the largest value)\n", forward,
              grads);
  EXPECT_GT(forward + grads, 0.0) << "identical results: are both kernels really running?";
  // docs/benchmarks.md: "agree to float32 rounding (max relative difference ~5e-6)".
  EXPECT_LE(forward, 5e-6);
  EXPECT_LE(grads, 5e-6);
}

}  // namespace
}  // namespace tk
