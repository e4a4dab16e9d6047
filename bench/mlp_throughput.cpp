// Training throughput of the default MLP (784-256-128-10, relu, Adam, batch 128) on Fashion-MNIST, and
// this machine's sgemm roofline measured in the same run. Prints one JSON line (bench/mlp_throughput.sh
// runs it beside PyTorch and Keras and prints the ratios).
//
//   ./build/bench/tk_bench_mlp [--epochs 3] [--batch-size 128] [--dtype-policy P] [--data-dir DIR]
//   ./build/bench/tk_bench_mlp --device cuda:0      # on a GPU (tools/gpu_check.sh); no CPU roofline then
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
  int epochs = 3;
  int64_t batch = 128;
  tk::Device device = tk::Device::cpu();
  std::string data_dir;
  for (int i = 1; i + 1 < argc; ++i) {
    if (!std::strcmp(argv[i], "--device")) {
      device = tk::bench::device_arg(argv[++i]);
      continue;
    }
    if (!std::strcmp(argv[i], "--data-dir")) {
      data_dir = argv[++i];
      continue;
    }
    if (!std::strcmp(argv[i], "--epochs"))
      epochs = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--dtype-policy"))  // float32, mixed_bfloat16, mixed_float16
      tk::mixed_precision::set_global_policy(argv[++i]);
    else if (!std::strcmp(argv[i], "--batch-size"))
      batch = std::atoll(argv[++i]);
  }
  tk::utils::set_random_seed(1);
  tk::data::FashionMnist d = data_dir.empty() ? tk::data::load_fashion_mnist() : tk::data::load_fashion_mnist(data_dir);
  tk::Tensor x = d.x_train.reshape({60000, 784});
  tk::Sequential model({tk::layers::Input({784}), tk::layers::Dense(256, "relu"), tk::layers::Dense(128, "relu"),
                        tk::layers::Dense(10)});
  model.set_device(device);
  model.compile(tk::optimizers::Adam(), tk::losses::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});

  auto timer = std::make_shared<tk::bench::EpochTimer>();
  model.fit(x, d.y_train, {.batch_size = batch, .epochs = 1 + epochs, .verbose = 0, .callbacks = {timer}});
  double total = 0;
  for (size_t e = 1; e < timer->epoch_seconds.size(); ++e) total += timer->epoch_seconds[e];  // epoch 0 warms up
  const double samples_per_s = 60000.0 * epochs / total;
  tk::Logs test = model.evaluate(d.x_test.reshape({10000, 784}), d.y_test, {.batch_size = 1000});
  if (device.kind != tk::DeviceKind::cpu) {  // a GPU: the CPU's roofline says nothing about it
    std::printf(
        "{\"peer\":\"trainkit\",\"device\":\"%s\",\"dtype_policy\":\"%s\",\"batch_size\":%lld,"
        "\"samples_per_s\":%.0f,\"epoch_seconds\":[",
        device.to_string().c_str(), tk::mixed_precision::global_policy().c_str(), static_cast<long long>(batch),
        samples_per_s);
    for (size_t e = 1; e < timer->epoch_seconds.size(); ++e)
      std::printf("%s%.3f", e > 1 ? "," : "", timer->epoch_seconds[e]);
    std::printf("],\"test_accuracy\":%.4f,\"test_loss\":%.4f}\n", test.get("accuracy"), test.get("loss"));
    return 0;
  }

  // Roofline: square sgemm, and the MLP's own GEMM shapes at this batch size.
  const double sq512 = sgemm_gflops(512, 512, 512), sq1024 = sgemm_gflops(1024, 1024, 1024);
  const double mlp_fwd1 = sgemm_gflops(int(batch), 256, 784);
  const double flops_per_step = 2.0 * double(batch) * (784 * 256 + 256 * 128 + 128 * 10) * 2  // forward + dW
                                + 2.0 * double(batch) * (256 * 128 + 128 * 10);               // dX (not layer 1)
  const double achieved = flops_per_step * samples_per_s / double(batch) / 1e9;
  // Compulsory bytes per step: parameters P read forward, gradients written, Adam reading w, g, m, v and writing
  // w, m, v (9 x 4 bytes per parameter), the batch read twice (forward, first-layer dW), and each hidden/output
  // activation written forward and read backward (its gradient the same).
  const double params = 784.0 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10;
  const double bytes = 36.0 * params + 4.0 * double(batch) * (2 * 784 + 4 * (256 + 128 + 10));
  const tk::bench::Roofline roof{flops_per_step, bytes, sq1024, tk::bench::stream_triad_gbs()};
  const double step_ms = 1e3 * double(batch) / samples_per_s;
  std::printf(
      "{\"peer\":\"trainkit\",\"dtype_policy\":\"%s\",\"cpu\":\"%s\",\"threads\":%d,\"batch_size\":%lld,\"samples_per_"
      "s\":%.0f,"
      "\"roofline\":%s,\"epoch_seconds\":[",
      tk::mixed_precision::global_policy().c_str(), tk::bench::cpu_description().c_str(), omp_get_max_threads(),
      static_cast<long long>(batch), samples_per_s, roof.json(step_ms).c_str());
  for (size_t e = 1; e < timer->epoch_seconds.size(); ++e)
    std::printf("%s%.3f", e > 1 ? "," : "", timer->epoch_seconds[e]);
  std::printf(
      "],\"test_accuracy\":%.4f,\"gflops_achieved\":%.1f,\"sgemm_gflops\":{\"512\":%.1f,\"1024\":%.1f,"
      "\"mlp_128x256x784\":%.1f},\"roofline_fraction\":%.3f}\n",
      test.get("accuracy"), achieved, sq512, sq1024, mlp_fwd1, achieved / sq1024);
  return 0;
} catch (const tk::Error& e) {
  std::fprintf(stderr, "tk_bench_mlp: %s\n", e.what());
  return 1;
}
