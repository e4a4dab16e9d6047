// Parity with Keras 3: from the same initial weights and the same batches, trainkit's per-step losses
// and final weights match those Keras produced (tests/fixtures/parity_mlp.txt, made by gen_parity.py).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "fixture.h"
#include "trainkit/trainkit.h"

namespace tk {
namespace {

using testing::load_fixture;

// Tolerances per optimizer family, ~10x what trainkit reaches on an AVX-512 machine (AMD EPYC), so that AVX2
// kernels (other blocking, other FMA order) pass too. Measured: SGD family loss 1.9e-7 relative, weights
// 1.9e-7; RMSprop 1.8e-7, 2.7e-7; Adam family 1.6e-6, 2.8e-6 (Adam divides by sqrt(v), which amplifies the
// rounding of small second moments). The fixture's own float noise (TF with oneDNN on vs off) is 2.1e-7 / 2e-6.
struct Config {
  std::string key;
  std::function<OptimizerPtr()> make;
  double loss_rtol;
  double weight_atol;
};

class KerasParity : public ::testing::TestWithParam<Config> {
 protected:
  static void SetUpTestSuite() {
    fixture_ = new auto(load_fixture(std::string(TK_SOURCE_DIR) + "/tests/fixtures/parity_mlp.txt"));
  }
  static void TearDownTestSuite() { delete fixture_; }
  static std::map<std::string, Tensor>* fixture_;
};
std::map<std::string, Tensor>* KerasParity::fixture_ = nullptr;

TEST_P(KerasParity, FiftyStepsMatchKerasLosses) {
  const Config& cfg = GetParam();
  auto& f = *fixture_;
  Sequential model({layers::Input({20}), layers::Dense(32, "relu"), layers::Dense(16, "tanh"), layers::Dense(10)});
  model.set_weights({f.at("w0"), f.at("w1"), f.at("w2"), f.at("w3"), f.at("w4"), f.at("w5")});
  model.compile(cfg.make(), losses::SparseCategoricalCrossentropy({.from_logits = true}));
  const Tensor& x = f.at("x");
  const Tensor& y = f.at("y");
  const Tensor& want = f.at(cfg.key + "/losses");
  double worst = 0;
  for (int s = 0; s < 50; ++s) {
    const double got =
        model.train_on_batch({x.slice_rows(8 * s, 8 * s + 8)}, {y.slice_rows(8 * s, 8 * s + 8)}).get("loss");
    const double ref = want.data<float>()[s];
    const double rel = std::abs(got - ref) / std::max(std::abs(ref), 1e-6);
    worst = std::max(worst, rel);
    EXPECT_LE(rel, cfg.loss_rtol) << cfg.key << " step " << s << ": trainkit " << got << " vs Keras " << ref;
  }
  std::vector<Tensor> w = model.get_weights();
  double worst_w = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    const Tensor& ref = f.at(cfg.key + "/final_w" + std::to_string(i));
    for (int64_t k = 0; k < ref.numel(); ++k)
      worst_w = std::max(worst_w, double(std::abs(w[i].data<float>()[k] - ref.data<float>()[k])));
  }
  EXPECT_LE(worst_w, cfg.weight_atol) << cfg.key << ": final weights differ from Keras";
  std::printf("[ parity ] %-14s max relative loss difference %.2e, max weight difference %.2e\n", cfg.key.c_str(),
              worst, worst_w);
}

INSTANTIATE_TEST_SUITE_P(
    Optimizers, KerasParity,
    ::testing::Values(
        Config{"sgd_momentum", [] { return optimizers::SGD({.learning_rate = 0.05f, .momentum = 0.9f}); }, 1e-6, 2e-6},
        Config{"sgd_nesterov",
               [] { return optimizers::SGD({.learning_rate = 0.05f, .momentum = 0.9f, .nesterov = true}); }, 1e-6,
               2e-6},
        Config{"adam", [] { return optimizers::Adam({.learning_rate = 0.01f}); }, 1e-5, 3e-5},
        Config{"adamw",
               [] {
                 optimizers::AdamWOptions o;
                 o.learning_rate = 0.01f;
                 o.weight_decay = 0.05f;
                 return optimizers::AdamW(o);
               },
               1e-5, 3e-5},
        Config{"rmsprop", [] { return optimizers::RMSprop({.learning_rate = 0.005f}); }, 1e-6, 3e-6},
        Config{"adam_clipnorm",
               [] {
                 optimizers::AdamOptions o;
                 o.learning_rate = 0.01f;
                 o.clipnorm = 0.5f;
                 return optimizers::Adam(o);
               },
               1e-5, 3e-5},
        Config{"sgd_clipvalue",
               [] {
                 optimizers::SGDOptions o;
                 o.learning_rate = 0.05f;
                 o.clipvalue = 0.01f;
                 return optimizers::SGD(o);
               },
               1e-6, 2e-6}),
    [](const auto& info) { return info.param.key; });

}  // namespace
}  // namespace tk
