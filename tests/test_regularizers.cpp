// Keras' weight and activity regularizers (issue 31) against Keras 3.15.1 itself
// (tests/fixtures/keras/regularizers/gen_regularizers.py): small models compiled and saved by Keras with
// kernel/bias/recurrent/depthwise/pointwise/embeddings/gamma/beta/alpha and activity regularizers and an
// ActivityRegularization layer; trainkit's evaluate loss (the compiled loss plus every penalty) and three training
// steps must be Keras'. Then the C++ API, saving, frozen layers, and bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "io/keras_internal.h"
#include "keras_text_fixture.h"
#include "trainkit/core/error.h"
#include "trainkit/io/keras.h"
#include "trainkit/nn/layers.h"
#include "trainkit/nn/model.h"
#include "trainkit/nn/models.h"
#include "trainkit/nn/optimizers.h"
#include "trainkit/nn/regularizers.h"

namespace tk {
namespace {

namespace fs = std::filesystem;
const std::string kDir = TK_SOURCE_DIR "/tests/fixtures/keras/regularizers/";
using json = io::keras::json;

const std::map<std::string, Tensor>& fx() {
  static const auto f = testing::load_keras_text(kDir + "regularizers_expect.txt");
  return f;
}
const Tensor& at(const std::string& key) {
  auto it = fx().find(key);
  if (it == fx().end()) throw std::runtime_error("no fixture record " + key);
  return it->second;
}
float scalar(const std::string& key) { return at(key).data<float>()[0]; }

struct Case {
  std::unique_ptr<Model> model;
  Tensor x, y;
};
Case load(const std::string& name) {
  Case c{models::load_model(kDir + name + ".keras"), at(name + "/x"), at(name + "/y")};
  if (name == "sequence") c.x = c.x.to(DType::i32);                   // token ids
  if (name == "dense" || name == "frozen") c.y = c.y.to(DType::i32);  // class ids
  return c;
}

void expect_log(double got, const std::string& key) {
  EXPECT_NEAR(got, scalar(key), 2e-5 * std::max(1.0f, std::abs(scalar(key)))) << key;
}

void expect_keras_weights(const Model& model, const std::string& name) {
  const std::vector<Tensor> w = model.get_weights();
  for (size_t i = 0; i < w.size(); ++i) {
    const Tensor& want = at(name + "/weight/" + std::to_string(i));
    ASSERT_EQ(w[i].numel(), want.numel()) << name << " weight " << i;
    for (int64_t k = 0; k < want.numel(); ++k) {
      const float b = want.data<float>()[k];
      EXPECT_NEAR(w[i].data<float>()[k], b, 2e-5 * std::max(std::abs(b), 0.1f))
          << name << " weight " << i << "[" << k << "]";
    }
  }
}

const char* const kCases[] = {"dense", "conv", "sequence", "frozen"};

TEST(Regularizers, EvaluateAddsEveryPenaltyToTheLossAsKeras) {
  for (const char* name : kCases) {
    SCOPED_TRACE(name);
    Case c = load(name);
    const Logs logs = c.model->evaluate(c.x, c.y, {.batch_size = 4});
    expect_log(logs.get("loss"), std::string(name) + "/eval/loss");
    // The fixture's unregularized loss is clearly below: the penalties are what the test sees.
    EXPECT_GT(scalar(std::string(name) + "/eval/loss") - scalar(std::string(name) + "/eval_unregularized/loss"), 0.05f);
  }
}

TEST(Regularizers, FitMinimizesAndReportsThePenalizedLossAsKeras) {
  for (const char* name : kCases) {
    SCOPED_TRACE(name);
    Case c = load(name);
    FitOptions o;
    o.batch_size = 4;  // 10 rows: the last batch has 2 (activity penalties divide by 2 there)
    o.epochs = 1;
    o.verbose = 0;
    o.shuffle = false;
    const History h = c.model->fit(c.x, c.y, o);
    expect_log(h.history.at("loss").back(), std::string(name) + "/fit/loss");
    expect_keras_weights(*c.model, name);
  }
}

// Removing the regularizers from a loaded model gives Keras' compiled loss alone; predictions never change.
TEST(Regularizers, WithoutThemTheLossIsTheCompiledLossAndPredictIsUnchanged) {
  Case c = load("dense");
  const Tensor before = c.model->predict(c.x);
  for (const LayerPtr& l : c.model->layers()) {
    l->regularizers.clear();
    l->activity_regularizer.reset();
  }
  expect_log(c.model->evaluate(c.x, c.y, {.batch_size = 4}).get("loss"), "dense/eval_unregularized/loss");
  const Tensor after = c.model->predict(c.x);
  for (int64_t i = 0; i < before.numel(); ++i) EXPECT_EQ(before.data<float>()[i], after.data<float>()[i]);
}

// The C++ API: the penalty of a hand-set regularizer is l1 * sum|w| + l2 * sum w^2 (weights) and divided by the batch
// (activities), computed here from the weights and the predictions.
TEST(Regularizers, TheCppApiAddsThePenaltyKerasDefines) {
  utils::set_random_seed(3);
  auto dense = layers::Dense(4);
  Sequential model({layers::Input({3}), dense});
  model.compile(optimizers::SGD({.learning_rate = 0.0f}), "mse");
  Tensor x(Shape{5, 3}, DType::f32), y(Shape{5, 4}, DType::f32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = 0.3f * static_cast<float>(i % 7) - 0.8f;
  for (int64_t i = 0; i < y.numel(); ++i) y.data<float>()[i] = 0.1f * static_cast<float>(i % 5);
  const double plain = model.evaluate(x, y, {.batch_size = 5}).get("loss");
  dense->regularizers["kernel"] = regularizers::L1L2(0.01f, 0.02f);
  dense->regularizers["bias"] = regularizers::L2(0.5f);  // the bias is zeros: adds 0
  dense->activity_regularizer = regularizers::L1(0.03f);
  model.compile(optimizers::SGD({.learning_rate = 0.0f}), "mse");  // as Keras' trainable: read when compiled
  const Tensor& kernel = dense->weights()[0].value;
  double l1 = 0.0, l2 = 0.0, activity = 0.0;
  for (int64_t i = 0; i < kernel.numel(); ++i) {
    l1 += std::abs(kernel.data<float>()[i]);
    l2 += double(kernel.data<float>()[i]) * kernel.data<float>()[i];
  }
  const Tensor pred = model.predict(x);
  for (int64_t i = 0; i < pred.numel(); ++i) activity += std::abs(pred.data<float>()[i]);
  const double want = plain + 0.01 * l1 + 0.02 * l2 + 0.03 * activity / 5.0;
  EXPECT_NEAR(model.evaluate(x, y, {.batch_size = 5}).get("loss"), want, 1e-5 * want);
  // The gradient reaches the weights: a step with the rate turned up moves a kernel whose data gradient is zero.
  dense->regularizers.clear();
  dense->activity_regularizer.reset();
  auto zero_data = layers::Dense(2, "linear", {.kernel_initializer = "ones"});
  Sequential model2({layers::Input({3}), zero_data});
  zero_data->regularizers["kernel"] = regularizers::L2(0.1f);  // d/dw = 0.2 w
  model2.compile(optimizers::SGD({.learning_rate = 0.5f}), "mse");
  const Tensor zeros_x = Tensor::zeros(Shape{2, 3}), zeros_y = Tensor::zeros(Shape{2, 2});
  model2.train_on_batch({zeros_x}, {zeros_y});
  for (int64_t i = 0; i < 6; ++i) EXPECT_NEAR(zero_data->weights()[0].value.data<float>()[i], 0.9f, 1e-6);
}

TEST(Regularizers, ActivityRegularizationPassesItsInputOn) {
  auto reg = layers::ActivityRegularization(0.1f, 0.2f);
  Sequential model({layers::Input({2}), reg});
  model.compile(optimizers::SGD({.learning_rate = 0.1f}), "mse");
  Tensor x(Shape{2, 2}, DType::f32);
  for (int64_t i = 0; i < 4; ++i) x.data<float>()[i] = static_cast<float>(i) - 1.5f;  // -1.5 -0.5 0.5 1.5
  const Tensor p = model.predict(x);
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(p.data<float>()[i], x.data<float>()[i]);
  // mse(x, x) = 0; penalty (0.1 * 4 + 0.2 * 5) / 2 = 0.7
  EXPECT_NEAR(model.evaluate(x, x, {.batch_size = 2}).get("loss"), 0.7, 1e-6);
}

// A saved model carries Keras' regularizer objects as Keras wrote them, and evaluates the same after a reload.
TEST(Regularizers, SavedFilesCarryKerasObjects) {
  const fs::path dir = fs::temp_directory_path() / ("tk_regularizers_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const char* name : {"dense", "conv", "sequence"}) {
    SCOPED_TRACE(name);
    Case c = load(name);
    const std::string path = (dir / (std::string(name) + ".keras")).string();
    c.model->save(path);
    auto layers_of = [](const std::string& file) {
      const io::keras::Archive a = io::keras::read_archive(file, false);
      return io::keras::parse_json(a.config, file).at("config").at("layers");
    };
    const auto keras_layers = layers_of(kDir + name + ".keras"), ours = layers_of(path);
    ASSERT_EQ(keras_layers.size(), ours.size());
    int compared = 0;
    for (size_t i = 0; i < ours.size(); ++i)
      for (const auto& [key, value] : keras_layers[i].at("config").items()) {
        const bool regularizer = key.size() > 12 && key.compare(key.size() - 12, 12, "_regularizer") == 0;
        if (!regularizer &&
            !(keras_layers[i].at("class_name") == "ActivityRegularization" && (key == "l1" || key == "l2")))
          continue;
        if (value.is_null()) {
          EXPECT_TRUE(!ours[i].at("config").contains(key) || ours[i].at("config").at(key).is_null()) << key;
          continue;
        }
        // Keras writes some factors as float32 widened (0.019999999552965164), trainkit the shortest decimal (0.02)
        const auto& mine = ours[i].at("config").at(key);
        if (value.is_object()) {
          EXPECT_EQ(mine.at("class_name"), value.at("class_name")) << key;
          EXPECT_EQ(mine.at("module"), value.at("module")) << key;
          for (const auto& [k, v] : value.at("config").items())
            EXPECT_EQ(mine.at("config").at(k).get<float>(), v.get<float>()) << key << "." << k;
          EXPECT_EQ(mine.at("config").size(), value.at("config").size()) << key;
        } else {
          EXPECT_EQ(mine.get<float>(), value.get<float>()) << key;
        }
        ++compared;
      }
    EXPECT_GE(compared, 3);
    auto reloaded = models::load_model(path);
    EXPECT_NEAR(reloaded->evaluate(c.x, c.y, {.batch_size = 4}).get("loss"),
                c.model->evaluate(c.x, c.y, {.batch_size = 4}).get("loss"), 1e-6);
  }
  fs::remove_all(dir);
}

// A regularizer trainkit lacks, a damaged factor, or one inside a wrapper: one error naming the layer and the option.
TEST(Regularizers, FileRegularizersTrainkitLacksAreClearErrors) {
  const json dense = {{"module", "keras.layers"},
                      {"class_name", "Dense"},
                      {"config", {{"name", "d"}, {"units", 2}}},
                      {"registered_name", nullptr}};
  auto error_of = [](const json& layer) -> std::string {
    try {
      io::keras::layer_from_json(layer, "m.keras");
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  json orthogonal = dense;
  orthogonal["config"]["kernel_regularizer"] = {{"class_name", "OrthogonalRegularizer"},
                                                {"config", {{"factor", 0.01}}}};
  EXPECT_NE(error_of(orthogonal).find("layer 'd' (Dense): option 'kernel_regularizer'"), std::string::npos)
      << error_of(orthogonal);
  json negative = dense;
  negative["config"]["bias_regularizer"] = {{"class_name", "L2"}, {"config", {{"l2", -1.0}}}};
  EXPECT_NE(error_of(negative).find("'bias_regularizer'"), std::string::npos) << error_of(negative);
  json named = dense;
  named["config"]["kernel_regularizer"] = "l2";  // Keras' short name: L2(0.01)
  EXPECT_NEAR(io::keras::layer_from_json(named, "m.keras")->regularizers.at("kernel").l2, 0.01f, 1e-9f);
  const json wrapped = {{"module", "keras.layers"},
                        {"class_name", "TimeDistributed"},
                        {"config", {{"name", "td"}, {"layer", named}}},
                        {"registered_name", nullptr}};
  EXPECT_NE(error_of(wrapped).find("wrapped layer 'd' has a regularizer"), std::string::npos) << error_of(wrapped);
}

TEST(Regularizers, BadValuesAreClearErrors) {
  EXPECT_THROW(regularizers::L2(-0.1f), InvalidArgument);
  EXPECT_THROW(regularizers::L1(std::nanf("")), InvalidArgument);
  auto dense = layers::Dense(2);
  Sequential model({layers::Input({3}), dense});
  dense->regularizers["kernal"] = regularizers::L2(0.1f);
  model.compile(optimizers::SGD({.learning_rate = 0.1f}), "mse");
  const Tensor x = Tensor::full(Shape{1, 3}, 1.0f), y = Tensor::zeros(Shape{1, 2});
  try {
    model.evaluate(x, y);
    FAIL() << "an unknown regularizer key was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("kernal"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(dense->name), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tk
