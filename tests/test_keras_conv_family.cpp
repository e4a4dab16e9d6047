// The convolution family of issue 31 against Keras 3.15.1: DepthwiseConv2D (strides, dilation, depth_multiplier,
// valid / same, with and without bias), SeparableConv2D, Conv2D(groups=...) and a dilated Conv2D. A Keras-saved model
// holding them all loads, each layer's output and the prediction match Keras', one SGD step gives Keras' weights (the
// gradients of every kernel, through every layer's input gradient), and the file trainkit saves loads back (and in
// Keras: keras_loaded_trainkit_conv_family.json). Fixture: tests/fixtures/keras/conv_family/ (gen_conv_family.py).
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
using layers::Size2;

const std::string kDir = std::string(TK_SOURCE_DIR) + "/tests/fixtures/keras/conv_family/";

void expect_near(const Tensor& got, const Tensor& want, float tol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  for (int64_t i = 0; i < got.numel(); ++i)
    EXPECT_NEAR(got.data<float>()[i], want.data<float>()[i], tol) << what << " [" << i << "]";
}

// One Keras-saved model of the family: its layers, input and weight count (gen_conv_family.py's MODELS).
struct FamilyModel {
  const char* name;
  Shape input;
  int layers, weights;
};
const FamilyModel kModels[] = {
    // pre 2, dw_s2 2, grouped 2, dw_dil 1, dw_valid 2, sep 3, sep_s2 3, conv_dil 2, head 2
    {"conv_family", Shape{12, 12, 4}, 10, 19},
    // up_same 2, up_valid_op 2, dilated 2, op_same 1, up2 2, head 2
    {"conv_transpose", Shape{3, 2, 3}, 7, 11}};

class KerasConvFamily : public ::testing::TestWithParam<FamilyModel> {};

// Loads, each layer's output and the prediction match Keras' within 1e-5, one SGD step gives Keras' loss and weights
// (every kernel's gradient, through every later layer's input gradient), and the file trainkit saves loads back.
TEST_P(KerasConvFamily, LoadsMatchesKerasLayerByLayerTrainsAndSavesBack) {
  const FamilyModel& fm = GetParam();
  auto r = testing::load_fixture(kDir + fm.name + "_expect.txt");
  std::unique_ptr<Model> model = models::load_model(kDir + fm.name + ".keras");
  // Each layer's output: the model's layers (shared, built) called again on a fresh input, cut after each one.
  KerasTensor in = Input(fm.input);
  KerasTensor t = in;
  int outputs = 0;
  for (const LayerPtr& layer : model->layers()) {
    if (layer->class_name() == "InputLayer") continue;
    t = layer(t);
    Model upto(in, t);
    expect_near(upto.predict(r["x"]), r["out/" + layer->name], 1e-5f, "output of " + layer->name);
    ++outputs;
  }
  EXPECT_EQ(outputs, fm.layers);
  expect_near(model->predict(r["x"]), r["predict"], 1e-5f, "predict");

  const Logs& logs = model->train_on_batch({r["x"]}, {r["y"]});
  EXPECT_NEAR(logs.get("loss"), r["train_loss"].data<float>()[0], 1e-5);
  int checked = 0;
  for (const LayerPtr& layer : model->layers())
    for (const Weight& w : layer->weights()) {
      const std::string key = "after/" + w.name;
      ASSERT_TRUE(r.count(key)) << key;
      expect_near(w.value, r[key], 1e-5f, key);
      ++checked;
    }
  EXPECT_EQ(checked, fm.weights);
  expect_near(model->predict(r["x"]), r["predict_after"], 1e-5f, "predict after the step");

  const fs::path dir = fs::temp_directory_path() / ("tk_" + std::string(fm.name) + "_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "m.keras").string();
  model->save(path);
  std::unique_ptr<Model> back = models::load_model(path);
  expect_near(back->predict(r["x"]), model->predict(r["x"]), 0.0f, "predict after the round trip");
  fs::remove_all(dir);
}

// The file trainkit writes after its own step, which Keras loaded (gen_conv_family.py --check-trainkit wrote the
// verdict keras_loaded_trainkit_<model>.json), is what trainkit writes today. With TK_KERAS_FIXTURE_OUT set,
// (re)writes trainkit_<model>.keras and its predictions there instead.
TEST_P(KerasConvFamily, TrainkitWrittenFileKerasLoadedIsStillWhatTrainkitWrites) {
  const FamilyModel& fm = GetParam();
  const std::string name = fm.name;
  auto r = testing::load_fixture(kDir + name + "_expect.txt");
  std::unique_ptr<Model> model = models::load_model(kDir + name + ".keras");
  model->train_on_batch({r["x"]}, {r["y"]});
  const Tensor pred = model->predict(r["x"]);
  if (const char* out = std::getenv("TK_KERAS_FIXTURE_OUT")) {
    model->save(std::string(out) + "/trainkit_" + name + ".keras");
    std::ofstream f(std::string(out) + "/trainkit_" + name + "_predict.txt");
    f << "# trainkit's predictions (tests/test_keras_conv_family.cpp; checked in Keras by gen_conv_family.py)\n";
    f.precision(9);
    for (const auto& [n, t] : std::vector<std::pair<std::string, Tensor>>{{"x", r["x"]}, {"predict", pred}}) {
      f << "tensor " << n << " float32 " << t.shape().rank();
      for (int i = 0; i < t.shape().rank(); ++i) f << " " << t.shape()[i];
      f << "\n";
      for (int64_t i = 0; i < t.numel(); ++i) f << (i ? " " : "") << t.data<float>()[i];
      f << "\n";
    }
    GTEST_SKIP() << "wrote trainkit_" << name << ".keras into " << out;
  }
  std::ifstream in(kDir + "keras_loaded_trainkit_" + name + ".json");
  ASSERT_TRUE(in) << "keras_loaded_trainkit_" << name << ".json is missing: run gen_conv_family.py --check-trainkit";
  std::stringstream ss;
  ss << in.rdbuf();
  const auto verdict = io::keras::json::parse(ss.str());
  EXPECT_EQ(verdict["keras_loaded_trainkit_file"], "ok");
  EXPECT_EQ(verdict["trainkit_format"], io::kKerasFormatVersion);
  EXPECT_LE(verdict["max_abs_diff_predict"].get<double>(), 1e-5);
  const fs::path dir = fs::temp_directory_path() / ("tk_" + name + "_now_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  model->save((dir / "now.keras").string());
  const auto committed = io::keras::read_archive(kDir + "trainkit_" + name + ".keras");
  const auto now = io::keras::read_archive((dir / "now.keras").string());
  EXPECT_EQ(io::keras::json::parse(committed.config), io::keras::json::parse(now.config));
  io::H5Tree a = io::read_h5_tree_image("committed", committed.weights.data(), committed.weights.size());
  io::H5Tree b = io::read_h5_tree_image("now", now.weights.data(), now.weights.size());
  EXPECT_EQ(a.groups, b.groups);
  ASSERT_EQ(a.datasets.size(), b.datasets.size());
  testing::expect_same_weights(a, b, 1e-6f);
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Keras, KerasConvFamily, ::testing::ValuesIn(kModels),
                         [](const ::testing::TestParamInfo<FamilyModel>& i) { return std::string(i.param.name); });

TEST(KerasConvFamilyLayers, LoadedLayersAreTheFamily) {
  std::unique_ptr<Model> model = models::load_model(kDir + "conv_family.keras");
  EXPECT_EQ(model->get_layer("dw_s2")->class_name(), "DepthwiseConv2D");
  EXPECT_EQ(model->get_layer("sep")->class_name(), "SeparableConv2D");
  EXPECT_EQ(model->get_layer("grouped")->get_config().find("groups")->i, 3);
  std::unique_ptr<Model> t = models::load_model(kDir + "conv_transpose.keras");
  EXPECT_EQ(t->get_layer("up_valid_op")->class_name(), "Conv2DTranspose");
  ASSERT_NE(t->get_layer("up_valid_op")->get_config().find("output_padding"), nullptr);
}

// Bad configurations are one clear InvalidArgument naming the layer and the numbers.
TEST(KerasConvFamilyLayers, BadGroupsAndMultipliersAreClearErrors) {
  auto message = [](auto&& make) -> std::string {
    try {
      make();
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "accepted";
  };
  EXPECT_NE(message([] { layers::Conv2D(6, 3, "linear", {.groups = 4, .name = "g4"}); }).find("groups = 4"),
            std::string::npos);
  const std::string channels = message([] {
    LayerPtr c = layers::Conv2D(6, 3, "linear", {.groups = 3, .name = "g3"});
    c(Input({8, 8, 4}));
  });
  EXPECT_NE(channels.find("'g3'"), std::string::npos) << channels;
  EXPECT_NE(channels.find("input channels"), std::string::npos) << channels;
  EXPECT_NE(message([] {
              layers::DepthwiseConv2D(3, "linear", {.depth_multiplier = 0, .name = "dw"});
            }).find("depth_multiplier must be positive"),
            std::string::npos);
  EXPECT_NE(message([] {
              layers::SeparableConv2D(4, 3, "linear", {.strides = 2, .dilation_rate = 2});
            }).find("dilation_rate"),
            std::string::npos);
}

// DepthwiseConv2D's weights are Keras 3's: "kernel" (kh, kw, in, depth_multiplier) and "bias" (in * multiplier);
// SeparableConv2D's depthwise_kernel, pointwise_kernel (1, 1, in * multiplier, filters), bias.
TEST(KerasConvFamilyLayers, WeightNamesAndShapesAreKeras) {
  LayerPtr dw = layers::DepthwiseConv2D({3, 2}, "relu", {.depth_multiplier = 2, .name = "dw"});
  const KerasTensor dy = dw(Input({9, 9, 5}));
  EXPECT_EQ(dy.shape().sample_shape(), (Shape{7, 8, 10})) << dy.shape().to_string();
  ASSERT_EQ(dw->weights().size(), 2u);
  EXPECT_EQ(dw->weights()[0].value.shape(), (Shape{3, 2, 5, 2}));
  EXPECT_EQ(dw->weights()[1].value.shape(), (Shape{10}));
  EXPECT_EQ(dw->weights()[0].name, "dw/kernel");
  LayerPtr sep = layers::SeparableConv2D(4, 3, "linear", {.padding = "same", .depth_multiplier = 3, .name = "sep"});
  EXPECT_EQ(sep(Input({6, 6, 2})).shape().sample_shape(), (Shape{6, 6, 4}));
  ASSERT_EQ(sep->weights().size(), 3u);
  EXPECT_EQ(sep->weights()[0].name, "sep/depthwise_kernel");
  EXPECT_EQ(sep->weights()[1].value.shape(), (Shape{1, 1, 6, 4}));
  EXPECT_EQ(sep->weights()[2].name, "sep/bias");
  // Conv2DTranspose: kernel (kh, kw, filters, in_channels); Keras' output sizes.
  LayerPtr up = layers::Conv2DTranspose(4, 3, "linear", {.strides = 2, .padding = "same", .name = "up"});
  EXPECT_EQ(up(Input({5, 7, 2})).shape().sample_shape(), (Shape{10, 14, 4}));
  EXPECT_EQ(up->weights()[0].value.shape(), (Shape{3, 3, 4, 2}));
  LayerPtr valid = layers::Conv2DTranspose(1, 3, "linear", {.strides = 2, .output_padding = Size2(1), .name = "v"});
  EXPECT_EQ(valid(Input({5, 7, 2})).shape().sample_shape(), (Shape{12, 16, 1}));  // (in - 1) * 2 + 3 + 1
  EXPECT_THROW(layers::Conv2DTranspose(1, 3, "linear", {.strides = 2, .output_padding = Size2(2)}), InvalidArgument);
}

}  // namespace
}  // namespace tk
