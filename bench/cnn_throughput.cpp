// Training throughput of TensorFlow's tutorial CNN (tk::models::tutorial_cnn) on Fashion-MNIST, batch
// 128, with this machine's sgemm roofline measured in the same run. Prints one JSON line
// (bench/cnn_throughput.sh runs it beside PyTorch and Keras and prints the ratios).
//
//   ./build/bench/tk_bench_cnn [--epochs 2] [--max-steps 100] [--batch-size 128]
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "trainkit/trainkit.h"

namespace {
using Clock = std::chrono::steady_clock;
double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

double sgemm_gflops(int m, int n, int k) {
  std::vector<float> a(size_t(m) * k, 0.5f), b(size_t(k) * n, 0.25f), c(size_t(m) * n);
  const int reps = std::max(3, int(2e9 / (2.0 * m * n * k)));
  double best = 1e30;
  for (int r = 0; r < 3; ++r) {
    auto t0 = Clock::now();
    for (int i = 0; i < reps; ++i)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(),
                  n);
    best = std::min(best, seconds(t0, Clock::now()) / reps);
  }
  return 2.0 * m * n * k / best / 1e9;
}
}  // namespace

int main(int argc, char** argv) try {
  int epochs = 2;
  int64_t batch = 128, max_steps = 100;
  for (int i = 1; i + 1 < argc; ++i) {
    if (!std::strcmp(argv[i], "--epochs"))
      epochs = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--batch-size"))
      batch = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--max-steps"))
      max_steps = std::atoll(argv[++i]);
  }
  tk::utils::set_random_seed(1);
  tk::data::FashionMnist d = tk::data::load_fashion_mnist();
  auto model = tk::models::tutorial_cnn();
  model->compile(tk::optimizers::Adam(), tk::losses::SparseCategoricalCrossentropy({.from_logits = true}),
                 {"accuracy"});
  struct Timer : tk::Callback {
    Clock::time_point t0;
    std::vector<double> epoch_seconds;
    void on_epoch_begin(int, const tk::Logs&) override { t0 = Clock::now(); }
    void on_epoch_end(int, const tk::Logs&) override { epoch_seconds.push_back(seconds(t0, Clock::now())); }
  };
  auto timer = std::make_shared<Timer>();
  const int64_t steps = max_steps > 0 ? max_steps : (60000 + batch - 1) / batch;
  model->fit(d.x_train, d.y_train,
             {.batch_size = batch, .epochs = 1 + epochs, .verbose = 0, .callbacks = {timer}, .steps_per_epoch = steps});
  double total = 0;
  for (size_t e = 1; e < timer->epoch_seconds.size(); ++e) total += timer->epoch_seconds[e];
  const double samples_per_s = double(steps * batch) * epochs / total;
  // FLOPs per sample: forward + both backward GEMMs of each conv/dense (conv1's input gradient is not
  // needed: it is the first layer).
  const double conv1 = 2.0 * 784 * 25 * 32, conv2 = 2.0 * 196 * 800 * 64, fc1 = 2.0 * 3136 * 1024,
               fc2 = 2.0 * 1024 * 10;
  const double flops = 2 * conv1 + 3 * conv2 + 3 * fc1 + 3 * fc2;
  const double achieved = flops * samples_per_s / 1e9;
  const double sq1024 = sgemm_gflops(1024, 1024, 1024), conv2_gemm = sgemm_gflops(int(batch) * 196, 64, 800);
  std::printf(
      "{\"peer\":\"trainkit\",\"threads\":%d,\"batch_size\":%lld,\"steps_per_epoch\":%lld,\"samples_per_s\":%.1f,"
      "\"epoch_seconds\":[",
      omp_get_max_threads(), static_cast<long long>(batch), static_cast<long long>(steps), samples_per_s);
  for (size_t e = 1; e < timer->epoch_seconds.size(); ++e)
    std::printf("%s%.3f", e > 1 ? "," : "", timer->epoch_seconds[e]);
  std::printf(
      "],\"gflops_achieved\":%.1f,\"sgemm_gflops\":{\"1024\":%.1f,\"conv2_as_gemm\":%.1f},\"roofline_fraction\":%.3f}"
      "\n",
      achieved, sq1024, conv2_gemm, achieved / sq1024);
  return 0;
} catch (const tk::Error& e) {
  std::fprintf(stderr, "tk_bench_cnn: %s\n", e.what());
  return 1;
}
