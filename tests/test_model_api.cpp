// Public model API: Sequential / functional construction, summary, initializers, naming, fit / evaluate /
// predict / train_on_batch behaviour, callbacks, frozen layers, dropout and error reporting.
// Every test uses tiny synthetic data so the whole suite runs in a few seconds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <typeinfo>
#include <vector>

#include "trainkit/trainkit.h"

namespace {

using tk::FitOptions;
using tk::History;
using tk::KerasTensor;
using tk::LayerPtr;
using tk::Loss;
using tk::Sequential;
using tk::Shape;
using tk::Tensor;
namespace layers = tk::layers;
namespace optimizers = tk::optimizers;

// ---------------------------------------------------------------- helpers

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_TRUE(contains((haystack), (needle))) << "expected to find \"" << (needle) << "\" in: " << (haystack)

// Runs f, expects it to throw exactly E (or a subclass), and returns the message ("" and a failure otherwise).
template <typename E, typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected " << typeid(E).name() << " but got " << typeid(e).name() << ": " << e.what();
    return {};
  }
  ADD_FAILURE() << "expected " << typeid(E).name() << " but nothing was thrown";
  return {};
}

// Optimizers with a learning rate (designated initializers of the derived option structs trip
// -Wmissing-field-initializers on the base part).
tk::OptimizerPtr adam(float learning_rate) {
  optimizers::AdamOptions o;
  o.learning_rate = learning_rate;
  return optimizers::Adam(o);
}
tk::OptimizerPtr sgd(float learning_rate) {
  optimizers::SGDOptions o;
  o.learning_rate = learning_rate;
  return optimizers::SGD(o);
}

FitOptions quiet(int epochs = 1, int64_t batch_size = 32) {
  FitOptions o;
  o.epochs = epochs;
  o.batch_size = batch_size;
  o.verbose = 0;
  return o;
}

Tensor uniform(Shape shape, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  Tensor t(std::move(shape), tk::DType::f32);
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = d(gen);
  return t;
}

Tensor labels(int64_t n, int classes, uint32_t seed) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> d(0, classes - 1);
  for (auto& x : v) x = d(gen);
  return Tensor::from_vector<int32_t>(Shape{n}, v);
}

Tensor one_hot(const Tensor& y, int classes) {
  const int64_t n = y.dim(0);
  Tensor t = Tensor::zeros(Shape{n, classes});
  for (int64_t i = 0; i < n; ++i) t.data<float>()[i * classes + y.data<int32_t>()[i]] = 1.0f;
  return t;
}

std::vector<float> values(const Tensor& t) {
  const float* p = t.data<float>();
  return std::vector<float>(p, p + t.numel());
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

bool same_weights(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!same_bits(a[i], b[i])) return false;
  return true;
}

std::string summary_of(const tk::Model& m) {
  std::ostringstream os;
  m.summary(os);
  return os.str();
}

int64_t argmax_row(const float* p, int64_t n) { return std::max_element(p, p + n) - p; }

// Records every callback event as a short string.
struct Recorder : tk::Callback {
  std::vector<std::string> events;
  int64_t batches = 0;
  std::vector<int> epochs_begun;
  tk::Model* seen_model = nullptr;
  void on_train_begin(const tk::Logs&) override {
    events.push_back("train_begin");
    seen_model = model;
  }
  void on_train_end(const tk::Logs&) override { events.push_back("train_end"); }
  void on_epoch_begin(int e, const tk::Logs&) override {
    events.push_back("epoch_begin " + std::to_string(e));
    epochs_begun.push_back(e);
  }
  void on_epoch_end(int e, const tk::Logs& logs) override {
    events.push_back("epoch_end " + std::to_string(e) + (logs.contains("loss") ? " loss" : " noloss"));
  }
  void on_train_batch_begin(int64_t b, const tk::Logs&) override {
    events.push_back("batch_begin " + std::to_string(b));
  }
  void on_train_batch_end(int64_t b, const tk::Logs& logs) override {
    events.push_back("batch_end " + std::to_string(b) + (logs.contains("loss") ? " loss" : " noloss"));
    ++batches;
  }
};

std::unique_ptr<Sequential> small_classifier(int64_t in = 4, int64_t hidden = 8, int64_t classes = 3) {
  return std::make_unique<Sequential>(
      std::vector<LayerPtr>{layers::Input({in}), layers::Dense(hidden, "relu"), layers::Dense(classes)});
}

// ---------------------------------------------------------------- construction, summary

TEST(ModelApiSummary, CountParamsAndWeightShapes) {
  Sequential m({layers::Input({784}), layers::Dense(256, "relu"), layers::Dense(128, "relu"), layers::Dense(10)});
  EXPECT_EQ(m.count_params(), 235146);
  std::vector<Tensor> w = m.get_weights();
  ASSERT_EQ(w.size(), 6u);
  EXPECT_EQ(w[0].shape(), (Shape{784, 256}));
  EXPECT_EQ(w[1].shape(), (Shape{256}));
  EXPECT_EQ(w[2].shape(), (Shape{256, 128}));
  EXPECT_EQ(w[3].shape(), (Shape{128}));
  EXPECT_EQ(w[4].shape(), (Shape{128, 10}));
  EXPECT_EQ(w[5].shape(), (Shape{10}));
  for (const Tensor& t : w) EXPECT_EQ(t.dtype(), tk::DType::f32);
  // Per-layer counts add up.
  int64_t sum = 0;
  for (const LayerPtr& l : m.layers()) sum += l->count_params();
  EXPECT_EQ(sum, 235146);
}

TEST(ModelApiSummary, GetWeightsReturnsCopies) {
  Sequential m({layers::Input({3}), layers::Dense(2)});
  std::vector<Tensor> w = m.get_weights();
  w[0].data<float>()[0] = 1234.0f;
  EXPECT_NE(m.get_weights()[0].data<float>()[0], 1234.0f);
}

TEST(ModelApiSummary, SummaryTextAndTrainableSplit) {
  tk::clear_session();
  Sequential m({layers::Input({784}), layers::Dense(256, "relu"), layers::Dense(128, "relu"), layers::Dense(10)});
  std::string s = summary_of(m);
  EXPECT_CONTAINS(s, "Model: \"sequential\"");
  EXPECT_CONTAINS(s, "dense (Dense)");
  EXPECT_CONTAINS(s, "dense_1 (Dense)");
  EXPECT_CONTAINS(s, "dense_2 (Dense)");
  EXPECT_CONTAINS(s, "(None, 256)");
  EXPECT_CONTAINS(s, "(None, 10)");
  EXPECT_CONTAINS(s, "200,960");  // 784*256 + 256
  EXPECT_CONTAINS(s, "Total params: 235,146");
  EXPECT_CONTAINS(s, "Trainable params: 235,146");
  EXPECT_CONTAINS(s, "Non-trainable params: 0 ");

  m.get_layer("dense_1")->trainable = false;  // 256*128 + 128 = 32,896 params
  s = summary_of(m);
  EXPECT_CONTAINS(s, "Total params: 235,146");
  EXPECT_CONTAINS(s, "Trainable params: 202,250");
  EXPECT_CONTAINS(s, "Non-trainable params: 32,896");
  EXPECT_CONTAINS(s, "[frozen]");
}

TEST(ModelApiSummary, FunctionalSummaryListsInputsAndMerges) {
  tk::clear_session();
  KerasTensor a = tk::Input({3}, "a");
  KerasTensor b = tk::Input({5}, "b");
  KerasTensor c = layers::Concatenate()({layers::Dense(4)(a), layers::Dense(6)(b)});
  tk::Model m({a, b}, {layers::Dense(1)(c)});
  std::string s = summary_of(m);
  EXPECT_CONTAINS(s, "Model: \"functional\"");
  EXPECT_CONTAINS(s, "a (InputLayer)");
  EXPECT_CONTAINS(s, "b (InputLayer)");
  EXPECT_CONTAINS(s, "concatenate (Concatenate)");
  EXPECT_CONTAINS(s, "(None, 10)");
  EXPECT_CONTAINS(s, "Total params: 63");  // 3*4+4 + 5*6+6 + 10+1
}

TEST(ModelApiSummary, SequentialWithoutInputBuildsFromData) {
  Sequential m({layers::Dense(4, "relu"), layers::Dense(2)});
  EXPECT_EQ(m.count_params(), 0);  // not built yet
  m.compile(optimizers::SGD(), "mse");
  m.fit(uniform({10, 3}, 1), uniform({10, 2}, 2), quiet());
  EXPECT_EQ(m.count_params(), 3 * 4 + 4 + 4 * 2 + 2);
  EXPECT_EQ(m.predict(uniform({5, 3}, 3)).shape(), (Shape{5, 2}));
}

// ---------------------------------------------------------------- initializers and seeds

TEST(ModelApiInit, DenseDefaultsZeroBiasGlorotKernel) {
  tk::utils::set_random_seed(11);
  Sequential m({layers::Input({50}), layers::Dense(30)});
  std::vector<Tensor> w = m.get_weights();
  ASSERT_EQ(w.size(), 2u);
  for (float b : values(w[1])) EXPECT_EQ(b, 0.0f);
  const float limit = std::sqrt(6.0f / (50.0f + 30.0f));
  float max_abs = 0.0f;
  double mean = 0.0;
  for (float k : values(w[0])) {
    EXPECT_LE(std::abs(k), limit);
    max_abs = std::max(max_abs, std::abs(k));
    mean += k;
  }
  mean /= 1500.0;
  // Uniform over [-limit, limit]: values reach close to the limit and average near zero.
  EXPECT_GT(max_abs, 0.9f * limit);
  EXPECT_LT(std::abs(mean), 0.05 * limit);
}

TEST(ModelApiInit, NamedInitializers) {
  Sequential m({layers::Input({4}),
                layers::Dense(3, "linear", {.kernel_initializer = "ones", .bias_initializer = "ones"}),
                layers::Dense(2, "linear", {.use_bias = false, .kernel_initializer = "zeros"})});
  std::vector<Tensor> w = m.get_weights();
  ASSERT_EQ(w.size(), 3u);  // no bias on the second layer
  for (float v : values(w[0])) EXPECT_EQ(v, 1.0f);
  for (float v : values(w[1])) EXPECT_EQ(v, 1.0f);
  for (float v : values(w[2])) EXPECT_EQ(v, 0.0f);
  EXPECT_THROW(layers::Dense(3, "linear", {.kernel_initializer = "nope"}), tk::InvalidArgument);
}

// Keras' VarianceScaling (keras.applications' EfficientNet: scale 2, fan_out, truncated_normal), as
// "variance_scaling:SCALE:MODE:DISTRIBUTION": the kernel's variance is scale / fan, each distribution its own shape.
TEST(ModelApiInit, VarianceScalingHasKerasVariance) {
  struct Case {
    const char* name;
    double variance;  // scale / fan for Dense(400) on 200 inputs: fan_in 200, fan_out 400, fan_avg 300
    double max_over_std;
  };
  for (const Case& c : {Case{"variance_scaling:2:fan_out:truncated_normal", 2.0 / 400, 2.0 / 0.8796},
                        Case{"variance_scaling:0.3333333333333333:fan_out:uniform", 1.0 / 1200, std::sqrt(3.0)},
                        Case{"variance_scaling:1:fan_avg:untruncated_normal", 1.0 / 300, 10.0},
                        Case{"variance_scaling:1:fan_in:uniform", 1.0 / 200, std::sqrt(3.0)}}) {
    Sequential m({layers::Input({200}), layers::Dense(400, "linear", {.kernel_initializer = c.name})});
    const std::vector<float> k = values(m.get_weights()[0]);
    double sum = 0, sq = 0, max_abs = 0;
    for (float v : k) sum += v, sq += double(v) * v, max_abs = std::max(max_abs, double(std::fabs(v)));
    const double n = double(k.size()), var = sq / n - (sum / n) * (sum / n);
    EXPECT_NEAR(var, c.variance, 0.02 * c.variance) << c.name;                      // 80,000 draws: ~0.5% noise
    EXPECT_LE(max_abs, c.max_over_std * std::sqrt(c.variance) * 1.0001) << c.name;  // bounded where it should be
    EXPECT_GT(max_abs, 0.9 * std::min(c.max_over_std, 4.0) * std::sqrt(c.variance)) << c.name;
  }
  for (const char* bad : {"variance_scaling:0:fan_in:uniform", "variance_scaling:1:fan_x:uniform",
                          "variance_scaling:1:fan_in:normal", "variance_scaling:2:fan_in"})
    EXPECT_THROW(layers::Dense(3, "linear", {.kernel_initializer = bad}), tk::InvalidArgument) << bad;
}

TEST(ModelApiInit, SeedMakesWeightsReproducible) {
  auto build = [](uint64_t seed) {
    tk::utils::set_random_seed(seed);
    Sequential m({layers::Input({6}), layers::Dense(5, "relu"), layers::Dense(3)});
    return m.get_weights();
  };
  std::vector<Tensor> a = build(7), b = build(7), c = build(8);
  EXPECT_TRUE(same_weights(a, b));
  EXPECT_FALSE(same_bits(a[0], c[0]));
  EXPECT_FALSE(same_bits(a[2], c[2]));
}

// ---------------------------------------------------------------- names

TEST(ModelApiNames, AutoUniquifyAndGetLayer) {
  tk::clear_session();
  LayerPtr d0 = layers::Dense(4, "relu");
  LayerPtr d1 = layers::Dense(4, "relu");
  LayerPtr dr = layers::Dropout(0.1f);
  LayerPtr d2 = layers::Dense(2);
  LayerPtr named = layers::Dense(2, "linear", {.name = "head"});
  EXPECT_EQ(d0->name, "dense");
  EXPECT_EQ(d1->name, "dense_1");
  EXPECT_EQ(dr->name, "dropout");
  EXPECT_EQ(d2->name, "dense_2");
  EXPECT_EQ(named->name, "head");
  Sequential m({layers::Input({3}), d0, d1, dr, d2, named});
  EXPECT_EQ(m.get_layer("dense_1"), d1);
  EXPECT_EQ(m.get_layer("head"), named);
  EXPECT_EQ(m.get_layer("dropout")->class_name(), "Dropout");
  std::string msg = error_of<tk::InvalidArgument>([&] { m.get_layer("no_such_layer"); });
  EXPECT_CONTAINS(msg, "no_such_layer");

  tk::clear_session();
  EXPECT_EQ(layers::Dense(1)->name, "dense");
  EXPECT_EQ(layers::Flatten()->name, "flatten");
}

// ---------------------------------------------------------------- functional API

TEST(ModelApiFunctional, TwoInputsConcatenateFitPredict) {
  tk::utils::set_random_seed(3);
  KerasTensor a = tk::Input({3});
  KerasTensor b = tk::Input({5});
  KerasTensor ha = layers::Dense(4, "relu")(a);
  KerasTensor hb = layers::Dense(6, "relu")(b);
  KerasTensor c = layers::Concatenate()({ha, hb});
  EXPECT_EQ(c.shape(), (Shape{-1, 10}));
  KerasTensor out = layers::Dense(1)(c);
  tk::Model m({a, b}, {out});
  EXPECT_EQ(m.count_params(), 63);

  const int64_t n = 64;
  Tensor xa = uniform({n, 3}, 1), xb = uniform({n, 5}, 2);
  Tensor y(Shape{n, 1}, tk::DType::f32);
  for (int64_t i = 0; i < n; ++i) y.data<float>()[i] = xa.data<float>()[i * 3] - 0.5f * xb.data<float>()[i * 5 + 4];
  m.compile(adam(0.02f), "mse");
  History h = m.fit(std::vector<Tensor>{xa, xb}, std::vector<Tensor>{y}, quiet(8, 16));
  ASSERT_EQ(h.history.count("loss"), 1u);
  ASSERT_EQ(h.history["loss"].size(), 8u);
  EXPECT_TRUE(std::isfinite(h.history["loss"].back()));
  EXPECT_LT(h.history["loss"].back(), h.history["loss"].front());
  std::vector<Tensor> p = m.predict(std::vector<Tensor>{xa, xb});
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].shape(), (Shape{n, 1}));

  // Wrong number of x arrays is reported.
  std::string msg = error_of<tk::InvalidArgument>([&] { m.predict(std::vector<Tensor>{xa}); });
  EXPECT_CONTAINS(msg, "2 input(s)");
}

TEST(ModelApiFunctional, ConcatenateAndAddComputeExactValues) {
  KerasTensor a = tk::Input({2});
  KerasTensor b = tk::Input({3});
  tk::Model cat({a, b}, {layers::Concatenate()({a, b})});
  Tensor xa = Tensor::from_vector<float>({2, 2}, {1, 2, 3, 4});
  Tensor xb = Tensor::from_vector<float>({2, 3}, {5, 6, 7, 8, 9, 10});
  std::vector<Tensor> p = cat.predict(std::vector<Tensor>{xa, xb});
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].shape(), (Shape{2, 5}));
  EXPECT_EQ(values(p[0]), (std::vector<float>{1, 2, 5, 6, 7, 3, 4, 8, 9, 10}));

  // x + x @ I == 2x
  KerasTensor in = tk::Input({3});
  LayerPtr lin = layers::Dense(3, "linear", {.use_bias = false});
  tk::Model add(in, layers::Add()({in, (*lin)(in)}));
  Tensor eye = Tensor::zeros({3, 3});
  for (int i = 0; i < 3; ++i) eye.data<float>()[i * 4] = 1.0f;
  add.set_weights({eye});
  Tensor x = Tensor::from_vector<float>({2, 3}, {1, -2, 3, 0.5f, 0, -4});
  EXPECT_EQ(values(add.predict(x)), (std::vector<float>{2, -4, 6, 1, 0, -8}));

  // Mismatched shapes are rejected when the layer is called.
  KerasTensor c4 = tk::Input({4});
  std::string msg = error_of<tk::InvalidArgument>([&] { layers::Add()({in, c4}); });
  EXPECT_CONTAINS(msg, "(None, 3)");
  EXPECT_CONTAINS(msg, "(None, 4)");
}

// Builds in(4) -> dense(8, relu) -> {cls: dense(3, softmax), reg: dense(1)}.
struct TwoHeads {
  KerasTensor in = tk::Input({4});
  KerasTensor h = layers::Dense(8, "relu")(in);
  KerasTensor cls = layers::Dense(3, "softmax", {.name = "cls"})(h);
  KerasTensor reg = layers::Dense(1, "linear", {.name = "reg"})(h);
  tk::Model model{{in}, {cls, reg}};
};

TEST(ModelApiFunctional, TwoOutputsTwoLosses) {
  tk::utils::set_random_seed(5);
  TwoHeads net;
  tk::Model& m = net.model;
  const int64_t n = 48;
  Tensor x = uniform({n, 4}, 4);
  Tensor y_cls = labels(n, 3, 5);
  Tensor y_reg = uniform({n, 1}, 6);
  m.compile(optimizers::Adam(), std::vector<Loss>{"sparse_categorical_crossentropy", "mse"}, {"accuracy"});
  History h = m.fit(std::vector<Tensor>{x}, std::vector<Tensor>{y_cls, y_reg}, quiet(2, 16));
  for (const char* key : {"loss", "cls_loss", "reg_loss", "cls_accuracy"}) {
    ASSERT_EQ(h.history.count(key), 1u) << key;
    EXPECT_EQ(h.history[key].size(), 2u) << key;
  }
  // The total is the sum of the per-output losses.
  for (size_t e = 0; e < 2; ++e)
    EXPECT_NEAR(h.history["loss"][e], h.history["cls_loss"][e] + h.history["reg_loss"][e],
                1e-5 * std::abs(h.history["loss"][e]));

  std::vector<Tensor> p = m.predict(std::vector<Tensor>{x});
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].shape(), (Shape{n, 3}));
  EXPECT_EQ(p[1].shape(), (Shape{n, 1}));
  for (int64_t i = 0; i < n; ++i) {
    const float* r = p[0].data<float>() + i * 3;
    EXPECT_NEAR(r[0] + r[1] + r[2], 1.0f, 1e-5f);
  }

  // evaluate matches the two losses computed by hand from predict.
  double cce = 0, mse = 0;
  for (int64_t i = 0; i < n; ++i) {
    cce -= std::log(std::max(1e-7, double(p[0].data<float>()[i * 3 + y_cls.data<int32_t>()[i]])));
    const double d = double(p[1].data<float>()[i]) - double(y_reg.data<float>()[i]);
    mse += d * d;
  }
  cce /= double(n);
  mse /= double(n);
  tk::Logs logs = m.evaluate(std::vector<Tensor>{x}, std::vector<Tensor>{y_cls, y_reg});
  EXPECT_NEAR(logs.get("cls_loss"), cce, 1e-4 * cce);
  EXPECT_NEAR(logs.get("reg_loss"), mse, 1e-4 * mse);
  EXPECT_NEAR(logs.get("loss"), cce + mse, 1e-4 * (cce + mse));

  // Wrong number of targets.
  std::string msg =
      error_of<tk::InvalidArgument>([&] { m.fit(std::vector<Tensor>{x}, std::vector<Tensor>{y_cls}, quiet()); });
  EXPECT_CONTAINS(msg, "2 output(s)");
}

TEST(ModelApiFunctional, OneLossAppliesToEveryOutput) {
  KerasTensor in = tk::Input({3});
  KerasTensor o1 = layers::Dense(2, "linear", {.name = "o1"})(in);
  KerasTensor o2 = layers::Dense(2, "linear", {.name = "o2"})(in);
  tk::Model m({in}, {o1, o2});
  m.compile(optimizers::SGD(), "mse");  // one loss for both outputs (Keras semantics)
  const int64_t n = 16;
  Tensor x = uniform({n, 3}, 7), y1 = uniform({n, 2}, 8), y2 = uniform({n, 2}, 9);
  History h = m.fit(std::vector<Tensor>{x}, std::vector<Tensor>{y1, y2}, quiet(1, 8));
  ASSERT_EQ(h.history.count("o1_loss"), 1u);
  ASSERT_EQ(h.history.count("o2_loss"), 1u);
  tk::Logs logs = m.evaluate(std::vector<Tensor>{x}, std::vector<Tensor>{y1, y2});
  EXPECT_NEAR(logs.get("loss"), logs.get("o1_loss") + logs.get("o2_loss"), 1e-5 * logs.get("loss"));
}

TEST(ModelApiFunctional, LossCountMismatchIsRejected) {
  KerasTensor in = tk::Input({3});
  std::vector<KerasTensor> outs;
  for (int i = 0; i < 3; ++i) outs.push_back(layers::Dense(1)(in));
  tk::Model m({in}, outs);
  m.compile(optimizers::SGD(), std::vector<Loss>{"mse", "mse"});
  const int64_t n = 4;
  Tensor x = uniform({n, 3}, 1);
  std::vector<Tensor> y{uniform({n, 1}, 2), uniform({n, 1}, 3), uniform({n, 1}, 4)};
  std::string msg = error_of<tk::InvalidArgument>([&] { m.fit(std::vector<Tensor>{x}, y, quiet()); });
  EXPECT_CONTAINS(msg, "2 losses");
  EXPECT_CONTAINS(msg, "3 outputs");
}

TEST(ModelApiFunctional, DisconnectedInputIsRejected) {
  KerasTensor a = tk::Input({3});
  KerasTensor stray = tk::Input({3}, "stray");
  KerasTensor out = layers::Dense(1)(stray);
  std::string msg = error_of<tk::InvalidArgument>([&] { tk::Model m(a, out); });
  EXPECT_CONTAINS(msg, "stray");
}

// ---------------------------------------------------------------- training learns

TEST(ModelApiTraining, SeparableTwoClassReachesHighAccuracy) {
  tk::utils::set_random_seed(21);
  std::mt19937 gen(99);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> xs;
  std::vector<int32_t> ys;
  while (ys.size() < 256) {
    float a = d(gen), b = d(gen);
    float s = a + 2.0f * b - 0.3f;
    if (std::abs(s) < 0.2f) continue;  // margin
    xs.push_back(a);
    xs.push_back(b);
    ys.push_back(s > 0 ? 1 : 0);
  }
  Tensor x = Tensor::from_vector<float>({256, 2}, xs);
  Tensor y = Tensor::from_vector<int32_t>({256}, ys);
  Sequential m({layers::Input({2}), layers::Dense(8, "relu"), layers::Dense(2)});
  m.compile(adam(0.05f), tk::losses::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
  History h = m.fit(x, y, quiet(30, 32));
  EXPECT_LT(h.history["loss"].back(), h.history["loss"].front());
  tk::Logs logs = m.evaluate(x, y);
  EXPECT_GT(logs.get("accuracy"), 0.95);
  EXPECT_LE(logs.get("accuracy"), 1.0);
}

TEST(ModelApiTraining, LinearRegressionConvergesWithSgd) {
  tk::utils::set_random_seed(4);
  const int64_t n = 128;
  Tensor x = uniform({n, 1}, 12);
  Tensor y(Shape{n, 1}, tk::DType::f32);
  for (int64_t i = 0; i < n; ++i) y.data<float>()[i] = 3.0f * x.data<float>()[i] - 1.0f;
  Sequential m({layers::Input({1}), layers::Dense(1)});
  m.compile(sgd(0.1f), "mse");
  History h = m.fit(x, y, quiet(100, 16));
  std::vector<Tensor> w = m.get_weights();
  EXPECT_NEAR(w[0].data<float>()[0], 3.0f, 0.05f);
  EXPECT_NEAR(w[1].data<float>()[0], -1.0f, 0.05f);
  EXPECT_LT(h.history["loss"].back(), 1e-3);
  EXPECT_EQ(m.optimizer()->iterations(), 100 * 8);
}

// ---------------------------------------------------------------- metrics resolution and evaluate

// Fits briefly, then compares evaluate's accuracy with the accuracy computed from predict.
TEST(ModelApiMetrics, AccuracyWithSparseCategoricalCrossentropy) {
  tk::utils::set_random_seed(31);
  const int64_t n = 100;
  Tensor x = uniform({n, 4}, 31);
  Tensor y = labels(n, 3, 32);
  Sequential m({layers::Input({4}), layers::Dense(3, "softmax")});
  m.compile(optimizers::Adam(), "sparse_categorical_crossentropy", {"accuracy"});
  m.fit(x, y, quiet(2));
  tk::Logs logs = m.evaluate(x, y);
  Tensor p = m.predict(x);
  int64_t hits = 0;
  for (int64_t i = 0; i < n; ++i) hits += argmax_row(p.data<float>() + i * 3, 3) == y.data<int32_t>()[i];
  const double acc = double(hits) / double(n);
  EXPECT_GE(logs.get("accuracy"), 0.0);
  EXPECT_LE(logs.get("accuracy"), 1.0);
  EXPECT_NEAR(logs.get("accuracy"), acc, 1e-6);
}

TEST(ModelApiMetrics, AccuracyWithCategoricalCrossentropy) {
  tk::utils::set_random_seed(33);
  const int64_t n = 100;
  Tensor x = uniform({n, 4}, 33);
  Tensor y_int = labels(n, 3, 34);
  Tensor y = one_hot(y_int, 3);
  Sequential m({layers::Input({4}), layers::Dense(3, "softmax")});
  m.compile(optimizers::Adam(), "categorical_crossentropy", {"accuracy"});
  m.fit(x, y, quiet(2));
  tk::Logs logs = m.evaluate(x, y);
  Tensor p = m.predict(x);
  int64_t hits = 0;
  for (int64_t i = 0; i < n; ++i) hits += argmax_row(p.data<float>() + i * 3, 3) == y_int.data<int32_t>()[i];
  EXPECT_GE(logs.get("accuracy"), 0.0);
  EXPECT_LE(logs.get("accuracy"), 1.0);
  EXPECT_NEAR(logs.get("accuracy"), double(hits) / double(n), 1e-6);
  // Integer labels with a categorical loss are rejected with a hint.
  std::string msg = error_of<tk::InvalidArgument>([&] { m.evaluate(x, y_int); });
  EXPECT_CONTAINS(msg, "sparse_categorical_crossentropy");
}

TEST(ModelApiMetrics, AccuracyWithBinaryCrossentropy) {
  tk::utils::set_random_seed(35);
  const int64_t n = 100;
  Tensor x = uniform({n, 4}, 35);
  Tensor y(Shape{n, 1}, tk::DType::f32);
  std::mt19937 gen(36);
  for (int64_t i = 0; i < n; ++i) y.data<float>()[i] = static_cast<float>(gen() % 2);
  Sequential m({layers::Input({4}), layers::Dense(1, "sigmoid")});
  m.compile(optimizers::Adam(), "binary_crossentropy", {"accuracy"});
  m.fit(x, y, quiet(2));
  tk::Logs logs = m.evaluate(x, y);
  Tensor p = m.predict(x);
  int64_t hits = 0;
  for (int64_t i = 0; i < n; ++i) hits += (p.data<float>()[i] > 0.5f) == (y.data<float>()[i] > 0.5f);
  EXPECT_GE(logs.get("accuracy"), 0.0);
  EXPECT_LE(logs.get("accuracy"), 1.0);
  EXPECT_NEAR(logs.get("accuracy"), double(hits) / double(n), 1e-6);
  // And the loss is the mean binary crossentropy.
  double bce = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double q = std::clamp(double(p.data<float>()[i]), 1e-7, 1.0 - 1e-7), t = y.data<float>()[i];
    bce -= t * std::log(q) + (1 - t) * std::log(1 - q);
  }
  EXPECT_NEAR(logs.get("loss"), bce / double(n), 1e-4 * bce / double(n));
}

TEST(ModelApiMetrics, EvaluateMseEqualsHandComputedLoss) {
  tk::utils::set_random_seed(41);
  const int64_t n = 50;  // batches of 32 and 18: the mean must be weighted by batch size
  Tensor x = uniform({n, 3}, 41);
  Tensor y = uniform({n, 2}, 42, -2.0f, 2.0f);
  Sequential m({layers::Input({3}), layers::Dense(2)});
  m.compile(optimizers::SGD(), "mse");
  tk::Logs logs = m.evaluate(x, y);
  Tensor p = m.predict(x);
  double s = 0;
  for (int64_t i = 0; i < n * 2; ++i) {
    const double d = double(p.data<float>()[i]) - double(y.data<float>()[i]);
    s += d * d;
  }
  const double mse = s / double(n * 2);
  ASSERT_GT(mse, 0.0);
  EXPECT_NEAR(logs.get("loss"), mse, 1e-5 * mse);
  // Same answer for any batch size.
  EXPECT_NEAR(m.evaluate(x, y, {.batch_size = 7}).get("loss"), mse, 1e-5 * mse);
  EXPECT_NEAR(m.evaluate(x, y, {.batch_size = 1000}).get("loss"), mse, 1e-5 * mse);
  // evaluate does not train.
  std::vector<Tensor> before = m.get_weights();
  m.evaluate(x, y);
  EXPECT_TRUE(same_weights(before, m.get_weights()));
}

TEST(ModelApiMetrics, PredictIsIndependentOfBatchSize) {
  tk::utils::set_random_seed(43);
  Sequential m({layers::Input({5}), layers::Dense(7, "tanh"), layers::Dense(3, "softmax")});
  Tensor x = uniform({37, 5}, 44);
  Tensor a = m.predict(x, 37), b = m.predict(x, 5), c = m.predict(x, 1);
  ASSERT_EQ(a.shape(), (Shape{37, 3}));
  std::vector<float> va = values(a), vb = values(b), vc = values(c);
  for (size_t i = 0; i < va.size(); ++i) {
    EXPECT_NEAR(va[i], vb[i], 1e-6f);
    EXPECT_NEAR(va[i], vc[i], 1e-6f);
  }
}

// ---------------------------------------------------------------- fit options

TEST(ModelApiFit, ValidationSplitProducesValKeys) {
  tk::utils::set_random_seed(51);
  const int64_t n = 100;
  Tensor x = uniform({n, 4}, 51);
  Tensor y = labels(n, 3, 52);
  auto m = small_classifier();
  m->compile(optimizers::Adam(), "sparse_categorical_crossentropy", {"accuracy"});
  auto rec = std::make_shared<Recorder>();
  FitOptions o = quiet(2, 32);
  o.validation_split = 0.2f;
  o.callbacks = {rec};
  History h = m->fit(x, y, o);
  for (const char* key : {"loss", "accuracy", "val_loss", "val_accuracy"}) {
    ASSERT_EQ(h.history.count(key), 1u) << key;
    EXPECT_EQ(h.history[key].size(), 2u) << key;
  }
  EXPECT_EQ(rec->params.steps, 3);  // 80 training samples in batches of 32
  // The validation set is the last 20% (before shuffling), evaluated with the final weights.
  tk::Logs val = m->evaluate(x.slice_rows(80, 100), y.slice_rows(80, 100));
  EXPECT_NEAR(h.history["val_loss"].back(), val.get("loss"), 1e-5 * val.get("loss"));
  EXPECT_NEAR(h.history["val_accuracy"].back(), val.get("accuracy"), 1e-6);
}

TEST(ModelApiFit, ValidationDataProducesValKeys) {
  tk::utils::set_random_seed(53);
  Tensor x = uniform({64, 4}, 53), vx = uniform({20, 4}, 54);
  Tensor y = labels(64, 3, 55), vy = labels(20, 3, 56);
  auto m = small_classifier();
  m->compile(optimizers::Adam(), "sparse_categorical_crossentropy", {"accuracy"});
  FitOptions o = quiet(3, 16);
  o.validation_data = std::make_pair(std::vector<Tensor>{vx}, std::vector<Tensor>{vy});
  History h = m->fit(x, y, o);
  ASSERT_EQ(h.history["val_loss"].size(), 3u);
  ASSERT_EQ(h.history["val_accuracy"].size(), 3u);
  tk::Logs val = m->evaluate(vx, vy);
  EXPECT_NEAR(h.history["val_loss"].back(), val.get("loss"), 1e-5 * val.get("loss"));
  EXPECT_NEAR(h.history["val_accuracy"].back(), val.get("accuracy"), 1e-6);

  // Badly shaped validation data is reported as such.
  o.validation_data = std::make_pair(std::vector<Tensor>{uniform({20, 5}, 1)}, std::vector<Tensor>{vy});
  std::string msg = error_of<tk::InvalidArgument>([&] { m->fit(x, y, o); });
  EXPECT_CONTAINS(msg, "validation_data");
}

TEST(ModelApiFit, InitialEpochSetsHistoryEpochs) {
  auto m = small_classifier();
  m->compile(optimizers::SGD(), "sparse_categorical_crossentropy");
  FitOptions o = quiet(5, 16);
  o.initial_epoch = 2;
  auto rec = std::make_shared<Recorder>();
  o.callbacks = {rec};
  History h = m->fit(uniform({32, 4}, 1), labels(32, 3, 2), o);
  EXPECT_EQ(h.epoch, (std::vector<int>{2, 3, 4}));
  EXPECT_EQ(h.history["loss"].size(), 3u);
  EXPECT_EQ(rec->epochs_begun, (std::vector<int>{2, 3, 4}));
  EXPECT_EQ(rec->params.epochs, 5);
}

TEST(ModelApiFit, StepsPerEpochCountsBatches) {
  auto m = small_classifier();
  m->compile(optimizers::SGD(), "sparse_categorical_crossentropy");
  Tensor x = uniform({100, 4}, 3);
  Tensor y = labels(100, 3, 4);

  auto rec = std::make_shared<Recorder>();
  FitOptions o = quiet(2, 32);
  o.callbacks = {rec};
  m->fit(x, y, o);
  EXPECT_EQ(rec->batches, 2 * 4);  // ceil(100 / 32) per epoch
  EXPECT_EQ(rec->params.steps, 4);

  for (int64_t steps : {3, 15}) {  // fewer than one pass, and more (wraps around)
    auto r = std::make_shared<Recorder>();
    FitOptions s = quiet(2, 10);
    s.steps_per_epoch = steps;
    s.callbacks = {r};
    const int64_t iterations = m->optimizer()->iterations();
    m->fit(x, y, s);
    EXPECT_EQ(r->batches, 2 * steps) << steps;
    EXPECT_EQ(r->params.steps, steps);
    EXPECT_EQ(m->optimizer()->iterations() - iterations, 2 * steps);
  }
}

TEST(ModelApiFit, SameSeedNoShuffleGivesIdenticalHistory) {
  Tensor x = uniform({60, 4}, 61);
  Tensor y = labels(60, 3, 62);
  auto run = [&](bool shuffle, uint64_t fit_seed) {
    tk::utils::set_random_seed(60);
    auto m = small_classifier();
    m->compile(optimizers::Adam(), "sparse_categorical_crossentropy", {"accuracy"});
    FitOptions o = quiet(3, 16);
    o.shuffle = shuffle;
    o.seed = fit_seed;
    History h = m->fit(x, y, o);
    return std::make_pair(h.history["loss"], m->get_weights());
  };
  auto a = run(false, 0), b = run(false, 0);
  EXPECT_EQ(a.first, b.first);
  EXPECT_TRUE(same_weights(a.second, b.second));
  // Shuffling with a fixed fit seed is reproducible as well, and differs from the unshuffled order.
  auto c = run(true, 5), d = run(true, 5), e = run(true, 6);
  EXPECT_EQ(c.first, d.first);
  EXPECT_TRUE(same_weights(c.second, d.second));
  EXPECT_FALSE(same_weights(c.second, a.second));
  EXPECT_FALSE(same_weights(c.second, e.second));
}

TEST(ModelApiFit, CallbacksReceiveEventsInOrder) {
  auto m = small_classifier();
  m->compile(optimizers::SGD(), "sparse_categorical_crossentropy");
  auto rec = std::make_shared<Recorder>();
  FitOptions o = quiet(2, 4);
  o.callbacks = {rec};
  m->fit(uniform({10, 4}, 1), labels(10, 3, 2), o);  // 3 batches per epoch (4, 4, 2)
  std::vector<std::string> want{"train_begin"};
  for (int e = 0; e < 2; ++e) {
    want.push_back("epoch_begin " + std::to_string(e));
    for (int b = 0; b < 3; ++b) {
      want.push_back("batch_begin " + std::to_string(b));
      want.push_back("batch_end " + std::to_string(b) + " loss");
    }
    want.push_back("epoch_end " + std::to_string(e) + " loss");
  }
  want.push_back("train_end");
  EXPECT_EQ(rec->events, want);
  EXPECT_EQ(rec->seen_model, m.get());
  EXPECT_EQ(rec->params.epochs, 2);
  EXPECT_EQ(rec->params.steps, 3);
}

TEST(ModelApiFit, StopTrainingEndsFitEarly) {
  struct StopAfter : tk::Callback {
    int at;
    explicit StopAfter(int e) : at(e) {}
    void on_epoch_end(int e, const tk::Logs&) override {
      if (e == at) model->stop_training = true;
    }
  };
  auto m = small_classifier();
  m->compile(optimizers::SGD(), "sparse_categorical_crossentropy");
  auto rec = std::make_shared<Recorder>();
  FitOptions o = quiet(10, 8);
  o.callbacks = {std::make_shared<StopAfter>(1), rec};
  History h = m->fit(uniform({16, 4}, 1), labels(16, 3, 2), o);
  EXPECT_EQ(h.epoch, (std::vector<int>{0, 1}));
  EXPECT_EQ(rec->epochs_begun, (std::vector<int>{0, 1}));
  EXPECT_EQ(rec->events.back(), "train_end");
  // A new fit starts afresh (stop_training is reset).
  o.epochs = 1;
  o.callbacks = {};
  EXPECT_EQ(m->fit(uniform({16, 4}, 1), labels(16, 3, 2), o).epoch, (std::vector<int>{0}));
}

TEST(ModelApiFit, ZeroEpochsDoesNothing) {
  auto m = small_classifier();
  m->compile(optimizers::SGD(), "sparse_categorical_crossentropy");
  std::vector<Tensor> before = m->get_weights();
  History h = m->fit(uniform({16, 4}, 1), labels(16, 3, 2), quiet(0));
  EXPECT_TRUE(h.epoch.empty());
  EXPECT_TRUE(same_weights(before, m->get_weights()));
}

// ---------------------------------------------------------------- frozen layers

TEST(ModelApiFrozen, FrozenLayerWeightsAreBitIdenticalAfterFit) {
  tk::utils::set_random_seed(71);
  Sequential m(
      {layers::Input({4}), layers::Dense(8, "relu", {.name = "frozen"}), layers::Dense(3, "linear", {.name = "head"})});
  Tensor x = uniform({64, 4}, 71);
  Tensor y = labels(64, 3, 72);
  m.get_layer("frozen")->trainable = false;
  m.compile(adam(0.01f), tk::losses::SparseCategoricalCrossentropy({.from_logits = true}));
  std::vector<Tensor> before = m.get_weights();
  m.fit(x, y, quiet(2, 16));
  std::vector<Tensor> after = m.get_weights();
  ASSERT_EQ(after.size(), 4u);
  EXPECT_TRUE(same_bits(before[0], after[0]));
  EXPECT_TRUE(same_bits(before[1], after[1]));
  EXPECT_FALSE(same_bits(before[2], after[2]));
  EXPECT_FALSE(same_bits(before[3], after[3]));
  EXPECT_CONTAINS(summary_of(m), "Non-trainable params: 40 ");
}

TEST(ModelApiFrozen, FreezingAfterTrainingTakesEffectOnRecompile) {
  tk::utils::set_random_seed(73);
  Sequential m(
      {layers::Input({4}), layers::Dense(8, "relu", {.name = "body"}), layers::Dense(3, "linear", {.name = "head"})});
  Tensor x = uniform({32, 4}, 73);
  Tensor y = labels(32, 3, 74);
  m.compile(adam(0.01f), tk::losses::SparseCategoricalCrossentropy({.from_logits = true}));
  std::vector<Tensor> w0 = m.get_weights();
  m.fit(x, y, quiet(1, 16));
  std::vector<Tensor> w1 = m.get_weights();
  EXPECT_FALSE(same_bits(w0[0], w1[0]));  // body trains while trainable

  m.get_layer("body")->trainable = false;
  m.compile(adam(0.01f), tk::losses::SparseCategoricalCrossentropy({.from_logits = true}));
  m.fit(x, y, quiet(1, 16));
  std::vector<Tensor> w2 = m.get_weights();
  EXPECT_TRUE(same_bits(w1[0], w2[0]));
  EXPECT_TRUE(same_bits(w1[1], w2[1]));
  EXPECT_FALSE(same_bits(w1[2], w2[2]));
}

// ---------------------------------------------------------------- dropout

TEST(ModelApiDropout, IdentityAtInference) {
  tk::utils::set_random_seed(81);
  Sequential with({layers::Input({6}), layers::Dense(16, "relu"), layers::Dropout(0.5f), layers::Dense(3)});
  Sequential without({layers::Input({6}), layers::Dense(16, "relu"), layers::Dense(3)});
  without.set_weights(with.get_weights());
  Tensor x = uniform({40, 6}, 82);
  EXPECT_TRUE(same_bits(with.predict(x), without.predict(x)));
  // evaluate is inference too.
  Tensor y = uniform({40, 3}, 83);
  with.compile(optimizers::SGD(), "mse");
  without.compile(optimizers::SGD(), "mse");
  EXPECT_EQ(with.evaluate(x, y).get("loss"), without.evaluate(x, y).get("loss"));
}

TEST(ModelApiDropout, SeededFitsAreIdenticalAndDropoutActsInTraining) {
  Tensor x = uniform({64, 6}, 84);
  Tensor y = labels(64, 3, 85);
  auto run = [&](float rate) {
    tk::utils::set_random_seed(86);
    Sequential m({layers::Input({6}), layers::Dense(16, "relu"), layers::Dropout(rate, 1234), layers::Dense(3)});
    m.compile(adam(0.01f), tk::losses::SparseCategoricalCrossentropy({.from_logits = true}));
    FitOptions o = quiet(2, 16);
    o.seed = 9;
    History h = m.fit(x, y, o);
    return std::make_pair(m.get_weights(), h.history["loss"]);
  };
  auto a = run(0.5f), b = run(0.5f), none = run(0.0f);
  EXPECT_TRUE(same_weights(a.first, b.first));
  EXPECT_EQ(a.second, b.second);
  EXPECT_FALSE(same_weights(a.first, none.first));  // the mask changed the gradients
  EXPECT_THROW(layers::Dropout(1.0f), tk::InvalidArgument);
  EXPECT_THROW(layers::Dropout(-0.1f), tk::InvalidArgument);
}

// ---------------------------------------------------------------- bad input

TEST(ModelApiErrors, WrongSampleShapeNamesBothShapes) {
  Sequential m({layers::Input({784}), layers::Dense(10)});
  m.compile(optimizers::Adam(), "sparse_categorical_crossentropy");
  Tensor x = uniform({8, 100}, 1);
  Tensor y = labels(8, 10, 2);
  for (auto call : std::vector<std::function<void()>>{[&] { m.fit(x, y, quiet()); }, [&] { m.evaluate(x, y); },
                                                      [&] { m.predict(x); }}) {
    std::string msg = error_of<tk::InvalidArgument>(call);
    EXPECT_CONTAINS(msg, "(None, 784)");
    EXPECT_CONTAINS(msg, "(8, 100)");
  }
  // A rank mismatch is reported the same way.
  std::string msg = error_of<tk::InvalidArgument>([&] { m.predict(uniform({8, 28, 28}, 3)); });
  EXPECT_CONTAINS(msg, "(None, 784)");
  EXPECT_CONTAINS(msg, "(8, 28, 28)");
}

TEST(ModelApiErrors, SampleCountMismatch) {
  auto m = small_classifier();
  m->compile(optimizers::Adam(), "sparse_categorical_crossentropy");
  std::string msg = error_of<tk::InvalidArgument>([&] { m->fit(uniform({8, 4}, 1), labels(7, 3, 2), quiet()); });
  EXPECT_CONTAINS(msg, "8");
  EXPECT_CONTAINS(msg, "7");
  msg = error_of<tk::InvalidArgument>([&] { m->evaluate(uniform({8, 4}, 1), labels(9, 3, 2)); });
  EXPECT_CONTAINS(msg, "9");
}

TEST(ModelApiErrors, WrongTargetShape) {
  auto m = small_classifier();
  m->compile(optimizers::Adam(), "mse");
  std::string msg = error_of<tk::InvalidArgument>([&] { m->fit(uniform({8, 4}, 1), uniform({8, 5}, 2), quiet()); });
  EXPECT_CONTAINS(msg, "(None, 3)");
  EXPECT_CONTAINS(msg, "(8, 5)");
}

TEST(ModelApiErrors, UnknownActivation) {
  std::string msg = error_of<tk::InvalidArgument>([] { layers::Dense(3, "foo"); });
  EXPECT_CONTAINS(msg, "'foo'");
  EXPECT_CONTAINS(msg, "relu");  // lists the valid names
  msg = error_of<tk::InvalidArgument>([] { layers::Activation("swishy"); });
  EXPECT_CONTAINS(msg, "swishy");
}

TEST(ModelApiErrors, UnknownLoss) {
  auto m = small_classifier();
  std::string msg = error_of<tk::InvalidArgument>([&] { m->compile(optimizers::Adam(), "hinge_loss"); });
  EXPECT_CONTAINS(msg, "hinge_loss");
  EXPECT_CONTAINS(msg, "mse");
  // A failed compile leaves the model uncompiled.
  msg = error_of<tk::InvalidArgument>([&] { m->fit(uniform({4, 4}, 1), labels(4, 3, 1), quiet()); });
  EXPECT_CONTAINS(msg, "compile");
}

TEST(ModelApiErrors, UnknownMetric) {
  auto m = small_classifier();
  std::string msg = error_of<tk::InvalidArgument>(
      [&] { m->compile(optimizers::Adam(), "sparse_categorical_crossentropy", {"f1_score"}); });
  EXPECT_CONTAINS(msg, "f1_score");
  EXPECT_CONTAINS(msg, "accuracy");
}

TEST(ModelApiErrors, UnknownOptimizerName) {
  std::string msg = error_of<tk::InvalidArgument>([] { optimizers::get("adamx"); });
  EXPECT_CONTAINS(msg, "adamx");
  EXPECT_CONTAINS(msg, "sgd");
  // Names are case-insensitive and map to the right optimizer.
  EXPECT_EQ(optimizers::get("RMSprop")->name(), "RMSprop");
  EXPECT_EQ(optimizers::get("SGD")->name(), "SGD");
  EXPECT_FLOAT_EQ(optimizers::get("adam")->learning_rate(), 0.001f);
  EXPECT_FLOAT_EQ(optimizers::get("sgd", 0.5f)->learning_rate(), 0.5f);
  std::string null_msg = error_of<tk::InvalidArgument>([] { small_classifier()->compile(nullptr, "mse"); });
  EXPECT_CONTAINS(null_msg, "optimizer");
}

TEST(ModelApiErrors, NegativeLearningRate) {
  std::string msg = error_of<tk::InvalidArgument>([] { sgd(-0.1f); });
  EXPECT_CONTAINS(msg, "learning_rate");
  EXPECT_CONTAINS(msg, "-0.1");
  msg = error_of<tk::InvalidArgument>([] { optimizers::get("adam", -0.5f); });
  EXPECT_CONTAINS(msg, "-0.5");
  msg = error_of<tk::InvalidArgument>([] { adam(-1.0f); });
  EXPECT_CONTAINS(msg, "learning_rate");
  msg = error_of<tk::InvalidArgument>([] { optimizers::Adam()->set_learning_rate(std::nanf("")); });
  EXPECT_CONTAINS(msg, "learning_rate");
}

TEST(ModelApiErrors, BadBatchSize) {
  auto m = small_classifier();
  m->compile(optimizers::Adam(), "sparse_categorical_crossentropy");
  Tensor x = uniform({8, 4}, 1);
  Tensor y = labels(8, 3, 2);
  std::string msg = error_of<tk::InvalidArgument>([&] { m->fit(x, y, quiet(1, 0)); });
  EXPECT_CONTAINS(msg, "batch_size");
  EXPECT_CONTAINS(msg, "0");
  msg = error_of<tk::InvalidArgument>([&] { m->evaluate(x, y, {.batch_size = 0}); });
  EXPECT_CONTAINS(msg, "batch_size");
  msg = error_of<tk::InvalidArgument>([&] { m->predict(x, -3); });
  EXPECT_CONTAINS(msg, "-3");
}

TEST(ModelApiErrors, BadValidationSplit) {
  auto m = small_classifier();
  m->compile(optimizers::Adam(), "sparse_categorical_crossentropy");
  FitOptions o = quiet();
  o.validation_split = 1.5f;
  std::string msg = error_of<tk::InvalidArgument>([&] { m->fit(uniform({8, 4}, 1), labels(8, 3, 2), o); });
  EXPECT_CONTAINS(msg, "validation_split");
  EXPECT_CONTAINS(msg, "1.5");
  o.validation_split = -0.25f;
  msg = error_of<tk::InvalidArgument>([&] { m->fit(uniform({8, 4}, 1), labels(8, 3, 2), o); });
  EXPECT_CONTAINS(msg, "validation_split");
  // A split that leaves no validation sample.
  o.validation_split = 0.01f;
  msg = error_of<tk::InvalidArgument>([&] { m->fit(uniform({8, 4}, 1), labels(8, 3, 2), o); });
  EXPECT_CONTAINS(msg, "validation_split");
}

TEST(ModelApiErrors, BadEpochOptions) {
  auto m = small_classifier();
  m->compile(optimizers::Adam(), "sparse_categorical_crossentropy");
  FitOptions o = quiet(-1);
  std::string msg = error_of<tk::InvalidArgument>([&] { m->fit(uniform({8, 4}, 1), labels(8, 3, 2), o); });
  EXPECT_CONTAINS(msg, "epochs");
  o = quiet(2);
  o.initial_epoch = 3;
  msg = error_of<tk::InvalidArgument>([&] { m->fit(uniform({8, 4}, 1), labels(8, 3, 2), o); });
  EXPECT_CONTAINS(msg, "initial_epoch");
}

TEST(ModelApiErrors, SparseLabelOutOfRange) {
  tk::utils::set_random_seed(91);
  Sequential m({layers::Input({4}), layers::Dense(10)});
  m.compile(optimizers::Adam(), tk::losses::SparseCategoricalCrossentropy({.from_logits = true}), {"accuracy"});
  std::vector<int32_t> ys{0, 1, 2, 3, 12, 5, 6, 7};
  Tensor x = uniform({8, 4}, 91);
  Tensor y = Tensor::from_vector<int32_t>({8}, ys);
  std::vector<Tensor> before = m.get_weights();
  std::string msg = error_of<tk::InvalidArgument>([&] { m.fit(x, y, quiet(1, 8)); });
  EXPECT_CONTAINS(msg, "12");
  EXPECT_CONTAINS(msg, "10");
  EXPECT_TRUE(same_weights(before, m.get_weights()));  // nothing was updated
  msg = error_of<tk::InvalidArgument>([&] { m.evaluate(x, y); });
  EXPECT_CONTAINS(msg, "12");
  // Negative labels too.
  ys[0] = -1;
  msg = error_of<tk::InvalidArgument>([&] { m.evaluate(x, Tensor::from_vector<int32_t>({8}, ys)); });
  EXPECT_CONTAINS(msg, "-1");
  // The model is still usable with valid labels.
  ys[0] = 0;
  ys[4] = 4;
  History h = m.fit(x, Tensor::from_vector<int32_t>({8}, ys), quiet(1, 8));
  EXPECT_TRUE(std::isfinite(h.history["loss"][0]));
}

TEST(ModelApiErrors, FitBeforeCompile) {
  auto m = small_classifier();
  Tensor x = uniform({8, 4}, 1);
  Tensor y = labels(8, 3, 2);
  std::string msg = error_of<tk::InvalidArgument>([&] { m->fit(x, y, quiet()); });
  EXPECT_CONTAINS(msg, "compile");
  msg = error_of<tk::InvalidArgument>([&] { m->evaluate(x, y); });
  EXPECT_CONTAINS(msg, "compile");
  msg = error_of<tk::InvalidArgument>([&] { m->train_on_batch({x}, {y}); });
  EXPECT_CONTAINS(msg, "compile");
  // predict needs no compile (as in Keras).
  EXPECT_EQ(m->predict(x).shape(), (Shape{8, 3}));
}

TEST(ModelApiErrors, DenseWithNonPositiveUnits) {
  std::string msg = error_of<tk::InvalidArgument>([] { layers::Dense(0); });
  EXPECT_CONTAINS(msg, "units");
  EXPECT_CONTAINS(msg, "0");
  msg = error_of<tk::InvalidArgument>([] { layers::Dense(-5); });
  EXPECT_CONTAINS(msg, "-5");
}

TEST(ModelApiErrors, SetWeightsChecksShapes) {
  Sequential m({layers::Input({3}), layers::Dense(2)});
  std::string msg = error_of<tk::InvalidArgument>([&] { m.set_weights({Tensor::zeros({3, 2})}); });
  EXPECT_CONTAINS(msg, "2 weights");
  msg = error_of<tk::InvalidArgument>([&] { m.set_weights({Tensor::zeros({2, 3}), Tensor::zeros({2})}); });
  EXPECT_CONTAINS(msg, "(3, 2)");
  EXPECT_CONTAINS(msg, "(2, 3)");
}

TEST(ModelApiErrors, LogsGetUnknownKey) {
  tk::Logs logs;
  logs.set("loss", 1.5);
  logs.set("loss", 2.5);
  EXPECT_EQ(logs.items().size(), 1u);
  EXPECT_EQ(logs.get("loss"), 2.5);
  std::string msg = error_of<tk::InvalidArgument>([&] { logs.get("acc"); });
  EXPECT_CONTAINS(msg, "acc");
  EXPECT_CONTAINS(msg, "loss");
}

TEST(ModelApiErrors, SequentialMisuse) {
  Sequential m({layers::Input({3}), layers::Dense(2)});
  EXPECT_THROW(m.add(layers::Dense(1)), tk::InvalidArgument);  // already built
  Sequential late;
  late.add(layers::Dense(2));
  EXPECT_THROW(late.add(layers::Input({3})), tk::InvalidArgument);  // Input must come first
  EXPECT_THROW(late.add(layers::Add()), tk::InvalidArgument);       // multi-input layer
  Sequential empty;
  EXPECT_THROW(empty.predict(uniform({2, 3}, 1)), tk::InvalidArgument);
}

// ---------------------------------------------------------------- train_on_batch

TEST(ModelApiTrainOnBatch, ReturnsBatchLossAndUpdatesWeights) {
  tk::utils::set_random_seed(101);
  Sequential m({layers::Input({3}), layers::Dense(2)});
  m.compile(sgd(0.05f), "mse", {});
  Tensor x = uniform({16, 3}, 101);
  Tensor y = uniform({16, 2}, 102, -2.0f, 2.0f);
  const double before_loss = m.evaluate(x, y, {.batch_size = 16}).get("loss");
  std::vector<Tensor> before = m.get_weights();
  const double loss1 = m.train_on_batch({x}, {y}).get("loss");
  EXPECT_NEAR(loss1, before_loss, 1e-5 * before_loss);  // the loss of the batch before the update
  std::vector<Tensor> after = m.get_weights();
  EXPECT_FALSE(same_bits(before[0], after[0]));
  EXPECT_FALSE(same_bits(before[1], after[1]));
  EXPECT_EQ(m.optimizer()->iterations(), 1);
  // A small gradient step on a convex loss lowers it.
  const double loss2 = m.train_on_batch({x}, {y}).get("loss");
  EXPECT_LT(loss2, loss1);
  const double eval3 = m.evaluate(x, y).get("loss");  // before the third step
  const double loss3 = m.train_on_batch({x}, {y}).get("loss");
  EXPECT_NEAR(loss3, eval3, 1e-5 * eval3);
  EXPECT_EQ(m.optimizer()->iterations(), 3);

  // Plain gradient step check on the bias: b' = b - lr * dL/db, dL/db_j = 2/(n*2) * sum_i (p_ij - y_ij).
  std::vector<Tensor> w = m.get_weights();
  Tensor p = m.predict(x);
  double g0 = 0;
  for (int64_t i = 0; i < 16; ++i) g0 += double(p.data<float>()[i * 2]) - double(y.data<float>()[i * 2]);
  g0 *= 2.0 / 32.0;
  m.train_on_batch({x}, {y});
  EXPECT_NEAR(m.get_weights()[1].data<float>()[0], double(w[1].data<float>()[0]) - 0.05 * g0, 1e-5);
}

TEST(ModelApiTrainOnBatch, ReportsMetrics) {
  auto m = small_classifier();
  m->compile(optimizers::Adam(), "sparse_categorical_crossentropy", {"accuracy"});
  const tk::Logs& logs = m->train_on_batch({uniform({10, 4}, 1)}, {labels(10, 3, 2)});
  ASSERT_TRUE(logs.contains("loss"));
  ASSERT_TRUE(logs.contains("accuracy"));
  const double acc = logs.get("accuracy") * 10.0;
  EXPECT_NEAR(acc, std::round(acc), 1e-4);  // a multiple of 1/10
  EXPECT_GE(logs.get("accuracy"), 0.0);
  EXPECT_LE(logs.get("accuracy"), 1.0);
}

}  // namespace
