// One training step of the issue-32 bidirectional-LSTM classifier (batch 64, T 80, Embedding(10000, 128),
// Bidirectional(LSTM(64)), Dense(2), sparse categorical crossentropy, Adam), timed with train_on_batch. Prints one
// JSON line (bench/bilstm_step.sh runs it beside PyTorch eager nn.LSTM and Keras 3, bench/peers/*_bilstm.py).
//
//   OMP_NUM_THREADS=2 build/bench/tk_bench_bilstm [--steps 20] [--batch 64] [--steps-t 80] [--units 64]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "bench_common.h"
#include "trainkit/nn/layers.h"
#include "trainkit/nn/model.h"
#include "trainkit/nn/optimizers.h"

int main(int argc, char** argv) {
  using namespace tk;
  int steps = 20;
  int64_t batch = 64, t = 80, units = 64, embed = 128, vocab = 10000;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const long v = std::atol(argv[i + 1]);
    if (a == "--steps") steps = static_cast<int>(v);
    if (a == "--batch") batch = v;
    if (a == "--steps-t") t = v;
    if (a == "--units") units = v;
  }
  const KerasTensor in = Input({t}, "tokens", DType::i32);
  const KerasTensor h = layers::Bidirectional(layers::LSTM(units))(layers::Embedding(vocab, embed)(in));
  auto model = std::make_unique<Model>(in, layers::Dense(2)(h));
  model->compile(optimizers::Adam(), losses::SparseCategoricalCrossentropy({.from_logits = true}));
  std::mt19937 gen(1);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(vocab - 1)), label(0, 1);
  Tensor x(Shape{batch, t}, DType::i32), y(Shape{batch}, DType::i32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<int32_t>()[i] = id(gen);
  for (int64_t i = 0; i < y.numel(); ++i) y.data<int32_t>()[i] = label(gen);
  for (int i = 0; i < 3; ++i) model->train_on_batch({x}, {y});  // warm-up: plan made, GEMM engines chosen
  std::vector<double> ms;
  for (int i = 0; i < steps; ++i) {
    const auto t0 = bench::Clock::now();
    model->train_on_batch({x}, {y});
    ms.push_back(1e3 * bench::seconds(t0, bench::Clock::now()));
  }
  std::sort(ms.begin(), ms.end());
  std::printf(
      "{\"peer\":\"trainkit (fused LstmSequence)\",\"batch\":%lld,\"T\":%lld,\"units\":%lld,\"step_ms_median\":%.3f,"
      "\"step_ms_min\":%.3f,\"cpu\":\"%s\"}\n",
      static_cast<long long>(batch), static_cast<long long>(t), static_cast<long long>(units), ms[ms.size() / 2],
      ms.front(), bench::cpu_description().c_str());
  return 0;
}
