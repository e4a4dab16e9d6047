// Learning-rate schedules against Keras 3 (tests/fixtures/keras/schedules.json, made by gen_schedules.py), and
// an optimizer following one: the rate a step uses is the schedule's value at the optimizer's iterations.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "io/keras_internal.h"
#include "trainkit/trainkit.h"

namespace {
namespace s = tk::optimizers::schedules;

std::map<std::string, s::LearningRateSchedulePtr> the_schedules() {
  return {
      {"exponential", s::ExponentialDecay({.initial_learning_rate = 0.1f, .decay_steps = 100, .decay_rate = 0.96f})},
      {"exponential_staircase",
       s::ExponentialDecay({.initial_learning_rate = 0.1f, .decay_steps = 100, .decay_rate = 0.5f, .staircase = true})},
      {"piecewise", s::PiecewiseConstantDecay({100, 1000}, {1.0f, 0.5f, 0.1f})},
      {"polynomial",
       s::PolynomialDecay(
           {.initial_learning_rate = 0.1f, .decay_steps = 1000, .end_learning_rate = 0.001f, .power = 0.5f})},
      {"polynomial_cycle",
       s::PolynomialDecay(
           {.initial_learning_rate = 0.1f, .decay_steps = 1000, .end_learning_rate = 0.001f, .cycle = true})},
      {"inverse_time", s::InverseTimeDecay({.initial_learning_rate = 0.1f, .decay_steps = 100, .decay_rate = 0.5f})},
      {"inverse_time_staircase",
       s::InverseTimeDecay({.initial_learning_rate = 0.1f, .decay_steps = 100, .decay_rate = 0.5f, .staircase = true})},
      {"cosine", s::CosineDecay({.initial_learning_rate = 0.1f, .decay_steps = 1000, .alpha = 0.1f})},
      {"cosine_warmup",
       s::CosineDecay(
           {.initial_learning_rate = 0.0f, .decay_steps = 1000, .warmup_target = 0.1f, .warmup_steps = 100})},
  };
}

}  // namespace

TEST(Schedules, MatchKeras3) {
  std::ifstream in(std::string(TK_SOURCE_DIR) + "/tests/fixtures/keras/schedules.json");
  ASSERT_TRUE(in);
  const nlohmann::json fx = nlohmann::json::parse(in);
  const auto steps = fx["steps"].get<std::vector<int64_t>>();
  const auto all = the_schedules();
  ASSERT_EQ(all.size(), fx["values"].size());
  for (const auto& [name, schedule] : all) {
    const auto expected = fx["values"][name].get<std::vector<double>>();
    for (size_t i = 0; i < steps.size(); ++i) {
      const float got = (*schedule)(steps[i]);
      // float32 arithmetic on both sides; pow/cos may differ in the last place.
      EXPECT_NEAR(got, expected[i], 4e-7 * std::abs(expected[i]) + 1e-9)
          << name << " at step " << steps[i] << " (Keras " << fx["keras_version"].get<std::string>() << ")";
    }
  }
}

// The schedule as a .keras config holds it (Keras' serialize()): read, it computes Keras' values; written back, it is
// the same object Keras wrote, key for key.
TEST(Schedules, KerasConfigsReadAndWriteAsKerasDoes) {
  std::ifstream in(std::string(TK_SOURCE_DIR) + "/tests/fixtures/keras/schedules.json");
  ASSERT_TRUE(in);
  const nlohmann::json fx = nlohmann::json::parse(in);
  const auto steps = fx["steps"].get<std::vector<int64_t>>();
  ASSERT_EQ(fx["configs"].size(), fx["values"].size());
  for (const auto& [name, config] : fx["configs"].items()) {
    const s::LearningRateSchedulePtr schedule = tk::io::keras::schedule_from_json(config, "schedules.json");
    EXPECT_EQ(schedule->name(), config["class_name"]) << name;
    const auto expected = fx["values"][name].get<std::vector<double>>();
    for (size_t i = 0; i < steps.size(); ++i)
      EXPECT_NEAR((*schedule)(steps[i]), expected[i], 4e-7 * std::abs(expected[i]) + 1e-9)
          << name << " at step " << steps[i];
    EXPECT_EQ(tk::io::keras::schedule_to_json(*schedule, "test"), config) << name;
  }
}

TEST(Schedules, KerasConfigsTrainkitLacksAreRefusedByName) {
  using tk::io::keras::schedule_from_json;
  const auto restarts = nlohmann::json::parse(
      R"({"module": "keras.optimizers.schedules", "class_name": "CosineDecayRestarts", "config": {
          "initial_learning_rate": 0.001, "first_decay_steps": 10, "t_mul": 2.0, "m_mul": 1.0, "alpha": 0.0,
          "name": "SGDRDecay"}, "registered_name": null})");
  EXPECT_THROW(
      {
        try {
          schedule_from_json(restarts, "m.keras");
        } catch (const tk::Unsupported& e) {
          EXPECT_NE(std::string(e.what()).find("m.keras"), std::string::npos) << e.what();
          EXPECT_NE(std::string(e.what()).find("CosineDecayRestarts"), std::string::npos) << e.what();
          throw;
        }
      },
      tk::Unsupported);
  auto custom = restarts;
  custom["class_name"] = "WarmupThenDecay";
  custom["registered_name"] = "my_package>WarmupThenDecay";
  EXPECT_THROW(schedule_from_json(custom, "m.keras"), tk::Unsupported);
  auto bad = nlohmann::json::parse(
      R"({"class_name": "ExponentialDecay", "config": {"initial_learning_rate": 0.1, "decay_steps": 0,
          "decay_rate": 0.5}})");
  EXPECT_THROW(schedule_from_json(bad, "m.keras"), tk::FormatError);  // decay_steps must be > 0
  bad["config"]["decay_steps"] = 2.5;
  EXPECT_THROW(schedule_from_json(bad, "m.keras"), tk::FormatError);
  bad["config"]["decay_steps"] = 10;
  bad["config"].erase("decay_rate");
  EXPECT_THROW(schedule_from_json(bad, "m.keras"), tk::FormatError);
  bad["config"]["decay_rate"] = 0.5;
  EXPECT_NO_THROW(schedule_from_json(bad, "m.keras"));
  // A schedule of the caller's own has no Keras config: saving it is an error, not a silent fixed rate.
  struct Mine final : s::LearningRateSchedule {
    float operator()(int64_t) const override { return 0.1f; }
    std::string name() const override { return "Mine"; }
  };
  EXPECT_THROW(tk::io::keras::schedule_to_json(Mine{}, "save"), tk::Unsupported);
}

TEST(Schedules, OptimizerFollowsTheScheduleAndRefusesManualRates) {
  auto opt = tk::optimizers::SGD();
  opt->set_learning_rate_schedule(s::PiecewiseConstantDecay({1}, {0.25f, 0.125f}));
  tk::utils::set_random_seed(1);
  tk::Sequential m({tk::layers::Input({1}), tk::layers::Dense(1, "linear", {.use_bias = false})});
  m.compile(opt, "mse");
  // x = 1, y = 0: the gradient of (w x - y)^2 is 2w, so a step makes w <- w (1 - 2 lr) (exact in float32 here).
  m.set_weights({tk::Tensor::from_vector<float>({1, 1}, {1.0f})});
  const tk::Tensor x = tk::Tensor::from_vector<float>({1, 1}, {1.0f});
  const tk::Tensor y = tk::Tensor::from_vector<float>({1, 1}, {0.0f});
  std::vector<float> w;
  for (int i = 0; i < 4; ++i) {
    m.train_on_batch({x}, {y});
    w.push_back(m.get_weights()[0].data<float>()[0]);
  }
  // Steps 0 and 1 (iterations <= boundary 1) use 0.25, steps 2 and 3 use 0.125.
  EXPECT_EQ(w, (std::vector<float>{0.5f, 0.25f, 0.1875f, 0.140625f}));
  EXPECT_FLOAT_EQ(opt->learning_rate(), 0.125f);
  EXPECT_THROW(opt->set_learning_rate(0.1f), tk::InvalidArgument);
  opt->set_learning_rate_schedule(nullptr);
  EXPECT_NO_THROW(opt->set_learning_rate(0.1f));
  EXPECT_THROW(s::ExponentialDecay({.initial_learning_rate = 0.1f, .decay_steps = 0}), tk::InvalidArgument);
  EXPECT_THROW(s::PiecewiseConstantDecay({1, 2}, {1.0f}), tk::InvalidArgument);
}
