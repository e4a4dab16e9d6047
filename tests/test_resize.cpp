// Keras' image resizing (issue 31): the Resize op (backends/math/resize.h) behind Resizing (bilinear, nearest,
// crop_to_aspect_ratio, pad_to_aspect_ratio), UpSampling2D(interpolation="bilinear") and CenterCrop on images smaller
// than its crop, against Keras 3.15.1 (tests/fixtures/keras/resize/gen_resize.py): every layer's output, evaluate, and
// one epoch of SGD (gradients through every resize); the file trainkit saves loads in Keras with the same predictions.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
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

namespace tk {
namespace {

namespace fs = std::filesystem;
const std::string kDir = TK_SOURCE_DIR "/tests/fixtures/keras/resize/";
const testing::KerasTextFixture fx(kDir + "resize_expect.txt");

void expect_close(const Tensor& got, const Tensor& want, float tol, const std::string& what) {
  ASSERT_EQ(got.numel(), want.numel()) << what;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const float b = want.data<float>()[i];
    ASSERT_NEAR(got.data<float>()[i], b, tol * std::max(1.0f, std::abs(b))) << what << " [" << i << "]";
  }
}

// Each layer of the Keras model, called again on a new input in order: its output against Keras'.
TEST(Resize, EveryLayerComputesWhatKerasComputes) {
  auto model = models::load_model(kDir + "resize.keras");
  KerasTensor in = Input({7, 5, 2});
  KerasTensor h = in;
  for (const LayerPtr& l : model->layers()) {
    if (l->class_name() == "InputLayer") continue;
    h = (*l)(h);
    Model probe(in, h);
    expect_close(probe.predict(fx.at("x")), fx.at("layer/" + l->name), 2e-5f, l->name + " (" + l->class_name() + ")");
  }
}

TEST(Resize, KerasFileEvaluatesAndTrainsAsKeras) {
  auto model = models::load_model(kDir + "resize.keras");
  expect_close(model->predict(fx.at("x")), fx.at("predict"), 2e-5f, "predict");
  EXPECT_NEAR(model->evaluate(fx.at("x"), fx.at("y"), {.batch_size = 6}).get("loss"), fx.scalar("evaluate/loss"),
              2e-5 * std::max(1.0f, fx.scalar("evaluate/loss")));
  FitOptions o;
  o.batch_size = 4;
  o.epochs = 1;
  o.verbose = 0;
  o.shuffle = false;
  const History h = model->fit(fx.at("x"), fx.at("y"), o);
  EXPECT_NEAR(h.history.at("loss").back(), fx.scalar("fit/loss"), 3e-5 * std::max(1.0f, fx.scalar("fit/loss")));
  const std::vector<Tensor> w = model->get_weights();
  for (size_t i = 0; i < w.size(); ++i) expect_close(w[i], fx.at("weight/" + std::to_string(i)), 5e-5f, "weight");

  // Saved after the epoch: the resize options as Keras wrote them (and, regenerating, the file and its predictions
  // for gen_resize.py --check-trainkit).
  const fs::path path = fs::temp_directory_path() / ("tk_resize_" + std::to_string(::getpid()) + ".keras");
  model->save(path.string());
  if (const char* out = std::getenv("TK_KERAS_FIXTURE_OUT")) {
    fs::copy_file(path, fs::path(out) / "trainkit_resize.keras", fs::copy_options::overwrite_existing);
    const Tensor mine = model->predict(fx.at("x"));
    std::ofstream t(std::string(out) + "/trainkit_resize_predict.txt");
    t << "# trainkit's predictions of trainkit_resize.keras (tests/test_resize.cpp; gen_resize.py checks Keras')\n";
    t << "predict 6 3 :";
    t.precision(9);
    for (int64_t i = 0; i < mine.numel(); ++i) t << ' ' << mine.data<float>()[i];
    t << '\n';
  }
  const auto mine =
      io::keras::parse_json(io::keras::read_archive(path.string(), false).config, "tk")["config"]["layers"];
  const auto keras =
      io::keras::parse_json(io::keras::read_archive(kDir + "resize.keras", false).config, "keras")["config"]["layers"];
  ASSERT_EQ(mine.size(), keras.size());
  for (size_t i = 0; i < keras.size(); ++i)
    for (const char* key :
         {"height", "width", "interpolation", "crop_to_aspect_ratio", "pad_to_aspect_ratio", "fill_value", "size"})
      if (keras[i]["config"].contains(key))
        EXPECT_EQ(mine[i]["config"][key], keras[i]["config"][key]) << keras[i]["class_name"] << " " << key;
  fs::remove(path);
}

// The file trainkit saved after that epoch, as committed: trainkit still predicts what it did, and Keras 3 loaded it
// with the same predictions (gen_resize.py --check-trainkit wrote keras_loaded_trainkit_resize.json).
TEST(Resize, TheFileTrainkitSavedLoadsInKerasWithTheSamePredictions) {
  const testing::KerasTextFixture mine(kDir + "trainkit_resize_predict.txt");
  expect_close(models::load_model(kDir + "trainkit_resize.keras")->predict(fx.at("x")), mine.at("predict"), 1e-6f,
               "trainkit's own predictions");
  std::ifstream f(kDir + "keras_loaded_trainkit_resize.json");
  ASSERT_TRUE(f.good());
  const auto verdict = io::keras::json::parse(f);
  EXPECT_LT(verdict.at("max_abs_predict_difference").get<double>(), 1e-5);
}

// Nearest resize to twice the size is UpSampling2D's repetition (half-pixel centers: output j reads input j / 2), and
// a resize to the same size is the identity, in both interpolations.
TEST(Resize, NearestDoublingIsRepetitionAndTheSameSizeIsIdentity) {
  Tensor x(Shape{2, 3, 4, 2}, DType::f32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = 0.37f * static_cast<float>(i % 11) - 1.0f;
  KerasTensor in = Input({3, 4, 2});
  const Tensor up = Model(in, layers::UpSampling2D(2)(in)).predict(x);
  const Tensor nearest = Model(in, layers::Resizing(6, 8, {.interpolation = "nearest"})(in)).predict(x);
  expect_close(nearest, up, 0.0f, "nearest x2");
  for (const char* interpolation : {"nearest", "bilinear"})
    expect_close(Model(in, layers::Resizing(3, 4, {.interpolation = interpolation})(in)).predict(x), x, 0.0f,
                 interpolation);
}

// A bilinear 2x upsampling of a 1-pixel-wide ramp, by hand: output j samples (j + 0.5) / 2 - 0.5, clamped at the edges.
TEST(Resize, BilinearSamplesAtHalfPixelCenters) {
  Tensor x(Shape{1, 1, 3, 1}, DType::f32);
  x.data<float>()[0] = 0.0f, x.data<float>()[1] = 4.0f, x.data<float>()[2] = 8.0f;
  KerasTensor in = Input({1, 3, 1});
  const Tensor y = Model(in, layers::Resizing(1, 6)(in)).predict(x);
  const float want[] = {0.0f, 1.0f, 3.0f, 5.0f, 7.0f, 8.0f};
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(y.data<float>()[i], want[i]) << i;
}

TEST(Resize, BadOptionsAreClearErrors) {
  EXPECT_THROW(layers::Resizing(0, 4), InvalidArgument);
  EXPECT_THROW(layers::Resizing(4, 4, {.interpolation = "bicubic"}), InvalidArgument);
  EXPECT_THROW(layers::Resizing(4, 4, {.crop_to_aspect_ratio = true, .pad_to_aspect_ratio = true}), InvalidArgument);
  EXPECT_THROW(layers::UpSampling2D(2, "up", "area"), InvalidArgument);
  EXPECT_THROW(layers::Resizing(4, 4)(Input({5, 5})), InvalidArgument);  // not images
  io::keras::json obj = {{"module", "keras.layers"},
                         {"class_name", "Resizing"},
                         {"config", {{"name", "r"}, {"height", 4}, {"width", 4}, {"interpolation", "lanczos3"}}},
                         {"registered_name", nullptr}};
  try {
    io::keras::layer_from_json(obj, "m.keras");
    ADD_FAILURE() << "no error";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("lanczos3"), std::string::npos) << e.what();
  }
  obj["config"]["interpolation"] = "bilinear";
  obj["config"]["antialias"] = true;
  EXPECT_THROW(io::keras::layer_from_json(obj, "m.keras"), Unsupported);
}

}  // namespace
}  // namespace tk
