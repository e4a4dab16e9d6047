// The Keras layers composed of the general ops (ReLU, LeakyReLU, PReLU, ELU, Softmax; Add with broadcasting,
// Subtract, Multiply, Average, Maximum, Minimum; Permute, RepeatVector, Identity, Cropping2D) against Keras 3.15.1:
// each case's layer is loaded from the config Keras serialized (the .keras loader's path), its forward values and
// the gradients of sum(y * dy) for every input and weight compared; NaN inputs give Keras' outputs; a Keras-saved
// functional model holding them all predicts, trains one SGD step as Keras, saves back, and Keras loads trainkit's
// file with the same predictions. Fixtures: tests/fixtures/keras/composites/ (gen_composites.py beside them).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>

#include "cli_run.h"
#include "fixture.h"
#include "graph/autodiff.h"
#include "graph/program.h"
#include "graph/tensor_ops.h"
#include "io/hdf5_tree.h"
#include "io/keras_internal.h"
#include "keras_weights_compare.h"
#include "nn/layers/context.h"
#include "trainkit/io/keras.h"
#include "trainkit/nn/adapt.h"
#include "trainkit/nn/layers.h"
#include "trainkit/nn/model.h"

namespace tk {
namespace {

namespace fs = std::filesystem;
using io::keras::json;

const std::string kDir = std::string(TK_SOURCE_DIR) + "/tests/fixtures/keras/composites/";

json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw IoError("cannot open fixture " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());
}

const json& cases_json() {
  static const json j = read_json(kDir + "composites_cases.json");
  return j;
}
const std::map<std::string, Tensor>& tensors() {
  static const std::map<std::string, Tensor> t = testing::load_fixture(kDir + "composites_expect.txt");
  return t;
}

// |got - want| <= tol * max(1, |want|) elementwise.
void expect_near(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  double worst = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double w = want.data<float>()[i];
    worst = std::max(worst, std::abs(got.data<float>()[i] - w) / std::max(1.0, std::abs(w)));
  }
  EXPECT_LE(worst, tol) << what;
}

Shape shape_of(const json& dims) {
  std::vector<int64_t> d;
  for (const json& v : dims) d.push_back(v.get<int64_t>());
  return Shape(d);
}

// The layer from Keras' serialized object, called on symbolic inputs of the case's shapes (which builds it).
LayerPtr load_layer(const json& layer, const std::vector<Shape>& inputs) {
  LayerPtr l = io::keras::layer_from_json(layer, "case");
  std::vector<KerasTensor> in;
  for (const Shape& s : inputs) in.push_back(tk::Input(s.sample_shape()));
  if (in.size() == 1)
    (*l)(in[0]);
  else
    (*l)(in);
  return l;
}

class CompositeKeras : public ::testing::TestWithParam<std::string> {};

TEST_P(CompositeKeras, ForwardAndGradientsWithin1e6) {
  const std::string id = GetParam();
  const json* c = nullptr;
  for (const json& e : cases_json()["cases"])
    if (e["id"] == id) c = &e;
  ASSERT_TRUE(c);
  const auto& t = tensors();
  std::vector<Shape> shapes;
  for (const json& s : (*c)["inputs"]) shapes.push_back(shape_of(s));
  LayerPtr layer = load_layer((*c)["layer"], shapes);
  ASSERT_EQ(layer->weights().size(), (*c)["weights"].size()) << "the weights Keras creates";
  for (size_t w = 0; w < layer->weights().size(); ++w) {
    const Tensor& v = t.at(id + "/w" + std::to_string(w));
    ASSERT_EQ(layer->weights()[w].value.shape(), v.shape());
    std::memcpy(layer->weights()[w].value.raw(), v.raw(), v.nbytes());
  }
  graph::Graph g;
  nn::CallContext ctx{g, true, DType::f32, {}, {}, {}};
  std::vector<Tensor> xs;
  for (size_t i = 0; i < shapes.size(); ++i) xs.push_back(t.at(id + "/x" + std::to_string(i)).clone());
  std::vector<int> in;
  for (size_t i = 0; i < xs.size(); ++i) in.push_back(g.variable("x" + std::to_string(i), xs[i]));
  const int y = layer->call(ctx, in);
  Tensor dy = t.at(id + "/dy").clone();
  graph::OpBuilder b{g, nullptr, "loss"};
  std::vector<int> all(static_cast<size_t>(dy.shape().rank()));
  std::iota(all.begin(), all.end(), 0);
  const int loss = graph::ops::reduce(
      b, graph::ReduceFn::sum, graph::ops::binary(b, graph::BinaryFn::multiply, y, g.variable("dy", dy)), all, false);
  std::vector<int> wrt = in;
  size_t trainable = 0;
  for (const Weight& w : layer->weights())
    if (w.trainable) wrt.push_back(ctx.variable(w)), ++trainable;
  const std::vector<int> grads = graph::gradients(g, {loss}, wrt);
  std::vector<int> outs{y};
  for (int gr : grads) {
    ASSERT_GE(gr, 0);
    outs.push_back(gr);
  }
  graph::Program p(std::move(g), outs, {}, Device::cpu());
  p.run(graph::ExecContext{});
  expect_near(p.output(y), t.at(id + "/y"), 1e-6, id + " y");
  for (size_t i = 0; i < in.size(); ++i)
    expect_near(p.output(grads[i]), t.at(id + "/dx" + std::to_string(i)), 1e-6, id + " dx" + std::to_string(i));
  for (size_t w = 0; w < trainable; ++w)
    expect_near(p.output(grads[in.size() + w]), t.at(id + "/dw" + std::to_string(w)), 1e-6,
                id + " dw" + std::to_string(w));
}

std::vector<std::string> case_ids() {
  std::vector<std::string> ids;
  for (const json& e : cases_json()["cases"]) ids.push_back(e["id"].get<std::string>());
  return ids;
}
INSTANTIATE_TEST_SUITE_P(Fixtures, CompositeKeras, ::testing::ValuesIn(case_ids()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// Saving writes Keras' keys with Keras' values: every key of Keras' config is in trainkit's with the same value,
// or is null in Keras' (a default trainkit leaves out); and the written config loads back as the same layer.
TEST(CompositeKeras, ConfigWrittenAsKerasWritesIt) {
  for (const json& c : cases_json()["cases"]) {
    const std::string id = c["id"].get<std::string>();
    std::vector<Shape> shapes;
    for (const json& s : c["inputs"]) shapes.push_back(shape_of(s));
    LayerPtr layer = load_layer(c["layer"], shapes);
    const json mine = io::keras::layer_to_json(*layer);
    EXPECT_EQ(mine["class_name"], c["layer"]["class_name"]) << id;
    for (const auto& [key, value] : c["layer"]["config"].items()) {
      if (value.is_null()) {
        EXPECT_TRUE(!mine["config"].contains(key) || mine["config"][key].is_null()) << id << " " << key;
        continue;
      }
      ASSERT_TRUE(mine["config"].contains(key)) << id << ": trainkit does not write '" << key << "'";
      EXPECT_EQ(mine["config"][key], value) << id << " " << key;
    }
    LayerPtr back = load_layer(mine, shapes);
    EXPECT_EQ(io::keras::layer_to_json(*back), mine) << id;
  }
}

float value_of(const json& v) { return v.is_string() ? std::nanf("") : v.get<float>(); }

// NaN in: Keras' outputs (the relu family keeps NaN, but ReLU(threshold) maps it to 0, Keras' where(x > t, x, 0)).
TEST(CompositeKeras, NaNAsKeras) {
  for (const json& c : cases_json()["nan_cases"]) {
    const std::string id = c["id"].get<std::string>();
    const Shape s = shape_of(c["shape"]);
    std::vector<Shape> shapes(c["x"].size(), s);
    LayerPtr layer = load_layer(c["layer"], shapes);
    for (Weight& w : layer->weights()) std::memset(w.value.raw(), 0, w.value.nbytes());  // Keras' zeros
    graph::Graph g;
    nn::CallContext ctx{g, false, DType::f32, {}, {}, {}};
    std::vector<Tensor> xs;
    for (const json& x : c["x"]) {
      Tensor t(s, DType::f32);
      for (size_t i = 0; i < x.size(); ++i) t.data<float>()[i] = value_of(x[i]);
      xs.push_back(t);
    }
    std::vector<int> in;
    for (size_t i = 0; i < xs.size(); ++i) in.push_back(g.variable("x" + std::to_string(i), xs[i]));
    const int y = layer->call(ctx, in);
    graph::Program p(std::move(g), {y}, {}, Device::cpu());
    p.run(graph::ExecContext{});
    const Tensor out = p.output(y);
    for (size_t i = 0; i < c["y"].size(); ++i) {
      const float want = value_of(c["y"][i]), got = out.data<float>()[i];
      if (std::isnan(want))
        EXPECT_TRUE(std::isnan(got)) << id << " [" << i << "] = " << got;
      else
        EXPECT_NEAR(got, want, 1e-6) << id << " [" << i << "]";
    }
  }
}

// The Keras-saved functional model (EfficientNet's Rescaling + adapted Normalization stem and squeeze-and-excitation
// Multiply, MobileNetV2's ReLU(6), every composite layer once):
// predictions, one SGD step's loss and weights as Keras', then saved and loaded back with the same predictions.
TEST(CompositeKerasModel, LoadsPredictsTrainsOneStepAndSavesBack) {
  auto r = testing::load_fixture(kDir + "composites_model_expect.txt");
  auto model = models::load_model(kDir + "composites_model.keras");
  expect_near(model->predict(r.at("x")), r.at("predict"), 1e-6, "predict");
  const Logs& logs = model->train_on_batch({r.at("x")}, {r.at("labels")});
  EXPECT_NEAR(logs.get("loss"), r.at("train_loss").data<float>()[0], 1e-6);
  int checked = 0;
  for (const LayerPtr& layer : model->layers())
    for (const Weight& w : layer->weights()) {
      const std::string key = "after/" + w.name;
      ASSERT_TRUE(r.count(key)) << key;
      expect_near(w.value, r.at(key), 1e-6, key);
      ++checked;
    }
  EXPECT_EQ(checked, 12);  // normalization mean, variance, count; conv2d, p_re_lu, dense, conv2d_1, dense_1
  expect_near(model->predict(r.at("x")), r.at("predict_after"), 1e-5, "predict after the step");
  const fs::path dir = fs::temp_directory_path() / ("tk_composites_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "roundtrip.keras").string();
  model->save(path);
  auto back = models::load_model(path);
  const Tensor a = model->predict(r.at("x")), c = back->predict(r.at("x"));
  ASSERT_EQ(a.shape(), c.shape());
  for (int64_t i = 0; i < a.numel(); ++i) EXPECT_EQ(a.data<float>()[i], c.data<float>()[i]) << i;
  fs::remove_all(dir);
}

// The file trainkit writes after its own step, which Keras loaded (gen_composites.py --check-trainkit wrote the
// verdict keras_loaded_trainkit_composites.json), is what trainkit writes today. With TK_KERAS_FIXTURE_OUT set,
// (re)writes trainkit_composites.keras and its predictions there instead.
TEST(CompositeKerasModel, TrainkitWrittenFileKerasLoadedIsStillWhatTrainkitWrites) {
  auto r = testing::load_fixture(kDir + "composites_model_expect.txt");
  auto model = models::load_model(kDir + "composites_model.keras");
  model->train_on_batch({r.at("x")}, {r.at("labels")});
  const Tensor pred = model->predict(r.at("x"));
  if (const char* out = std::getenv("TK_KERAS_FIXTURE_OUT")) {
    model->save(std::string(out) + "/trainkit_composites.keras");
    std::ofstream f(std::string(out) + "/trainkit_composites_predict.txt");
    f << "# trainkit's predictions (tests/test_composite_layers.cpp; checked in Keras by gen_composites.py)\n";
    f.precision(9);
    for (const auto& [n, t] : std::vector<std::pair<std::string, Tensor>>{{"x", r.at("x")}, {"predict", pred}}) {
      f << "tensor " << n << " float32 " << t.shape().rank();
      for (int i = 0; i < t.shape().rank(); ++i) f << " " << t.shape()[i];
      f << "\n";
      for (int64_t i = 0; i < t.numel(); ++i) f << (i ? " " : "") << t.data<float>()[i];
      f << "\n";
    }
    GTEST_SKIP() << "wrote trainkit_composites.keras into " << out;
  }
  const json verdict = read_json(kDir + "keras_loaded_trainkit_composites.json");
  EXPECT_EQ(verdict["keras_loaded_trainkit_file"], "ok");
  EXPECT_EQ(verdict["trainkit_format"], io::kKerasFormatVersion);
  EXPECT_LE(verdict["max_abs_diff_predict"].get<double>(), 1e-5);
  const fs::path dir = fs::temp_directory_path() / ("tk_composites_now_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  model->save((dir / "now.keras").string());
  const auto committed = io::keras::read_archive(kDir + "trainkit_composites.keras");
  const auto now = io::keras::read_archive((dir / "now.keras").string());
  EXPECT_EQ(io::keras::json::parse(committed.config), io::keras::json::parse(now.config));
  io::H5Tree a = io::read_h5_tree_image("committed", committed.weights.data(), committed.weights.size());
  io::H5Tree b = io::read_h5_tree_image("now", now.weights.data(), now.weights.size());
  EXPECT_EQ(a.groups, b.groups);
  ASSERT_EQ(a.datasets.size(), b.datasets.size());
  testing::expect_same_weights(a, b, 1e-6f);
  fs::remove_all(dir);
}

template <typename F>
void expect_error_mentions(F f, const std::string& what) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning " << what;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

// Normalization.adapt of one array (the C++ API's adapt) as Keras': mean and biased variance over the reduced axes;
// count stays as it was.
TEST(CompositeKeras, NormalizationAdaptAsKeras) {
  const auto& t = tensors();
  for (const auto& [id, axis] :
       std::vector<std::pair<std::string, std::vector<int>>>{{"adapt_last", {-1}}, {"adapt_axes", {1, 2}}}) {
    LayerPtr n = layers::Normalization({.axis = axis});
    layers::adapt(n, t.at(id + "/data"));
    ASSERT_EQ(n->weights().size(), 3u) << id;
    expect_near(n->weights()[0].value, t.at(id + "/mean"), 1e-6, id + " mean");
    expect_near(n->weights()[1].value, t.at(id + "/variance"), 1e-6, id + " variance");
    expect_near(n->weights()[2].value, t.at(id + "/count"), 0, id + " count");
    EXPECT_FALSE(n->weights()[0].trainable);
    EXPECT_EQ(n->weights()[2].file_dtype, DType::i32) << "Keras' count is int32 in files";
  }
  expect_error_mentions(
      [] {
        layers::adapt(layers::ReLU({.name = "r"}), Tensor(Shape{2, 2}, DType::f32));
      },
      "'r' (ReLU) is not a Normalization");
}

// adapt over a dataset of batches (Keras' adapt of a batched dataset: the first component of each element) gives
// Keras' statistics of the whole array; other dtypes are read as float32 values.
TEST(CompositeKeras, NormalizationAdaptOverBatchesAsKeras) {
  const auto& t = tensors();
  for (const auto& [id, axis] :
       std::vector<std::pair<std::string, std::vector<int>>>{{"adapt_last", {-1}}, {"adapt_axes", {1, 2}}}) {
    const Tensor& x = t.at(id + "/data");
    for (int64_t batch : {1, 2, 3, 64}) {
      LayerPtr n = layers::Normalization({.axis = axis});
      const Tensor labels = Tensor::zeros(Shape{x.dim(0)}, DType::i32);
      layers::adapt(n, data::Dataset::from_tensor_slices({x, labels}).batch(batch));
      const std::string what = id + " in batches of " + std::to_string(batch);
      expect_near(n->weights()[0].value, t.at(id + "/mean"), 1e-6, what + " mean");
      expect_near(n->weights()[1].value, t.at(id + "/variance"), 1e-6, what + " variance");
      expect_near(n->weights()[2].value, t.at(id + "/count"), 0, what + " count");
    }
  }
  // uint8 images: the statistics of their values (as Keras' float32 cast), without a float32 copy of the whole array.
  Tensor pixels(Shape{7, 2, 3}, DType::u8);
  for (int64_t i = 0; i < pixels.numel(); ++i) pixels.data<uint8_t>()[i] = static_cast<uint8_t>((i * 37) % 256);
  LayerPtr a = layers::Normalization({}), b = layers::Normalization({});
  layers::adapt(a, pixels);
  layers::adapt(b, pixels.to(DType::f32));
  expect_near(a->weights()[0].value, b->weights()[0].value, 0, "uint8 mean");
  expect_near(a->weights()[1].value, b->weights()[1].value, 0, "uint8 variance");
  expect_error_mentions(
      [] {
        layers::adapt(layers::Normalization({.name = "n"}),
                      data::Dataset::from_tensor_slices({Tensor::zeros(Shape{4, 3})}).take(0));
      },
      "'n': adapt() got an empty dataset");
  expect_error_mentions(
      [] {
        LayerPtr n = layers::Normalization({.name = "n"});
        layers::adapt(n, Tensor::zeros(Shape{4, 3}));
        layers::adapt(n, data::Dataset::from_tensor_slices({Tensor::zeros(Shape{4, 5})}).batch(2));
      },
      "'n': adapt() data (2, 5) does not match the layer's kept axes");
}

// Bad arguments and shapes are one clear error naming the layer.
TEST(CompositeLayers, ClearErrors) {
  using namespace layers;
  expect_error_mentions([] { ReLU({.max_value = -1.0f, .name = "r"}); }, "'r': max_value must be >= 0");
  expect_error_mentions([] { LeakyReLU(-0.1f, "lk"); }, "'lk': negative_slope");
  expect_error_mentions([] { Softmax(0, "sm")(tk::Input({4})); }, "'sm': axis 0");
  expect_error_mentions([] { Multiply("m")({tk::Input({3, 4}), tk::Input({3, 5})}); }, "'m': incompatible");
  expect_error_mentions([] { Subtract("s")({tk::Input({3}), tk::Input({3}), tk::Input({3})}); }, "exactly 2");
  expect_error_mentions([] { Permute({1, 3}, "p"); }, "'p': dims must be a permutation");
  expect_error_mentions([] { Permute({2, 1}, "p2")(tk::Input({2, 3, 4})); }, "'p2': dims has 2 entries");
  expect_error_mentions([] { RepeatVector(2, "rv")(tk::Input({2, 3})); }, "'rv': expects (batch, features)");
  expect_error_mentions([] { Cropping2D(2, "c")(tk::Input({4, 4, 1})); }, "'c': cropping ((2, 2), (2, 2)) leaves");
  expect_error_mentions(
      [] {
        PReLU({.shared_axes = {3}, .name = "pr"})(tk::Input({4, 5}));
      },
      "'pr': shared_axes entry 3");
  // A Keras option trainkit does not implement is Unsupported, naming the layer and the option.
  json relu = {
      {"class_name", "PReLU"},
      {"config", {{"name", "pr2"}, {"alpha_constraint", {{"class_name", "RadialConstraint"}, {"config", {}}}}}}};
  expect_error_mentions([&] { io::keras::layer_from_json(relu, "f.keras"); },
                        "'pr2' (PReLU): option 'alpha_constraint'");
}

// The CLI's --model spec spells the activation layers: relu:6 is MobileNetV2's ReLU(max_value=6); a bad number is
// one user error naming the item.
TEST(CompositeLayers, CliModelSpec) {
  using tk_cli_test::contains;
  using tk_cli_test::run_cli;
  tk_cli_test::Result r =
      run_cli("plan --model conv2d:4:3,relu:6,prelu,leakyrelu:0.1,elu,globalavgpool,dense:10,relu,softmax:-1");
  ASSERT_EQ(r.code, 0) << tk_cli_test::describe(r);
  for (const char* name : {"re_lu", "p_re_lu", "leaky_re_lu", "elu", "softmax"}) EXPECT_CONTAINS(r.out, name);
  tk_cli_test::Result bad = run_cli("plan --model dense:4,relu:six");
  EXPECT_EQ(bad.code, 1) << tk_cli_test::describe(bad);
  EXPECT_CONTAINS(bad.err, "relu takes a number");
}

}  // namespace
}  // namespace tk
