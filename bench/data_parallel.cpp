// Training throughput of the default MLP or the tutorial CNN in one process, or data parallel over MPI ranks
// (MultiWorkerMirroredStrategy, automatic under mpirun). Rank 0 prints one JSON line with the global samples/s
// (bench/data_parallel.sh runs it beside PyTorch DDP).
//
//   ./build/bench/tk_bench_data_parallel --model mlp|cnn [--epochs 3] [--max-steps 0]
//   mpirun -np 2 ./build/bench/tk_bench_data_parallel --model cnn --max-steps 100
#include <omp.h>

#include <cstdio>
#include <cstring>
#include <optional>
#include <string>

#include "bench_common.h"
#include "trainkit/trainkit.h"

int main(int argc, char** argv) try {
  std::string model_name = "mlp";
  int epochs = 3;
  int64_t max_steps = 0, batch = 128;
  for (int i = 1; i + 1 < argc; ++i) {
    if (!std::strcmp(argv[i], "--model"))
      model_name = argv[++i];
    else if (!std::strcmp(argv[i], "--epochs"))
      epochs = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--max-steps"))
      max_steps = std::atoll(argv[++i]);
  }
  std::optional<tk::distribute::MultiWorkerMirroredStrategy> mpi;
  if (tk::distribute::MultiWorkerMirroredStrategy::launched_by_mpi()) mpi.emplace();
  tk::utils::set_random_seed(1);
  tk::data::FashionMnist d =
      tk::data::load_fashion_mnist(tk::data::default_fashion_mnist_dir(), /*scale_to_float=*/false);  // uint8
  int64_t n = 60000;
  if (max_steps > 0) n = std::min(n, max_steps * batch);
  tk::Tensor x = d.x_train.slice_rows(0, n), y = d.y_train.slice_rows(0, n);
  std::unique_ptr<tk::Model> model;
  if (model_name == "cnn") {
    model = tk::models::tutorial_cnn({28, 28}, 10, 1.0f / 255);
  } else {
    x = x.reshape({n, 784});
    model = std::make_unique<tk::Sequential>(std::vector<tk::LayerPtr>{
        tk::layers::Input({784}), tk::layers::Rescaling(1.0f / 255), tk::layers::Dense(256, "relu"),
        tk::layers::Dense(128, "relu"), tk::layers::Dense(10)});
  }
  tk::distribute::in_scope(mpi ? &*mpi : nullptr, [&] {
    model->compile(tk::optimizers::Adam(), tk::losses::SparseCategoricalCrossentropy({.from_logits = true}));
  });
  auto timer = std::make_shared<tk::bench::EpochTimer>();
  model->fit(x, y, {.batch_size = batch, .epochs = 1 + epochs, .verbose = 0, .callbacks = {timer}});
  double total = 0;
  for (size_t e = 1; e < timer->epoch_seconds.size(); ++e) total += timer->epoch_seconds[e];  // epoch 0 warms up
  if (!model->is_chief()) return 0;
  const int procs = mpi ? mpi->num_replicas_in_sync() : 1;
  std::printf(
      "{\"peer\": \"trainkit\", \"model\": \"%s\", \"processes\": %d, \"threads\": %d, \"batch_size\": %lld, "
      "\"samples_per_s\": %.1f}\n",
      model_name.c_str(), procs, omp_get_max_threads(), static_cast<long long>(batch), double(n) * epochs / total);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "tk_bench_data_parallel: %s\n", e.what());
  return 1;
}
