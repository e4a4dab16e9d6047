// Mixed precision against Keras 3: 50 steps of the default MLP and the tutorial CNN (without its dropout) under
// mixed_float16 (dynamic loss scaling, a forced overflow at step 20) and mixed_bfloat16, from the same initial
// weights and batches (tests/fixtures/mixed_precision.txt, made by gen_mixed_precision.py; the weights and data
// come from an integer hash both sides compute, so the fixture stays small).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <vector>

#include "fixture.h"
#include "trainkit/core/convert.h"
#include "trainkit/nn/mixed_precision.h"
#include "trainkit/trainkit.h"

namespace tk {
namespace {

using testing::load_fixture;

uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
double u(uint64_t stream, uint64_t i) { return static_cast<double>(splitmix64((stream << 32) + i) >> 40) / 16777216.0; }

const std::map<std::string, Tensor>& fixture() {
  static const auto* f = new auto(load_fixture(testing::fixture_path("mixed_precision.txt")));
  return *f;
}
const Tensor& get(const std::string& name) {
  auto it = fixture().find(name);
  if (it == fixture().end()) throw InvalidArgument("fixture has no tensor " + name);
  return it->second;
}

std::unique_ptr<Model> make_model(bool cnn) {
  using namespace layers;
  if (!cnn)
    return std::make_unique<Sequential>(std::vector<LayerPtr>{
        layers::Input({784}), Dense(256, "relu"), Dense(128, "relu"), Dense(10, "linear", {.dtype = "float32"})});
  return std::make_unique<Sequential>(
      std::vector<LayerPtr>{layers::Input({28, 28, 1}), Conv2D(32, 5, "relu", {.padding = "same"}), MaxPooling2D(2),
                            Conv2D(64, 5, "relu", {.padding = "same"}), MaxPooling2D(2), Flatten(), Dense(1024, "relu"),
                            Dense(10, "linear", {.dtype = "float32"})});
}

// Glorot-uniform kernels from the hash (streams 1000 + k), zero biases: what the generator gives Keras.
void hash_init(Model& m) {
  std::vector<Tensor> w = m.get_weights();
  for (size_t k = 0; k < w.size(); ++k) {
    float* p = w[k].data<float>();
    if (w[k].shape().rank() == 1) {
      std::memset(p, 0, w[k].nbytes());
      continue;
    }
    const Shape& s = w[k].shape();
    const int64_t receptive = s.numel() / (s[-1] * s[-2]);
    const double limit = std::sqrt(6.0 / double((s[-2] + s[-1]) * receptive));
    for (int64_t i = 0; i < s.numel(); ++i)
      p[i] = static_cast<float>(limit * (2.0 * u(1000 + k, static_cast<uint64_t>(i)) - 1.0));
  }
  m.set_weights(w);
}

struct Data {
  Tensor x, y;
};
Data hash_data(bool cnn) {
  Data d{Tensor(cnn ? Shape{256, 28, 28, 1} : Shape{256, 784}, DType::f32), Tensor(Shape{256}, DType::i32)};
  for (int64_t i = 0; i < 256 * 784; ++i) d.x.data<float>()[i] = static_cast<float>(u(1, static_cast<uint64_t>(i)));
  for (int64_t n = 0; n < 256; ++n) d.y.data<int32_t>()[n] = static_cast<int32_t>(u(2, static_cast<uint64_t>(n)) * 10);
  return d;
}
// Step s's batch: rows [(s % 8) * 32, +32); at step 20 its first value is 60000 (float16 gradients overflow).
std::pair<Tensor, Tensor> batch(const Data& d, int s) {
  const int64_t row = (s % 8) * 32, per = d.x.numel() / 256;
  Shape xs = d.x.shape();
  xs[0] = 32;
  Tensor x(xs, DType::f32), y(Shape{32}, DType::i32);
  std::memcpy(x.raw(), d.x.data<float>() + row * per, x.nbytes());
  std::memcpy(y.raw(), d.y.data<int32_t>() + row, y.nbytes());
  if (s == 20) x.data<float>()[0] = 60000.0f;
  return {x, y};
}

struct Config {
  std::string key;  // mlp_f16, ...
  bool cnn;
  std::string policy;
  double loss_atol;  // steps 0-9, absolute (the losses are ~2.3); measured 0.010 / 0.022 (MLP), 0.0027 / 0.0035 (CNN)
};

class MixedPrecisionKeras : public ::testing::TestWithParam<Config> {
 protected:
  void TearDown() override { mixed_precision::set_global_policy("float32"); }
};

// The vectorized float32 -> bfloat16 conversion (convert.cpp, AVX2 where the CPU has it) rounds every bit pattern
// as the scalar definition does: ties to even, overflow to Inf, NaN to the quiet NaN of its sign.
TEST(MixedPrecisionCasts, VectorizedBfloat16ConversionMatchesTheScalarOneOnEveryKindOfValue) {
  std::vector<uint32_t> bits;
  for (uint32_t special : {0u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7f800001u, 0xffc00001u, 0x7f7fffffu,
                           0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x00000001u, 0x007fffffu})
    bits.push_back(special);
  for (uint64_t i = 0; bits.size() < 100003; ++i) bits.push_back(static_cast<uint32_t>(splitmix64(i)));
  std::vector<float> f(bits.size());
  std::memcpy(f.data(), bits.data(), bits.size() * 4);
  std::vector<bfloat16> got(bits.size());
  convert_elements(f.data(), DType::f32, got.data(), DType::bf16, f.size());
  for (size_t i = 0; i < f.size(); ++i)
    ASSERT_EQ(got[i].bits, bfloat16::from_float(f[i]).bits) << "input bits 0x" << std::hex << bits[i];
}

// The same for float16 (F16C where the CPU has it), both ways: rounding, overflow, subnormals, NaN payloads.
TEST(MixedPrecisionCasts, VectorizedFloat16ConversionsMatchTheScalarOnesOnEveryKindOfValue) {
  std::vector<float> f;
  for (float v : {0.0f, -0.0f, 65504.0f, 65520.0f, 65519.99f, 6e-8f, 3e-8f, 2.98e-8f, 1e-5f, -1e-7f}) f.push_back(v);
  std::vector<uint32_t> nan_bits = {0x7f800001u, 0xffc00001u, 0x7fa00000u, 0x7f800000u};
  for (uint32_t b : nan_bits) f.push_back(std::bit_cast<float>(b));
  for (uint64_t i = 0; f.size() < 100003; ++i) {  // magnitudes around float16's range, and raw bit patterns
    const uint64_t h = splitmix64(i);
    f.push_back(i % 3 == 0 ? std::bit_cast<float>(static_cast<uint32_t>(h))
                           : static_cast<float>((double(h >> 11) / 9007199254740992.0 - 0.5) *
                                                std::ldexp(1.0, int(i % 40) - 24)));
  }
  std::vector<float16> half(f.size());
  convert_elements(f.data(), DType::f32, half.data(), DType::f16, f.size());
  for (size_t i = 0; i < f.size(); ++i)
    ASSERT_EQ(half[i].bits, float16::from_float(f[i]).bits)
        << "input " << f[i] << " bits 0x" << std::hex << std::bit_cast<uint32_t>(f[i]);
  std::vector<float16> all(65536);
  for (uint32_t b = 0; b < 65536; ++b) all[b] = float16::from_bits(static_cast<uint16_t>(b));
  std::vector<float> back(all.size());
  convert_elements(all.data(), DType::f16, back.data(), DType::f32, all.size());
  for (uint32_t b = 0; b < 65536; ++b)
    ASSERT_EQ(std::bit_cast<uint32_t>(back[b]), std::bit_cast<uint32_t>(all[b].to_float()))
        << "half bits 0x" << std::hex << b;
}

TEST(MixedPrecisionKeras, HashMatchesTheGenerator) {
  const Tensor& y = get("data/y");
  Data d = hash_data(false);
  EXPECT_EQ(std::memcmp(y.raw(), d.y.raw(), y.nbytes()), 0);
  for (bool cnn : {false, true}) {
    auto m = make_model(cnn);
    hash_init(*m);
    std::vector<Tensor> w = m->get_weights();
    for (size_t k = 0; k < w.size(); k += 2) {
      const std::string base = std::string(cnn ? "cnn" : "mlp") + "/init/w" + std::to_string(k);
      const Tensor& sample = get(base + "/sample");
      for (int64_t i = 0; i < 64; ++i)
        EXPECT_EQ(w[k].data<float>()[(uint64_t(i) * 2654435761ull) % uint64_t(w[k].numel())], sample.data<float>()[i])
            << base << " element " << i;
    }
  }
}

TEST_P(MixedPrecisionKeras, FiftyStepsMatchKeras) {
  const Config& c = GetParam();
  mixed_precision::set_global_policy(c.policy);
  auto m = make_model(c.cnn);
  hash_init(*m);
  OptimizerPtr opt = optimizers::Adam({{}, 1e-3f});
  if (c.policy == "mixed_float16")
    opt = optimizers::LossScaleOptimizer(opt, {.initial_scale = 32768.0f, .dynamic_growth_steps = 15});
  m->compile(opt, losses::SparseCategoricalCrossentropy({.from_logits = true}));
  const Data d = hash_data(c.cnn);
  const Tensor& losses = get(c.key + "/losses");
  const Tensor& losses_f32 = get(std::string(c.cnn ? "cnn" : "mlp") + "_f32/losses");
  double worst = 0, worst_rel = 0, early_mixed = 0, early_f32 = 0;
  int worst_step = 0;
  for (int s = 0; s < 50; ++s) {
    auto [x, y] = batch(d, s);
    const double loss = m->train_on_batch({x}, {y}).get("loss");
    const double diff = std::abs(loss - losses.data<float>()[s]);
    if (std::getenv("TK_TEST_VERBOSE"))
      std::printf("%2d %.6f keras %.6f f32 %.6f scale %g\n", s, loss, losses.data<float>()[s],
                  losses_f32.data<float>()[s], double(m->loss_scale()));
    if (s < 10) {
      early_mixed += diff;
      early_f32 += std::abs(loss - losses_f32.data<float>()[s]);
      if (diff > worst) worst = diff, worst_step = s;
    }
    worst_rel = std::max(worst_rel, diff / std::abs(double(losses.data<float>()[s])));
    if (c.policy == "mixed_float16") {
      EXPECT_EQ(m->loss_scale(), get(c.key + "/loss_scale").data<float>()[s]) << "loss scale after step " << s;
      EXPECT_EQ(m->skipped_steps() > 0 && s >= 20, get(c.key + "/skipped").data<int32_t>()[s] || s > 20)
          << "step " << s;
    }
  }
  std::printf(
      "%s: steps 0-9: worst |loss - keras| %.3g at step %d, sum %.3g (%.3g from Keras' float32 run); "
      "steps 0-49: worst relative %.3g\n",
      c.key.c_str(), worst, worst_step, early_mixed, early_f32, worst_rel);
  EXPECT_LE(worst, c.loss_atol) << "at step " << worst_step;
  // The early steps follow Keras' mixed run more closely than its float32 run: the 16-bit rounding is Keras'.
  // Not for the bfloat16 MLP: TensorFlow's CPU bfloat16 MatMul (Eigen, oneDNN off) rounds partial sums to
  // bfloat16 (the generator's probe: 16.875 for a correctly rounded 17), where trainkit accumulates in float32
  // as TensorFlow with oneDNN does — and that alone moves Keras' own trajectory by up to 0.039 in steps 0-19.
  if (c.key != "mlp_bf16") EXPECT_LT(early_mixed, early_f32);
  // Later, Adam's sign-like first steps on random labels amplify every rounding difference (Keras' own mixed
  // and float32 runs differ by up to 10%); the trajectory must stay within 20% at every step.
  EXPECT_LE(worst_rel, 0.2);
  EXPECT_EQ(m->optimizer()->iterations(), get(c.key + "/iterations").data<int32_t>()[0]);
  if (c.policy == "mixed_float16") EXPECT_EQ(m->skipped_steps(), 1);
  // Final weights: kernels' sums of |w| within 2% (measured: 1.1%). Biases start at zero, so theirs are all
  // trajectory (50 sign-like Adam steps): within 25%, or 1.5x the distance between Keras' own mixed_float16 and
  // mixed_bfloat16 runs where that is larger (the MLP's last bias: Keras' two runs end 23% apart; trainkit lands
  // 22% from Keras on an AVX512_BF16 CPU and 30% with AMX, whose bfloat16 dot products oneDNN uses there).
  const std::string other = c.key.ends_with("_bf16") ? c.key.substr(0, c.key.size() - 5) + "_f16"
                                                     : c.key.substr(0, c.key.size() - 4) + "_bf16";
  std::vector<Tensor> w = m->get_weights();
  for (size_t k = 0; k < w.size(); ++k) {
    double abssum = 0;
    for (int64_t i = 0; i < w[k].numel(); ++i) abssum += std::abs(double(w[k].data<float>()[i]));
    const double want = get(c.key + "/w" + std::to_string(k) + "/abssum").data<float>()[0];
    const double keras_spread =
        std::abs(get(other + "/w" + std::to_string(k) + "/abssum").data<float>()[0] - want) / want;
    const double tolerance = w[k].shape().rank() >= 2 ? 0.02 : std::max(0.25, 1.5 * keras_spread);
    EXPECT_NEAR(abssum, want, tolerance * want) << c.key << " weight " << k;
  }
}

INSTANTIATE_TEST_SUITE_P(Keras, MixedPrecisionKeras,
                         ::testing::Values(Config{"mlp_f16", false, "mixed_float16", 0.04},
                                           Config{"mlp_bf16", false, "mixed_bfloat16", 0.04},
                                           Config{"cnn_f16", true, "mixed_float16", 0.01},
                                           Config{"cnn_bf16", true, "mixed_bfloat16", 0.01}),
                         [](const auto& info) { return info.param.key; });

}  // namespace
}  // namespace tk

namespace tk {
namespace {

// summary() names the policy and each layer that computes in float32 under it, with the reason.
TEST(MixedPrecisionSummary, NamesThePolicyAndTheFloat32LayersWithTheirReason) {
  mixed_precision::set_global_policy("mixed_bfloat16");
  auto m = models::tutorial_cnn();
  mixed_precision::set_global_policy("float32");
  std::ostringstream os;
  m->summary(os);
  const std::string s = os.str();
  EXPECT_NE(s.find("Dtype policy: mixed_bfloat16"), std::string::npos) << s;
  const std::string out = m->layers().back()->name;
  EXPECT_NE(s.find(out + " computes in float32: model output"), std::string::npos) << s;
  std::ostringstream plain;
  make_model(false)->summary(plain);  // float32: no policy line
  EXPECT_EQ(plain.str().find("Dtype policy"), std::string::npos) << plain.str();
}

}  // namespace
}  // namespace tk

namespace tk {
namespace {

TEST(MixedPrecisionPolicies, PredictRefusesAPolicyChangedAfterItsProgramsWereBuilt) {
  auto m = make_model(false);
  Tensor x(Shape{4, 784}, DType::f32);
  std::memset(x.raw(), 0, x.nbytes());
  EXPECT_EQ(m->predict(x, 4).dtype(), DType::f32);
  m->layers()[1]->set_dtype_policy("mixed_bfloat16");
  try {
    m->predict(x, 4);
    FAIL() << "a policy changed after predict's program was built must be refused";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(m->layers()[1]->name), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tk
