// The optimizers written in the general ops (src/nn/optimizers/, nn/optimizer_rule.h) against Keras 3.15.1: three
// train_on_batch steps of a small model, then every weight and optimizer variable (tests/fixtures/keras/optimizers/,
// gen_optimizers.py beside it); the Keras file round trip of their config and state; bad hyperparameters.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "keras_text_fixture.h"
#include "trainkit/io/keras.h"
#include "trainkit/nn/layers.h"
#include "trainkit/nn/losses.h"
#include "trainkit/nn/memory_plan.h"
#include "trainkit/nn/model.h"
#include "trainkit/nn/models.h"
#include "trainkit/nn/optimizers.h"

namespace tk {
namespace {

using testing::load_keras_text;
const std::map<std::string, Tensor>& fixture() {
  static const auto f =
      load_keras_text(std::string(TK_SOURCE_DIR) + "/tests/fixtures/keras/optimizers/optimizers_expect.txt");
  return f;
}

double worst(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.shape(), want.shape());
  double w = 0;
  for (int64_t i = 0; i < std::min(got.numel(), want.numel()); ++i) {
    const double v = want.data<float>()[i];
    w = std::max(w, std::abs(got.data<float>()[i] - v) / std::max(1.0, std::abs(v)));
  }
  return w;
}

std::unique_ptr<Sequential> make_model(OptimizerPtr opt) {
  auto m = std::make_unique<Sequential>(
      std::vector<LayerPtr>{layers::Input({5}), layers::Dense(4, "relu"), layers::Dense(3)});
  const auto& f = fixture();
  size_t i = 0;
  for (const LayerPtr& l : m->layers())
    for (Weight& w : l->weights()) {
      const Tensor& v = f.at("w" + std::to_string(i++));
      std::copy(v.data<float>(), v.data<float>() + v.numel(), w.value.data<float>());
    }
  m->compile(std::move(opt), losses::SparseCategoricalCrossentropy({.from_logits = true}));
  return m;
}

Tensor labels() {
  const Tensor& y = fixture().at("y");
  Tensor t(y.shape(), DType::i32);
  for (int64_t i = 0; i < y.numel(); ++i) t.data<int32_t>()[i] = static_cast<int32_t>(y.data<float>()[i]);
  return t;
}

struct RuleCase {
  std::string name;
  std::function<OptimizerPtr()> make;
};

class OptimizerRuleKeras : public ::testing::TestWithParam<RuleCase> {};

TEST_P(OptimizerRuleKeras, ThreeStepsMatchKerasWeightsAndSlots) {
  const RuleCase& c = GetParam();
  auto m = make_model(c.make());
  for (int s = 0; s < 3; ++s) m->train_on_batch({fixture().at("x")}, {labels()});
  size_t i = 0;
  for (const LayerPtr& l : m->layers())
    for (const Weight& w : l->weights()) {
      const std::string key = c.name + "/w" + std::to_string(i++);
      EXPECT_LE(worst(w.value, fixture().at(key)), 2e-6) << key;
    }
  const auto slots = m->get_optimizer_slots();
  size_t k = 0;  // Keras' order: each variable's slots together
  for (const auto& per_weight : slots)
    for (const Tensor& s : per_weight) {
      const std::string key = c.name + "/slot" + std::to_string(k++);
      ASSERT_TRUE(fixture().count(key)) << key;
      EXPECT_LE(worst(s, fixture().at(key)), 2e-6) << key;
    }
  EXPECT_EQ(m->optimizer()->iterations(), 3);
}

INSTANTIATE_TEST_SUITE_P(
    Keras, OptimizerRuleKeras,
    ::testing::Values(RuleCase{"adagrad", [] { return optimizers::Adagrad({.learning_rate = 0.1f}); }},
                      RuleCase{"adagrad_clipnorm_decay",
                               [] {
                                 optimizers::AdagradOptions o;
                                 o.learning_rate = 0.1f, o.clipnorm = 0.5f, o.weight_decay = 0.01f,
                                 o.initial_accumulator_value = 0.2f;
                                 return optimizers::Adagrad(o);
                               }},
                      RuleCase{"adadelta", [] { return optimizers::Adadelta({.learning_rate = 1.0f}); }},
                      RuleCase{"lion", [] { return optimizers::Lion({.learning_rate = 0.01f}); }},
                      RuleCase{"lion_clipvalue",
                               [] {
                                 optimizers::LionOptions o;
                                 o.learning_rate = 0.01f, o.beta_1 = 0.8f, o.beta_2 = 0.95f, o.clipvalue = 0.05f;
                                 return optimizers::Lion(o);
                               }}),
    [](const ::testing::TestParamInfo<RuleCase>& i) { return i.param.name; });

TEST(OptimizerRules, KerasFileRoundTripKeepsConfigAndState) {
  auto m = make_model(optimizers::Adadelta({.learning_rate = 0.5f, .rho = 0.9f}));
  m->train_on_batch({fixture().at("x")}, {labels()});
  const std::string path = ::testing::TempDir() + "/adadelta.keras";
  m->save(path);
  auto back = models::load_model(path);
  ASSERT_EQ(back->optimizer()->name(), "Adadelta");
  EXPECT_EQ(back->optimizer()->iterations(), 1);
  EXPECT_FLOAT_EQ(back->optimizer()->learning_rate(), 0.5f);
  const auto a = m->get_optimizer_slots(), b = back->get_optimizer_slots();
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k)
    for (size_t s = 0; s < a[k].size(); ++s) EXPECT_EQ(worst(b[k][s], a[k][s]), 0.0);
  // The next step from the reloaded state is the next step of the original.
  m->train_on_batch({fixture().at("x")}, {labels()});
  back->train_on_batch({fixture().at("x")}, {labels()});
  for (size_t l = 0; l < m->layers().size(); ++l)
    for (size_t w = 0; w < m->layers()[l]->weights().size(); ++w)
      EXPECT_EQ(worst(back->layers()[l]->weights()[w].value, m->layers()[l]->weights()[w].value), 0.0);
}

// The memory plan counts a rule's slots as optimizer state (from its Assigns), as it does the fused optimizers'.
TEST(OptimizerRules, ThePlanCountsTheirSlots) {
  auto adagrad = make_model(optimizers::Adagrad());
  auto adadelta = make_model(optimizers::Adadelta());
  auto sgd = make_model(optimizers::SGD({.momentum = 0.9f}));  // one slot, like Adagrad
  const MemoryPlan one = adagrad->memory_plan(6), two = adadelta->memory_plan(6), ref = sgd->memory_plan(6);
  EXPECT_GT(one.optimizer_state, 0u);
  EXPECT_EQ(one.optimizer_state, ref.optimizer_state);
  EXPECT_EQ(two.optimizer_state, 2 * ref.optimizer_state);
  EXPECT_EQ(one.gradients, ref.gradients);
}

TEST(OptimizerRules, ByNameAndBadHyperparameters) {
  EXPECT_EQ(optimizers::get("adagrad")->name(), "Adagrad");
  EXPECT_EQ(optimizers::get("Lion", 0.003f)->learning_rate(), 0.003f);
  EXPECT_THROW(optimizers::Adadelta({.rho = 1.5f}), InvalidArgument);
  EXPECT_THROW(optimizers::Adagrad({.epsilon = 0.0f}), InvalidArgument);
  EXPECT_THROW(optimizers::Lion({.beta_1 = -0.1f}), InvalidArgument);
  try {
    optimizers::get("adafactorx");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("lion"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tk
