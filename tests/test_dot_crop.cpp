// Keras' Dot and CenterCrop (issue 31) against Keras 3.15.1 (tests/fixtures/keras/dot_crop/gen_dot_crop.py): a model
// with Dot over (N, d) and (N, a, b) inputs, with normalize, and a CenterCrop loads, predicts, evaluates and trains
// three SGD steps as Keras; the saved config reads back; bad shapes are clear errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>

#include "io/keras_internal.h"
#include "keras_text_fixture.h"
#include "trainkit/core/error.h"
#include "trainkit/io/keras.h"
#include "trainkit/nn/layers.h"
#include "trainkit/nn/model.h"

namespace tk {
namespace {

namespace fs = std::filesystem;
const std::string kDir = TK_SOURCE_DIR "/tests/fixtures/keras/dot_crop/";

const std::map<std::string, Tensor>& fx() {
  static const auto f = testing::load_keras_text(kDir + "dot_crop_expect.txt");
  return f;
}

void expect_close(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.numel(), want.numel()) << what;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const float w = want.data<float>()[i];
    EXPECT_NEAR(got.data<float>()[i], w, tol * std::max(1.0f, std::abs(w))) << what << "[" << i << "]";
  }
}

TEST(DotCrop, KerasModelPredictsEvaluatesAndTrainsAsKeras) {
  auto model = models::load_model(kDir + "dot_crop.keras");
  expect_close(model->predict(fx().at("x")), fx().at("predict"), 1e-5, "predict");
  EXPECT_NEAR(model->evaluate(fx().at("x"), fx().at("y"), {.batch_size = 4}).get("loss"),
              fx().at("evaluate/loss").data<float>()[0], 1e-5 * 3.5);
  FitOptions o;
  o.batch_size = 4;
  o.epochs = 1;
  o.verbose = 0;
  o.shuffle = false;
  const History h = model->fit(fx().at("x"), fx().at("y"), o);
  EXPECT_NEAR(h.history.at("loss").back(), fx().at("fit/loss").data<float>()[0], 3e-5);
  const std::vector<Tensor> w = model->get_weights();
  for (size_t i = 0; i < w.size(); ++i) expect_close(w[i], fx().at("weight/" + std::to_string(i)), 2e-5, "weight");
}

TEST(DotCrop, SavedConfigReadsBackAsKerasWroteIt) {
  auto model = models::load_model(kDir + "dot_crop.keras");
  const fs::path path = fs::temp_directory_path() / ("tk_dot_crop_" + std::to_string(::getpid()) + ".keras");
  model->save(path.string());
  auto layers_of = [](const std::string& file) {
    return io::keras::parse_json(io::keras::read_archive(file, false).config, file).at("config").at("layers");
  };
  const auto keras = layers_of(kDir + "dot_crop.keras"), ours = layers_of(path.string());
  int seen = 0;
  for (size_t i = 0; i < keras.size(); ++i) {
    const std::string cls = keras[i].at("class_name");
    if (cls != "Dot" && cls != "CenterCrop") continue;
    for (const char* key : {"axes", "normalize", "height", "width"})
      if (keras[i].at("config").contains(key))
        EXPECT_EQ(ours[i].at("config").at(key), keras[i].at("config").at(key)) << cls << " " << key;
    ++seen;
  }
  EXPECT_EQ(seen, 4);
  expect_close(models::load_model(path.string())->predict(fx().at("x")), fx().at("predict"), 1e-5, "reloaded");
  fs::remove(path);
}

TEST(DotCrop, ShapesTheyCannotTakeAreClearErrors) {
  auto error_of = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "no error";
  };
  const std::string sizes = error_of([] { layers::Dot({2})({Input({4, 5}), Input({4, 6})}); });
  EXPECT_NE(sizes.find("differ in size"), std::string::npos) << sizes;
  const std::string ranks = error_of([] { layers::Dot({1})({Input({4}), Input({4, 6})}); });
  EXPECT_NE(ranks.find("(batch, d)"), std::string::npos) << ranks;
}

}  // namespace
}  // namespace tk
