// One training step of a DepthwiseConv2D at a MobileNetV2-like shape (batch 64, 16x16x96, 3x3, "same", stride 1):
// forward, the input and filter gradients, an MSE loss and an SGD update, timed with train_on_batch. Prints one JSON
// line (bench/depthwise_step.sh runs it beside PyTorch eager, bench/peers/torch_depthwise.py). TK_CONV=im2col times
// the direct grouped kernels (backends/cpu/conv_grouped.cpp) instead of oneDNN's grouped convolution.
//
//   OMP_NUM_THREADS=2 build/bench/tk_bench_depthwise [--steps 50] [--batch 64] [--size 16] [--channels 96]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench_common.h"
#include "trainkit/nn/layers.h"
#include "trainkit/nn/model.h"
#include "trainkit/nn/optimizers.h"

int main(int argc, char** argv) {
  using namespace tk;
  int steps = 50;
  int64_t batch = 64, size = 16, channels = 96;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const long v = std::atol(argv[i + 1]);
    if (a == "--steps") steps = static_cast<int>(v);
    if (a == "--batch") batch = v;
    if (a == "--size") size = v;
    if (a == "--channels") channels = v;
  }
  const KerasTensor in = Input({size, size, channels});
  const KerasTensor out =
      layers::DepthwiseConv2D(3, "linear", {.padding = "same", .use_bias = false, .name = "dw"})(in);
  auto model = std::make_unique<Model>(in, out);
  model->compile(optimizers::SGD({.learning_rate = 0.01f}), "mse");
  std::mt19937 gen(1);
  std::normal_distribution<float> nd;
  Tensor x = Tensor::zeros(Shape{batch, size, size, channels}), y = Tensor::zeros(Shape{batch, size, size, channels});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = nd(gen), y.data<float>()[i] = nd(gen);
  for (int i = 0; i < 5; ++i) model->train_on_batch({x}, {y});  // warm-up: primitives built, plan made
  std::vector<double> ms;
  for (int i = 0; i < steps; ++i) {
    const auto t0 = bench::Clock::now();
    model->train_on_batch({x}, {y});
    ms.push_back(1e3 * bench::seconds(t0, bench::Clock::now()));
  }
  std::sort(ms.begin(), ms.end());
  const char* conv = std::getenv("TK_CONV");
  std::printf(
      "{\"peer\":\"trainkit%s\",\"shape\":[%lld,%lld,%lld,%lld],\"kernel\":3,\"step_ms_median\":%.3f,"
      "\"step_ms_min\":%.3f,\"cpu\":\"%s\"}\n",
      conv && std::strcmp(conv, "im2col") == 0 ? " (direct grouped, TK_CONV=im2col)" : " (oneDNN grouped)",
      static_cast<long long>(batch), static_cast<long long>(size), static_cast<long long>(size),
      static_cast<long long>(channels), ms[ms.size() / 2], ms.front(), bench::cpu_description().c_str());
  return 0;
}
