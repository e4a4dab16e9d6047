// Models called like layers (tk::call_model; Keras' `base_model(inputs, training=False)`, the fine-tuning pattern):
// Keras-made files with a nested base load, predict, evaluate and train as Keras does (tests/fixtures/keras/nested,
// gen_nested.py); a frozen base keeps its weights and a base called with training=False its moving statistics; the
// file trainkit saves nests the base again (Keras loaded it: keras_loaded_trainkit_nested.json); and the C++ API.
#include <gtest/gtest.h>

#include <sstream>

#include "fixture.h"
#include "keras_fixture_files.h"
#include "trainkit/io/keras.h"
#include "trainkit/nn/model.h"

namespace tk {
namespace {

using testing::expect_near_keras;
using testing::max_abs_diff;
using testing::rel;

const std::string kDir = std::string(TK_SOURCE_DIR) + "/tests/fixtures/keras/nested/";

// Every weight of the nested base's layers, copied.
std::map<std::string, Tensor> base_weights(const Model& m) {
  std::map<std::string, Tensor> out;
  for (const LayerPtr& l : m.layers())
    if (m.nested_model_of(*l))
      for (const Weight& w : l->weights()) out[w.name] = w.value.clone();
  return out;
}

class NestedModel : public ::testing::TestWithParam<std::string> {};

TEST_P(NestedModel, MatchesKerasTrainsAndSavesNested) {
  const std::string name = GetParam();
  auto r = testing::load_fixture(kDir + name + "_expect.txt");
  std::unique_ptr<Model> model = models::load_model(kDir + name + ".keras");
  ASSERT_EQ(model->nested_models().size(), 1u);
  EXPECT_EQ(model->nested_models()[0]->name(), "base");
  std::ostringstream summary;
  model->summary(summary);
  EXPECT_NE(summary.str().find(name == "sequential_base" ? "base (Sequential)" : "base (Functional)"),
            std::string::npos)
      << summary.str();

  expect_near_keras(model->predict(r["x"], 8), r["predict"], 1e-5, name + " predict");
  EXPECT_LE(rel(model->evaluate(r["x"], r["y"], {.batch_size = 8}).get("loss"), r["loss"].data<float>()[0]), 1e-5);

  const std::map<std::string, Tensor> before = base_weights(*model);
  History h = model->fit(r["x"], r["y"], {.batch_size = 8, .epochs = 1, .verbose = 0, .shuffle = false});
  EXPECT_LE(rel(h.history.at("loss")[0], r["epoch_loss"].data<float>()[0]), 1e-5) << name;
  const Tensor after = model->predict(r["x"], 8);
  expect_near_keras(after, r["predict_after_fit"], 1e-5, name + " predict after fit");
  // Frozen: nothing in the base moved. Unfrozen: everything did, the moving statistics too (Keras 3 runs the base in
  // fit's training mode over the call's recorded training=False; gen_nested.py).
  for (const auto& [w, value] : base_weights(*model)) {
    const float moved = max_abs_diff(value, before.at(w));
    if (name == "unfrozen_base")
      EXPECT_GT(moved, 0.0f) << w;
    else
      EXPECT_EQ(moved, 0.0f) << w;
  }

  // Saved: the base nested again, with its call's training=False; loaded back, the same predictions.
  std::unique_ptr<Model> back = testing::saved_and_loaded(*model);
  ASSERT_EQ(back->nested_models().size(), 1u);
  EXPECT_EQ(max_abs_diff(back->predict(r["x"], 8), after), 0.0f);
  const io::keras::json config = io::keras::model_to_json(*model);
  const io::keras::json& nested = config["config"]["layers"][1];
  EXPECT_EQ(nested["class_name"], name == "sequential_base" ? "Sequential" : "Functional");
  EXPECT_EQ(nested["config"]["trainable"], name == "unfrozen_base");
  if (name == "sequential_base")
    EXPECT_FALSE(nested["inbound_nodes"][0]["kwargs"].contains("training"));
  else
    EXPECT_EQ(nested["inbound_nodes"][0]["kwargs"]["training"], false);
  if (const char* out = std::getenv("TK_KERAS_FIXTURE_OUT"))
    testing::write_trainkit_fixture(*model, r["x"], out, "trainkit_" + name, "tests/test_nested_model.cpp",
                                    "gen_nested.py");
  const io::keras::json v = testing::keras_verdict(kDir, "keras_loaded_trainkit_nested.json", "gen_nested.py", name);
  EXPECT_EQ(v["trainable_weights"], name == "unfrozen_base" ? 8 : 2);  // the head's kernel and bias when frozen
  testing::expect_saves_as_committed(*model, kDir + "trainkit_" + name + ".keras");
}

INSTANTIATE_TEST_SUITE_P(Keras, NestedModel, ::testing::Values("frozen_base", "unfrozen_base", "sequential_base"),
                         [](const auto& info) { return info.param; });

std::shared_ptr<Model> small_base() {
  KerasTensor in = Input({4});
  KerasTensor h = layers::BatchNormalization()(layers::Dense(6, "relu")(in));
  return std::make_shared<Model>(in, h, "small_base");
}

TEST(NestedModelApi, CallsTheBaseOnNewTensorsAndSharesItsWeights) {
  clear_session();
  std::shared_ptr<Model> base = small_base();
  KerasTensor in = Input({4});
  KerasTensor out = layers::Dense(2)(call_model(base, in, false));
  Model model(in, out, "head");
  // Keras' order: the input, the base's layers in its order, then the head.
  ASSERT_EQ(model.layers().size(), 4u);
  EXPECT_EQ(model.layers()[1]->name, base->layers()[1]->name);
  EXPECT_EQ(model.nested_model_of(*model.layers()[1]), base.get());
  EXPECT_EQ(model.nested_model_of(*model.layers()[3]), nullptr);
  EXPECT_EQ(model.count_params(), base->count_params() + 6 * 2 + 2);
  // The same layer objects: weights set through the outer model are the base's.
  std::vector<Tensor> w = model.get_weights();
  w[0].data<float>()[0] = 0.25f;
  model.set_weights(w);
  EXPECT_EQ(base->get_weights()[0].data<float>()[0], 0.25f);
}

TEST(NestedModelApi, BadCallsAreClearErrors) {
  clear_session();
  std::shared_ptr<Model> base = small_base();
  EXPECT_THROW(call_model(base, Input({5})), InvalidArgument);  // the base takes (None, 4)
  EXPECT_THROW(call_model(base, std::vector<KerasTensor>{Input({4}), Input({4})}), InvalidArgument);
  KerasTensor in = Input({4});
  auto middle = std::make_shared<Model>(in, call_model(base, in), "middle");
  EXPECT_THROW(call_model(middle, Input({4})), Unsupported);  // one level of nesting
}

}  // namespace
}  // namespace tk
