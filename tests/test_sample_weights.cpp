// Keras' sample_weight and class_weight (issue 33) against Keras 3.15.1 itself
// (tests/fixtures/keras/sample_weights/gen_sample_weights.py): small models compiled and saved by Keras, evaluated with
// sample weights on their initial weights and trained three SGD steps with sample_weight / class_weight; trainkit's
// logs and trained weights must be Keras'. Then the ways the same weighting reaches a program (micro-batches, a
// Dataset of (x, y, w), train_on_batch, validation_split), the program a pass without weights runs, and bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "graph/program.h"
#include "keras_text_fixture.h"
#include "nn/compiler/programs.h"
#include "nn/training/sample_weights.h"
#include "nn/training/trainer.h"
#include "trainkit/core/error.h"
#include "trainkit/data/dataset.h"
#include "trainkit/io/keras.h"
#include "trainkit/nn/layers.h"
#include "trainkit/nn/model.h"
#include "trainkit/nn/optimizers.h"

namespace tk {
namespace {

const std::string kDir = TK_SOURCE_DIR "/tests/fixtures/keras/sample_weights/";

const std::map<std::string, Tensor>& fx() {
  static const auto f = testing::load_keras_text(kDir + "sample_weights_expect.txt");
  return f;
}
const Tensor& at(const std::string& key) {
  auto it = fx().find(key);
  if (it == fx().end()) throw std::runtime_error("no fixture record " + key);
  return it->second;
}
float scalar(const std::string& key) { return at(key).data<float>()[0]; }
Tensor ones(Shape s) { return Tensor::full(std::move(s), 1.0f); }

// The case's model (Keras' file: its compile config, its initial weights) and data in the dtypes trainkit reads.
struct Case {
  std::unique_ptr<Model> model;
  Tensor x, y;
};
Case load(const std::string& name) {
  Case c{models::load_model(kDir + name + ".keras"), at(name + "/x"), at(name + "/y")};
  if (name == "masked") c.x = c.x.to(DType::i32);                                           // token ids
  if (name == "sparse" || name == "classes" || name == "masked") c.y = c.y.to(DType::i32);  // class ids
  return c;
}

FitOptions keras_fit() {  // gen_sample_weights.py: fit(batch_size=4, epochs=1, shuffle=False)
  FitOptions o;
  o.batch_size = 4;
  o.epochs = 1;
  o.verbose = 0;
  o.shuffle = false;
  return o;
}

void expect_keras_weights(const Model& model, const std::string& name) {
  const std::vector<Tensor> w = model.get_weights();
  for (size_t i = 0; i < w.size(); ++i) {
    const Tensor& want = at(name + "/weight/" + std::to_string(i));
    ASSERT_EQ(w[i].numel(), want.numel()) << name << " weight " << i;
    for (int64_t k = 0; k < want.numel(); ++k) {
      const float b = want.data<float>()[k];
      EXPECT_NEAR(w[i].data<float>()[k], b, 1e-5 * std::max(std::abs(b), 0.1f))
          << name << " weight " << i << "[" << k << "]";
    }
  }
}

void expect_log(double got, const std::string& key) {
  EXPECT_NEAR(got, scalar(key), 1e-5 * std::max(1.0f, std::abs(scalar(key)))) << key;
}

// Keras' evaluate(sample_weight=...) on the initial weights: the loss weighted, the metrics not (compile's metrics).
void expect_keras_evaluate(const std::string& name, const std::vector<std::string>& keys) {
  Case c = load(name);
  const Logs logs = c.model->evaluate(c.x, c.y, {.batch_size = 4, .sample_weight = at(name + "/eval_weight")});
  for (const std::string& k : keys) expect_log(logs.get(k), name + "/eval/" + k);
}

TEST(SampleWeights, EvaluateWeightsTheLossAsKeras) {
  expect_keras_evaluate("sparse", {"loss", "accuracy"});
  expect_keras_evaluate("classes", {"loss", "accuracy"});  // (rows, 1) weights
  expect_keras_evaluate("onehot", {"loss", "categorical_accuracy"});
  expect_keras_evaluate("binary", {"loss", "binary_accuracy"});
}

TEST(SampleWeights, PerTimeStepWeightsAndMaskCombineAsKeras) {
  expect_keras_evaluate("sequence", {"loss"});
  expect_keras_evaluate("masked", {"loss"});
}

// Keras multiplies with NumPy broadcasting: (rows, 1) weights weigh every step of a sequence output alike, as the
// same weights repeated over the steps do.
TEST(SampleWeights, RowWeightsBroadcastOverTheSteps) {
  Case c = load("sequence");
  Tensor per_row(Shape{10, 1}, DType::f32), per_step(Shape{10, 4}, DType::f32);
  for (int64_t r = 0; r < 10; ++r) {
    per_row.data<float>()[r] = 0.5f + 0.25f * static_cast<float>(r % 4);
    for (int64_t t = 0; t < 4; ++t) per_step.data<float>()[r * 4 + t] = per_row.data<float>()[r];
  }
  const double a = c.model->evaluate(c.x, c.y, {.batch_size = 4, .sample_weight = per_row}).get("loss");
  const double b = c.model->evaluate(c.x, c.y, {.batch_size = 4, .sample_weight = per_step}).get("loss");
  EXPECT_NEAR(a, b, 1e-6 * std::max(1.0, std::abs(b)));
  EXPECT_GT(std::abs(a - c.model->evaluate(c.x, c.y, {.batch_size = 4}).get("loss")), 1e-3);
}

TEST(SampleWeights, FitWithSampleWeightAndWeightedValidationDataTrainsAsKeras) {
  Case c = load("sparse");
  FitOptions o = keras_fit();
  o.sample_weight = at("sparse/sample_weight");  // zero and negative weights included, as Keras takes them
  o.validation_data.emplace(std::vector<Tensor>{at("sparse/validation/0")},
                            std::vector<Tensor>{at("sparse/validation/1").to(DType::i32)});
  o.validation_sample_weight = at("sparse/validation/2");
  const History h = c.model->fit(c.x, c.y, o);
  for (const std::string k : {"loss", "accuracy", "val_loss", "val_accuracy"})
    expect_log(h.history.at(k).back(), "sparse/fit/" + k);
  expect_keras_weights(*c.model, "sparse");
}

TEST(SampleWeights, FitWithClassWeightTrainsAsKeras) {
  for (const auto& [name, weights] : std::vector<std::pair<std::string, std::map<int, float>>>{
           {"classes", {{0, 1.0f}, {1, 5.0f}, {2, 0.5f}}},  // sparse ids
           {"onehot", {{1, 3.0f}, {2, 0.25f}}},             // argmax of one-hot targets; class 0 unlisted: 1
           {"binary", {{0, 2.0f}, {1, 0.5f}}}}) {           // rounded single binary targets
    SCOPED_TRACE(name);
    Case c = load(name);
    FitOptions o = keras_fit();
    o.class_weight = weights;
    const History h = c.model->fit(c.x, c.y, o);
    expect_log(h.history.at("loss").back(), name + "/fit/loss");
    expect_keras_weights(*c.model, name);
  }
}

TEST(SampleWeights, FitWithPerStepWeightsUnderAMaskTrainsAsKeras) {
  for (const std::string name : {"sequence", "masked"}) {
    SCOPED_TRACE(name);
    Case c = load(name);
    FitOptions o = keras_fit();
    o.sample_weight = at(name + "/sample_weight");
    const History h = c.model->fit(c.x, c.y, o);
    expect_log(h.history.at("loss").back(), name + "/fit/loss");
    expect_keras_weights(*c.model, name);
  }
}

// "sum_over_batch_size" over the whole batch: micro-batches of 1 and 3 rows (the last one partial) accumulate Keras'
// step on batches of 4 (each micro-batch's sum over its rows, scaled by its share of the batch).
TEST(SampleWeights, MicroBatchesWeightTheWholeBatch) {
  for (const int64_t micro : {1, 3}) {
    Case c = load("sparse");
    FitOptions o = keras_fit();
    o.sample_weight = at("sparse/sample_weight");
    o.micro_batch_size = micro;
    const History h = c.model->fit(c.x, c.y, o);
    expect_log(h.history.at("loss").back(), "sparse/fit/loss");
    expect_keras_weights(*c.model, "sparse");
  }
}

TEST(SampleWeights, DatasetElementsCarryTheWeights) {
  Case c = load("sparse");
  const data::Dataset d = data::Dataset::from_tensor_slices({c.x, c.y, at("sparse/sample_weight")}).batch(4);
  FitOptions o = keras_fit();
  const History h = c.model->fit(d, o);
  expect_log(h.history.at("loss").back(), "sparse/fit/loss");
  expect_keras_weights(*c.model, "sparse");

  Case e = load("sparse");  // evaluate over (x, y, w) batches, and over (x, y): unweighted again
  const Tensor w = at("sparse/eval_weight");
  const Logs weighted = e.model->evaluate(data::Dataset::from_tensor_slices({e.x, e.y, w}).batch(4));
  expect_log(weighted.get("loss"), "sparse/eval/loss");
  const Logs plain = e.model->evaluate(data::Dataset::from_tensor_slices({e.x, e.y}).batch(4));
  EXPECT_NEAR(plain.get("loss"), e.model->evaluate(e.x, e.y, {.batch_size = 4}).get("loss"), 1e-6);
  EXPECT_GT(std::abs(plain.get("loss") - weighted.get("loss")), 1e-3);
}

TEST(SampleWeights, DatasetWithClassWeightTrainsAsKeras) {
  Case c = load("classes");
  FitOptions o = keras_fit();
  o.class_weight = {{0, 1.0f}, {1, 5.0f}, {2, 0.5f}};
  c.model->fit(data::Dataset::from_tensor_slices({c.x, c.y}).batch(4), o);
  expect_keras_weights(*c.model, "classes");
}

TEST(SampleWeights, TrainOnBatchTakesTheBatchWeights) {
  Case c = load("sparse");
  const Tensor w = at("sparse/sample_weight");
  for (int64_t b = 0; b < 10; b += 4) {
    const int64_t e = std::min<int64_t>(b + 4, 10);
    c.model->train_on_batch({c.x.slice_rows(b, e)}, {c.y.slice_rows(b, e)}, w.slice_rows(b, e));
  }
  expect_keras_weights(*c.model, "sparse");
}

// A pass without weights runs the program it always ran (the fused loss op, no weight input); a weighted one is
// another program beside it.
TEST(SampleWeights, APassWithoutWeightsKeepsItsProgram) {
  Case c = load("sparse");
  c.model->fit(c.x, c.y, keras_fit());
  auto has = [](const graph::Program& p, const std::function<bool(const graph::Node&)>& f) {
    for (int id = 0; id < p.graph().size(); ++id)
      if (f(p.graph()[id])) return true;
    return false;
  };
  auto weight_input = [](const graph::Node& n) { return n.name == "sample_weight"; };
  auto fused = [](const graph::Node& n) { return n.op == graph::Op::SparseCceLoss; };
  nn::ProgramCache& pc = c.model->trainer().programs();
  const graph::Program& plain = *pc.get(nn::ProgramKind::train, 4).program;
  EXPECT_FALSE(has(plain, weight_input));
  EXPECT_TRUE(has(plain, fused));
  {
    const nn::SampleWeightScope scope(c.model->trainer(), int64_t{-1});
    const graph::Program& weighted = *pc.get(nn::ProgramKind::train, 4).program;
    EXPECT_TRUE(has(weighted, weight_input));
    EXPECT_FALSE(has(weighted, fused));
  }
  EXPECT_EQ(pc.get(nn::ProgramKind::train, 4).program.get(), &plain);  // still cached, unchanged
}

// validation_split takes the last rows' weights for the validation loss, as Keras splits every array.
TEST(SampleWeights, ValidationSplitSplitsTheWeights) {
  Case a = load("sparse"), b = load("sparse");
  const Tensor w = at("sparse/sample_weight");
  FitOptions o = keras_fit();
  o.epochs = 1;
  o.validation_split = 0.2f;
  o.sample_weight = w;
  const History h = a.model->fit(a.x, a.y, o);
  FitOptions manual = keras_fit();
  manual.sample_weight = w.slice_rows(0, 8);
  manual.validation_data.emplace(std::vector<Tensor>{b.x.slice_rows(8, 10)},
                                 std::vector<Tensor>{b.y.slice_rows(8, 10)});
  manual.validation_sample_weight = w.slice_rows(8, 10);
  const History m = b.model->fit(b.x.slice_rows(0, 8), b.y.slice_rows(0, 8), manual);
  EXPECT_NEAR(h.history.at("val_loss").back(), m.history.at("val_loss").back(), 1e-6);
  EXPECT_NEAR(h.history.at("loss").back(), m.history.at("loss").back(), 1e-6);
}

// ---------------------------------------------------------------- bad input: one clear error each
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected tk::InvalidArgument";
  return {};
}

TEST(SampleWeights, BadWeightsAreClearErrors) {
  Case c = load("sparse");
  FitOptions o = keras_fit();
  o.sample_weight = ones({9});
  EXPECT_NE(error_of([&] { c.model->fit(c.x, c.y, o); }).find("sample_weight has 9 rows but x has 10"),
            std::string::npos);
  o.sample_weight = ones({10, 3});
  EXPECT_NE(error_of([&] { c.model->fit(c.x, c.y, o); }).find("sample_weight of shape (10, 3)"), std::string::npos);
  o.sample_weight = ones({10});
  o.class_weight = {{0, 2.0f}};
  EXPECT_NE(error_of([&] { c.model->fit(c.x, c.y, o); }).find("give class_weight or sample_weight, not both"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              c.model->evaluate(c.x, c.y, {.sample_weight = ones({4})});
            }).find("evaluate: sample_weight has 4 rows"),
            std::string::npos);
  const data::Dataset bad = data::Dataset::from_tensor_slices({c.x, c.y, ones({10, 2})}).batch(4);
  EXPECT_NE(error_of([&] { c.model->fit(bad, keras_fit()); }).find("sample_weight of shape (4, 2)"), std::string::npos);
}

TEST(SampleWeights, ClassWeightOutsideTheClassesIsAnError) {
  Case c = load("sparse");
  FitOptions o = keras_fit();
  o.class_weight = {{0, 1.0f}, {3, 2.0f}};
  EXPECT_NE(error_of([&] { c.model->fit(c.x, c.y, o); }).find("class_weight names class 3, outside the 3 classes"),
            std::string::npos);
  o.class_weight = {{1, 2.0f}};
  Tensor y = c.y.clone();
  y.data<int32_t>()[6] = 5;
  EXPECT_NE(error_of([&] { c.model->fit(c.x, y, o); }).find("row 6's target is class 5, outside the 3 classes"),
            std::string::npos);
  Case s = load("sequence");
  EXPECT_NE(error_of([&] { s.model->fit(s.x, s.y, o); }).find("class_weight needs one class per row"),
            std::string::npos);
}

TEST(SampleWeights, ClassWeightNeedsASingleOutput) {
  KerasTensor in = Input({3});
  Model m({in}, {layers::Dense(2)(in), layers::Dense(2)(in)});
  m.compile(optimizers::SGD(), Loss("mean_squared_error"));
  FitOptions o = keras_fit();
  o.class_weight = {{0, 2.0f}};
  EXPECT_NE(error_of([&] {
              m.fit({ones({4, 3})}, {ones({4, 2}), ones({4, 2})}, o);
            }).find("class_weight is only supported for models with a single output"),
            std::string::npos);
}

}  // namespace
}  // namespace tk
