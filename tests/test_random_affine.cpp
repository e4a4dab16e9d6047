// Keras' RandomTranslation, RandomRotation and RandomZoom (issue 31): the AffineTransform op against Keras 3.15.1's
// keras.ops.image.affine_transform on fixed transforms, every interpolation and fill mode
// (tests/fixtures/keras/affine/gen_affine.py); the layers' transforms with a fixed draw (a range of one value) against
// the shift, rotation and zoom they must be; fresh draws per image and step; identity outside training; a Keras file
// that loads, predicts as Keras and trains; bad options.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "graph/graph.h"
#include "graph/program.h"
#include "io/keras_internal.h"
#include "keras_text_fixture.h"
#include "nn/layers/context.h"
#include "trainkit/core/error.h"
#include "trainkit/io/keras.h"
#include "trainkit/nn/layers.h"
#include "trainkit/nn/model.h"
#include "trainkit/nn/models.h"
#include "trainkit/nn/optimizers.h"

namespace tk {
namespace {

namespace fs = std::filesystem;
using layers::FactorRange;
const std::string kDir = TK_SOURCE_DIR "/tests/fixtures/keras/affine/";
const testing::KerasTextFixture fx(kDir + "affine_expect.txt");

Tensor run_layer(const LayerPtr& layer, const Tensor& x, bool training, uint64_t step = 0) {
  graph::Graph g;
  nn::CallContext ctx{g, training, DType::f32, {}, {}, {}};
  Tensor xv = x.clone();
  const int y = layer->call(ctx, {g.variable("x", xv)});
  graph::Program p(std::move(g), {y}, {}, Device::cpu());
  graph::ExecContext e;
  e.scalars.step = step;
  p.run(e);
  return p.output(y);
}

void expect_close(const Tensor& got, const Tensor& want, float tol, const std::string& what) {
  ASSERT_EQ(got.numel(), want.numel()) << what;
  for (int64_t i = 0; i < want.numel(); ++i)
    ASSERT_NEAR(got.data<float>()[i], want.data<float>()[i], tol) << what << " [" << i << "]";
}

TEST(RandomAffine, TheOpIsKerasAffineTransformInEveryFillMode) {
  const char* modes[] = {"constant", "nearest", "wrap", "mirror", "reflect"};
  for (bool bilinear : {true, false})
    for (uint8_t mode = 0; mode < 5; ++mode) {
      const std::string key = std::string(bilinear ? "bilinear/" : "nearest/") + modes[mode];
      graph::Graph g;
      Tensor x = fx.at("x").clone(), t = fx.at("t").clone();
      graph::Attrs at;
      at.bilinear = bilinear;
      at.fill_mode = mode;
      at.value = 0.5f;
      const int y = g.add(graph::Op::AffineTransform, {g.variable("x", x), g.variable("t", t)}, at, "y");
      graph::Program p(std::move(g), {y}, {}, Device::cpu());
      p.run(graph::ExecContext{});
      expect_close(p.output(y), fx.at(key), 2e-5f, key);
    }
}

Tensor ramp(const Shape& s) {
  Tensor x(s, DType::f32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i % 97) * 0.25f + 1.0f;
  return x;
}
float at(const Tensor& x, int64_t n, int64_t h, int64_t w, int64_t c) {
  const Shape& s = x.shape();
  return x.data<float>()[((n * s[1] + h) * s[2] + w) * s[3] + c];
}

// A one-value range draws that value: a translation of (0.25, -0.125) of an 8 x 8 image moves it 2 rows down and
// 1 column left; with fill_mode constant the uncovered pixels are fill_value.
TEST(RandomAffine, TranslationMovesThePixelsKerasMoves) {
  LayerPtr layer = layers::RandomTranslation(FactorRange(0.25f, 0.25f), FactorRange(-0.125f, -0.125f),
                                             {.fill_mode = "constant", .fill_value = -7.0f});
  (*layer)(Input({8, 8, 2}));
  const Tensor x = ramp(Shape{3, 8, 8, 2});
  const Tensor y = run_layer(layer, x, true, 1);
  for (int64_t n = 0; n < 3; ++n)
    for (int64_t h = 0; h < 8; ++h)
      for (int64_t w = 0; w < 8; ++w)
        for (int64_t c = 0; c < 2; ++c) {
          const bool inside = h - 2 >= 0 && w + 1 < 8;
          ASSERT_NEAR(at(y, n, h, w, c), inside ? at(x, n, h - 2, w + 1, c) : -7.0f, 1e-5f) << n << h << w << c;
        }
  expect_close(run_layer(layer, x, false), x, 0.0f, "inference: the identity");
}

// A quarter turn (factor 0.25: 90 degrees) of a square image about its center maps pixel (h, w) to Keras' rotation:
// output (x, y) reads input (cx + (x - cx) cos - (y - cy) sin, cy + (x - cx) sin + (y - cy) cos).
TEST(RandomAffine, RotationTurnsAboutTheCenter) {
  LayerPtr layer = layers::RandomRotation(FactorRange(0.25f, 0.25f), {.interpolation = "nearest"});
  (*layer)(Input({5, 5, 1}));
  const Tensor x = ramp(Shape{2, 5, 5, 1});
  const Tensor y = run_layer(layer, x, true, 1);
  for (int64_t oy = 0; oy < 5; ++oy)
    for (int64_t ox = 0; ox < 5; ++ox)  // cos = 0, sin = 1, center (2, 2): input column 2 - (y - 2), row 2 + (x - 2)
      EXPECT_NEAR(at(y, 1, oy, ox, 0), at(x, 1, ox, 4 - oy, 0), 1e-5f) << oy << " " << ox;
}

// A zoom of 2 (factor (1, 1)) about the center of a 9 x 9 image reads input (2 x - 4, 2 y - 4): the center pixel stays,
// pixel (5, 5) reads (6, 6); outside the image fill_mode nearest repeats the edge.
TEST(RandomAffine, ZoomScalesAboutTheCenter) {
  LayerPtr layer = layers::RandomZoom(FactorRange(1.0f, 1.0f), std::nullopt, {.fill_mode = "nearest"});
  (*layer)(Input({9, 9, 1}));
  const Tensor x = ramp(Shape{1, 9, 9, 1});
  const Tensor y = run_layer(layer, x, true, 1);
  EXPECT_NEAR(at(y, 0, 4, 4, 0), at(x, 0, 4, 4, 0), 1e-5f);
  EXPECT_NEAR(at(y, 0, 5, 5, 0), at(x, 0, 6, 6, 0), 1e-5f);
  EXPECT_NEAR(at(y, 0, 8, 8, 0), at(x, 0, 8, 8, 0), 1e-5f);  // reads (12, 12): the edge
  EXPECT_NEAR(at(y, 0, 0, 8, 0), at(x, 0, 0, 8, 0), 1e-5f);
}

// Random ranges: each image its own transform, each step new ones; the draws stay in the range (a rotation by at most
// 0.02 turns keeps the center pixel of a smooth image near its value).
TEST(RandomAffine, EachImageAndStepDrawsItsOwnTransform) {
  for (LayerPtr layer :
       {layers::RandomTranslation(0.3f, 0.3f), layers::RandomRotation(0.2f), layers::RandomZoom(0.3f)}) {
    SCOPED_TRACE(layer->class_name());
    (*layer)(Input({6, 6, 1}));
    Tensor x(Shape{16, 6, 6, 1}, DType::f32);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i % 36);  // every image alike
    const Tensor a = run_layer(layer, x, true, 1), b = run_layer(layer, x, true, 2);
    int differ_within = 0, differ_across = 0;
    for (int64_t n = 1; n < 16; ++n) {
      bool same = true;
      for (int64_t k = 0; k < 36; ++k) same = same && a.data<float>()[n * 36 + k] == a.data<float>()[k];
      differ_within += !same;
    }
    for (int64_t i = 0; i < a.numel(); ++i) differ_across += a.data<float>()[i] != b.data<float>()[i];
    EXPECT_GE(differ_within, 14);
    EXPECT_GT(differ_across, 0);
  }
}

// The augmentation behind a trainable layer trains (the gradient goes back through AffineTransformGrad).
TEST(RandomAffine, TrainsBehindATrainableLayer) {
  utils::set_random_seed(6);
  KerasTensor in = Input({6, 6, 1});
  KerasTensor h = layers::Conv2D(2, 3, "relu", {.padding = "same"})(in);
  h = layers::RandomRotation(0.1f)(h);
  h = layers::RandomTranslation(0.2f, 0.2f)(h);
  h = layers::RandomZoom(0.2f, 0.1f)(h);
  Model model(in, layers::Dense(1)(layers::Flatten()(h)));
  model.compile(optimizers::Adam(), "mse");
  const Tensor x = ramp(Shape{16, 6, 6, 1});
  const std::vector<Tensor> before = model.get_weights();
  const History hist = model.fit(x, Tensor::zeros(Shape{16, 1}), {.epochs = 2, .verbose = 0});
  EXPECT_TRUE(std::isfinite(hist.history.at("loss").back()));
  EXPECT_NE(model.get_weights()[0].data<float>()[0], before[0].data<float>()[0]);
}

// A Keras-made model with the three layers loads, predicts as Keras (the augmentations inactive) and trains; saved by
// trainkit it keeps Keras' options.
TEST(RandomAffine, KerasFileLoadsPredictsAndTrains) {
  auto model = models::load_model(kDir + "augment.keras");
  const Tensor p = model->predict(fx.at("augment_x"));
  expect_close(p, fx.at("augment_predict"), 1e-5f, "predict");
  model->fit(fx.at("augment_x"), Tensor::zeros(Shape{3, 2}), {.batch_size = 3, .epochs = 1, .verbose = 0});
  const fs::path path = fs::temp_directory_path() / ("tk_affine_" + std::to_string(::getpid()) + ".keras");
  model->save(path.string());
  if (const char* out = std::getenv("TK_KERAS_FIXTURE_OUT")) {  // for gen_affine.py --check-trainkit
    fs::copy_file(path, fs::path(out) / "trainkit_augment.keras", fs::copy_options::overwrite_existing);
    const Tensor mine = model->predict(fx.at("augment_x"));
    std::ofstream t(std::string(out) + "/trainkit_augment_predict.txt");
    t << "# trainkit's predictions of trainkit_augment.keras (tests/test_random_affine.cpp; gen_affine.py checks "
         "Keras')\n";
    t << "predict 3 2 :";
    t.precision(9);
    for (int64_t i = 0; i < mine.numel(); ++i) t << ' ' << mine.data<float>()[i];
    t << '\n';
  }
  auto again = models::load_model(path.string());
  expect_close(again->predict(fx.at("augment_x")), model->predict(fx.at("augment_x")), 0.0f, "reloaded");
  const LayerConfig c = again->get_layer("random_zoom")->get_config();
  ASSERT_NE(c.find("fill_mode"), nullptr);
  EXPECT_EQ(c.find("fill_mode")->s, "nearest");
  fs::remove(path);
}

// The file trainkit saved after that epoch, as committed: trainkit still predicts what it did, and Keras 3 loaded it
// with the same predictions and options (gen_affine.py --check-trainkit wrote keras_loaded_trainkit_augment.json).
TEST(RandomAffine, TheFileTrainkitSavedLoadsInKerasWithTheSamePredictions) {
  const testing::KerasTextFixture mine(kDir + "trainkit_augment_predict.txt");
  expect_close(models::load_model(kDir + "trainkit_augment.keras")->predict(fx.at("augment_x")), mine.at("predict"),
               1e-6f, "trainkit's own predictions");
  std::ifstream f(kDir + "keras_loaded_trainkit_augment.json");
  ASSERT_TRUE(f.good());
  const auto verdict = nlohmann::json::parse(f);
  EXPECT_LT(verdict.at("max_abs_predict_difference").get<double>(), 1e-5);
  EXPECT_EQ(verdict.at("layers").at(2).at("config").at("fill_mode"), "nearest");  // RandomZoom
}

TEST(RandomAffine, BadOptionsAreClearErrors) {
  EXPECT_THROW(layers::RandomRotation(1.5f), InvalidArgument);
  EXPECT_THROW(layers::RandomZoom(FactorRange(-1.0f, 0.2f)), InvalidArgument);
  EXPECT_THROW(layers::RandomTranslation(0.1f, 0.1f, {.fill_mode = "edge"}), InvalidArgument);
  EXPECT_THROW(layers::RandomTranslation(0.1f, 0.1f, {.interpolation = "bicubic"}), InvalidArgument);
  EXPECT_THROW(layers::RandomRotation(0.1f)(Input({4, 4})), InvalidArgument);
}

}  // namespace
}  // namespace tk
