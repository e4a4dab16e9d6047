// One training step of a 2-block transformer encoder (batch 32, T 128, d 128, 4 heads, ff 512; post-norm blocks as
// PyTorch's nn.TransformerEncoderLayer: MultiHeadAttention + Add + LayerNormalization, Dense(ff, relu) -> Dense(d) +
// Add + LayerNormalization; no dropout), an MSE loss and an SGD update, timed with train_on_batch. Prints one JSON
// line (bench/transformer_step.sh runs it beside PyTorch eager and Keras, bench/peers/*_transformer.py), with the
// step's peak memory as planned (Model::memory_plan) and as measured (the allocator's peak over the model's life).
// --batch 0: the batch Model::auto_batch_size chooses under the memory budget (TK_MEMORY_LIMIT), as fit's
// batch_size=auto (issue 32: a transformer at T = 512 under 512 MiB trains with the batch the plan chose).
//
//   OMP_NUM_THREADS=2 build/bench/tk_bench_transformer [--steps 20] [--batch 32] [--steps-t 128]
//   TK_MEMORY_LIMIT=512MiB build/bench/tk_bench_transformer --batch 0 --steps-t 512 --steps 3
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "bench_common.h"
#include "trainkit/nn/layers.h"
#include "trainkit/nn/model.h"
#include "trainkit/nn/optimizers.h"
#include "trainkit/runtime/memory.h"

int main(int argc, char** argv) {
  using namespace tk;
  int steps = 20;
  int64_t batch = 32, t = 128, d = 128, heads = 4, ff = 512;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const long v = std::atol(argv[i + 1]);
    if (a == "--steps") steps = static_cast<int>(v);
    if (a == "--batch") batch = v;
    if (a == "--steps-t") t = v;
  }
  auto make = [&] {
    const KerasTensor in = Input({t, d});
    KerasTensor x = in;
    for (int block = 0; block < 2; ++block) {
      const KerasTensor a = layers::MultiHeadAttention(heads, d / heads)({x, x});
      x = layers::LayerNormalization({.epsilon = 1e-5f})(layers::Add()({x, a}));
      const KerasTensor f = layers::Dense(d)(layers::Dense(ff, "relu")(x));
      x = layers::LayerNormalization({.epsilon = 1e-5f})(layers::Add()({x, f}));
    }
    auto m = std::make_unique<Model>(in, x);
    m->compile(optimizers::SGD({.learning_rate = 0.01f}), "mse");
    return m;
  };
  const bool auto_batch = batch == 0;
  if (auto_batch) {
    // As fit(x, y, batch_size=auto): the batch's arrays are resident when the batch is chosen (they take their share
    // of the budget), so the step then runs the very plan that was chosen (no rematerialization to squeeze it in).
    auto probe = make();
    batch = probe->auto_batch_size(FitOptions{}.auto_batch_cap, false, "--batch 0 (auto)");
    const Tensor x0 = Tensor::zeros(Shape{batch, t, d}), y0 = Tensor::zeros(Shape{batch, t, d});
    batch = probe->auto_batch_size(FitOptions{}.auto_batch_cap, true, "--batch 0 (auto)");
  }
  std::mt19937 gen(1);
  std::normal_distribution<float> nd;
  Tensor xs = Tensor::zeros(Shape{batch, t, d}), ys = Tensor::zeros(Shape{batch, t, d});
  for (int64_t i = 0; i < xs.numel(); ++i) xs.data<float>()[i] = nd(gen), ys.data<float>()[i] = nd(gen);
  const size_t baseline = config::get_memory_info().current;  // the batch's tensors are not the model's
  config::reset_peak_memory();
  bench::reset_hwm();
  const size_t rss_before = bench::status_bytes("VmRSS");
  auto model = make();
  for (int i = 0; i < 3; ++i) model->train_on_batch({xs}, {ys});  // warm-up: GEMM choices measured, plan made
  std::vector<double> ms;
  for (int i = 0; i < steps; ++i) {
    const auto t0 = bench::Clock::now();
    model->train_on_batch({xs}, {ys});
    ms.push_back(1e3 * bench::seconds(t0, bench::Clock::now()));
  }
  std::sort(ms.begin(), ms.end());
  const size_t rss_growth = bench::status_bytes("VmHWM") - rss_before;
  std::printf(
      "{\"peer\":\"trainkit\",\"shape\":[%lld,%lld,%lld],\"heads\":%lld,\"ff\":%lld,\"step_ms_median\":%.3f,"
      "\"step_ms_min\":%.3f,\"auto_batch\":%s,\"planned_bytes\":%zu,\"measured_bytes\":%zu,\"limit_bytes\":%zu,"
      "\"rss_peak_growth_bytes\":%zu,\"cpu\":\"%s\"}\n",
      static_cast<long long>(batch), static_cast<long long>(t), static_cast<long long>(d),
      static_cast<long long>(heads), static_cast<long long>(ff), ms[ms.size() / 2], ms.front(),
      auto_batch ? "true" : "false", model->memory_plan(batch).total, config::get_memory_info().peak - baseline,
      config::get_memory_info().limit, rss_growth, bench::cpu_description().c_str());
  return 0;
}
