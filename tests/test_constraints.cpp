// Keras' weight constraints (issue 31) against Keras 3.15.1 itself (tests/fixtures/keras/constraints/
// gen_constraints.py): small models compiled and saved by Keras with kernel/bias/depthwise/pointwise/embeddings/
// recurrent/gamma/beta/alpha constraints (NonNeg, MaxNorm, UnitNorm, MinMaxNorm over one axis and several); three
// training steps of trainkit must leave Keras' weights (the fused SGD and Adam updates, grouped per layer, and Adagrad
// written in the general ops). Then the C++ API, saving, frozen layers, and bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>

#include "io/keras_internal.h"
#include "keras_text_fixture.h"
#include "trainkit/core/error.h"
#include "trainkit/io/keras.h"
#include "trainkit/nn/constraints.h"
#include "trainkit/nn/layers.h"
#include "trainkit/nn/model.h"
#include "trainkit/nn/models.h"
#include "trainkit/nn/optimizers.h"

namespace tk {
namespace {

namespace fs = std::filesystem;
const std::string kDir = TK_SOURCE_DIR "/tests/fixtures/keras/constraints/";
const testing::KerasTextFixture fx(kDir + "constraints_expect.txt");
using json = io::keras::json;

struct Case {
  std::unique_ptr<Model> model;
  Tensor x, y;
};
Case load(const std::string& name) {
  Case c{models::load_model(kDir + name + ".keras"), fx.at(name + "/x"), fx.at(name + "/y")};
  if (name == "sequence") c.x = c.x.to(DType::i32);                   // token ids
  if (name == "dense" || name == "frozen") c.y = c.y.to(DType::i32);  // class ids
  return c;
}

History fit_three_steps(Model& model, const Tensor& x, const Tensor& y) {
  FitOptions o;
  o.batch_size = 4;  // 10 rows: three steps
  o.epochs = 1;
  o.verbose = 0;
  o.shuffle = false;
  return model.fit(x, y, o);
}

// The largest difference from Keras' weights after the three steps, relative to max(|keras|, 0.1).
float worst_weight_error(const Model& model, const std::string& name) {
  const std::vector<Tensor> w = model.get_weights();
  float worst = 0.0f;
  for (size_t i = 0; i < w.size(); ++i) {
    const Tensor& want = fx.at(name + "/weight/" + std::to_string(i));
    if (w[i].numel() != want.numel()) return INFINITY;
    for (int64_t k = 0; k < want.numel(); ++k) {
      const float b = want.data<float>()[k];
      worst = std::max(worst, std::abs(w[i].data<float>()[k] - b) / std::max(std::abs(b), 0.1f));
    }
  }
  return worst;
}

const char* const kCases[] = {"dense", "conv", "sequence", "frozen"};

TEST(Constraints, FitConstrainsEveryWeightAfterItsUpdateAsKeras) {
  for (const char* name : kCases) {
    SCOPED_TRACE(name);
    Case c = load(name);
    const History h = fit_three_steps(*c.model, c.x, c.y);
    const float loss = fx.scalar(std::string(name) + "/fit/loss");
    EXPECT_NEAR(h.history.at("loss").back(), loss, 2e-5 * std::max(1.0f, std::abs(loss)));
    EXPECT_LT(worst_weight_error(*c.model, name), 3e-5f);
  }
}

// The same files with their constraints removed end far from Keras' weights: the constraints are what the test above
// sees (and, were they applied before the update instead of after it, the weights would not be Keras' either).
TEST(Constraints, WithoutThemTheWeightsAreNotKeras) {
  for (const char* name : {"dense", "conv", "sequence"}) {
    SCOPED_TRACE(name);
    Case c = load(name);
    for (const LayerPtr& l : c.model->layers()) l->constraints.clear();
    fit_three_steps(*c.model, c.x, c.y);
    EXPECT_GT(worst_weight_error(*c.model, name), 1e-2f);
  }
}

// The loaded objects are Keras': class, bounds, rate and axes, by key.
TEST(Constraints, KerasFilesCarryTheirObjects) {
  Case c = load("conv");
  const Layer& conv = *c.model->get_layer("conv2d");
  ASSERT_EQ(conv.constraints.count("kernel"), 1u);
  const Constraint& k = conv.constraints.at("kernel");
  EXPECT_EQ(k.kind, Constraint::Kind::max_norm);
  EXPECT_FLOAT_EQ(k.max_value, 0.3f);
  EXPECT_EQ(k.axis, (std::vector<int>{0, 1, 2}));
  const Layer& dense = *c.model->get_layer("dense");
  const Constraint& m = dense.constraints.at("kernel");
  EXPECT_EQ(m.kind, Constraint::Kind::min_max_norm);
  EXPECT_FLOAT_EQ(m.min_value, 0.2f);
  EXPECT_FLOAT_EQ(m.max_value, 0.6f);
  EXPECT_FLOAT_EQ(m.rate, 0.7f);
  Case s = load("sequence");
  EXPECT_EQ(s.model->get_layer("lstm")->constraints.at("recurrent").kind, Constraint::Kind::unit_norm);
  EXPECT_EQ(s.model->get_layer("p_re_lu")->constraints.at("alpha").kind, Constraint::Kind::non_neg);
}

// Saved and loaded again: the same objects (and the file Keras reads holds Keras' JSON for them); the reloaded model
// trains to the same weights.
TEST(Constraints, SaveAndLoadKeepThem) {
  const fs::path dir = fs::temp_directory_path() / ("tk_constraints_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  Case c = load("conv");
  c.model->save((dir / "conv.keras").string());
  const json cfg = io::keras::layer_to_json(*c.model->get_layer("conv2d"));
  EXPECT_EQ(cfg["config"]["kernel_constraint"]["class_name"], "MaxNorm");
  EXPECT_EQ(cfg["config"]["kernel_constraint"]["module"], "keras.constraints");
  EXPECT_EQ(cfg["config"]["kernel_constraint"]["config"]["axis"], json::array({0, 1, 2}));
  Case again{models::load_model((dir / "conv.keras").string()), c.x, c.y};
  for (size_t i = 0; i < c.model->layers().size(); ++i) {
    const auto& a = c.model->layers()[i]->constraints;
    const auto& b = again.model->layers()[i]->constraints;
    ASSERT_EQ(a.size(), b.size()) << i;
    for (const auto& [key, k] : a) {
      EXPECT_EQ(b.at(key).kind, k.kind);
      EXPECT_EQ(b.at(key).axis, k.axis);
      EXPECT_EQ(b.at(key).max_value, k.max_value);
    }
  }
  fit_three_steps(*again.model, again.x, again.y);
  EXPECT_LT(worst_weight_error(*again.model, "conv"), 3e-5f);
  fs::remove_all(dir);
}

float column_norm(const Tensor& kernel, int64_t col) {  // a (in, out) kernel's column
  const int64_t in = kernel.shape()[0], out = kernel.shape()[1];
  double s = 0.0;
  for (int64_t i = 0; i < in; ++i)
    s += double(kernel.data<float>()[i * out + col]) * kernel.data<float>()[i * out + col];
  return static_cast<float>(std::sqrt(s));
}

// The C++ API, on every path that updates weights: one program per step (the fused update grouped per layer, and
// without fusion), gradient accumulation over micro-batches (the apply program), and an optimizer written in the
// general ops. After fit, every column of the MaxNorm kernel has norm <= 0.25 (most were above: the rate is large)
// and the NonNeg bias is >= 0.
TEST(Constraints, TheCppApiConstrainsOnEveryUpdatePath) {
  struct Path {
    const char* name;
    int64_t micro_batch;
    bool adagrad;
  };
  for (const Path& p : {Path{"sgd", 0, false}, Path{"micro-batches", 4, false}, Path{"adagrad", 0, true}}) {
    SCOPED_TRACE(p.name);
    utils::set_random_seed(5);
    auto dense = layers::Dense(6, "linear", {.kernel_initializer = "ones", .bias_initializer = "ones"});
    dense->constraints["kernel"] = constraints::MaxNorm(0.25f);
    dense->constraints["bias"] = constraints::NonNeg();
    Sequential model({layers::Input({3}), dense});
    if (p.adagrad)
      model.compile(optimizers::get("adagrad", 0.5f), "mse");
    else
      model.compile(optimizers::SGD({.learning_rate = 0.5f}), "mse");
    Tensor x(Shape{16, 3}, DType::f32), y(Shape{16, 6}, DType::f32);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = 0.2f * static_cast<float>(i % 9) - 0.7f;
    for (int64_t i = 0; i < y.numel(); ++i) y.data<float>()[i] = -3.0f + 0.1f * static_cast<float>(i % 5);
    FitOptions o;
    o.batch_size = 8;
    o.micro_batch_size = p.micro_batch;
    o.epochs = 2;
    o.verbose = 0;
    model.fit(x, y, o);
    const Tensor& kernel = dense->weights()[0].value;
    for (int64_t col = 0; col < 6; ++col) EXPECT_LE(column_norm(kernel, col), 0.25f + 1e-6f) << col;
    EXPECT_NEAR(column_norm(kernel, 0), 0.25f, 1e-5f);  // started at sqrt(3): the constraint bound it
    const Tensor& bias = dense->weights()[1].value;
    for (int64_t i = 0; i < bias.numel(); ++i) EXPECT_GE(bias.data<float>()[i], 0.0f) << i;
    EXPECT_EQ(bias.data<float>()[0], 0.0f);  // the targets pull the bias down: NonNeg holds it at 0
  }
}

// Frozen layers' weights are not updated, so not constrained (Keras constrains what its optimizer updates).
TEST(Constraints, FrozenWeightsStayAsTheyAre) {
  auto dense = layers::Dense(2, "linear", {.kernel_initializer = "ones"});
  dense->constraints["kernel"] = constraints::UnitNorm();
  dense->trainable = false;
  auto head = layers::Dense(1);
  Sequential model({layers::Input({2}), dense, head});
  model.compile(optimizers::SGD({.learning_rate = 0.1f}), "mse");
  Tensor x = Tensor::full(Shape{4, 2}, 1.0f), y = Tensor::full(Shape{4, 1}, 0.5f);
  model.fit(x, y, {.batch_size = 4, .epochs = 1, .verbose = 0});
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(dense->weights()[0].value.data<float>()[i], 1.0f);
}

TEST(Constraints, BadArgumentsAreClearErrors) {
  EXPECT_THROW(constraints::MaxNorm(-1.0f), InvalidArgument);
  EXPECT_THROW(constraints::MaxNorm(NAN), InvalidArgument);
  EXPECT_THROW(constraints::MinMaxNorm(2.0f, 1.0f), InvalidArgument);
  EXPECT_THROW(constraints::MinMaxNorm(0.0f, 1.0f, 1.5f), InvalidArgument);
  auto expect_fit_error = [](const std::string& key, const Constraint& c, const std::string& needle) {
    auto dense = layers::Dense(2);
    dense->constraints[key] = c;
    Sequential model({layers::Input({3}), dense});
    model.compile(optimizers::SGD(), "mse");
    try {
      model.fit(Tensor::zeros(Shape{2, 3}), Tensor::zeros(Shape{2, 2}), {.batch_size = 2, .epochs = 1, .verbose = 0});
      ADD_FAILURE() << "no error for " << key;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_fit_error("kernal", constraints::NonNeg(), "kernal");
  expect_fit_error("kernel", constraints::MaxNorm(1.0f, {2}), "axis 2 is outside the weight's rank 2");
}

// A constraint class trainkit does not have, a malformed one, and one inside a wrapper: errors naming the option.
TEST(Constraints, FilesWithConstraintsTrainkitCannotApplyAreRefused) {
  auto layer_with = [](const json& constraint) {
    json obj = {{"module", "keras.layers"},
                {"class_name", "Dense"},
                {"config", {{"name", "d"}, {"units", 2}, {"kernel_constraint", constraint}}},
                {"registered_name", nullptr}};
    return io::keras::layer_from_json(obj, "model.keras");
  };
  try {
    layer_with({{"class_name", "RadialConstraint"}, {"config", json::object()}});
    ADD_FAILURE() << "no error";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("kernel_constraint"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("MaxNorm"), std::string::npos) << e.what();
  }
  EXPECT_THROW(layer_with({{"class_name", "MaxNorm"}, {"config", {{"axis", "zero"}}}}), FormatError);
  EXPECT_THROW(layer_with({{"class_name", "MaxNorm"}, {"config", {{"max_value", -2}}}}), FormatError);
  EXPECT_EQ(layer_with("max_norm")->constraints.at("kernel").max_value, 2.0f);  // Keras' names work too
  json inner = {{"module", "keras.layers"},
                {"class_name", "Dense"},
                {"config", {{"name", "d"}, {"units", 2}, {"kernel_constraint", "non_neg"}}},
                {"registered_name", nullptr}};
  json wrapper = {{"module", "keras.layers"},
                  {"class_name", "TimeDistributed"},
                  {"config", {{"name", "td"}, {"layer", inner}}},
                  {"registered_name", nullptr}};
  EXPECT_THROW(io::keras::layer_from_json(wrapper, "model.keras"), Unsupported);
}

}  // namespace
}  // namespace tk
