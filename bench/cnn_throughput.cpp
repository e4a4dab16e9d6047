// Training throughput of TensorFlow's tutorial CNN (tk::models::tutorial_cnn) on Fashion-MNIST, batch
// 128, with this machine's sgemm roofline measured in the same run. Prints one JSON line
// (bench/cnn_throughput.sh runs it beside PyTorch and Keras and prints the ratios).
//
//   ./build/bench/tk_bench_cnn [--epochs 2] [--max-steps 100] [--batch-size 128] [--dtype-policy P] [--data-dir D]
//   ./build/bench/tk_bench_cnn --device cuda:0 --max-steps 0     # on a GPU (tools/gpu_check.sh); no CPU roofline
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench_common.h"
#include "trainkit/trainkit.h"

using tk::bench::Clock;
using tk::bench::seconds;
using tk::bench::sgemm_gflops;

int main(int argc, char** argv) try {
  int epochs = 2;
  int64_t batch = 128, max_steps = 100;
  tk::Device device = tk::Device::cpu();
  std::string data_dir;
  for (int i = 1; i + 1 < argc; ++i) {
    if (!std::strcmp(argv[i], "--device"))
      device = tk::bench::device_arg(argv[++i]);
    else if (!std::strcmp(argv[i], "--data-dir"))
      data_dir = argv[++i];
    else if (!std::strcmp(argv[i], "--epochs"))
      epochs = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--dtype-policy"))  // float32, mixed_bfloat16, mixed_float16
      tk::mixed_precision::set_global_policy(argv[++i]);
    else if (!std::strcmp(argv[i], "--batch-size"))
      batch = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--max-steps"))
      max_steps = std::atoll(argv[++i]);
  }
  tk::utils::set_random_seed(1);
  tk::data::FashionMnist d = data_dir.empty() ? tk::data::load_fashion_mnist() : tk::data::load_fashion_mnist(data_dir);
  auto model = tk::models::tutorial_cnn();
  model->set_device(device);
  model->compile(tk::optimizers::Adam(), tk::losses::SparseCategoricalCrossentropy({.from_logits = true}),
                 {"accuracy"});
  auto timer = std::make_shared<tk::bench::EpochTimer>();
  const int64_t steps = max_steps > 0 ? max_steps : (60000 + batch - 1) / batch;
  model->fit(d.x_train, d.y_train,
             {.batch_size = batch, .epochs = 1 + epochs, .verbose = 0, .callbacks = {timer}, .steps_per_epoch = steps});
  double total = 0;
  for (size_t e = 1; e < timer->epoch_seconds.size(); ++e) total += timer->epoch_seconds[e];
  const double samples_per_s = double(steps * batch) * epochs / total;
  if (device.kind != tk::DeviceKind::cpu) {  // a GPU: the CPU's roofline says nothing about it
    const tk::Logs test = model->evaluate(d.x_test, d.y_test, {.batch_size = 1000});
    std::printf(
        "{\"peer\":\"trainkit\",\"device\":\"%s\",\"dtype_policy\":\"%s\",\"batch_size\":%lld,"
        "\"samples_per_s\":%.0f,\"steps_per_epoch\":%lld,\"test_accuracy\":%.4f,\"test_loss\":%.4f}\n",
        device.to_string().c_str(), tk::mixed_precision::global_policy().c_str(), static_cast<long long>(batch),
        samples_per_s, static_cast<long long>(steps), test.get("accuracy"), test.get("loss"));
    return 0;
  }
  // FLOPs per sample: forward + both backward GEMMs of each conv/dense (conv1's input gradient is not
  // needed: it is the first layer).
  const double conv1 = 2.0 * 784 * 25 * 32, conv2 = 2.0 * 196 * 800 * 64, fc1 = 2.0 * 3136 * 1024,
               fc2 = 2.0 * 1024 * 10;
  const double flops = 2 * conv1 + 3 * conv2 + 3 * fc1 + 3 * fc2;
  const double achieved = flops * samples_per_s / 1e9;
  const double sq1024 = sgemm_gflops(1024, 1024, 1024), conv2_gemm = sgemm_gflops(int(batch) * 196, 64, 800);
  // Compulsory bytes per step: 36 bytes per parameter (read forward, gradient written, Adam's 4 reads and 3
  // writes), the batch read twice, and each layer's output written forward and read backward, its gradient too.
  const double params = 5.0 * 5 * 1 * 32 + 32 + 5.0 * 5 * 32 * 64 + 64 + 3136.0 * 1024 + 1024 + 1024.0 * 10 + 10;
  const double per_sample_values = 784 + 784.0 * 32 + 196.0 * 32 + 196.0 * 64 + 49.0 * 64 + 1024 + 10;
  const double bytes = 36.0 * params + 4.0 * double(batch) * (784 + 4 * per_sample_values);
  const tk::bench::Roofline roof{flops * double(batch), bytes, sq1024, tk::bench::stream_triad_gbs()};
  const double step_ms = 1e3 * double(batch) / samples_per_s;
  std::printf(
      "{\"peer\":\"trainkit\",\"dtype_policy\":\"%s\",\"cpu\":\"%s\",\"threads\":%d,\"batch_size\":%lld,\"steps_per_"
      "epoch\":%lld,"
      "\"samples_per_s\":%.1f,\"roofline\":%s,\"epoch_seconds\":[",
      tk::mixed_precision::global_policy().c_str(), tk::bench::cpu_description().c_str(), omp_get_max_threads(),
      static_cast<long long>(batch), static_cast<long long>(steps), samples_per_s, roof.json(step_ms).c_str());
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
