// Mixed precision in training: dynamic loss scaling around a float16 overflow (the skipped step changes nothing),
// micro-batches under loss scaling, refused inputs, what each policy computes in, the memory plan's 16-bit
// activations, and the loss-scale state and dtype policies in a saved training state and a .keras file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "test_data.h"
#include "trainkit/io/keras.h"
#include "trainkit/io/training_state_file.h"
#include "trainkit/nn/mixed_precision.h"
#include "trainkit/trainkit.h"

namespace tk {
namespace {

namespace fs = std::filesystem;
using testing::uniform;

// Every test leaves the global policy as it found it (float32), whatever it asserted.
class MixedPrecisionTraining : public ::testing::Test {
 protected:
  void SetUp() override {
    clear_session();
    utils::set_random_seed(11);
  }
  void TearDown() override { mixed_precision::set_global_policy("float32"); }
};

template <typename E, typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception: ") + e.what();
  }
  return "no exception";
}

#define EXPECT_HAS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

std::unique_ptr<Sequential> mlp() {
  return std::make_unique<Sequential>(
      std::vector<LayerPtr>{layers::Input({8}), layers::Dense(16, "relu"), layers::Dense(1)});
}

// Targets a linear function of x can fit: y = x . w (small, |y| < 3).
Tensor targets_for(const Tensor& x) {
  Tensor y(Shape{x.shape()[0], 1}, DType::f32);
  for (int64_t i = 0; i < x.shape()[0]; ++i) {
    double s = 0;
    for (int64_t j = 0; j < 8; ++j) s += x.data<float>()[i * 8 + j] * (j % 2 ? 0.5 : -0.25);
    y.data<float>()[i] = static_cast<float>(s);
  }
  return y;
}

// A batch whose targets are 1e4: the forward pass is finite (float32 loss about 1e8), but the scaled gradient
// reaching the float16 hidden layer is about 2e4 / 8 * 32768 = 8e7 > 65504, so it is inf in float16.
std::pair<Tensor, Tensor> overflow_batch(uint32_t seed) {
  Tensor x = uniform({8, 8}, seed);
  Tensor y(Shape{8, 1}, DType::f32);
  for (int64_t i = 0; i < 8; ++i) y.data<float>()[i] = 1e4f;
  return {x, y};
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

bool bit_equal(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!bit_equal(a[i], b[i])) return false;
  return true;
}

std::vector<Tensor> flat_slots(const Model& m) {
  std::vector<Tensor> out;
  for (std::vector<Tensor>& per : m.get_optimizer_slots())
    for (Tensor& t : per) out.push_back(std::move(t));
  return out;
}

class Recorder : public Callback {
 public:
  std::vector<Logs> batches;
  void on_train_batch_end(int64_t, const Logs& logs) override { batches.push_back(logs); }
};

// ---------------------------------------------------------------- a. overflow
TEST_F(MixedPrecisionTraining, OverflowSkipsTheStepHalvesTheScaleAndTrainingConverges) {
  mixed_precision::set_global_policy("mixed_float16");
  auto m = mlp();
  m->compile(optimizers::Adam({.learning_rate = 0.01f}), "mse");
  EXPECT_EQ(m->layer_compute_dtype(*m->layers()[1]), DType::f16);
  EXPECT_EQ(m->layer_compute_dtype(*m->layers().back()), DType::f32);  // the output

  const Tensor x = uniform({8, 8}, 1);
  const Tensor y = targets_for(x);
  const double first_loss = m->train_on_batch({x}, {y}).get("loss");
  for (int s = 0; s < 2; ++s) m->train_on_batch({x}, {y});
  ASSERT_EQ(m->loss_scale(), 32768.0f);  // mixed_float16 turns loss scaling on by itself
  ASSERT_EQ(m->skipped_steps(), 0);
  ASSERT_EQ(m->optimizer()->iterations(), 3);

  const std::vector<Tensor> w_before = m->get_weights();
  const std::vector<Tensor> slots_before = flat_slots(*m);
  const auto [bx, by] = overflow_batch(2);
  const double big_loss = m->train_on_batch({bx}, {by}).get("loss");
  EXPECT_TRUE(std::isfinite(big_loss)) << "the forward pass must stay finite for this test to mean anything";
  EXPECT_GT(big_loss, 1e7);
  EXPECT_EQ(m->loss_scale(), 16384.0f);
  EXPECT_EQ(m->skipped_steps(), 1);
  EXPECT_EQ(m->optimizer()->iterations(), 3) << "a skipped step is no iteration";
  EXPECT_TRUE(bit_equal(m->get_weights(), w_before)) << "weights changed on a skipped step";
  EXPECT_TRUE(bit_equal(flat_slots(*m), slots_before)) << "optimizer slots changed on a skipped step";

  // Training continues on normal data: steps count again and the loss falls.
  double loss = 0;
  for (int s = 0; s < 150; ++s) loss = m->train_on_batch({x}, {y}).get("loss");
  EXPECT_EQ(m->skipped_steps(), 1);
  EXPECT_EQ(m->optimizer()->iterations(), 153);
  EXPECT_EQ(m->loss_scale(), 16384.0f);  // 2000 finite steps before it doubles
  EXPECT_LT(loss, 0.1 * first_loss) << "first " << first_loss << " last " << loss;
}

TEST_F(MixedPrecisionTraining, FitLogsTheLossScaleAndSkippedSteps) {
  mixed_precision::set_global_policy("mixed_float16");
  auto m = mlp();
  m->compile(optimizers::Adam(), "mse");
  Tensor x = uniform({32, 8}, 3);
  Tensor y = targets_for(x);
  for (int64_t i = 16; i < 24; ++i) y.data<float>()[i] = 1e4f;  // batch 2 overflows
  auto rec = std::make_shared<Recorder>();
  m->fit(x, y, {.batch_size = 8, .epochs = 1, .verbose = 0, .callbacks = {rec}, .shuffle = false});
  ASSERT_EQ(rec->batches.size(), 4u);
  const double scales[4] = {32768, 32768, 16384, 16384};  // after each step: the scale the next one uses
  const double skipped[4] = {0, 0, 1, 1};
  for (size_t s = 0; s < 4; ++s) {
    ASSERT_TRUE(rec->batches[s].contains("loss_scale"));
    ASSERT_TRUE(rec->batches[s].contains("skipped_steps"));
    EXPECT_EQ(rec->batches[s].get("loss_scale"), scales[s]) << "step " << s;
    EXPECT_EQ(rec->batches[s].get("skipped_steps"), skipped[s]) << "step " << s;
  }
  EXPECT_EQ(m->optimizer()->iterations(), 3);
  EXPECT_EQ(m->skipped_steps(), 1);
}

TEST_F(MixedPrecisionTraining, Float32LogsNoLossScale) {
  auto m = mlp();
  m->compile(optimizers::Adam(), "mse");
  Tensor x = uniform({16, 8}, 3);
  auto rec = std::make_shared<Recorder>();
  m->fit(x, targets_for(x), {.batch_size = 8, .verbose = 0, .callbacks = {rec}});
  ASSERT_EQ(rec->batches.size(), 2u);
  EXPECT_FALSE(rec->batches[0].contains("loss_scale"));
  EXPECT_EQ(m->loss_scale(), 0.0f);
}

// ---------------------------------------------------------------- b. micro-batches
TEST_F(MixedPrecisionTraining, MicroBatchesFollowTheSameLossScaleTrajectory) {
  mixed_precision::set_global_policy("mixed_float16");
  Tensor x = uniform({96, 8}, 5);
  Tensor y = targets_for(x);
  for (int64_t i = 32; i < 48; ++i) y.data<float>()[i] = 1e4f;  // batch 2 of 6 overflows
  std::vector<Tensor> initial;
  auto run = [&](int64_t micro, std::vector<double>& scales, std::vector<double>& skipped) {
    auto m = mlp();
    if (initial.empty())
      initial = m->get_weights();
    else
      m->set_weights(initial);
    m->compile(optimizers::LossScaleOptimizer(optimizers::SGD({.learning_rate = 0.05f}),
                                              {.initial_scale = 256.0f, .dynamic_growth_steps = 2}),
               "mse");
    auto rec = std::make_shared<Recorder>();
    m->fit(
        x, y,
        {.batch_size = 16, .epochs = 2, .verbose = 0, .callbacks = {rec}, .shuffle = false, .micro_batch_size = micro});
    for (const Logs& l : rec->batches) {
      scales.push_back(l.get("loss_scale"));
      skipped.push_back(l.get("skipped_steps"));
    }
    EXPECT_EQ(m->optimizer()->iterations(), 12 - m->skipped_steps());
    return m->get_weights();
  };
  std::vector<double> whole_scales, whole_skipped, micro_scales, micro_skipped;
  const std::vector<Tensor> whole = run(0, whole_scales, whole_skipped);
  const std::vector<Tensor> micro = run(4, micro_scales, micro_skipped);
  EXPECT_EQ(whole_scales, micro_scales);
  EXPECT_EQ(whole_skipped, micro_skipped);
  ASSERT_EQ(whole_skipped.size(), 12u);
  EXPECT_EQ(whole_skipped.back(), 2);  // batch 2 of each epoch
  // 256 -> 512 after two finite steps, halved at the overflow, ...
  EXPECT_EQ(whole_scales[0], 256);
  EXPECT_EQ(whole_scales[1], 512);
  EXPECT_EQ(whole_scales[2], 256);
  ASSERT_EQ(whole.size(), micro.size());
  for (size_t k = 0; k < whole.size(); ++k)
    for (int64_t i = 0; i < whole[k].numel(); ++i) {
      const float a = whole[k].data<float>()[i], b = micro[k].data<float>()[i];
      ASSERT_TRUE(std::isfinite(b));
      EXPECT_NEAR(a, b, 2e-2 * (1.0 + std::fabs(a))) << "weight " << k << " [" << i << "]";
    }
}

// ---------------------------------------------------------------- c. bad input
TEST_F(MixedPrecisionTraining, UnknownPoliciesNameThePolicyAndKerasNames) {
  std::string e = error_of<InvalidArgument>([] { mixed_precision::set_global_policy("float64"); });
  EXPECT_HAS(e, "'float64'");
  EXPECT_HAS(e, "float32, mixed_float16, mixed_bfloat16");
  EXPECT_EQ(mixed_precision::global_policy(), "float32");

  LayerPtr d = layers::Dense(4, "linear", {.name = "hidden"});
  e = error_of<InvalidArgument>([&] { d->set_dtype_policy("mixed_half"); });
  EXPECT_HAS(e, "'hidden'");
  EXPECT_HAS(e, "'mixed_half'");
  EXPECT_HAS(e, "mixed_bfloat16");
  EXPECT_EQ(d->dtype_policy(), "float32");
  EXPECT_FALSE(d->has_own_dtype_policy());
  EXPECT_THROW(layers::Dense(4, "linear", {.dtype = "mixed"}), InvalidArgument);

  auto m = mlp();
  e = error_of<InvalidArgument>([&] { m->set_dtype_policy("float64"); });
  EXPECT_HAS(e, "'float64'");
  EXPECT_HAS(e, "mixed_float16");

  e = error_of<Unsupported>([] { mixed_precision::set_global_policy("float16"); });
  EXPECT_HAS(e, "mixed_float16");
  e = error_of<Unsupported>([&] { m->set_dtype_policy("float16"); });
  EXPECT_HAS(e, "mixed_float16");
  e = error_of<Unsupported>([&] { m->set_dtype_policy("bfloat16"); });
  EXPECT_HAS(e, "mixed_bfloat16");
}

TEST_F(MixedPrecisionTraining, ChangingPoliciesAfterProgramsExistIsRefused) {
  auto m = mlp();
  m->compile(optimizers::Adam(), "mse");
  Tensor x = uniform({8, 8}, 1);
  Tensor y = targets_for(x);
  m->fit(x, y, {.batch_size = 8, .verbose = 0});
  m->layers()[1]->set_dtype_policy("mixed_bfloat16");
  const std::string name = m->layers()[1]->name;
  std::string e = error_of<InvalidArgument>([&] { m->fit(x, y, {.batch_size = 8, .verbose = 0}); });
  EXPECT_HAS(e, "'" + name + "'");
  EXPECT_HAS(e, "mixed_bfloat16");
  EXPECT_THROW(m->train_on_batch({x}, {y}), InvalidArgument);
  m->compile(optimizers::Adam(), "mse");  // compile() again: the new policy is taken
  EXPECT_NO_THROW(m->fit(x, y, {.batch_size = 8, .verbose = 0}));
  EXPECT_EQ(m->layer_compute_dtype(*m->layers()[1]), DType::bf16);

  auto m2 = mlp();
  m2->compile(optimizers::Adam(), "mse");
  m2->train_on_batch({x}, {y});
  e = error_of<InvalidArgument>([&] { m2->set_dtype_policy("mixed_float16"); });
  EXPECT_HAS(e, "mixed_float16");
  EXPECT_HAS(e, "float32");
  EXPECT_NO_THROW(m2->set_dtype_policy("float32"));  // the same policy changes nothing
}

TEST_F(MixedPrecisionTraining, LossScaleOptimizerRefusesBadOptions) {
  std::string e = error_of<InvalidArgument>([] { optimizers::LossScaleOptimizer(optimizers::Adam(), {0.0f}); });
  EXPECT_HAS(e, "initial_scale");
  EXPECT_THROW(optimizers::LossScaleOptimizer(optimizers::Adam(), {-1.0f}), InvalidArgument);
  EXPECT_THROW(optimizers::LossScaleOptimizer(optimizers::Adam(), {INFINITY}), InvalidArgument);
  EXPECT_THROW(optimizers::LossScaleOptimizer(optimizers::Adam(), {NAN}), InvalidArgument);
  e = error_of<InvalidArgument>(
      [] { optimizers::LossScaleOptimizer(optimizers::Adam(), {.initial_scale = 8, .dynamic_growth_steps = 0}); });
  EXPECT_HAS(e, "dynamic_growth_steps");
  EXPECT_THROW(optimizers::LossScaleOptimizer(nullptr), InvalidArgument);
}

// ---------------------------------------------------------------- d. policy semantics
TEST_F(MixedPrecisionTraining, MixedBfloat16ComputeDtypes) {
  mixed_precision::set_global_policy("mixed_bfloat16");
  Sequential m({layers::Input({8}), layers::Dense(16, "relu"), layers::Dense(16, "relu", {.dtype = "float32"}),
                layers::BatchNormalization(), layers::Dense(4)});
  const auto& ls = m.layers();
  ASSERT_EQ(ls.size(), 5u);
  EXPECT_EQ(m.dtype_policy(), "mixed_bfloat16");
  EXPECT_EQ(m.layer_compute_dtype(*ls[1]), DType::bf16);
  EXPECT_EQ(m.layer_compute_dtype(*ls[2]), DType::f32);  // its own policy
  EXPECT_EQ(m.layer_dtype_policy(*ls[2]), "float32");
  std::string why;
  EXPECT_EQ(m.layer_compute_dtype(*ls[3], &why), DType::f32);  // BatchNormalization
  EXPECT_FALSE(why.empty());
  EXPECT_EQ(m.layer_dtype_policy(*ls[3]), "mixed_bfloat16");
  EXPECT_EQ(m.layer_compute_dtype(*ls[4], &why), DType::f32);  // the model output
  EXPECT_HAS(why, "output");

  m.compile(optimizers::Adam(), "mse");
  Tensor x = uniform({16, 8}, 1);
  Tensor y(Shape{16, 4}, DType::f32);
  for (int64_t i = 0; i < y.numel(); ++i) y.data<float>()[i] = x.data<float>()[i % 128] * 0.5f;
  const double first = m.train_on_batch({x}, {y}).get("loss");
  EXPECT_EQ(m.loss_scale(), 0.0f) << "bfloat16 needs no loss scaling (Keras)";
  EXPECT_EQ(m.skipped_steps(), 0);
  double loss = first;
  for (int s = 0; s < 60; ++s) loss = m.train_on_batch({x}, {y}).get("loss");
  EXPECT_LT(loss, first);
  const Tensor p = m.predict(x);
  EXPECT_EQ(p.dtype(), DType::f32);
  EXPECT_EQ(p.shape(), (Shape{16, 4}));
  for (const Tensor& w : m.get_weights()) EXPECT_EQ(w.dtype(), DType::f32);  // variables stay float32
}

TEST_F(MixedPrecisionTraining, LossScalingIsOnForFloat16AndOnRequestForBfloat16) {
  Tensor x = uniform({8, 8}, 1);
  Tensor y = targets_for(x);
  {
    mixed_precision::set_global_policy("mixed_float16");
    auto m = mlp();
    m->compile(optimizers::Adam(), "mse");
    m->train_on_batch({x}, {y});
    EXPECT_EQ(m->loss_scale(), 32768.0f);
  }
  {
    mixed_precision::set_global_policy("mixed_float16");
    auto m = mlp();
    m->auto_scale_loss = false;
    m->compile(optimizers::Adam(), "mse");
    m->train_on_batch({x}, {y});
    EXPECT_EQ(m->loss_scale(), 0.0f);
  }
  {
    mixed_precision::set_global_policy("mixed_bfloat16");
    auto m = mlp();
    m->compile(optimizers::LossScaleOptimizer(optimizers::Adam({.learning_rate = 0.01f}),
                                              {.initial_scale = 1024.0f, .dynamic_growth_steps = 4}),
               "mse");
    const double first = m->train_on_batch({x}, {y}).get("loss");
    double loss = first;
    for (int s = 0; s < 7; ++s) loss = m->train_on_batch({x}, {y}).get("loss");
    EXPECT_EQ(m->loss_scale(), 4096.0f);  // 8 finite steps, doubled every 4
    EXPECT_EQ(m->optimizer()->iterations(), 8);
    EXPECT_LT(loss, first);
    // Big targets: bfloat16's range is float32's, so the same batch that overflows float16 does not here.
    const auto [bx, by] = overflow_batch(2);
    m->train_on_batch({bx}, {by});
    EXPECT_EQ(m->skipped_steps(), 0);
  }
}

// ---------------------------------------------------------------- e. memory plan
// The layers' activations take 2 bytes per element under a mixed policy. The 16-bit copies of the weights
// ("<layer>/kernel/cast", kept for the backward pass) are planned as activations too; they are counted apart.
TEST_F(MixedPrecisionTraining, PlanActivationsTakeTwoBytesUnderMixedPrecision) {
  struct Sums {
    size_t activations = 0, weight_casts = 0, weights = 0;
  };
  auto plan_of = [](const std::string& policy) {
    mixed_precision::set_global_policy(policy);
    clear_session();  // the same layer names under each policy
    auto m = models::tutorial_cnn();
    m->compile(optimizers::Adam(), losses::SparseCategoricalCrossentropy({.from_logits = true}));
    const MemoryPlan plan = m->memory_plan(32);
    Sums s;
    s.weights = plan.weights;
    for (const PlannedValue& v : plan.values) {
      if (v.kind != "activation") continue;
      const bool weight_cast =
          v.name.size() > 12 && (v.name.ends_with("/kernel/cast") || v.name.ends_with("/bias/cast"));
      (weight_cast ? s.weight_casts : s.activations) += v.bytes;
      if (std::getenv("TK_TEST_VERBOSE")) std::printf("%s %-40s %zu\n", policy.c_str(), v.name.c_str(), v.bytes);
    }
    mixed_precision::set_global_policy("float32");
    return s;
  };
  const Sums f32 = plan_of("float32");
  ASSERT_GT(f32.activations, 0u);
  EXPECT_EQ(f32.weight_casts, 0u);
  for (const std::string policy : {"mixed_bfloat16", "mixed_float16"}) {
    const Sums mixed = plan_of(policy);
    EXPECT_LT(static_cast<double>(mixed.activations), 0.6 * static_cast<double>(f32.activations))
        << policy << ": " << mixed.activations << " vs " << f32.activations;
    EXPECT_EQ(mixed.weights, f32.weights) << policy << ": variables stay float32";
    // Every weight of a 16-bit layer is read through a 2-byte copy: at most half the float32 weights (the
    // float32 output layer has none).
    EXPECT_GT(mixed.weight_casts, 0u) << policy;
    EXPECT_LE(mixed.weight_casts, f32.weights / 2) << policy;
  }
}

// ---------------------------------------------------------------- 2. training state
TEST_F(MixedPrecisionTraining, TrainingStateCarriesTheLossScaleAndResumesBitForBit) {
  mixed_precision::set_global_policy("mixed_float16");
  auto compiled = [] {
    auto m = mlp();
    m->compile(optimizers::LossScaleOptimizer(optimizers::Adam({.learning_rate = 0.01f}),
                                              {.initial_scale = 1024.0f, .dynamic_growth_steps = 3}),
               "mse");
    return m;
  };
  std::vector<std::pair<Tensor, Tensor>> batches;
  for (uint32_t s = 0; s < 16; ++s) {
    if (s == 5) {
      batches.push_back(overflow_batch(100 + s));
    } else {
      Tensor x = uniform({8, 8}, 100 + s);
      batches.emplace_back(x, targets_for(x));
    }
  }
  auto a = compiled();
  for (size_t s = 0; s < 8; ++s) a->train_on_batch({batches[s].first}, {batches[s].second});
  ASSERT_EQ(a->skipped_steps(), 1);
  const float scale = a->loss_scale();
  const int64_t iterations = a->optimizer()->iterations();
  EXPECT_EQ(iterations, 7);
  // 1024: steps 0-4 finite (2048 after 3, counter 2), step 5 skipped (1024, counter 0), steps 6-7 (counter 2).
  EXPECT_EQ(scale, 1024.0f);

  const TrainingState saved = a->training_state();
  EXPECT_EQ(saved.dtype_policy, "mixed_float16");
  EXPECT_EQ(saved.loss_scale, 1024.0f);
  EXPECT_EQ(saved.loss_scale_counter, 2);
  EXPECT_EQ(saved.skipped_steps, 1);
  const std::vector<std::byte> bytes = io::encode_training_state(saved);
  const TrainingState loaded = io::decode_training_state(bytes, "mem.tkstate");
  EXPECT_EQ(loaded.dtype_policy, "mixed_float16");
  EXPECT_EQ(loaded.loss_scale, 1024.0f);
  EXPECT_EQ(loaded.loss_scale_counter, 2);
  EXPECT_EQ(loaded.skipped_steps, 1);
  EXPECT_EQ(io::encode_training_state(loaded), bytes);

  auto b = compiled();
  b->restore_training_state(loaded);
  EXPECT_EQ(b->loss_scale(), scale);
  EXPECT_EQ(b->skipped_steps(), 1);
  EXPECT_EQ(b->optimizer()->iterations(), iterations);

  for (size_t s = 8; s < 16; ++s) {
    a->train_on_batch({batches[s].first}, {batches[s].second});
    b->train_on_batch({batches[s].first}, {batches[s].second});
    ASSERT_EQ(a->loss_scale(), b->loss_scale()) << "step " << s;
  }
  EXPECT_EQ(a->loss_scale(), 8192.0f);  // the counter continued: 2048 after step 8, 4096 after 11, 8192 after 14
  EXPECT_EQ(b->skipped_steps(), 1);
  EXPECT_EQ(b->optimizer()->iterations(), 15);
  EXPECT_EQ(a->optimizer()->iterations(), 15);
  EXPECT_TRUE(bit_equal(a->get_weights(), b->get_weights()));
  EXPECT_TRUE(bit_equal(flat_slots(*a), flat_slots(*b)));

  // A skip after the restore counts on from the restored count.
  const auto [bx, by] = overflow_batch(7);
  b->train_on_batch({bx}, {by});
  EXPECT_EQ(b->skipped_steps(), 2);
  EXPECT_EQ(b->optimizer()->iterations(), 15);
}

TEST_F(MixedPrecisionTraining, RestoreRefusesAnotherPolicyOrAMissingLossScaler) {
  mixed_precision::set_global_policy("mixed_float16");
  auto a = mlp();
  a->compile(optimizers::Adam(), "mse");
  Tensor x = uniform({8, 8}, 1);
  a->train_on_batch({x}, {targets_for(x)});
  const TrainingState s = a->training_state();
  ASSERT_EQ(s.loss_scale, 32768.0f);

  mixed_precision::set_global_policy("float32");
  auto b = mlp();
  b->compile(optimizers::Adam(), "mse");
  const std::string e = error_of<InvalidArgument>([&] { b->restore_training_state(s); });
  EXPECT_HAS(e, "'mixed_float16'");
  EXPECT_HAS(e, "'float32'");

  // Same policy but the optimizer has no loss scaling to take the scale.
  TrainingState f32 = s;
  f32.dtype_policy = "float32";
  EXPECT_HAS(error_of<InvalidArgument>([&] { b->restore_training_state(f32); }), "loss scal");

  // A float32 state into a float32 model with a LossScaleOptimizer: the scaler starts from its initial state.
  auto c = mlp();
  c->compile(optimizers::LossScaleOptimizer(optimizers::Adam(), {.initial_scale = 64.0f}), "mse");
  c->train_on_batch({x}, {targets_for(x)});
  TrainingState plain = c->training_state();
  plain.loss_scale = 0.0f;  // as a version-2 file decodes
  plain.skipped_steps = 0;
  c->restore_training_state(plain);
  EXPECT_EQ(c->loss_scale(), 64.0f);
}

TEST_F(MixedPrecisionTraining, Version2StateFilesStillLoad) {
  const fs::path v2 = fs::path(TK_SOURCE_DIR) / "fuzz/corpus/fuzz_tkstate/tiny_v2.tkstate";
  const TrainingState s = io::load_training_state(v2);
  EXPECT_EQ(s.dtype_policy, "float32");
  EXPECT_EQ(s.loss_scale, 0.0f);
  EXPECT_EQ(s.skipped_steps, 0);
  EXPECT_EQ(s.iterations, 1);
  // The model the seed was made from (TrainingStateFile.SeedCorpusIsCurrent).
  Sequential m({layers::Input({3}), layers::Dense(2)});
  m.compile(optimizers::Adam(), "mse");
  EXPECT_NO_THROW(m.restore_training_state(s));
  EXPECT_EQ(m.optimizer()->iterations(), 1);
  // Written again, it is a version-3 file.
  const std::vector<std::byte> again = io::encode_training_state(s);
  uint32_t version = 0;
  std::memcpy(&version, again.data() + 8, 4);
  EXPECT_EQ(version, io::kTrainingStateVersion);
  EXPECT_EQ(io::kTrainingStateVersion, 3u);

  // Versions outside [2, 3] are refused, naming the range.
  std::vector<std::byte> v1 = again;
  v1[8] = std::byte{1};
  EXPECT_HAS(error_of<FormatError>([&] { io::decode_training_state(v1, "v1.tkstate"); }), "versions 2 to 3");
}

// ---------------------------------------------------------------- 2. .keras files
TEST_F(MixedPrecisionTraining, KerasFileKeepsEachLayersPolicy) {
  const fs::path dir = fs::temp_directory_path() / ("tk_mp_keras_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "mixed.keras").string();
  mixed_precision::set_global_policy("mixed_bfloat16");
  Sequential m({layers::Input({8}), layers::Dense(16, "relu"), layers::Dense(8, "relu", {.dtype = "float32"}),
                layers::Dense(4)});
  m.compile(optimizers::Adam(), "mse");
  Tensor x = uniform({8, 8}, 1);
  m.train_on_batch({x}, {uniform({8, 4}, 2)});
  m.save(path);
  const Tensor before = m.predict(x);

  for (const std::string global : {"float32", "mixed_bfloat16"}) {
    mixed_precision::set_global_policy(global);
    std::unique_ptr<Model> r = models::load_model(path);
    ASSERT_EQ(r->layers().size(), m.layers().size());
    for (size_t i = 1; i < m.layers().size(); ++i)
      EXPECT_EQ(r->layer_compute_dtype(*r->layers()[i]), m.layer_compute_dtype(*m.layers()[i]))
          << global << ": layer " << m.layers()[i]->name;
    EXPECT_EQ(r->layer_dtype_policy(*r->layers()[1]), "mixed_bfloat16") << global;
    EXPECT_EQ(r->layer_dtype_policy(*r->layers()[2]), "float32") << global;
    // The output computes in float32: it is written as a float32 layer (Keras' guide), so Keras agrees.
    EXPECT_EQ(r->layer_dtype_policy(*r->layers()[3]), "float32") << global;
    const Tensor after = r->predict(x);
    EXPECT_TRUE(bit_equal(before, after)) << global << ": predictions differ after the round trip";
  }

  // A float32 model saved and loaded under float32 keeps layers without their own policy.
  mixed_precision::set_global_policy("float32");
  Sequential plain({layers::Input({8}), layers::Dense(4)});
  plain.save((dir / "plain.keras").string());
  std::unique_ptr<Model> p = models::load_model((dir / "plain.keras").string());
  for (const LayerPtr& l : p->layers()) EXPECT_FALSE(l->has_own_dtype_policy()) << l->name;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tk
