// Every optimizer rule (src/nn/optimizers/, nn/optimizer_rule.h) against Keras 3.15.1: three train_on_batch steps of
// a small model, then every weight and optimizer variable in Keras' order (tests/fixtures/keras/optimizers/,
// gen_optimizers.py beside it); .keras files Keras saved with Nadam and Adafactor trained further and read back by
// Keras; the Keras file and training-state round trips of every rule; bad hyperparameters.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "io/hdf5_tree.h"
#include "io/keras_internal.h"
#include "keras_text_fixture.h"
#include "keras_weights_compare.h"
#include "nn/optimizer_rule.h"
#include "trainkit/io/keras.h"
#include "trainkit/io/training_state_file.h"
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

// The optimizer's variables in Keras' order (the slots as the rule lays them out in .keras files, then the
// optimizer-level variables) against the fixture's <name>/slot<i>, all of them.
void expect_keras_state(const Model& m, const std::string& name) {
  const auto slots = m.get_optimizer_slots();
  std::vector<Tensor> keras;
  for (const auto& [k, s] : nn::keras_slot_order(*m.optimizer(), slots.size())) keras.push_back(slots[k][s]);
  for (const float v : m.get_optimizer_variables()) keras.push_back(Tensor::from_vector<float>(Shape{}, {v}));
  for (size_t i = 0; i < keras.size(); ++i) {
    const std::string key = name + "/slot" + std::to_string(i);
    ASSERT_TRUE(fixture().count(key)) << key;
    EXPECT_LE(worst(keras[i], fixture().at(key)), 2e-6) << key;
  }
  EXPECT_FALSE(fixture().count(name + "/slot" + std::to_string(keras.size()))) << "Keras has more state";
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
  expect_keras_state(*m, c.name);
  EXPECT_EQ(m->optimizer()->iterations(), 3);
}

INSTANTIATE_TEST_SUITE_P(
    Keras, OptimizerRuleKeras,
    ::testing::Values(
        RuleCase{"adagrad", [] { return optimizers::Adagrad({.learning_rate = 0.1f}); }},
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
                 }},
        // Keras' defaults for SGD and RMSprop: no slot and velocity alone, in Keras and in trainkit alike.
        RuleCase{"sgd", [] { return optimizers::SGD({.learning_rate = 0.1f}); }},
        RuleCase{"rmsprop", [] { return optimizers::RMSprop({.learning_rate = 0.01f}); }},
        RuleCase{"sgd_nesterov",
                 [] { return optimizers::SGD({.learning_rate = 0.1f, .momentum = 0.9f, .nesterov = true}); }},
        RuleCase{"adam", [] { return optimizers::Adam({.learning_rate = 0.01f}); }},
        RuleCase{"adamw",
                 [] {
                   optimizers::AdamWOptions o;
                   o.learning_rate = 0.01f;
                   return optimizers::AdamW(o);
                 }},
        RuleCase{"rmsprop_centered_momentum",
                 [] { return optimizers::RMSprop({.learning_rate = 0.01f, .momentum = 0.5f, .centered = true}); }},
        RuleCase{"nadam", [] { return optimizers::Nadam({.learning_rate = 0.01f}); }},
        RuleCase{"nadam_clipnorm_decay",
                 [] {
                   optimizers::NadamOptions o;
                   o.learning_rate = 0.01f, o.beta_1 = 0.8f, o.beta_2 = 0.99f, o.clipnorm = 0.5f,
                   o.weight_decay = 0.01f;
                   return optimizers::Nadam(o);
                 }},
        RuleCase{"adafactor", [] { return optimizers::Adafactor({.learning_rate = 0.01f}); }},
        RuleCase{"adafactor_options",
                 [] {
                   return optimizers::Adafactor({.learning_rate = 0.5f,
                                                 .beta_2_decay = -0.5f,
                                                 .epsilon_2 = 0.01f,
                                                 .clip_threshold = 0.5f,
                                                 .relative_step = false});
                 }},
        RuleCase{"adam_cosine",
                 [] {
                   OptimizerPtr o = optimizers::Adam({.learning_rate = 0.01f});
                   o->set_learning_rate_schedule(optimizers::schedules::CosineDecay(
                       {.initial_learning_rate = 0.01f, .decay_steps = 4, .alpha = 0.1f}));
                   return o;
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
  auto nadam = make_model(optimizers::Nadam());  // two slots and u_product
  EXPECT_GT(nadam->memory_plan(6).optimizer_state, adadelta->memory_plan(6).optimizer_state);
  auto sgd = make_model(optimizers::SGD({.momentum = 0.9f}));  // one slot, like Adagrad
  const MemoryPlan one = adagrad->memory_plan(6), two = adadelta->memory_plan(6), ref = sgd->memory_plan(6);
  EXPECT_GT(one.optimizer_state, 0u);
  EXPECT_EQ(one.optimizer_state, ref.optimizer_state);
  EXPECT_EQ(two.optimizer_state, 2 * ref.optimizer_state);
  EXPECT_EQ(one.gradients, ref.gradients);
}

// Keras saved a model compiled with Nadam / Adafactor after three steps (u_product, factored moments, int32
// placeholders and all); trainkit reads the state, takes Keras' fourth step, and writes a file that Keras read back and
// took the fifth step from as its own run did (optimizers_keras_loaded.json, step 2 of gen_optimizers.py).
// adam_cosine: Adam(learning_rate=CosineDecay(0.01, decay_steps=4, alpha=0.1)): the config holds the schedule, the
// optimizer variables no learning_rate, and the fourth step runs at the schedule's rate for iteration 3.
struct OptimizerFile {
  std::string name, optimizer, schedule;  // schedule: "" for a fixed rate of 0.01
};
class OptimizerKerasFiles : public ::testing::TestWithParam<OptimizerFile> {};

TEST_P(OptimizerKerasFiles, KerasFileTrainsOnAndKerasReadsTrainkitsFile) {
  const std::string name = GetParam().name;
  const std::string dir = std::string(TK_SOURCE_DIR) + "/tests/fixtures/keras/optimizers/";
  std::unique_ptr<Model> m = models::load_model(dir + name + ".keras");
  ASSERT_TRUE(m->optimizer());
  EXPECT_EQ(optimizers::get(GetParam().optimizer)->name(), m->optimizer()->name());
  EXPECT_EQ(m->optimizer()->iterations(), 3);
  if (GetParam().schedule.empty()) {
    EXPECT_FALSE(m->optimizer()->learning_rate_schedule());
    EXPECT_FLOAT_EQ(m->optimizer()->learning_rate(), 0.01f);
  } else {
    const auto& schedule = m->optimizer()->learning_rate_schedule();
    ASSERT_TRUE(schedule);
    EXPECT_EQ(schedule->name(), GetParam().schedule);
    const float at3 = (1.0f - 0.1f) * 0.5f * (1.0f + std::cos(3.14159265f * 3.0f / 4.0f)) + 0.1f;
    EXPECT_NEAR(m->optimizer()->learning_rate(), 0.01f * at3, 1e-8);
  }
  expect_keras_state(*m, name);  // every variable of Keras' file, in Keras' order
  m->train_on_batch({fixture().at("x")}, {labels()});
  size_t i = 0;
  for (const LayerPtr& l : m->layers())
    for (const Weight& w : l->weights()) {
      const std::string key = name + "/step4/w" + std::to_string(i++);
      EXPECT_LE(worst(w.value, fixture().at(key)), 2e-6) << key;
    }
  const std::string fresh = ::testing::TempDir() + "/trainkit_" + name + ".keras";
  m->save(fresh);
  if (const char* out = std::getenv("TK_KERAS_FIXTURE_OUT")) {
    m->save(std::string(out) + "/trainkit_" + name + ".keras");
    GTEST_SKIP() << "wrote trainkit_" << name << ".keras into " << out;
  }
  std::ifstream in(dir + "optimizers_keras_loaded.json");
  ASSERT_TRUE(in) << "optimizers_keras_loaded.json is missing: run step 2 of gen_optimizers.py";
  std::stringstream ss;
  ss << in.rdbuf();
  const auto verdict = io::keras::json::parse(ss.str());
  EXPECT_EQ(verdict[name]["keras_loaded_trainkit_file"], "ok");
  EXPECT_EQ(verdict[name]["optimizer"], m->optimizer()->name());
  // The committed file Keras read is what trainkit writes today: config, weights and optimizer state.
  const auto committed = io::keras::read_archive(dir + "trainkit_" + name + ".keras");
  const auto now = io::keras::read_archive(fresh);
  EXPECT_EQ(io::keras::json::parse(committed.config), io::keras::json::parse(now.config));
  testing::expect_same_weights(io::read_h5_tree_image("committed", committed.weights.data(), committed.weights.size()),
                               io::read_h5_tree_image("now", now.weights.data(), now.weights.size()), 1e-6f);
}

INSTANTIATE_TEST_SUITE_P(Keras, OptimizerKerasFiles,
                         ::testing::Values(OptimizerFile{"nadam", "nadam", ""},
                                           OptimizerFile{"adafactor", "adafactor", ""},
                                           OptimizerFile{"adam_cosine", "adam", "CosineDecay"}));

// Every rule in the table, by its name: a .keras file and a training state (resume, backups) carry its class,
// hyperparameters, slots and optimizer variables, and the next step from either is the original's next step.
TEST(OptimizerRules, EveryRuleRoundTripsThroughKerasFilesAndTrainingStates) {
  for (const std::string& name : optimizers::names()) {
    SCOPED_TRACE(name);
    auto m = make_model(optimizers::get(name, 0.01f));
    m->train_on_batch({fixture().at("x")}, {labels()});
    m->train_on_batch({fixture().at("x")}, {labels()});
    const std::string path = ::testing::TempDir() + "/rule_" + name + ".keras";
    m->save(path);
    auto back = models::load_model(path);
    ASSERT_EQ(back->optimizer()->name(), m->optimizer()->name());
    EXPECT_EQ(back->optimizer()->iterations(), 2);
    EXPECT_EQ(nn::rule_state(*back->optimizer()).hyper, nn::rule_state(*m->optimizer()).hyper);
    EXPECT_EQ(back->optimizer()->config().weight_decay, m->optimizer()->config().weight_decay);
    auto resumed = make_model(optimizers::get(name, 0.01f));
    resumed->restore_training_state(io::decode_training_state(io::encode_training_state(m->training_state()), "state"));
    EXPECT_EQ(resumed->get_optimizer_variables(), m->get_optimizer_variables());
    EXPECT_EQ(back->get_optimizer_variables(), m->get_optimizer_variables());
    const auto a = m->get_optimizer_slots(), b = back->get_optimizer_slots(), c = resumed->get_optimizer_slots();
    for (size_t k = 0; k < a.size(); ++k)
      for (size_t s = 0; s < a[k].size(); ++s) {
        // A slot Keras does not make for these hyperparameters is not in the file: it comes back at its initial value.
        EXPECT_EQ(worst(c[k][s], a[k][s]), 0.0);
        const auto order = nn::keras_slot_order(*m->optimizer(), a.size());
        if (std::find(order.begin(), order.end(), std::make_pair(k, s)) != order.end())
          EXPECT_EQ(worst(b[k][s], a[k][s]), 0.0);
      }
    for (Model* x : std::vector<Model*>{m.get(), back.get(), resumed.get()})
      x->train_on_batch({fixture().at("x")}, {labels()});
    for (size_t l = 0; l < m->layers().size(); ++l)
      for (size_t w = 0; w < m->layers()[l]->weights().size(); ++w) {
        EXPECT_EQ(worst(back->layers()[l]->weights()[w].value, m->layers()[l]->weights()[w].value), 0.0);
        EXPECT_EQ(worst(resumed->layers()[l]->weights()[w].value, m->layers()[l]->weights()[w].value), 0.0);
      }
  }
}

// Nadam's u_product is Keras' product of u_1 .. u_t, advanced once per step.
TEST(OptimizerRules, NadamAdvancesItsOptimizerVariableOncePerStep) {
  auto m = make_model(optimizers::Nadam({.beta_1 = 0.8f}));
  EXPECT_EQ(m->get_optimizer_variables(), std::vector<float>{1.0f});
  double want = 1.0;
  for (int t = 1; t <= 3; ++t) {
    m->train_on_batch({fixture().at("x")}, {labels()});
    want *= 0.8 * (1.0 - 0.5 * std::pow(0.96, t));
    EXPECT_NEAR(m->get_optimizer_variables().at(0), want, 1e-6) << t;
  }
  EXPECT_THROW(m->set_optimizer_variables({}), InvalidArgument);
}

// AdamW without decay is written as 0 (Keras' AdamW needs a number), not null, and so read back as 0, not 0.004.
TEST(OptimizerRules, AdamWWithoutDecayStaysWithoutDecay) {
  optimizers::AdamWOptions o;
  o.weight_decay = 0.0f;
  auto m = make_model(optimizers::AdamW(o));
  const std::string path = ::testing::TempDir() + "/adamw0.keras";
  m->save(path);
  EXPECT_EQ(models::load_model(path)->optimizer()->config().weight_decay, 0.0f);
}

// A rule missing a piece is an error the first time the table is read, never a silent default.
TEST(OptimizerRules, AnIncompleteRuleIsAnError) {
  nn::OptimizerRule both = nn::adagrad_rule();
  both.fused = graph::Op::SgdUpdate;  // an update in ops and a fused op
  EXPECT_THROW(nn::check_rule(both), Error);
  nn::OptimizerRule fused = nn::sgd_rule();
  fused.configure = nullptr;  // a fused op whose config nobody fills
  EXPECT_THROW(nn::check_rule(fused), Error);
  nn::OptimizerRule neither = nn::lion_rule();
  neither.update = nullptr;
  EXPECT_THROW(nn::check_rule(neither), Error);
  for (const nn::OptimizerRule* r : nn::all_rules()) EXPECT_NO_THROW(nn::check_rule(*r)) << r->keras_class;
}

TEST(OptimizerRules, ByNameAndBadHyperparameters) {
  EXPECT_EQ(optimizers::get("adagrad")->name(), "Adagrad");
  EXPECT_EQ(optimizers::get("nadam")->name(), "Nadam");
  EXPECT_EQ(optimizers::get("Adafactor")->name(), "Adafactor");
  EXPECT_EQ(optimizers::get("adamw")->config().weight_decay, 0.004f);  // AdamW's Keras default
  EXPECT_THROW(optimizers::Nadam({.beta_2 = 1.0f}), InvalidArgument);
  EXPECT_THROW(optimizers::Adafactor({.clip_threshold = 0.0f}), InvalidArgument);
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
