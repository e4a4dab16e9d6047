// Dropout's noise_shape (Keras 3 semantics: the mask's shape, None entries take the input's dimension, 1 shares a
// draw along the axis): EfficientNet's stochastic depth, Dropout(noise_shape=(None, 1, 1, 1)), drops whole samples.
// Its Keras-made config and the file Keras loads back are checked in the zoo (tests/test_keras_zoo.cpp,
// efficientnetb0); here the mask's structure, its rate, inference, the config round trip and bad shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "graph/program.h"
#include "io/keras_internal.h"
#include "nn/layers/context.h"
#include "trainkit/core/error.h"
#include "trainkit/nn/layers.h"
#include "trainkit/nn/model.h"
#include "trainkit/nn/optimizers.h"

namespace tk {
namespace {

// The layer's output on x in a training (or inference) program.
Tensor run_layer(const LayerPtr& layer, const Tensor& x, bool training) {
  graph::Graph g;
  nn::CallContext ctx{g, training, DType::f32, {}, {}, {}};
  Tensor xv = x.clone();
  const int y = layer->call(ctx, {g.variable("x", xv)});
  graph::Program p(std::move(g), {y}, {}, Device::cpu());
  p.run(graph::ExecContext{});
  return p.output(y);
}

Tensor ramp(const Shape& s) {
  Tensor x(s, DType::f32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = 1.0f + static_cast<float>(i % 7);
  return x;
}

// (None, 1, 1, 1): per sample, every element is 0 or x / (1 - rate); about rate of the samples dropped.
TEST(DropoutNoiseShape, StochasticDepthDropsWholeSamples) {
  LayerPtr layer = layers::Dropout(0.25f, {-1, 1, 1, 1}, 1234);
  (*layer)(Input({3, 4, 5}));
  const int64_t n = 400, per = 3 * 4 * 5;
  const Tensor x = ramp(Shape{n, 3, 4, 5});
  const Tensor out = run_layer(layer, x, true);
  int64_t dropped = 0;
  for (int64_t s = 0; s < n; ++s) {
    const bool zero = out.data<float>()[s * per] == 0.0f;
    dropped += zero;
    for (int64_t i = s * per; i < (s + 1) * per; ++i)
      ASSERT_EQ(out.data<float>()[i], zero ? 0.0f : x.data<float>()[i] * (1.0f / 0.75f))
          << "sample " << s << " element " << i;
  }
  // the kernel scales by 1 / (1 - rate), as Keras; 100 dropped expected, binomial sd ~8.7: 5 sd either side.
  EXPECT_GT(dropped, 56);
  EXPECT_LT(dropped, 144);
  const Tensor same = run_layer(layer, x, false);  // inference: the identity
  for (int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(same.data<float>()[i], x.data<float>()[i]);
}

// (None, 1, C) on (N, T, C): one draw per (sample, channel), shared along the steps.
TEST(DropoutNoiseShape, SharedAlongTheAxesOfSizeOne) {
  LayerPtr layer = layers::Dropout(0.5f, {-1, 1, 6}, 77);
  (*layer)(Input({5, 6}));
  const Tensor x = ramp(Shape{40, 5, 6});
  const Tensor out = run_layer(layer, x, true);
  int64_t dropped = 0;
  for (int64_t s = 0; s < 40; ++s)
    for (int64_t c = 0; c < 6; ++c) {
      const bool zero = out.data<float>()[s * 30 + c] == 0.0f;
      dropped += zero;
      for (int64_t t = 0; t < 5; ++t) {
        const int64_t i = (s * 5 + t) * 6 + c;
        ASSERT_EQ(out.data<float>()[i], zero ? 0.0f : 2.0f * x.data<float>()[i]) << s << " " << t << " " << c;
      }
    }
  EXPECT_GT(dropped, 80);  // 120 expected, sd ~7.7
  EXPECT_LT(dropped, 160);
}

// A model with stochastic depth trains: the mask's gradient path (a broadcast multiply) is differentiable in x.
TEST(DropoutNoiseShape, TrainsInAModel) {
  KerasTensor in = Input({2, 2, 3});
  KerasTensor h = layers::Conv2D(4, 1)(in);
  h = layers::Dropout(0.5f, {-1, 1, 1, 1}, 5)(h);
  h = layers::Flatten()(h);
  Model model(in, layers::Dense(2)(h));
  model.compile(optimizers::SGD({.learning_rate = 0.1f}), "mse");
  const Tensor x = ramp(Shape{8, 2, 2, 3});
  Tensor y(Shape{8, 2}, DType::f32);
  for (int64_t i = 0; i < y.numel(); ++i) y.data<float>()[i] = 0.5f;
  const std::vector<Tensor> before = model.get_weights();
  History hist = model.fit(x, y, {.batch_size = 8, .epochs = 1, .verbose = 0, .shuffle = false});
  EXPECT_TRUE(std::isfinite(hist.history.at("loss")[0]));
  EXPECT_NE(model.get_weights()[0].data<float>()[0], before[0].data<float>()[0]) << "the conv kernel did not move";
}

// Keras writes noise_shape as a list with nulls; trainkit reads it and writes the same list back.
TEST(DropoutNoiseShape, KerasConfigRoundTrip) {
  const io::keras::json drop = io::keras::json::parse(R"({"module": "keras.layers", "class_name": "Dropout",
    "config": {"name": "block2b_drop", "trainable": true, "dtype": {"module": "keras", "class_name": "DTypePolicy",
    "config": {"name": "float32"}, "registered_name": null}, "rate": 0.025, "seed": null,
    "noise_shape": [null, 1, 1, 1]}, "registered_name": null})");
  const LayerPtr layer = io::keras::layer_from_json(drop, "m.keras");
  const io::keras::json back = io::keras::layer_to_json(*layer);
  EXPECT_EQ(back.at("config").at("noise_shape"), drop.at("config").at("noise_shape"));
  EXPECT_EQ(back.at("config").at("rate"), drop.at("config").at("rate"));
  // Without noise_shape, nothing is written (Keras' default None).
  io::keras::json plain = drop;
  plain["config"]["noise_shape"] = nullptr;
  EXPECT_FALSE(
      io::keras::layer_to_json(*io::keras::layer_from_json(plain, "m.keras")).at("config").contains("noise_shape"));
  io::keras::json bad = drop;
  bad["config"]["noise_shape"] = "wide";
  EXPECT_THROW(io::keras::layer_from_json(bad, "m.keras"), FormatError);
  bad["config"]["noise_shape"] = io::keras::json::array({nullptr, 0});
  EXPECT_THROW(io::keras::layer_from_json(bad, "m.keras"), Unsupported);
}

// A noise_shape that does not broadcast to the input is refused when the layer is built, naming both shapes.
TEST(DropoutNoiseShape, RefusesShapesThatDoNotBroadcast) {
  auto what = [](std::vector<int64_t> noise, const std::vector<int64_t>& sample) {
    try {
      (*layers::Dropout(0.1f, std::move(noise), 1, "drop"))(Input(Shape(sample)));
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string rank = what({-1, 1}, {4, 4, 3});
  EXPECT_NE(rank.find("'drop'"), std::string::npos) << rank;
  EXPECT_NE(rank.find("(None, 4, 4, 3)"), std::string::npos) << rank;
  EXPECT_NE(what({-1, 2, 1, 1}, {4, 4, 3}).find("does not broadcast"), std::string::npos);
  EXPECT_NE(what({8, 1, 1, 1}, {4, 4, 3}).find("None or 1 for the batch"), std::string::npos);
  EXPECT_EQ(what({1, 4, 1, 3}, {4, 4, 3}), "no error");
}

}  // namespace
}  // namespace tk
