// BatchNormalization(axis=3) on NHWC images, as keras.applications' ResNet50 and DenseNet121 write it: the positive
// spelling of the last axis loads, predicts and trains one step as Keras 3.15.1 does, and is saved back as the file
// had it. Any other axis is a clear Unsupported error. Fixture: tests/fixtures/keras/bn_axis/ (gen_bn_axis.py).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "fixture.h"
#include "io/hdf5_tree.h"
#include "io/keras_internal.h"
#include "keras_weights_compare.h"
#include "trainkit/io/keras.h"
#include "trainkit/nn/layers.h"
#include "trainkit/nn/model.h"

namespace tk {
namespace {

namespace fs = std::filesystem;

const std::string kDir = std::string(TK_SOURCE_DIR) + "/tests/fixtures/keras/bn_axis/";

void expect_near(const Tensor& got, const Tensor& want, float tol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  for (int64_t i = 0; i < got.numel(); ++i)
    EXPECT_NEAR(got.data<float>()[i], want.data<float>()[i], tol) << what << " [" << i << "]";
}

// The BatchNormalization layers' "axis" in a .keras file's config.json, as written.
std::vector<int64_t> bn_axes_in_file(const std::string& path) {
  const io::keras::Archive a = io::keras::read_archive(path, false);
  const auto config = io::keras::parse_json(a.config, path);
  std::vector<int64_t> axes;
  for (const auto& layer : config.at("config").at("layers"))
    if (layer.at("class_name") == "BatchNormalization") axes.push_back(layer.at("config").at("axis").get<int64_t>());
  return axes;
}

// Keras-saved Conv2D -> BatchNormalization(axis=3) -> relu -> GlobalAveragePooling2D -> Dense: predict (moving
// statistics), one SGD step (batch statistics; the moving ones updated), the weights after it, then saved by trainkit
// with axis=3 kept and loaded back with the same predictions.
TEST(KerasBatchNormAxis, PositiveLastAxisLoadsPredictsTrainsAndSavesBack) {
  auto r = testing::load_fixture(kDir + "bn_axis_expect.txt");
  EXPECT_EQ(bn_axes_in_file(kDir + "bn_axis.keras"), std::vector<int64_t>{3});  // the fixture is what it claims
  std::unique_ptr<Model> model = models::load_model(kDir + "bn_axis.keras");
  const LayerConfig config = model->get_layer("batch_normalization")->get_config();
  ASSERT_NE(config.find("axis"), nullptr);
  EXPECT_EQ(config.find("axis")->i, 3);
  expect_near(model->predict(r["x"]), r["predict"], 1e-4f, "predict");
  const Logs& logs = model->train_on_batch({r["x"]}, {r["y"]});
  EXPECT_NEAR(logs.get("loss"), r["train_loss"].data<float>()[0], 1e-4);
  int checked = 0;
  for (const LayerPtr& layer : model->layers())
    for (const Weight& w : layer->weights()) {
      const std::string key = "after/" + w.name;
      ASSERT_TRUE(r.count(key)) << key;
      expect_near(w.value, r[key], 1e-4f, key);
      ++checked;
    }
  EXPECT_EQ(checked, 8);  // conv kernel, bias; gamma, beta, moving mean, variance; dense kernel, bias
  expect_near(model->predict(r["x"]), r["predict_after"], 1e-4f, "predict after the step");

  const fs::path dir = fs::temp_directory_path() / ("tk_bn_axis_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "bn_axis.keras").string();
  model->save(path);
  EXPECT_EQ(bn_axes_in_file(path), std::vector<int64_t>{3});  // written back as the file had it
  std::unique_ptr<Model> back = models::load_model(path);
  const Tensor a = model->predict(r["x"]), b = back->predict(r["x"]);
  expect_near(b, a, 0.0f, "predict after the round trip");
  fs::remove_all(dir);
}

// The file trainkit writes after its own step, which Keras loaded (gen_bn_axis.py --check-trainkit wrote the verdict
// keras_loaded_trainkit_bn_axis.json), is what trainkit writes today: same config.json (axis=3), same weights. With
// TK_KERAS_FIXTURE_OUT set, (re)writes trainkit_bn_axis.keras and its predictions there instead.
TEST(KerasBatchNormAxis, TrainkitWrittenFileKerasLoadedIsStillWhatTrainkitWrites) {
  auto r = testing::load_fixture(kDir + "bn_axis_expect.txt");
  std::unique_ptr<Model> model = models::load_model(kDir + "bn_axis.keras");
  model->train_on_batch({r["x"]}, {r["y"]});
  const Tensor pred = model->predict(r["x"]);
  if (const char* out = std::getenv("TK_KERAS_FIXTURE_OUT")) {
    model->save(std::string(out) + "/trainkit_bn_axis.keras");
    std::ofstream f(std::string(out) + "/trainkit_bn_axis_predict.txt");
    f << "# trainkit's predictions (tests/test_keras_bn_axis.cpp; checked in Keras by gen_bn_axis.py)\n";
    f.precision(9);
    for (const auto& [n, t] : std::vector<std::pair<std::string, Tensor>>{{"x", r["x"]}, {"predict", pred}}) {
      f << "tensor " << n << " float32 " << t.shape().rank();
      for (int i = 0; i < t.shape().rank(); ++i) f << " " << t.shape()[i];
      f << "\n";
      for (int64_t i = 0; i < t.numel(); ++i) f << (i ? " " : "") << t.data<float>()[i];
      f << "\n";
    }
    GTEST_SKIP() << "wrote trainkit_bn_axis.keras into " << out;
  }
  std::ifstream in(kDir + "keras_loaded_trainkit_bn_axis.json");
  ASSERT_TRUE(in) << "keras_loaded_trainkit_bn_axis.json is missing: run gen_bn_axis.py --check-trainkit";
  std::stringstream ss;
  ss << in.rdbuf();
  const auto verdict = io::keras::json::parse(ss.str());
  EXPECT_EQ(verdict["keras_loaded_trainkit_file"], "ok");
  EXPECT_EQ(verdict["trainkit_format"], io::kKerasFormatVersion);
  EXPECT_EQ(verdict["batch_normalization_axis"], 3);
  EXPECT_LE(verdict["max_abs_diff_predict"].get<double>(), 1e-5);
  const fs::path dir = fs::temp_directory_path() / ("tk_bn_axis_now_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  model->save((dir / "now.keras").string());
  const auto committed = io::keras::read_archive(kDir + "trainkit_bn_axis.keras");
  const auto now = io::keras::read_archive((dir / "now.keras").string());
  EXPECT_EQ(io::keras::json::parse(committed.config), io::keras::json::parse(now.config));
  io::H5Tree a = io::read_h5_tree_image("committed", committed.weights.data(), committed.weights.size());
  io::H5Tree b = io::read_h5_tree_image("now", now.weights.data(), now.weights.size());
  EXPECT_EQ(a.groups, b.groups);
  ASSERT_EQ(a.datasets.size(), b.datasets.size());
  testing::expect_same_weights(a, b, 1e-6f);
  fs::remove_all(dir);
}

// -1 and rank - 1 both name the last axis; any other axis is Unsupported, naming the layer, the axis, the input
// shape and what trainkit supports.
TEST(KerasBatchNormAxis, NonLastAxisIsAClearError) {
  for (int axis : {-1, 3}) {
    LayerPtr bn = layers::BatchNormalization({.axis = axis, .name = "bn_ok"});
    EXPECT_NO_THROW((*bn)(Input({8, 8, 3}))) << axis;
  }
  LayerPtr dense = layers::BatchNormalization({.axis = 1, .name = "bn_dense"});
  EXPECT_NO_THROW((*dense)(Input({5})));  // (batch, 5): axis 1 is the last one there
  for (int axis : {1, 2, -2, 0, 4}) {
    LayerPtr bn = layers::BatchNormalization({.axis = axis, .name = "bn_nchw"});
    try {
      (*bn)(Input({8, 8, 3}));
      ADD_FAILURE() << "axis " << axis << " accepted";
    } catch (const Unsupported& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("'bn_nchw'"), std::string::npos) << m;
      EXPECT_NE(m.find("axis=" + std::to_string(axis)), std::string::npos) << m;
      EXPECT_NE(m.find("8, 8, 3"), std::string::npos) << m;
      EXPECT_NE(m.find("last"), std::string::npos) << m;
      EXPECT_NE(m.find("axis=-1 or 3"), std::string::npos) << m;
    }
  }
}

}  // namespace
}  // namespace tk
