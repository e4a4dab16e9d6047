// The training-only noise and augmentation layers (issue 31): GaussianNoise, GaussianDropout, RandomFlip and
// RandomContrast, and the
// ops under them (RandomUniform, RandomNormal, Reverse; their kernels on every backend are in the op harness,
// tests/test_op_gradients.cpp). Random draws cannot equal Keras' bit for bit, so: their distributions, that they are
// identities outside training (Keras' predict and evaluate of a Keras-made file, gen_augment.py), that each step draws
// anew and a replica keys its rows by the global sample, the flips' structure, configs, and bad values.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "graph/program.h"
#include "io/keras_internal.h"
#include "keras_text_fixture.h"
#include "nn/layers/context.h"
#include "trainkit/core/error.h"
#include "trainkit/io/keras.h"
#include "trainkit/nn/layers.h"
#include "trainkit/nn/model.h"
#include "trainkit/nn/optimizers.h"

namespace tk {
namespace {

namespace fs = std::filesystem;
const std::string kDir = TK_SOURCE_DIR "/tests/fixtures/keras/augment/";

// The layer's output on x in a training (or inference) program at `step`, the batch's first row `first_row` of the
// global batch (a data-parallel replica's offset).
Tensor run_layer(const LayerPtr& layer, const Tensor& x, bool training, uint64_t step = 0, int64_t first_row = 0) {
  graph::Graph g;
  nn::CallContext ctx{g, training, DType::f32, {}, {}, {}};
  Tensor xv = x.clone();
  const int y = layer->call(ctx, {g.variable("x", xv)});
  graph::Program p(std::move(g), {y}, {}, Device::cpu());
  graph::ExecContext e;
  e.scalars.step = step;
  e.scalars.sample_offset = first_row;
  p.run(e);
  return p.output(y);
}

Tensor ramp(const Shape& s, float start = 1.0f) {
  Tensor x(s, DType::f32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = start + static_cast<float>(i % 97) * 0.25f;
  return x;
}

struct Moments {
  double mean = 0.0, variance = 0.0;
};
template <typename F>
Moments moments(int64_t n, F value) {
  double s = 0.0, s2 = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double v = value(i);
    s += v;
    s2 += v * v;
  }
  const double m = s / static_cast<double>(n);
  return {m, s2 / static_cast<double>(n) - m * m};
}

TEST(NoiseLayers, GaussianNoiseAddsNormalNoiseInTrainingOnly) {
  LayerPtr layer = layers::GaussianNoise(0.3f, 77);
  (*layer)(Input({50}));
  const Tensor x = ramp(Shape{2000, 50});
  const Tensor y = run_layer(layer, x, true, 3);
  const int64_t n = x.numel();
  const Moments m = moments(n, [&](int64_t i) { return y.data<float>()[i] - x.data<float>()[i]; });
  // 100,000 draws: the mean's sd is 0.3 / 316 ~ 0.00095 (5 sd: 0.0047); the variance's relative sd ~ 0.45%.
  EXPECT_NEAR(m.mean, 0.0, 0.0047);
  EXPECT_NEAR(std::sqrt(m.variance), 0.3, 0.3 * 0.012);
  const Tensor same = run_layer(layer, x, false);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(same.data<float>()[i], x.data<float>()[i]);
}

TEST(NoiseLayers, GaussianDropoutMultipliesByNormalNoiseOfKerasVariance) {
  LayerPtr layer = layers::GaussianDropout(0.2f, 78);
  (*layer)(Input({50}));
  const Tensor x = ramp(Shape{2000, 50});
  const Tensor y = run_layer(layer, x, true, 4);
  const Moments m = moments(x.numel(), [&](int64_t i) { return y.data<float>()[i] / x.data<float>()[i]; });
  EXPECT_NEAR(m.mean, 1.0, 0.008);                   // sd of the mean: 0.5 / 316
  EXPECT_NEAR(m.variance, 0.2 / 0.8, 0.25 * 0.025);  // Keras: stddev sqrt(rate / (1 - rate))
  const Tensor same = run_layer(layer, x, false);
  for (int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(same.data<float>()[i], x.data<float>()[i]);
}

// Each training step draws anew; the same step the same values; a replica holding rows [k, k + n) of the global
// batch draws what one device draws for them.
TEST(NoiseLayers, StepsDrawAnewAndReplicasKeyRowsByTheGlobalSample) {
  LayerPtr layer = layers::GaussianNoise(1.0f, 79);
  (*layer)(Input({4}));
  const Tensor x = Tensor::zeros(Shape{6, 4});
  const Tensor a = run_layer(layer, x, true, 7), b = run_layer(layer, x, true, 7), c = run_layer(layer, x, true, 8);
  int differ = 0;
  for (int64_t i = 0; i < 24; ++i) {
    ASSERT_EQ(a.data<float>()[i], b.data<float>()[i]);
    differ += a.data<float>()[i] != c.data<float>()[i];
  }
  EXPECT_EQ(differ, 24);
  const Tensor part = run_layer(layer, Tensor::zeros(Shape{2, 4}), true, 7, 3);  // rows 3 and 4 of the batch
  for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(part.data<float>()[i], a.data<float>()[12 + i]);
}

// Image s's pixel (h, w, c) of a ramp: distinct everywhere, so a flip is recognizable.
float pixel(const Tensor& t, int64_t s, int64_t h, int64_t w, int64_t c) {
  const Shape& d = t.shape();
  return t.data<float>()[((s * d[1] + h) * d[2] + w) * d[3] + c];
}

// Per image: 0 unchanged, 1 flipped along W, 2 along H, 3 along both; -1 none of these.
std::vector<int> flips_of(const Tensor& x, const Tensor& y) {
  const Shape& d = x.shape();
  std::vector<int> out;
  for (int64_t s = 0; s < d[0]; ++s) {
    int kind = -1;
    for (int k = 0; k < 4 && kind < 0; ++k) {
      bool all = true;
      for (int64_t h = 0; h < d[1] && all; ++h)
        for (int64_t w = 0; w < d[2] && all; ++w)
          for (int64_t c = 0; c < d[3] && all; ++c)
            all = pixel(y, s, h, w, c) == pixel(x, s, (k & 2) ? d[1] - 1 - h : h, (k & 1) ? d[2] - 1 - w : w, c);
      if (all) kind = k;
    }
    out.push_back(kind);
  }
  return out;
}

TEST(NoiseLayers, RandomFlipFlipsAboutHalfTheImagesAlongItsAxes) {
  Tensor x(Shape{400, 3, 5, 2}, DType::f32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i);
  const std::pair<const char*, int> modes[] = {{"horizontal", 1}, {"vertical", 2}, {"horizontal_and_vertical", 3}};
  for (const auto& [mode, flipped] : modes) {
    SCOPED_TRACE(mode);
    LayerPtr layer = layers::RandomFlip(mode, 80);
    (*layer)(Input({3, 5, 2}));
    const std::vector<int> kinds = flips_of(x, run_layer(layer, x, true, 1));
    int count = 0;
    for (int k : kinds) {
      ASSERT_TRUE(k == 0 || k == flipped) << k;  // Keras: horizontal_and_vertical flips both axes under one draw
      count += k == flipped;
    }
    EXPECT_GT(count, 200 - 50);  // binomial(400, 1/2): sd 10
    EXPECT_LT(count, 200 + 50);
    const std::vector<int> next = flips_of(x, run_layer(layer, x, true, 2));
    EXPECT_NE(kinds, next) << "each step draws anew";
    for (int k : flips_of(x, run_layer(layer, x, false))) EXPECT_EQ(k, 0);
  }
}

// Per image one factor f in [1 - lower, 1 + upper]: y = (x - mean) * f + mean (mean per image and channel), clipped.
TEST(NoiseLayers, RandomContrastScalesEachImageAboutItsMeanByOneFactor) {
  const int64_t n = 300, h = 3, w = 4, c = 2;
  Tensor x(Shape{n, h, w, c}, DType::f32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = 100.0f + static_cast<float>((i * 37) % 23);
  LayerPtr layer = layers::RandomContrast(0.2f, 0.5f, {.seed = 81});
  (*layer)(Input({h, w, c}));
  const Tensor y = run_layer(layer, x, true, 1);
  double lo = 9.0, hi = -9.0;
  for (int64_t s = 0; s < n; ++s) {
    double f = -1.0;
    for (int64_t ch = 0; ch < c; ++ch) {
      double mean = 0.0;
      for (int64_t p = 0; p < h * w; ++p) mean += x.data<float>()[(s * h * w + p) * c + ch];
      mean /= static_cast<double>(h * w);
      for (int64_t p = 0; p < h * w; ++p) {
        const int64_t i = (s * h * w + p) * c + ch;
        const double dx = x.data<float>()[i] - mean;
        if (std::abs(dx) < 1.0) continue;
        const double fi = (y.data<float>()[i] - mean) / dx;
        if (f < 0.0) f = fi;
        ASSERT_NEAR(fi, f, 1e-4) << "image " << s << ": one factor for all its pixels and channels";
      }
    }
    lo = std::min(lo, f), hi = std::max(hi, f);
  }
  EXPECT_GE(lo, 0.8 - 1e-5);
  EXPECT_LE(hi, 1.5 + 1e-5);
  EXPECT_LT(lo, 0.85);  // 300 draws cover the range
  EXPECT_GT(hi, 1.45);
  // Clipped to value_range; Keras' single factor f draws in [1, 1 + f].
  LayerPtr clipped = layers::RandomContrast(1.0f, {.value_range = {100.0f, 110.0f}, .seed = 82});
  (*clipped)(Input({h, w, c}));
  const Tensor z = run_layer(clipped, x, true, 1);
  for (int64_t i = 0; i < z.numel(); ++i) {
    ASSERT_GE(z.data<float>()[i], 100.0f);
    ASSERT_LE(z.data<float>()[i], 110.0f);
  }
  const Tensor same = run_layer(layer, x, false);
  for (int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(same.data<float>()[i], x.data<float>()[i]);
}

// Its gradient reverses dy: a model with a trainable layer before the flip trains (the rule is in the op harness).
TEST(NoiseLayers, AugmentationTrainsBehindATrainableLayer) {
  utils::set_random_seed(5);
  KerasTensor in = Input({4, 4, 1});
  KerasTensor h = layers::Conv2D(2, 3, "relu", {.padding = "same"})(in);
  h = layers::RandomFlip("horizontal")(h);
  h = layers::GaussianNoise(0.1f)(h);
  h = layers::RandomContrast(0.2f, {.value_range = {-100.0f, 100.0f}})(h);
  h = layers::GaussianDropout(0.1f)(h);
  KerasTensor out = layers::Dense(1)(layers::Flatten()(h));
  Model model(in, out);
  model.compile(optimizers::Adam(), "mse");
  Tensor x = ramp(Shape{32, 4, 4, 1}, -3.0f), y = Tensor::zeros(Shape{32, 1});
  const std::vector<Tensor> before = model.get_weights();
  FitOptions o;
  o.epochs = 2;
  o.verbose = 0;
  const History hist = model.fit(x, y, o);
  EXPECT_TRUE(std::isfinite(hist.history.at("loss").back()));
  EXPECT_NE(model.get_weights()[0].data<float>()[0], before[0].data<float>()[0]);
}

TEST(NoiseLayers, KerasFileLoadsAndIsTheIdentityOutsideTraining) {
  const auto f = testing::load_keras_text(kDir + "augment_expect.txt");
  auto model = models::load_model(kDir + "augment.keras");
  const Tensor p = model->predict(f.at("x"));
  const Tensor& want = f.at("predict");
  for (int64_t i = 0; i < want.numel(); ++i) EXPECT_NEAR(p.data<float>()[i], want.data<float>()[i], 1e-5);
  EXPECT_NEAR(model->evaluate(f.at("x"), f.at("y")).get("loss"), f.at("evaluate/loss").data<float>()[0], 1e-5);
  // One epoch trains (noise and flips active) and the saved file is what Keras loaded back (gen_augment.py
  // --check-trainkit: keras_loaded_trainkit_augment.json): the same configs.
  FitOptions o;
  o.verbose = 0;
  model->fit(f.at("x"), f.at("y"), o);
  const fs::path path = fs::temp_directory_path() / ("tk_augment_" + std::to_string(::getpid()) + ".keras");
  model->save(path.string());
  if (const char* out = std::getenv("TK_KERAS_FIXTURE_OUT")) {  // regenerating: the file and its predictions
    fs::copy_file(path, fs::path(out) / "trainkit_augment.keras", fs::copy_options::overwrite_existing);
    const Tensor mine = model->predict(f.at("x"));
    std::ofstream t(std::string(out) + "/trainkit_augment_predict.txt");
    t << "# trainkit's predictions of trainkit_augment.keras (tests/test_noise_layers.cpp; gen_augment.py checks "
         "Keras')\n";
    t << "predict 5 3 :";
    t.precision(9);
    for (int64_t i = 0; i < mine.numel(); ++i) t << ' ' << mine.data<float>()[i];
    t << '\n';
  }
  const io::keras::Archive a = io::keras::read_archive(path.string(), false);
  const auto config = io::keras::parse_json(a.config, path.string()).at("config").at("layers");
  const auto keras = io::keras::parse_json(io::keras::read_archive(kDir + "augment.keras", false).config, "augment")
                         .at("config")
                         .at("layers");
  for (size_t i = 0; i < config.size(); ++i)
    for (const char* key : {"stddev", "rate", "mode", "factor", "value_range"})
      if (keras[i].at("config").contains(key))
        EXPECT_EQ(config[i].at("config").at(key), keras[i].at("config").at(key)) << i << " " << key;
  EXPECT_EQ(config[1].at("config").at("seed"), 5);  // Keras' seed kept
  fs::remove(path);
}

// The file trainkit saved after that epoch, as committed: trainkit still predicts what it did, and Keras 3 loaded it
// with the same predictions (gen_augment.py --check-trainkit wrote keras_loaded_trainkit_augment.json).
TEST(NoiseLayers, TheFileTrainkitSavedLoadsInKerasWithTheSamePredictions) {
  const auto f = testing::load_keras_text(kDir + "augment_expect.txt");
  const auto mine = testing::load_keras_text(kDir + "trainkit_augment_predict.txt");
  const Tensor p = models::load_model(kDir + "trainkit_augment.keras")->predict(f.at("x"));
  for (int64_t i = 0; i < p.numel(); ++i) EXPECT_NEAR(p.data<float>()[i], mine.at("predict").data<float>()[i], 1e-6);
  std::ifstream in(kDir + "keras_loaded_trainkit_augment.json");
  const auto verdict = io::keras::json::parse(in);
  EXPECT_LT(verdict.at("max_abs_predict_difference").get<double>(), 1e-5);
  EXPECT_EQ(verdict.at("layers").at(0).at("class_name"), "GaussianNoise");
}

TEST(NoiseLayers, BadValuesAreClearErrors) {
  EXPECT_THROW(layers::GaussianNoise(1.5f), InvalidArgument);  // Keras: stddev in [0, 1]
  EXPECT_THROW(layers::GaussianDropout(1.0f), InvalidArgument);
  EXPECT_THROW(layers::RandomFlip("diagonal"), InvalidArgument);
  EXPECT_THROW(layers::RandomContrast(1.5f), InvalidArgument);
  EXPECT_THROW(layers::RandomContrast(0.1f, {.value_range = {1.0f, 0.0f}}), InvalidArgument);
  LayerPtr flip = layers::RandomFlip();
  EXPECT_THROW((*flip)(Input({8, 3})), InvalidArgument);  // not a batch of images
}

}  // namespace
}  // namespace tk
