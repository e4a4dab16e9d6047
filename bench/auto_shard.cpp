// fit over a Dataset with an expensive map under MultiWorkerMirroredStrategy, with the dataset auto-sharded (each
// rank decodes its rows of every global batch) or not (--policy off: every rank decodes every element). Every rank
// prints one JSON line: elements its map decoded, and the epochs' mean time after a warm-up epoch.
//
//   mpirun -np 2 ./build/bench/tk_bench_auto_shard [--policy auto|off] [--rows 10240] [--epochs 2] [--work 8]
//   (--work: sin() passes over each element's 784 values, the map's cost)
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>

#include "bench_common.h"
#include "trainkit/trainkit.h"

int main(int argc, char** argv) try {
  std::string policy = "auto";
  int64_t rows = 10240;
  int epochs = 2, work = 8;
  for (int i = 1; i + 1 < argc; ++i) {
    if (!std::strcmp(argv[i], "--policy"))
      policy = argv[++i];
    else if (!std::strcmp(argv[i], "--rows"))
      rows = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--epochs"))
      epochs = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--work"))
      work = std::atoi(argv[++i]);
  }
  std::optional<tk::distribute::MultiWorkerMirroredStrategy> mpi;
  if (tk::distribute::MultiWorkerMirroredStrategy::launched_by_mpi()) mpi.emplace();
  tk::utils::set_random_seed(1);
  tk::Tensor x({rows, 784}, tk::DType::f32), y({rows}, tk::DType::i32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i % 255) / 255.0f;
  for (int64_t i = 0; i < rows; ++i) y.data<int32_t>()[i] = static_cast<int32_t>(i % 10);
  auto decoded = std::make_shared<std::atomic<int64_t>>(0);
  tk::data::Dataset d = tk::data::Dataset::from_tensor_slices({x, y})
                            .shuffle(1024, 3)
                            .map(
                                [decoded, work](tk::data::Element e) {  // the "decode": work passes over the pixels
                                  float* p = e[0].data<float>();
                                  for (int k = 0; k < work; ++k)
                                    for (int64_t i = 0; i < 784; ++i) p[i] = 0.5f * (std::sin(p[i]) + p[i]);
                                  decoded->fetch_add(1);
                                  return e;
                                },
                                {.num_parallel_calls = 1})
                            .batch(128)
                            .prefetch(2);
  if (policy == "off") d = d.with_options({.auto_shard_policy = tk::data::AutoShardPolicy::OFF});
  auto model = std::make_unique<tk::Sequential>(std::vector<tk::LayerPtr>{
      tk::layers::Input({784}), tk::layers::Dense(256, "relu"), tk::layers::Dense(128, "relu"), tk::layers::Dense(10)});
  tk::distribute::in_scope(mpi ? &*mpi : nullptr, [&] {
    model->compile(tk::optimizers::Adam(), tk::losses::SparseCategoricalCrossentropy({.from_logits = true}));
  });
  auto timer = std::make_shared<tk::bench::EpochTimer>();
  model->fit(d, {.epochs = 1 + epochs, .verbose = 0, .callbacks = {timer}});
  double total = 0;
  for (size_t e = 1; e < timer->epoch_seconds.size(); ++e) total += timer->epoch_seconds[e];  // epoch 0 warms up
  std::printf(
      "{\"policy\": \"%s\", \"processes\": %d, \"rank\": %d, \"rows\": %lld, \"decoded_per_epoch\": %lld, "
      "\"epoch_s\": %.3f}\n",
      policy.c_str(), mpi ? mpi->num_replicas_in_sync() : 1, mpi ? mpi->rank() : 0, static_cast<long long>(rows),
      static_cast<long long>(decoded->load() / (1 + epochs)), total / epochs);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "tk_bench_auto_shard: %s\n", e.what());
  return 1;
}
