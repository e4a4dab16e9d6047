// Training throughput next to busy processes: the default MLP (784-256-128-10) or the tutorial CNN on
// Fashion-MNIST, a fixed number of steps per epoch, 1 warm-up epoch then timed ones. Prints one JSON line;
// bench/contention.sh runs it alone and next to one and two single-threaded spin loops and prints the ratios.
//
//   ./build/bench/tk_bench_contention --model mlp|cnn [--epochs 3] [--steps 100]
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "backends/cpu/threads.h"
#include "bench_common.h"
#include "trainkit/trainkit.h"

int main(int argc, char** argv) try {
  std::string which = "mlp";
  int epochs = 3;
  int64_t steps = 100, batch = 128;
  for (int i = 1; i + 1 < argc; ++i) {
    if (!std::strcmp(argv[i], "--model"))
      which = argv[++i];
    else if (!std::strcmp(argv[i], "--epochs"))
      epochs = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--steps"))
      steps = std::atoll(argv[++i]);
  }
  tk::utils::set_random_seed(1);
  tk::data::FashionMnist d = tk::data::load_fashion_mnist();
  std::unique_ptr<tk::Sequential> model;
  tk::Tensor x = d.x_train;
  if (which == "cnn") {
    model = tk::models::tutorial_cnn();
  } else {
    x = d.x_train.reshape({60000, 784});
    model = std::make_unique<tk::Sequential>(
        std::vector<tk::LayerPtr>{tk::layers::Input({784}), tk::layers::Dense(256, "relu"),
                                  tk::layers::Dense(128, "relu"), tk::layers::Dense(10)});
  }
  model->compile(tk::optimizers::Adam(), tk::losses::SparseCategoricalCrossentropy({.from_logits = true}),
                 {"accuracy"});
  auto timer = std::make_shared<tk::bench::EpochTimer>();
  const int max_threads = omp_get_max_threads();
  model->fit(x, d.y_train,
             {.batch_size = batch, .epochs = 1 + epochs, .verbose = 0, .callbacks = {timer}, .steps_per_epoch = steps});
  double total = 0;
  for (size_t e = 1; e < timer->epoch_seconds.size(); ++e) total += timer->epoch_seconds[e];
  std::printf("{\"model\":\"%s\",\"max_threads\":%d,\"threads_at_end\":%d,\"samples_per_s\":%.0f,\"epoch_s\":%.3f}\n",
              which.c_str(), max_threads, tk::cpu::adapted_threads(), double(steps * batch) * epochs / total,
              total / epochs);
  return 0;
} catch (const tk::Error& e) {
  std::fprintf(stderr, "tk_bench_contention: %s\n", e.what());
  return 1;
}
